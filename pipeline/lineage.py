"""What made a result: the key of a stage result, its parts, and the record kept beside it.

A stage result is keyed by what made it, never by a version someone must remember to bump:

- the content of its inputs (digests of files and typed records);
- the digest of the code that computes it: the stage's module and every module of this package
  it imports, transitively (import statements read with ``ast``, function-level ones too), read
  from source at run time. The per-file digests are kept, so a changed key names the file;
- the digest of every model it loads (a model directory: every file in it);
- the settings that change its output.

:class:`StageKey` holds the parts and the key made from them. The flows' cache
(``flows.stage_resume``) and the CLI use the same key (``pipeline.media.keys`` builds it for
the four media stages). After a stage has run, :func:`record` writes the key and its parts
beside the result (``DataRoot.result_key``: ``keys/<stage>/<sample_id>.json``), with the
reasons it was recomputed; :func:`why_stale` compares a record with the key of now and says
what changed (``pipeline/media/turns.py changed``, ``model diarization-offline changed``,
``input changed (transcript)``).

Costs: the source digests are computed once per process (a worker runs each flow run in a
process of its own, a command is one process), about 100 source files read and a handful
parsed. A file's digest is cached by path, size and modification time, in the process and in
``keys/digests.json`` under the data root, so a model directory or a video is read again only
when it changed.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.paths import DataRoot
from pipeline.store import atomic_write_text, canonical_json, sha256_file

PACKAGE = "pipeline"
PACKAGE_DIR = Path(__file__).resolve().parent  # the package this process imported (a scratch copy too)
SOURCE_ROOT = PACKAGE_DIR.parent

_LOCK = threading.Lock()
_PARSED: dict[str, tuple[str, frozenset[str]]] = {}   # module -> (sha256 of its source, pipeline modules it imports)
_CLOSURES: dict[str, dict[str, str]] = {}             # module -> {relative file: sha256}
_FILES: dict[tuple[str, int, int], str] = {}           # (path, size, mtime_ns) -> sha256
_PACKAGE_DIGEST: list[str] = []


# --- code -------------------------------------------------------------------------------

def module_file(module: str) -> Path | None:
    """The source file of a ``pipeline`` module in the imported package (``None``: no such module)."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    base = SOURCE_ROOT.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(module: str, path: Path, tree: ast.AST) -> set[str]:
    """The ``pipeline`` modules named by every import statement of ``module`` (at any depth)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names = [base] + [f"{base}.{a.name}" for a in node.names]  # `from pipeline.media import vad`
        else:
            continue
        for name in names:
            while name and name.split(".")[0] == PACKAGE and module_file(name) is None:
                name = name.rpartition(".")[0]  # `import pipeline.x.attr`: the module is pipeline.x
            if name and name.split(".")[0] == PACKAGE:
                found.add(name)
    return found


# An import statement's first line (at any indentation: function-level imports count too).
_IMPORT_LINE = re.compile(rb"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import|import)[ \t][^\n]*", re.M)


def _import_statements(data: bytes) -> list[str]:
    """The import statements of a source file, each as its own line of code. Found by a pattern
    and then parsed (``ast``): parsing whole files cost ~10 ms each, too much for every process."""
    out = []
    for match in _IMPORT_LINE.finditer(data):
        lines, depth, pos = [], 0, match.start()
        while pos < len(data):  # to the statement's end: parentheses closed, no trailing backslash
            nxt = data.find(b"\n", pos)
            nxt = len(data) if nxt < 0 else nxt
            code = data[pos:nxt].split(b"#", 1)[0]  # an import statement holds no string with '#'
            lines.append(code.strip())
            depth += code.count(b"(") - code.count(b")")
            pos = nxt + 1
            if depth <= 0 and not code.rstrip().endswith(b"\\"):
                break
        out.append(b" ".join(line.rstrip(b"\\") for line in lines).decode("utf-8", "replace"))
    return out


def _parsed_imports(statements: list[str]) -> list[ast.stmt]:
    try:
        return ast.parse("\n".join(statements)).body
    except SyntaxError:  # a docstring line that reads like an import: parse one by one, drop it
        body = []
        for text in statements:
            try:
                body += ast.parse(text).body
            except SyntaxError:
                continue
        return body


def _parse(module: str) -> tuple[str, frozenset[str]]:
    if module not in _PARSED:
        path = module_file(module)
        data = path.read_bytes()
        tree = ast.Module(body=_parsed_imports(_import_statements(data)), type_ignores=[])
        _PARSED[module] = (hashlib.sha256(data).hexdigest(), frozenset(_imports(module, path, tree)))
    return _PARSED[module]


def _relative(module: str) -> str:
    return module_file(module).relative_to(SOURCE_ROOT).as_posix()


def code_files(module: str) -> dict[str, str]:
    """``{"pipeline/media/turns.py": sha256, ...}``: ``module``, every ``pipeline`` module it
    imports (transitively) and the packages they sit in (their ``__init__.py`` runs on import).
    Once per process."""
    with _LOCK:
        if module in _CLOSURES:
            return dict(_CLOSURES[module])
        if module_file(module) is None:
            raise ValueError(f"no module {module!r} in {PACKAGE_DIR}")
        seen, todo = set(), [module]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            parent = name.rpartition(".")[0]
            if parent:
                todo.append(parent)
            todo.extend(_parse(name)[1] - seen)
        files = {_relative(m): _parse(m)[0] for m in sorted(seen)}
        _CLOSURES[module] = files
        return dict(files)


def digest_of(obj) -> str:
    """The sha256 of an object's canonical JSON (sorted keys): the same parts give the same digest."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def package_digest() -> str:
    """The digest of every source file of the package (for caches outside the media stages that
    key on the code as a whole). Once per process."""
    with _LOCK:
        if not _PACKAGE_DIGEST:
            files = {p.relative_to(SOURCE_ROOT).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                     for p in sorted(PACKAGE_DIR.rglob("*.py"))}
            _PACKAGE_DIGEST.append(digest_of(files))
        return _PACKAGE_DIGEST[0]


