"""One settings object for the whole pipeline.

Every value has a default that works on a fresh machine and can be overridden from the
environment (``RESCUE_*``) or a CLI flag. Secrets (tokens, passwords) are read from the
environment only and are never part of ``repr`` or logs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMAS_DIR = REPO_ROOT / "annotation_schemas"


def _env_path(name: str, default: Path) -> Path:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else default


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
    label_studio_url: str
    label_studio_token: Secret
    label_studio_port: int
    # Context sizes of the six task builders (README defaults of the paper's scripts).
    itp_context: int = 3
    rpp_context: int = -1
    stp_context: int = 3
    ssp_context: int = 3
    er_context: int = 3
    vp_context: int = 3

    @classmethod
    def from_env(cls, data_root: str | Path | None = None) -> "Settings":
        root = Path(data_root) if data_root else _env_path("RESCUE_DATA_ROOT", Path("data"))
        port = int(os.environ.get("RESCUE_LABEL_STUDIO_PORT", "8080"))
        return cls(
            data_root=root,
            models_dir=_env_path("RESCUE_MODELS_DIR", REPO_ROOT / "models"),
            label_studio_url=os.environ.get("RESCUE_LABEL_STUDIO_URL", f"http://127.0.0.1:{port}"),
            label_studio_token=Secret(os.environ.get("LABEL_STUDIO_USER_TOKEN", "")),
            label_studio_port=port,
        )

    def describe(self) -> dict[str, str]:
        """Printable view (secrets masked)."""
        return {f.name: repr(getattr(self, f.name)) if isinstance(getattr(self, f.name), Secret)
                else str(getattr(self, f.name)) for f in fields(self)}
