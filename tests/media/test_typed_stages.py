"""Stages take the data root and typed records. Given a sample's ``Ingested``
record, transcript, diarize and segment run with the catalog moved away and read it not once;
a batch ingest reads it once (and once more per line it records, under the lock); a command reads
it once however many samples it names, and writes the same bytes as the library calls."""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.catalog import Ingested
from pipeline.cli import app
from pipeline.media import diarize, transcribe, turns
from pipeline.media.ingest import ingest_batch
from pipeline.media.rttm import read_rttm
from pipeline.media.transcribe import Transcribed
from pipeline.media.turns import Segmented
from pipeline.paths import DataRoot
from pipeline.store import sha256_file
from pipeline.synthetic import interviews as synth

pytestmark = pytest.mark.slow  # two interviews diarized by the real offline pyannote pipeline, twice


@pytest.fixture()
def catalog_reads(monkeypatch) -> list[str]:
    """Every read of a catalog file, counted where pyarrow opens it (whoever reads it, however
    they imported the reader)."""
    reads: list[str] = []
    real = pq.read_table

    def counting(source, *args, **kwargs):
        if Path(str(source)).name == "catalog.parquet":
            reads.append(str(source))
        return real(source, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", counting)
    return reads


def test_stages_run_on_their_records_and_commands_read_the_catalog_once(tmp_path, models_dir, diar_pipeline,
                                                                        catalog_reads):
    from pipeline.media.models import OFFLINE_DIARIZATION

    batch = synth.make_batch(tmp_path / "batch", [{"name": "a", "scenario": "couple", "seed": 3, "n_rows": 6},
                                                  {"name": "b", "scenario": "family", "seed": 4, "n_rows": 6}])
    with (batch / "manifest.csv").open("a") as fh:
        fh.write("g/missing,couple,gone.mp4,A;B,,\n")
    root = DataRoot(tmp_path / "data")
    report = ingest_batch(batch, root)
    assert report.done == ["synthetic_couple/a", "synthetic_family/b"] and list(report.quarantined) == ["g/missing"]
    catalog_reads.clear()
    again = ingest_batch(batch, root)
    assert again.cached == report.done and list(again.quarantined) == ["g/missing"]
    assert len(catalog_reads) == 1 + 1  # the batch's one read + the quarantined line recorded again (under the lock)
    records = [r.ingested for r in report.results if r.ingested]
    assert all(isinstance(r, Ingested) for r in records)

    # the stages get the records: with the catalog gone, a stage that looked its sample up would fail
    catalog_reads.clear()
    away = root.catalog().rename(tmp_path / "catalog.away")
    drafts = {}
    for ing in records:
        sid = ing.sample_id
        done = transcribe.transcribe_stage(ing, root)
        assert done == Transcribed(sid, "subtitles", "cue", done.units, done.warnings,
                                   sha256_file(root.transcript(sid)))
        assert done.units == len(transcribe.read_transcript(sid, root).units) > 0
        heard = diarize.diarize_stage(ing, root, pipeline=diar_pipeline)
        turns_ = read_rttm(root.rttm(sid))
        assert heard.sha256 == sha256_file(root.rttm(sid)) and heard.turns == len(turns_) > 0
        assert heard.speakers == tuple(sorted({t.speaker for t in turns_}))
        assert len(heard.speakers) == 1 + len(ing.participants)  # the record's participants set the count
        seg = turns.segment_stage(ing, root)
        assert seg == Segmented(sid, ing.scenario, ing.participants, ing.duration_s,
                                pq.read_table(root.drafts(sid)).num_rows, sha256_file(root.drafts(sid)))
        assert seg.rows > 0
        drafts[sid] = seg.drafts_sha256
    assert catalog_reads == [] and not root.catalog().exists()

    # the commands: one catalog read each for three samples (one quarantined: named, the others run)
    away.rename(root.catalog())
    a, b = drafts
    runner = CliRunner()
    for command in (["transcribe", a, b, "g/missing"],
                    ["diarize", b, "g/missing", "--pipeline", str(models_dir / OFFLINE_DIARIZATION)],
                    ["segment", a, b, "g/missing"]):
        catalog_reads.clear()
        out = runner.invoke(app, [*command, "--data-root", str(root)])
        assert out.exit_code == 1, out.output  # the quarantined sample failed
        assert "g/missing: quarantined at ingest (gone.mp4: file not found)" in out.output, out.output
        assert len(catalog_reads) == 1, (command, catalog_reads)
    assert {sid: sha256_file(root.drafts(sid)) for sid in drafts} == drafts  # the library's bytes
