"""Where every annotator stands in every round: rows done of rows to do, drafts, last activity,
and the link to their project (``rescue annotate status``).

Counted from the live Label Studio tasks of each round project on each annotator's own desk
(:mod:`.push`, :mod:`.desks`): a row is one
unit (a row with controls in that round); a task's rows are done once its annotator submitted
it, skipped when they skipped it. A windowed sample (:mod:`.windows`) is done when all its
windows are. Drafts are tasks with a saved draft and no submission yet.

:func:`status_rows` is the table itself, one dict per project: ``rescue annotate status`` prints
it and the annotation-round run publishes it as a Prefect table artifact (``round-<round>-status``).
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow.parquet as pq

from pipeline.labelstudio.client import LabelStudioClient
from pipeline.labelstudio.desks import DeskAccess
from pipeline.annotation.push import each_desk
from pipeline.annotation.push_project import ADJUDICATION_PREFIX, parse_project_key
from pipeline.annotation.pushed import pushed_annotators
from pipeline.labelstudio.migrate_plan import RoundHistory
from pipeline.paths import DataRoot
from pipeline.annotation.rounds import round_names


@dataclass(frozen=True)
class ProjectStatus:
    round: str
    scenario: str
    annotator: str
    project_id: int
    url: str
    rows_done: int
    rows_total: int
    rows_skipped: int
    samples_done: int
    samples_total: int
    drafts: int
    last_activity: str | None  # ISO time of the latest submission or draft, None before any


def project_status(client: LabelStudioClient, project, parsed: tuple[str, str, str],
                   base_url: str | None = None) -> ProjectStatus:
    """``base_url``: the address the annotator opens (default the client's)."""
    rnd, scenario, annotator = parsed
    tasks = client.tasks(project.id, fields="all", page_size=200)  # drafts included
    rows_done = rows_total = rows_skipped = drafts = 0
    last: list[str] = []
    samples: dict[str, bool] = {}
    for t in tasks:
        n = len((t.get("data") or {}).get("units") or [])
        rows_total += n
        submitted = t.get("total_annotations", 0) > 0
        skipped = not submitted and t.get("cancelled_annotations", 0) > 0
        rows_done += n if submitted else 0
        rows_skipped += n if skipped else 0
        own_drafts = t.get("drafts") or []
        if own_drafts and not submitted and not skipped:
            drafts += 1
        last += [d.get("updated_at") for d in own_drafts if d.get("updated_at")]
        if submitted or skipped:
            last.append(t.get("completed_at") or t.get("updated_at"))
        sid = (t.get("data") or {}).get("sample_id", "?")
        samples[sid] = samples.get(sid, True) and (submitted or skipped)
    return ProjectStatus(rnd, scenario, annotator, project.id,
                         f"{base_url or client.url}/projects/{project.id}/data", rows_done, rows_total, rows_skipped,
                         sum(samples.values()), len(samples), drafts, max((x for x in last if x), default=None))


def round_status(desks: DeskAccess, rounds: list[str] | None = None,
                 annotators: list[str] | None = None) -> list[ProjectStatus]:
    """One line per round project on each annotator's desk (round order, then scenario and
    annotator). The desks are read side by side (:func:`.push.each_desk`)."""
    order = {name: i for i, name in enumerate(round_names())}
    people = [who for who in desks.people("annotator") if not annotators or who in annotators]
    found: dict[str, list[ProjectStatus]] = {}

    def read(who: str) -> None:
        client, url = desks.client(who), desks.public_url(who)
        found[who] = [project_status(client, project, parsed, url) for project in client.projects()
                      if (parsed := parse_project_key(project.key)) is not None and parsed[2] == who
                      and (not rounds or parsed[0] in rounds)]

    each_desk(desks, people, read)
    lines = [line for who in people for line in found.get(who, [])]
    return sorted(lines, key=lambda s: (order.get(s.round, 99), (s.round, s.scenario, s.annotator)))


STATUS_COLUMNS = ("round", "scenario", "annotator", "rows done", "skipped", "samples done", "drafts",
                  "last activity", "project")


def status_rows(lines: list[ProjectStatus]) -> list[dict[str, str]]:
    """The progress table (columns :data:`STATUS_COLUMNS`, values as shown): what `rescue annotate
    status` prints and the annotation-round run publishes - one function, so they never differ."""
    return [dict(zip(STATUS_COLUMNS, (
        s.round, s.scenario, s.annotator, f"{s.rows_done} / {s.rows_total}", str(s.rows_skipped),
        f"{s.samples_done} / {s.samples_total}", str(s.drafts), (s.last_activity or "-")[:19].replace("T", " "),
        s.url))) for s in lines]


def round_history(root: DataRoot) -> RoundHistory:
    """What the desks' migration must know of the rounds beyond Label Studio: whose a project is,
    and who annotated a round by this data root's records (pushed to them, or labels of theirs)."""
    annotated: dict[str, str] = {}
    pushed_dir = root.annotation_dir() / "pushed"
    for path in sorted(pushed_dir.glob("*.json")) if pushed_dir.is_dir() else []:
        name = path.stem
        try:
            for who in pushed_annotators(root, name):
                annotated.setdefault(who.lower(), f"was given round {name} (annotation/pushed/{path.name})")
            labels = root.labels(name)
        except ValueError:
            continue
        if labels.is_file():
            for who in set(pq.read_table(labels, columns=["annotator"]).column("annotator").to_pylist()):
                if who:
                    annotated.setdefault(who.lower(), f"has labels in round {name}")
    return RoundHistory(annotator_of=_annotator_of,
                        is_adjudication=lambda key: key.startswith(ADJUDICATION_PREFIX), annotated=annotated)


def _annotator_of(key: str) -> str | None:
    parsed = parse_project_key(key)
    return parsed[2] if parsed else None
