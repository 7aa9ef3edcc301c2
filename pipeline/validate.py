"""Validation of samples against the RESCUE rules V1-V13 (spec §1.9).

Every check runs to the end and returns *all* violations as ``Violation`` records
(sample_id, row_index, rule, message) instead of stopping at the first. Rules that are
about the published JSONL layout (V1 key presence, V12 the shifted relation copy) are
checked where that layout is read, in ``pipeline.benchmark.paper_format``; this module checks the
sample shape of ``pipeline.rows`` (relation label on the therapist row).

Project rules beyond the spec's V1-V13 (hostile or broken inputs):

- **V14** evidence rows: ``relation_cycle_evidence_rows`` holds distinct whole numbers, each a
  0-based position of a row of the sample (``0 <= e < number of rows``), and only on therapist
  rows. Later rows are allowed: the spec (§1.6) found the paper's evidence windows include
  future rows of the therapist turn they explain, so no "before the row" rule applies to them.
- **V15** a sample has at least one row.
- **V16** no absolute path, home path, drive path or URL in any string of a sample
  (``source_file`` must be a plain relative path; every row field, nested ones too). Releases
  are built from validated samples; :func:`scan_release` checks every file of a built release.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa

from pipeline import schemas, taxonomy
from pipeline.taxonomy import THERAPIST


@dataclass(frozen=True)
class Violation:
    sample_id: str | None
    row_index: int | None
    rule: str
    message: str

    def __str__(self) -> str:
        where = self.sample_id or "<unknown sample>"
        if self.row_index is not None:
            where += f" row {self.row_index}"
        return f"{where}: {self.rule}: {self.message}"


def violations_table(violations: Iterable[Violation]) -> pa.Table:
    return pa.Table.from_pylist([asdict(v) for v in violations], schema=schemas.VIOLATIONS)


_WORD = re.compile(r"[A-Za-z0-9']+")

# --- V16: absolute paths and URLs ---------------------------------------------------------------
# An absolute POSIX path has at least two segments and its first "/" follows no word character
# ("and/or", "24/7", "km/h" are text); a URL has a scheme ("https://", "file:"), or "www.".
_PRIVATE = re.compile(
    r"(?<![\w.~/-])/(?:[\w.@+%-]+/)+[\w.@+%?=&-]*"      # /home/ann/x.wav, /data/local-files/?d=...
    r"|(?<![\w])~[\w.-]*/[\w.-]"                       # ~/x, ~ann/x
    r"|(?<![\w])[A-Za-z]:[\\/][\w.-]"                  # C:\Users, d:/x
    r"|\\\\[\w.-]+\\"                                # \\server\share
    r"|\b[A-Za-z][A-Za-z0-9+.-]*://\S*"                   # https://..., file:///...
    r"|\bfile:\S+"
    r"|\bwww\.[\w-]+\.\S+"
)


def private_strings(text: str) -> list[str]:
    """The absolute paths and URLs in ``text`` (empty when there are none)."""
    return [m.group() for m in _PRIVATE.finditer(text or "")] if isinstance(text, str) else []


def _strings(value, path: str) -> Iterator[tuple[str, str]]:
    """(field path, string) of every string inside a JSON-like value."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


def _check_source_file(c: "_RowChecker", value) -> None:
    if value is None:
        return
    bad = private_strings(value) if isinstance(value, str) else []
    if not isinstance(value, str) or bad or value.startswith(("/", "~", "\\")) or "\\" in value \
            or ".." in value.split("/") or re.match(r"[A-Za-z]:", value):
        c.add(None, "V16", f"source_file {value!r} must be a plain relative path (no absolute path, "
                           "home or drive path, '..' or URL)")


def _check_private(c: "_RowChecker", ri, row: dict) -> None:
    for path, text in _strings(row, ""):
        for hit in private_strings(text):
            c.add(ri, "V16", f"{path} holds an absolute path or URL {hit[:120]!r}; releases never carry them")


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text or "")]


