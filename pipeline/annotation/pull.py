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

A pull again with nothing new is a no-op. Before exporting a project the pull looks at it
(:func:`_look`): its live counts and config, the tasks Label Studio changed since a window
before the last look (a task is stamped whenever it, an annotation or a prediction of it is
saved or deleted) and every task holding a draft, with a digest of those drafts. A project that
looks as at the last pull is read from its archived export instead of exported again; when every
project does, and the push record, the annotators asked, the code and the stored tables are as
the last pull left them, nothing is parsed or written (``annotation/sync/<round>.pull.json``).
That costs, per desk, its users and projects, and per project one request, plus one per task
holding a draft (up to ``DRAFTS_ONE_BY_ONE``; past that, one partial export).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import threading
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import schemas, store, taxonomy
from pipeline.annotation import acceptance, ls_config, naming, voice_naming
from pipeline.annotation import rounds as rounds_module
from pipeline.annotation import windows as windows_module
from pipeline.annotation.client import ID_CHUNK, SETTLE_S, LabelStudioClient, Project, chunks, format_time, parse_time
from pipeline.annotation.desks import DeskAccess
from pipeline.annotation.push import each_desk as _each_desk
from pipeline.annotation.push import parse_project_key
from pipeline.annotation.pushed import files_digest, read_pushed, read_sync, write_sync
from pipeline.annotation.rounds import Field, Round, load_round, round_names
from pipeline.annotation.windows import stitch_tasks
from pipeline.paths import DataRoot, check_name


def archive_export(data_root: str | os.PathLike, round_name: str, scenario: str, annotator: str,
                   raw: bytes) -> tuple[Path, bool]:
    """Write a raw export once under its sha256 (``DataRoot.export``); ``(path, newly_written)``."""
    path = DataRoot(data_root).export(round_name, scenario, annotator, hashlib.sha256(raw).hexdigest())
    if path.exists():
        return path, False
    store.atomic_write_bytes(path, raw)
    return path, True


# --- validation of one annotation ------------------------------------------------------------

# The parse's hot spots, cached: control names, a field's allowed values per sample shape, and
# one JSON encoder (``json.dumps(..., ensure_ascii=False)`` builds a new encoder on every call).
_dumps = json.JSONEncoder(ensure_ascii=False).encode


@lru_cache(maxsize=1 << 16)
def _control(name: str) -> tuple[bool, tuple | None]:
    """(a pre-fill mark or box, ``naming.parse_control_name``) of a result's ``from_name``."""
    return ls_config.is_prefill_control(name), naming.parse_control_name(name)


@lru_cache(maxsize=1 << 12)
def _options(f: Field, scenario: str, participants: tuple[str, ...], n_rows: int) -> tuple[str, ...]:
    return f.options(scenario, participants, n_rows)


class _Problems:
    def __init__(self, round_name: str, sample_id: str, annotator: str):
        self.base = {"round": round_name, "sample_id": sample_id, "annotator": annotator}
        self.items: list[dict] = []

    def add(self, row_index: int | None, field_name: str | None, problem: str, value=None) -> None:
        self.items.append({**self.base, "row_index": row_index, "field": field_name, "problem": problem,
                           "value": None if value is None else _dumps(value)})


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
    allowed = _options(f, ctx.scenario, tuple(ctx.participants), ctx.n_rows)
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
        prefill, parsed = _control(name) if isinstance(name, str) else (False, None)
        if prefill:  # a form's pre-fill mark or "checked" box: no answer
            continue
        if parsed is None:
            problems.add(None, name if isinstance(name, str) else _dumps(name), "unknown control", result.get("value"))
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
            labels.append({**meta, "row_index": u["row_index"], "field": fname, "value": _dumps(value)})
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


# --- what a pull saw of each project --------------------------------------------------------

# What the pull's output is a function of, besides Label Studio: these files. A pull whose exports,
# inputs and code are as at the last pull, and whose tables are as it wrote them, writes nothing.
_CODE = tuple(Path(m.__file__) for m in (acceptance, ls_config, naming, voice_naming, windows_module, rounds_module,
                                         taxonomy, schemas)) + (Path(__file__), taxonomy.SCHEMAS_DIR / "taxonomies.yaml")



