"""``paper/data`` read the way the RESCUE authors' scripts read it, all six tasks rebuilt from it.

The loader and the six builders below are written from the spec (RESCUE_SPEC §1.2, §4.0-§4.6) in
our own words, independently of ``pipeline.benchmark.tasks``. Like the scripts, the loader
resolves ``--data-root`` (symbolic links included) from the checkout as working directory and
takes every sample path relative to the checkout root as well, so a data root outside the
checkout fails ("is not in the subpath of"). That is why docs/OPERATIONS.md and the card say to
copy ``paper/data`` into the checkout's ``data/`` and run the README's commands there.
From such a copy, every task's instances, gold and context must equal the release's Parquet tables.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest

from pipeline import taxonomy
from pipeline.benchmark import release
from pipeline.synthetic import corpus as synth_corpus
from pipeline.paths import DataRoot

_WORD = re.compile(r"[A-Za-z0-9']+")
_GROUPS = {"Couple", "Family"}
_NOT_CLIENT = {"Therapist"} | _GROUPS
_CUES = ("background_dialogue", "tone_of_voice", "body_posture", "facial_expressions", "self_directed_behavior",
         "interaction_behavior")
_NEEDED = {"background_dialogue": ("speaker", "target", "content"), "body_posture": ("person", "description"),
           "facial_expressions": ("person", "description"), "self_directed_behavior": ("person", "description"),
           "interaction_behavior": ("initiator", "target", "description")}


# --- the scripts' loader (§4.0) -----------------------------------------------------------------

def _clean(value) -> str:
    return str(value or "").strip()


def _group_mode(sample_id: str, rows: list[dict]) -> str:
    if sample_id.lower().startswith("family_therapy/") or "/family_therapy/" in sample_id.lower():
        return "family"
    for row in rows:
        values = [row.get("primary_speaker"), *(row.get("target") or [])]
        for item in row.get("support_strategy") or []:
            values.extend(item.get("target") or [])
        if any(_clean(v) == "Family" for v in values):
            return "family"
    return "couple"


def _participants(rows: list[dict]) -> list[str]:
    """Clients in order of first appearance over speakers, targets and strategy targets."""
    out: list[str] = []
    for row in rows:
        names = [row.get("primary_speaker"), *(row.get("target") or [])]
        for item in row.get("support_strategy") or []:
            names.extend(item.get("target") or [])
        for name in map(_clean, names):
            if name and name not in _NOT_CLIENT and name not in out:
                out.append(name)
    return out


def authors_load(data_root_arg: str | os.PathLike, checkout: Path) -> list[dict]:
    """``load_data_samples`` as the scripts call it, run from ``checkout``."""
    root_dir = checkout.resolve()
    data_root = (checkout / data_root_arg).resolve()  # an absolute argument replaces the checkout
    samples = []
    for path in sorted(data_root.rglob("*.json")):
        payload = json.loads(path.read_text(encoding="utf-8"))
        rows = payload.get("rows", [])
        if not isinstance(rows, list):
            continue
        sample_id = path.relative_to(data_root).with_suffix("").as_posix()
        mode = _group_mode(sample_id, rows)
        samples.append({"sample_id": sample_id, "couple": path.parent.name, "rows": rows, "group_mode": mode,
                        "group_label": "Family" if mode == "family" else "Couple",
                        "file_rel": path.relative_to(root_dir).as_posix(),  # outside the checkout: ValueError
                        "participants": _participants(rows)})
    return samples


# --- prompt rows and windows ----------------------------------------------------------------------

def _record(row: dict, k: int) -> dict:
    """A row as the scripts show it (every cue: the audiovisual mode), sub-items with gaps dropped."""
    rec = {"row_index": k, "timestamp": "%.3f-%.3f" % (row["start_time"], row["end_time"]),
           "primary_speaker": row["primary_speaker"], "target": list(row["target"]),
           "dialogue_cleaned": row["dialogue_cleaned"]}
    for key in _CUES:
        value = row[key]
        rec[key] = value if key == "tone_of_voice" else [dict(i) for i in value if all(i.get(k) for k in _NEEDED[key])]
    return rec


def _window(rows: list[dict], k: int, size: int) -> list[dict]:
    """Rows [max(1, k - size), k - 1]; -1 all prior rows, 0 none."""
    if size == 0:
        return []
    first = 1 if size < 0 else max(1, k - size)
    return [_record(rows[i - 1], i) for i in range(first, k)]


def _spread(items: list, limit: int, single: int) -> list:
    if limit <= 0 or len(items) <= limit:
        return list(items)
    if limit == 1:
        return [items[single]]
    return [items[i] for i in sorted({round(r * (len(items) - 1) / (limit - 1)) for r in range(limit)})]


def _turn_id(sample: dict, k: int) -> str:
    return "%s__row%d" % (Path(sample["file_rel"]).stem, k)


# --- the six tasks (§4.1-§4.6) -------------------------------------------------------------------

def a_itp(s: dict, ctx: int) -> dict[int, dict]:
    rows, T = s["rows"], (lambda r: r["primary_speaker"] == "Therapist")
    pos = [(k - 1, "yes", "therapist_entry") for k in range(2, len(rows) + 1) if T(rows[k - 1]) and not T(rows[k - 2])]
    neg = [(k, "no", "same_speaker_continuation" if rows[k - 1]["primary_speaker"] == rows[k]["primary_speaker"]
            else "non_therapist_exchange") for k in range(1, len(rows)) if not T(rows[k - 1]) and not T(rows[k])]
    n = min(len(pos), len(neg))
    if n <= 0:
        return {}
    chosen = _spread(pos, n, len(pos) // 2) + _spread(neg, n, len(neg) // 2)  # one pick: the middle
    return {k: {"participants": s["participants"], "decision_after_row": _record(rows[k - 1], k),
                "prior_context": _window(rows, k + 1, ctx), "label": label, "label_boundary_type": kind}
            for k, label, kind in chosen}


def a_rpp(s: dict, ctx: int) -> dict[int, dict]:
    out = {}
    for k, row in enumerate(s["rows"], 1):
        state = _clean(row.get("relation_cycle_state"))
        if row["primary_speaker"] != "Therapist" or not state:
            continue
        out[k] = {"turn_id": _turn_id(s, k), "target_primary_speaker": row["primary_speaker"],
                  "participants": s["participants"],
                  "candidate_relation_labels": list(taxonomy.relation_patterns(s["group_mode"])),
                  "prior_context": _window(s["rows"], k, ctx), "label": state,
                  # the metadata the RPP script reads: "" and [] when the therapist row lacks them
                  "label_reason": _clean(row.get("relation_cycle_reason")),
                  "label_evidence_rows": list(row.get("relation_cycle_evidence_rows") or [])}
    return out


def _canonical(values) -> tuple:
    return tuple(v for v in map(_clean, values or []) if v and v != "Therapist")


def _label(target: tuple, group: str) -> str:
    return "" if not target else target[0] if len(target) == 1 else group


def _support_target(row: dict, group: str) -> tuple[str, str]:
    items = row.get("support_strategy") or []
    if not items or not _clean(items[0].get("strategy_type")):
        return "", "none"
    if _canonical(items[0].get("target")):
        return _label(_canonical(items[0].get("target")), group), "support_strategy"
    if _canonical(row.get("target")):
        return _label(_canonical(row.get("target")), group), "row_target_fallback"
    return "", "none"


def _candidates(s: dict) -> list[str]:
    group, tuples = s["group_label"], []
    for t in [(p,) for p in s["participants"]] + [(group,)]:
        if t not in tuples:
            tuples.append(t)
    for row in s["rows"]:
        if row["primary_speaker"] == "Therapist":
            for t in [_canonical(row.get("target"))] + [_canonical(i.get("target")) for i in row.get("support_strategy") or []]:
                if t and t not in tuples:
                    tuples.append(t)
    labels = [_label(t, group) for t in tuples]
    # our one documented deviation (tasks.common.candidate_target_labels): each label once
    return [x for i, x in enumerate(labels) if x not in labels[:i]]


def a_stp(s: dict, ctx: int) -> dict[int, dict]:
    out, candidates = {}, _candidates(s)
    for k, row in enumerate(s["rows"], 1):
        gold, source = _support_target(row, s["group_label"]) if row["primary_speaker"] == "Therapist" else ("", "")
        if gold:
            out[k] = {"turn_id": _turn_id(s, k), "target_primary_speaker": "Therapist", "participants": s["participants"],
                      "candidate_target_labels": candidates + ([] if gold in candidates else [gold]),
                      "prior_context": _window(s["rows"], k, ctx), "label": gold, "label_source": source}
    return out


def a_ssp(s: dict, ctx: int) -> dict[int, dict]:
    out, strategies = {}, list(taxonomy.support_strategies(s["group_mode"]))
    for k, row in enumerate(s["rows"], 1):
        if row["primary_speaker"] != "Therapist" or not row.get("support_strategy"):
            continue
        strategy = _clean(row["support_strategy"][0].get("strategy_type"))
        target, _ = _support_target(row, s["group_label"])
        if strategy in strategies and target:
            out[k] = {"turn_id": _turn_id(s, k), "participants": s["participants"], "known_support_target": target,
                      "candidate_strategy_labels": strategies, "prior_context": _window(s["rows"], k, ctx),
                      "label": strategy}
    return out


def _current(row: dict, k: int) -> dict:
    rec = _record(row, k)
    return {"timestamp": rec["timestamp"], "speaker": row["primary_speaker"], "target": rec["target"],
            "dialogue": row["dialogue_cleaned"], **{key: rec[key] for key in _CUES}}


def a_er(s: dict, ctx: int) -> dict[int, dict]:
    rows = s["rows"]
    cutoff = min(len(rows) - 1, math.ceil(len(rows) * 0.3))
    found = []
    for k, row in enumerate(rows, 1):
        speaker = row["primary_speaker"]
        if k <= cutoff or speaker in _NOT_CLIENT or len(_WORD.findall(row["dialogue_cleaned"])) < 5:
            continue
        for e in row["internal_emotion"]:
            if e["person"] == speaker and _clean(e["emotion_description"]) and 0 <= round(float(e["intensity"])) <= 10:
                found.append((k, _clean(e["emotion_description"]), int(round(float(e["intensity"])))))
                break
    return {k: {"group_id": s["sample_id"].rpartition("/")[0], **_current(rows[k - 1], k),
                "prior_context": _window(rows, k, ctx), "label": d, "label_intensity": i}
            for k, d, i in _spread(found, 5, 0)}


def _vp_participants(rows: list[dict]) -> list[str]:
    out: list[str] = []
    for row in rows:
        names = [row["primary_speaker"], *row["target"]]
        for v in row["viewpoints_attitudes"]:
            names += [v["source"], v["target"]]
        for name in names:
            if name and name not in _GROUPS and name not in out:  # Therapist included
                out.append(name)
    return out


def a_vp(s: dict, ctx: int) -> dict[int, dict]:
    rows, found = s["rows"], []
    for k, row in enumerate(rows, 1):
        speaker = row["primary_speaker"]
        if speaker in _NOT_CLIENT:
            continue
        gold = [{"source": v["source"], "target": _clean(v["target"]), "viewpoint": _clean(v["viewpoint"]),
                 "attitude": _clean(v["attitude"])} for v in row["viewpoints_attitudes"]
                if v["source"] == speaker and _clean(v["target"]) and _clean(v["viewpoint"])]
        if gold:
            found.append((k, gold))
    return {k: {"group_id": s["sample_id"].rpartition("/")[0], "participants": _vp_participants(rows),
                **_current(rows[k - 1], k), "prior_context": _window(rows, k, ctx), "label": g}
            for k, g in _spread(found, 5, 0)}


BUILDERS = {"itp": a_itp, "rpp": a_rpp, "stp": a_stp, "ssp": a_ssp, "er": a_er, "vp": a_vp}


# --- helpers ----------------------------------------------------------------------------------------

def _checkout(tmp_path: Path) -> Path:
    """A stand-in for a checkout of the authors' repository: task/ and the published .jsonl files
    in data/ (which ``rglob("*.json")`` does not match)."""
    checkout = tmp_path / "RESCUE-bench"
    (checkout / "task").mkdir(parents=True)
    (checkout / "data").mkdir()
    (checkout / "data" / "benchmark_191.jsonl").write_text("{}\n")
    return checkout


def _copy_in(release_path: Path, checkout: Path, link=False) -> None:
    """The documented step: ``cp -r RELEASE/paper/data/. data/`` (``cp -al`` with ``link``)."""
    shutil.copytree(release_path / "paper" / "data", checkout / "data", dirs_exist_ok=True,
                    copy_function=os.link if link else shutil.copy2)


def check_tasks_against_parquet(res: release.ReleaseResult, samples: list[dict]) -> dict[str, int]:
    """Every task's instances from the authors' view equal the release's Parquet table, field by field."""
    ctx = res.manifest["task_settings"]["context_size"]
    scenario = {r["sample_id"]: r["scenario"] for r in release.read_config(res.path, "samples").to_pylist()}
    assert {s["sample_id"]: s["group_mode"] for s in samples} == scenario
    counts = {}
    for task, build in BUILDERS.items():
        mine = {(s["sample_id"], k): rec for s in samples for k, rec in build(s, ctx[task]).items()}
        table = {(r["sample_id"], r["row_index"]): r for r in release.read_config(res.path, task).to_pylist()}
        assert sorted(mine) == sorted(table), task
        for key, rec in mine.items():
            theirs = dict(table[key], label_reason=_clean(table[key].get("label_reason"))) if task == "rpp" else table[key]
            for field, value in rec.items():
                assert theirs[field] == value, (task, key, field, theirs[field], value)
        counts[task] = len(mine)
    return counts


