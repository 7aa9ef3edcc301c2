"""The ``rescue`` Typer app and the options every command shares."""
from __future__ import annotations

import typer

app = typer.Typer(
    name="rescue",
    help="Rebuild the RESCUE benchmark from therapy-interview videos.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold tokens or transcripts
)


@app.callback()
def _main() -> None:
    """rescue-pipeline command line."""


DataRoot = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data).")
