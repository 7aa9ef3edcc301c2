"""Tiny models that exist to exercise code in tests, never to transcribe (not loaded in production).

* ``build_tiny_whisper`` / ``build_tiny_aligner`` build tiny random-weight WhisperX (CTranslate2)
  and wav2vec2 alignment models so that tests run the real WhisperX code paths offline. Their
  text output is meaningless.
* ``ensure_punkt_tab`` writes the empty NLTK ``punkt_tab`` files whisperx.align's sentence
  splitter loads (``nltk.download`` cannot reach its server offline); ``transcribe.load_aligner``
  looks for them under ``<models dir>/nltk_data``.
* ``prepare_test_models`` builds all of them beside the offline diarization pipeline
  (``rescue models prepare-offline --test-models``, the tests' ``models_dir`` fixture).

Every builder is idempotent: a finished directory carries a ``.complete`` marker and is reused.
"""
from __future__ import annotations

import ast
import base64
import json
import shutil
import tarfile
import tempfile
from pathlib import Path

import torch

from pipeline.media.models import fetch_package_file, finish_dir, is_complete, prepare_offline_diarization

TINY_WHISPER = "tiny-whisper-ct2"
TINY_ALIGN = "tiny-wav2vec2-align"
WHISPER_SDIST = "openai_whisper-20250625.tar.gz"
NLTK_DATA = "nltk_data"


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
    if is_complete(final):
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
        import ctranslate2  # heavy
        out = Path(tempfile.mkdtemp(prefix=".whisper-ct2-", dir=models_dir))
        shutil.rmtree(out)
        ctranslate2.converters.TransformersConverter(
            str(work / "hf"), copy_files=["tokenizer.json", "preprocessor_config.json"]
        ).convert(str(out), quantization="int8")
        return finish_dir(out, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)


W2V_VOCAB = ["<pad>", "<s>", "</s>", "<unk>", "|", "E", "T", "A", "O", "N", "I", "H", "S", "R", "D", "L",
             "U", "M", "W", "C", "F", "G", "Y", "P", "B", "V", "K", "'", "X", "J", "Q", "Z"]


def build_tiny_aligner(models_dir: Path) -> Path:
    """A random-weight Wav2Vec2ForCTC (hidden 32, 2 layers) + processor, character vocab of wav2vec2-base-960h."""
    models_dir = Path(models_dir)
    models_dir.mkdir(parents=True, exist_ok=True)
    final = models_dir / TINY_ALIGN
    if is_complete(final):
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
    return finish_dir(tmp, final)


PUNKT_FILES = ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab")


def ensure_punkt_tab(models_dir: Path) -> Path:
    """NLTK data for whisperx.align: empty punkt_tab files make an untrained sentence splitter
    that still splits on . ? ! (nltk.download cannot reach its server offline)."""
    root = Path(models_dir) / NLTK_DATA
    english = root / "tokenizers" / "punkt_tab" / "english"
    english.mkdir(parents=True, exist_ok=True)
    for name in PUNKT_FILES:
        (english / name).touch()
    return root


def prepare_test_models(models_dir: Path) -> dict[str, Path]:
    """The offline diarization pipeline, the punkt stub and the tiny WhisperX + alignment models."""
    return {"diarization": prepare_offline_diarization(models_dir), "nltk_data": ensure_punkt_tab(models_dir),
            "whisper": build_tiny_whisper(models_dir), "align": build_tiny_aligner(models_dir)}
