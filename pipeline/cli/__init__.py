"""The ``rescue`` command line of the library: one thin module per stage group, all on one
Typer app (:mod:`pipeline.cli.app`). Commands parse arguments and print; the work is in the
stage modules. The operational commands (``rescue stack``, ``rescue demo``) are added by
:mod:`ops.cli`, the console script's entry point.
"""
from pipeline.cli import annotate, data, media, quality, release  # noqa: F401  (each registers its commands)
from pipeline.cli.app import app

app.add_typer(annotate.label_studio_app, name="label-studio")
app.add_typer(annotate.annotators_app, name="annotators")
app.add_typer(annotate.annotate_app, name="annotate")

__all__ = ["app"]