# --- files and models ----------------------------------------------------------------------

class DigestCache:
    """File digests by path, size and modification time: in this process, and in
    ``keys/digests.json`` under a data root (when one is given) for the next process."""

    def __init__(self, root: DataRoot | None = None) -> None:
        self.root = root
        self._stored: dict[str, list] | None = None
        self._dirty = False

    def _load(self) -> dict[str, list]:
        if self._stored is None:
            self._stored = {}
            if self.root is not None:
                try:
                    self._stored = json.loads(self.root.digest_cache().read_text())
                except (OSError, ValueError):
                    self._stored = {}
        return self._stored

    def file(self, path: str | os.PathLike) -> str:
        path = Path(path)
        st = path.stat()
        mark = (str(path.absolute()), st.st_size, st.st_mtime_ns)
        with _LOCK:
            if mark in _FILES:
                return _FILES[mark]
            known = self._load().get(mark[0])
        if known and known[0] == st.st_size and known[1] == st.st_mtime_ns:
            digest = known[2]
        else:
            digest = sha256_file(path)
            with _LOCK:
                self._load()[mark[0]] = [st.st_size, st.st_mtime_ns, digest]
                self._dirty = True
        with _LOCK:
            _FILES[mark] = digest
        return digest

    def save(self) -> None:
        """Write the data root's cache if this process learnt a digest (atomic; last writer wins)."""
        if self.root is None or not self._dirty:
            return
        with _LOCK:
            stored, self._dirty = dict(self._load()), False
        try:
            on_disk = json.loads(self.root.digest_cache().read_text())
        except (OSError, ValueError):
            on_disk = {}
        atomic_write_text(self.root.digest_cache(), json.dumps({**on_disk, **stored}, sort_keys=True), private=True)


_CACHES: dict[str, DigestCache] = {}


def cache_for(root: DataRoot) -> DigestCache:
    """The digest cache of a data root, one per process (:func:`record` saves it)."""
    with _LOCK:
        cache = _CACHES.get(str(root.root))
        if cache is None:
            cache = _CACHES[str(root.root)] = DigestCache(root)
        return cache


