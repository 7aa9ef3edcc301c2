"""Adjudication in Label Studio: disagreements become tasks, the adjudicator's answer wins.

For a round, every row where annotators disagree (``pipeline.quality.disagreements``) is put
into an adjudication project per (round, scenario) - the same labeling config as the round,
so the adjudicator sees the same controls. The task shows only the disagreeing rows as
units; each annotator's answers on those rows are attached as one prediction per annotator,
so the adjudicator can flip between them in the UI.

Blind to identity: a prediction names its annotator as "Annotator A", "Annotator B", ... (its
``model_version``), never by e-mail. The letters are the round's: one person keeps one letter
in every task of the round and across pushes, and a person new to the round gets the next
free letter (in an order drawn from a hash of round and person, not from their names). Which
letter is whom lives only in the pipeline's private table ``annotation/adjudications/<round>.
annotators.json`` (0600; :func:`annotator_aliases`); the label tables keep the e-mails.

Pull turns the adjudicators' submitted annotations into label-table lines
(``schemas.LABELS``; ``annotator`` = adjudicator e-mail) that ``pipeline.quality.gold.build_gold`` takes
as ``adjudications``. Tasks are keyed by sample_id and a content hash of the disagreement,
never by Label Studio task ids: pushing again adds only new or changed disagreements.

The stage entry points the CLI (``rescue adjudicate push|pull``) and the annotation-round flow
both call: :func:`push_round` (the round's pulled labels, ``DataRoot.labels``, against the
samples it was pushed from, default the corpus) and :func:`pull_round` (answers written to
``DataRoot.adjudications``).

Only samples of this data root's label table are taken (the adjudication project is per round and
scenario on the server, shared by every data root that uses it). An adjudicator is never an
annotator of the round: :func:`pull_round` refuses (with
:class:`AdjudicatorIsAnnotator`, writing nothing) answers from anyone the round was pushed to
(:mod:`pipeline.annotation.pushed`) or who has labels in its table - whether the round's
annotators were named or "every annotator" was meant.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import corpus, schemas, store, taxonomy
from pipeline.annotation.ls_config import build_task_data, content_sha, render_config, result_value, values_to_results
from pipeline.labelstudio.desks import DeskAccess
from pipeline.annotation.naming import parse_control_name
from pipeline.annotation.rounds import load_round
from pipeline.paths import DataRoot, check_name
from pipeline.quality.disagreements import disagreements, index_labels
from pipeline.annotation.push_project import ADJUDICATION_PREFIX
from pipeline.annotation.pushed import pushed_annotators

ADJUDICATOR_VERSION = "adjudication"  # the project's own model_version: no annotator pre-filled
ALIAS_PREFIX = "Annotator "


def _letters(n: int) -> str:
    """0 -> A, 25 -> Z, 26 -> AA: as spreadsheet columns."""
    out = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        out = chr(ord("A") + r) + out
    return out


def _draw_order(round_name: str, person: str) -> str:
    return hashlib.sha256(f"{round_name}\0{person}".encode()).hexdigest()


def assign_aliases(round_name: str, people: Sequence[str], known: Mapping[str, str] | None = None) -> dict[str, str]:
    """person -> "Annotator X" for a round: ``known`` (alias -> person, as stored) is kept as it
    is; everyone else gets the next free letters, in the order of a hash of round and person."""
    known = dict(known or {})
    by_person = {person: alias for alias, person in known.items()}
    taken = set(known)
    n = 0
    for person in sorted(set(people) - set(by_person), key=lambda p: (_draw_order(round_name, p), p)):
        while f"{ALIAS_PREFIX}{_letters(n)}" in taken:
            n += 1
        by_person[person] = f"{ALIAS_PREFIX}{_letters(n)}"
        taken.add(by_person[person])
    return by_person


def aliases_path(root: DataRoot, round_name: str) -> Path:
    """The private table of a round's letters: beside its adjudications."""
    return root.adjudications(round_name).with_suffix(".annotators.json")


def annotator_aliases(root: DataRoot, round_name: str, people: Sequence[str]) -> dict[str, str]:
    """person -> "Annotator X" for ``people`` of a round, kept in the round's private table
    (:func:`aliases_path`, 0600): letters given before never change; new people are added."""
    path = aliases_path(root, round_name)
    known = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    by_person = assign_aliases(round_name, people, known)
    table = {alias: person for person, alias in by_person.items()}
    if table != known:
        store.atomic_write_text(path, store.canonical_json(dict(sorted(table.items()))), private=True)
    return by_person


