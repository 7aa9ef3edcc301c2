"""V16 of :mod:`pipeline.validate`: the absolute paths, home and drive paths and URLs in a string,
and the scanners that find them fast in a sample's rows, a table (every string, nested ones too),
a text file and a built release.

Speed is by design: one RE2 kernel (pyarrow's string kernels) runs a superset pattern over
whole columns, rows' JSON text and text blocks; only what it flags goes through the exact Python
pattern, string by string.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa

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


def string_fields(value, path: str) -> Iterator[tuple[str, str]]:
    """(field path, string) of every string inside a JSON-like value."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from string_fields(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from string_fields(v, f"{path}[{i}]")


def rows_flagged(samples: list[dict]) -> list[bool]:
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


# The addresses of the vocabularies a release's croissant.json is written in (JSON-LD @context,
# conformsTo): they name terms, not places where data lives, so they are never a V16 finding.
VOCABULARIES = ("https://schema.org/", "http://mlcommons.org/croissant/", "http://purl.org/dc/terms/")


def _keep(hit: str, allowed: tuple[str, ...]) -> bool:
    return not hit.startswith(allowed + VOCABULARIES)


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
            for field_path, text in string_fields(chunk[i].as_py(), f"{name}[{base + i}]"):
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