class _RowChecker:
    """Collects violations for one sample; ``add`` keeps the sample and row context."""

    def __init__(self, sample: dict):
        self.sample = sample
        self.sid = sample.get("sample_id")
        self.scenario = sample.get("scenario")
        self.out: list[Violation] = []
        self.entities = taxonomy.allowed_entities(self.scenario, sample.get("participants") or [])
        self.group = taxonomy.group_label(self.scenario)

    def add(self, row_index: int | None, rule: str, message: str) -> None:
        self.out.append(Violation(self.sid, row_index, rule, message))

    def entity(self, ri: int, field: str, value) -> bool:
        if not isinstance(value, str) or not value:
            self.add(ri, "V2", f"{field} is empty")
            return False
        if value not in self.entities:
            self.add(ri, "V2", f"{field} {value!r} is not a participant, {THERAPIST} or {self.group}")
            return False
        return True

    def targets(self, ri: int, field: str, targets, owner: str | None, rule: str) -> None:
        if not isinstance(targets, list) or not targets:
            self.add(ri, rule, f"{field} must be a non-empty list")
            return
        for t in targets:
            self.entity(ri, field, t)
        if owner and owner in targets:
            self.add(ri, rule, f"{field} contains its own speaker {owner!r} (self-target)")


def _rows_flagged(samples: list[dict]) -> list[bool]:
    """Per sample: may a string of its rows hold an absolute path or URL? One RE2 kernel over the
    rows' JSON text of every sample (:data:`_PRIVATE_HINT` allows for JSON escapes); only flagged
    samples have their rows walked string by string."""
    out: list[bool] = []
    texts: list[str | None] = []
    size = 0

    def flush() -> None:  # in batches of about _TEXT_BLOCK characters: memory stays flat
        nonlocal texts, size
        if texts:
            mask = _hint_mask(pa.array(texts, pa.large_string())).to_pylist()
            out.extend(t is None or bool(m) for t, m in zip(texts, mask))
        texts, size = [], 0

    for s in samples:
        try:
            texts.append(json.dumps(s.get("rows") or [], ensure_ascii=False, default=str))
            size += len(texts[-1])
        except (TypeError, ValueError):  # odd keys or a cycle: walk the rows
            texts.append(None)
        if size >= _TEXT_BLOCK:
            flush()
    flush()
    return out


def validate_sample(sample: dict, subtitle_lines: list[str] | None = None) -> list[Violation]:
    """V2-V11 (and V13 when the sample's subtitle lines are given) for one sample."""
    return _validate_sample(sample, subtitle_lines, _rows_flagged([sample])[0])


