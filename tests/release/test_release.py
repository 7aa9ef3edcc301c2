"""Versioned releases: layout, byte-identical rebuilds, immutability, diff, dev split
stability, Hugging Face `datasets` and polars loading, the paper's ER/VP JSONL shapes."""
from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import polars as pl
import pytest

from pipeline import schemas, store
from pipeline.benchmark import release
from pipeline.benchmark.tasks.common import instance_id
from pipeline.synthetic import corpus as synth_corpus
from pipeline.paths import DataRoot

S1 = "alan_and_evelyn/001_s01e01_ct25_segment04"


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_layout_manifest_and_card(head_input, benchmark_head_path, tmp_path):
    res = release.build_release(head_input, "1.0.0", DataRoot(tmp_path))
    assert res.path == tmp_path / "releases" / "1.0.0"
    for config in schemas.RELEASE_CONFIGS:
        assert (res.path / "data" / config / "test.parquet").is_file(), config
    m = json.loads((res.path / "manifest.json").read_text())
    for rel, info in m["files"].items():
        p = res.path / rel
        assert info["sha256"] == store.sha256_file(p) and info["bytes"] == p.stat().st_size
    assert m["counts"]["itp"]["couple"] == {"instances": 30, "samples": 3}
    assert m["counts"]["rpp"]["family"] == {"instances": 0, "samples": 0}
    assert m["statistics"]["couple"]["samples"] == 3 and m["statistics"]["couple"]["total_turns"] == 16 + 17 + 36
    assert m["statistics"]["couple"]["avg_speakers"] == 3.0
    assert m["label_distributions"]["itp"]["all"] == {"no": 15, "yes": 15}
    assert m["source"] == {"kind": "rescue_jsonl", "files": {"benchmark_head.jsonl": store.sha256_file(benchmark_head_path)},
                           "skipped": 0}
    text = (res.path / "manifest.json").read_text() + (res.path / "README.md").read_text()
    assert str(tmp_path) not in text and "/Users/" not in text  # no absolute paths
    card = (res.path / "README.md").read_text()
    assert card.startswith("---\n") and "- config_name: itp" in card and "path: data/itp/test.parquet" in card


def test_synthetic_rebuild_is_byte_identical_with_a_dev_split(tmp_path):
    for root in ("a", "b"):
        release.build_release(synth_corpus.load_synthetic(scale=0.2, seed=3), "1.0.0", DataRoot(tmp_path / root), dev_fraction=0.5)
    a = _files(tmp_path / "a" / "releases" / "1.0.0")
    b = _files(tmp_path / "b" / "releases" / "1.0.0")
    assert a == b and any("/dev.parquet" in name for name in a) and any("/test.parquet" in name for name in a)


def test_synthetic_release_loads_with_datasets_and_polars(small_input, tmp_path):
    datasets = pytest.importorskip("datasets")
    res = release.build_release(small_input, "1.0.0", DataRoot(tmp_path))
    for config in ("samples", "rows", "itp", "rpp", "stp", "ssp", "er", "vp"):
        ds = datasets.load_dataset(str(res.path), config, cache_dir=str(tmp_path / "hf_cache"))["test"]
        assert ds.num_rows == res.manifest["files"][f"data/{config}/test.parquet"]["rows"] > 0
    df = pl.read_parquet(res.path / "data" / "itp" / "test.parquet")
    assert set(df["label"].unique()) == {"yes", "no"}


def test_rebuild_is_byte_identical(benchmark_head_path, tmp_path):
    for root in ("a", "b"):
        inp = release.load_jsonl(benchmark_head_path)
        release.validate(inp)
        release.build_release(inp, "1.0.0", DataRoot(tmp_path / root), dev_fraction=0.5)
    a = _files(tmp_path / "a" / "releases" / "1.0.0")
    b = _files(tmp_path / "b" / "releases" / "1.0.0")
    assert a.keys() == b.keys() and a == b


def test_existing_version_is_refused_and_nothing_is_left_behind(small_input, tmp_path):
    release.build_release(small_input, "1.0.0", DataRoot(tmp_path))
    before = _files(tmp_path / "releases" / "1.0.0")
    with pytest.raises(store.AlreadyExists, match="1.0.0 already exists"):
        release.build_release(small_input, "1.0.0", DataRoot(tmp_path))
    assert _files(tmp_path / "releases" / "1.0.0") == before
    with pytest.raises(release.ReleaseError, match="X.Y.Z"):
        release.build_release(small_input, "v1", DataRoot(tmp_path))
    assert sorted(p.name for p in (tmp_path / "releases").iterdir()) == ["1.0.0"]  # no temp dirs


