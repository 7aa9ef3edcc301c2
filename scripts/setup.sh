#!/usr/bin/env bash
# Idempotent set-up of a fresh Debian machine (or re-run on a set-up one: seconds).
# System packages, the pipeline's virtual environment at .venv/, then every
# scripts/setup.d/*.sh step in order (test models, the Prefect templates, ...); the Label Studio
# server's venv (30-label-studio.sh) is made beside them, in the background.
# GPU hosts: see README "GPU host" - the CUDA build of torch comes from a normal `pip install whisperx`.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(ffmpeg espeak-ng sox chromium openssh-server openssh-client)  # openssh: tests/ops (restricted desk tunnels)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing system packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v uv >/dev/null 2>&1 || python3 -m pip install -q uv

# The CPU torch wheel lies in /opt/wheels on these machines; uv does not read pip's config.
FIND_LINKS=()
[ -d /opt/wheels ] && FIND_LINKS=(--find-links /opt/wheels)

# Label Studio's own environment needs neither .venv nor the steps before it: it installs and
# migrates in the background while .venv is built, instead of after it (a fresh set-up here: 45 s less).
LS_STEP=scripts/setup.d/30-label-studio.sh
LS_LOG="$(mktemp)"
bash "$LS_STEP" >"$LS_LOG" 2>&1 &
ls_pid=$!
trap 'kill "$ls_pid" 2>/dev/null || true; rm -f "$LS_LOG"' EXIT

stamp=.venv/.rescue-setup
BYTECODE=v1  # bump to rebuild: the stamp also covers how the venv is built
want="$( (cat pyproject.toml scripts/overrides.txt; echo "bytecode $BYTECODE") | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: building .venv (python 3.11)"
  [ -x .venv/bin/python ] || uv venv -q -p 3.11 .venv
  uv pip install -q -p .venv/bin/python "${FIND_LINKS[@]}" --override scripts/overrides.txt -e '.[test]'
  # torchaudio's compiled part only loads beside a CUDA torch; whisperx and pyannote use its Python part.
  rm -f .venv/lib/python3.11/site-packages/torchaudio/lib/_torchaudio.so
  # Precompiled bytecode: with PYTHONDONTWRITEBYTECODE=1 (set on these machines) every new
  # process would otherwise recompile torch/transformers/prefect from source, ~20 s each
  # (each Prefect flow run, each CLI call in the tests).
  echo "setup: compiling .venv bytecode"
  .venv/bin/python -m compileall -q -j 0 .venv/lib/python3.11/site-packages >/dev/null || true
  echo "$want" > "$stamp"
fi

for step in scripts/setup.d/*.sh; do
  [ -e "$step" ] && [ "$step" != "$LS_STEP" ] || continue
  bash "$step"
done
ls_rc=0; wait "$ls_pid" || ls_rc=$?
cat "$LS_LOG"
[ "$ls_rc" = 0 ] || { echo "setup: $LS_STEP failed (exit $ls_rc)" >&2; exit "$ls_rc"; }
