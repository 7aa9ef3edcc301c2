"""Agreement reports a maintainer can act on: overrides where they apply, readings in named bands,
seeded bootstrap intervals, a warning with too few units, the disagreeing rows with a pointer to
their adjudication task, free-text measures, readable plots."""
from __future__ import annotations

import json
import struct

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from pipeline import corpus, schemas, store
from pipeline.annotation.rounds import load_round
from pipeline.cli import app
from pipeline.paths import DataRoot
from pipeline.quality import measures
from pipeline.synthetic.annotators import SimulatedAnnotator


def _labels(rnd, samples, error, n=2):
    lines = [x for i in range(n) for x in SimulatedAnnotator(f"a{i}", {"*": error}, seed=i).label_rows(rnd, samples)]
    return pa.Table.from_pylist(lines, schema=schemas.LABELS)


def _png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    return struct.unpack(">II", head[16:24])


def test_override_is_shown_where_it_applies(tmp_path, truth_samples, draft_of):
    root = tmp_path / "data"
    corpus.save_corpus(DataRoot(root), draft_of(truth_samples))
    store.write_parquet(_labels(load_round("relation"), truth_samples, 0.5), DataRoot(root).labels("relation"))
    runner = CliRunner(env={"COLUMNS": "220"})
    low = runner.invoke(app, ["agreement", "relation", "--data-root", str(root)])
    assert low.exit_code == 3 and "blocks a release" in low.output
    rdir = DataRoot(root).agreement_report_dir("relation")
    assert "blocks a release" in (rdir / "report.md").read_text()
    over = runner.invoke(app, ["agreement", "relation", "--data-root", str(root), "--override",
                               "pilot round, re-annotation planned", "--by", "lead"])
    assert over.exit_code == 0, over.output
    for name in ("report.md", "report.html"):
        text = (rdir / name).read_text()
        assert "released under an override recorded by lead" in text and "pilot round, re-annotation planned" in text
        assert "blocks a release" not in text, name
    assert json.loads((rdir / "agreement.json").read_text())["override"]["by"] == "lead"
    # measured again on the same labels: still shown as overridden, and the command does not fail
    again = runner.invoke(app, ["agreement", "relation", "--data-root", str(root)])
    assert again.exit_code == 0 and "released under the override recorded by lead" in again.output
    assert "released under an override recorded by lead" in (rdir / "report.md").read_text()
    assert "95% CI" in again.output and "Krippendorff (2004)" in again.output


def test_report_reads_fields_lists_disagreements_and_plots_are_readable(tmp_path, truth_samples):
    rnd = load_round("emotion")
    report = measures.round_agreement(_labels(rnd, truth_samples, 0.15), "emotion", rnd)
    from pipeline.quality import reports

    paths = reports.write_report(report, tmp_path / "r")
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## How to read this report" in md and "Krippendorff (2004)" in md
    assert "`presence`: optional records" in md and "`nominal`: categories" in md
    ut = next(f for f in report.fields if f.field == "utterance_type")
    assert ut.ci_low is not None and ut.ci_low <= ut.alpha <= ut.ci_high
    assert ut.reading.startswith(f"alpha {ut.alpha:.3f} (95% CI") and measures.band(ut.alpha) in ut.reading
    assert f"**Reading:** {ut.reading}" in md
    # disagreeing rows: sample, row, each annotator's value, and the adjudication project
    assert ut.n_disagreeing > 0 and len(ut.disagreements) == min(ut.n_disagreeing, measures.MAX_DISAGREEMENTS)
    d = ut.disagreements[0]
    assert set(d["values"]) == {"sim-a0", "sim-a1"} and len(set(d["values"].values())) == 2
    assert f"| {d['sample_id']} | {d['row_index']} |" in md
    assert "### Disagreeing rows" in md and 'Label Studio project "Adjudicate emotion (' in md
    assert "rescue-adjudication:emotion/" in md
    # free text: tone has its documented measure
    tone = next(t for t in report.text_fields if t.field == "tone_of_voice")
    assert tone.measure == "word_overlap" and 0 < tone.value < 1 and tone.n_units > 0
    assert "### `tone_of_voice` (word_overlap)" in md
    # plots: large enough to read (8+ inches at 110 dpi)
    w, h = _png_size(paths["annotators_plot"])
    assert w >= 800 and h >= 500
    w, h = _png_size(tmp_path / "r" / "utterance_type.confusion.0-1.png")
    assert w >= 700


def test_intervals_are_seeded_and_narrow_with_more_units(truth_samples):
    rnd = load_round("emotion")
    labels = _labels(rnd, truth_samples, 0.15)
    a = measures.round_agreement(labels, "emotion", rnd)
    b = measures.round_agreement(labels, "emotion", rnd)
    assert [(f.ci_low, f.ci_high) for f in a.fields] == [(f.ci_low, f.ci_high) for f in b.fields]
    few = measures.round_agreement(_labels(rnd, truth_samples[:3], 0.15), "emotion", rnd)
    wide = next(f for f in few.fields if f.field == "utterance_type")
    narrow = next(f for f in a.fields if f.field == "utterance_type")
    assert (wide.ci_high - wide.ci_low) > (narrow.ci_high - narrow.ci_low)


def test_too_few_units_are_warned(truth_samples):
    rnd = load_round("emotion")
    tiny = [dict(truth_samples[0], rows=truth_samples[0]["rows"][:10])]
    report = measures.round_agreement(_labels(rnd, tiny, 0.1), "emotion", rnd)
    ut = next(f for f in report.fields if f.field == "utterance_type")
    assert ut.n_pairable < measures.MIN_UNITS
    assert ut.warnings and "minimum 50" in ut.warnings[0] and "too few" in ut.reading


@pytest.mark.parametrize("alpha,expected", [(0.85, "reliable"), (0.70, "tentative"), (0.40, "unreliable")])
def test_reading_bands(alpha, expected):
    text = measures.reading(alpha, 0.667, (alpha - 0.05, alpha + 0.05), 500)
    assert measures.band(alpha) == expected and f": {expected}" in text
    assert "spans" in measures.reading(0.80, 0.8, (0.75, 0.85), 500)  # interval across a band boundary
    assert "undefined" in measures.reading(None, 0.8, None, 0)
    assert "Krippendorff (2004)" in measures.BANDS_SOURCE


def test_transcript_text_has_a_word_error_rate(truth_samples, draft_of):
    jiwer = pytest.importorskip("jiwer")
    rnd = load_round("transcript")
    samples = draft_of(truth_samples)[:4]
    report = measures.round_agreement(_labels(rnd, samples, 0.3), "transcript", rnd)
    (t,) = [t for t in report.text_fields if t.field == "dialogue_cleaned"]
    assert t.measure == "wer" and t.value > 0 and t.n_differing > 0
    ex = t.examples[0]
    a, b = ex["values"]["sim-a0"], ex["values"]["sim-a1"]
    assert a != b and jiwer.wer(a.lower(), b.lower()) > 0
    same = measures.round_agreement(_labels(rnd, samples, 0.0), "transcript", rnd)
    assert next(t for t in same.text_fields if t.field == "dialogue_cleaned").value == 0.0
