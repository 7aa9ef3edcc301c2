"""Pull a round back from Label Studio: archive the raw export, then parse and validate it.

For every annotator project of the round (see :mod:`.push`) an export of all its tasks is
taken and written, unchanged and before any parsing, to ``DataRoot.export``:
``<data root>/annotation/exports/<round>/<scenario>/<annotator slug>/<sha256>.json`` (content
addressed, append-only: an identical state is not written twice; the annotator's e-mail becomes
a directory name through ``paths.slug``), and beside it ``<sha256>.predictions.json``: what the
export names by id only (the project's predictions and the annotators' e-mails,
:func:`.acceptance.archive_predictions`), so the pre-annotation acceptance can be rebuilt from
the archive alone (:func:`rebuild_acceptance`). Then every annotation is
checked against the round definition - Label Studio itself accepts anything through its API -
and turned into the long label table (``schemas.LABELS``): one line per (sample, row,
annotator, field) with the value as JSON of the row-schema type and the scenario of the task. A field with a problem gets no
line; the problem goes to the report (``schemas.LABEL_PROBLEMS``) with the offending value.
Nothing is "fixed" silently.

Nothing already pulled is lost:

* A pull of some annotators (``annotators=[...]``, ``rescue annotate pull ROUND -a EMAIL``)
  replaces only those annotators' lines and problems in the round's tables; everyone else's
  stay as they were pulled before.
* The round's push record (:mod:`.pushed`) says which samples each annotator's project was
  given. A task (or whole project) deleted in Label Studio after the push is reported, one
  problem per (sample, annotator), in the problems table and :attr:`PullResult.missing`; the
  label lines pulled for it before are kept. Pushing the round again recreates the task.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import schemas, store, taxonomy
from pipeline.annotation import acceptance, ls_config, naming, voice_naming
from pipeline.annotation.desks import DeskAccess
from pipeline.annotation.push import parse_project_key
from pipeline.annotation.pushed import read_pushed
from pipeline.annotation.rounds import Field, Round, load_round, round_names
from pipeline.annotation.windows import stitch_tasks
from pipeline.paths import DataRoot, check_name


EXPORT_WORKERS = 3


def archive_export(data_root: str | os.PathLike, round_name: str, scenario: str, annotator: str,
                   raw: bytes) -> tuple[Path, bool]:
    """Write a raw export once under its sha256 (``DataRoot.export``); ``(path, newly_written)``."""
    path = DataRoot(data_root).export(round_name, scenario, annotator, hashlib.sha256(raw).hexdigest())
    if path.exists():
        return path, False
    store.atomic_write_bytes(path, raw)
    return path, True


# --- validation of one annotation ------------------------------------------------------------

class _Problems:
    def __init__(self, round_name: str, sample_id: str, annotator: str):
        self.base = {"round": round_name, "sample_id": sample_id, "annotator": annotator}
        self.items: list[dict] = []

    def add(self, row_index: int | None, field_name: str | None, problem: str, value=None) -> None:
        self.items.append({**self.base, "row_index": row_index, "field": field_name, "problem": problem,
                           "value": None if value is None else json.dumps(value, ensure_ascii=False)})


@dataclass
class _Ctx:
    scenario: str
    participants: list[str]
    n_rows: int
    row_index: int
    speaker: str


def _convert(f: Field, raw, ctx: _Ctx, path: str, problems: _Problems) -> tuple[bool, object]:
    """(ok, value) of one control's raw value; raw None = not filled (value is the empty form)."""
    ri = ctx.row_index
    if f.type == "const":
        return True, f.const
    if raw is None or raw == [] or (isinstance(raw, str) and not raw.strip()):
        return True, {"text": "", "choice": "", "multichoice": [], "rows": [], "number": None}[f.type]
    if f.type == "text":
        return True, str(raw).strip()
    if f.type == "number":
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or float(raw) != int(raw):
            problems.add(ri, path, "not a whole number", raw)
            return False, None
        lo, hi = f.minimum, f.maximum
        if (lo is not None and raw < lo) or (hi is not None and raw > hi):
            problems.add(ri, path, f"out of range [{lo:g}, {hi:g}]", raw)
            return False, None
        return True, int(raw)
    allowed = f.options(ctx.scenario, ctx.participants, ctx.n_rows)
    items = raw if isinstance(raw, list) else [raw]
    bad = [v for v in items if v not in allowed]
    if bad:
        what = "row that does not exist" if f.type == "rows" else "unknown label"
        problems.add(ri, path, f"{what}: {', '.join(map(str, bad))}", raw)
        return False, None
    if f.type == "choice":
        if len(items) != 1:
            problems.add(ri, path, "more than one choice", raw)
            return False, None
        return True, "" if items[0] == f.empty_choice else items[0]
    if f.type == "rows":
        return True, sorted(int(v) - 1 for v in items)  # displayed row_index -> 0-based position
    return True, list(items)


