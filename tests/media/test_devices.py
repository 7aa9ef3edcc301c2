"""The GPU path in code: the d-vector embedding model makes every tensor on its input's device.

On a CPU host a CPU tensor made without ``device=`` works by accident and only fails on CUDA
("indices should be on the same device"), so the CPU tests record every tensor factory call
inside ``forward`` (a ``TorchFunctionMode``) and require an explicit device equal to the
input's. The ``gpu``-marked tests run the same code on CUDA and skip without a CUDA device."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from pipeline.media.dvector import DVectorEmbedding

FACTORIES = {"arange", "tensor", "as_tensor", "full", "zeros", "ones", "empty", "linspace", "randn", "rand"}
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


class FactoryCalls(TorchFunctionMode):
    """Records (factory name, device argument) for every tensor factory called inside."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, object]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in FACTORIES:
            self.calls.append((name, kwargs.get("device")))
        return func(*args, **kwargs)


def speech_like(batch: int = 3, seconds: float = 2.0, seed: int = 0) -> torch.Tensor:
    """A few seconds of harmonic tones with noise (enough active frames for a voice print)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    waves = [0.2 * np.sin(2 * np.pi * (120 + 40 * b) * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
             + 0.01 * rng.standard_normal(len(t)) for b in range(batch)]
    return torch.tensor(np.stack(waves)[:, None, :], dtype=torch.float32)


@pytest.fixture(scope="module")
def model() -> DVectorEmbedding:
    torch.manual_seed(0)
    return DVectorEmbedding().eval()


def test_every_tensor_made_in_forward_names_the_input_device(model):
    waves = speech_like()
    weights = torch.ones(3, 293)
    weights[1] = 0.0           # a silent speaker: NaN print
    weights[2, :150] = 0.0     # half active: the frame-index path
    with torch.inference_mode(), FactoryCalls() as recorded:
        out = model(waves, weights=weights)
        out_plain = model(waves)
    assert recorded.calls, "forward made no tensors: the check saw nothing"
    wrong = [(name, device) for name, device in recorded.calls if device is None or torch.device(device) != waves.device]
    assert not wrong, f"tensors made without the input's device (a CUDA run mixes devices): {wrong}"
    assert out.device == waves.device and out.shape == (3, model.dimension)
    assert torch.isnan(out[1]).all() and not torch.isnan(out[0]).any() and not torch.isnan(out[2]).any()
    assert not torch.isnan(out_plain).any()


@pytest.mark.gpu
@needs_cuda
def test_cuda_forward_matches_cpu(model):
    waves, weights = speech_like(), torch.ones(3, 293)
    weights[2, :150] = 0.0
    with torch.inference_mode():
        cpu = model(waves, weights=weights)
        cuda_model = DVectorEmbedding().eval()
        cuda_model.load_state_dict(model.state_dict())
        cuda_model.to("cuda")
        gpu = cuda_model(waves.cuda(), weights=weights.cuda())
    assert gpu.device.type == "cuda"
    assert torch.allclose(gpu.cpu(), cpu, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.slow
@needs_cuda
def test_offline_pipeline_on_cuda_diarizes_the_pyannote_sample(models_dir):
    """The whole offline default on CUDA (pyannote + refinement): same target as on CPU."""
    from pathlib import Path

    import pyannote.audio

    from pipeline.media import diarize, rttm
    from pipeline.media.models import OFFLINE_DIARIZATION
    sample = Path(pyannote.audio.__file__).parent / "sample"
    pipeline = diarize.load_pipeline(models_dir / OFFLINE_DIARIZATION, device="cuda")
    assert next(pipeline._embedding.model_.parameters()).device.type == "cuda"
    turns = diarize.diarize_audio(sample / "sample.wav", num_speakers=2, pipeline=pipeline)
    score = rttm.der(rttm.read_rttm(sample / "sample.rttm"), turns)
    print(f"DER pyannote sample on CUDA: {score:.3f}")
    assert score <= 0.25


def test_one_spectrogram_per_chunk_and_the_same_prints(model, monkeypatch):
    """pyannote passes each chunk once per local speaker: the spectrogram is made once per run of
    equal rows, and every row's print is what it would be on its own."""
    waves = speech_like(2, seconds=5.0)
    batch = torch.cat([waves[:1], waves[:1], waves[1:]])  # chunk 0 for two speakers, then chunk 1
    weights = torch.zeros(3, 293)
    weights[0, :180], weights[1, 120:], weights[2] = 1.0, 1.0, 1.0
    made = []
    original = DVectorEmbedding._mels
    monkeypatch.setattr(DVectorEmbedding, "_mels", lambda self, w: made.append(1) or original(self, w))
    with torch.inference_mode():
        together = model(batch, weights=weights)
        alone = torch.cat([model(batch[i:i + 1], weights=weights[i:i + 1]) for i in range(3)])
    assert len(made) == 2 + 3  # two distinct chunks in the batch, then one per single call
    assert not torch.isnan(together).any()
    assert torch.allclose(together, alone, atol=1e-5)
    assert not torch.allclose(together[0], together[1], atol=1e-3)  # different speakers' frames