def _round_annotators(labels: Any, round_name: str) -> list[str]:
    """Everyone with a label line in the round (not only those in a disagreement): their letters."""
    if isinstance(labels, pa.Table):
        rows = labels.filter(pc.equal(labels.column("round"), round_name))
        return sorted(set(rows.column("annotator").to_pylist()))
    return sorted({a for (r, _, _), per in index_labels(labels).items() if r == round_name
                   for vals in per.values() for a in vals})


def project_key(round_name: str, scenario: str) -> str:
    """An adjudication project's identity (Label Studio keeps it in the project description)."""
    return f"{ADJUDICATION_PREFIX}{round_name}/{scenario}"


def project_title(round_name: str, scenario: str) -> str:
    return f"Adjudicate {round_name} ({scenario})"


@dataclass
class PushSummary:
    round: str
    disagreements: int
    tasks_created: int
    tasks_unchanged: int
    tasks_updated: int
    projects: dict[str, int]


def adjudication_tasks(rnd, labels: Any, samples: Sequence[dict],
                       aliases: Mapping[str, str] | None = None) -> dict[str, list[dict]]:
    """scenario -> Label Studio tasks (data + one prediction per annotator) for the disagreements.
    ``aliases``: person -> "Annotator X" (default: :func:`assign_aliases` over the round's annotators)."""
    if aliases is None:
        aliases = assign_aliases(rnd.name, _round_annotators(labels, rnd.name))
    by_sample: dict[str, list[dict]] = {}
    for d in disagreements(labels, rnd):
        by_sample.setdefault(d["sample_id"], []).append(d)
    sample_of = {s["sample_id"]: s for s in samples}
    out: dict[str, list[dict]] = {}
    for sid in sorted(by_sample):
        sample = sample_of.get(sid)
        if sample is None:
            raise KeyError(f"adjudication: sample {sid!r} has labels in round {rnd.name!r} but is not among the "
                           f"samples given (the data the round was pushed from)")
        data = build_task_data(rnd, sample)
        rows = {d["row_index"]: d for d in by_sample[sid]}
        data["units"] = [u for u in data["units"] if u["row_index"] in rows]
        data["adjudicate"] = {str(ri): d["fields"] for ri, d in sorted(rows.items())}
        annotators = sorted({a for d in rows.values() for vals in d["answers"].values() for a in vals})
        predictions = []
        for ann in annotators:
            values = {ri: {f: vals[ann] for f, vals in d["answers"].items() if ann in vals} for ri, d in rows.items()}
            if ann not in aliases:
                raise KeyError(f"adjudication of round {rnd.name!r}: no letter for an annotator of sample {sid!r}")
            predictions.append({"model_version": aliases[ann], "result": values_to_results(rnd, data, values)})
        data["content_sha"] = content_sha(data, predictions)
        out.setdefault(sample["scenario"], []).append({"data": data, "predictions": predictions})
    return out


class NoAdjudicator(ValueError):
    """Disagreements to adjudicate, and nobody made an adjudicator."""


def push(desks: DeskAccess, rnd, labels: Any, samples: Sequence[dict],
         aliases: Mapping[str, str] | None = None) -> PushSummary:
    """Create or refresh the adjudication projects of a round on every adjudicator's desk.

    Roles are explicit: only people added as adjudicators (``rescue annotators add EMAIL
    --adjudicator``) get adjudication projects; with disagreements and none, nothing is pushed
    and :class:`NoAdjudicator` says what to do. ``aliases``: as :func:`adjudication_tasks`."""
    tasks_by_scenario = adjudication_tasks(rnd, labels, samples, aliases)
    judges = desks.people("adjudicator")
    if tasks_by_scenario and not judges:
        raise NoAdjudicator(f"round {rnd.name!r} has disagreements to adjudicate but nobody is an adjudicator: "
                            "add one with `rescue annotators add EMAIL --adjudicator`, then push again")
    created = unchanged = updated = 0
    projects = {}
    for judge, (scenario, tasks) in ((j, item) for j in judges for item in sorted(tasks_by_scenario.items())):
        client = desks.client(judge)
        project = client.ensure_project(project_key(rnd.name, scenario), project_title(rnd.name, scenario),
                                        render_config(rnd, scenario),
                                        model_version=ADJUDICATOR_VERSION,
                                        description=f"Adjudication of round {rnd.name} v{rnd.version}: "
                                                    f"rows where annotators disagree. Each annotator's "
                                                    f"answer is a prediction (Annotator A, B, ...); "
                                                    f"submit the correct one.")
        projects[f"{scenario}/{judge}"] = project.id
        existing = {t["data"].get("sample_id"): t for t in client.tasks(project.id)}
        new = []
        for task in tasks:
            old = existing.get(task["data"]["sample_id"])
            if old is None:
                new.append(task)
            elif old["data"].get("content_sha") == task["data"]["content_sha"]:
                unchanged += 1
            else:  # the disagreement changed (new labels): refresh data and predictions
                client.update_task(old["id"], task["data"])
                for p in client._json("GET", "/api/predictions/", "list predictions", params={"task": old["id"]}) or []:
                    client.request("DELETE", f"/api/predictions/{p['id']}/", "delete an outdated prediction")
                for p in task["predictions"]:
                    client._json("POST", "/api/predictions/", "create a prediction",
                                 json={"task": old["id"], "result": p["result"], "model_version": p["model_version"]})
                updated += 1
        if new:
            client.import_tasks(project.id, new)
            created += len(new)
    n = sum(len(t["data"]["units"]) for ts in tasks_by_scenario.values() for t in ts)
    return PushSummary(rnd.name, n, created, unchanged, updated, projects)