def _check_multi(f: Field, value: list, other, ctx: _Ctx, path: str, problems: _Problems) -> bool:
    """Self-target (``distinct_from``) and the couple rule (group label alone)."""
    ok = True
    others = other if isinstance(other, list) else [other]
    clash = [v for v in (value if isinstance(value, list) else [value]) if v and v in others]
    if f.distinct_from and clash:
        problems.add(ctx.row_index, path, f"self-target: {', '.join(clash)} is also the {f.distinct_from}", value)
        ok = False
    group = taxonomy.group_label(ctx.scenario)
    if ctx.scenario in f.group_label_alone and isinstance(value, list) and group in value and len(value) > 1:
        problems.add(ctx.row_index, path, f"{group} must be the only target when used", value)
        ok = False
    return ok


def _row_values(rnd: Round, raw: dict, ctx: _Ctx, problems: _Problems) -> dict[str, object]:
    """Validated ``{field: value}`` of one row; fields with a problem are left out."""
    out: dict[str, object] = {}
    plain = {f.name: f for f in rnd.fields if f.type != "records"}
    for f in rnd.fields:
        if f.type == "records":
            ok, records = _records(f, raw.get(f.name) or {}, ctx, problems,
                                   ls_config.record_defaults(rnd).get(f.name, {}))
            if ok:
                out[f.name] = records
            continue
        ok, value = _convert(f, raw.get(f.name), ctx, f.name, problems)
        if not ok:
            continue
        if f.required and value in ("", [], None) and not (f.empty_choice and raw.get(f.name) is not None):
            problems.add(ctx.row_index, f.name, "missing required field")
            continue
        if f.distinct_from and value not in ("", [], None):
            if f.distinct_from in plain:
                o_ok, other = _convert(plain[f.distinct_from], raw.get(f.distinct_from), ctx, f.distinct_from, _Problems("", "", ""))
                other = other if o_ok else None
            else:
                other = ctx.speaker if f.distinct_from == "primary_speaker" else None
            if not _check_multi(f, value, other, ctx, f.name, problems):
                continue
        out[f.name] = value
    return out


def _blank(value) -> bool:
    return value in (None, [], "") or (isinstance(value, str) and not value.strip())


def _only_defaults(raw: dict, defaults: dict[str, str], ctx: _Ctx) -> bool:
    """An entry holding nothing but the round's pre-filled defaults (e.g. emotion's "who feels
    it" = the speaker, with no feeling or intensity): the pre-fill left alone on a row where no
    feeling can be read. It is no entry; the annotator need not clear it."""
    filled = {k: v for k, v in raw.items() if not _blank(v)}
    if not filled or not set(filled) <= set(defaults):
        return False
    for sub, value in filled.items():
        want = ls_config.default_value(defaults[sub], ctx.speaker)
        if value != want and value != [want]:
            return False
    return True