def _validate_sample(sample: dict, subtitle_lines: list[str] | None, rows_flagged: bool) -> list[Violation]:
    sid = sample.get("sample_id")
    scenario = sample.get("scenario")
    if scenario not in taxonomy.SCENARIOS:
        return [Violation(sid, None, "V2", f"unknown scenario {scenario!r}")]
    c = _RowChecker(sample)
    _check_source_file(c, sample.get("source_file"))
    for key in ("participants", "group_id"):
        for path, text in _strings(sample.get(key), key):
            for hit in private_strings(text):
                c.add(None, "V16", f"{path} holds an absolute path or URL {hit[:120]!r}")
    all_rows = sample.get("rows") or []
    if not all_rows:
        c.add(None, "V15", "the sample has no rows (nothing was transcribed or every row was lost)")
    n_rows = len(all_rows)
    utterance_types = set(taxonomy.utterance_types())
    strategies = set(taxonomy.support_strategies(scenario))
    relations = set(taxonomy.relation_patterns(scenario))
    duration = sample.get("duration_s")
    prev_start = None
    for pos, row in enumerate(all_rows):
        ri = row.get("row_index")
        if rows_flagged:
            _check_private(c, ri, row)
        if ri != pos + 1:
            c.add(ri, "V4", f"row_index {ri} at position {pos + 1} (must be contiguous from 1)")
        speaker = row.get("primary_speaker")
        c.entity(ri, "primary_speaker", speaker)
        is_t = speaker == THERAPIST

        # V3
        c.targets(ri, "target", row.get("target"), speaker, "V3")

        # V4 timing
        start, end = row.get("start_time"), row.get("end_time")
        if not (isinstance(start, (int, float)) and isinstance(end, (int, float))):
            c.add(ri, "V4", "start_time/end_time must be numbers")
        else:
            if not 0 <= start < end:
                c.add(ri, "V4", f"times must satisfy 0 <= start < end (got {start}-{end})")
            if duration is not None and end > duration + 1e-6:
                c.add(ri, "V4", f"end_time {end} is past the clip duration {duration}")
            if prev_start is not None and start < prev_start:
                c.add(ri, "V4", f"rows out of order: start {start} before previous start {prev_start}")
            prev_start = start

        # V5
        ut = row.get("utterance_type")
        if is_t and ut != "":
            c.add(ri, "V5", f"therapist row must have utterance_type \"\" (got {ut!r})")
        elif not is_t and ut not in utterance_types:
            c.add(ri, "V5", f"utterance_type {ut!r} is not one of the 10 utterance types")

        # V6
        for bd in row.get("background_dialogue") or []:
            c.entity(ri, "background_dialogue.speaker", bd.get("speaker"))
            c.targets(ri, "background_dialogue.target", bd.get("target"), bd.get("speaker"), "V6")
            if not (bd.get("content") or "").strip():
                c.add(ri, "V6", "background_dialogue.content is empty")

        for field in ("body_posture", "facial_expressions", "self_directed_behavior"):
            for item in row.get(field) or []:
                c.entity(ri, f"{field}.person", item.get("person"))

        # V7
        for ib in row.get("interaction_behavior") or []:
            c.entity(ri, "interaction_behavior.initiator", ib.get("initiator"))
            c.targets(ri, "interaction_behavior.target", ib.get("target"), ib.get("initiator"), "V7")

        # V8
        for em in row.get("internal_emotion") or []:
            c.entity(ri, "internal_emotion.person", em.get("person"))
            if not (em.get("emotion_description") or "").strip():
                c.add(ri, "V8", "internal_emotion.emotion_description is empty")
            inten = em.get("intensity")
            if isinstance(inten, bool) or not isinstance(inten, int):
                c.add(ri, "V8", f"intensity must be an integer (got {inten!r})")
            elif not 0 <= inten <= 10:
                c.add(ri, "V8", f"intensity {inten} is outside 0-10")

        # V9
        for vp in row.get("viewpoints_attitudes") or []:
            src, tgt = vp.get("source"), vp.get("target")
            if not isinstance(tgt, str):
                c.add(ri, "V9", f"viewpoints_attitudes.target must be one label (got {tgt!r})")
                continue
            if c.entity(ri, "viewpoints_attitudes.source", src) and c.entity(
                ri, "viewpoints_attitudes.target", tgt
            ) and src == tgt:
                c.add(ri, "V9", f"viewpoint source and target are both {src!r} (self-target)")
            if not (vp.get("viewpoint") or "").strip():
                c.add(ri, "V9", "viewpoints_attitudes.viewpoint is empty")

        # V10
        support = row.get("support_strategy") or []
        if support and not is_t:
            c.add(ri, "V10", f"support_strategy on a non-therapist row ({speaker!r})")
        for st in support:
            if st.get("provider") != THERAPIST:
                c.add(ri, "V10", f"support_strategy.provider must be {THERAPIST} (got {st.get('provider')!r})")
            tg = st.get("target")
            c.targets(ri, "support_strategy.target", tg, THERAPIST, "V10")
            if st.get("strategy_type") not in strategies:
                c.add(ri, "V10", f"strategy_type {st.get('strategy_type')!r} is not a {scenario} strategy")
            if taxonomy.group_label_alone(scenario) and isinstance(tg, list) and c.group in tg and len(tg) != 1:
                c.add(ri, "V10", f"{c.group} must be the only support target when used")

        # V11
        state = row.get("relation_cycle_state")
        if is_t and state is None:
            c.add(ri, "V11", "therapist row has no relation_cycle_state")
        elif not is_t and state is not None:
            c.add(ri, "V11", "relation_cycle_state on a non-therapist row")
        elif is_t and state != "" and state not in relations:
            c.add(ri, "V11", f"relation_cycle_state {state!r} is not a {scenario} relation pattern")

        # V14 evidence rows (0-based positions of this sample's rows; later rows allowed, spec §1.6)
        evidence = row.get("relation_cycle_evidence_rows")
        if evidence and not is_t:
            c.add(ri, "V14", f"relation_cycle_evidence_rows {evidence!r} on a non-therapist row")
        elif evidence is not None and not isinstance(evidence, (list, tuple)):
            c.add(ri, "V14", f"relation_cycle_evidence_rows must be a list of row positions (got {evidence!r})")
        elif evidence:
            seen: set[int] = set()
            for e in evidence:
                if isinstance(e, bool) or not isinstance(e, int):
                    c.add(ri, "V14", f"relation_cycle_evidence_rows holds {e!r}, not a row position")
                elif not 0 <= e < n_rows:
                    c.add(ri, "V14", f"relation_cycle_evidence_rows holds {e}, outside the sample's rows "
                                     f"(0-based positions 0-{n_rows - 1})")
                elif e in seen:
                    c.add(ri, "V14", f"relation_cycle_evidence_rows names row position {e} more than once")
                else:
                    seen.add(e)

    if subtitle_lines is not None:
        c.out.extend(check_subtitle_coverage(sample, subtitle_lines))
    return c.out


