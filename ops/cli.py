"""The ``rescue`` console script: the library's commands (:mod:`pipeline.cli`) plus the
operational ones that start servers and flows (``rescue stack``, ``rescue demo``)."""
from ops import demo, stack
from pipeline.cli import app

app.add_typer(stack.cli, name="stack")
app.command("demo")(demo.demo_command)

if __name__ == "__main__":  # pragma: no cover
    app()
