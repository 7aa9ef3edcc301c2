"""The paper's shapes in every release (``paper/``), export-paper, reuse with the new files, and the
dataset card as Hugging Face reads it. ``paper/data`` read the way the authors' scripts read it,
all six tasks rebuilt from it: test_authors_layout.py. Round trips: test_round_trip.py.
"""
from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import store
from pipeline.benchmark import paper_export, release
from pipeline.benchmark.card import CardOptions
from pipeline.paths import DataRoot

S1 = "alan_and_evelyn/001_s01e01_ct25_segment04"


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


ER_KEYS = ["sample_id", "couple", "row_index", "timestamp", "speaker", "target", "dialogue", "background_dialogue",
           "tone_of_voice", "body_posture", "facial_expressions", "self_directed_behavior", "interaction_behavior",
           "prior_context", "gold_internal_emotion", "gold_intensity_score", "task", "instance_id", "scenario",
           "source_sample_id", "source_file"]


# --- paper/ in a release --------------------------------------------------------------------

def test_head_release_has_the_paper_shapes(head_input, benchmark_head_path, tmp_path):
    res = release.build_release(head_input, "1.0.0", DataRoot(tmp_path))
    paper = res.path / "paper"
    assert (paper / "benchmark.jsonl").read_bytes() == benchmark_head_path.read_bytes()  # byte-identical round trip
    lines = benchmark_head_path.read_text(encoding="utf-8").splitlines()
    for line in lines:
        # paper/data: the same sample, each therapist row with its own relation_cycle_reason / _evidence_rows
        published = json.loads(line)
        expect = copy.deepcopy(published)
        for prev, row in zip(expect["rows"], expect["rows"][1:]):
            if row["primary_speaker"] == "Therapist":
                at = list(row).index("relation_cycle_state") + 1
                items = list(row.items())
                items[at:at] = [("relation_cycle_reason", prev["relation_pattern_reason"]),
                                ("relation_cycle_evidence_rows", prev["relation_pattern_evidence_rows"])]
                row.clear()
                row.update(items)
        assert expect != published
        text = (paper / "data" / f"{published['sample_id']}.json").read_text(encoding="utf-8")
        assert text == json.dumps(expect, ensure_ascii=False) + "\n"
    er = [json.loads(x) for x in (paper / "er.jsonl").read_text().splitlines()]
    assert list(er[0]) == ER_KEYS
    assert er[0]["instance_id"] == f"{S1}__row6" and [c["row_index"] for c in er[0]["prior_context"]] == [1, 2, 3, 4, 5]
    assert er[0]["couple"] == "alan_and_evelyn" and er[0]["source_file"] == f"data/therapy_merged_all/{S1}.json"
    # the streamed writer and the table-based one (release.paper_task_records) agree line for line
    from pipeline.benchmark import tasks
    from pipeline.rows import samples_to_tables

    samples_t, _ = samples_to_tables(head_input.samples)
    for task in ("er", "vp"):
        table = tasks.build_task(task, head_input.samples, context_size=-1)
        expect = [json.dumps(r, ensure_ascii=False) for r in release.paper_task_records(task, table, samples_t)]
        assert (paper / f"{task}.jsonl").read_text(encoding="utf-8").splitlines() == expect, task
    vp = json.loads((paper / "vp.jsonl").read_text().splitlines()[0])
    assert list(vp)[:6] == ["sample_id", "couple", "row_index", "timestamp", "speaker", "participants"]
    assert "gold_viewpoints" in vp and vp["task"] == "vp"
    # every paper file is in the manifest with its sha256; nothing lies outside the release
    listed = {k: v for k, v in res.manifest["files"].items() if k.startswith("paper/")}
    on_disk = {k for k in _files(res.path) if k.startswith("paper/")}
    assert set(listed) == on_disk and len(on_disk) == 3 + len(lines)
    for rel, info in listed.items():
        assert info["sha256"] == store.sha256_file(res.path / rel) and info["bytes"] == (res.path / rel).stat().st_size
        assert (res.path / rel).resolve().is_relative_to(res.path.resolve())
    # from the Parquet tables (export-paper) the same bytes as from the published JSONL
    paper_export.export_paper(res.path, tmp_path / "exported")
    assert _files(tmp_path / "exported") == {k: v for k, v in _files(res.path).items() if k.startswith("paper/")}