def check_subtitle_coverage(sample: dict, subtitle_lines: list[str]) -> list[Violation]:
    """V13: every lexical subtitle line is covered by some row's dialogue or background content.

    A line counts as covered when its words appear, in order, inside one row's text
    (speaker prefixes such as ``JOSH:`` may have been stripped, so they are ignored).
    """
    texts = []
    for row in sample.get("rows") or []:
        texts.append(" ".join(_words(row.get("dialogue_cleaned") or "")))
        for bd in row.get("background_dialogue") or []:
            texts.append(" ".join(_words(bd.get("content") or "")))
    haystack = "\n".join(texts)
    out = []
    for n, line in enumerate(subtitle_lines, 1):
        line = re.sub(r"^\s*(\[[^\]]+\]|[A-Z][A-Z .'-]{1,30}:)\s*", "", line)
        words = _words(line)
        if words and " ".join(words) not in haystack:
            out.append(Violation(sample.get("sample_id"), None, "V13",
                                 f"subtitle line {n} is not covered by any row: {line.strip()[:80]!r}"))
    return out


def validate_samples(samples: Iterable[dict]) -> list[Violation]:
    samples = list(samples)
    out: list[Violation] = []
    for s, flagged in zip(samples, _rows_flagged(samples)):
        out.extend(_validate_sample(s, None, flagged))
    return out


# A superset of _PRIVATE for RE2 (pyarrow's string kernels, which have no lookbehind): every
# string in which the exact pattern finds something matches this one, also when it is written
# JSON-escaped in a .json file ("C:\\Users", "\u00e4", "\n/home", "\/"). It runs over whole
# columns and lines; only the few cells and lines it flags go through the exact pattern. _HINT_W
# covers Python's \w (every non-ASCII character: RE2 compiles \pL classes slowly, on every call).
_HINT_W = r"[A-Za-z0-9_.@+%\\\x{80}-\x{10FFFF}-]"
_PRIVATE_HINT = (r"(?m)(?:^|[^A-Za-z0-9_.~/-]|\\[bfnrt]|\\u[0-9a-fA-F]{4})/" + _HINT_W + r"+/"  # /home/..
                 r"|~" + _HINT_W + r"*/"  # ~/x, ~ann/x
                 r"|:[\\/]|\\\\|file:|www\.")  # C:\ d:/ https://, \\server, file:, www.
_JSON_ESCAPE = re.compile(r'\\(?:u([0-9a-fA-F]{4})|(.))')
_JSON_SIMPLE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_TEXT_BLOCK = 8 << 20  # text files are scanned in blocks of about this many bytes (memory stays flat)


def _hint_mask(arr: pa.Array) -> pa.Array:
    """True where a string of ``arr`` may hold a private string (null: False)."""
    import pyarrow.compute as pc

    return pc.fill_null(pc.match_substring_regex(arr, _PRIVATE_HINT), False)


def _string_leaves(arr: pa.Array, parents=None) -> Iterator[tuple[pa.Array, object]]:
    """Every string array inside ``arr`` (nested ones too) with, per element, the index of the
    top-level cell it belongs to (``None``: the element's own index). Nested types it does not
    open (list views, unions, extension types) yield ``(None, parents)``: every such cell counts
    as flagged and is checked by the exact pattern."""
    import numpy as np

    t = arr.type
    if pa.types.is_dictionary(t):
        arr, t = arr.dictionary_decode(), t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        yield arr, parents
    elif pa.types.is_struct(t):
        for child in arr.flatten():
            yield from _string_leaves(child, parents)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        # .values ignores a slice's offset, .offsets do not: take the values the offsets span
        offsets = np.asarray(arr.offsets)
        start, end = int(offsets[0]), int(offsets[-1])
        if end == start:
            return
        own = np.repeat(np.arange(len(arr)), np.diff(offsets))  # (list_parent_indices aborts on maps)
        yield from _string_leaves(arr.values.slice(start, end - start), own if parents is None else parents[own])
    elif pa.types.is_fixed_size_list(t):
        own = np.repeat(np.arange(len(arr)), t.list_size)
        yield from _string_leaves(arr.values.slice(arr.offset * t.list_size, len(arr) * t.list_size),
                                  own if parents is None else parents[own])
    elif pa.types.is_nested(t) or isinstance(t, pa.ExtensionType):  # list views, unions, ...: check each cell
        yield None, (np.arange(len(arr)) if parents is None else parents)