def _records(f: Field, slots: dict[int, dict], ctx: _Ctx, problems: _Problems,
             defaults: dict[str, str] | None = None) -> tuple[bool, list[dict]]:
    """``(ok, records)`` of one row's records field; ``defaults``: the field's pre-filled
    subfields (``ls_config.record_defaults``), whose untouched values alone make no record."""
    ok, records, decided = True, [], False
    for slot in sorted(slots):
        raw = slots[slot]
        if slot > f.max_items:
            problems.add(ctx.row_index, f.name, f"slot {slot} does not exist (max {f.max_items})", raw)
            ok = False
            continue
        if all(v in (None, [], "") for v in raw.values()):
            continue
        if slot == 1 and defaults and _only_defaults(raw, defaults, ctx):  # defaults start slot 1 only
            continue
        decided = True
        rec: dict[str, object] = {}
        none_chosen = False
        for sub in f.subfields:
            path = f"{f.name}.{sub.name}"
            s_ok, value = _convert(sub, raw.get(sub.name), ctx, path, problems)
            if not s_ok:
                ok = False
                continue
            if sub.empty_choice and raw.get(sub.name) is not None and value == "":
                none_chosen = True
            rec[sub.name] = value
        if none_chosen:  # e.g. "no strategy": no record; anything else filled is contradictory
            extra = [s.name for s in f.subfields if s.type != "const" and not s.empty_choice
                     and rec.get(s.name) not in (None, "", [])]
            if extra:
                problems.add(ctx.row_index, f.name, f"{', '.join(extra)} filled although no record was chosen", raw)
                ok = False
            continue
        for sub in f.subfields:
            if sub.required and sub.type != "const" and sub.name in rec and rec[sub.name] in ("", [], None):
                problems.add(ctx.row_index, f"{f.name}.{sub.name}", f"incomplete record in slot {slot}: missing {sub.name}")
                ok = False
            if sub.distinct_from and rec.get(sub.name) not in (None, "", []):
                other = rec.get(sub.distinct_from)
                if not _check_multi(sub, rec[sub.name], other, ctx, f"{f.name}.{sub.name}", problems):
                    ok = False
        records.append(rec)
    if f.required and not decided:
        problems.add(ctx.row_index, f.name, "missing required field")
        ok = False
    return ok, records


def parse_annotation(rnd: Round, data: dict, annotation: dict, annotator: str) -> tuple[list[dict], list[dict]]:
    """Label lines and problems of one annotation of one task."""
    sample_id = data.get("sample_id", "?")
    problems = _Problems(rnd.name, sample_id, annotator)
    annotation = voice_naming.resolve(rnd, data, annotation, problems.add)  # voice names -> every row of the voice
    units = data.get("units") or []
    raw: dict[int, dict] = defaultdict(dict)
    for result in annotation.get("result") or []:
        name = result.get("from_name", "")
        if ls_config.is_prefill_control(name):  # a form's pre-fill mark or "checked" box: no answer
            continue
        parsed = naming.parse_control_name(name)
        if parsed is None:
            problems.add(None, name, "unknown control", result.get("value"))
            continue
        fname, slot, sub, unit = parsed
        try:
            f = rnd.field(fname)
            if (slot is None) != (f.type != "records") or (sub is not None and f.subfield(sub) is None):
                raise KeyError(name)
        except KeyError:
            problems.add(None, name, "unknown field", result.get("value"))
            continue
        if unit >= len(units):
            problems.add(None, name, f"row does not exist (unit {unit} of {len(units)})", result.get("value"))
            continue
        value = ls_config.result_value(result)
        if slot is None:
            raw[unit][fname] = value
        else:
            raw[unit].setdefault(fname, {}).setdefault(slot, {})[sub] = value
    meta = {
        "round": rnd.name, "sample_id": sample_id, "scenario": data.get("scenario"), "annotator": annotator,
        "annotation_id": annotation.get("id"), "lead_time_s": annotation.get("lead_time"),
        "created_at": annotation.get("created_at"), "updated_at": annotation.get("updated_at"),
    }
    labels = []
    for i, u in enumerate(units):
        ctx = _Ctx(data["scenario"], list(data.get("participants") or []), len(data.get("turns") or []),
                   u["row_index"], u.get("speaker") or "")
        for fname, value in _row_values(rnd, raw.get(i, {}), ctx, problems).items():
            labels.append({**meta, "row_index": u["row_index"], "field": fname,
                           "value": json.dumps(value, ensure_ascii=False)})
    return labels, problems.items


def _author(completed_by) -> int | None:
    """The user id an export names as an annotation's author (an id, or a user object)."""
    if isinstance(completed_by, dict):
        completed_by = completed_by.get("id")
    return completed_by if isinstance(completed_by, int) and not isinstance(completed_by, bool) else None


