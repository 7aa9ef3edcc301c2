"""What a pull trusts of an export: only what the pipeline pushed to that desk.

:func:`screen_export` keeps the well-formed tasks and answers (:func:`.screen.well_formed`), then
drops every task that was not pushed to this annotator (a sample the push record,
:func:`.pushed.read_pushed`, does not give them: a task imported on the desk) and every task
whose data no longer hashes to the content address the push gave it (``data["content_sha"]``,
:func:`.ls_tasks.content_sha` over the data and the pre-annotation it was pushed with: data
edited on the desk), and names the windows of a sample deleted on the desk after the push. Each
is one problem line; the pull keeps the annotator's earlier lines for that sample.

The content address is a checksum, not a signature: it catches an edit made through Label
Studio's API or its data manager, not someone who recomputes it over their edited data and
pre-annotation. Which samples a desk was given is the push record's, under the data root, out of
any annotator's reach.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.annotation import ls_tasks
from pipeline.annotation.screen import task_name, well_formed


@dataclass
class Screened:
    """What :func:`screen_export` let through of an export, and why the rest was left out."""
    tasks: list[dict]
    notes: list[tuple[str, str]] = field(default_factory=list)   # (sample, message): one problem line each
    kept: set[str] = field(default_factory=set)     # samples whose earlier lines the pull keeps
    deleted: set[str] = field(default_factory=set)  # samples with a window deleted on the desk after the push


def pushed_as(data: dict, predictions: list) -> bool:
    """Whether ``data`` hashes to its ``content_sha`` with no pre-annotation or one of the task's
    ``predictions`` (their results): the task shows what the push gave it."""
    sha = data.get("content_sha")
    if not isinstance(sha, str):
        return False
    return any(ls_tasks.content_sha(data, result) == sha for result in [*predictions, []])


def screen_export(tasks, pushed: set[str] | None, predictions: dict[int, list], where: str,
                  round_name: str, retired: dict[str, set[str]] | None = None) -> Screened:
    """The export's tasks a pull may count (:func:`well_formed`, then only what was pushed).

    ``pushed``: the samples the push record gives this project (None: the round has no record,
    nothing to compare with; only shapes are checked); ``predictions``: task id -> the results of
    each of its predictions; ``where``: the desk, as problem lines name it; ``retired``: sample ->
    content hashes of its tasks replaced by ``--redraft`` (:func:`.redraft.retired_shas`): such a
    task answers drafts that no longer exist and is left out (the pull reports those samples)."""
    good, notes = well_formed(tasks, where)
    if retired:
        good = [t for t in good if t["data"].get("content_sha") not in retired.get(t["data"]["sample_id"], ())]
    out = Screened([], notes)
    out.kept.update(sid for sid, _ in notes if sid != "?")
    if pushed is None:
        out.tasks = good
        return out
    for task in good:
        data, sid = task["data"], task["data"]["sample_id"]
        if sid not in pushed:
            out.notes.append((sid, f"{task_name(task)} on {where}: {sid} was never pushed to this desk "
                                   "(a task made on the desk); not counted"))
            continue
        if not pushed_as(data, predictions.get(task.get("id")) or []):
            out.notes.append((sid, f"{task_name(task)} on {where}: its data was edited on the desk after the push "
                                   "(it no longer matches its content address); not counted"))
            out.kept.add(sid)
            continue
        out.tasks.append(task)
    # A windowed sample with some of its windows gone (all of one cut, none repeated): deleted on the desk.
    parts: dict[str, list[dict]] = {}
    for task in out.tasks:
        if task["data"].get("window") is not None:
            parts.setdefault(task["data"]["sample_id"], []).append(task["data"]["window"])
    for sid, windows in parts.items():
        gone = parts_gone(windows)
        if not gone:
            continue  # complete, or not one cut: the stitching says what it sees
        count = windows[0]["count"]
        out.notes.append((sid, f"part{'s' if len(gone) > 1 else ''} {', '.join(map(str, gone))} of {count} of {sid} "
                               f"deleted on the desk after the push ({where}); labels pulled for the sample before "
                               f"are kept; `rescue annotate push {round_name}` recreates "
                               f"{'them' if len(gone) > 1 else 'it'}"))
        out.kept.add(sid)
        out.deleted.add(sid)
    out.tasks = [t for t in out.tasks if t["data"]["sample_id"] not in out.deleted]
    return out


def parts_gone(windows: list) -> list[int]:
    """The parts (1-based) missing from one cut of a windowed sample, given the ``window`` of each
    of its tasks still on the desk ([] when it is whole, or when they are not one cut: windows of
    another push's cut, or the same window twice, are the stitching's to report)."""
    if not windows or not all(isinstance(w, dict) for w in windows):
        return []
    counts = {w.get("count") for w in windows}
    indices = [w.get("index") for w in windows]
    count = next(iter(counts))
    if len(counts) != 1 or not isinstance(count, int) or len(set(indices)) != len(indices) \
            or not set(indices) < set(range(count)):
        return []
    return [i + 1 for i in range(count) if i not in indices]


def predicted(record: dict) -> dict[int, list]:
    """task id -> the results of its predictions, from an export's predictions record
    (:func:`.acceptance.predictions_record`): what a task's content address may be taken with."""
    out: dict[int, list] = {}
    for p in record.get("predictions") or []:
        if isinstance(p, dict) and isinstance(p.get("task"), int):
            out.setdefault(p["task"], []).append(p.get("result"))
    return out
