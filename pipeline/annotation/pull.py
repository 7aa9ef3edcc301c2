"""Pull a round back from Label Studio: archive the raw export, then parse and validate it.

For every annotator project of the round (see :mod:`.push`) an export of all its tasks is
taken (read from the desk's own database where the pull may, :mod:`.desk_db`: Label Studio's
export, key for key, for a fraction of the desk's CPU; else asked of its API) and written,
unchanged and before any parsing, to ``DataRoot.export``:
``<data root>/annotation/exports/<round>/<scenario>/<annotator slug>/<sha256>.json`` (content
addressed, append-only: an identical state is not written twice; the annotator's e-mail becomes
a directory name through ``paths.slug``), and beside it ``<sha256>.predictions.json``: what the
export names by id only (the project's predictions and the annotators' e-mails,
:func:`.acceptance.archive_predictions`), so the pre-annotation acceptance can be rebuilt from
the archive alone (:func:`rebuild_acceptance`). Then every annotation is checked against the
round definition and turned into the long label table (:mod:`.parse`: ``schemas.LABELS``, with
the problems in ``schemas.LABEL_PROBLEMS``; nothing is "fixed" silently), and what annotators did
with the pre-annotation is measured (:mod:`.acceptance`). One stitching of the windows serves
both, and each submitted annotation is parsed once (:class:`.parse.ParseOnce`); an annotation
moved since it was first pulled (:mod:`.ledger`) is reported and not counted.

Nothing already pulled is lost:

* A pull of some annotators (``annotators=[...]``, ``rescue annotate pull ROUND -a EMAIL``)
  replaces only those annotators' lines and problems in the round's tables; everyone else's
  stay as they were pulled before.
* The round's push record (:mod:`.pushed`) says which samples each annotator's project was
  given. A task (or whole project, or one window of a long sample) deleted on the desk after the
  push is reported, one problem per (sample, annotator), in the problems table and
  :attr:`PullResult.missing`; the label lines pulled for it before are kept. Pushing the round
  again recreates the task.
* Only what the push gave a desk counts (:mod:`.pull_trust`): a task it never pushed there, a
  task whose data was edited on the desk, an answer of a shape no control sends or over the size
  limits (:mod:`.screen`) is one problem line naming the desk, task and sample, and is not
  counted; that annotator's earlier lines for the sample are kept, and everyone else's pull goes on.

A pull again with nothing new is a no-op. Before exporting a project the pull looks at it
(:mod:`.pull_look`: its live counts and config, the tasks Label Studio changed since a window
before the last look, and its drafts). A project that looks as at the last pull is read from its
archived export instead of exported again; when every project does, and the push record, the
annotators asked, the code and the stored tables are as the last pull left them, nothing is
parsed or written (``annotation/sync/<round>.pull.json``).
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import schemas, store, taxonomy
from pipeline.annotation import (acceptance, ledger, ls_config, ls_results, ls_tasks, naming, parse, pull_look,
                                 pull_trust, redraft, round_ui, screen, voice_naming)
from pipeline.annotation import rounds as rounds_module
from pipeline.annotation import windows as windows_module
from pipeline.labelstudio.desks import DeskAccess
from pipeline.annotation.parse import ParseOnce, parse_annotation, parse_export
from pipeline.annotation.pull_look import DeskRead, Wanted, look_from_export, read_desk, reading
from pipeline.annotation.pull_rebuild import Rebuilt, rebuild_acceptance
from pipeline.annotation.push_project import parse_project_key
from pipeline.annotation.pushed import files_digest, read_pushed, read_sync, write_sync
from pipeline.annotation.rounds import Round, load_round, round_names
from pipeline.annotation.windows import stitch_tasks
from pipeline.paths import DataRoot, check_name

__all__ = ["PullResult", "Rebuilt", "archive_export", "missing_tasks", "parse_annotation", "parse_export",
           "pull_round", "rebuild_acceptance", "round_progress"]


def archive_export(root: DataRoot, round_name: str, scenario: str, annotator: str,
                   raw: bytes) -> tuple[Path, bool]:
    """Write a raw export once under its sha256 (``DataRoot.export``); ``(path, newly_written)``."""
    path = root.export(round_name, scenario, annotator, hashlib.sha256(raw).hexdigest())
    if path.exists():
        return path, False
    store.atomic_write_bytes(path, raw)
    return path, True


# --- pull ------------------------------------------------------------------------------------

@dataclass
class PullResult:
    round: str
    labels: pa.Table
    problems: pa.Table
    snapshots: list[Path] = field(default_factory=list)
    new_snapshots: int = 0
    progress: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # (annotator, scenario) -> (done, total)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (sample_id, annotator): pushed, deleted on the desk
    kept: list[str] = field(default_factory=list)  # annotators whose earlier lines were kept (not pulled this time)
    # (annotator, sample, problem) of every task or answer not counted (:mod:`.pull_trust`): also in ``problems``
    not_counted: list[tuple[str, str, str]] = field(default_factory=list)
    # (annotator, sample, line): answers to drafts ``--redraft`` replaced, archived and never counted (:mod:`.redraft`)
    replaced: list[tuple[str, str, str]] = field(default_factory=list)

    def summary(self) -> str:
        s = (f"round {self.round}: {self.labels.num_rows} label lines, {self.problems.num_rows} problems, "
             f"{len(self.snapshots)} exports ({self.new_snapshots} new)")
        if self.kept:
            s += f"; lines of {', '.join(self.kept)} kept from the earlier pull"
        if self.missing:
            s += (f"; {len(self.missing)} pushed tasks are gone from Label Studio: "
                  + ", ".join(f"{sid} ({who})" for sid, who in self.missing[:5])
                  + (" ..." if len(self.missing) > 5 else ""))
        if self.not_counted:
            s += (f"; {len(self.not_counted)} tasks or answers not counted (a desk holds what the push did not give "
                  f"it): " + ", ".join(f"{sid} ({who})" for who, sid, _ in self.not_counted[:5])
                  + (" ..." if len(self.not_counted) > 5 else ""))
        if self.replaced:
            s += (f"; answers to replaced drafts of {len({sid for _, sid, _ in self.replaced})} re-drafted samples "
                  "archived, not counted: " + ", ".join(f"{sid} ({who})" for who, sid, _ in self.replaced[:5])
                  + (" ..." if len(self.replaced) > 5 else ""))
        return s


def _sort_text(value) -> str:
    """A key value as the tables sort it: None first, whole numbers by value (12 digits), else text."""
    if value is None:
        return ""
    if type(value) is str:
        return value
    return f"{value:012d}" if isinstance(value, int) else str(value)


def _sorted_table(records: list[dict], schema: pa.Schema, keys: list[str]) -> pa.Table:
    def key(r):
        return tuple([_sort_text(r.get(k)) for k in keys])
    return pa.Table.from_pylist(sorted(records, key=key), schema=schema)


@dataclass
class _Parsed:
    """What one project's export gave a pull."""
    path: Path | None = None
    new: bool = False
    labels: list[dict] = field(default_factory=list)
    problems: list[dict] = field(default_factory=list)
    accepted: list[dict] = field(default_factory=list)
    progress: tuple[int, int] | None = None  # (done, total); None when the export is not JSON
    untrusted: set[tuple[str, str]] = field(default_factory=set)  # (sample, annotator) not counted: lines kept
    deleted: set[tuple[str, str]] = field(default_factory=set)    # (sample, annotator): a window deleted on the desk
    not_counted: list[tuple[str, str, str]] = field(default_factory=list)  # (annotator, sample, problem)


