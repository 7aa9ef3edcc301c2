"""Speed-ups of pyannote's ``SpeakerDiarization`` for the pipelines ``diarize.load_pipeline`` loads.

Each one replaces one piece of pyannote on the loaded objects only (a mixin class swapped onto
the instance, or a wrapped ``forward``), keeps pyannote's own code as the fallback, and is
checked against pyannote's own output in tests/media:

========================  ==================================================  ==============================
speed-up                  replaces in pyannote                                checked against pyannote by
========================  ==================================================  ==============================
``bound_clustering``      ``BaseClustering.filter_embeddings``: every voice   test_clustering_bound (the
                          print clustered (square cost) -> at most            same labels below the bound)
                          ``MAX_CLUSTERED_EMBEDDINGS``, the rest assigned to
                          the nearest centroid by pyannote's own step
``share_first_convolution`` ``SincNet.forward``: the first sinc convolution,  test_diarize (pyannote's
                          its abs and pooling once per chunk -> once per      forward, hop 0), test_devices
                          batch of overlapping chunks (same output up to      (the pooled first layer)
                          float rounding)
``split_batches``         ``Model.forward`` of the segmentation and           test_diarize (the unsplit call)
                          embedding models: one call with torch's intra-op
                          threads -> slices of the batch in single-threaded
                          threads (same rows, same outputs)
``share_partials``        ``SpeakerDiarization.get_embeddings`` with the      test_shared_partials (pyannote's
                          d-vector: partials per (chunk, speaker) -> each     get_embeddings, hop 0)
                          grid partial once per file
========================  ==================================================  ==============================

``set_segmentation_step`` is a setting, not a speed-up of the same output: it applies
``RESCUE_DIARIZATION_STEP`` (speed against DER). ``bfloat16_dvectors`` (on by default where the
CPU computes bfloat16 natively; ``RESCUE_DIARIZATION_BFLOAT16=0`` turns it off) gives close, not
the same, voice prints; test_bfloat16_prints checks them against float32's, and DER.
"""
from __future__ import annotations

import copy
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import nn

from pipeline.media.dvector import DVectorEmbedding


# pyannote clusters every (10-s window, local speaker) voice print it keeps, about 170 per minute
# of audio, with linkage and a dendrogram search that grow with the square of their number (36 CPU
# s of a one-hour run here). Above this many, an evenly spread sample is clustered and every
# print is then given to the nearest centroid (pyannote's own last step), so the clustering costs
# a constant plus a linear assignment. Windows overlap 90 % (1-s step), so neighbours are nearly
# copies and a sample of one print per second or two loses little. Interviews up to about 17
# minutes are clustered in full, exactly as before. Generated hour (benchmarks/bench_diarize.py):
# all 10,404 prints DER 0.009, 36 CPU s; 1,500: 0.012, 2 s; 3,000: 0.008, 3 s.
MAX_CLUSTERED_EMBEDDINGS = 3000


class _BoundedClusteringSample:
    """Mixin for a pyannote clustering: ``filter_embeddings`` keeps at most ``max_embeddings``."""

    max_embeddings: int = MAX_CLUSTERED_EMBEDDINGS

    def filter_embeddings(self, embeddings, segmentations=None, min_active_ratio: float = 0.2):
        train, chunk_idx, speaker_idx = super().filter_embeddings(embeddings, segmentations=segmentations,
                                                                  min_active_ratio=min_active_ratio)
        keep = evenly_spread(len(train), self.max_embeddings)
        return train[keep], chunk_idx[keep], speaker_idx[keep]


def evenly_spread(n: int, limit: int) -> np.ndarray:
    """Indices of at most ``limit`` of ``n`` items (time order), evenly spread; all when n <= limit."""
    if n <= limit:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, limit).round().astype(int))


_MIXED: dict[tuple[type, type], type] = {}


def _mix_in(obj, mixin: type, prefix: str) -> None:
    """Give a loaded pyannote object ``mixin``'s behaviour in place: its class becomes a subclass
    (``<prefix><class>``, one per class) so the instance keeps its instantiated hyper-parameters."""
    if isinstance(obj, mixin):
        return
    cls = type(obj)
    if (mixin, cls) not in _MIXED:
        _MIXED[(mixin, cls)] = type(f"{prefix}{cls.__name__}", (mixin, cls), {"__module__": __name__})
    object.__setattr__(obj, "__class__", _MIXED[(mixin, cls)])



