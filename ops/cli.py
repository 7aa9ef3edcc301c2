"""The ``rescue`` console script: the library's commands (:mod:`pipeline.cli`) plus the
operational ones that start servers, workers and flows or follow them (``rescue stack``,
``rescue worker start``, ``rescue demo``, ``rescue annotate front``, ``rescue batch watch``)."""
from pathlib import Path
from typing import Optional

import typer

from ops import batch_watch, demo, doctor, remote, stack, worker
from pipeline.cli import app
from pipeline.cli.annotate import annotate_app, annotators_app

app.add_typer(stack.cli, name="stack")
app.add_typer(batch_watch.cli, name="batch")
app.add_typer(worker.cli, name="worker")
app.command("demo")(demo.demo_command)
app.command("doctor")(doctor.doctor_command)
annotators_app.command("remote")(remote.annotators_remote)


@annotate_app.command("front")
def annotate_front(
    annotator: str = typer.Option(..., "--annotator", "-a", help="Whose desk this front serves (their e-mail)."),
    data_root: Optional[Path] = typer.Option(None, "--data-root", help="Data root (default $RESCUE_DATA_ROOT or ./data)."),
    host: str = typer.Option("127.0.0.1", help="Address the front listens on."),
    port: Optional[int] = typer.Option(None, help="Port of the front (default: the one the desks' registry gives "
                                                  "this person, where `rescue stack up` starts it)."),
) -> None:
    """Serve the comfort front of ONE person's desk (cached build, service worker, keys script).
    It is no security boundary and holds no secret: the desk is the person's own Label Studio;
    give them the front's address instead of the desk's (docs/OPERATIONS.md)."""
    from pipeline.labelstudio import front
    from pipeline.labelstudio.desks import DeskError, Desks
    from pipeline.paths import DataRoot

    try:
        desks = Desks(DataRoot.from_env(data_root))
        upstream = desks.url(annotator)
        if port is None:
            port = next(d.front_port for d in desks.registered_fronts() if d.email == desks.get(annotator).email)
    except DeskError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"front of {annotator}'s desk on http://{host}:{port} -> {upstream}")
    front.serve(upstream, host=host, port=port)


if __name__ == "__main__":  # pragma: no cover
    app()
