"""``closedloop world``: serve the world's HTTP services standalone.

``closedloop_bench.world`` needs FastAPI and uvicorn (the ``server`` extra); it is imported
only when a world command runs, so the rest of the CLI works without them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from closedloop._exceptions import ConfigurationError

if TYPE_CHECKING:
    from ..world import WorldFaultProfile, WorldHandle

app = typer.Typer(help="The world: local HTTP services with injected faults.", no_args_is_help=True)
_out = Console(highlight=False, soft_wrap=True)


def _profile(name: str, faults_file: Path | None) -> WorldFaultProfile:
    """``--profile`` (a built-in name, or ``NAME@λ``: its regimes at onset rate λ, as
    ``closedloop bench faults --profiles`` reads it) or ``--faults-file``."""
    from ..world import load_profile, load_profile_file, named_profiles

    named = named_profiles()
    if faults_file is not None:
        if name != "none":
            raise typer.BadParameter(
                "give --profile or --faults-file, not both", param_hint="--profile"
            )
        try:
            return load_profile_file(faults_file)
        except ConfigurationError as exc:
            raise typer.BadParameter(exc.reason, param_hint="--faults-file") from None
    if name in named:
        return named[name]
    base, at, _rate = name.rpartition("@")
    if at and base:
        try:
            return load_profile(name)
        except ConfigurationError as exc:
            raise typer.BadParameter(f"{name!r}: {exc.reason}", param_hint="--profile") from None
    raise typer.BadParameter(
        f"unknown profile {name!r}; known: {', '.join(named)}, or NAME@λ for its regimes at "
        "onset rate λ in [0, 1] (or use --faults-file)",
        param_hint="--profile",
    )


@app.command("serve")
def serve(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")] = 8765,
    profile: Annotated[
        str,
        typer.Option(
            help="Fault profile: none, seed000, harsh, regimes, or NAME@λ (regimes@0.2: the "
            "profile with its regimes' onset rate λ)."
        ),
    ] = "none",
    seed: Annotated[int, typer.Option(min=0, help="Seed of the data (and of the faults).")] = 0,
    faults_file: Annotated[
        Path | None,
        typer.Option(help="A custom fault profile (.json or .toml) instead of --profile."),
    ] = None,
    latency_scale: Annotated[
        float, typer.Option(min=0.0, help="Multiplies injected latency and Retry-After.")
    ] = 1.0,
    fault_seed: Annotated[
        int | None, typer.Option(help="Seed of the faults, if not --seed.")
    ] = None,
) -> None:
    """Serve the world on 127.0.0.1 until Ctrl-C. Ground truth under /admin."""
    try:
        from ..world import ENDPOINTS, World, run_world
    except ImportError as exc:
        raise ConfigurationError(
            "command",
            "world serve",
            f"needs the server extra (pip install 'closedloop[server]'): {exc}",
        ) from None
    chosen = _profile(profile, faults_file)
    world = World(seed=seed, profile=chosen, latency_scale=latency_scale, fault_seed=fault_seed)

    def started(handle: WorldHandle) -> None:
        _out.print(f"closedloop world on {handle.base_url}", markup=False)
        _out.print(
            f"  profile {chosen.name}, seed {world.seed}, fault seed {world.fault_seed}, "
            f"latency scale {world.latency_scale:g}; {len(ENDPOINTS)} endpoints, "
            "/openapi.json for the API, /admin/faults and /admin/counters for ground truth; "
            "Ctrl-C to stop",
            markup=False,
        )

    try:
        run_world(world, port=port, on_started=started)
    except ConfigurationError as exc:
        if exc.argument == "port":
            raise typer.BadParameter(exc.reason, param_hint="--port") from None
        raise
