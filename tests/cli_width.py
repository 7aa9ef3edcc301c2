"""What an 80-column terminal shows of a command: every table line fits, and no cell is cut."""
from __future__ import annotations

from typer.testing import CliRunner

from pipeline.cli import app

TABLE_CHARS = "─━┃│┏┗╇┡"


def at_80_columns(*args: str) -> str:
    out = CliRunner(env={"COLUMNS": "80"}).invoke(app, list(args))
    assert out.exit_code in (0, 3), (out.exit_code, out.output[-600:], out.exception)
    return out.output


def assert_tables_fit(output: str) -> None:
    """Table lines (those a table drew: its rule, or cells spaced into columns) are at most 80
    characters; nothing anywhere is cut with an ellipsis. Sentences and paths may be longer:
    they are printed as one line and the terminal wraps them."""
    assert "\u2026" not in output, output
    for line in output.splitlines():
        if any(c in line for c in TABLE_CHARS) or "  " in line.strip():
            assert len(line) <= 80, f"{len(line)} columns: {line!r}"