def parse_export(rnd: Round, tasks: list[dict], annotator: str, users: dict[int, str] | None = None,
                 owner_id: int | None = None, where: str | None = None) -> tuple[list[dict], list[dict], int]:
    """Label lines, problems and the number of done tasks of one annotator project's export.

    Only the desk owner's annotations count (``owner_id``: their user id on the desk; without it,
    annotations whose author is ``annotator`` by e-mail). Any other author's annotation (a login
    invited or made through the API on that desk) is reported naming the desk (``where``), never
    counted (moved annotations are dropped by :func:`pull_round` before windows are stitched).
    ``users`` maps the desk's user ids to e-mails.
    """
    users = users or {}
    where = where or f"{annotator}'s project"

    def _own(a: dict) -> bool:
        author = _author(a.get("completed_by"))
        if owner_id is not None:
            return author == owner_id
        by = a.get("completed_by")
        return (by.get("email") if isinstance(by, dict) else users.get(author)) in (None, annotator)

    def _who(a: dict) -> str:
        author = _author(a.get("completed_by"))
        return users.get(author) or (f"user {author}" if author is not None else "no author")

    labels, problems, done = [], [], 0
    seen: set[str] = set()
    for task in tasks:
        data = task.get("data") or {}
        sid = data.get("sample_id", "?")
        report = _Problems(rnd.name, sid, annotator)
        if sid in seen:
            report.add(None, None, "duplicate task for this sample; only the first is used")
            problems += report.items
            continue
        seen.add(sid)
        anns = list(task.get("annotations") or [])
        if not anns:
            continue
        foreign = [a for a in anns if not _own(a)]
        for a in foreign:
            report.add(None, None, f"annotation {a.get('id')} by {_who(a)} on {where}: not the desk's owner; "
                                   "not counted")
        own = [a for a in anns if a not in foreign]
        live = [a for a in own if not a.get("was_cancelled")]
        if own and not live:
            report.add(None, None, "skipped (cancelled) by the annotator")
            done += 1
        if live:
            live.sort(key=lambda a: (a.get("updated_at") or "", a.get("id") or 0))
            if len(live) > 1:
                report.add(None, None, f"{len(live)} annotations; the latest is used")
            lines, probs = parse_annotation(rnd, data, live[-1], annotator)
            labels += lines
            report.items += probs
            done += 1
        problems += report.items
    return labels, problems, done


# --- pull ------------------------------------------------------------------------------------

@dataclass
class PullResult:
    round: str
    labels: pa.Table
    problems: pa.Table
    snapshots: list[Path] = field(default_factory=list)
    new_snapshots: int = 0
    progress: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # (annotator, scenario) -> (done, total)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (sample_id, annotator): pushed, gone from Label Studio
    kept: list[str] = field(default_factory=list)  # annotators whose earlier lines were kept (not pulled this time)

    def summary(self) -> str:
        s = (f"round {self.round}: {self.labels.num_rows} label lines, {self.problems.num_rows} problems, "
             f"{len(self.snapshots)} exports ({self.new_snapshots} new)")
        if self.kept:
            s += f"; lines of {', '.join(self.kept)} kept from the earlier pull"
        if self.missing:
            s += (f"; {len(self.missing)} pushed tasks are gone from Label Studio: "
                  + ", ".join(f"{sid} ({who})" for sid, who in self.missing[:5])
                  + (" ..." if len(self.missing) > 5 else ""))
        return s


def _sorted_table(records: list[dict], schema: pa.Schema, keys: list[str]) -> pa.Table:
    def key(r):
        return tuple("" if r.get(k) is None else (f"{r[k]:012d}" if isinstance(r.get(k), int) else str(r[k]))
                     for k in keys)
    return pa.Table.from_pylist(sorted(records, key=key), schema=schema)


