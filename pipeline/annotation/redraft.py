"""Drafts under answers are never replaced silently.

A segmented interview enters the work store once (:mod:`.intake`); what its drafts were then is
kept in ``<data root>/annotation/admitted.json`` (per sample, the sha256 of its drafts file and
of its rows). When the segmenter makes its drafts again and they differ (a code fix, a new
model), the interview is *re-drafted*:

* nobody has answered it yet (no pulled label line in any round, no annotated task on any
  desk): the new drafts replace the old in the work store, and the push refreshes its tasks;
* it has answers: the old drafts stay (they are what the annotators answered) and the run says
  so in one line (:func:`held_line`), unless the operator names it: ``--redraft SAMPLE``
  (``rescue annotate push``), flow parameter ``redraft`` (``ingest-batch``). Then the new drafts
  replace the old, and the push archives each project holding its answered tasks (the pull's
  own archive, ``annotation/exports/``, with the predictions record beside it), records the
  content hashes of those old tasks (:func:`record_replaced`, in the round's push record), then
  deletes them and imports the new ones. Label Studio cannot mark a task as retired without
  changing its data, and an old task left beside the new one would share its sample and
  window: it is deleted, after its answers are archived.

The pull reports the answers to replaced drafts in one line per sample and never counts a task
showing one of those old content hashes (:func:`retired_shas`; a push stopped between its
archive and its deletes leaves such a task on the desk).

A sample admitted before this record existed is taken as admitted with the drafts it has now.
A re-draft replaced by ``--redraft`` stays marked (``"redraft": true``) until a push of the
first round completes, so a push stopped midway replaces the old tasks when run again.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

import pyarrow.parquet as pq

from pipeline import store
from pipeline.annotation import acceptance
from pipeline.labelstudio.client import LabelStudioClient
from pipeline.labelstudio.desks import DeskAccess
from pipeline.annotation.push_project import parse_project_key
from pipeline.annotation.rounds import round_names
from pipeline.paths import DataRoot, check_name


# --- what each sample's drafts were when admitted ----------------------------------------------

def admitted_path(root: DataRoot) -> Path:
    return root.annotation_dir() / "admitted.json"


def read_admitted(root: DataRoot) -> dict[str, dict]:
    """``{sample_id: {"file": sha256, "rows": sha256, "redraft": bool}}`` ({} before any)."""
    raw = store.read_json_record(admitted_path(root), "the record of admitted drafts",
                                 "delete it and run the push again (every interview is then taken as admitted "
                                 "as it is now)")
    return {str(k): v for k, v in (raw.get("samples") or {}).items() if isinstance(v, dict)}


def write_admitted(root: DataRoot, samples: dict[str, dict]) -> None:
    path = admitted_path(root)
    store.make_private_dir(path.parent)
    store.write_text_if_changed(path, store.canonical_json({"samples": dict(sorted(samples.items()))}), private=True)


def rows_digest(rows: list[dict]) -> str:
    """sha256 of draft rows (without their sample id), independent of how the file was written."""
    clean = [{k: v for k, v in r.items() if k != "sample_id"} for r in rows]
    return hashlib.sha256(json.dumps(clean, sort_keys=True, default=str).encode()).hexdigest()


def drafts_digest(root: DataRoot, sample_id: str) -> dict:
    """``{"file": sha256 of the drafts file, "rows": sha256 of its rows}``."""
    path = root.drafts(sample_id)
    return {"file": store.sha256_file(path), "rows": rows_digest(pq.read_table(path).to_pylist())}


def same_drafts(recorded: dict, root: DataRoot, sample_id: str) -> tuple[bool, dict]:
    """Whether the sample's drafts are those recorded (the file's bytes, else its rows), and their digest now."""
    path = root.drafts(sample_id)
    file_sha = store.sha256_file(path)
    if file_sha == recorded.get("file"):
        return True, {"file": file_sha, "rows": recorded.get("rows")}
    now = {"file": file_sha, "rows": rows_digest(pq.read_table(path).to_pylist())}
    return now["rows"] == recorded.get("rows"), now


# --- who answered a sample ----------------------------------------------------------------------

def answered(desks: DeskAccess | None, root: DataRoot, sample_ids: Iterable[str]) -> dict[str, str]:
    """``{sample_id: where its answers are}`` for the samples with answers in some round: label
    lines a pull stored, or (with ``desks``) an annotated or skipped task on an annotator's desk
    (asked of every round project on every desk; only called for re-drafted samples)."""
    wanted = set(sample_ids)
    where: dict[str, dict[str, set[str]]] = {}  # sample -> round -> annotators
    if not wanted:
        return {}
    for name in round_names():
        path = root.labels(name)
        if not path.is_file():
            continue
        table = pq.read_table(path, columns=["sample_id", "annotator"])
        for sid, who in zip(table.column("sample_id").to_pylist(), table.column("annotator").to_pylist()):
            if sid in wanted:
                where.setdefault(sid, {}).setdefault(name, set()).add(who)
    for who in desks.people("annotator") if desks is not None else []:
        client = desks.client(who)
        for project in client.projects():
            parsed = parse_project_key(project.key)
            if parsed is None or parsed[2] != who:
                continue
            for sid in sorted(wanted):
                if any(t.get("total_annotations", 0) or t.get("cancelled_annotations", 0)
                       for t in client.find_tasks(project.id, "sample_id", sid)):
                    where.setdefault(sid, {}).setdefault(parsed[0], set()).add(who)
    return {sid: "; ".join(f"round {name}: {', '.join(sorted(people))}" for name, people in sorted(rounds.items()))
            for sid, rounds in sorted(where.items())}


def held_line(sample_id: str, where: str) -> str:
    """The one line a run says of a re-drafted sample whose old drafts it kept."""
    return (f"{sample_id}: re-drafted, but it has answers ({where}): its old drafts and tasks are kept; "
            f"`--redraft {sample_id}` replaces them (the old answers are then archived, not counted)")


# --- the push: archive, then record, then delete ----------------------------------------------

def archive_project(root: DataRoot, round_name: str, scenario: str, annotator: str,
                    client: LabelStudioClient, project_id: int) -> Path:
    """Export the project and archive it as a pull does (``DataRoot.export`` and its predictions
    record beside it); returns the export's path."""
    raw = client.export_tasks(project_id)
    path = root.export(round_name, scenario, annotator, hashlib.sha256(raw).hexdigest())
    if not path.exists():
        store.atomic_write_bytes(path, raw)
    users = {u["id"]: u["email"] for u in client.users()}
    tasks = json.loads(raw)
    acceptance.archive_predictions(root, path, acceptance.predictions_record(
        round_name, scenario, annotator, project_id, tasks if isinstance(tasks, list) else [],
        acceptance.project_predictions(client, project_id), users))
    return path


