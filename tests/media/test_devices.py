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

from pipeline.media.models import DVectorEmbedding

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
