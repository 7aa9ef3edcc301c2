"""The few ways the pipeline writes files (where they go is :class:`pipeline.paths.DataRoot`).

Private by default: every entry point (the ``rescue`` command, a flow run, the demo) calls
:func:`private_by_default` first, so what the pipeline and the processes it starts (Prefect,
workers, desks) write is owner-only (files 0600, folders 0700) whatever the operator's umask.
A release becomes readable by others only through :func:`publish_tree` (``rescue release publish``).
:func:`prepare_data_root` checks a data root once per run (at the entry point that built it)
and :func:`private_areas` makes a stage's private areas (:data:`PRIVATE_AREAS`) owner-only. Writes are atomic: a temp file (or temp directory) next to the target, then a
rename, so a reader never sees half a file and a crash leaves the old state intact.
Immutable things (releases, archived snapshots) are written once: writing over an existing
one is an error (:class:`AlreadyExists`), never a silent overwrite.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.config import check_data_root
from pipeline.paths import DataRoot


class AlreadyExists(FileExistsError):
    """An immutable artifact (release version, snapshot) already exists."""


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


# What every entry point sets: nothing the pipeline writes is readable by group or others.
PRIVATE_UMASK = 0o077


def private_by_default() -> int:
    """Set the process umask to :data:`PRIVATE_UMASK` (the processes it starts inherit it);
    returns the umask it replaced."""
    return os.umask(PRIVATE_UMASK)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _publish_mode(path: str | Path, directory: bool = False) -> None:
    """mkstemp/mkdtemp create private (0600/0700) entries; published data is readable, except
    inside a private folder (:func:`private_dir`): there files stay 0600 and folders 0700."""
    if private_dir(Path(path).parent):
        os.chmod(path, 0o700 if directory else 0o600)
        return
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


def private_dir(path: str | Path) -> bool:
    """A folder only its owner may enter (no group/other bits): what is written in it stays private."""
    try:
        return os.stat(path).st_mode & 0o077 == 0
    except OSError:
        return False


def make_private_dir(path: str | Path) -> Path:
    """Create ``path`` (and missing parents, as :func:`_make_parents` does) owner-only (0700); an
    existing folder is narrowed to 0700. Private data (WAVs, transcripts, RTTM, drafts, voice
    prints) lives in such folders, so every file written there is 0600."""
    path = Path(path)
    _make_parents(path.parent)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    os.chmod(path, 0o700)
    return path


def _make_parents(directory: Path) -> None:
    """``mkdir -p``; a folder created inside a private folder is private too (0700)."""
    if directory.is_dir():
        return
    missing = []
    while not directory.exists() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    for d in reversed(missing):
        private = private_dir(d.parent)
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=0o700 if private else 0o777)
        if private:
            os.chmod(d, 0o700)


# The areas of the data root that hold interviews (audio, subtitle copies, transcripts, RTTM,
# drafts, voice prints): owner-only folders, so every file written there is 0600.
PRIVATE_AREAS = ("media", "subtitles", "transcripts", "diarization", "drafts", "draft-voices", "voices")


def prepare_data_root(root: DataRoot, areas: tuple[str, ...] = ()) -> DataRoot:
    """``root`` checked (:func:`pipeline.config.check_data_root`: a writable folder, created if
    missing, else ``DataRootError`` naming it), with ``areas`` (of :data:`PRIVATE_AREAS`) made
    owner-only folders (0700). The one writability probe of a run: each entry point (a
    ``rescue`` command, a flow run) calls it once where it builds the root; the stages only make
    the private areas they write (:func:`private_areas`)."""
    if not isinstance(root, DataRoot):
        raise TypeError(f"prepare_data_root takes the DataRoot its entry point built, not {type(root).__name__}")
    check_data_root(root.root)
    private_areas(root, *areas)
    return root


def private_areas(root: DataRoot, *names: str) -> None:
    """:func:`private_area` for each of ``names`` (a stage's own areas; no writability probe)."""
    for name in names:
        private_area(root, name)


def private_area(root: DataRoot, name: str) -> Path:
    """The private folder ``name`` of :data:`PRIVATE_AREAS` under the root, created (or narrowed) to 0700."""
    if name not in PRIVATE_AREAS:
        raise ValueError(f"{name!r} is not a private area ({', '.join(PRIVATE_AREAS)})")
    area = root.resolve(name)
    if not private_dir(area):
        make_private_dir(area)
    return area


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes, *, exist_ok: bool = True, private: bool = False) -> Path:
    """Write ``data`` atomically; ``private``: 0600 whatever the umask (a table that names people)."""
    path = Path(path)
    _make_parents(path.parent)
    if not exist_ok and path.exists():
        raise AlreadyExists(f"{path} already exists and is write-once")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if private:
            os.chmod(tmp, 0o600)
        else:
            _publish_mode(tmp)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if exist_ok:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if someone created it meanwhile: write-once holds
            os.unlink(tmp)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return path