def _pushed_file(root: DataRoot, round_name: str) -> Path:
    return root.pushed(check_name(round_name, "round"))


def _pushed_record(root: DataRoot, round_name: str) -> dict:
    """The round's push record (:mod:`.pushed`), {} when there is none or it cannot be read."""
    try:
        raw = json.loads(_pushed_file(root, round_name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def read_replaced(root: DataRoot, round_name: str) -> dict[str, dict[str, dict]]:
    """``{sample_id: {annotator: {"shas": [...], "answers": n, "exports": [...]}}}``: the tasks
    (their content hashes) ``--redraft`` replaced in the round, their answers and where they are archived."""
    out = _pushed_record(root, round_name).get("replaced")
    return out if isinstance(out, dict) else {}


def record_replaced(root: DataRoot, round_name: str, sample_id: str, annotator: str,
                    shas: Iterable[str], answers: int, export: Path) -> None:
    """Merge one project's replaced tasks of a sample into the round's push record (before they
    are deleted: a push stopped after this leaves nothing the pull would count)."""
    path = _pushed_file(root, round_name)
    raw = _pushed_record(root, round_name) or {"round": round_name}
    replaced = raw.setdefault("replaced", {})
    entry = replaced.setdefault(sample_id, {}).setdefault(annotator, {"shas": [], "answers": 0, "exports": []})
    new_shas = sorted(set(shas) - set(entry["shas"]))
    entry["shas"] = sorted(set(entry["shas"]) | set(new_shas))
    if new_shas:
        entry["answers"] = int(entry.get("answers") or 0) + answers
    rel = root.relative(export)
    if rel not in entry["exports"]:
        entry["exports"].append(rel)
    store.make_private_dir(path.parent)
    store.atomic_write_text(path, store.canonical_json(raw))


def keep_current(root: DataRoot, round_name: str, current: dict[str, Iterable[str]]) -> None:
    """Forget replaced content hashes that a push now gives a sample again (``current``: sample ->
    its tasks' content hashes): drafts re-drafted back to what they were are answered anew, and count."""
    raw = _pushed_record(root, round_name)
    replaced = raw.get("replaced")
    if not isinstance(replaced, dict):
        return
    changed = False
    for sid, shas in current.items():
        now = set(shas)
        for entry in (replaced.get(sid) or {}).values():
            if now & set(entry.get("shas") or []):
                entry["shas"] = sorted(set(entry["shas"]) - now)
                changed = True
    if changed:
        store.atomic_write_text(_pushed_file(root, round_name), store.canonical_json(raw))


def retired_shas(root: DataRoot, round_name: str) -> dict[str, set[str]]:
    """``{sample_id: content hashes of its replaced tasks}``: a task showing one is never counted."""
    return {sid: {s for entry in by_who.values() for s in entry.get("shas") or []}
            for sid, by_who in read_replaced(root, round_name).items()}


def replaced_lines(root: DataRoot, round_name: str) -> list[tuple[str, str, str]]:
    """``(annotator, sample_id, line)`` per sample and annotator whose answered tasks ``--redraft`` replaced."""
    out = []
    for sid, by_who in sorted(read_replaced(root, round_name).items()):
        for who, entry in sorted(by_who.items()):
            n = int(entry.get("answers") or 0)
            where = ", ".join(entry.get("exports") or []) or "?"
            out.append((who, sid, f"{sid}: {n} answer{'s' if n != 1 else ''} of {who} to its replaced drafts "
                                  f"(--redraft) are archived in {where}; not counted"))
    return out