def _file_sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _since(answered: dt.datetime | None) -> dt.datetime | None:
    return answered - dt.timedelta(seconds=SETTLE_S) if answered else None


DRAFTS_ONE_BY_ONE = 10  # up to this many tasks with drafts, a look reads their drafts task by task


def _look(client: LabelStudioClient, project: Project, since: dt.datetime) -> dict:
    """What Label Studio shows of a project without exporting it: its live counts, its config,
    every task changed since ``since`` or holding a draft (``[updated_at, annotations, skipped,
    draft]``), and a digest of those drafts (read task by task, or by a partial export of those
    tasks when there are many).
    Two looks from the same ``since`` are equal only if no task, annotation, prediction or draft
    of the project was added, changed or deleted in between (:data:`.client.SETTLE_S`)."""
    seen, _ = client.changed_tasks(project.id, since, drafts=True,
                                   include="id,updated_at,total_annotations,cancelled_annotations,draft_exists")
    window = {str(t["id"]): [t.get("updated_at"), t.get("total_annotations", 0), t.get("cancelled_annotations", 0),
                             bool(t.get("draft_exists"))] for t in seen}
    drafts = None
    with_drafts = [t["id"] for t in seen if t.get("draft_exists")]
    if with_drafts:
        if len(with_drafts) <= DRAFTS_ONE_BY_ONE:  # a request per task: nothing written on the desk
            found = [d for task_id in with_drafts for d in client.task_drafts(task_id)]
        else:  # a partial export (Label Studio keeps a copy of every export under its export/ folder)
            found = [d for part in chunks(with_drafts, ID_CHUNK) for t in json.loads(client.export_tasks(project.id, ids=part))
                     if isinstance(t, dict) for d in t.get("drafts") or []]
        marks = sorted(([d.get("id"), d.get("task"), d.get("user"), d.get("annotation"), d.get("updated_at"),
                         d.get("was_postponed")] for d in found if isinstance(d, dict)), key=json.dumps)
        drafts = hashlib.sha256(json.dumps(marks).encode()).hexdigest()
    return {"key": project.key, "counts": list(project.counts or ()),
            "config": hashlib.sha256(project.label_config.encode()).hexdigest(),
            "since": format_time(since), "window": window, "drafts": drafts}


def _narrowed(look: dict, since: dt.datetime) -> dict:
    """``look`` as a look from the later ``since`` would have shown it (a subset of its window)."""
    keep = {i: v for i, v in look["window"].items() if v[3] or (parse_time(v[0]) or since) >= since}
    return {**look, "since": format_time(since), "window": keep}


@dataclass
class _Wanted:
    client: LabelStudioClient
    project: Project
    scenario: str
    annotator: str
    users: dict[int, str]
    owner: int | None
    look: dict | None = None          # what Label Studio showed before the export (None: could not look)
    raw: bytes | None = None          # exported now
    predictions: dict | None = None   # read now, with the export
    archived: Path | None = None      # unchanged since the last pull: its archived export
    ready: threading.Event = field(default_factory=threading.Event)  # looked at (and exported)

    @property
    def sha(self) -> str:
        """The sha256 of its export (the archived one's name)."""
        return self.archived.stem if self.archived is not None else hashlib.sha256(self.raw).hexdigest()


@dataclass
class _Desk:
    """What a pull read from one desk: its users, the round's projects on it and the problems of
    projects named for someone else; ``listed`` once those are known."""
    users: dict[int, str] = field(default_factory=dict)
    items: list[_Wanted] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    listed: threading.Event = field(default_factory=threading.Event)


