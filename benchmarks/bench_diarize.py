"""Offline diarization speed per stage on generated interviews of 5 and 60 minutes.

Generates (once; cached under ``$TMPDIR/rescue-bench-diarize``) couple interviews of about four
minutes with espeak-ng voices (``pipeline.synthetic.interviews``, different seeds, same three
voices) and concatenates them (the last one cut) into 5 or 60 minutes with its RTTM truth. Each case is
diarized with the offline default pipeline exactly as ``diarize.diarize_audio`` does (pyannote,
then ``refine.refine_turns``), timing the stages through pyannote's own progress hook:

* ``segmentation``  - the segmentation model over sliding 10-s windows (+ speaker counting);
* ``embeddings``    - one voice print per (window, local speaker);
* ``clustering``    - pyannote's clustering of those prints (+ rebuilding the timeline);
  ``clustering_fit`` is the part inside ``cluster()`` (the linkage on the sample it sees);
* ``refinement``    - silence cut, re-embedding of the pieces, spherical k-means, sliding-window
  splits (``refine_embed`` is the embedding model's share of it).

Each stage gets wall seconds and process CPU seconds (all threads) measured in the same run,
and its share of the total; the realtime factor is audio seconds / wall seconds. The load
average is printed with every case (a busy shared machine slows every figure; compare ratios
from one run). DER against the generated truth checks nothing got worse.

Speed levers: the segmentation model's first convolution, its abs and pooling are computed once
per batch of overlapping windows (``speedups.share_first_convolution``, on by default, same output;
``--plain-segmentation`` turns it off for a before figure), each batch of both models runs as
slices in single-threaded threads, one per torch thread (``speedups.split_batches``, on by
default on the CPU, same output; ``--plain-batches`` gives each batch to torch's intra-op
threads in one call, the behaviour before), the d-vector partials are embedded once per file on a
grid instead of once per overlapping window (``speedups.share_partials``, on by default: close but
not the same prints, 5 min 23x -> 37x, hour 25x -> 34x, DER no worse;
``--per-window-embeddings`` gives the before figure), and ``--step`` /
``RESCUE_DIARIZATION_STEP`` trades DER for speed (pyannote's ``segmentation_step``: 0.2 halves
segmentation and embeddings; on the generated interviews DER held, on pyannote's real
``sample.wav`` it rose from 0.061 to 0.12, so 0.1 stays the default).

    .venv/bin/python benchmarks/bench_diarize.py [--minutes 5 60] [--device cpu|cuda] [--pyannote-only]
        [--step 0.2] [--threads 1] [--plain-segmentation] [--plain-batches] [--per-window-embeddings] [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

SEGMENT_ROWS = 64  # rows per generated piece: about four minutes of audio


def cache_dir() -> Path:
    path = Path(os.environ.get("RESCUE_BENCH_CACHE", Path(tempfile.gettempdir()) / "rescue-bench-diarize"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def piece(seed: int) -> tuple[Path, Path]:
    """One generated ~5-minute couple interview as a 16 kHz WAV and its RTTM (cached)."""
    from pipeline.media.audio import extract_wav
    from pipeline.synthetic import interviews as synth
    out = cache_dir() / f"couple-{seed}"
    wav16 = out / "couple.16k.wav"
    if not wav16.exists():
        files = synth.make_interview(out, "couple", "couple", seed=seed, n_rows=SEGMENT_ROWS, make_video=False)
        extract_wav(files["wav"], out / "tmp.16k.wav").rename(wav16)
    return wav16, out / "couple.rttm"


def interview(minutes: float) -> tuple[Path, float]:
    """A WAV of ``minutes`` (generated pieces concatenated, the last one cut) and its RTTM; returns (wav, seconds)."""
    from pipeline.media import rttm
    from pipeline.media.audio import SAMPLE_RATE, load_wav
    wav = cache_dir() / f"interview-{minutes:g}min.wav"
    truth = wav.with_suffix(".rttm")
    if not wav.exists() or not truth.exists():
        chunks, turns, offset, seed = [], [], 0.0, 0
        while offset < minutes * 60:
            w, r = piece(seed)
            audio = load_wav(w)
            chunks.append(audio)
            turns += [rttm.Turn(round(t.start + offset, 3), round(t.end + offset, 3), t.speaker) for t in rttm.read_rttm(r)]
            offset += len(audio) / SAMPLE_RATE
            seed += 1
        end = minutes * 60
        audio = np.concatenate(chunks)[: int(end * SAMPLE_RATE)]
        turns = [rttm.Turn(t.start, min(t.end, end), t.speaker) for t in turns if t.start < end - 0.05]
        import wave
        tmp = wav.with_suffix(".tmp")
        with wave.open(str(tmp), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(SAMPLE_RATE)
            out.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
        rttm.write_rttm(turns, truth, uri=wav.stem)
        tmp.rename(wav)
    return wav, len(load_wav(wav)) / SAMPLE_RATE


class Stopwatch:
    """Wall and process-CPU time at named marks."""

    def __init__(self):
        self.marks = [("start", time.perf_counter(), time.process_time())]

    def mark(self, name: str) -> None:
        self.marks.append((name, time.perf_counter(), time.process_time()))

    def spans(self) -> dict[str, tuple[float, float]]:
        return {b[0]: (b[1] - a[1], b[2] - a[2]) for a, b in zip(self.marks, self.marks[1:])}


def run(pipeline, wav: Path, seconds: float, num_speakers: int, refine: bool, device: str) -> dict:
    import torch
    from pipeline.media import rttm
    from pipeline.media.audio import SAMPLE_RATE, load_wav
    from pipeline.media.refine import embed_segments, refine_turns

    samples = load_wav(wav)
    file = {"waveform": torch.from_numpy(samples[None, :]), "sample_rate": SAMPLE_RATE, "uri": wav.stem}
    watch, seen = Stopwatch(), set()

    def hook(step, artefact, file=None, total=None, completed=None):
        # the final "embeddings" call carries no progress counters: the embeddings are done
        if step == "speaker_counting":
            watch.mark("segmentation")
        elif step == "embeddings" and total is None:
            watch.mark("embeddings")
        elif step == "discrete_diarization":
            watch.mark("clustering")
        seen.add(step)

    fit = [0.0, 0.0, 0]
    clustering = pipeline.clustering
    original = clustering.cluster

    def timed_cluster(*a, **k):
        w, c = time.perf_counter(), time.process_time()
        fit[2] = len(a[0]) if a else len(k["embeddings"])
        try:
            return original(*a, **k)
        finally:
            fit[0] += time.perf_counter() - w
            fit[1] += time.process_time() - c

    clustering.cluster = timed_cluster  # instance attribute: BaseClustering.__call__ calls self.cluster
    try:
        output = pipeline(file, num_speakers=num_speakers, hook=hook)
    finally:
        del clustering.cluster
    annotation = getattr(output, "speaker_diarization", output)
    turns = rttm.sort_turns([rttm.Turn(round(s.start, 3), round(s.end, 3), str(label))
                             for s, _, label in annotation.itertracks(yield_label=True)])
    watch.mark("annotation")
    embed_time = [0.0, 0.0]

    def embed(spans):
        w, c = time.perf_counter(), time.process_time()
        try:
            return embed_segments(pipeline, samples, spans)
        finally:
            embed_time[0] += time.perf_counter() - w
            embed_time[1] += time.process_time() - c

    if refine:
        turns = refine_turns(samples, turns, embed, num_speakers)
    watch.mark("refinement")
    spans = watch.spans()
    spans["clustering"] = (spans["clustering"][0] + spans.pop("annotation")[0],
                           spans["clustering"][1])  # the annotation is the end of pyannote's own output
    total_wall = sum(w for w, _ in spans.values())
    total_cpu = sum(c for _, c in spans.values())
    der = rttm.der(rttm.read_rttm(wav.with_suffix(".rttm")), turns)
    return {
        "audio_min": round(seconds / 60, 2),
        "device": device,
        "realtime_x": round(seconds / total_wall, 1),
        "wall_s": round(total_wall, 1),
        "cpu_s": round(total_cpu, 1),
        "cpu_realtime_x": round(seconds / total_cpu, 1),
        "stages_wall_s": {k: round(w, 2) for k, (w, _) in spans.items()},
        "stages_cpu_s": {k: round(c, 2) for k, (_, c) in spans.items()},
        "stages_share": {k: round(w / total_wall, 3) for k, (w, _) in spans.items()},
        "s_per_audio_hour": {k: round(w / seconds * 3600, 1) for k, (w, _) in spans.items()},
        "clustering_fit_s": round(fit[0], 2),
        "clustered_prints": fit[2],
        "refine_embed_s": round(embed_time[0], 2),
        "der": round(der, 4),
        "speakers": len({t.speaker for t in turns}),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, nargs="+", default=[5, 60])
    ap.add_argument("--device", default="cpu", help="torch device for the models: cpu, cuda, cuda:1 ...")
    ap.add_argument("--pipeline", default=None, help="pipeline directory (default: the offline default)")
    ap.add_argument("--pyannote-only", action="store_true", help="skip the project's refinement")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads (default: torch's, one per core; 1 is faster on a busy machine)")
    ap.add_argument("--step", type=float, default=None,
                    help="pyannote's segmentation_step, a share of the 5-s window (default: RESCUE_DIARIZATION_STEP, "
                         "else the pipeline's own, 0.1); 0.2 about halves segmentation and embeddings")
    ap.add_argument("--plain-segmentation", action="store_true",
                    help="pyannote's own SincNet (the first convolution per chunk, the behaviour before the "
                         "shared convolution); for before/after figures")
    ap.add_argument("--plain-batches", action="store_true",
                    help="each model batch in one call on torch's intra-op threads (the behaviour before "
                         "speedups.split_batches); for before/after figures")
    ap.add_argument("--per-window-embeddings", action="store_true",
                    help="pyannote's own embeddings, the d-vector partials of every (window, speaker) embedded anew "
                         "(the behaviour before speedups.share_partials); for before/after figures")
    ap.add_argument("--repeat", type=int, default=1, help="run each case this many times (figures per run)")
    ap.add_argument("--max-clustered", type=int, default=None,
                    help="voice prints pyannote clusters at most (default: speedups.MAX_CLUSTERED_EMBEDDINGS; "
                         "0: all of them, the behaviour before the bound)")
    args = ap.parse_args()

    import dataclasses

    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    from pipeline.config import Settings
    from pipeline.media.diarize import load_pipeline
    started = time.perf_counter()
    from pipeline.media.speedups import MAX_CLUSTERED_EMBEDDINGS, bound_clustering, share_partials, split_batches
    settings = Settings.from_env()
    if args.step is not None:
        settings = dataclasses.replace(settings, diarization_step=args.step)
    pipeline = load_pipeline(args.pipeline, args.device, settings)
    sincnet = getattr(pipeline._segmentation.model, "sincnet", None)
    if args.plain_segmentation and sincnet is not None:
        sincnet.hop = 0  # the shared path declines and pyannote's own forward runs
    if args.plain_batches:
        split_batches(pipeline, 1)
    if args.per_window_embeddings:
        share_partials(pipeline, 0)
    limit = MAX_CLUSTERED_EMBEDDINGS if args.max_clustered is None else (args.max_clustered or 10 ** 9)
    bound_clustering(pipeline, limit)
    print(json.dumps({"case": "load", "seconds": round(time.perf_counter() - started, 1),
                      "segmentation_step": pipeline.segmentation_step,
                      "shared_first_convolution": bool(getattr(sincnet, "hop", 0)),
                      "split_batches": hasattr(pipeline._segmentation.model.forward, "plain"),
                      "shared_partials": getattr(pipeline, "partial_hop", 0),
                      "clustering": type(pipeline.clustering).__name__,
                      "max_clustered": limit if limit < 10 ** 9 else "all", "cpus": os.cpu_count(),
                      "torch_threads": __import__("torch").get_num_threads(),
                      "loadavg": [round(x, 2) for x in os.getloadavg()]}), flush=True)
    for minutes in args.minutes:
        started = time.perf_counter()
        wav, seconds = interview(minutes)
        generated = time.perf_counter() - started
        for _ in range(args.repeat):
            result = run(pipeline, wav, seconds, 3, not args.pyannote_only, args.device)
            print(json.dumps({"case": f"{minutes:g} min", "generate_s": round(generated, 1), **result}), flush=True)


if __name__ == "__main__":
    main()
