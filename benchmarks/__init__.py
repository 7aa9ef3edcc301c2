"""The benchmark scripts (``bench_*.py``, each run by its path: benchmarks/README.md) and the
packages a long one is cut into (``rehearsal/``), importable from the repository root as the
tests import them."""
