"""Import and export of the paper's published JSONL (``benchmark_191.jsonl`` shape).

Reading turns each line into a sample of ``pipeline.rows`` shape and reports every problem
with the sample and row it belongs to; a bad line or sample is skipped, everything else is
imported. The release's own quirks are handled explicitly:

* **Relation label stored twice.** The release keeps ``relation_cycle_state`` on therapist
  rows and a shifted copy (``relation_pattern`` + ``_reason`` + ``_evidence_rows``) on the row
  before each therapist row. We keep the label once, on the therapist row, with the reason
  and evidence moved there too (``relation_cycle_reason`` / ``_evidence_rows``, the names
  the paper's RPP script reads). V12 checks that both copies agree; export derives the
  shifted copy again, so a round trip is byte-exact.
* **Values that shape cannot carry.** A therapist row with no row before it (an interview's
  first row) has nowhere to put its shifted reason and evidence, and the published samples
  have no clip duration. Export then writes the therapist row's own ``relation_cycle_reason`` /
  ``relation_cycle_evidence_rows`` (only where the shifted copy would read back differently) and
  the sample's ``duration_s`` (only when known); import reads both back, so a release survives
  its own ``paper/benchmark.jsonl`` exactly, and a corpus imported from the published file
  still comes back byte for byte. Where a row carries both copies, its own wins and a
  disagreement is a V12 violation. ``paper/data/<sample>.json`` (:func:`release_sample` with
  ``authors_layout``) carries the own copy on every therapist row: the paper's RPP script reads it.
* **"" versus null.** ``""`` means annotators found no clear pattern and is kept as ``""``;
  ``null`` means "no therapist row follows" and is not stored at all.
* **Mojibake.** Some reason strings hold UTF-8 bytes decoded as Latin-1 (``Evelynâ\\x80\\x99s``).
  They are reported as quirks and kept verbatim unless ``fix_mojibake=True``.

A ``sample_id`` that does not follow the sample-id grammar (``pipeline.paths.check_sample_id``:
no ``..``, absolute paths, backslashes or control characters) is a ``format`` violation naming
the line and the id, and the line is skipped: sample ids become file names later.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import schemas, store
from pipeline.paths import InvalidId, check_sample_id
from pipeline.rows import group_id_of
from pipeline.taxonomy import THERAPIST
from pipeline.validate import Violation, validate_sample

RELEASE_RELATION_KEYS = ("relation_pattern", "relation_pattern_reason", "relation_pattern_evidence_rows")
OWN_RELATION_KEYS = ("relation_cycle_reason", "relation_cycle_evidence_rows")  # the RPP script's names

# Shapes of the nested records: field -> kind ("str", "strs" = list of str, "int").
_ITEM_SHAPES: dict[str, dict[str, str]] = {
    "background_dialogue": {"speaker": "str", "target": "strs", "content": "str"},
    "body_posture": {"person": "str", "description": "str"},
    "facial_expressions": {"person": "str", "description": "str"},
    "self_directed_behavior": {"person": "str", "description": "str"},
    "interaction_behavior": {"initiator": "str", "target": "strs", "description": "str"},
    "internal_emotion": {"person": "str", "emotion_description": "str", "intensity": "int"},
    "viewpoints_attitudes": {"source": "str", "target": "str", "viewpoint": "str", "attitude": "str"},
    "support_strategy": {"provider": "str", "target": "strs", "strategy_type": "str", "strategy_content": "str"},
}
_MOJIBAKE = re.compile("[\u00c2-\u00f4][\u0080-\u00bf]{1,3}")


@dataclass
class ImportResult:
    samples: list[dict] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)  # problems: V1-V13, format
    quirks: list[Violation] = field(default_factory=list)  # documented release quirks, not errors
    skipped: int = 0  # lines or samples not imported
    source_sha256: str = ""


def repair_mojibake(text: str) -> str:
    """Undo UTF-8-read-as-Latin-1 runs (``â\\x80\\x99`` -> ``’``); other text is unchanged."""

    def fix(m: re.Match) -> str:
        try:
            return m.group().encode("latin-1").decode("utf-8")
        except UnicodeError:
            return m.group()

    return _MOJIBAKE.sub(fix, text)


def _has_mojibake(text: str) -> bool:
    return any(repair_mojibake(m.group()) != m.group() for m in _MOJIBAKE.finditer(text))


class _TypeErrors(Exception):
    pass


class _RowReader:
    """Converts one raw release row into a typed row, recording type problems."""

    def __init__(self, sid: str, problems: list[Violation]):
        self.sid, self.problems = sid, problems

    def bad(self, ri, message: str) -> None:
        self.problems.append(Violation(self.sid, ri, "V1", message))

    def scalar(self, ri, name: str, value, kind: str):
        if kind == "str":
            if isinstance(value, str):
                return value
            self.bad(ri, f"{name} must be a string (got {type(value).__name__})")
        elif kind == "strs":
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return value
            self.bad(ri, f"{name} must be a list of strings (got {json.dumps(value)[:60]})")
        elif kind == "num":
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                return float(value)
            self.bad(ri, f"{name} must be a number (got {json.dumps(value)[:60]})")
        elif kind == "int":
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                if value != int(value):
                    # Kept (rounded) so the row can be stored; validation still reports it.
                    self.problems.append(Violation(self.sid, ri, "V8", f"{name} {value} is not an integer"))
                return int(round(value))
            self.bad(ri, f"{name} must be a number (got {json.dumps(value)[:60]})")
        return None

    def items(self, ri, name: str, value) -> list[dict]:
        if not isinstance(value, list):
            self.bad(ri, f"{name} must be a list (got {type(value).__name__})")
            return []
        shape = _ITEM_SHAPES[name]
        out = []
        for k, item in enumerate(value):
            if not isinstance(item, dict):
                self.bad(ri, f"{name}[{k}] must be an object")
                continue
            missing = [key for key in shape if key not in item]
            if missing:
                self.bad(ri, f"{name}[{k}] lacks {', '.join(missing)}")
                continue
            out.append({key: self.scalar(ri, f"{name}[{k}].{key}", item[key], kind) for key, kind in shape.items()})
        return out

    def row(self, pos: int, raw) -> dict:
        if not isinstance(raw, dict):
            self.bad(pos + 1, "row must be an object")
            return {}
        ri = raw.get("row_index", pos + 1)
        missing = [k for k in schemas.BASE_ROW_KEYS if k not in raw]
        if missing:
            self.bad(ri, f"missing keys: {', '.join(missing)}")
        row: dict = {}
        for key in schemas.BASE_ROW_KEYS:
            value = raw.get(key)
            if key in _ITEM_SHAPES:
                row[key] = self.items(ri, key, value if key in raw else [])
            elif key in ("start_time", "end_time"):
                row[key] = self.scalar(ri, key, value, "num")
            elif key == "target":
                row[key] = self.scalar(ri, key, value, "strs")
            else:
                row[key] = self.scalar(ri, key, value, "str")
        if not isinstance(ri, int) or isinstance(ri, bool):
            self.bad(pos + 1, f"row_index must be an integer (got {ri!r})")
            ri = pos + 1
        row["row_index"] = ri
        state = raw.get("relation_cycle_state")
        row["relation_cycle_state"] = self.scalar(ri, "relation_cycle_state", state, "str") if "relation_cycle_state" in raw else None
        # the RPP script's own copy, where given (paper/data files; benchmark.jsonl where the shift cannot carry it)
        reason = raw.get("relation_cycle_reason")
        if reason is not None and not isinstance(reason, str):
            self.bad(ri, f"relation_cycle_reason must be a string or null (got {json.dumps(reason)[:60]})")
            reason = None
        evidence = raw.get("relation_cycle_evidence_rows")
        if evidence is not None and not (isinstance(evidence, list) and all(
                isinstance(e, int) and not isinstance(e, bool) for e in evidence)):
            self.bad(ri, f"relation_cycle_evidence_rows must be a list of integers or null (got {json.dumps(evidence)[:60]})")
            evidence = None
        row["relation_cycle_reason"], row["relation_cycle_evidence_rows"] = reason, evidence
        return row


def _move_relation_to_therapist_rows(sid: str, raw_rows: list[dict], rows: list[dict], out: list[Violation]) -> None:
    """Fold the release's shifted ``relation_pattern*`` copy into the therapist rows (checks V12)."""
    n = len(rows)
    for i in range(n):
        raw, ri = raw_rows[i], rows[i]["row_index"]
        pattern = raw.get("relation_pattern")
        reason = raw.get("relation_pattern_reason")
        evidence = raw.get("relation_pattern_evidence_rows", [])
        nxt = rows[i + 1] if i + 1 < n else None
        if nxt is not None and nxt["primary_speaker"] == THERAPIST:
            if not all(k in raw for k in RELEASE_RELATION_KEYS):
                continue  # RPP-script layout: nothing shifted to fold in
            if pattern != nxt["relation_cycle_state"]:
                out.append(Violation(sid, ri, "V12", f"relation_pattern {pattern!r} differs from the next therapist row's "
                                                     f"relation_cycle_state {nxt['relation_cycle_state']!r}"))
            if not isinstance(reason, str):
                out.append(Violation(sid, ri, "V12", "relation_pattern_reason must be a string before a therapist row"))
            if not (isinstance(evidence, list) and all(isinstance(e, int) and not isinstance(e, bool) for e in evidence)):
                out.append(Violation(sid, ri, "V12", "relation_pattern_evidence_rows must be a list of integers"))
                evidence = []
            reason = reason if isinstance(reason, str) else None
            own = raw_rows[i + 1]
            if "relation_cycle_reason" not in own:
                nxt["relation_cycle_reason"] = reason
            elif nxt["relation_cycle_reason"] != reason:  # both copies given: the row's own wins
                out.append(Violation(sid, nxt["row_index"], "V12", f"relation_cycle_reason differs from the "
                                                                   f"relation_pattern_reason of row {ri}"))
            if "relation_cycle_evidence_rows" not in own:
                nxt["relation_cycle_evidence_rows"] = list(evidence)
            elif list(nxt["relation_cycle_evidence_rows"] or []) != list(evidence):
                out.append(Violation(sid, nxt["row_index"], "V12", f"relation_cycle_evidence_rows differs from the "
                                                                   f"relation_pattern_evidence_rows of row {ri}"))
        elif pattern is not None or reason is not None or evidence:
            out.append(Violation(sid, ri, "V12", "relation_pattern fields must be null/[] when the next row is not a therapist row"))
    for raw, row in zip(raw_rows, rows):
        if row["primary_speaker"] == THERAPIST and row["relation_cycle_state"] is not None:
            if row["relation_cycle_evidence_rows"] is None and "relation_cycle_evidence_rows" not in raw:
                row["relation_cycle_evidence_rows"] = []  # no copy at all: the published form of "none"
        else:
            row["relation_cycle_reason"] = None
            row["relation_cycle_evidence_rows"] = None


