"""The ``rescue`` command line. Each stage adds its commands in its own section below;
all logic lives in the stage modules, the CLI only parses arguments and prints."""
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


# --- import / validate (pipeline.rescue_format, pipeline.validate) -------------------


# --- release (pipeline.release) ------------------------------------------------------


# --- media, transcription, diarization, turns (pipeline.media, .transcribe, .diarize, .turns)


# --- Label Studio and annotation rounds (pipeline.annotation) ------------------------


# --- agreement, adjudication, gold (pipeline.agreement, pipeline.gold) ---------------


# --- orchestration: stack, demo (flows/) ---------------------------------------------


if __name__ == "__main__":  # pragma: no cover
    app()