@pytest.fixture(scope="module")
def synthetic_release(tmp_path_factory) -> release.ReleaseResult:
    """Couples and families, every task non-empty. The generator lists ``participants`` in random
    order; the field is the clients in order of first appearance (spec §1.2), which is what the
    scripts infer from the rows and our builders take from the field, so it is put in that order."""
    inp = synth_corpus.load_synthetic(scale=0.1, seed=7)
    for s in inp.samples:
        s["participants"] = _participants(s["rows"])
    return release.build_release(inp, "1.0.0", DataRoot(tmp_path_factory.mktemp("synth")), dev_fraction=0.3)


# --- the tests --------------------------------------------------------------------------------------

def test_the_scripts_need_paper_data_inside_their_checkout(synthetic_release, tmp_path):
    checkout = _checkout(tmp_path)
    paper_data = synthetic_release.path / "paper" / "data"
    # what the docs said before: --data-root pointing at the release
    with pytest.raises(ValueError, match="is not in the subpath of"):
        authors_load(paper_data, checkout)
    # a symbolic link does not help: the scripts resolve --data-root
    (checkout / "linked").symlink_to(paper_data, target_is_directory=True)
    with pytest.raises(ValueError, match="is not in the subpath of"):
        authors_load("linked", checkout)
    # the documented step: a copy (or hard links) in the checkout's data/
    _copy_in(synthetic_release.path, checkout, link=True)
    samples = authors_load("data", checkout)
    assert len(samples) == synthetic_release.manifest["statistics"]["all"]["samples"]
    assert all(s["file_rel"] == f"data/{s['sample_id']}.json" for s in samples)
    assert any(s["group_mode"] == "family" for s in samples) and any(s["group_mode"] == "couple" for s in samples)