@contextlib.contextmanager
def _reading(desks: DeskAccess, people: list[str], work: Callable[[str], None], read: dict[str, _Desk]):
    """Run ``work`` for every desk in the background (:func:`.push.each_desk`) and yield
    ``failed(event, who)``: it waits for ``event`` and raises the first failure (in ``people``'s
    order) of any desk; every event is set once the desks are done, failed or not."""
    errors: dict[str, BaseException] = {}

    def guarded(who: str) -> None:
        try:
            work(who)
        except BaseException as exc:
            errors[who] = exc
            raise

    def run_all() -> None:
        try:
            _each_desk(desks, people, guarded)
        finally:  # nothing waits forever on a desk that failed, or was never reached
            for desk in read.values():
                desk.listed.set()
                for item in desk.items:
                    item.ready.set()

    def failed(event: threading.Event, who: str) -> None:
        event.wait()
        if errors:
            raise errors[next(w for w in people if w in errors)]

    with ThreadPoolExecutor(1) as runner:  # leaving waits for the desks (their exports finish)
        background = runner.submit(run_all)
        yield failed
    background.result()


def _look_at(root: DataRoot, rnd: Round, item: _Wanted, old: dict | None, since_new: dt.datetime | None) -> None:
    """Look at the project: it is :attr:`_Wanted.archived` when it is as the last pull left it
    and that pull's export and predictions record are in the archive; else it is to be exported."""
    try:  # the pull state is a cache: anything odd in it means an export
        since_old = parse_time(old.get("since")) if isinstance(old, dict) else None
    except (TypeError, ValueError, AttributeError):
        old, since_old = None, None
    if item.project.counts is None or not (since_old or since_new):
        return  # nothing to compare with: exported
    look = _look(item.client, item.project, since_old or since_new)
    if isinstance(old, dict) and old.get("export") and {k: old.get(k) for k in look} == look:
        try:
            path = root.export(rnd.name, item.scenario, item.annotator, old["export"])
            records = root.export_predictions(rnd.name, item.scenario, item.annotator, old["export"])
        except (TypeError, ValueError):
            path = records = None
        if path is not None and path.is_file() and records.is_file():
            item.look, item.archived = look, path
            return
    item.look = _narrowed(look, since_new) if since_old and since_new and since_new > since_old else look


def _export(item: _Wanted) -> None:
    item.raw = item.client.export_tasks(item.project.id)
    item.predictions = acceptance.project_predictions(item.client, item.project.id)