def bound_clustering(pipeline, max_embeddings: int = MAX_CLUSTERED_EMBEDDINGS):
    """Make a loaded pyannote ``SpeakerDiarization`` pipeline cluster at most ``max_embeddings``
    voice prints (see ``MAX_CLUSTERED_EMBEDDINGS``); the rest are assigned to the nearest centroid
    by pyannote's own code. Works for every clustering that samples through ``filter_embeddings``
    (agglomerative: the offline default; VBx: community-1). The instance keeps its instantiated
    hyper-parameters (its class becomes a subclass). Returns the pipeline."""
    clustering = getattr(pipeline, "clustering", None)
    if clustering is None or not hasattr(clustering, "filter_embeddings") or type(clustering).__name__ == "OracleClustering":
        return pipeline
    _mix_in(clustering, _BoundedClusteringSample, "Bounded")
    object.__setattr__(clustering, "max_embeddings", int(max_embeddings))
    return pipeline


# pyannote's segmentation slides a 5-s window every 0.5 s (``segmentation_step`` 0.1), so every
# audio sample goes through SincNet's first layer, 80 sinc filters of 251 taps at stride 10, ten
# times: 29 % of the segmentation model's CPU time here. That layer is a plain convolution after
# a per-chunk affine normalisation (InstanceNorm1d of the waveform), so it can be computed once
# over the span of a batch of overlapping chunks and each chunk's slice rescaled:
# conv(a*x + b) = a*conv(x) + b*sum(filter). Its abs and max-pooling come next, and they need not
# run per chunk either: |a*c + d| is convex in c, so its largest value over a pooling window is at
# the window's largest or smallest c. Pooling the span's convolution by max and by min (once per
# alignment of the chunks' windows) and taking max(|a*max + d|, |a*min + d|) per chunk gives the
# pooled layer directly, without the ten-fold (batch, 80, frames) tensor. Float rounding of
# a*c + d is monotone in c, so this is the per-chunk result itself. Everything after it (the
# per-chunk norms, the other convolutions, the LSTM) runs per chunk as before.


