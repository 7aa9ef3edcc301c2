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
# --durations: the slowest tests in every run (CI keeps the suite well under 30 minutes)
exec .venv/bin/python -m pytest -q --durations=25 "${args[@]}"
