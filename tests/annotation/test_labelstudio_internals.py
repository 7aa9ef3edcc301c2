"""Label Studio's internals stay in one place: pipeline/labelstudio/ (and the front's page files
named in its table). The table (pipeline/labelstudio/internals.py) names every file that relies on
them, each version guard accepts the pinned release, docs/UPGRADING.md has a section for each
internal in the table's order, and no source outside those files names Label Studio's database,
its Django settings or its build. (That no module outside the package imports Label Studio's
code is an import contract: tests/test_architecture.py.)"""
from __future__ import annotations

import re
from pathlib import Path

from pipeline.config import REPO_ROOT
from pipeline.labelstudio.internals import INTERNALS
from pipeline.labelstudio.server import LS_VERSION

# What only code relying on Label Studio's internals says: its tables, its database file, its
# Django settings, its build's paths.
MARKERS = re.compile(r"\b(task_completion|tasks_annotationdraft|htx_user|task_comment_authors|"
                     r"prediction_meta|label_studio\.sqlite3|DJANGO_SETTINGS_MODULE|django\.setup|"
                     r"from (django|rest_framework|users|tasks|projects)\b[.\w]* import|react-app/\d+\.js)")
SOURCES = ("pipeline", "ops", "flows", "benchmarks")
INSTALLER = "scripts/setup.d/30-label-studio.sh"  # installs the pin and makes the template database


def _listed() -> set[str]:
    return {f for internal in INTERNALS for f in internal.files}


def _sources() -> list[Path]:
    return sorted(p for top in SOURCES for p in (REPO_ROOT / top).rglob("*")
                  if p.suffix in (".py", ".js") and "__pycache__" not in p.parts)


def test_every_file_the_table_names_exists():
    missing = sorted(f for f in _listed() if not (REPO_ROOT / f).is_file())
    assert not missing, f"internals.py names files that are not there: {missing}"


def test_every_source_that_touches_an_internal_is_in_the_table():
    touching = {str(p.relative_to(REPO_ROOT)): m.group(0) for p in _sources()
                if (m := MARKERS.search(p.read_text(errors="replace")))}
    assert "pipeline/labelstudio/desk_db.py" in touching  # the markers find what they must
    unlisted = {f: what for f, what in touching.items() if f not in _listed()}
    assert not unlisted, f"these rely on Label Studio's internals but are not in pipeline/labelstudio/internals.py: {unlisted}"


def test_no_internal_lives_outside_the_package_but_the_installer():
    outside = sorted(f for f in _listed() if not f.startswith("pipeline/labelstudio/"))
    assert set(outside) <= {INSTALLER}, outside


def test_each_version_guard_accepts_the_pinned_release():
    guarded = {i.name: i.written_for() for i in INTERNALS if i.written_for is not None}
    assert len(guarded) >= 2
    assert all(v == LS_VERSION for v in guarded.values()), f"pin {LS_VERSION}, guards {guarded}"


def test_the_upgrade_guide_has_a_section_for_each_internal_in_order():
    guide = (REPO_ROOT / "docs" / "UPGRADING.md").read_text()
    headings = re.findall(r"^### \d+\. (.+)$", guide, re.M)
    assert headings == [i.name for i in INTERNALS]
    for internal in INTERNALS:
        if internal.switch:
            assert internal.switch in guide, internal.name