# --- what a pull saw of each project --------------------------------------------------------

# What the pull's output is a function of, besides Label Studio: these files. A pull whose exports,
# inputs and code are as at the last pull, and whose tables are as it wrote them, writes nothing.
_CODE = tuple(Path(m.__file__) for m in (acceptance, ledger, ls_config, ls_results, ls_tasks, naming, parse, pull_look,
                                         pull_trust, redraft, round_ui, screen, voice_naming, windows_module, rounds_module,
                                         taxonomy, schemas)) + (
    Path(__file__), taxonomy.SCHEMAS_DIR / "taxonomies.yaml")


def _file_sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def pull_round(desks: DeskAccess, round_name: str, root: DataRoot,
               annotators: list[str] | None = None, write: bool = True) -> PullResult:
    """Export, archive, parse and validate every annotator project of a round, each from the
    annotator's own desk (:mod:`.desks`); only the desk owner's answers count.

    Returns the labels (``schemas.LABELS``) and problems (``schemas.LABEL_PROBLEMS``) and, when
    ``write``, stores them at ``DataRoot.labels`` / ``DataRoot.label_problems`` (identical bytes
    for an identical Label Studio state). The pull stage of a round: the CLI (``rescue annotate
    pull``) and the annotation-round flow both call it.

    A pull asks each desk for its users and projects, and each project for what changed since
    the last pull (:func:`.pull_look.look`); a project with nothing new is read from its archived export,
    not exported again (a project the last pull did not export is not looked at: it is exported,
    and its look read off the export, :func:`.pull_look.look_from_export`). When every export is as at the last pull (and the push record, the
    annotators asked, the code and the stored tables too), nothing is parsed or written: the
    stored tables are the answer (the pull state, ``annotation/sync/<round>.pull.json``). Desks
    are read side by side (:func:`.push.each_desk`); on a desk the projects are exported one
    after another, largest first, each after its look, with the looks and prediction listings
    beside (:func:`.pull_look.read_desk`), and each export is parsed here as soon as it arrives,
    from whichever desk (the tables are put together in the desks' order all the same).

    A desk that fails (down, a refused token) is raised as its client's error, which names it,
    once the other desks' exports are archived; nothing else is written then.
    """
    with _collector_paused():
        return _pull_round(desks, round_name, root, annotators, write)