def results_to_values(rnd, data: Mapping, result: Sequence[Mapping]) -> dict[int, dict[str, Any]]:
    """``{row_index: {field: value}}`` from one annotation's results (inverse of
    ``ls_config.values_to_results``), values in the row-schema form."""
    units = data["units"]
    fields = {f.name: f for f in rnd.fields}
    out: dict[int, dict[str, Any]] = {}
    slots: dict[tuple[int, str], dict[int, dict]] = {}
    for item in result:
        parsed = parse_control_name(item.get("from_name", ""))
        if parsed is None or parsed[0] not in fields or parsed[3] >= len(units):
            continue
        name, slot, sub, unit = parsed
        ri = units[unit]["row_index"]
        f = fields[name]
        raw = result_value(item)
        if slot is not None:
            slots.setdefault((ri, name), {}).setdefault(slot, {})[sub] = _typed(f.subfield(sub), raw)
        else:
            out.setdefault(ri, {})[name] = _typed(f, raw)
    for (ri, name), by_slot in slots.items():
        f = fields[name]
        records = []
        for slot in sorted(by_slot):
            rec = by_slot[slot]
            if any(s.empty_choice and rec.get(s.name) == "" for s in f.subfields):
                continue  # "no strategy": the row stores no record
            for s in f.subfields:
                if s.type == "const":
                    rec[s.name] = s.const
            records.append(rec)
        out.setdefault(ri, {})[name] = records
    for u in units:  # records fields the adjudicator left empty: no record
        for f in rnd.fields:
            if f.type == "records":
                out.setdefault(u["row_index"], {}).setdefault(f.name, [])
    return out


def _typed(f, raw: Any) -> Any:
    if f.type == "choice":
        v = raw[0] if isinstance(raw, list) and raw else raw
        return "" if (f.empty_choice and v == f.empty_choice) else v
    if f.type == "multichoice":
        return list(raw or [])
    if f.type == "rows":
        return sorted(int(x) - 1 for x in raw or [])
    if f.type == "number":
        return int(raw) if isinstance(raw, (int, float)) and float(raw).is_integer() else raw
    return raw


def pull(desks: DeskAccess, rnd, scenarios: Sequence[str] = taxonomy.SCENARIOS,
         ignored: list[str] | None = None) -> pa.Table:
    """Adjudicators' submitted answers as label-table lines (only the rows each task adjudicates),
    each from the adjudicator's own desk and only by its owner: answers by any other login there
    are left out and named in ``ignored``.

    Cancelled (skipped) annotations are ignored; when a task has several submitted annotations
    (also on several adjudicators' desks) the most recently updated one wins.
    """
    chosen: dict[tuple[str, str], tuple[tuple, str, dict, dict]] = {}  # (scenario, sample) -> latest
    for judge in desks.people("adjudicator"):
        client, owner = desks.client(judge), desks.owner_id(judge)
        for scenario in scenarios:
            project = client.find_project(project_key(rnd.name, scenario))
            if project is None:
                continue
            for task in json.loads(client.export_snapshot(project.id) or b"[]"):
                anns = []
                for a in task.get("annotations") or []:
                    by = a.get("completed_by")
                    author = by.get("id") if isinstance(by, dict) else by
                    if owner is None or author != owner:
                        if ignored is not None:
                            ignored.append(f"answer {a.get('id')} on {desks.where(judge)} ({task['data'].get('sample_id')}) "
                                           f"is not by the desk's owner: not counted")
                    elif not a.get("was_cancelled"):
                        anns.append(a)
                if not anns:
                    continue
                ann = max(anns, key=lambda a: (a.get("updated_at") or "", a.get("id") or 0))
                rank = (ann.get("updated_at") or "", judge, ann.get("id") or 0)
                key = (scenario, task["data"]["sample_id"])
                if key not in chosen or rank > chosen[key][0]:
                    chosen[key] = (rank, judge, task["data"], ann)
    lines: list[dict] = []
    for (scenario, _), (_, who, data, ann) in sorted(chosen.items()):
        values = results_to_values(rnd, data, ann.get("result") or [])
        wanted = data.get("adjudicate") or {}
        for ri, fields in sorted(values.items()):
            for name, v in sorted(fields.items()):
                if wanted and name not in wanted.get(str(ri), []) and not _paired(rnd, name, wanted.get(str(ri))):
                    continue
                lines.append({"round": rnd.name, "sample_id": data["sample_id"],
                              "scenario": data.get("scenario") or scenario, "row_index": ri,
                              "annotator": who, "field": name, "value": json.dumps(v, ensure_ascii=False),
                              "annotation_id": ann.get("id"), "lead_time_s": ann.get("lead_time"),
                              "created_at": ann.get("created_at"), "updated_at": ann.get("updated_at")})
    return pa.Table.from_pylist(lines, schema=schemas.LABELS)


