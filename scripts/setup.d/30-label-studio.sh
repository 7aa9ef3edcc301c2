#!/usr/bin/env bash
# The Label Studio server in its OWN virtual environment (.label-studio/venv, git-ignored):
# label-studio pins python-json-logger/pyarrow versions that clash with the pipeline's .venv
# (see shared notes LABEL_STUDIO.md). Fast no-op when the pinned version is already there.
# The browser tests use Debian's chromium (scripts/setup.sh) through the `playwright` Python
# package already in .venv: no browser download.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"

# The one pin of the version is LS_VERSION in pipeline/labelstudio/server.py (desks check it at start).
LS_VERSION="$(sed -n 's/^LS_VERSION = "\([0-9.]*\)".*/\1/p' pipeline/labelstudio/server.py)"
[ -n "$LS_VERSION" ] || { echo "setup: no LS_VERSION in pipeline/labelstudio/server.py" >&2; exit 1; }
VENV=".label-studio/venv"
stamp="$VENV/.rescue-label-studio"

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$LS_VERSION" ] || [ ! -x "$VENV/bin/label-studio" ]; then
  echo "setup: installing label-studio==$LS_VERSION into $VENV (about a minute)"
  [ -x "$VENV/bin/python" ] || uv venv -q -p 3.11 "$VENV"
  uv pip install -q -p "$VENV/bin/python" "label-studio==$LS_VERSION"
  rm -rf .label-studio/template
  echo "$LS_VERSION" > "$stamp"
fi

# Precompiled bytecode (see scripts/setup.sh): the server starts a few seconds sooner.
if [ ! -f "$VENV/.bytecode-v1" ]; then
  "$VENV/bin/python" -m compileall -q -j 0 "$VENV/lib/python3.11/site-packages" >/dev/null || true
  touch "$VENV/.bytecode-v1"
fi

# A migrated, empty database: a new server copies it instead of running Label Studio's ~200
# migrations on its first start (35 s on an idle machine, minutes on a busy one). No users are
# in it; the admin is created from the environment on first start as usual.
TEMPLATE=".label-studio/template/label_studio.sqlite3"
if [ ! -f "$TEMPLATE" ]; then
  echo "setup: migrating a template Label Studio database (about a minute)"
  work="$(mktemp -d)"
  pkg="$("$VENV/bin/python" -c 'import label_studio, os; print(os.path.dirname(label_studio.__file__))')"
  (cd "$pkg" && env -u DEBUG -u HOST -u PORT -u USERNAME -u PASSWORD GIT_DIR=/nonexistent DJANGO_DB=sqlite \
     LABEL_STUDIO_BASE_DATA_DIR="$work" LATEST_VERSION_CHECK=false COLLECT_ANALYTICS=false SENTRY_DSN= \
     "$root/$VENV/bin/python" manage.py migrate --no-color -v 0 >/dev/null 2>&1)
  mkdir -p "$(dirname "$TEMPLATE")"
  cp "$work/label_studio.sqlite3" "$TEMPLATE.tmp" && mv "$TEMPLATE.tmp" "$TEMPLATE"
  rm -rf "$work"
fi

# Label Studio writes the enclosing git repository's latest commit (this checkout's) into
# version_.py when it can run `git describe`, and /api/version shows it to every login. Servers
# run with GIT_DIR pointing nowhere; a file written before that is removed.
rm -f "$VENV"/lib/python3.11/site-packages/label_studio/core/version_.py