@contextlib.contextmanager
def _collector_paused():
    """The cyclic garbage collector off while a pull reads (process-wide, for those seconds): an
    export is millions of small acyclic objects (its JSON, the lines made from it), and the
    collector would walk all of them again and again - about a third of the CPU of a RESCUE-sized
    pull. Cycles made meanwhile are collected once it is back on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _pull_round(desks: DeskAccess, round_name: str, root: DataRoot,
                annotators: list[str] | None, write: bool) -> PullResult:
    rnd = load_round(check_name(round_name, "round"))
    labels, problems, accepted = [], [], []

    def problem_line(who: str, message: str, sid: str = "") -> dict:
        """A problem of a whole task or project (no row, no field)."""
        return {"round": rnd.name, "sample_id": sid, "row_index": None, "annotator": who,
                "field": None, "problem": message, "value": None}

    def problem(who: str, message: str, sid: str = "") -> None:
        problems.append(problem_line(who, message, sid))

    untrusted: set[tuple[str, str]] = set()  # (sample, annotator): a task or answer not counted; earlier lines kept

    people = desks.people("annotator")
    pushed_record = read_pushed(root, rnd.name)
    retired = redraft.retired_shas(root, rnd.name)  # tasks --redraft replaced: never counted
    given = {k.partition("/")[2] for k in pushed_record}  # whom the round was pushed to
    asked = [who for who in people
             if not ((annotators and who not in annotators) or (not annotators and given and who not in given))]
    state = read_sync(root, rnd.name, "pull")
    old_projects = state.get("projects") if isinstance(state.get("projects"), dict) else {}

    def read_one(who: str) -> None:  # a desk the round never reached is not asked (it may be down)
        read_desk(desks, who, rnd, root, old_projects, read[who])

    seen = ledger.Ledger(root, rnd.name)
    exported: dict[tuple[str, str], set[str]] = {}  # (scenario, annotator) -> sample ids with a task
    # What each project gave (its archive path, labels, problems, acceptance lines, progress):
    # projects are parsed as they arrive, and put together in the desks' and projects' order, so
    # the tables do not depend on which desk answered first. (The ledger and ``exported`` do
    # not either: their keys name the annotator, and annotation ids are unique on a desk.)
    parsed: dict[int, _Parsed] = {}

    def parse_item(item: Wanted) -> None:
        """Archive (when new), parse and validate one project's export, as it arrives."""
        project, scenario, annotator, users, owner = item.project, item.scenario, item.annotator, item.users, item.owner
        out = parsed[id(item)] = _Parsed()
        exported.setdefault((scenario, annotator), set())
        if item.archived is not None:
            out.path, raw = item.archived, item.archived.read_bytes()
        else:
            raw = item.raw
            out.path, out.new = archive_export(root, rnd.name, scenario, annotator, raw)  # before parsing
        try:
            tasks = json.loads(raw)
        except ValueError as exc:
            out.problems.append(problem_line(annotator, f"export {out.path.name} is not JSON: {exc}"))
            return
        if item.look_since is not None and isinstance(tasks, list):
            item.look = look_from_export(project, item.look_since, tasks)
        # What annotators did with the pre-annotation (kept / changed / cleared): the predictions
        # are archived beside the export, and measured from that pair as a rebuild would.
        if item.archived is not None:
            record = json.loads(root.export_predictions(rnd.name, scenario, annotator, item.sha).read_bytes())
        else:
            record, _ = acceptance.archive_predictions(root, out.path, acceptance.predictions_record(
                rnd.name, scenario, annotator, project.id, tasks, item.predictions, users))
        # Only what the push gave this desk counts, and only answers of the shape its controls send.
        trusted = pull_trust.screen_export(tasks, set(pushed_record.get(f"{scenario}/{annotator}", ()))
                                           if pushed_record else None, pull_trust.predicted(record),
                                           desks.where(annotator), rnd.name, retired)
        tasks = trusted.tasks
        out.problems.extend(problem_line(annotator, note, sid) for sid, note in trusted.notes)
        out.not_counted = [(annotator, sid, note) for sid, note in trusted.notes]
        out.untrusted = {(sid, annotator) for sid in trusted.kept}
        out.deleted = {(sid, annotator) for sid in trusted.deleted}
        exported[(scenario, annotator)] |= {t["data"]["sample_id"] for t in tasks} | trusted.kept
        once = ParseOnce()  # the acceptance and the labels parse each submitted annotation once
        moved = seen.check(annotator, tasks)  # before stitching: a window is a task of its own
        if not moved:  # one stitching for both (the prediction rides along, then is dropped)
            lines, tasks, notes = acceptance.measure_and_stitch(rnd, tasks, record, parse=once, checked=True)
            out.accepted.extend(lines)
        else:  # measured as exported; the labels without the moved annotations (stitched again)
            out.accepted.extend(acceptance.measure_and_stitch(rnd, tasks, record, parse=once, checked=True)[0])
            for task in [t for t in tasks if isinstance(t, dict)]:
                data = task.get("data") or {}
                for a in [a for a in task.get("annotations") or [] if a.get("id") in moved]:
                    out.problems.append(problem_line(
                        annotator, f"annotation {a['id']} on {desks.where(annotator)}: {moved[a['id']]}; not counted",
                        data.get("sample_id", "?")))
                    task["annotations"].remove(a)
            tasks, notes = stitch_tasks(tasks, checked=True)  # windows of a long sample -> one task per sample
        out.problems.extend(problem_line(annotator, note, sid) for sid, note in notes)
        lines, probs, n_done = parse_export(rnd, tasks, annotator, users, owner, desks.where(annotator), parse=once,
                                            checked=True)
        out.labels, out.progress = lines, (n_done, len(tasks))
        out.problems.extend(probs)

    # Desks are read side by side; each project is parsed here as soon as its export arrives,
    # from whichever desk. Projects as the last pull left them wait: if nothing else changed
    # either, the pull may be a no-op and parses nothing.
    wanted: list[Wanted] = []
    waiting: list[Wanted] = []
    arrived = threading.Event()
    read = {who: DeskRead(arrived=arrived) for who in asked}
    # A desk that fails is raised when leaving, once the other desks' exports are archived.
    with reading(desks, asked, read_one, read) as failed:
        # Made once the desks are asked: pyarrow's first table imports pandas (0.4 s of CPU).
        result = PullResult(rnd.name, schemas.LABELS.empty_table(), schemas.LABEL_PROBLEMS.empty_table())
        projects: list[Wanted] = []
        for who in asked:
            desk = read[who]
            failed(desk.listed, who)
            for message in desk.foreign:
                problem(who, message)
            projects += desk.items
        todo = projects
        while todo:
            arrived.clear()  # before looking: an item ready after this sets it again
            here = [item for item in todo if item.ready.is_set()]
            if not here:
                arrived.wait()
                continue
            taken = {id(item) for item in here}
            todo = [item for item in todo if id(item) not in taken]
            for item in here:
                if failed(item.ready, item.annotator) and not item.read:
                    continue
                wanted.append(item)
                if item.archived is not None and all(w.archived is not None for w in wanted):
                    waiting.append(item)
                    continue
                for early in waiting:
                    parse_item(early)
                waiting.clear()
                parse_item(item)
        order = {id(item): n for n, item in enumerate(projects)}
        wanted.sort(key=lambda item: order[id(item)])  # the desks' and projects' order again
    for who in annotators or []:
        if who not in people:
            problem(who, f"{who} has no annotator's desk; nothing pulled for them (earlier lines kept)")

    inputs = hashlib.sha256(json.dumps([
        files_digest((*_CODE, rnd.source)), rnd.name, sorted(annotators) if annotators else None, people, asked,
        pushed_record, sorted((k, sorted(v)) for k, v in retired.items()), [[who, desks.where(who), sorted(read[who].users.items()), read[who].foreign] for who in asked],
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
    for item in wanted:  # what each project gave, in the desks' and projects' order
        out = parsed[id(item)]
        result.snapshots.append(out.path)
        result.new_snapshots += int(out.new)
        labels += out.labels
        problems += out.problems
        accepted += out.accepted
        untrusted |= out.untrusted
        result.missing += sorted(out.deleted)
        result.not_counted += out.not_counted
        if out.progress is not None:
            result.progress[(item.annotator, item.scenario)] = out.progress
    result.replaced = [r for r in redraft.replaced_lines(root, rnd.name) if not annotators or r[0] in annotators]
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
                             "problem": f"pushed to {annotator} but its {what} is gone from Label Studio: deleted "
                                        f"on the desk after the push; labels pulled for it before are kept; `rescue "
                                        f"annotate push {rnd.name}` recreates the task"})
            result.missing.append((sid, annotator))
    for who in annotators or []:
        if who not in pulled and who in people:
            problems.append({"round": rnd.name, "sample_id": "", "row_index": None, "annotator": who, "field": None,
                             "value": None, "problem": f"{who} has no project in round {rnd.name}; nothing pulled "
                                                       "for them (earlier lines kept)"})
    # Keep what was pulled before for annotators not pulled now, for tasks that are gone, and for
    # tasks and answers not counted (the earlier lines stand, never these).
    gone = set(result.missing) | untrusted
    old_labels = _read_rows(root.labels(rnd.name))
    old_problems = _read_rows(root.label_problems(rnd.name))
    labels = [r for r in labels if (r["sample_id"], r["annotator"]) not in gone]
    accepted = [r for r in accepted if (r["sample_id"], r["annotator"]) not in gone]
    labels += [r for r in old_labels if r["annotator"] not in pulled or (r["sample_id"], r["annotator"]) in gone]
    problems += [r for r in old_problems if r["annotator"] not in pulled and (not annotators or r["annotator"] not in annotators)]
    result.kept = sorted({r["annotator"] for r in old_labels if r["annotator"] not in pulled})
    result.labels = _sorted_table(labels, schemas.LABELS, ["sample_id", "row_index", "annotator", "field"])
    result.problems = _sorted_table(problems, schemas.LABEL_PROBLEMS,
                                    ["sample_id", "row_index", "annotator", "field", "problem"])
    if write:
        seen.write()
        store.write_parquet(result.labels, root.labels(rnd.name))
        store.write_parquet(result.problems, root.label_problems(rnd.name))
        acceptance.write(root, rnd.name, accepted, pulled, gone)
        looked = {f"{i.client.url}|{i.project.id}": {**i.look, "export": i.sha} for i in wanted if i.look is not None}
        write_sync(root, rnd.name, "pull", {
            "inputs": inputs, "tables": {k: _file_sha(p) for k, p in tables.items()},
            "result": {"progress": sorted([a, s, d, t] for (a, s), (d, t) in result.progress.items()),
                       "missing": [list(m) for m in result.missing], "kept": result.kept,
                       "not_counted": [list(n) for n in result.not_counted],
                       "replaced": [list(r) for r in result.replaced]},
            "projects": {**{k: v for k, v in old_projects.items() if k not in looked}, **looked}})
    return result


def _as_before(result: PullResult, root: DataRoot, rnd: Round, wanted: list[Wanted], done: dict) -> PullResult:
    """The pull's answer when nothing changed since the last one: its stored tables."""
    def stored(path: Path, schema: pa.Schema) -> pa.Table:
        return pq.read_table(path) if path.is_file() else schema.empty_table()

    labels = stored(root.labels(rnd.name), schemas.LABELS)
    problems = stored(root.label_problems(rnd.name), schemas.LABEL_PROBLEMS)
    progress = {(a, s): (d, t) for a, s, d, t in done.get("progress") or []}
    missing = [(sid, who) for sid, who in done.get("missing") or []]
    kept = [str(who) for who in done.get("kept") or []]
    result.not_counted = [(who, sid, what) for who, sid, what in done.get("not_counted") or []]
    result.replaced = [(who, sid, line) for who, sid, line in done.get("replaced") or []]
    result.labels, result.problems, result.progress, result.missing, result.kept = labels, problems, progress, missing, kept
    result.snapshots = [i.archived for i in wanted]
    return result


def _read_rows(path: Path) -> list[dict]:
    """The lines of an earlier pull's table ([] when there is none)."""
    if not path.is_file():
        return []
    return pq.ParquetFile(path).read().to_pylist()


def missing_tasks(desks: DeskAccess, root: DataRoot,
                  rounds: list[str] | None = None) -> list[tuple[str, str, str, str]]:
    """``(round, scenario, annotator, sample_id)`` pushed (the push record) but gone from the
    annotators' desks: a deleted task or project, or a part of a windowed sample. For ``rescue
    annotate status``."""
    live: dict[tuple[str, str, str], dict[str, list]] = {}  # -> sample -> the window of each of its tasks
    projects = [(desks.client(who), p, parsed) for who in desks.people("annotator")
                for p in desks.client(who).projects() if (parsed := parse_project_key(p.key)) and parsed[2] == who]
    out = []
    for name in rounds or round_names():
        record = read_pushed(root, name)
        if not record:
            continue
        for client, project, parsed in projects:
            if parsed[0] == name:
                for t in client.tasks(project.id):  # task data is the annotator's to edit: read with care
                    data = t.get("data") if isinstance(t.get("data"), dict) else {}
                    if isinstance(data.get("sample_id"), str):
                        live.setdefault(parsed, {}).setdefault(data["sample_id"], []).append(data.get("window"))
        for key, sample_ids in sorted(record.items()):
            scenario, _, annotator = key.partition("/")
            have = live.get((name, scenario, annotator), {})
            out += [(name, scenario, annotator, sid) for sid in sample_ids
                    if sid not in have or (None not in have[sid] and pull_trust.parts_gone(have[sid]))]
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
