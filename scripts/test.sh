#!/usr/bin/env bash
# Set up (idempotent) and run the test suite. CI runs exactly this, with no arguments (.ci/run):
# every test.
#   --fast  only the tests not marked slow (-m "not slow": no Label Studio, desks, browser,
#           Prefect stack or models), in under 5 minutes on a 2-core machine
# Other arguments go to pytest as they are (a path, -k, -x, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
args=()
for arg in "$@"; do
  if [ "$arg" = --fast ]; then args+=(-m "not slow"); else args+=("$arg"); fi
done
# -n 2 --dist loadfile: two pytest processes, each taking a whole test file at a time (a file's
# module fixtures are set up once), in the order tests/conftest.py gives (the longest file first:
# --no-loadscope-reorder); most tests wait on servers and browsers, so two share 2 cores well (the
# suite: about 24 min in two on a quiet 2-core machine).
# RESCUE_TEST_PROCESSES=0: one process.
# --durations: the slowest tests in every run (a run's time follows the machine it runs on)
exec .venv/bin/python -m pytest -q -n "${RESCUE_TEST_PROCESSES:-2}" --dist loadfile --no-loadscope-reorder --durations=25 "${args[@]}"
