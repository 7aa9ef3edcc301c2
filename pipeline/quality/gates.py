"""The agreement gate of each round, overrides, and the check a release makes.

A round whose measured fields do not all reach their thresholds blocks the release, unless an
override with a reason is recorded. Both records are small canonical-JSON files under the data
root (``DataRoot.gate`` / ``DataRoot.gate_override``: ``annotation/gates/<round>.json`` and
``<round>.override.json``); an override only counts for the exact label table it was made for
(its sha256), so labels pulled again after the override block the release again.

The round's agreement report shows the override where it applies: recording one rewrites the
report's gate verdict (:func:`pipeline.quality.reports.mark_override`), and so does writing the
gate again for labels an override was made for.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from pipeline import store
from pipeline.paths import DataRoot

if TYPE_CHECKING:  # measures pulls in polars; reading gates (every release build) needs none of it
    from pipeline.quality.measures import RoundAgreement

OVERRIDE_SUFFIX = ".override.json"


def write_gate(root: DataRoot, report: RoundAgreement, labels_sha256: str) -> dict:
    """Record whether ``report``'s round passed, for the label table with ``labels_sha256``."""
    record = {"round": report.round, "passed": report.passed, "labels_sha256": labels_sha256,
              "failing": [{"field": f.field, "metric": f.metric, "alpha": f.alpha, "threshold": f.threshold}
                          for f in report.failing()],
              "fields": [{"field": f.field, "metric": f.metric, "alpha": f.alpha, "threshold": f.threshold,
                          "ci_low": f.ci_low, "ci_high": f.ci_high,  # alpha's bootstrap 95% interval
                          "n_units": f.n_units, "n_annotators": f.n_annotators} for f in report.fields]}
    store.atomic_write_text(root.gate(report.round), store.canonical_json(record))
    override = current_override(root, report.round)
    if override and not report.passed:
        from pipeline.quality import reports  # the report stack (polars, plots) only where a report is rewritten

        reports.mark_override(root.agreement_report_dir(report.round), report.round, False, _failing_text(record),
                              override)
    return record


def _failing_text(gate: dict) -> list[str]:
    return [f"{f['field']} {_fmt(f['alpha'])} < {f['threshold']:.3f}" for f in gate.get("failing", [])]


def current_override(root: DataRoot, round_name: str) -> dict | None:
    """The override recorded for the round's current gate (same labels), else None."""
    gate_path, ov_path = root.gate(round_name), root.gate_override(round_name)
    if not (gate_path.is_file() and ov_path.is_file()):
        return None
    gate = json.loads(gate_path.read_text(encoding="utf-8"))
    override = json.loads(ov_path.read_text(encoding="utf-8"))
    return override if override.get("labels_sha256") == gate.get("labels_sha256") else None


def record_override(root: DataRoot, round_name: str, reason: str, by: str) -> dict:
    """Record that a failing round may be released anyway, and why."""
    if not reason.strip() or not by.strip():
        raise ValueError("an override needs a reason and the name of who decides")
    path = root.gate(round_name)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no gate for round {round_name!r}; run `rescue agreement {round_name}` first")
    gate = json.loads(path.read_text(encoding="utf-8"))
    if gate["passed"]:
        raise ValueError(f"round {round_name!r} passed its gate; nothing to override")
    record = {"round": round_name, "reason": reason.strip(), "by": by.strip(), "labels_sha256": gate["labels_sha256"],
              "failing": gate["failing"], "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    store.atomic_write_text(root.gate_override(round_name), store.canonical_json(record))
    from pipeline.quality import reports  # the report stack (polars, plots) only where a report is rewritten

    reports.mark_override(root.agreement_report_dir(round_name), round_name, False, _failing_text(gate), record)
    return record


def gate_records(root: DataRoot) -> list[dict]:
    """Every round's gate for the release manifest: passed, failing fields, override, blocks_release."""
    d = root.gates_dir()
    out = []
    for path in sorted(d.glob("*.json")) if d.is_dir() else []:
        if path.name.endswith(OVERRIDE_SUFFIX):
            continue
        gate = json.loads(path.read_text(encoding="utf-8"))
        ov_path = root.gate_override(gate["round"])
        override = json.loads(ov_path.read_text(encoding="utf-8")) if ov_path.is_file() else None
        valid = bool(override) and override.get("labels_sha256") == gate["labels_sha256"]
        out.append({**gate, "override": override, "override_valid": valid,
                    "blocks_release": not gate["passed"] and not valid})
    return out


def release_blockers(root: DataRoot) -> list[str]:
    """One message per round that blocks a release (empty: nothing blocks)."""
    msgs = []
    for g in gate_records(root):
        if g["blocks_release"]:
            fields = ", ".join(f"{f['field']} alpha={_fmt(f['alpha'])} < {f['threshold']}" for f in g["failing"])
            stale = " (the override was made for other labels)" if g["override"] and not g["override_valid"] else ""
            msgs.append(f"round {g['round']} is below its agreement threshold: {fields}{stale}; "
                        f"adjudicate and re-annotate, or record an override with a reason "
                        f"(`rescue agreement {g['round']} --override REASON --by NAME`)")
    return msgs


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"
