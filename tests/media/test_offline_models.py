"""The offline builder (``pipeline.media.models``): the segmentation checkpoint it writes is
upgraded to the installed Lightning once, so loading it upgrades nothing (and ``rescue diarize``
prints no "automatically upgraded" line); a directory of an older build is rebuilt."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lightning
import pytest
import torch

from pipeline.media.diarize import DiarizationError, load_pipeline
from pipeline.media.dvector import DVectorEmbedding
from pipeline.media.models import (MARKER, OFFLINE_BUILD, OFFLINE_DIARIZATION, RESEMBLYZER_WHEEL, is_complete,
                                   prepare_offline_diarization, whisperx_segmentation_checkpoint)

UPGRADED = "automatically upgraded your loaded checkpoint"


def _load_messages(checkpoint: Path) -> list[str]:
    """What Lightning logs while pyannote loads ``checkpoint`` (its logger does not propagate
    to the root once Lightning set it up, so the handler sits on Lightning's own logger)."""
    from pyannote.audio import Model
    seen: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("lightning.pytorch.utilities.migration.utils")
    logger.addHandler(handler)
    try:
        Model.from_pretrained(checkpoint)
    finally:
        logger.removeHandler(handler)
    return seen


def _checkpoint(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def test_the_prepared_segmentation_loads_without_an_upgrade_and_keeps_the_weights(models_dir):
    built = models_dir / OFFLINE_DIARIZATION
    assert is_complete(built, OFFLINE_BUILD)
    bundled = whisperx_segmentation_checkpoint()
    assert any(UPGRADED in m for m in _load_messages(bundled))  # the wheel's own copy: upgraded on each load
    assert not any(UPGRADED in m for m in _load_messages(built / "segmentation" / "pytorch_model.bin"))
    ours, theirs = _checkpoint(built / "segmentation" / "pytorch_model.bin"), _checkpoint(bundled)
    assert ours["pytorch-lightning_version"] == lightning.__version__
    assert theirs["pytorch-lightning_version"] != lightning.__version__
    assert ours["state_dict"].keys() == theirs["state_dict"].keys()
    assert all(torch.equal(ours["state_dict"][k], theirs["state_dict"][k]) for k in theirs["state_dict"])
    embedding = _checkpoint(built / "embedding" / "pytorch_model.bin")["pyannote.audio"]["architecture"]
    assert embedding == {"module": DVectorEmbedding.__module__, "class": "DVectorEmbedding"}


def test_a_directory_of_an_older_build_is_rebuilt(models_dir, tmp_path):
    old = tmp_path / OFFLINE_DIARIZATION
    (old / "segmentation").mkdir(parents=True)
    shutil.copyfile(whisperx_segmentation_checkpoint(), old / "segmentation" / "pytorch_model.bin")
    (old / MARKER).write_text("ok\n")  # what the first builder wrote
    assert is_complete(old) and not is_complete(old, OFFLINE_BUILD)
    with pytest.raises(DiarizationError, match=r"made by an older version \('ok'.*`rescue models prepare-offline`"):
        load_pipeline(old)  # named, before pyannote trips over a class that moved
    wheel = models_dir / "downloads" / RESEMBLYZER_WHEEL
    assert prepare_offline_diarization(tmp_path, wheel) == old
    assert is_complete(old, OFFLINE_BUILD) and (old / MARKER).read_text() == f"build {OFFLINE_BUILD}\n"
    assert _checkpoint(old / "segmentation" / "pytorch_model.bin")["pytorch-lightning_version"] == lightning.__version__
    stamp = (old / MARKER).stat().st_mtime_ns
    assert prepare_offline_diarization(tmp_path, wheel) == old and (old / MARKER).stat().st_mtime_ns == stamp  # reused


@pytest.mark.slow
def test_rescue_diarize_prints_no_lightning_upgrade(models_dir, tmp_path):
    import pyannote.audio
    wav = tmp_path / "sample.wav"
    shutil.copyfile(Path(pyannote.audio.__file__).parent / "sample" / "sample.wav", wav)
    rescue = Path(sys.executable).with_name("rescue")
    env = {**os.environ, "RESCUE_MODELS_DIR": str(models_dir), "RESCUE_DATA_ROOT": str(tmp_path / "data")}
    done = subprocess.run([str(rescue), "diarize", str(wav), "--num-speakers", "2"], capture_output=True, text=True,
                          env=env, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert (tmp_path / "sample.rttm").read_text().count("SPEAKER") > 2
    assert UPGRADED not in output and "upgrade_checkpoint" not in output, output[-3000:]