def sincnet_chunks(hop: int = 8000, count: int = 6) -> torch.Tensor:
    """Consecutive 5-s windows ``hop`` samples apart over speech-like audio (pyannote's unfold)."""
    audio = speech_like(1, seconds=5 + count * hop / 16000 + 1)[0]
    return audio.unfold(1, 80000, hop).permute(1, 0, 2)[:count]


@pytest.fixture(scope="module")
def segmentation(models_dir):
    from pyannote.audio import Model
    from pipeline.media.models import OFFLINE_DIARIZATION
    return Model.from_pretrained(models_dir / OFFLINE_DIARIZATION / "segmentation" / "pytorch_model.bin").eval()


def test_shared_first_convolution_makes_every_tensor_on_the_input_device(segmentation):
    from types import SimpleNamespace

    from pipeline.media.speedups import _SharedFirstConvolution, share_first_convolution
    holder = SimpleNamespace(_segmentation=SimpleNamespace(model=segmentation, step=0.5))
    share_first_convolution(holder)
    assert isinstance(segmentation.sincnet, _SharedFirstConvolution) and segmentation.sincnet.hop == 8000
    chunks = sincnet_chunks()
    with torch.inference_mode(), FactoryCalls() as recorded:
        assert segmentation.sincnet._shared_first_block(chunks) is not None  # the shared path ran
        segmentation(chunks)
    wrong = [(name, device) for name, device in recorded.calls if device is None or torch.device(device) != chunks.device]
    assert not wrong, f"tensors made without the input's device: {wrong}"


@pytest.mark.parametrize("hop", [8000, 16000, 4800, 3000])  # frames apart: 800, 1600, 480, 300
def test_shared_first_block_is_pyannotes_pooled_first_layer(segmentation, hop):
    """The first convolution, abs and max-pooling from one convolution over the span equal
    pyannote's per-chunk ones, whichever pooling alignment each chunk has (800 frames apart: the
    three alignments in turn; 1600: two; 480 and 300: one), and a negative normalisation
    weight (|a*c + d| largest at the window's smallest c) changes nothing."""
    import copy
    from types import SimpleNamespace

    from pipeline.media.speedups import share_first_convolution
    model = copy.deepcopy(segmentation)
    share_first_convolution(SimpleNamespace(_segmentation=SimpleNamespace(model=model, step=hop / 16000)))
    sincnet = model.sincnet
    assert sincnet.hop == hop
    chunks = sincnet_chunks(hop, count=7)
    for sign in (1, -1):
        with torch.inference_mode():
            sincnet.wav_norm1d.weight.copy_(sign * segmentation.sincnet.wav_norm1d.weight.abs())
            shared = sincnet._shared_first_block(chunks)
            plain = sincnet.pool1d[0](sincnet.conv1d[0](sincnet.wav_norm1d(chunks)).abs())
        assert shared is not None and shared.shape == plain.shape
        assert float((shared - plain).abs().max()) <= 1e-5 * float(plain.abs().max())


@pytest.mark.gpu
@needs_cuda
def test_shared_first_convolution_on_cuda_matches_cpu(segmentation):
    import copy
    from types import SimpleNamespace

    from pipeline.media.speedups import share_first_convolution
    chunks = sincnet_chunks()
    with torch.inference_mode():
        cpu = segmentation(chunks)
        cuda_model = copy.deepcopy(segmentation).to("cuda")
        share_first_convolution(SimpleNamespace(_segmentation=SimpleNamespace(model=cuda_model, step=0.5)))
        assert cuda_model.sincnet._shared_first_block(chunks.cuda()) is not None
        gpu = cuda_model(chunks.cuda())
    assert torch.allclose(gpu.cpu(), cpu, atol=1e-3)