def _paired(rnd, name: str, disputed: list[str] | None) -> bool:
    """Descriptive text on an adjudicated row follows the adjudicator too (gold rule 4)."""
    if not disputed:
        return False
    f = rnd.field(name)
    return f.type == "text" and not f.prefill


def _round_labels(root: DataRoot, round_name: str) -> pa.Table:
    path = root.labels(round_name)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no labels; run `rescue annotate pull {round_name}` first")
    return pq.read_table(path)


def push_round(desks: DeskAccess, root: DataRoot, round_name: str,
               samples: Sequence[dict] | None = None) -> PushSummary:
    """The adjudication push of a pulled round: its disagreements into the adjudication projects.

    ``samples``: the samples the round was pushed from (default: the work store and the corpus).
    """
    rnd = load_round(check_name(round_name, "round"))
    labels = _round_labels(root, rnd.name)
    aliases = annotator_aliases(root, rnd.name, _round_annotators(labels, rnd.name))
    return push(desks, rnd, labels, corpus.load_annotated(root) if samples is None else samples, aliases)


@dataclass(frozen=True)
class AdjudicationPull:
    """The adjudicators' answers of a round, as stored at ``path``."""

    round: str
    table: pa.Table
    path: Path
    ignored: tuple[str, ...] = ()  # answers on adjudicators' desks by other logins: never counted

    @property
    def rows(self) -> int:
        """Adjudicated rows (sample, row)."""
        return len(set(zip(self.table.column("sample_id").to_pylist(), self.table.column("row_index").to_pylist())))


class AdjudicatorIsAnnotator(ValueError):
    """Adjudication answers from someone who annotated the round."""


def pull_round(desks: DeskAccess, root: DataRoot, round_name: str) -> AdjudicationPull:
    """Pull a round's adjudications and write them to ``DataRoot.adjudications`` (deterministic bytes)."""

    rnd = load_round(check_name(round_name, "round"))
    ignored: list[str] = []
    table = pull(desks, rnd, ignored=ignored)
    labels = pq.ParquetFile(root.labels(rnd.name)).read(columns=["sample_id", "annotator"]) \
        if root.labels(rnd.name).is_file() else None
    labelled = set(labels.column("annotator").to_pylist()) if labels is not None else set()
    if labels is not None:  # the adjudication project may hold other data roots' samples: only ours
        ours = set(labels.column("sample_id").to_pylist())
        table = table.filter(pa.array([sid in ours for sid in table.column("sample_id").to_pylist()], pa.bool_()))
    annotated = labelled | set(pushed_annotators(root, rnd.name))
    judges = table.column("annotator").to_pylist()
    clash = sorted({a for a in judges if a in annotated})
    if clash:
        counts = {a: judges.count(a) for a in clash}
        raise AdjudicatorIsAnnotator(
            f"adjudication of round {rnd.name!r} refused: {', '.join(f'{a} ({n} answers)' for a, n in counts.items())} "
            f"annotated this round and cannot adjudicate it. Nothing was written; delete those answers in the "
            f"project '{project_title(rnd.name, '...')}' and have someone who did not annotate the round adjudicate")
    table = table.sort_by([("sample_id", "ascending"), ("row_index", "ascending"), ("field", "ascending"),
                           ("annotator", "ascending")])
    return AdjudicationPull(rnd.name, table, store.write_parquet(table, root.adjudications(rnd.name)), tuple(ignored))