def atomic_write_text(path: str | Path, text: str, *, exist_ok: bool = True, private: bool = False) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), exist_ok=exist_ok, private=private)


def canonical_json(obj) -> str:
    """Stable JSON text (sorted keys, fixed separators, trailing newline): identical bytes per content."""
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def read_json_record(path: str | Path, what: str, remedy: str) -> dict:
    """The JSON object a stage keeps at ``path`` ({} when there is none, or not an object); a file
    that is not JSON is one ``ValueError`` naming it, ``what`` it is and ``remedy``."""
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path}: {what} is not JSON ({exc}); {remedy}") from None
    return raw if isinstance(raw, dict) else {}


def write_text_if_changed(path: str | Path, text: str, *, private: bool = False) -> bool:
    """``atomic_write_text`` unless ``path`` already holds ``text`` (a run that changed nothing
    leaves the file, its time and its readers' caches as they are); whether it wrote."""
    with contextlib.suppress(OSError):
        if Path(path).read_text(encoding="utf-8") == text:
            return False
    atomic_write_text(path, text, private=private)
    return True


# Fixed writer options so the same table always gives the same bytes (no timestamps in Parquet).
PARQUET_OPTIONS = dict(
    compression="zstd",
    compression_level=3,
    use_dictionary=True,
    write_statistics=True,
    data_page_size=1 << 20,
    row_group_size=64 * 1024,
    version="2.6",
    store_schema=True,
)


def write_parquet(table: pa.Table, path: str | Path, *, exist_ok: bool = True) -> Path:
    """Deterministic, atomic Parquet write."""
    path = Path(path)
    _make_parents(path.parent)
    if not exist_ok and path.exists():
        raise AlreadyExists(f"{path} already exists and is write-once")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        _publish_mode(tmp)
        pq.write_table(table, tmp, **PARQUET_OPTIONS)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


@contextlib.contextmanager
def write_once_dir(final: str | Path) -> Iterator[Path]:
    """Build a directory in a temp dir beside ``final`` and rename it into place on success.

    Raises :class:`AlreadyExists` if ``final`` exists (before any work, and again at the
    rename if another writer got there first). On error the temp dir is removed.
    """
    final = Path(final)
    if final.exists():
        raise AlreadyExists(f"{final} already exists; it is immutable (choose a new version)")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".building", dir=final.parent))
    try:
        _publish_mode(tmp, directory=True)
        yield tmp
        try:
            os.rename(tmp, final)  # atomic; fails if final appeared meanwhile (non-empty dir)
        except OSError as exc:
            if final.exists():
                raise AlreadyExists(f"{final} was created by another writer during this build") from exc
            raise
        _fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def publish_tree(tree: str | Path, root: str | Path) -> list[Path]:
    """Make ``tree`` (a folder inside ``root``) readable by everyone: files 0644, folders 0755
    (links are left as they are, never followed). The folders from ``root`` down to the tree's
    parent get the search bit for group and others (``--x``: they can pass through to the
    tree, never list or read what else is there). Returns those folders whose mode changed."""
    tree, root = Path(tree).absolute(), Path(root).absolute()
    if root not in tree.parents:
        raise ValueError(f"{tree} is not inside {root}")
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in filenames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, 0o644)
        for name in dirnames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, 0o755)
    os.chmod(tree, 0o755)
    opened = []
    folder = tree.parent
    while True:
        mode = os.stat(folder).st_mode & 0o7777
        if mode & 0o011 != 0o011:
            os.chmod(folder, mode | 0o011)
            opened.append(folder)
        if folder == root:
            break
        folder = folder.parent
    return opened
