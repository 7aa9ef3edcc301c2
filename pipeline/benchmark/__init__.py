"""The benchmark: the paper's format, the six task builders, releases."""
