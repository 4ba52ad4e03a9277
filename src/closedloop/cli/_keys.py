"""``closedloop keys``: create, list and revoke the service's API keys.

Keys live hashed in the state store the service uses (``--store``, default the SQLite
file under ``$CLOSEDLOOP_HOME``). ``create`` prints the key once; it cannot be shown
again, only revoked and replaced.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from ..server import ApiKeys

app = typer.Typer(help="API keys of the service (stored hashed).", no_args_is_help=True)
_out = Console(highlight=False, soft_wrap=True)
_T = TypeVar("_T")

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="State store URL: sqlite:///path.db or memory:// (default: $CLOSEDLOOP_STORE, "
        "else $CLOSEDLOOP_HOME/state.db).",
    ),
]


def store_url(value: str | None) -> str | None:
    """``--store``, else ``$CLOSEDLOOP_STORE``, else None (the SQLite default)."""
    return value or os.environ.get("CLOSEDLOOP_STORE") or None


def _with_keys(url: str | None, action: Callable[[ApiKeys], Awaitable[_T]]) -> _T:
    from ..server import ApiKeys, open_store

    async def run() -> _T:
        store = open_store(store_url(url))
        try:
            return await action(ApiKeys(store))
        finally:
            await store.close()

    return asyncio.run(run())


@app.command("create")
def create(
    name: Annotated[
        str | None, typer.Argument(help="Who or what uses the key (default: 'default').")
    ] = None,
    name_option: Annotated[
        str | None, typer.Option("--name", help="The same as the NAME argument.")
    ] = None,
    store: StoreOption = None,
) -> None:
    """Create a key and print it once (keep it: it cannot be shown again)."""
    if name is not None and name_option is not None and name != name_option:
        raise typer.BadParameter(
            f"the NAME argument {name!r} and --name {name_option!r} differ; give one",
            param_hint="--name",
        )
    chosen = name or name_option or "default"
    created = _with_keys(store, lambda keys: keys.create(chosen))
    _out.print(f"key id: {created.info.key_id}  name: {created.info.name}", markup=False)
    _out.print(created.token, markup=False)


@app.command("list")
def list_keys(
    store: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
) -> None:
    """List keys (ids, names, when created and revoked; never the keys)."""
    infos = _with_keys(store, lambda keys: keys.list())
    if as_json:
        _out.print(json.dumps([i.model_dump(mode="json") for i in infos]), markup=False)
        return
    table = Table("key id", "name", "created", "status")
    for info in infos:
        status = "active" if info.active else f"revoked {info.revoked_at:.0f}"
        table.add_row(info.key_id, info.name, f"{info.created_at:.0f}", status)
    _out.print(table)


@app.command("revoke")
def revoke(
    key_id: Annotated[str, typer.Argument(help="The key id (as listed).")],
    store: StoreOption = None,
) -> None:
    """Revoke a key: every later request with it is refused."""
    from .._exceptions import SessionNotFoundError

    try:
        info = _with_keys(store, lambda keys: keys.revoke(key_id))
    except SessionNotFoundError:
        raise typer.BadParameter(f"no key with id {key_id!r}", param_hint="KEY_ID") from None
    _out.print(f"revoked {info.key_id} ({info.name})", markup=False)
