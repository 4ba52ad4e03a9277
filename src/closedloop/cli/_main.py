"""Root of the command line: one typer app, one sub-app per concern.

Every ``ClosedLoopError`` that reaches here is printed as one readable line and
exits with status 2; a traceback is for bugs, never for bad input.
"""

from __future__ import annotations

import typer
from rich.console import Console

from .._exceptions import ClosedLoopError
from ._keys import app as keys_app
from ._models import app as models_app
from ._plugins import add_plugin_commands
from ._serve import serve as serve_command
from ._trace import plot as plot_command
from ._trace import trace_app

app = typer.Typer(
    name="closedloop",
    help="Run LLM agents as closed-loop control systems.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(keys_app, name="keys")
app.add_typer(models_app, name="models")
app.add_typer(trace_app, name="trace")
app.command("plot")(plot_command)
app.command("serve")(serve_command)
# bench, demo and world come with closedloop-bench, found through its entry points.
add_plugin_commands(app)

_err = Console(stderr=True, soft_wrap=True)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status instead of raising SystemExit.

    Usage errors are click's (usage line, exit 2); our own errors are one line, exit 2.
    """
    try:
        app(args=argv, standalone_mode=True, prog_name="closedloop")
    except ClosedLoopError as exc:
        _err.print(f"[bold red]error:[/] {type(exc).__name__}: {exc}", highlight=False)
        return 2
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return int(exc.code or 0)
        _err.print(str(exc.code), highlight=False)
        return 1
    return 0
