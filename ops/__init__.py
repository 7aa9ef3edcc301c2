"""Operational code outside the library: the local stack (`stack`, on `prefect_setup`, `sweeper`
and `processes`), the demo, remote access to the desks and the console script."""
