#!/usr/bin/env bash
# Two template Prefect server databases, which `rescue stack up` copies into a new data root:
# - .venv/prefect-template/prefect.db: migrated and empty, stamped with the Prefect version (the
#   server's migrations on a first start take ~11 s on an idle 2-core machine, more when busy);
# - .venv/prefect-template/registered.db: the same with the stack's pools, limits, automation and
#   deployments registered, stamped with the fingerprint of the code they come from (a new stack
#   then skips ~7 CPU s of registering); made again whenever that code changed.
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
# PREFECT_API_DATABASE_CONNECTION_URL set: the operator's own database, never seeded.
if [ -z "${PREFECT_API_DATABASE_CONNECTION_URL:-}" ]; then
  .venv/bin/python -c "from ops.stack import make_registered_template; make_registered_template()" \
    || echo "setup: WARNING no registered template Prefect database (each new stack registers itself)"
fi
