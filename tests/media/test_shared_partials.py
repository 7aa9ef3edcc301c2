"""``speedups.share_partials`` (on in the offline default) embeds each d-vector partial once per file
instead of once per overlapping 10-s window: prints close to the per-window ones, about half the
LSTM work, DER no worse on pyannote's real sample, every tensor on the input's device;
``RESCUE_DIARIZATION_SHARED_PARTIALS=0`` turns it off."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.media.dvector import DVectorEmbedding
from pipeline.media.speedups import SHARED_PARTIAL_HOP
from test_devices import FactoryCalls, speech_like  # same folder: the device check's helpers


@pytest.fixture
def shared(diar_pipeline):
    """The session's default pipeline: it embeds shared partials."""
    assert getattr(diar_pipeline, "partial_hop", 0) == SHARED_PARTIAL_HOP
    try:
        yield diar_pipeline
    finally:
        diar_pipeline.partial_hop = SHARED_PARTIAL_HOP  # whatever a test switched


def test_the_setting_turns_shared_partials_off_and_refuses_nonsense(monkeypatch, models_dir):
    from pipeline.config import Settings
    from pipeline.media import diarize
    from pipeline.media.models import OFFLINE_DIARIZATION
    monkeypatch.setenv("RESCUE_DIARIZATION_SHARED_PARTIALS", "0")
    settings = Settings.from_env()
    assert settings.diarization_shared_partials is False
    plain = diarize.load_pipeline(models_dir / OFFLINE_DIARIZATION, settings=settings)
    assert getattr(plain, "partial_hop", 0) == 0  # pyannote's own get_embeddings
    monkeypatch.setenv("RESCUE_DIARIZATION_SHARED_PARTIALS", "maybe")
    with pytest.raises(ValueError, match="RESCUE_DIARIZATION_SHARED_PARTIALS"):
        Settings.from_env()


def embeddings_both_ways(pipeline, wav: Path):
    """(shared, per-window) prints of one file from the same segmentation, and the partials the
    LSTM ran for each."""
    from pyannote.audio.utils.signal import binarize
    from pipeline.media.audio import load_wav
    file = {"waveform": torch.from_numpy(load_wav(wav)[None]), "sample_rate": 16000, "uri": wav.stem}
    segmentation = binarize(pipeline.get_segmentations(file), onset=pipeline.segmentation.threshold,
                            initial_state=False)
    model, rows = pipeline._embedding.model_, []
    lstm = model.__dict__.get("lstm_bfloat16", model.lstm)  # the one that runs (speedups.bfloat16_dvectors)
    plain_lstm = lstm.forward
    lstm.forward = lambda x: rows.append(x.shape[0]) or plain_lstm(x)
    hop = pipeline.partial_hop
    try:
        shared = pipeline.get_embeddings(file, segmentation)
        shared_rows, rows[:] = sum(rows), []
        pipeline.partial_hop = 0  # pyannote's own get_embeddings: one model call per batch of windows
        plain = pipeline.get_embeddings(file, segmentation)
    finally:
        pipeline.partial_hop = hop
        del lstm.forward
    return shared, plain, shared_rows, sum(rows)


@pytest.mark.slow
def test_shared_partials_give_the_per_window_prints_for_about_half_the_work(shared, couple):
    assert shared.partial_hop == SHARED_PARTIAL_HOP
    prints, plain, shared_rows, plain_rows = embeddings_both_ways(shared, couple["wav16"])
    assert prints.shape == plain.shape
    silent = np.isnan(plain[..., 0])
    assert silent.any() and (np.isnan(prints[..., 0]) == silent).all()  # NaN for the same silent speakers
    cosine = (prints[~silent] * plain[~silent]).sum(-1)
    print(f"cosine shared/per-window: mean {cosine.mean():.3f}, 5 % {np.percentile(cosine, 5):.3f}; "
          f"LSTM partials {shared_rows} / {plain_rows}")
    assert cosine.mean() > 0.95 and np.percentile(cosine, 5) > 0.85
    assert shared_rows < 0.6 * plain_rows  # 181 / 373 here


@pytest.mark.slow
def test_shared_partials_der_no_worse_on_the_pyannote_sample(shared):
    import pyannote.audio
    from pipeline.media import diarize, rttm
    sample = Path(pyannote.audio.__file__).parent / "sample"
    reference = rttm.read_rttm(sample / "sample.rttm")
    scores = {}
    for hop in (0, SHARED_PARTIAL_HOP):
        shared.partial_hop = hop
        scores[hop] = rttm.der(reference, diarize.diarize_audio(sample / "sample.wav", num_speakers=2, pipeline=shared))
    print(f"DER pyannote sample: per-window prints {scores[0]:.4f}, shared partials {scores[SHARED_PARTIAL_HOP]:.4f}")
    assert scores[SHARED_PARTIAL_HOP] <= scores[0]


def test_every_tensor_made_in_embed_chunks_names_the_input_device():
    torch.manual_seed(0)
    model = DVectorEmbedding().eval()
    wav = speech_like(1, seconds=14.0)[0, 0]  # 5 windows of 10 s, 1 s apart
    masks = torch.zeros(5, 589, 3)
    masks[:, :300, 0] = 1.0     # long speech: grid partials
    masks[:, 400:450, 1] = 1.0  # a short answer: the per-window recipe
    with torch.inference_mode(), FactoryCalls() as recorded:
        out = model.embed_chunks(wav, masks, start=0, step=100, chunk_samples=160000,
                                 hop=SHARED_PARTIAL_HOP, active=0.9)
    assert out.shape == (5, 3, model.dimension)
    assert not torch.isnan(out[:, :2]).any() and torch.isnan(out[:, 2]).all()  # speaker 2 silent: NaN
    wrong = [(name, device) for name, device in recorded.calls if device is None or torch.device(device) != wav.device]
    assert recorded.calls and not wrong, f"tensors made without the input's device: {wrong}"
