"""The agreement stage of a round: one entry point the CLI and the flows both call.

:func:`measure_round` reads the round's pulled label table (``DataRoot.labels``), computes the
figures of every measured field (:func:`pipeline.quality.measures.round_agreement`, with the
metrics and thresholds of the round definition), writes the report
(:mod:`pipeline.quality.reports`, into ``DataRoot.agreement_report_dir``, with the pull's
pre-annotation acceptance, :mod:`pipeline.annotation.acceptance`) and the release gate
(:mod:`pipeline.quality.gates`), and returns a :class:`RoundMeasure`.

A round labelled by fewer annotators than its definition's ``annotators`` (e.g. only one
annotator pulled so far) is refused with :class:`TooFewAnnotators`, naming who is missing (the
annotators it was pushed to, :mod:`pipeline.annotation.pushed`); gold refuses it too.

Scenarios for the per-scenario breakdown come from the label table's ``scenario`` column (pull
writes the scenario of the project each task came from); label lines without one take it from
the sample table (the corpus).
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pipeline import corpus, store
from pipeline.annotation import acceptance
from pipeline.annotation.pushed import pushed_annotators
from pipeline.annotation.rounds import Round, load_round
from pipeline.paths import DataRoot, check_name
from pipeline.quality import gates, reports
from pipeline.quality.coding import clean_labels, label_scenarios
from pipeline.quality.measures import RoundAgreement, round_agreement


class TooFewAnnotators(ValueError):
    """A round's label table holds fewer annotators than the round requires."""


def require_annotators(root: DataRoot, rnd: Round, present: Iterable[str], what: str) -> None:
    """Refuse ``rnd`` when fewer than ``rnd.annotators`` people labelled it, naming who is missing."""
    present = sorted({a for a in present if a})
    if len(present) >= rnd.annotators:
        return
    missing = [a for a in pushed_annotators(root, rnd.name) if a not in present]
    msg = (f"{what}: round {rnd.name!r} needs {rnd.annotators} annotators (the round definition's "
           f"`annotators`), its label table has {len(present)} ({', '.join(present) or 'none'})")
    if missing:
        msg += (f"; missing: {', '.join(missing)} (the round was pushed to them) - pull the round for them too, "
                "or wait until they have finished")
    else:
        msg += f"; pull every annotator of the round first (rescue annotate pull {rnd.name})"
    raise TooFewAnnotators(msg)


@dataclass(frozen=True)
class RoundMeasure:
    """What :func:`measure_round` measured and wrote."""

    report: RoundAgreement
    labels: Path            # the label table measured
    paths: dict[str, Path]  # report files by kind (markdown, html, json, plots)
    gate: dict              # the gate record written (gates.write_gate)

    @property
    def passed(self) -> bool:
        return self.report.passed

    def summary(self) -> dict:
        return self.report.summary()


def measure_round(root: DataRoot, round_name: str,
                  labels_path: str | os.PathLike | None = None) -> RoundMeasure:
    """Agreement of a pulled round: report files, the gate record, the figures.

    ``labels_path`` measures another label table for the round (default: the pulled one).
    """
    rnd = load_round(check_name(round_name, "round"))
    path = Path(labels_path) if labels_path else root.labels(rnd.name)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no label table for round {rnd.name!r}; run `rescue annotate pull "
                                f"{rnd.name}` first")
    df, issues = clean_labels(path)
    require_annotators(root, rnd, df["annotator"].unique().to_list(), "agreement")
    known = label_scenarios(df)
    scenarios = {}
    if set(df["sample_id"].unique().to_list()) - set(known):  # lines without a scenario: the sample table
        scenarios = corpus.scenarios(root)
    report = round_agreement((df, issues), rnd.name, rnd, scenarios)
    # The acceptance of the pulled round's pre-annotation (another label table has none).
    accepted = acceptance.read(root, rnd.name) if labels_path is None else None
    paths = reports.write_report(report, root.agreement_report_dir(rnd.name), acceptance=accepted)
    gate = gates.write_gate(root, report, store.sha256_file(path))
    return RoundMeasure(report, path, paths, gate)