def pull_round(desks: DeskAccess, round_name: str, data_root: str | os.PathLike,
               annotators: list[str] | None = None, write: bool = True) -> PullResult:
    """Export, archive, parse and validate every annotator project of a round, each from the
    annotator's own desk (:mod:`.desks`); only the desk owner's answers count.

    Returns the labels (``schemas.LABELS``) and problems (``schemas.LABEL_PROBLEMS``) and, when
    ``write``, stores them at ``DataRoot.labels`` / ``DataRoot.label_problems`` (identical bytes
    for an identical Label Studio state). The pull stage of a round: the CLI (``rescue annotate
    pull``) and the annotation-round flow both call it.
    """
    root = DataRoot(data_root)
    rnd = load_round(check_name(round_name, "round"))
    labels, problems, accepted = [], [], []
    result = PullResult(rnd.name, schemas.LABELS.empty_table(), schemas.LABEL_PROBLEMS.empty_table())

    def problem(who: str, message: str, sid: str = "") -> None:
        problems.append({"round": rnd.name, "sample_id": sid, "row_index": None, "annotator": who,
                         "field": None, "problem": message, "value": None})

    people = desks.people("annotator")
    given = {k.partition("/")[2] for k in read_pushed(root, rnd.name)}  # whom the round was pushed to
    wanted = []  # (client, project, (round, scenario, annotator), users, owner id)
    for who in people:
        if (annotators and who not in annotators) or (not annotators and given and who not in given):
            continue  # a desk the round never reached is not asked (it may be down)
        client = desks.client(who)
        users = {u["id"]: u["email"] for u in client.users()}
        owner = desks.owner_id(who)
        for project in sorted(client.projects(), key=lambda p: p.key):
            parsed = parse_project_key(project.key)
            if parsed is None or parsed[0] != rnd.name:
                continue
            if parsed[2] != who:  # a project made on this desk in someone else's name
                problem(who, f"project {project.id} on {desks.where(who)} is named for {parsed[2]}: not counted")
                continue
            wanted.append((client, project, parsed, users, owner))
    for who in annotators or []:
        if who not in people:
            problem(who, f"{who} has no annotator's desk; nothing pulled for them (earlier lines kept)")
    # The server serialises exports slowly (seconds per large project): ask for a few at once.
    # Each project's predictions are read right after its export (the export names them by id).
    with ThreadPoolExecutor(EXPORT_WORKERS) as pool:
        exports = list(pool.map(lambda item: (item[0].export_tasks(item[1].id),
                                              acceptance.project_predictions(item[0], item[1].id)), wanted))
    ledger = _Ledger(root, rnd.name)
    exported: dict[tuple[str, str], set[str]] = {}  # (scenario, annotator) -> sample ids with a task
    for (_, project, (_, scenario, annotator), users, owner), (raw, predictions) in zip(wanted, exports):
        exported.setdefault((scenario, annotator), set())
        path, new = archive_export(root, rnd.name, scenario, annotator, raw)  # before parsing
        result.snapshots.append(path)
        result.new_snapshots += int(new)
        try:
            tasks = json.loads(raw)
        except ValueError as exc:
            problems.append({"round": rnd.name, "sample_id": "", "row_index": None, "annotator": annotator,
                             "field": None, "problem": f"export {path.name} is not JSON: {exc}", "value": None})
            continue
        exported[(scenario, annotator)] |= {(t.get("data") or {}).get("sample_id") for t in tasks
                                            if isinstance(t, dict)}
        # What annotators did with the pre-annotation (kept / changed / cleared): the predictions
        # are archived beside the export, and measured from that pair as a rebuild would.
        record, _ = acceptance.archive_predictions(root, path, acceptance.predictions_record(
            rnd.name, scenario, annotator, project.id, tasks, predictions, users))
        accepted += acceptance.measure_archived(rnd, tasks, record, parse=parse_annotation)
        moved = ledger.check(annotator, tasks)  # before stitching: a window is a task of its own
        for task in [t for t in tasks if isinstance(t, dict)] if moved else []:
            data = task.get("data") or {}
            for a in [a for a in task.get("annotations") or [] if a.get("id") in moved]:
                problem(annotator, f"annotation {a['id']} on {desks.where(annotator)}: {moved[a['id']]}; not counted",
                        data.get("sample_id", "?"))
                task["annotations"].remove(a)
        tasks, notes = stitch_tasks(tasks)  # windows of a long sample -> one task per sample
        problems += [{"round": rnd.name, "sample_id": sid, "row_index": None, "annotator": annotator,
                      "field": None, "problem": note, "value": None} for sid, note in notes]
        lines, probs, done = parse_export(rnd, tasks, annotator, users, owner, desks.where(annotator))
        labels += lines
        problems += probs
        result.progress[(annotator, scenario)] = (done, len(tasks))
    # Pushed but gone: a task or project deleted in Label Studio after the push.
    pulled = {a for (_, a) in exported}
    for key, sample_ids in sorted(read_pushed(root, rnd.name).items()):
        scenario, _, annotator = key.partition("/")
        if annotators and annotator not in annotators:
            continue
        have = exported.get((scenario, annotator))
        for sid in sample_ids:
            if have is not None and sid in have:
                continue
            what = "task" if have is not None else f"project ({rnd.name} / {scenario} / {annotator})"
            problems.append({"round": rnd.name, "sample_id": sid, "row_index": None, "annotator": annotator,
                             "field": None, "value": None,
                             "problem": f"pushed to {annotator} but its {what} is gone from Label Studio (deleted "
                                        f"after the push); labels pulled for it before are kept; `rescue annotate "
                                        f"push {rnd.name}` recreates the task"})
            result.missing.append((sid, annotator))
    for who in annotators or []:
        if who not in pulled and who in people:
            problems.append({"round": rnd.name, "sample_id": "", "row_index": None, "annotator": who, "field": None,
                             "value": None, "problem": f"{who} has no project in round {rnd.name}; nothing pulled "
                                                       "for them (earlier lines kept)"})
    # Keep what was pulled before for annotators not pulled now, and for tasks that are gone.
    gone = set(result.missing)
    old_labels = _read_rows(root.labels(rnd.name))
    old_problems = _read_rows(root.label_problems(rnd.name))
    labels += [r for r in old_labels if r["annotator"] not in pulled or (r["sample_id"], r["annotator"]) in gone]
    problems += [r for r in old_problems if r["annotator"] not in pulled and (not annotators or r["annotator"] not in annotators)]
    result.kept = sorted({r["annotator"] for r in old_labels if r["annotator"] not in pulled})
    result.labels = _sorted_table(labels, schemas.LABELS, ["sample_id", "row_index", "annotator", "field"])
    result.problems = _sorted_table(problems, schemas.LABEL_PROBLEMS,
                                    ["sample_id", "row_index", "annotator", "field", "problem"])
    if write:
        ledger.write()
        store.write_parquet(result.labels, root.labels(rnd.name))
        store.write_parquet(result.problems, root.label_problems(rnd.name))
        acceptance.write(root, rnd.name, accepted, pulled, gone)
    return result


