"""``closedloop models``: fetch, verify and list the built-in local models."""

from __future__ import annotations

import typer

app = typer.Typer(help="Built-in local models: pull and list.", no_args_is_help=True)
