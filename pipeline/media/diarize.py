"""The diarization stage: who spoke when, with pyannote, and speakers named by enrolled voice.

The pipeline comes from a local directory (the offline default built by
``rescue models prepare-offline``, or any downloaded pyannote pipeline) or from a hub id
(production; the token is read from ``HF_TOKEN`` only and the hub must be switched on with
``HF_HUB_OFFLINE=0``). Telemetry is off (``pipeline/__init__.py``). pyannote's output is then
refined (silences cut out of turns, pieces re-clustered by voice print: ``pipeline.media.refine``)
and speakers whose voice is enrolled get their names (``pipeline.media.voices``).

Entry points, shared by ``rescue diarize`` and the ``ingest-batch`` flow:

* :func:`diarize_stage` - an ingested sample (its :class:`pipeline.catalog.Ingested` record: the
  catalog is not read again) -> ``diarization/<sample_id>.rttm`` (``DataRoot.rttm``) -> a
  :class:`Diarized` record;
* :func:`diarize_file` - any 16 kHz mono WAV -> an RTTM beside it (or ``out``).

Turns, RTTM files and DER live in ``pipeline.media.rttm``; word/cue -> speaker assignment in
``pipeline.media.assign``.
"""
from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pipeline import taxonomy
from pipeline.catalog import Ingested
from pipeline.config import Settings
from pipeline.media import vad, voices
from pipeline.media.audio import SAMPLE_RATE, load_wav
from pipeline.media.refine import embed_segments, refine_turns
from pipeline.media.rttm import DiarizationError, Turn, sort_turns, write_rttm
from pipeline.paths import DataRoot
from pipeline.store import private_areas, sha256_file

@dataclass(frozen=True)
class Diarized:
    """A written RTTM; content addressed by ``sha256``."""

    sample_id: str | None          # None for a plain WAV file (diarize_file)
    rttm: str                      # where it was written
    sha256: str
    turns: int
    speakers: tuple[str, ...]      # labels in the RTTM, sorted
    named: tuple[str, ...] = ()    # the labels an enrolled voice named


def default_pipeline_dir(settings: Settings | None = None) -> Path:
    from pipeline.media.models import OFFLINE_DIARIZATION  # heavy: torch + pyannote (the model classes)
    return (settings or Settings.from_env()).models_dir / OFFLINE_DIARIZATION


_PIPELINES: dict[tuple[str, str], object] = {}
_PIPELINES_LOCK = threading.Lock()  # one load per process even when interviews run in threads


def load_pipeline(source: str | Path | None = None, device: str = "cpu", settings: Settings | None = None):
    """A pyannote ``SpeakerDiarization`` pipeline, loaded once per process (thread-safe).

    ``source``: None (the offline default under ``Settings.models_dir``), a local pipeline
    directory or ``config.yaml``, or a hub id such as ``pyannote/speaker-diarization-community-1``.
    ``settings.diarization_step`` (``RESCUE_DIARIZATION_STEP``), when set, replaces the
    pipeline's segmentation step; ``settings.diarization_shared_partials``
    (``RESCUE_DIARIZATION_SHARED_PARTIALS``, on by default) embeds the d-vector partials once per
    file; the d-vector runs in bfloat16 where :func:`bfloat16_voice_prints` says so.
    """
    settings = settings or Settings.from_env()
    source = str(source) if source is not None else str(default_pipeline_dir(settings))
    bfloat16 = bfloat16_voice_prints(device, settings)
    key = (source, device, settings.diarization_step, settings.diarization_shared_partials, bfloat16)
    with _PIPELINES_LOCK:
        if key not in _PIPELINES:
            _PIPELINES[key] = _load(source, device, settings.diarization_step, settings.diarization_shared_partials,
                                    bfloat16)
        return _PIPELINES[key]


def bfloat16_voice_prints(device: str, settings: Settings | None = None) -> bool:
    """Whether the d-vector's LSTM runs in bfloat16 here: ``settings.diarization_bfloat16``
    (``RESCUE_DIARIZATION_BFLOAT16``, on by default), on the CPU, where it computes bfloat16
    natively (:func:`native_bfloat16`). Part of the diarize stage's cache key."""
    settings = settings or Settings.from_env()
    return settings.diarization_bfloat16 and device.startswith("cpu") and native_bfloat16()