class _Ledger:
    """Where each annotation of a round was first pulled from: ``(annotator, annotation id,
    created_at) -> (sample_id, window index, author id)``. Label Studio lets a login change an
    annotation's task or author through its API; an annotation found later on another task or
    under another author was moved (e.g. an answer made to count for another task) and is
    reported, never counted. Entries are only ever added (``DataRoot.annotation_ledger``)."""

    def __init__(self, root: DataRoot, round_name: str):
        self.path = root.annotation_ledger(round_name)
        self.seen: dict[str, list] = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.added = False

    def check(self, annotator: str, tasks: list[dict]) -> dict[int, str]:
        moved: dict[int, str] = {}
        for task in tasks:
            data = task.get("data") or {} if isinstance(task, dict) else {}
            window = (data.get("window") or {}).get("index")
            for a in task.get("annotations") or [] if isinstance(task, dict) else []:
                key = f"{annotator}|{a.get('id')}|{a.get('created_at')}"
                now = [data.get("sample_id"), window, _author(a.get("completed_by"))]
                first = self.seen.get(key)
                if first is None:
                    self.seen[key] = now
                    self.added = True
                elif first[:2] != now[:2]:
                    moved[a.get("id")] = f"moved from {first[0]} window {first[1]} to {now[0]} window {now[1]}"
                elif first[2] != now[2]:
                    moved[a.get("id")] = f"its author changed from user {first[2]} to user {now[2]}"
        return moved

    def write(self) -> None:
        if self.added:
            store.atomic_write_text(self.path, store.canonical_json(self.seen))


@dataclass
class Rebuilt:
    round: str
    path: Path | None
    lines: list[dict]
    states: int                                       # export states read (with their predictions)
    without_predictions: list[Path] = field(default_factory=list)  # exports archived before predictions were


