"""Resemblyzer's d-vector speaker encoder (GE2E, Apache-2.0) as a pyannote embedding ``Model``.

The offline default diarization pipeline (``pipeline.media.models``) embeds voices with it; its
checkpoint records this module path (pyannote imports the class from there on every load), so a
move of the class means rebuilding the model directory (``models.OFFLINE_BUILD``). Only the
model's own recipe is here; how pyannote is made to call it faster is ``pipeline.media.speedups``.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from pyannote.audio import Model


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
        raw = torch.relu(self.linear(self._last_hidden(partials)))
        return raw / raw.norm(dim=1, keepdim=True).clamp_min(1e-8)

    def _last_hidden(self, partials: torch.Tensor) -> torch.Tensor:
        """The LSTM's last layer's final hidden state, (n, 256) (``speedups.bfloat16_dvectors`` may
        run it in bfloat16)."""
        _, (hidden, _) = self.lstm(partials)
        return hidden[-1]

    def embed_chunks(self, wav: torch.Tensor, masks: torch.Tensor, start: int, step: int, chunk_samples: int,
                     hop: int, active: float, hook=None, batch: int = 256) -> torch.Tensor:
        """pyannote's (chunk, local speaker) prints of a whole file, each grid partial embedded once
        (see ``speedups._SharedPartials``).

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
        """``_dvectors`` in one call, or on slices of the batch in threads where
        ``speedups.split_batches`` installed ``split_dvectors`` on this instance."""
        split = self.__dict__.get("split_dvectors")
        return split(partials) if split is not None else self._dvectors(partials)

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
