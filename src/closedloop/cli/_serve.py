"""``closedloop serve``: the service (sessions, runs, handovers, dashboard) on uvicorn.

FastAPI and uvicorn come with the ``server`` extra; they are imported only when the
command runs, so the rest of the CLI works without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from .._exceptions import ConfigurationError, SessionNotFoundError, StateError
from ._keys import StoreOption, store_url

_out = Console(highlight=False, soft_wrap=True)
_err = Console(stderr=True, highlight=False, soft_wrap=True)


def _import_agents(specs: list[str]) -> None:
    from ..server._workers import import_agent_hooks

    try:
        import_agent_hooks(specs)  # the workers import the same specs the same way
    except ConfigurationError as exc:
        raise typer.BadParameter(f"{exc.value!r} {exc.reason}", param_hint="--agents") from None


WorldOption = Annotated[
    str | None,
    typer.Option(
        help="Base URL of the world the reference agents call, or 'local' / "
        "'local:PROFILE' to serve one on loopback beside the service."
    ),
]
AgentsOption = Annotated[
    list[str] | None,
    typer.Option(
        help="A module to import that registers agents on default_registry(), or "
        "module:function called with the registry. Repeatable."
    ),
]
WorkersOption = Annotated[
    int,
    typer.Option(
        min=1,
        help="Worker processes behind the one port (uvicorn's supervisor); more than one "
        "needs a shared --store (sqlite:///PATH or redis://...).",
    ),
]
QueueOption = Annotated[
    str,
    typer.Option(
        help="Where runs are dispatched: a redis:// URL (a stream every worker reads; a "
        "run whose worker dies is taken over by a live one), 'none' (each run in the "
        "process that received it), or 'auto': the store's URL when it is Redis.",
    ),
]
TakeoverOption = Annotated[
    float,
    typer.Option(
        min=0.5, help="Seconds without a sign of life before a live worker takes a run over."
    ),
]


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free port).")] = 8000,
    store: StoreOption = None,
    model: Annotated[
        str | None, typer.Option(help="Model spec the agents run on (default: the built-in).")
    ] = None,
    world: WorldOption = None,
    agents: AgentsOption = None,
    rate: Annotated[float, typer.Option(min=0.001, help="Requests a second per key.")] = 20.0,
    burst: Annotated[int, typer.Option(min=1, help="Burst of requests per key.")] = 40,
    runs_dir: Annotated[
        Path | None, typer.Option(help="Where run traces go (default $CLOSEDLOOP_HOME/runs).")
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    workers: WorkersOption = 1,
    queue: QueueOption = "auto",
    takeover_after: TakeoverOption = 15.0,
) -> None:
    """Serve the API and the dashboard until Ctrl-C (create a key with `closedloop keys create`)."""
    try:
        import uvicorn  # noqa: F401

        from ..server import create_app  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(
            "command", "serve", f"needs the server extra (pip install 'closedloop[server]'): {exc}"
        ) from None
    from ..server._workers import require_shared_store, worker_environment

    require_shared_store(store_url(store), workers)
    queue_url = _queue_url(queue, store_url(store))
    _check_model(model)
    _check_store(store_url(store))
    _import_agents(list(agents or []))
    with contextlib.ExitStack() as stack:
        world_url = _world_url(world, stack)
        if workers == 1:
            _run(
                host, port, store, model, world_url, rate, burst, runs_dir, log_level,
                queue_url, takeover_after,
            )  # fmt: skip
            return
        _run_workers(
            workers,
            _listen(host, port),
            log_level,
            worker_environment(
                store=store_url(store),
                model=model,
                world_url=world_url,
                rate_per_s=rate,
                burst=burst,
                runs_dir=runs_dir,
                agents=list(agents or []),
                queue=queue_url,
                takeover_after_s=takeover_after,
            ),
        )


def _queue_url(queue: str, store: str | None) -> str | None:
    """The run queue's URL: ``auto`` is the store's when the store is Redis."""
    if queue == "none":
        return None
    if queue == "auto":
        redis = store is not None and store.startswith(("redis://", "rediss://", "unix://"))
        return store if redis else None
    if not queue.startswith(("redis://", "rediss://", "unix://")):
        raise typer.BadParameter(
            f"{queue!r} is not a redis:// URL, 'auto' or 'none'", param_hint="--queue"
        )
    return queue


def _check_model(model: str | None) -> None:
    """Refuse to start on a model spec that cannot resolve, or whose file or key is missing,
    instead of answering every run with an error that looks like the client's fault. An
    unreachable server may come back: it only makes ``/readyz`` answer 503."""
    from ..server._readiness import model_problem_at_start

    problem = model_problem_at_start(model)
    if problem.ok:
        return
    if model is not None:  # the model asked for is missing its file or key
        raise typer.BadParameter(problem.detail, param_hint="--model")
    # The default model: agents that bring their own still run; /readyz says what is missing.
    _err.print(f"warning: the default model is not ready: {problem.detail}", markup=False)


def _check_store(url: str | None) -> None:
    """Open and close the store once, so a bad URL or an unreachable server stops the start."""
    from ..server import open_store

    async def probe() -> None:
        store = open_store(url)
        try:
            await store.get("closedloop:startup-probe")
        except SessionNotFoundError:
            pass  # the store answered: that is all the probe asks
        finally:
            await store.close()

    try:
        asyncio.run(probe())
    except (ConfigurationError, StateError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--store") from None


def _world_url(world: str | None, stack: contextlib.ExitStack) -> str | None:
    if world is None or not (world == "local" or world.startswith("local:")):
        return world
    provider = _local_world()
    profile = world.partition(":")[2] or "none"
    if profile not in provider.named_profiles():
        raise typer.BadParameter(
            f"unknown profile {profile!r}; known: {', '.join(provider.named_profiles())}",
            param_hint="--world",
        )
    handle = stack.enter_context(provider.serve_world(profile))
    _out.print(f"world ({profile}) on {handle.base_url}", markup=False)
    url: str = handle.base_url
    return url


WORLD_ENTRY_POINT_GROUP = "closedloop.worlds"


def _local_world() -> Any:
    """The module an installed distribution declares as the ``local`` world.

    It must offer ``named_profiles()`` and ``serve_world(profile)`` (closedloop-bench
    declares its world); the library finds it through the installed metadata and never
    imports a distribution by name.
    """
    for entry in entry_points(group=WORLD_ENTRY_POINT_GROUP, name="local"):
        try:
            return entry.load()
        except ImportError as exc:
            raise typer.BadParameter(
                f"the local world ({entry.value}) cannot be imported: {exc}",
                param_hint="--world",
            ) from None
    raise typer.BadParameter(
        "a local world comes with closedloop-bench (pip install closedloop-bench)",
        param_hint="--world",
    )


def _run(
    host: str,
    port: int,
    store: str | None,
    model: str | None,
    world: str | None,
    rate: float,
    burst: int,
    runs_dir: Path | None,
    log_level: str,
    queue: str | None = None,
    takeover_after_s: float = 15.0,
) -> None:
    import uvicorn

    from ..server import RateLimit, ServerSettings, create_app

    settings = ServerSettings(
        store=store_url(store),
        model=model,
        world_url=world,
        rate_limit=RateLimit(rate_per_s=rate, burst=burst),
        runs_dir=runs_dir,
        queue=queue,
        takeover_after_s=takeover_after_s,
        heartbeat_s=takeover_after_s / 5,
    )
    app = create_app(settings)
    sock = _listen(host, port)
    config = uvicorn.Config(app, log_level=log_level, proxy_headers=False)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn shut down gracefully, then re-raised Ctrl-C: that is a normal stop
    finally:
        sock.close()


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise typer.BadParameter(
            f"cannot listen on {host}:{port}: {exc}", param_hint="--port"
        ) from None
    sock.listen(2048)
    # Bound before the message, so a port of 0 is reported as the port really used.
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    _out.print(f"closedloop service on http://{shown}:{bound}/ (dashboard at /)", markup=False)
    return sock


def _run_workers(workers: int, sock: socket.socket, log_level: str, env: dict[str, str]) -> None:
    """uvicorn's supervisor: N spawned workers share the bound socket and build their app
    from the environment; a worker that dies is replaced."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    os.environ.update(env)  # the spawned interpreters inherit it
    config = uvicorn.Config(
        "closedloop.server._workers:app_from_environment",
        factory=True,
        workers=workers,
        log_level=log_level,
        proxy_headers=False,
    )
    _out.print(f"{workers} workers", markup=False)
    try:
        Multiprocess(config, sockets=[sock]).run()
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