def test_failed_build_leaves_no_release(small_input, tmp_path):
    broken = copy.deepcopy(small_input)
    broken.samples.append(copy.deepcopy(broken.samples[0]))  # duplicate sample_id
    with pytest.raises(release.ReleaseError, match="more than once"):
        release.build_release(broken, "2.0.0", DataRoot(tmp_path))
    assert not (tmp_path / "releases" / "2.0.0").exists()


def test_diff_reports_samples_rows_and_labels(head_input, tmp_path):
    release.build_release(head_input, "1.0.0", DataRoot(tmp_path))
    new = copy.deepcopy(head_input)
    removed = new.samples.pop(2)["sample_id"]
    s1 = new.samples[0]
    s1["rows"][2]["relation_cycle_state"] = "pursue_withdraw"  # row 3: attack_attack -> pursue_withdraw
    s1["rows"][5]["dialogue_cleaned"] += " Really."
    release.build_release(new, "1.1.0", DataRoot(tmp_path))
    d = release.diff_releases(DataRoot(tmp_path), "1.0.0", "1.1.0")
    assert d["samples"]["removed"] == 1 and d["samples"]["examples"]["removed"] == [removed]
    assert d["samples"]["added"] == 0 and d["samples"]["changed"] == 0
    assert d["rows"]["removed"] == 36 and d["rows"]["changed"] == 2
    assert d["rows"]["changed_fields"] == {"dialogue_cleaned": 1, "relation_cycle_state": 1}
    assert d["labels"]["rpp"]["changed"] == 1 and d["labels"]["rpp"]["examples"]["changed"] == [f"{S1}/3"]
    assert d["labels"]["itp"]["changed"] == 0 and d["labels"]["itp"]["removed"] > 0


def test_dev_split_is_stable_when_groups_are_added(tmp_path):
    base = synth_corpus.generate(scale=0.2, seed=1)
    release.build_release(release.ReleaseInput(base, {"kind": "test"}), "1.0.0", DataRoot(tmp_path), dev_fraction=0.4)
    extra = [s for s in synth_corpus.generate(scale=0.2, seed=2)]
    for s in extra:  # new couples/families: rename groups so they cannot collide
        s["group_id"] = "new_" + s["group_id"].replace("/", "_")
        s["sample_id"] = s["group_id"] + "/" + s["sample_id"].rpartition("/")[2]
    release.build_release(release.ReleaseInput(base + extra, {"kind": "test"}), "1.1.0", DataRoot(tmp_path), dev_fraction=0.4)

    def split_map(version):
        out = {}
        for split in ("dev", "test"):
            p = tmp_path / "releases" / version / "data" / "samples" / f"{split}.parquet"
            out.update({sid: split for sid in pl.read_parquet(p)["sample_id"]})
        return out

    old, new = split_map("1.0.0"), split_map("1.1.0")
    assert set(old.values()) == {"dev", "test"}
    assert all(new[sid] == split for sid, split in old.items())
    assert len(new) == len(old) + len(extra)
    groups = {}
    for sid, split in new.items():  # whole groups move together
        groups.setdefault(sid.rpartition("/")[0], set()).add(split)
    assert all(len(v) == 1 for v in groups.values())
    # task tables follow the sample split
    itp_dev = pl.read_parquet(tmp_path / "releases" / "1.1.0" / "data" / "itp" / "dev.parquet")
    assert set(itp_dev["sample_id"]) <= {sid for sid, sp in new.items() if sp == "dev"}


def test_load_with_datasets_and_polars(head_input, tmp_path):
    datasets = pytest.importorskip("datasets")
    res = release.build_release(head_input, "1.0.0", DataRoot(tmp_path))
    ds = datasets.load_dataset(str(res.path), "vp", cache_dir=str(tmp_path / "hf_cache"))
    first = ds["test"][0]
    assert first["instance_id"] == instance_id(S1, "vp", 2) and first["label"][0]["target"] == "Evelyn"
    rows = datasets.load_dataset(str(res.path), "rows", cache_dir=str(tmp_path / "hf_cache"))["test"]
    assert rows.num_rows == 16 + 17 + 36
    df = pl.read_parquet(res.path / "data" / "itp" / "test.parquet")
    assert df.height == 30 and df["label"].value_counts().sort("label")["count"].to_list() == [15, 15]


