#!/usr/bin/env bash
# A migrated, empty Prefect server database (.venv/prefect-template/prefect.db, stamped with the
# Prefect version): `rescue stack up` copies it into a new data root instead of letting the
# server run its migrations on first start (~11 s on an idle 2-core machine, more when busy).
set -euo pipefail
cd "$(dirname "$0")/../.."

dir=".venv/prefect-template"
version="$(.venv/bin/python -c 'from importlib.metadata import version; print(version("prefect"))')"
if [ ! -f "$dir/prefect.db" ] || [ "$(cat "$dir/version" 2>/dev/null)" != "$version" ]; then
  echo "setup: migrating a template Prefect database"
  work="$(mktemp -d)"
  PREFECT_HOME="$work" PREFECT_API_DATABASE_CONNECTION_URL="sqlite+aiosqlite:///$work/prefect.db" \
    DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false \
    .venv/bin/prefect server database upgrade -y >/dev/null
  mkdir -p "$dir"
  cp "$work/prefect.db" "$dir/prefect.db.tmp" && mv "$dir/prefect.db.tmp" "$dir/prefect.db"
  echo "$version" > "$dir/version"
  rm -rf "$work"
fi
