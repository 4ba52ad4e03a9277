"""Commands that other distributions add to the ``closedloop`` command line.

A distribution lists its typer apps in the ``closedloop.cli`` entry-point group, one entry
per command group (``bench = "closedloop_bench.cli:bench_app"``). The core never imports
those distributions; it finds them through their installed metadata, the way pytest finds
its plugins. A group that is known but not installed still answers, with the line that
installs it.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Annotated

import typer

from .._exceptions import ConfigurationError

ENTRY_POINT_GROUP = "closedloop.cli"

# Command groups that closedloop-bench provides (the world, the reference agents and the
# benchmarks live there, with FastAPI and the other heavy dependencies they need).
_BENCH_GROUPS = {
    "bench": "benchmarks: faults, overhead, refine",
    "demo": "the agent and control demonstrations",
    "world": "the world's HTTP services with injected faults",
}
_INSTALL = "pip install closedloop-bench (in a checkout of the repository: make)"


def add_plugin_commands(app: typer.Typer) -> list[str]:
    """Add every installed ``closedloop.cli`` group to ``app``; returns their names.

    A known group with no installed provider becomes a command that says how to install it.
    """
    added: list[str] = []
    broken: dict[str, str] = {}
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if entry.name in added:
            continue  # two installs of one distribution (editable and not): the first wins
        try:
            group = entry.load()
        except ImportError as exc:
            # Installed but unimportable (a dependency of it is missing): the core's own
            # commands must still work, and this group says why it cannot.
            broken[entry.name] = f"{entry.value} cannot be imported ({exc})"
            continue
        if not isinstance(group, typer.Typer):
            raise ConfigurationError(
                f"entry point {ENTRY_POINT_GROUP}:{entry.name}",
                entry.value,
                "must name a typer.Typer",
            )
        app.add_typer(group, name=entry.name)
        added.append(entry.name)
    for name in sorted(set(_BENCH_GROUPS) | set(broken)):
        if name not in added:
            what = _BENCH_GROUPS.get(name, "a plugin")
            app.command(
                name,
                help=f"Needs closedloop-bench ({what}): {_INSTALL}.",
                context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
                add_help_option=False,
            )(_missing(name, broken.get(name)))
    return added


def _missing(name: str, broken: str | None = None) -> Callable[..., None]:
    reason = (
        f"comes with closedloop-bench, which is not installed: {_INSTALL}"
        if broken is None
        else f"is installed but {broken}"
    )

    def command(
        args: Annotated[list[str] | None, typer.Argument(hidden=True)] = None,
    ) -> None:
        raise ConfigurationError("command", name, reason)

    return command
