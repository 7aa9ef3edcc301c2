"""One settings object for the whole pipeline.

Every value has a default that works on a fresh machine and can be overridden from the
environment (``RESCUE_*``) or a CLI flag. Secrets (tokens, passwords) are read from the
environment only and are never part of ``repr`` or logs.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMAS_DIR = REPO_ROOT / "annotation_schemas"


def _env_path(name: str, default: Path) -> Path:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else default


def _env_seconds(name: str, default: float) -> float:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a number of seconds") from None
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise ValueError(f"{name}={value!r}: a time limit must be a positive number of seconds")
    return seconds


def _env_step(name: str) -> float | None:
    value = os.environ.get(name)
    if not value:
        return None
    try:
        step = float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a number (a share of the segmentation window, e.g. 0.2)") from None
    if not 0 < step <= 1:
        raise ValueError(f"{name}={value!r}: the segmentation step is a share of the window, above 0 and at most 1")
    return step


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={value!r}: use 1 or 0 (true/false, yes/no, on/off)")


class DataRootError(ValueError):
    """A data root that cannot be used (a file, not writable); the message names it."""


def check_data_root(root: str | os.PathLike) -> Path:
    """The data root must be a folder this user can write (created if missing); else
    :class:`DataRootError` naming it and what is wrong. Every stage entry calls it first."""
    path = Path(root).expanduser().absolute()
    if path.exists() and not path.is_dir():
        raise DataRootError(f"data root {path} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataRootError(f"data root {path} cannot be created ({exc.strerror or exc})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise DataRootError(f"data root {path} is not writable by this user")
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise DataRootError(f"data root {path} is not writable ({exc.strerror or exc})") from None
    return path


@dataclass(frozen=True)
class Secret:
    """A value that never prints itself."""

    value: str = field(repr=False)

    def __repr__(self) -> str:  # pragma: no cover - trivial
        return "Secret(****)" if self.value else "Secret(<unset>)"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self.value)


@dataclass(frozen=True)
class Settings:
    data_root: Path
    models_dir: Path
    label_studio_port: int  # the single shared Label Studio of data roots made before desks (migration only)
    # Desks (pipeline.labelstudio.desks): ports from desk_base_port up; how the pipeline reaches a
    # desk and what its person opens, as templates with {port} and {slug}.
    desk_base_port: int = 8081
    desk_url: str = "http://127.0.0.1:{port}"
    desk_public_url: str = ""
    desk_host: str = "127.0.0.1"  # where desks listen (0.0.0.0 only in a container published on 127.0.0.1)
    # Context sizes of the six task builders (README defaults of the paper's scripts).
    itp_context: int = 3
    rpp_context: int = -1
    stp_context: int = 3
    ssp_context: int = 3
    er_context: int = 3
    vp_context: int = 3
    # Every ffprobe / ffmpeg call has a time limit; a file that runs past it is quarantined ("timeout").
    ffprobe_timeout_s: float = 60.0
    ffmpeg_timeout_s: float = 3600.0
    # pyannote's segmentation_step (a share of the 5-s window) for diarization; None: the pipeline's
    # own (0.1). Larger is faster (0.2 about halves segmentation and embeddings) but can cost DER
    # (pipeline.media.speedups.set_segmentation_step).
    diarization_step: float | None = None
    # The d-vector embedding's 1.6-s partials embedded once per file instead of once per
    # overlapping 10-s window (pipeline.media.speedups.share_partials): about a third less time
    # per audio hour, DER no worse on every measured file. 0 restores pyannote's per-window prints.
    diarization_shared_partials: bool = True
    # The d-vector's LSTM in bfloat16 where the CPU computes it natively (AVX512_BF16 or AMX): the
    # embeddings 1.8x faster, voice prints within about 1e-3, DER unchanged on the held-out files
    # (pipeline.media.speedups.bfloat16_dvectors). 0: float32 everywhere.
    diarization_bfloat16: bool = True

    @classmethod
    def from_env(cls, data_root: str | Path | None = None) -> "Settings":
        root = Path(data_root) if data_root else _env_path("RESCUE_DATA_ROOT", Path("data"))
        port = int(os.environ.get("RESCUE_LABEL_STUDIO_PORT", "8080"))
        return cls(
            data_root=root,
            models_dir=_env_path("RESCUE_MODELS_DIR", REPO_ROOT / "models"),
            label_studio_port=port,
            desk_base_port=int(os.environ.get("RESCUE_DESK_BASE_PORT", "8081")),
            desk_url=os.environ.get("RESCUE_DESK_URL") or "http://127.0.0.1:{port}",
            desk_public_url=os.environ.get("RESCUE_DESK_PUBLIC_URL", ""),
            desk_host=os.environ.get("RESCUE_DESK_HOST") or "127.0.0.1",
            ffprobe_timeout_s=_env_seconds("RESCUE_FFPROBE_TIMEOUT_S", 60.0),
            ffmpeg_timeout_s=_env_seconds("RESCUE_FFMPEG_TIMEOUT_S", 3600.0),
            diarization_step=_env_step("RESCUE_DIARIZATION_STEP"),
            diarization_shared_partials=_env_flag("RESCUE_DIARIZATION_SHARED_PARTIALS", True),
            diarization_bfloat16=_env_flag("RESCUE_DIARIZATION_BFLOAT16", True),
        )

    def describe(self) -> dict[str, str]:
        """Printable view (secrets masked)."""
        return {f.name: repr(getattr(self, f.name)) if isinstance(getattr(self, f.name), Secret)
                else str(getattr(self, f.name)) for f in fields(self)}