@functools.cache
def native_bfloat16(cpuinfo_path: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU computes bfloat16 natively: the kernel's flags for AVX512_BF16 or AMX
    (what oneDNN dispatches on). Read without torch: the cache key needs it before any model."""
    try:
        with open(cpuinfo_path, encoding="ascii", errors="replace") as cpuinfo:
            flags = next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), [])
    except OSError:  # not Linux: float32
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _load(source: str, device: str, step: float | None, shared_partials: bool,
          bfloat16: bool):  # settings: load_pipeline
    import torch  # heavy
    from pyannote.audio import Pipeline  # heavy

    path = Path(source)
    if path.exists() or not _looks_like_hub_id(source):
        if not path.exists():
            raise DiarizationError(
                f"diarization pipeline directory {path} does not exist; build the offline default with "
                "`rescue models prepare-offline` (or set RESCUE_MODELS_DIR)")
        _check_build(path if path.is_dir() else path.parent)
        pipeline = Pipeline.from_pretrained(path)
    else:
        token = os.environ.get("HF_TOKEN") or None
        if os.environ.get("HF_HUB_OFFLINE", "1") != "0":
            raise DiarizationError(
                f"{source!r} is no local directory, and as a hub id it needs the hub, which is off "
                "(HF_HUB_OFFLINE=1): set HF_HUB_OFFLINE=0 and HF_TOKEN in the environment, or pass a local "
                "pipeline directory (`rescue models prepare-offline` builds the offline default)")
        pipeline = Pipeline.from_pretrained(source, token=token)
    if pipeline is None:
        raise DiarizationError(f"could not load the diarization pipeline {source!r} (gated model without HF_TOKEN?)")
    pipeline.to(torch.device(device))
    from pipeline.media.speedups import (bfloat16_dvectors, bound_clustering, set_segmentation_step,
                                         share_first_convolution, share_partials, split_batches)
    if step is not None:  # RESCUE_DIARIZATION_STEP: speed against DER (docs: Settings.diarization_step)
        set_segmentation_step(pipeline, step)
    share_first_convolution(pipeline)  # same output, less segmentation time
    if shared_partials:  # a third less time per hour, DER no worse (speedups._SharedPartials)
        share_partials(pipeline)
    if bfloat16:  # before split_batches, which binds the d-vector's method
        bfloat16_dvectors(pipeline)
    if torch.device(device).type == "cpu":
        split_batches(pipeline)  # same output; batches over the cores instead of each small matmul
    return bound_clustering(pipeline)  # clustering cost linear in the hour


def _check_build(directory: Path) -> None:
    """An offline pipeline directory an older builder made (its ``.complete`` marker names
    another build) names classes that have moved: say how to rebuild it, before pyannote fails
    on an import. Directories without the marker (made elsewhere) are not ours to judge."""
    from pipeline.media.models import MARKER, OFFLINE_BUILD

    try:
        built = (directory / MARKER).read_text().strip()
    except OSError:
        return
    if built != f"build {OFFLINE_BUILD}":
        raise DiarizationError(
            f"diarization pipeline directory {directory} was made by an older version ({built!r}; this code "
            f"needs 'build {OFFLINE_BUILD}'): rebuild it with `rescue models prepare-offline` "
            "(or `bash scripts/setup.sh`)")


def _looks_like_hub_id(source: str) -> bool:
    return source.count("/") == 1 and not source.startswith((".", "/"))


def diarize_audio(
    audio_path: str | Path,
    num_speakers: int | None = None,
    min_speakers: int | None = None,
    max_speakers: int | None = None,
    pipeline=None,
    source: str | Path | None = None,
    device: str = "cpu",
    refine: bool = True,
) -> list[Turn]:
    """Diarize one 16 kHz mono WAV; returns turns sorted by (start, end, speaker).
    ``refine``: the silence cut + re-clustering of ``pipeline.media.refine`` (on by default)."""
    import torch  # heavy

    pipeline = pipeline or load_pipeline(source, device)
    samples = load_wav(audio_path)  # decode ourselves: no torchcodec dependency at run time
    file = {"waveform": torch.from_numpy(samples[None, :]), "sample_rate": SAMPLE_RATE, "uri": Path(audio_path).stem}
    output = pipeline(file, num_speakers=num_speakers, min_speakers=min_speakers, max_speakers=max_speakers)
    annotation = getattr(output, "speaker_diarization", output)
    turns = sort_turns([Turn(round(s.start, 3), round(s.end, 3), str(label))
                        for s, _, label in annotation.itertracks(yield_label=True)])
    if refine and turns:
        turns = refine_turns(samples, turns, lambda spans: embed_segments(pipeline, samples, spans),
                             num_speakers or len({t.speaker for t in turns}))
    return turns


def name_speakers(audio_path: str | Path, turns: Sequence[Turn], pipeline, root: DataRoot,
                  candidates: Sequence[str] | None = None) -> tuple[list[Turn], dict[str, str]]:
    """Turns renamed by the voices enrolled under the data root (none enrolled: unchanged)."""
    if not voices.has_voices(root):
        return list(turns), {}
    return voices.name_speakers(load_wav(audio_path), turns, pipeline, root, candidates)


def _record(sample_id: str | None, path: Path, turns: Sequence[Turn], mapping: dict[str, str]) -> Diarized:
    return Diarized(sample_id, str(path), sha256_file(path), len(turns), tuple(sorted({t.speaker for t in turns})),
                    tuple(sorted(set(mapping.values()))))


def _diarize_sample(ingested: Ingested, root: DataRoot, num_speakers: int | None, source, device: str, pipeline,
                    min_speakers: int | None, max_speakers: int | None,
                    refine: bool) -> tuple[list[Turn], dict[str, str]]:
    """Turns of an ingested sample (speaker count: therapist + participants unless given), named
    by enrolled voice where one matches (candidates: the interview's therapist and participants)."""
    participants = list(ingested.participants)
    if num_speakers is None and min_speakers is None and max_speakers is None and participants:
        num_speakers = 1 + len(participants)
    pipeline = pipeline or load_pipeline(source, device)
    audio = root.resolve(ingested.audio_path)
    turns = diarize_audio(audio, num_speakers, min_speakers, max_speakers, pipeline=pipeline, device=device,
                          refine=refine)
    candidates = [taxonomy.THERAPIST, *participants] if participants else None
    return name_speakers(audio, turns, pipeline, root, candidates)


def diarize_stage(ingested: Ingested, root: DataRoot, num_speakers: int | None = None,
                  source: str | Path | None = None, device: str = "cpu", pipeline=None,
                  min_speakers: int | None = None, max_speakers: int | None = None, refine: bool = True,
                  out: str | Path | None = None, require_speech: bool = True) -> Diarized:
    """The diarization stage for an ingested sample (CLI and flow). The speaker count defaults to
    therapist + manifest participants; speakers whose voice is enrolled get their names. The RTTM
    is written to ``diarization/<sample_id>.rttm`` (or ``out``).

    First a cheap voice-activity check (:mod:`pipeline.media.vad`, seconds even for a long file):
    audio without speech (silent, music only) raises :class:`NoSpeech` and is not diarized
    (``require_speech=False`` skips the check)."""
    private_areas(root, "diarization", "drafts", "draft-voices")
    if require_speech:
        check_speech(ingested, root)
    turns, mapping = _diarize_sample(ingested, root, num_speakers, source, device, pipeline, min_speakers,
                                     max_speakers, refine)
    sample_id = ingested.sample_id
    path = write_rttm(turns, out if out is not None else root.rttm(sample_id), uri=Path(sample_id).name)
    return _record(sample_id, path, turns, mapping)


class NoSpeech(DiarizationError):
    """Audio without speech (silent or music only): quarantined before diarization."""


def check_speech(ingested: Ingested, root: DataRoot) -> vad.SpeechCheck:
    """Voice activity in an ingested sample's audio; :class:`NoSpeech` when there is (almost) none."""
    found = vad.check_speech(load_wav(root.resolve(ingested.audio_path)))
    if not found.has_speech:
        raise NoSpeech(f"{ingested.sample_id}: no speech: voice activity detection found {found.speech_s:.1f} s of "
                       f"speech in {found.duration_s:.1f} s of audio (silent or music only); not diarized")
    return found


def diarize_file(audio_path: str | Path, root: DataRoot, out: str | Path | None = None,
                 num_speakers: int | None = None, min_speakers: int | None = None,
                 max_speakers: int | None = None, source: str | Path | None = None, device: str = "cpu",
                 pipeline=None, refine: bool = True) -> Diarized:
    """Diarize a plain 16 kHz mono WAV (not in the catalog); every enrolled voice is a candidate.
    The RTTM goes to ``out``, else beside the file (``<file>.rttm``)."""
    audio_path = Path(audio_path)
    pipeline = pipeline or load_pipeline(source, device)
    turns = diarize_audio(audio_path, num_speakers, min_speakers, max_speakers, pipeline=pipeline, device=device,
                          refine=refine)
    turns, mapping = name_speakers(audio_path, turns, pipeline, root)
    path = write_rttm(turns, out if out is not None else audio_path.with_suffix(".rttm"), uri=audio_path.stem)
    return _record(None, path, turns, mapping)