def _flagged_cells(columns: list[pa.Array]) -> list[list[int]]:
    """Per array of ``columns``: the indices of its cells that may hold a private string. Each
    string array inside is reduced to its distinct values and all of them go through one RE2
    kernel (context columns repeat the same turns many times); only when something is flagged
    are the cells that hold a flagged value looked up."""
    import numpy as np
    import pyarrow.compute as pc

    leaves = [(c, leaf, parents) for c, arr in enumerate(columns) for leaf, parents in _string_leaves(arr)]
    cells: list[set[int]] = [set() for _ in columns]
    distinct = [pc.unique(leaf).cast(pa.large_string()) for _, leaf, _ in leaves if leaf is not None]
    values = pa.chunked_array(distinct, pa.large_string())
    flagged = values.filter(_hint_mask(values)).combine_chunks() if len(values) else pa.array([], pa.large_string())
    for c, leaf, parents in leaves:
        if leaf is None:
            cells[c].update(np.asarray(parents).tolist())
        elif len(flagged):
            mask = pc.fill_null(pc.is_in(leaf.cast(pa.large_string()), value_set=flagged), False)
            if mask.true_count:
                idx = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
                cells[c].update((idx if parents is None else parents[idx]).tolist())
    return [sorted(x) for x in cells]


def _keep(hit: str, allowed: tuple[str, ...]) -> bool:
    return not (allowed and hit.startswith(allowed))


def scan_table(table: pa.Table | pa.RecordBatch, rel: str, allow: Iterable[str] = (), first_row: int = 0) -> list[str]:
    """V16 over a table, column by column: ``"<rel>: <column>[<row>].<field>: <hit>"`` for every
    absolute path or URL in any string cell (nested ones too; rows numbered from ``first_row``).
    The strings go through one RE2 kernel; only the cells it flags are read into Python and
    checked with the exact pattern."""
    allowed = tuple(a for a in allow if a)
    parts: list[tuple[str, int, pa.Array]] = []  # (column, first row, chunk)
    for name in table.column_names:
        col, base = table.column(name), first_row
        for chunk in (col.chunks if isinstance(col, pa.ChunkedArray) else [col]):
            parts.append((name, base, chunk))
            base += len(chunk)
    out: list[str] = []
    for (name, base, chunk), cells in zip(parts, _flagged_cells([c for *_, c in parts])):
        for i in cells:
            for field_path, text in _strings(chunk[i].as_py(), f"{name}[{base + i}]"):
                out += [f"{rel}: {field_path}: {hit}" for hit in private_strings(text) if _keep(hit, allowed)]
    return out


def _json_unescape(line: str) -> str:
    """``line`` with JSON string escapes decoded, so a path written as ``C:\\\\Users`` is seen."""
    def one(m: re.Match) -> str:
        if m.group(1):
            return chr(int(m.group(1), 16))
        return _JSON_SIMPLE.get(m.group(2), m.group(2))
    text = _JSON_ESCAPE.sub(one, line)
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")  # pairs -> one character


