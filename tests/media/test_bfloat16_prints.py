"""``speedups.bfloat16_dvectors``: the d-vector's LSTM in bfloat16 where the CPU computes it
natively (on by default there; ``RESCUE_DIARIZATION_BFLOAT16=0`` turns it off): prints close to
float32's, the float32 weights untouched, DER unchanged on pyannote's sample, and the diarize
stage's cache key says which precision ran."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipeline.config import Settings
from pipeline.media import diarize
from pipeline.media.dvector import DVectorEmbedding
from pipeline.media.models import OFFLINE_DIARIZATION

needs_native = pytest.mark.skipif(not diarize.native_bfloat16(),
                                  reason="this CPU has no native bfloat16 (AVX512_BF16 or AMX): float32 runs")


def test_the_setting_the_device_and_the_cpu_decide(monkeypatch):
    monkeypatch.setenv("RESCUE_DIARIZATION_BFLOAT16", "0")
    assert diarize.bfloat16_voice_prints("cpu", Settings.from_env()) is False
    monkeypatch.setenv("RESCUE_DIARIZATION_BFLOAT16", "1")
    assert diarize.bfloat16_voice_prints("cpu", Settings.from_env()) is diarize.native_bfloat16()
    assert diarize.bfloat16_voice_prints("cuda", Settings.from_env()) is False  # a GPU runs its own precision
    monkeypatch.setenv("RESCUE_DIARIZATION_BFLOAT16", "maybe")
    with pytest.raises(ValueError, match="RESCUE_DIARIZATION_BFLOAT16"):
        Settings.from_env()


def test_only_the_kernels_bfloat16_flags_count(tmp_path):
    def cpu(flags: str) -> str:
        path = tmp_path / f"cpuinfo-{len(list(tmp_path.iterdir()))}"
        path.write_text(f"processor\t: 0\nmodel name\t: some CPU\nflags\t\t: {flags}\nbugs\t\t: avx512_bf16\n")
        return str(path)

    assert diarize.native_bfloat16(cpu("fpu sse avx2 avx512f avx512_bf16 avx512bw")) is True  # Zen 4, Cooper Lake
    assert diarize.native_bfloat16(cpu("fpu sse avx2 avx512f amx_tile amx_bf16")) is True  # Sapphire Rapids
    assert diarize.native_bfloat16(cpu("fpu sse avx2 avx512f avx512bw avx512_vnni")) is False  # AVX-512 alone
    assert diarize.native_bfloat16(cpu("fpu sse avx2")) is False  # only the flags line counts, not "bugs"
    assert diarize.native_bfloat16(str(tmp_path / "no-such-file")) is False  # not Linux: float32


@needs_native
@pytest.mark.slow
def test_bfloat16_prints_are_float32s_within_rounding_and_leave_the_weights_alone(monkeypatch, models_dir):
    monkeypatch.setenv("RESCUE_DIARIZATION_BFLOAT16", "0")
    plain = diarize.load_pipeline(models_dir / OFFLINE_DIARIZATION, settings=Settings.from_env())
    monkeypatch.setenv("RESCUE_DIARIZATION_BFLOAT16", "1")
    fast = diarize.load_pipeline(models_dir / OFFLINE_DIARIZATION, settings=Settings.from_env())
    model, reference = fast._embedding.model_, plain._embedding.model_
    assert type(reference) is DVectorEmbedding and isinstance(model, DVectorEmbedding) and type(model) is not DVectorEmbedding
    assert set(model.state_dict()) == set(reference.state_dict())  # the copy is not a module of the model
    assert all(v.dtype == torch.float32 for v in model.state_dict().values())

    called = []
    plain_lstm = model.lstm.forward
    model.lstm.forward = lambda x: called.append(x.shape) or plain_lstm(x)
    try:
        partials = torch.randn(64, DVectorEmbedding.PARTIAL, DVectorEmbedding.N_MELS,
                               generator=torch.Generator().manual_seed(0)).abs()
        with torch.inference_mode():
            fast_prints, plain_prints = model._dvectors(partials), reference._dvectors(partials)
    finally:
        del model.lstm.forward
    assert not called  # the float32 LSTM did not run
    with torch.inference_mode():  # a row's LSTM state does not depend on the rows beside it in its call
        whole = model._last_hidden(partials)
        for size in (1, 3, 7, 20):
            sliced = torch.cat([model._last_hidden(partials[i:i + size]) for i in range(0, len(partials), size)])
            assert torch.equal(sliced, whole), size
    cosine = (fast_prints * plain_prints).sum(-1)
    print(f"cosine bfloat16/float32: min {float(cosine.min()):.5f}")
    assert float(cosine.min()) > 0.999 and not torch.equal(fast_prints, plain_prints)


@needs_native
@pytest.mark.slow
def test_bfloat16_der_equals_float32s_on_the_pyannote_sample(monkeypatch, models_dir):
    import pyannote.audio
    from pipeline.media import rttm
    sample = Path(pyannote.audio.__file__).parent / "sample"
    reference, scores = rttm.read_rttm(sample / "sample.rttm"), {}
    for flag in ("0", "1"):
        monkeypatch.setenv("RESCUE_DIARIZATION_BFLOAT16", flag)
        pipeline = diarize.load_pipeline(models_dir / OFFLINE_DIARIZATION, settings=Settings.from_env())
        scores[flag] = rttm.der(reference, diarize.diarize_audio(sample / "sample.wav", num_speakers=2,
                                                                 pipeline=pipeline))
    print(f"DER pyannote sample: float32 {scores['0']:.4f}, bfloat16 {scores['1']:.4f}")
    assert scores["1"] <= scores["0"] + 0.002


def test_the_diarize_key_records_the_precision_that_runs(monkeypatch, models_dir, tmp_path):
    import dataclasses

    from pipeline.catalog import Ingested
    from pipeline.media import keys
    from pipeline.paths import DataRoot

    root = DataRoot(tmp_path / "data")
    ingested = Ingested("g/s", "couple", ("Ann", "Bo"), "a" * 64, "media/a.wav", None, 40.0)
    made = {}
    for flag in ("0", "1"):
        monkeypatch.setenv("RESCUE_DIARIZATION_BFLOAT16", flag)
        settings = dataclasses.replace(Settings.from_env(root.root), models_dir=models_dir)
        made[flag] = keys.diarize_key(ingested, root, settings=settings)
    assert {f: k.settings["diarization_bfloat16"] for f, k in made.items()} == {"0": False, "1": diarize.native_bfloat16()}
    assert (made["0"].key != made["1"].key) == diarize.native_bfloat16()  # a result of one is no hit for the other
