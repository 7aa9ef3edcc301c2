"""The WhisperX path end to end on tiny models the set-up builds (real whisperx, faster-whisper,
CTranslate2, wav2vec2 alignment and pyannote code; random weights, so the words are gibberish):
ingest -> ASR -> align -> diarize -> assign -> draft rows, through the per-interview functions."""
from __future__ import annotations

import pytest

from pipeline.media import diarize, rttm
from pipeline.catalog import Catalog
from pipeline.media.ingest import ingest_batch
from pipeline.synthetic import interviews as synth
from pipeline.media import transcribe
from pipeline.media import turns
from pipeline.paths import DataRoot
from pipeline.synthetic.test_models import TINY_ALIGN, TINY_WHISPER

pytestmark = pytest.mark.slow


def test_whisperx_chain_to_draft_rows(tmp_path, models_dir, diar_pipeline):
    batch = synth.make_batch(tmp_path / "batch", [{"name": "c1", "scenario": "couple", "seed": 3, "n_rows": 8}])
    root = DataRoot(tmp_path / "data")
    report = ingest_batch(batch, root)
    [sid] = report.done
    entry = Catalog.read(root).ingested(sid)

    tr = transcribe.transcribe_sample(entry, root, backend="whisperx", asr_model=models_dir / TINY_WHISPER,
                                      align_model=models_dir / TINY_ALIGN, batch_size=4, max_new_tokens=24)
    assert tr.kind == "word" and len(tr.units) > 0
    timed = [u for u in tr.units if u.start is not None]
    assert timed and all(0 <= u.start <= u.end <= entry.duration_s + 0.5 for u in timed)
    assert root.transcript(sid).exists()

    hyp = diarize.diarize_audio(root.resolve(entry.audio_path), num_speakers=3, pipeline=diar_pipeline)
    rttm.write_rttm(hyp, root.rttm(sid))
    table = turns.segment_sample(entry, root)
    rows = table.to_pylist()
    assert rows and [r["row_index"] for r in rows] == list(range(1, len(rows) + 1))
    assert {r["primary_speaker"] for r in rows} <= {"Therapist", *entry.participants}
    assert all(0 <= r["start_time"] < r["end_time"] <= entry.duration_s + 1.5 for r in rows)
    words_in_rows = sum(len(r["dialogue_cleaned"].split()) + sum(len(b["content"].split())
                        for b in r["background_dialogue"]) for r in rows)
    assert words_in_rows == sum(len(u.text.split()) for u in tr.units)  # no word lost
    assert root.drafts(sid).exists()
