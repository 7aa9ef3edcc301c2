"""A round labelled by fewer annotators than it requires is refused by agreement and gold,
naming who is missing; nothing is written to the corpus (no server needed)."""
from __future__ import annotations

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from pipeline import corpus, schemas, store
from pipeline.annotation.pushed import record_pushed
from pipeline.annotation.rounds import load_round
from pipeline.cli import app
from pipeline.paths import DataRoot
from pipeline.quality import agreement, gold
from pipeline.synthetic import corpus as synth_corpus
from pipeline.synthetic.annotators import SimulatedAnnotator

A, B = "ann-a@x.test", "ann-b@x.test"


@pytest.fixture(scope="module")
def samples():
    return synth_corpus.generate(scale=0.03, seed=7)


def _root_with(tmp_path, samples, annotators, pushed_to=(A, B), round_name="emotion"):
    root = tmp_path / "data"
    corpus.save_corpus(DataRoot(root), samples)
    rnd = load_round(round_name)
    lines = []
    for who in annotators:
        for line in SimulatedAnnotator(who, {"*": 0.0}, seed=1).label_rows(rnd, samples):
            lines.append({**line, "annotator": who})
    store.write_parquet(pa.Table.from_pylist(lines, schema=schemas.LABELS), DataRoot(root).labels(round_name))
    record_pushed(DataRoot(root), round_name, [(s["scenario"], who, s["sample_id"]) for s in samples for who in pushed_to])
    return root


def test_agreement_refuses_one_annotator_and_names_the_missing_one(tmp_path, samples):
    root = _root_with(tmp_path, samples, [A])
    with pytest.raises(agreement.TooFewAnnotators) as err:
        agreement.measure_round(DataRoot(root), "emotion")
    msg = str(err.value)
    assert "needs 2 annotators" in msg and A in msg and f"missing: {B}" in msg and "pull the round for them" in msg
    assert " -a " not in msg and "--" not in msg  # a library message names no CLI flag
    assert not DataRoot(root).gate("emotion").exists()  # no gate recorded from one person's answers


def test_gold_refuses_one_annotator_and_leaves_the_corpus_as_it_was(tmp_path, samples):
    root = _root_with(tmp_path, samples, [A])
    before = {p.name: p.read_bytes() for p in DataRoot(root).corpus_dir().iterdir()}
    with pytest.raises(agreement.TooFewAnnotators, match=B):
        gold.build_and_store(DataRoot(root))
    assert {p.name: p.read_bytes() for p in DataRoot(root).corpus_dir().iterdir()} == before


def test_without_a_push_record_the_message_still_says_what_to_do(tmp_path, samples):
    root = _root_with(tmp_path, samples, [A], pushed_to=())
    with pytest.raises(agreement.TooFewAnnotators, match="rescue annotate pull emotion"):
        agreement.measure_round(DataRoot(root), "emotion")


def test_two_annotators_pass(tmp_path, samples):
    root = _root_with(tmp_path, samples, [A, B])
    assert agreement.measure_round(DataRoot(root), "emotion").report.fields


def test_the_cli_says_so_without_a_traceback(tmp_path, samples):
    root = _root_with(tmp_path, samples, [A])
    runner = CliRunner(env={"COLUMNS": "200"})
    for args in (["agreement", "emotion"], ["gold", "build"]):
        res = runner.invoke(app, [*args, "--data-root", str(root)])
        assert res.exit_code != 0 and "Traceback" not in res.output, res.output
        assert B in res.output and "needs 2 annotators" in res.output, res.output


def test_a_sample_one_annotator_has_not_labelled_yet_waits_and_is_not_unanimous(tmp_path, samples):
    root = _root_with(tmp_path, samples, [A, B])
    labels_path = DataRoot(root).labels("emotion")
    import pyarrow.parquet as pq

    late = samples[0]["sample_id"]
    table = pq.read_table(labels_path).to_pylist()
    store.write_parquet(pa.Table.from_pylist([r for r in table if not (r["sample_id"] == late and r["annotator"] == B)],
                                             schema=schemas.LABELS), labels_path)
    before = {s["sample_id"]: s for s in corpus.load_corpus(DataRoot(root))}[late]
    out = gold.build_and_store(DataRoot(root))
    assert out.summary["waiting_for_annotators"] == {late: [f"emotion: 1 of 2 annotators ({A})"]}
    assert all(p["sample_id"] != late for p in out.result.provenance.to_pylist())
    assert {s["sample_id"]: s for s in corpus.load_corpus(DataRoot(root))}[late] == before  # not changed
