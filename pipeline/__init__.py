"""rescue-pipeline: rebuild the RESCUE benchmark from therapy-interview videos.

Importing the package switches every component's telemetry off and keeps model hubs
offline unless the operator set these variables explicitly: the data is private interviews.
"""
import os
import tempfile

__version__ = "0.1.0"

_PRIVACY_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "PYANNOTE_METRICS_ENABLED": "0",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "LATEST_VERSION_CHECK": "false",
    "COLLECT_ANALYTICS": "false",
    "TOKENIZERS_PARALLELISM": "false",
    # onnxruntime (silero VAD, pyannote's ONNX parts): its 1DS telemetry writes a device id and an
    # event queue under ~/.cache/Microsoft/DeveloperTools/ at import; only "true" switches it off
    "ORT_DISABLE_TELEMETRY": "true",
}
for _key, _value in _PRIVACY_DEFAULTS.items():
    os.environ.setdefault(_key, _value)
# Nothing in the user's home: matplotlib (imported by pyannote) would keep its font cache and
# config in ~/.cache/matplotlib and ~/.config/matplotlib; it goes to a folder under the temp dir.
os.environ.setdefault("MPLCONFIGDIR", os.path.join(tempfile.gettempdir(), f"rescue-matplotlib-{os.getuid()}"))
