"""``closedloop demo``: the main job, on the embedded defaults."""

from __future__ import annotations

import typer

app = typer.Typer(help="Demonstrations of the control loop.", no_args_is_help=True)
