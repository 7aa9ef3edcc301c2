"""Synthetic interviews and corpora, simulated annotators, test models: never real data."""