def pull_round(desks: DeskAccess, round_name: str, data_root: str | os.PathLike,
               annotators: list[str] | None = None, write: bool = True) -> PullResult:
    """Export, archive, parse and validate every annotator project of a round, each from the
    annotator's own desk (:mod:`.desks`); only the desk owner's answers count.

    Returns the labels (``schemas.LABELS``) and problems (``schemas.LABEL_PROBLEMS``) and, when
    ``write``, stores them at ``DataRoot.labels`` / ``DataRoot.label_problems`` (identical bytes
    for an identical Label Studio state). The pull stage of a round: the CLI (``rescue annotate
    pull``) and the annotation-round flow both call it.

    A pull asks each desk for its users and projects, and each project for what changed since
    the last pull (:func:`_look`); a project with nothing new is read from its archived export,
    not exported again. When every export is as at the last pull (and the push record, the
    annotators asked, the code and the stored tables too), nothing is parsed or written: the
    stored tables are the answer (the pull state, ``annotation/sync/<round>.pull.json``). Desks
    are read side by side (:func:`.push.each_desk`); on a desk the projects are looked at side by
    side and exported one after another, and each export is parsed here as it arrives.
    """
    root = DataRoot(data_root)
    rnd = load_round(check_name(round_name, "round"))
    labels, problems, accepted = [], [], []
    result = PullResult(rnd.name, schemas.LABELS.empty_table(), schemas.LABEL_PROBLEMS.empty_table())

    def problem(who: str, message: str, sid: str = "") -> None:
        problems.append({"round": rnd.name, "sample_id": sid, "row_index": None, "annotator": who,
                         "field": None, "problem": message, "value": None})

    people = desks.people("annotator")
    pushed_record = read_pushed(root, rnd.name)
    given = {k.partition("/")[2] for k in pushed_record}  # whom the round was pushed to
    asked = [who for who in people
             if not ((annotators and who not in annotators) or (not annotators and given and who not in given))]
    state = read_sync(root, rnd.name, "pull")
    old_projects = state.get("projects") if isinstance(state.get("projects"), dict) else {}
    read = {who: _Desk() for who in asked}

    def read_desk(who: str) -> None:  # a desk the round never reached is not asked (it may be down)
        desk = read[who]
        client = desks.client(who)
        with ThreadPoolExecutor(1) as aside:  # reads only: asked side by side, the export one at a time
            users = aside.submit(client.users)
            listed = sorted(client.projects(), key=lambda p: p.key)
            since_new = _since(client.answered_at())
            desk.users = {u["id"]: u["email"] for u in users.result()}
        owner = next((uid for uid, email in desk.users.items() if email.lower() == who.lower()), None)  # as Desks.owner_id
        for project in listed:
            parsed = parse_project_key(project.key)
            if parsed is None or parsed[0] != rnd.name:
                continue
            if parsed[2] != who:  # a project made on this desk in someone else's name
                desk.foreign.append(f"project {project.id} on {desks.where(who)} is named for {parsed[2]}: not counted")
                continue
            desk.items.append(_Wanted(client, project, parsed[1], who, desk.users, owner))
        desk.listed.set()
        if desk.items:
            with ThreadPoolExecutor(min(len(desk.items), 4)) as looks:
                list(looks.map(lambda item: _look_at(root, rnd, item, old_projects.get(
                    f"{client.url}|{item.project.id}"), since_new), desk.items))
        for item in desk.items:
            if item.archived is None:
                _export(item)
            item.ready.set()

    ledger = _Ledger(root, rnd.name)
    exported: dict[tuple[str, str], set[str]] = {}  # (scenario, annotator) -> sample ids with a task

    def parse_item(item: _Wanted) -> None:
        """Archive (when new), parse and validate one project's export, as it arrives."""
        project, scenario, annotator, users, owner = item.project, item.scenario, item.annotator, item.users, item.owner
        exported.setdefault((scenario, annotator), set())
        if item.archived is not None:
            path, raw = item.archived, item.archived.read_bytes()
            result.snapshots.append(path)
        else:
            raw = item.raw
            path, new = archive_export(root, rnd.name, scenario, annotator, raw)  # before parsing
            result.snapshots.append(path)
            result.new_snapshots += int(new)
        try:
            tasks = json.loads(raw)
        except ValueError as exc:
            problems.append({"round": rnd.name, "sample_id": "", "row_index": None, "annotator": annotator,
                             "field": None, "problem": f"export {path.name} is not JSON: {exc}", "value": None})
            return
        exported[(scenario, annotator)] |= {(t.get("data") or {}).get("sample_id") for t in tasks
                                            if isinstance(t, dict)}
        # What annotators did with the pre-annotation (kept / changed / cleared): the predictions
        # are archived beside the export, and measured from that pair as a rebuild would.
        if item.archived is not None:
            record = json.loads(root.export_predictions(rnd.name, scenario, annotator, item.sha).read_bytes())
        else:
            record, _ = acceptance.archive_predictions(root, path, acceptance.predictions_record(
                rnd.name, scenario, annotator, project.id, tasks, item.predictions, users))
        accepted.extend(acceptance.measure_archived(rnd, tasks, record, parse=parse_annotation))
        moved = ledger.check(annotator, tasks)  # before stitching: a window is a task of its own
        for task in [t for t in tasks if isinstance(t, dict)] if moved else []:
            data = task.get("data") or {}
            for a in [a for a in task.get("annotations") or [] if a.get("id") in moved]:
                problem(annotator, f"annotation {a['id']} on {desks.where(annotator)}: {moved[a['id']]}; not counted",
                        data.get("sample_id", "?"))
                task["annotations"].remove(a)
        tasks, notes = stitch_tasks(tasks)  # windows of a long sample -> one task per sample
        problems.extend({"round": rnd.name, "sample_id": sid, "row_index": None, "annotator": annotator,
                         "field": None, "problem": note, "value": None} for sid, note in notes)
        lines, probs, n_done = parse_export(rnd, tasks, annotator, users, owner, desks.where(annotator))
        labels.extend(lines)
        problems.extend(probs)
        result.progress[(annotator, scenario)] = (n_done, len(tasks))

    # Desks are read side by side; each project is parsed here as its export arrives, in the
    # desks' and projects' order. Projects as the last pull left them wait: if nothing else
    # changed either, the pull may be a no-op and parses nothing.
    wanted: list[_Wanted] = []
    waiting: list[_Wanted] = []
    with _reading(desks, asked, read_desk, read) as failed:
        for who in asked:
            desk = read[who]
            failed(desk.listed, who)
            for message in desk.foreign:
                problem(who, message)
            for item in desk.items:
                failed(item.ready, who)
                wanted.append(item)
                if item.archived is not None and all(w.archived is not None for w in wanted):
                    waiting.append(item)
                    continue
                for early in waiting:
                    parse_item(early)
                waiting.clear()
                parse_item(item)
    for who in annotators or []:
        if who not in people:
            problem(who, f"{who} has no annotator's desk; nothing pulled for them (earlier lines kept)")

    inputs = hashlib.sha256(json.dumps([
        files_digest((*_CODE, rnd.source)), rnd.name, sorted(annotators) if annotators else None, people, asked,
        pushed_record, [[who, desks.where(who), sorted(read[who].users.items()), read[who].foreign] for who in asked],
        [[i.client.url, i.project.id, i.project.key, i.owner, i.sha] for i in wanted],
    ], sort_keys=True, default=str).encode()).hexdigest()
    tables = {"labels": root.labels(rnd.name), "problems": root.label_problems(rnd.name),
              "acceptance": root.acceptance(rnd.name), "ledger": root.annotation_ledger(rnd.name)}
    done = state.get("result") if isinstance(state.get("result"), dict) else None
    if (len(waiting) == len(wanted) and state.get("inputs") == inputs and done is not None
            and state.get("tables") == {k: _file_sha(p) for k, p in tables.items()}):
        with contextlib.suppress(TypeError, ValueError, OSError, pa.ArrowException):
            return _as_before(result, root, rnd, wanted, done)  # nothing new anywhere: a no-op
    for item in waiting:
        parse_item(item)
    # Pushed but gone: a task or project deleted in Label Studio after the push.
    pulled = {a for (_, a) in exported}
    for key, sample_ids in sorted(pushed_record.items()):
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
        looked = {f"{i.client.url}|{i.project.id}": {**i.look, "export": i.sha} for i in wanted if i.look is not None}
        write_sync(root, rnd.name, "pull", {
            "inputs": inputs, "tables": {k: _file_sha(p) for k, p in tables.items()},
            "result": {"progress": sorted([a, s, d, t] for (a, s), (d, t) in result.progress.items()),
                       "missing": [list(m) for m in result.missing], "kept": result.kept},
            "projects": {**{k: v for k, v in old_projects.items() if k not in looked}, **looked}})
    return result


def _as_before(result: PullResult, root: DataRoot, rnd: Round, wanted: list[_Wanted], done: dict) -> PullResult:
    """The pull's answer when nothing changed since the last one: its stored tables."""
    def stored(path: Path, schema: pa.Schema) -> pa.Table:
        return pq.read_table(path) if path.is_file() else schema.empty_table()

    labels = stored(root.labels(rnd.name), schemas.LABELS)
    problems = stored(root.label_problems(rnd.name), schemas.LABEL_PROBLEMS)
    progress = {(a, s): (d, t) for a, s, d, t in done.get("progress") or []}
    missing = [(sid, who) for sid, who in done.get("missing") or []]
    kept = [str(who) for who in done.get("kept") or []]
    result.labels, result.problems, result.progress, result.missing, result.kept = labels, problems, progress, missing, kept
    result.snapshots = [i.archived for i in wanted]
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
