"""The command line a report records: the options the user gave, and the file it writes.

A results file must name the command that rewrites exactly it, so the line is rebuilt
from the options given on this call (a default left out stays the default on a rerun)
and always names ``--out``.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import typer

__all__ = ["recorded_command"]


def recorded_command(ctx: typer.Context, prefix: str) -> str:
    """``prefix`` followed by every option given on the command line, then ``--out``."""
    parts = [prefix]
    for param in ctx.command.params:
        name = param.name or ""
        source = ctx.get_parameter_source(name)
        # By name: typer may carry its own copy of click, with its own enum.
        if name == "out" or getattr(source, "name", None) != "COMMANDLINE":
            continue
        parts.extend(_option(param, ctx.params[name]))
    out = ctx.params.get("out")
    if out is not None:
        parts.extend(["--out", str(Path(out))])
    return " ".join(shlex.quote(p) if p != prefix else p for p in parts)


def _option(param: Any, value: Any) -> list[str]:
    if getattr(param, "is_flag", False):
        secondary = list(getattr(param, "secondary_opts", ()) or ())
        if value:
            return [param.opts[0]]
        return [secondary[0]] if secondary else []
    return [param.opts[0], str(value)]
