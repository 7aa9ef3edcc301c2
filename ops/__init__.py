"""Operational code outside the library: the local stack and the demo."""