def test_export_paper_writes_the_same_bytes(small_input, tmp_path):
    from typer.testing import CliRunner

    from pipeline.cli import app

    res = release.build_release(small_input, "1.0.0", DataRoot(tmp_path))
    mine = {k: v for k, v in _files(res.path).items() if k.startswith("paper/")}
    files = paper_export.export_paper(res.path, tmp_path / "out")
    assert {k: v for k, v in _files(tmp_path / "out").items()} == mine
    assert {k: v["sha256"] for k, v in files.items()} == {k: res.manifest["files"][k]["sha256"] for k in files}
    with pytest.raises(store.AlreadyExists):
        paper_export.export_paper(res.path, tmp_path / "out")
    out = CliRunner().invoke(app, ["release", "export-paper", "1.0.0", str(tmp_path / "cli"), "--data-root", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert _files(tmp_path / "cli") == mine
    bad = CliRunner().invoke(app, ["release", "export-paper", "9.9.9", str(tmp_path / "x"), "--data-root", str(tmp_path)])
    assert bad.exit_code == 1 and "9.9.9" in bad.output


def test_clips_are_relative_to_the_release_and_only_where_they_exist(head_input):
    from pipeline.benchmark import tasks
    from pipeline.rows import samples_to_tables

    samples_t, _ = samples_to_tables(head_input.samples)
    er = tasks.build_task("er", head_input.samples, context_size=-1)
    clips = {(S1, 6): ("media/clips/a/006.mp4", 10.83), (S1, 1): ("media/clips/a/001.mp4", 6.08)}
    rec = next(paper_export.paper_task_records("er", er, samples_t, clips))
    assert rec["clip_path"] == "media/clips/a/006.mp4" and rec["clip_duration_sec"] == 10.83
    assert list(rec).index("clip_path") == list(rec).index("gold_intensity_score") + 1  # the released order
    assert rec["prior_context"][0]["clip_path"] == "media/clips/a/001.mp4"
    assert "clip_path" not in rec["prior_context"][1]
    with pytest.raises(paper_export.PaperExportError, match="relative"):
        next(paper_export.paper_task_records("er", er, samples_t, {(S1, 6): ("/Users/x/006.mp4", 1.0)}))


def test_sample_files_never_leave_the_release(tmp_path):
    from pipeline.paths import InvalidId

    with pytest.raises(InvalidId):
        paper_export.sample_file("../escape")
    with pytest.raises(InvalidId):
        paper_export.sample_file("/abs/path")
    assert paper_export.sample_file("family_therapy/smiths/002") == "paper/data/family_therapy/smiths/002.json"


# --- reuse compares the new files too ---------------------------------------------------------

def test_reuse_compares_layout_card_and_files(small_input, tmp_path):
    first = release.build_or_reuse(small_input, "1.0.0", DataRoot(tmp_path))
    assert release.build_or_reuse(small_input, "1.0.0", DataRoot(tmp_path)).reused
    with pytest.raises(store.AlreadyExists, match="dataset card configuration"):
        release.build_or_reuse(small_input, "1.0.0", DataRoot(tmp_path), card=CardOptions(license="cc-by-nc-4.0"))
    # a release written before paper/ existed (layout 1) is not "the same" any more
    manifest = json.loads((first.path / "manifest.json").read_text())
    old = dict(manifest, layout=1)
    (first.path / "manifest.json").write_text(store.canonical_json(old))
    with pytest.raises(store.AlreadyExists, match="file layout .* export-paper"):
        release.build_or_reuse(small_input, "1.0.0", DataRoot(tmp_path))
    (first.path / "manifest.json").write_text(store.canonical_json(manifest))
    (first.path / "paper" / "er.jsonl").unlink()
    with pytest.raises(store.AlreadyExists, match="missing, e.g. paper/er.jsonl"):
        release.build_or_reuse(small_input, "1.0.0", DataRoot(tmp_path))


# --- the dataset card ---------------------------------------------------------------------------

def _card(path: Path):
    hub = pytest.importorskip("huggingface_hub")
    return hub.DatasetCard.load(path / "README.md")


def _write_round(root: Path, name: str, annotators: list[str], passed: bool) -> None:
    dr = DataRoot(root)
    gate = {"round": name, "passed": passed, "labels_sha256": "ab" * 32,
            "failing": [] if passed else [{"field": "utterance_type", "metric": "nominal", "alpha": 0.41,
                                           "threshold": 0.667}],
            "fields": [{"field": "utterance_type", "metric": "nominal", "alpha": 0.91 if passed else 0.41,
                        "threshold": 0.667, "n_units": 40, "n_annotators": len(annotators)}]}
    store.atomic_write_text(dr.gate(name), store.canonical_json(gate))
    t = pa.table({"annotator": annotators * 2, "sample_id": ["s/1"] * len(annotators) + ["s/2"] * len(annotators),
                  "row_index": [1] * (2 * len(annotators))})
    dr.labels(name).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(t, dr.labels(name))


def test_card_parts_for_real_data(head_input, tmp_path):
    from pipeline.quality import gates

    _write_round(tmp_path, "emotion", ["ann1@example.org", "ann2@example.org", "ann3@example.org"], passed=False)
    _write_round(tmp_path, "relation", ["ann1@example.org", "ann2@example.org"], passed=True)
    gates.record_override(DataRoot(tmp_path), "emotion", "pilot round; guidelines revised for the next batch", "maintainer")
    # the same samples given as a file claim none of the data root's rounds, gates or overrides
    res = release.build_release(head_input, "0.9.0", DataRoot(tmp_path))
    assert res.manifest["annotation"]["rounds"] == [] and res.manifest["agreement_gates"] == []
    text = _card(res.path).text
    assert "pilot round" not in text and "no annotation round of this data root produced them" in text
    # as the data root's corpus, they carry its rounds
    head_input = dataclasses.replace(head_input, from_data_root=True)
    res = release.build_release(head_input, "1.0.0", DataRoot(tmp_path))
    card = _card(res.path)
    data = card.data.to_dict()
    assert data["license"] == "other" and data["license_name"] == "rescue-release-terms"
    assert data["size_categories"] == ["n<1K"] and "text-classification" in data["task_categories"]
    assert data["annotations_creators"] == ["expert-generated"] and "synthetic" not in data.get("tags", [])
    info = {c["config_name"]: c for c in data["dataset_info"]}
    assert set(info) == {"samples", "rows", "itp", "rpp", "stp", "ssp", "er", "vp"}
    itp = {f["name"]: f for f in info["itp"]["features"]}
    assert itp["label"]["dtype"]["class_label"]["names"] == {"0": "no", "1": "yes"}
    rpp = {f["name"]: f for f in info["rpp"]["features"]}["label"]["dtype"]["class_label"]["names"]
    assert "pursue_withdraw" in rpp.values() and "cooperative_family_alliance" in rpp.values()
    assert "class_label" in {f["name"]: f for f in info["ssp"]["features"]}["label"]["dtype"]
    assert info["itp"]["splits"] == [{"name": "test", "num_bytes": res.manifest["files"]["data/itp/test.parquet"]["bytes"],
                                      "num_examples": 30}]
    text = card.text
    for section in ("## Licence", "## Files in the paper's shapes", "## Label distributions", "## How the data was built",
                    "### Agreement per round and field", "### Overrides", "## Sensitive data", "## Consent",
                    "## Intended use", "## Out-of-scope use", "## Limitations", "## Citation"):
        assert section in text, section
    assert "the source videos apply" in text
    assert "@misc{hu2026rescuebench" in text and "PLACEHOLDER" in text and "arXiv" in text
    assert "@misc{rescue_release_1_0_0" in text
    assert "pilot round; guidelines revised for the next batch" in text and "by maintainer" not in text
    assert "released on the decision of maintainer" in text
    assert "Krippendorff 2004" in text
    dist = text.split("## Label distributions")[1].split("##")[0]
    for task in ("ITP", "RPP", "STP", "SSP", "ER", "VP"):
        assert f"| {task} | couple |" in dist, task
    assert "SYNTHETIC" not in text and "ann1@example.org" not in text  # annotators are counts, never names
    rounds = {r["round"]: r for r in res.manifest["annotation"]["rounds"]}
    assert rounds["emotion"]["annotators"] == 3 and rounds["emotion"]["override"]["by"] == "maintainer"
    assert rounds["relation"]["override"] is None
    # "pre-filled" is what the pushes really pre-filled (their record), not what the round could
    # pre-fill: the emotion round above was never pushed here, so nothing
    assert rounds["emotion"]["prefilled"] == [] and "| emotion | 3 |" in text
    _write_round(tmp_path / "t", "transcript", ["ann1@example.org", "ann2@example.org"], passed=True)
    from pipeline.annotation import pushed
    pushed.record_pushed(DataRoot(tmp_path / "t"), "transcript", [("couple", "ann1@example.org", "s/1")],
                         {"s/1": ["dialogue_cleaned", "primary_speaker"], "s/2": ["target"]})
    res = release.build_release(head_input, "1.0.0", DataRoot(tmp_path / "t"))
    assert res.manifest["annotation"]["rounds"][0]["prefilled"] == ["dialogue_cleaned", "primary_speaker", "target"]
    assert ("| transcript | 2 | 0 | 2 | 0 | dialogue_cleaned, primary_speaker, target | passed |"
            in (res.path / "README.md").read_text())


def test_card_license_is_configurable(small_input, tmp_path):
    opts = CardOptions(license="cc-by-nc-4.0", license_text="Research use only.",
                       paper_bibtex="@article{x, title={Y}}")
    res = release.build_release(small_input, "1.0.0", DataRoot(tmp_path), card=opts)
    card = _card(res.path)
    assert card.data.license == "cc-by-nc-4.0" and "license_name" not in card.data.to_dict()
    assert "Research use only." in card.text and "@article{x, title={Y}}" in card.text


def test_synthetic_corpus_and_simulated_annotators_get_a_banner(small_input, tmp_path):
    res = release.build_release(small_input, "1.0.0", DataRoot(tmp_path / "a"))
    card = _card(res.path)
    assert "SYNTHETIC / DEMO DATA" in card.text and card.data.to_dict()["annotations_creators"] == ["machine-generated"]
    assert any("synthetic corpus" in m for m in res.manifest["synthetic"])
    # the same samples from a rows directory still carry the corpus's own marker (source_file)
    from pipeline.rows import write_rows_dir

    write_rows_dir(small_input.samples, tmp_path / "rows")
    res = release.build_release(release.load_rows_dir(tmp_path / "rows"), "1.0.0", DataRoot(tmp_path / "b"))
    assert "SYNTHETIC / DEMO DATA" in _card(res.path).text
    # real-looking samples, simulated annotators: banner too
    # answers by desks registered as simulated (`rescue annotators add --simulated`): counted so, whatever
    # their names; a person's desk named like a simulator's is not
    from pipeline.labelstudio.desks import Desks

    people = ["annotator1@example.org", "annotator2@example.org", "sim-person@example.org"]
    for email, simulated in zip(people, (True, True, False)):
        Desks(DataRoot(tmp_path / "c")).register(email, "annotator", simulated=simulated)
    _write_round(tmp_path / "c", "emotion", people, passed=True)
    clean = [dict(s, source_file=f"{s['sample_id']}.json") for s in small_input.samples]
    res = release.build_release(release.ReleaseInput(clean, {"kind": "rows_dir"}, from_data_root=True), "1.0.0",
                                DataRoot(tmp_path / "c"))
    assert res.manifest["synthetic"] == ["round emotion: 2 of 3 annotators are simulated"]
    assert "SYNTHETIC / DEMO DATA" in _card(res.path).text


def test_generated_interviews_are_marked_by_provenance_not_by_name():
    from pipeline.benchmark.provenance import synthetic_markers

    # the catalog's record says generated: marked, whatever the group is called
    demo = [{"sample_id": "alan_and_evelyn/session01", "group_id": "alan_and_evelyn", "source_file": None}]
    origin = {"recorded": 0, "generated": {"pipeline.synthetic.batch scale=1 seed=3": 1}, "not_ingested_here": 0}
    assert synthetic_markers({"kind": "rows_dir"}, demo, [], origin) == [
        "1 samples are generated interviews (pipeline.synthetic.batch scale=1 seed=3)"]
    # a recording in a group named like the generator's is not: names prove nothing
    named = [{"sample_id": "synthetic_couple/session01", "group_id": "synthetic_couple", "source_file": None}]
    assert synthetic_markers({"kind": "rows_dir"}, named, [], {"recorded": 1, "generated": {}}) == []
    rounds = [{"round": "emotion", "annotators": 2, "simulated_annotators": 0,
               "override": {"reason": "DEMO: simulated annotators on a few synthetic interviews"}}]
    assert synthetic_markers({"kind": "rows_dir"}, [], rounds) == ["round emotion: released under a demo override"]
    real = [{"sample_id": "alan_and_evelyn/001", "group_id": "alan_and_evelyn", "source_file": "data/x.json"}]
    assert synthetic_markers({"kind": "rescue_jsonl"}, real, []) == []


def test_card_features_match_what_datasets_reads(small_input, tmp_path):
    datasets = pytest.importorskip("datasets")
    res = release.build_release(small_input, "1.0.0", DataRoot(tmp_path))
    ds = datasets.load_dataset(str(res.path), "itp", cache_dir=str(tmp_path / "hf"))["test"]
    assert isinstance(ds.features["label"], datasets.ClassLabel) and ds.features["label"].names == ["no", "yes"]
    assert set(ds.features["label"].int2str(ds["label"])) == {"no", "yes"}
    from pipeline.benchmark import card as card_mod
    from pipeline import schemas

    for config, schema in {"rows": schemas.ROWS, "vp": schemas.VP, "itp": schemas.ITP}.items():
        theirs = datasets.Features.from_arrow_schema(schema)
        for name, names in card_mod.class_labels().get(config, {}).items():
            theirs[name] = datasets.ClassLabel(names=names)
        assert card_mod.features(config) == theirs._to_yaml_list(), config