class _TextScan:
    """V16 over text: blocks of files (each ending at a line break) are gathered into batches of
    about ``_TEXT_BLOCK`` bytes (many small files share one) and matched by one RE2 kernel per
    batch; a flagged block is cut into lines, and its flagged lines go through the exact pattern. Hits
    read ``"<rel>: line <n>: <hit>"`` (lines counted by "\\n"). In ``.json`` / ``.jsonl`` files a
    line is checked as written and with its JSON escapes decoded."""

    def __init__(self, allow: Iterable[str]):
        self.allowed = tuple(a for a in allow if a)
        self.out: list[str] = []
        self.batch: list[tuple[str, int, pa.Array]] = []  # (rel, lines before the block, the block)
        self.size = 0

    def add(self, rel: str, blocks: str | Iterable[str | bytes]) -> None:
        before, last = 0, None
        for block in ([blocks] if isinstance(blocks, str) else blocks):
            data = block.encode("utf-8", "surrogatepass") if isinstance(block, str) else block
            if last is not None:  # lines are counted only where a file has several blocks
                before += last.count(b"\n")
            self.batch.append((rel, before, self._text(data)))
            self.size += len(data)
            last = data
            if self.size >= _TEXT_BLOCK:
                self.flush()

    @staticmethod
    def _text(data: bytes) -> pa.Array:
        """``data`` as a one-string array without copying it (Arrow checks the UTF-8); a block
        that is not UTF-8 is read as Latin-1."""
        import numpy as np

        arr = pa.Array.from_buffers(pa.large_string(), 1, [None, pa.py_buffer(np.array([0, len(data)], np.int64)),
                                                           pa.py_buffer(data)])
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid:
            arr = pa.array([data.decode("latin-1")], pa.large_string())
        return arr

    def flush(self) -> list[str]:
        import numpy as np
        import pyarrow.compute as pc

        if self.batch:
            texts = pa.chunked_array([t for *_, t in self.batch], pa.large_string())
            for j in np.flatnonzero(_hint_mask(texts).to_numpy()).tolist():
                rel, before, text = self.batch[j]
                lines = pc.split_pattern(text, "\n").values
                for i in np.flatnonzero(_hint_mask(lines).to_numpy(zero_copy_only=False)).tolist():
                    line = lines[i].as_py()
                    hits = private_strings(line)
                    if rel.endswith((".json", ".jsonl")) and "\\" in line:
                        hits += [h for h in private_strings(_json_unescape(line)) if h not in hits]
                    self.out += [f"{rel}: line {before + i + 1}: {hit}" for hit in hits if _keep(hit, self.allowed)]
        self.batch, self.size = [], 0
        return self.out


def scan_text(blocks: str | Iterable[str], rel: str, allow: Iterable[str] = ()) -> list[str]:
    """V16 over one text file given as a string or as blocks that each end at a line break:
    ``"<rel>: line <n>: <hit>"`` for every absolute path or URL (see :class:`_TextScan`)."""
    scan = _TextScan(allow)
    scan.add(rel, blocks)
    return scan.flush()


def _text_blocks(path: Path) -> Iterator[bytes]:
    """A file in blocks of about ``_TEXT_BLOCK`` bytes, each ending at a line break (a "\\n" byte
    never sits inside a UTF-8 character)."""
    rest = b""
    with open(path, "rb") as fh:
        while data := fh.read(_TEXT_BLOCK):
            data = rest + data
            cut = data.rfind(b"\n") + 1
            block, rest = data[:cut], data[cut:]
            if block:
                yield block
    if rest:
        yield rest


def scan_release(release_dir: str | Path, allow: Iterable[str] = (),
                 held: dict[str, pa.Table | str] | None = None, skip: Iterable[str] = ()) -> list[str]:
    """Every absolute path or URL in the files of a built release, as ``"<file>: <field>: <hit>"``.

    Every file under ``release_dir`` is scanned once: Parquet files column by column
    (:func:`scan_table`, every string, nested ones too), every other file as text (lines; JSON
    escapes decoded in ``.json``/``.jsonl``). ``held``: files the caller still holds in memory,
    by path relative to the release (the table of a Parquet file, the text of a text file),
    scanned there instead of being read back; ``skip``: files the caller scanned already (as it
    wrote them, with :func:`scan_table`). ``allow``: public URLs the maintainer put there on
    purpose (a licence link, a citation URL), ignored where they occur (a hit that starts with
    one). An empty list means the release is clean.
    """
    import pyarrow.parquet as pq

    held, skip = held or {}, set(skip)
    root = Path(release_dir)
    tables: list[str] = []
    text = _TextScan(allow)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel in skip:
            continue
        kept = held.get(rel)
        if isinstance(kept, str):
            text.add(rel, kept)
        elif kept is not None:
            tables += scan_table(kept, rel, allow)
        elif path.suffix == ".parquet":
            base = 0
            for batch in pq.ParquetFile(path).iter_batches(batch_size=64 * 1024):
                tables += scan_table(batch, rel, allow, first_row=base)
                base += batch.num_rows
        else:
            text.add(rel, _text_blocks(path))
    hits = tables + text.flush()
    return sorted(hits, key=lambda h: h.split(": ", 1)[0])  # by file, as the files are listed