def test_all_six_tasks_from_paper_data_equal_the_parquet_tables(synthetic_release, tmp_path):
    checkout = _checkout(tmp_path)
    _copy_in(synthetic_release.path, checkout)
    samples = authors_load("data", checkout)
    counts = check_tasks_against_parquet(synthetic_release, samples)
    assert all(counts.values()), counts
    # RPP's gold metadata comes from the therapist row itself (it was "" and [] on every instance)
    rpp = [r for s in samples for r in a_rpp(s, -1).values()]
    assert rpp and all(r["label_reason"] and r["label_evidence_rows"] for r in rpp)
    # ... beside the shifted copy of the published shape, which the row before still carries
    for s in samples:
        for prev, row in zip(s["rows"], s["rows"][1:]):
            if row["primary_speaker"] == "Therapist":
                assert row["relation_cycle_reason"] == prev["relation_pattern_reason"], (s["sample_id"], row["row_index"])
                assert row["relation_cycle_evidence_rows"] == prev["relation_pattern_evidence_rows"]
                assert row["relation_cycle_state"] == prev["relation_pattern"]


def test_paper_er_vp_files_hold_the_same_instances_with_every_prior_row(synthetic_release, tmp_path):
    checkout = _checkout(tmp_path)
    _copy_in(synthetic_release.path, checkout)
    samples = authors_load("data", checkout)
    for task in ("er", "vp"):
        full = {(s["sample_id"], k): rec for s in samples for k, rec in BUILDERS[task](s, -1).items()}
        lines = [json.loads(x) for x in (synthetic_release.path / "paper" / f"{task}.jsonl").read_text().splitlines()]
        assert sorted((r["sample_id"], r["row_index"]) for r in lines) == sorted(full)
        for rec in lines:
            mine = full[(rec["sample_id"], rec["row_index"])]
            assert rec["instance_id"] == f"{rec['sample_id']}__row{rec['row_index']}"
            assert rec["dialogue"] == mine["dialogue"] and rec["prior_context"] == mine["prior_context"]
            if task == "er":
                assert (rec["gold_internal_emotion"], rec["gold_intensity_score"]) == (mine["label"], mine["label_intensity"])
            else:
                assert rec["gold_viewpoints"] == mine["label"]
            assert "clip_path" not in rec  # no media in this release


def test_the_published_head_through_paper_data(head_input, tmp_path):
    res = release.build_release(head_input, "1.0.0", DataRoot(tmp_path / "root"))
    checkout = _checkout(tmp_path)
    _copy_in(res.path, checkout)
    samples = authors_load("data", checkout)
    counts = check_tasks_against_parquet(res, samples)
    assert counts["rpp"] == 23  # the count: 23 RPP instances, now with their reasons
    rpp = [r for s in samples for r in a_rpp(s, -1).values()]
    assert all(r["label_reason"] for r in rpp) and sum(bool(r["label_evidence_rows"]) for r in rpp) == len(rpp)
