"""The pre-annotation acceptance of a round rebuilt from the archive alone (no Label Studio):
``rescue annotate acceptance ROUND --rebuild``. Each archived export state is screened as the
pull screens it (:mod:`.pull_trust`), so the rebuild counts what the pulls counted."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.annotation import acceptance, pull_trust, redraft
from pipeline.annotation.parse import parse_annotation
from pipeline.annotation.pushed import read_pushed
from pipeline.annotation.rounds import load_round
from pipeline.paths import DataRoot, check_name


@dataclass
class Rebuilt:
    round: str
    path: Path | None
    lines: list[dict]
    states: int                                       # export states read (with their predictions)
    without_predictions: list[Path] = field(default_factory=list)  # exports archived before predictions were


def rebuild_acceptance(root: DataRoot, round_name: str, write: bool = True) -> Rebuilt:
    """The round's acceptance table from the archive alone (no Label Studio): for each annotator
    project, its latest archived export state with its predictions record
    (:func:`.acceptance.measure_archived`, as the pull computes it); a sample pushed to that
    annotator but gone from that state keeps its lines from the latest earlier state that had it
    (as a pull keeps them). Exports archived before predictions were have no record: they are
    listed in :attr:`Rebuilt.without_predictions` and give no lines. Writes the whole table when
    ``write`` and the archive has a state (the same lines the pulls wrote)."""
    rnd = load_round(check_name(round_name, "round"))
    pairs, bare = acceptance.archived_states(root, rnd.name)
    by_project: dict[tuple[str, str], list[tuple[Path, dict]]] = {}
    for export, record in pairs:
        by_project.setdefault((record["scenario"], record["annotator"]), []).append((export, record))
    pushed = read_pushed(root, rnd.name)
    retired = redraft.retired_shas(root, rnd.name)
    lines: list[dict] = []

    def counted(export: Path, record: dict) -> tuple[list[dict], set[str]]:
        """The tasks of a state the pull counts, and the samples it counts there (as the pull screens them)."""
        given = set(pushed.get(f"{record['scenario']}/{record['annotator']}", ())) if pushed else None
        trusted = pull_trust.screen_export(json.loads(export.read_bytes()), given, pull_trust.predicted(record),
                                           "", rnd.name, retired)
        return trusted.tasks, {t["data"]["sample_id"] for t in trusted.tasks} - trusted.kept

    for (scenario, annotator), states in sorted(by_project.items()):
        *earlier, (export, record) = states
        tasks, have = counted(export, record)
        lines += acceptance.measure_and_stitch(rnd, tasks, record, parse=parse_annotation, checked=True)[0]
        gone = [sid for sid in pushed.get(f"{scenario}/{annotator}", []) if sid not in have]
        read = {}  # earlier states are read only for a sample deleted (or not counted) now, each once
        for sid in gone:  # the lines of the last state that counted it
            for old_export, old_record in reversed(earlier):
                if old_export not in read:
                    read[old_export] = counted(old_export, old_record)
                old_tasks, old_have = read[old_export]
                if sid in old_have:
                    mine = [t for t in old_tasks if t["data"]["sample_id"] == sid]
                    lines += acceptance.measure_and_stitch(rnd, mine, old_record, parse=parse_annotation,
                                                           checked=True)[0]
                    break
    path = None
    if write and pairs:  # an empty archive leaves the table as it is
        path = acceptance.write(root, rnd.name, lines, {a for _, a in by_project}, replace=True)
    return Rebuilt(rnd.name, path, lines, len(pairs), bare)
