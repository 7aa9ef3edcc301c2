"""README's Layout matches the tree, one short line per row: every row's paths exist, every
top-level folder and file of the repository and every package under ``pipeline/`` has a row.
docs/ARCHITECTURE.md goes one level down: each package's section names every module in it, and
every module the README's Layout or docs/ name by path (``pipeline/annotation/pull.py``) or
dotted name (``pipeline.media.turns``, ``media.turns``) exists."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.config import REPO_ROOT

PACKAGES = ["pipeline/media/", "pipeline/annotation/", "pipeline/labelstudio/", "pipeline/labelstudio/front/", "pipeline/quality/", "pipeline/benchmark/",
            "pipeline/synthetic/", "pipeline/cli/", "flows/", "ops/"]
ROW_MAX = 130  # characters of a Layout row's "what": one line, read at a glance
NOT_IN_LAYOUT = {"README.md", "CHANGELOG.md"}  # the page itself and its history
ARCHITECTURE = REPO_ROOT / "docs" / "ARCHITECTURE.md"


def _layout() -> str:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    return text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]


def _rows() -> dict[str, str]:
    """path cell -> what cell, for each table row of the Layout."""
    rows = {}
    for line in _layout().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            rows[cells[0]] = cells[1]
    return rows


def _row_paths() -> set[str]:
    return {path.rstrip("/") for cell in _rows() for path in re.findall(r"`([^`]+)`", cell)}


def _modules(package: str) -> list[str]:
    folder = REPO_ROOT / package
    return sorted(p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")) + sorted(
        p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists())


def _tracked_top_level() -> set[str]:
    """Top-level folders and files of the checkout: not hidden, not ignored build output."""
    ignored = {"data", "models", "build", "test-output"}
    return {p.name for p in REPO_ROOT.iterdir()
            if not p.name.startswith(".") and p.name not in ignored and not p.name.endswith(".egg-info")
            and p.name != "__pycache__"}


def test_every_layout_row_is_one_short_line_of_paths_that_exist():
    rows = _rows()
    assert len(rows) >= 10, "README's Layout table was not found"
    long = [f"{path} ({len(what)} characters)" for path, what in rows.items() if len(what) > ROW_MAX]
    assert not long, f"Layout rows over {ROW_MAX} characters (the detail goes to docs/ARCHITECTURE.md): {long}"
    gone = sorted(p for p in _row_paths() if not (REPO_ROOT / p).exists())
    assert not gone, f"README's Layout names paths that do not exist: {gone}"


def test_every_top_level_entry_and_pipeline_package_has_a_row():
    named = _row_paths()
    missing = sorted(_tracked_top_level() - named - NOT_IN_LAYOUT)
    assert not missing, f"README's Layout has no row for: {missing}"
    packages = sorted(f"pipeline/{p.name}" for p in (REPO_ROOT / "pipeline").iterdir()
                      if (p / "__init__.py").exists())
    assert not [p for p in packages if p not in named], f"README's Layout lacks a pipeline package: {packages}"


def _architecture_section(package: str) -> str:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    match = re.search(rf"^### [^\n]*`{re.escape(package)}`[^\n]*\n(.*?)(?=^#{{1,3}} |\Z)", text, re.M | re.S)
    assert match, f"docs/ARCHITECTURE.md has no section for {package}"
    return match.group(1)


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_section_names_every_module(package):
    named = set(re.findall(r"`([A-Za-z_]\w*)/?`", _architecture_section(package)))
    missing = [m for m in _modules(package) if m not in named]
    assert not missing, f"docs/ARCHITECTURE.md's section {package} does not name: {', '.join(missing)}"


def test_the_core_section_names_the_core_modules_and_only_those():
    section = _architecture_section("pipeline/")
    listed = set(re.findall(r"^- `(\w+)/?`", section, re.M))  # one bullet per core module
    layers = {p.rstrip("/").split("/")[-1] for p in PACKAGES if p.startswith("pipeline/")}
    assert sorted(listed) == sorted(set(_modules("pipeline/")) - layers)


def _module_file(dotted: str) -> Path | None:
    base = REPO_ROOT.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _named_modules(text: str, short: bool = False) -> set[str]:
    """Modules a text names: ``pipeline/x/y.py`` paths (not ``tests/flows/...``) and ``pipeline.x.y``
    dotted names; with ``short`` also the Layout's ``media.turns`` form. A trailing function or
    class name is allowed (``pipeline.annotation.status.status_rows``)."""
    found = {p[:-3].replace("/", ".") for p in re.findall(r"(?<![\w/])(?:pipeline|flows|ops)/[\w/]+\.py\b", text)}
    found |= set(re.findall(r"(?<![\w/.])pipeline(?:\.\w+)+", text))
    if short:
        subpackages = "|".join(p.split("/")[1] for p in PACKAGES if p.startswith("pipeline/"))
        found |= {f"pipeline.{m}" for m in re.findall(rf"`((?:{subpackages})\.\w+)`", text)}
    return found


def _resolves(name: str) -> bool:
    """``name`` is a module, or a module's top-level function, class or constant."""
    if _module_file(name):
        return True
    module, _, attr = name.rpartition(".")
    path = _module_file(module) if module else None
    return path is not None and re.search(rf"^(?:def |class )?{attr}\b", path.read_text(encoding="utf-8"), re.M) is not None


def test_every_module_the_layout_and_docs_name_exists():
    named = {"README.md Layout": _named_modules(_layout(), short=True),
             "docs/ARCHITECTURE.md": _named_modules(ARCHITECTURE.read_text(encoding="utf-8"), short=True)} | {
        str(p.relative_to(REPO_ROOT)): _named_modules(p.read_text(encoding="utf-8"))
        for p in sorted((REPO_ROOT / "docs").rglob("*.md"))}
    gone = [f"{where}: {name}" for where, names in named.items() for name in sorted(names) if not _resolves(name)]
    assert not gone, "modules named but not in the tree:\n" + "\n".join(gone)


def test_the_checks_find_what_is_missing():
    assert _named_modules("see pipeline/media/gone.py, tests/flows/test_x.py, `media.turns` and "
                          "pipeline.store.write_parquet", short=True) == {
        "pipeline.media.gone", "pipeline.media.turns", "pipeline.store.write_parquet"}
    assert not _resolves("pipeline.media.gone") and _resolves("pipeline.media.turns")
    assert _resolves("pipeline.store.write_parquet") and not _resolves("pipeline.store.no_such_function")