def _read_sample(obj, line_no: int, source: str, result: ImportResult) -> dict | None:
    where = f"{source} line {line_no}"
    if not isinstance(obj, dict):
        result.violations.append(Violation(None, None, "format", f"{where}: a sample must be a JSON object"))
        return None
    sid = obj.get("sample_id")
    problems: list[Violation] = []
    if not isinstance(sid, str) or not sid:
        result.violations.append(Violation(None, None, "format", f"{where}: missing sample_id"))
        return None
    try:
        check_sample_id(sid)
    except InvalidId as exc:  # it would become a file name under the data root later: refuse it here
        result.violations.append(Violation(None, None, "format", f"{where}: {exc}; this line is skipped"))
        return None
    for key, kind in (("scenario", str), ("participants", list), ("rows", list)):
        if not isinstance(obj.get(key), kind):
            problems.append(Violation(sid, None, "format", f"{where}: {key} must be a {kind.__name__}"))
    duration = obj.get("duration_s")  # our extra field (absent from the published file)
    if duration is not None and not (isinstance(duration, (int, float)) and not isinstance(duration, bool)
                                     and math.isfinite(duration) and duration > 0):
        problems.append(Violation(sid, None, "format", f"{where}: duration_s must be a positive number of seconds "
                                                       f"or absent (got {json.dumps(duration)[:60]})"))
    if problems:
        result.violations.extend(problems)
        return None
    reader = _RowReader(sid, problems)
    rows = [reader.row(pos, raw) for pos, raw in enumerate(obj["rows"])]
    if any(p.rule == "V1" for p in problems):
        result.violations.extend(problems)
        return None  # a row that cannot be typed cannot be stored: skip this sample only
    raw_rows = obj["rows"]
    _move_relation_to_therapist_rows(sid, raw_rows, rows, problems)
    for raw, row in zip(raw_rows, rows):
        match = _MOJIBAKE.search(json.dumps(raw, ensure_ascii=False))
        if match and _has_mojibake(match.string):
            result.quirks.append(Violation(sid, row["row_index"], "mojibake",
                                           f"text holds UTF-8 read as Latin-1, e.g. {match.group()!r} (kept verbatim)"))
    sample = {
        "sample_id": sid,
        "scenario": obj["scenario"],
        "group_id": group_id_of(sid),
        "participants": list(obj["participants"]),
        "source_file": obj.get("source_file"),
        "duration_s": None if duration is None else float(duration),
        "rows": rows,
    }
    problems.extend(validate_sample(sample))
    result.violations.extend(problems)
    return sample