class _SharedFirstConvolution:
    """Mixin for pyannote's ``SincNet``: the first convolution, its abs and its pooling once per
    batch of overlapping chunks."""

    hop: int = 0  # samples between consecutive chunks (set by share_first_convolution)

    def forward(self, waveforms: torch.Tensor) -> torch.Tensor:
        outputs = self._shared_first_block(waveforms)
        if outputs is None:  # not consecutive overlapping chunks: pyannote's own code
            return super().forward(waveforms)
        for c, (conv1d, pool1d, norm1d) in enumerate(zip(self.conv1d, self.pool1d, self.norm1d)):
            if c > 0:
                outputs = pool1d(conv1d(outputs))
            outputs = nn.functional.leaky_relu(norm1d(outputs))
        return outputs

    def _shared_first_block(self, x: torch.Tensor) -> torch.Tensor | None:
        """``pool1d[0](abs(conv1d[0](wav_norm1d(x))))`` for consecutive chunks ``hop`` apart, from
        one convolution over their span; None where that does not apply."""
        encoder, norm, pool = self.conv1d[0], self.wav_norm1d, self.pool1d[0]
        stride, hop = encoder.stride, self.hop
        batch, channels, n = x.shape
        if (batch < 2 or channels != 1 or hop <= 0 or hop % stride or hop >= n or encoder.padding != 0
                or not norm.affine or norm.track_running_stats or not isinstance(pool, nn.MaxPool1d)
                or pool.padding != 0 or pool.dilation != 1 or pool.ceil_mode
                or not isinstance(pool.kernel_size, int) or not isinstance(pool.stride, int)):
            return None
        # the chunks must really be consecutive windows ``hop`` apart (the last, padded chunk is not)
        if not torch.equal(x[1:, :, : n - hop], x[:-1, :, hop:]):
            return None
        span = torch.cat([x[0, 0], x[1:, 0, n - hop:].reshape(-1)])
        filters = encoder.get_filters()  # (80, 1, 251)
        frames = (n - filters.shape[-1]) // stride + 1  # of each chunk's convolution
        full = encoder(span[None, None])[0]  # (80, span frames)
        kernel, step = pool.kernel_size, pool.stride
        pooled = (frames - kernel) // step + 1  # of each chunk's pooling
        starts = [b * (hop // stride) for b in range(batch)]  # each chunk's first frame in ``full``
        highs, lows = {}, {}
        for r in sorted({s % step for s in starts}):  # one pooling grid per alignment
            highs[r] = nn.functional.max_pool1d(full[:, r:], kernel, step)
            lows[r] = -nn.functional.max_pool1d(-full[:, r:], kernel, step)
        mean = x.mean(dim=-1, keepdim=True)  # (batch, 1, 1): InstanceNorm1d's statistics
        var = x.var(dim=-1, unbiased=False, keepdim=True)
        scale = norm.weight.view(1, 1, 1) / torch.sqrt(var + norm.eps)
        shift = (norm.bias.view(1, 1, 1) - mean * scale) * filters.sum(dim=-1).view(1, -1, 1)
        outputs = full.new_empty((batch, full.shape[0], pooled))
        for b, s in enumerate(starts):  # chunk by chunk: each one's operands stay in the cache
            window = slice(s // step, s // step + pooled)
            torch.maximum(torch.addcmul(shift[b], scale[b], highs[s % step][:, window]).abs_(),
                          torch.addcmul(shift[b], scale[b], lows[s % step][:, window]).abs_(), out=outputs[b])
        return outputs


def set_segmentation_step(pipeline, step: float):
    """Set a loaded ``SpeakerDiarization`` pipeline's ``segmentation_step`` (the hop of its sliding
    window, as a share of the window; pyannote's default 0.1). Segmentation and embeddings cost
    about 1/step each; larger steps give each frame fewer votes. Measured (bench_diarize.py,
    generated interviews and sample.wav): see ``Settings.diarization_step``. Returns the pipeline."""
    if not 0 < step <= 1:
        raise ValueError(f"segmentation step {step!r}: a share of the window, above 0 and at most 1")
    inference = pipeline._segmentation
    inference.step = step * inference.duration
    pipeline.segmentation_step = step
    sincnet = getattr(inference.model, "sincnet", None)
    if isinstance(sincnet, _SharedFirstConvolution):  # its hop follows the window's
        share_first_convolution(pipeline)
    return pipeline


def share_first_convolution(pipeline):
    """Make a loaded ``SpeakerDiarization`` pipeline's segmentation model (a SincNet front end:
    PyanNet, the offline default's) compute its first convolution once per batch of overlapping
    chunks (see ``_SharedFirstConvolution``). Other models are left alone. Returns the pipeline."""
    inference = getattr(pipeline, "_segmentation", None)
    sincnet = getattr(getattr(inference, "model", None), "sincnet", None)
    if sincnet is None or not hasattr(sincnet, "wav_norm1d") or not hasattr(sincnet, "conv1d"):
        return pipeline
    _mix_in(sincnet, _SharedFirstConvolution, "SharedFirstConvolution")
    sincnet.hop = int(round(inference.step * inference.model.hparams.sample_rate))
    return pipeline


# Splitting each batch over threads (``split_batches``). Both models are mostly small LSTMs
# (PyanNet's 4 bidirectional layers of 128, the d-vector's 3 of 256): torch's intra-op threads
# split each tiny per-step matmul and wait at a barrier 300 times per window, which gains little
# on two cores and collapses when a neighbour takes a core (2 threads were 10x slower than 1 at
# load 9 here). Slices of the batch in their own threads, each op single-threaded, keep every
# core busy with whole sequences; each row's output does not depend on its batch neighbours.
_BATCH_POOLS: dict[int, ThreadPoolExecutor] = {}
_BATCH_POOLS_LOCK = threading.Lock()


def _batch_pool(workers: int):
    """A persistent pool of ``workers`` threads whose torch ops run single-threaded."""
    with _BATCH_POOLS_LOCK:
        if workers not in _BATCH_POOLS:
            threads = torch.get_num_threads()
            ready = threading.Barrier(workers + 1)
            pool = ThreadPoolExecutor(workers, thread_name_prefix="rescue-batch")

            def single_threaded():
                torch.set_num_threads(1)  # this thread's OpenMP/MKL setting (and torch's global: restored below)
                torch.get_num_threads()  # torch's once-per-thread setup, now, while the global says 1
                ready.wait()

            for _ in range(workers):  # one task per thread, all started now, so no thread starts later
                pool.submit(single_threaded)
            ready.wait()
            torch.set_num_threads(threads)  # the caller's threads and torch's default for new threads
            _BATCH_POOLS[workers] = pool
        return _BATCH_POOLS[workers]


def _split_forward(forward, pool, workers: int):
    def split(waveforms: torch.Tensor, *args, **kwargs):
        batch = waveforms.shape[0]
        if batch < 2 or args or any(v is not None and not isinstance(v, torch.Tensor) for v in kwargs.values()):
            return forward(waveforms, *args, **kwargs)
        inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()
        bounds = torch.linspace(0, batch, min(workers, batch) + 1).round().long().tolist()

        def part(lo_hi):
            lo, hi = lo_hi
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):  # the caller's modes are per thread
                return forward(waveforms[lo:hi], **{k: None if v is None else v[lo:hi] for k, v in kwargs.items()})

        outputs = list(pool.map(part, zip(bounds, bounds[1:])))
        if not all(isinstance(o, torch.Tensor) for o in outputs):
            return forward(waveforms, **kwargs)  # a model with several outputs: left alone
        return torch.cat(outputs)

    split.plain = forward
    return split


def split_batches(pipeline, workers: int | None = None):
    """Run a loaded ``SpeakerDiarization`` pipeline's segmentation and embedding models on slices
    of each batch in ``workers`` threads (default: torch's thread count, one per core or
    ``OMP_NUM_THREADS``; 1 leaves the models alone). The rows and their outputs are the same as
    one call's. Returns the pipeline."""
    workers = workers or torch.get_num_threads()
    models = [getattr(getattr(pipeline, "_segmentation", None), "model", None),
              getattr(getattr(pipeline, "_embedding", None), "model_", None)]
    for model in models:
        if model is None:
            continue
        plain = getattr(model.forward, "plain", model.forward)
        if workers < 2:
            model.__dict__.pop("forward", None)
            model.__dict__.pop("split_dvectors", None)
            continue
        model.forward = _split_forward(plain, _batch_pool(workers), workers)
        if isinstance(model, DVectorEmbedding):  # embed_chunks (share_partials) batches without forward
            model.__dict__["split_dvectors"] = _split_forward(model._dvectors, _batch_pool(workers), workers)
    return pipeline


# pyannote embeds every (10-s chunk, local speaker) on its own, and its chunks step by 1 s, so
# every second of speech went through the d-vector LSTM many times (1,676 partials for 5 minutes
# of generated interview; 45 % of a run). A 1.6-s partial's d-vector does not depend on the chunk
# it is seen from, so partials are cut once on a grid over the file (``SHARED_PARTIAL_HOP``
# frames apart), a grid partial counts for a speaker in a chunk where the speaker speaks in
# ``SHARED_PARTIAL_ACTIVE`` of its frames and nobody else in any (another voice in a print blurs
# it: allowing it cost sample.wav DER 0.06 -> 0.42), each is embedded once (794 partials), and a
# (chunk, speaker) print is the normalised mean of its partials. The loudness gain (-30 dBFS,
# increase only) is taken over a chunk-long window centred on the partial instead of over the
# chunk (the window made no DER difference). A (chunk, speaker) without such a partial (short
# answers, speech in overlap) keeps forward's recipe on its frames of the chunk. Hop and share
# were chosen on DER (sample.wav, generated couple/family/hour; 20 frames: 1,306 partials).
# The default (diarize._load; RESCUE_DIARIZATION_SHARED_PARTIALS=0 turns it off): 5 min of
# generated interview ran 23x -> 37x realtime, the hour 25x -> 34x (a quiet 2-core machine:
# hour 27x -> 41x, docs/SCALING.md). DER, per-window -> shared
# prints, both with refine's sliver and merge rules: hour 0.0075 -> 0.0076 (the old default,
# per-window without those rules: 0.0079; shared without them: 0.0090, the loss was refine
# keeping pyannote's labels on slivers), 5 min 0.0112 -> 0.0097 (old 0.0118), sample.wav
# 0.061 -> 0.058, couple 0.0082 -> 0.0077, family 0.0181 both.
# benchmarks/bench_diarize.py --per-window-embeddings gives the before figure.
SHARED_PARTIAL_HOP = 40  # mel frames (10 ms each): a partial every 0.4 s
SHARED_PARTIAL_ACTIVE = 0.8  # share of a partial's frames the speaker speaks in (the rest silence)


class _SharedPartials:
    """Mixin for pyannote's ``SpeakerDiarization``: d-vector partials embedded once per file."""

    partial_hop: int = SHARED_PARTIAL_HOP  # 0: pyannote's own get_embeddings (one call per chunk)
    partial_active: float = SHARED_PARTIAL_ACTIVE

    def get_embeddings(self, file, binary_segmentations, exclude_overlap: bool = False, hook=None):
        model = getattr(self._embedding, "model_", None)
        window = binary_segmentations.sliding_window
        per_s = model.hparams.sample_rate / model.HOP if isinstance(model, DVectorEmbedding) else 0  # mel frames
        on_grid = lambda seconds: abs(seconds * per_s - round(seconds * per_s)) < 1e-6  # chunks start on a frame
        if (not per_s or self.partial_hop <= 0 or exclude_overlap or self.training
                or not on_grid(window.step) or not on_grid(window.start)):
            return super().get_embeddings(file, binary_segmentations, exclude_overlap=exclude_overlap, hook=hook)
        waveform, _ = self._audio(file)  # the whole file, mono, at the model's rate
        masks = torch.from_numpy(np.nan_to_num(binary_segmentations.data, nan=0.0))
        with torch.inference_mode():
            embeddings = model.embed_chunks(waveform[0], masks, round(window.start * per_s),
                                            round(window.step * per_s),
                                            round(window.duration * model.hparams.sample_rate),
                                            self.partial_hop, self.partial_active, hook=hook)
        return embeddings.cpu().numpy()  # (chunks, speakers, dimension), as pyannote's


def share_partials(pipeline, hop: int = SHARED_PARTIAL_HOP):
    """Make a loaded ``SpeakerDiarization`` pipeline with the d-vector embedding embed each grid
    partial once per file (see ``_SharedPartials``); ``hop`` 0 restores pyannote's per-chunk
    embeddings. Other pipelines are left alone. Returns the pipeline."""
    if not isinstance(getattr(getattr(pipeline, "_embedding", None), "model_", None), DVectorEmbedding):
        return pipeline
    _mix_in(pipeline, _SharedPartials, "SharedPartials")
    object.__setattr__(pipeline, "partial_hop", int(hop))
    return pipeline


# The d-vector's LSTM (3 layers of 256 over 160 frames per partial) is most of the embeddings'
# time, a third of a diarization run. oneDNN runs an LSTM in bfloat16 1.8x faster than in float32
# on a CPU that computes bfloat16 natively (AVX512_BF16 or AMX: AMD Zen 4 and later, Intel Cooper
# Lake and later); elsewhere it would be emulated, and slower. The prints move by about 1e-3
# (cosine); measured on the held-out files DER did not move (sample.wav 0.058, couple 0.0074,
# family 0.018). The segmentation model's LSTM is left in float32: in bfloat16 sample.wav's DER
# rose to 0.068, past its gate. Results differ from float32's, so the stage's cache key records
# which one ran (``diarize.bfloat16_voice_prints``, ``pipeline.media.keys.diarize_key``).
# A row's result must not depend on the rows beside it (split_batches slices by thread count):
# oneDNN picks other kernels for some small batches (1, 3, 7 rows here), whose bfloat16
# rounding differs, so every call gets whole blocks of BFLOAT16_BLOCK rows (zeros padding).
BFLOAT16_BLOCK = 16


class _Bfloat16DVectors:
    """Mixin for ``DVectorEmbedding``: the LSTM runs on a bfloat16 copy of its weights."""

    def _last_hidden(self, partials: torch.Tensor) -> torch.Tensor:
        n, pad = partials.shape[0], -partials.shape[0] % BFLOAT16_BLOCK
        rows = partials.to(torch.bfloat16)
        if pad:
            rows = torch.cat([rows, rows.new_zeros(pad, *rows.shape[1:])])
        _, (hidden, _) = self.__dict__["lstm_bfloat16"](rows)
        return hidden[-1, :n].float()


def bfloat16_dvectors(pipeline):
    """Make a loaded pipeline's d-vector embedding run its LSTM in bfloat16 (see above); the
    float32 weights stay the model's own. Other embeddings are left alone. Returns the pipeline."""
    model = getattr(getattr(pipeline, "_embedding", None), "model_", None)
    if not isinstance(model, DVectorEmbedding):
        return pipeline
    model.__dict__["lstm_bfloat16"] = copy.deepcopy(model.lstm).to(torch.bfloat16)  # not a registered module
    _mix_in(model, _Bfloat16DVectors, "Bfloat16")
    return pipeline