def file_digest(path: str | os.PathLike, cache: DigestCache | None = None) -> str:
    """sha256 of a file's bytes, cached by path, size and mtime; else what it is ("missing", "not a
    regular file", "unreadable"): a key is made before the stage checks its input, so a FIFO or a
    device is never read here (the stage refuses it, naming it)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return "not a regular file"
        return (cache or DigestCache()).file(path)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "unreadable"


def model_digest(path: str | os.PathLike, cache: DigestCache | None = None) -> str:
    """The digest of a model: a file's sha256, or for a directory the digest of every file in it
    (relative name and sha256; hidden build markers too). "missing" when it is not there."""
    path = Path(path)
    if path.is_file():
        return file_digest(path, cache)
    if not path.is_dir():
        return "missing"
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return digest_of({p.relative_to(path).as_posix(): file_digest(p, cache) for p in files})


# --- the key and its record ------------------------------------------------------------------

@dataclass(frozen=True)
class StageKey:
    """The parts that make one stage result, and the key made from them.

    ``code``: relative source file -> sha256; ``models``: model name -> ``{"path", "sha256"}``;
    ``settings``: what changes the output; ``inputs``: input name -> digest; ``options``: the
    stage call's own arguments (recorded, so that the key of now can be made again for
    ``rescue status --stale``; they reach the key through ``settings`` and ``inputs``)."""

    stage: str
    sample_id: str
    code: dict[str, str]
    models: dict[str, dict] = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    options: dict = field(default_factory=dict)

    @property
    def code_digest(self) -> str:
        return digest_of(self.code)

    @property
    def key(self) -> str:
        return digest_of({"stage": self.stage, "code": self.code_digest, "settings": self.settings,
                          "models": {name: m["sha256"] for name, m in self.models.items()}, "inputs": self.inputs})

    def as_record(self, why: list[str] | None = None, output_sha256: str | None = None) -> dict:
        return {"stage": self.stage, "sample_id": self.sample_id, "key": self.key, "code_digest": self.code_digest,
                "code": self.code, "models": self.models, "settings": self.settings, "inputs": self.inputs,
                "options": self.options, "recomputed_because": list(why or []), "output_sha256": output_sha256}


def read_record(root: DataRoot, stage: str, sample_id: str) -> dict | None:
    """The record of a stage result (``None``: none was kept, or it cannot be read)."""
    try:
        record = json.loads(root.result_key(stage, sample_id).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("key") else None


def record(root: DataRoot, key: StageKey, why: list[str] | None = None, output_sha256: str | None = None) -> Path:
    """Write ``key`` and its parts beside the result it made (owner-only)."""
    path = atomic_write_text(root.result_key(key.stage, key.sample_id),
                             canonical_json(key.as_record(why, output_sha256)), private=True)
    cache_for(root).save()
    return path


def reasons(root: DataRoot, key: StageKey, output: str | os.PathLike | None, redo: bool = False) -> list[str]:
    """Why the result ``key`` names must be made (empty: it is up to date): it was never made,
    it has no record, what made it changed, or ``redo`` was asked for."""
    if output is None or not Path(output).exists():
        return ["not made yet"]
    why = why_stale(read_record(root, key.stage, key.sample_id), key)
    return why or (["redo asked for"] if redo else [])


NO_RECORD = "no key recorded (made before results were keyed by what made them)"


def why_stale(recorded: dict | None, current: StageKey) -> list[str]:
    """What differs between a result's record and the key of now, in words (empty: nothing)."""
    if recorded is None:
        return [NO_RECORD]
    if recorded.get("key") == current.key:
        return []
    why = []
    old_code, new_code = recorded.get("code") or {}, current.code
    for name in sorted(set(old_code) | set(new_code)):
        if name not in old_code:
            why.append(f"{name} added")
        elif name not in new_code:
            why.append(f"{name} no longer used")
        elif old_code[name] != new_code[name]:
            why.append(f"{name} changed")
    old_models, new_models = recorded.get("models") or {}, current.models
    for name in sorted(set(old_models) | set(new_models)):
        old, new = (old_models.get(name) or {}).get("sha256"), (new_models.get(name) or {}).get("sha256")
        if old == new:
            continue
        if new == "missing":
            why.append(f"model {name} missing at {new_models[name].get('path')}")
        else:
            why.append(f"model {name} changed" if old and new else f"model {name} {'added' if new else 'no longer used'}")
    old_settings, new_settings = recorded.get("settings") or {}, current.settings
    for name in sorted(set(old_settings) | set(new_settings)):
        if old_settings.get(name) != new_settings.get(name):
            why.append(f"setting {name} changed ({old_settings.get(name)!r} -> {new_settings.get(name)!r})")
    old_inputs, new_inputs = recorded.get("inputs") or {}, current.inputs
    for name in sorted(set(old_inputs) | set(new_inputs)):
        if old_inputs.get(name) != new_inputs.get(name):
            why.append(f"input changed ({name})")
    if recorded.get("stage") != current.stage or not why:
        why.append("the key's recipe changed")
    return why
