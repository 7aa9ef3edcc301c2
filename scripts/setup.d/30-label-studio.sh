#!/usr/bin/env bash
# The Label Studio server in its OWN virtual environment (.label-studio/venv, git-ignored):
# label-studio pins python-json-logger/pyarrow versions that clash with the pipeline's .venv
# (see shared notes LABEL_STUDIO.md). Fast no-op when the pinned version is already there.
# The browser tests use Debian's chromium (scripts/setup.sh) through the `playwright` Python
# package already in .venv: no browser download.
set -euo pipefail
cd "$(dirname "$0")/../.."

LS_VERSION="1.23.2"
VENV=".label-studio/venv"
stamp="$VENV/.rescue-label-studio"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$LS_VERSION" ] && [ -x "$VENV/bin/label-studio" ]; then
  exit 0
fi
echo "setup: installing label-studio==$LS_VERSION into $VENV (about a minute)"
[ -x "$VENV/bin/python" ] || uv venv -q -p 3.11 "$VENV"
uv pip install -q -p "$VENV/bin/python" "label-studio==$LS_VERSION"
echo "$LS_VERSION" > "$stamp"