def rebuild_acceptance(data_root: str | os.PathLike, round_name: str, write: bool = True) -> Rebuilt:
    """The round's acceptance table from the archive alone (no Label Studio): for each annotator
    project, its latest archived export state with its predictions record
    (:func:`.acceptance.measure_archived`, as the pull computes it); a sample pushed to that
    annotator but gone from that state keeps its lines from the latest earlier state that had it
    (as a pull keeps them). Exports archived before predictions were have no record: they are
    listed in :attr:`Rebuilt.without_predictions` and give no lines. Writes the whole table when
    ``write`` and the archive has a state (the same lines the pulls wrote)."""
    root = DataRoot(data_root)
    rnd = load_round(check_name(round_name, "round"))
    pairs, bare = acceptance.archived_states(root, rnd.name)
    by_project: dict[tuple[str, str], list[tuple[Path, dict]]] = {}
    for export, record in pairs:
        by_project.setdefault((record["scenario"], record["annotator"]), []).append((export, record))
    pushed = read_pushed(root, rnd.name)
    lines: list[dict] = []
    for (scenario, annotator), states in sorted(by_project.items()):
        *earlier, (export, record) = states
        tasks = json.loads(export.read_bytes())
        lines += acceptance.measure_archived(rnd, tasks, record, parse=parse_annotation)
        have = {(t.get("data") or {}).get("sample_id") for t in tasks if isinstance(t, dict)}
        gone = [sid for sid in pushed.get(f"{scenario}/{annotator}", []) if sid not in have]
        read = {}  # earlier states are read only for a sample deleted after the push, each once
        for sid in gone:  # deleted after the push: the lines of the last state that had it
            for old_export, old_record in reversed(earlier):
                if old_export not in read:
                    read[old_export] = json.loads(old_export.read_bytes())
                mine = [t for t in read[old_export]
                        if isinstance(t, dict) and (t.get("data") or {}).get("sample_id") == sid]
                if mine:
                    lines += acceptance.measure_archived(rnd, mine, old_record, parse=parse_annotation)
                    break
    path = None
    if write and pairs:  # an empty archive leaves the table as it is
        path = acceptance.write(root, rnd.name, lines, {a for _, a in by_project}, replace=True)
    return Rebuilt(rnd.name, path, lines, len(pairs), bare)


def _read_rows(path: Path) -> list[dict]:
    """The lines of an earlier pull's table ([] when there is none)."""
    if not path.is_file():
        return []
    return pq.ParquetFile(path).read().to_pylist()


def missing_tasks(desks: DeskAccess, data_root: str | os.PathLike,
                  rounds: list[str] | None = None) -> list[tuple[str, str, str, str]]:
    """``(round, scenario, annotator, sample_id)`` pushed (the push record) but gone from the
    annotators' desks: a deleted task or project. For ``rescue annotate status``."""
    root = DataRoot(data_root)
    live: dict[tuple[str, str, str], set[str]] = {}
    projects = [(desks.client(who), p, parsed) for who in desks.people("annotator")
                for p in desks.client(who).projects() if (parsed := parse_project_key(p.key)) and parsed[2] == who]
    out = []
    for name in rounds or round_names():
        record = read_pushed(root, name)
        if not record:
            continue
        for client, project, parsed in projects:
            if parsed[0] == name:
                live.setdefault(parsed, set()).update(
                    (t.get("data") or {}).get("sample_id") for t in client.tasks(project.id))
        for key, sample_ids in sorted(record.items()):
            scenario, _, annotator = key.partition("/")
            have = live.get((name, scenario, annotator), set())
            out += [(name, scenario, annotator, sid) for sid in sample_ids if sid not in have]
    return out


def round_progress(desks: DeskAccess) -> dict[tuple[str, str, str], tuple[int, int]]:
    """``(round, scenario, annotator) -> (done, total)`` from the live task counts of each desk."""
    out = {}
    for who in desks.people("annotator"):
        client = desks.client(who)
        for project in client.projects():
            parsed = parse_project_key(project.key)
            if parsed is None or parsed[2] != who:
                continue
            tasks = client.tasks(project.id)
            done = sum(1 for t in tasks if t.get("total_annotations", 0) or t.get("cancelled_annotations", 0))
            out[parsed] = (done, len(tasks))
    return out