def read_rescue_lines(lines: Iterable[str], source: str = "<input>", fix_mojibake: bool = False) -> ImportResult:
    result = ImportResult()
    digest = hashlib.sha256()
    seen: set[str] = set()
    for line_no, line in enumerate(lines, 1):
        digest.update(line.encode("utf-8"))
        if not line.strip():
            continue
        if fix_mojibake:
            line = repair_mojibake(line)
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            result.violations.append(Violation(None, None, "format", f"{source} line {line_no}: malformed JSON ({exc.msg} at column {exc.colno})"))
            result.skipped += 1
            continue
        sample = _read_sample(obj, line_no, source, result)
        if sample is None:
            result.skipped += 1
            continue
        if sample["sample_id"] in seen:
            result.violations.append(Violation(sample["sample_id"], None, "duplicate",
                                               f"{source} line {line_no}: sample_id already imported from an earlier line; this line is skipped"))
            result.skipped += 1
            continue
        seen.add(sample["sample_id"])
        result.samples.append(sample)
    result.source_sha256 = digest.hexdigest()
    return result


def load_rescue_jsonl(path: str | Path, fix_mojibake: bool = False) -> ImportResult:
    """Read a ``benchmark_191.jsonl``-shaped file. Invalid UTF-8 is reported by line."""
    path = Path(path)
    with open(path, "rb") as fh:
        raw_lines = fh.read().split(b"\n")
    lines, bad = [], []
    for n, raw in enumerate(raw_lines, 1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            bad.append(Violation(None, None, "format", f"{path.name} line {n}: not valid UTF-8 ({exc.reason} at byte {exc.start})"))
            lines.append("")
    result = read_rescue_lines(lines, source=path.name, fix_mojibake=fix_mojibake)
    result.violations[:0] = bad
    result.skipped += len(bad)
    return result


# --- export ----------------------------------------------------------------------------

def _own_copy_needed(row: dict, has_row_before: bool) -> bool:
    """Whether import would read back another reason/evidence than the therapist row's own
    without its own copy: the shifted copy turns evidence None into [], and with no row before
    import can only assume (None, [])."""
    reason, evidence = row.get("relation_cycle_reason"), row.get("relation_cycle_evidence_rows")
    if has_row_before:
        return evidence is None
    return reason is not None or evidence != []


def release_row(row: dict, next_row: dict | None, own_relation: bool = False) -> dict:
    """One row in the release's key order, with the shifted relation copy derived again;
    ``own_relation``: a therapist row with a relation label also keeps its own reason/evidence."""
    out = {key: row[key] for key in schemas.BASE_ROW_KEYS}
    if row["primary_speaker"] == THERAPIST and row.get("relation_cycle_state") is not None:
        out["relation_cycle_state"] = row["relation_cycle_state"]
        if own_relation:
            out["relation_cycle_reason"] = row.get("relation_cycle_reason")
            evidence = row.get("relation_cycle_evidence_rows")
            out["relation_cycle_evidence_rows"] = None if evidence is None else list(evidence)
    out["row_index"] = row["row_index"]
    if next_row is not None and next_row["primary_speaker"] == THERAPIST and next_row.get("relation_cycle_state") is not None:
        out["relation_pattern"] = next_row["relation_cycle_state"]
        out["relation_pattern_reason"] = next_row.get("relation_cycle_reason")
        out["relation_pattern_evidence_rows"] = list(next_row.get("relation_cycle_evidence_rows") or [])
    else:
        out["relation_pattern"] = None
        out["relation_pattern_reason"] = None
        out["relation_pattern_evidence_rows"] = []
    return out


def release_sample(sample: dict, authors_layout: bool = False) -> dict:
    """A sample in the published shape, plus ``duration_s`` when known and each therapist row's
    own reason/evidence where the shifted copy cannot carry them (every therapist row with
    ``authors_layout``: the ``paper/data`` files the authors' RPP script reads)."""
    rows = sample["rows"]
    out = {
        "sample_id": sample["sample_id"],
        "scenario": sample["scenario"],
        "participants": list(sample["participants"]),
        "source_file": sample.get("source_file"),
    }
    if sample.get("duration_s") is not None:
        out["duration_s"] = sample["duration_s"]
    out["rows"] = [release_row(r, rows[i + 1] if i + 1 < len(rows) else None,
                               own_relation=authors_layout or _own_copy_needed(r, i > 0))
                   for i, r in enumerate(rows)]
    return out


def dumps_line(obj: dict) -> str:
    """The release's JSON formatting (``json.dumps`` defaults, UTF-8 kept)."""
    return json.dumps(obj, ensure_ascii=False)


_ROWS = "\x00rows\x00"
_ROWS_JSON = json.dumps(_ROWS)


def release_lines(sample: dict) -> tuple[str, str]:
    """``dumps_line(release_sample(sample))`` and the same with ``authors_layout``, each row
    dumped once where both forms agree (client rows and most therapist rows): a release
    writes both for every sample."""
    authors = release_sample(sample, authors_layout=True)
    rows = sample["rows"]
    bench_rows, author_rows = [], []
    for i, (row, out) in enumerate(zip(rows, authors["rows"])):
        text = dumps_line(out)
        author_rows.append(text)
        if "relation_cycle_reason" in out and not _own_copy_needed(row, i > 0):
            out = {k: v for k, v in out.items() if k not in OWN_RELATION_KEYS}
            text = dumps_line(out)
        bench_rows.append(text)
    head = dumps_line(dict(authors, rows=_ROWS))
    return (head.replace(_ROWS_JSON, "[" + ", ".join(bench_rows) + "]", 1),
            head.replace(_ROWS_JSON, "[" + ", ".join(author_rows) + "]", 1))


def iter_rescue_lines(samples: Iterable[dict]) -> Iterator[str]:
    for s in samples:
        yield dumps_line(release_sample(s))


def write_rescue_jsonl(samples: Iterable[dict], path: str | Path) -> int:
    """Write samples in the ``benchmark_191.jsonl`` shape (atomically); returns the count."""
    lines = list(iter_rescue_lines(samples))
    store.atomic_write_text(Path(path), "".join(line + "\n" for line in lines))
    return len(lines)
