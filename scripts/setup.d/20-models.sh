#!/usr/bin/env bash
# Offline models (idempotent; a no-op in well under a second when done):
#   - the offline pyannote diarization pipeline (segmentation from the whisperx wheel,
#     Resemblyzer's d-vector encoder from its PyPI wheel),
#   - tiny random-weight WhisperX (CTranslate2) + wav2vec2 alignment models for tests
#     (tokenizer from the openai-whisper sdist on PyPI),
#   - empty punkt_tab files so whisperx.align's NLTK sentence splitter works offline.
# Everything goes to $RESCUE_MODELS_DIR (default ./models).
set -euo pipefail
cd "$(dirname "$0")/../.."
MODELS="${RESCUE_MODELS_DIR:-$PWD/models}"
mkdir -p "$MODELS/downloads"

# A diarization directory of an older build (OFFLINE_BUILD, read from its one place: the builder)
# is rebuilt by prepare-offline below, e.g. to upgrade its Lightning checkpoint once.
build="build $(sed -n 's/^OFFLINE_BUILD = "\(.*\)"$/\1/p' pipeline/media/models.py)"
if [ "$(cat "$MODELS/diarization-offline/.complete" 2>/dev/null)" = "$build" ] && [ -f "$MODELS/tiny-whisper-ct2/.complete" ] \
   && [ -f "$MODELS/tiny-wav2vec2-align/.complete" ] \
   && [ -f "$MODELS/nltk_data/tokenizers/punkt_tab/english/ortho_context.tab" ]; then
  exit 0
fi

# Package files from PyPI (the package registry is reachable; model hubs are not).
PIP=(python3 -m pip)
"${PIP[@]}" --version >/dev/null 2>&1 || PIP=(pip3)
[ -f "$MODELS/downloads/Resemblyzer-0.1.4-py3-none-any.whl" ] || \
  "${PIP[@]}" download -q --no-deps -d "$MODELS/downloads" Resemblyzer==0.1.4
[ -f "$MODELS/downloads/openai_whisper-20250625.tar.gz" ] || \
  "${PIP[@]}" download -q --no-deps --no-binary :all: -d "$MODELS/downloads" openai-whisper==20250625

echo "setup: preparing offline models in $MODELS"
RESCUE_MODELS_DIR="$MODELS" .venv/bin/rescue models prepare-offline --models-dir "$MODELS"
