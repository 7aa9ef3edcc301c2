#!/usr/bin/env bash
# Set up (idempotent) and run the demo: synthetic interviews -> ingest -> simulated annotation
# rounds in a real Label Studio -> agreement -> gold -> a versioned release.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/rescue demo "$@"