def test_paper_er_vp_jsonl_shapes(head_input, tmp_path):
    from pipeline.benchmark import tasks
    from pipeline.rows import samples_to_tables

    samples_t, _ = samples_to_tables(head_input.samples)
    vp = tasks.build_task("vp", head_input.samples, context_size=-1)
    rec = next(release.paper_task_records("vp", vp, samples_t))
    assert list(rec)[:6] == ["sample_id", "couple", "row_index", "timestamp", "speaker", "participants"]
    assert rec["couple"] == "alan_and_evelyn" and rec["task"] == "vp" and rec["source_sample_id"] == S1
    assert rec["gold_viewpoints"][0]["viewpoint"] == "she is perpetually dissatisfied and impossible to please"
    assert rec["source_file"] == f"data/therapy_merged_all/{S1}.json"
    er = tasks.build_task("er", head_input.samples, context_size=-1)
    n = release.write_paper_task_jsonl("er", er, samples_t, tmp_path / "er.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "er.jsonl").read_text().splitlines()]
    assert n == len(lines) == er.num_rows
    assert lines[0]["gold_internal_emotion"] == "feels mischaracterized and a need to justify her reactions"
    assert lines[0]["gold_intensity_score"] == 7 and [c["row_index"] for c in lines[0]["prior_context"]] == [1, 2, 3, 4, 5]


def test_failing_agreement_gate_blocks_until_an_override_is_recorded(small_input, tmp_path):
    from pipeline.paths import DataRoot
    from pipeline.quality import gates

    gate = {"round": "emotion", "passed": False, "labels_sha256": "ab" * 32,
            "failing": [{"field": "utterance_type", "metric": "nominal", "alpha": 0.41, "threshold": 0.667}],
            "fields": [{"field": "utterance_type", "metric": "nominal", "alpha": 0.41, "threshold": 0.667,
                        "n_units": 40, "n_annotators": 2}]}
    store.atomic_write_text(DataRoot(tmp_path).gate("emotion"), store.canonical_json(gate))
    small_input = dataclasses.replace(small_input, from_data_root=True)  # the data root's corpus: its gates hold
    with pytest.raises(release.ReleaseError, match="round emotion is below its agreement threshold"):
        release.build_release(small_input, "1.0.0", DataRoot(tmp_path))
    assert not (tmp_path / "releases" / "1.0.0").exists()

    gates.record_override(DataRoot(tmp_path), "emotion", "pilot round; guidelines revised for the next batch", "maintainer")
    res = release.build_release(small_input, "1.0.0", DataRoot(tmp_path))
    [carried] = res.manifest["agreement_gates"]
    assert carried["round"] == "emotion" and carried["passed"] is False
    assert carried["override"]["reason"] == "pilot round; guidelines revised for the next batch"


def test_build_or_reuse_reuses_the_same_input_and_refuses_another(small_input, tmp_path):
    first = release.build_or_reuse(small_input, "1.0.0", DataRoot(tmp_path))
    assert first.reused is False
    before = _files(first.path)
    again = release.build_or_reuse(copy.deepcopy(small_input), "1.0.0", DataRoot(tmp_path))
    assert again.reused is True and again.path == first.path and again.manifest == first.manifest
    assert _files(first.path) == before
    with pytest.raises(store.AlreadyExists, match=r"release 1\.0\.0 already exists .* different dev fraction"):
        release.build_or_reuse(small_input, "1.0.0", DataRoot(tmp_path), dev_fraction=0.5)
    other = synth_corpus.load_synthetic(scale=0.05, seed=4)
    with pytest.raises(store.AlreadyExists, match=r"release 1\.0\.0 already exists .* different input"):
        release.build_or_reuse(other, "1.0.0", DataRoot(tmp_path))
    assert _files(first.path) == before
    with pytest.raises(release.ReleaseError, match="X.Y.Z"):
        release.build_or_reuse(small_input, "../1.0.0", DataRoot(tmp_path))
