"""No module in pipeline/ over 500 lines: a module that long has grown a second job. One
that truly is one job may stay longer if its docstring says why, on a line starting with
"One module because" (the check reads the docstring, so the reason stays next to the code)."""
from __future__ import annotations

import ast
from pathlib import Path

from pipeline.config import REPO_ROOT

MAX_LINES = 500
REASON = "One module because"


def _too_long(root: Path = REPO_ROOT) -> list[str]:
    out = []
    for path in sorted((root / "pipeline").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n") + (not text.endswith("\n") and bool(text))
        if lines <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text, str(path))) or ""
        if not any(line.strip().startswith(REASON) for line in doc.splitlines()):
            out.append(f"{path.relative_to(root)}: {lines} lines")
    return out


def test_no_module_in_pipeline_is_over_500_lines_without_saying_why():
    found = _too_long()
    assert not found, (f"modules over {MAX_LINES} lines (cut them by job, or say in the docstring, on a line "
                       f"starting with {REASON!r}, why they must be one):\n" + "\n".join(found))


def test_the_size_check_finds_a_long_module_and_reads_its_reason(tmp_path):
    pkg = tmp_path / "pipeline"
    pkg.mkdir()
    body = "x = 1\n" * (MAX_LINES + 1)
    (pkg / "long.py").write_text('"""Two jobs."""\n' + body)
    (pkg / "reasoned.py").write_text(f'"""One job.\n\n{REASON} the parser is one grammar."""\n' + body)
    (pkg / "short.py").write_text('"""Short."""\n' + "x = 1\n" * 10)
    assert _too_long(tmp_path) == [f"pipeline/long.py: {MAX_LINES + 2} lines"]
