"""A run's control signals as a picture: e(t), u(t), f_est(t) and the protocol level.

Reads step records only (from a trace or a result), so any run can be plotted after the
fact. Matplotlib's object API is used without pyplot: no global figure state, no GUI
backend, safe from threads and servers.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .._exceptions import ConfigurationError
from .._extras import require_extra
from ..control import Protocol
from ..control._protocol import DEFAULT_PROTOCOL_THRESHOLDS
from ._records import HaltReason, StepRecord

__all__ = ["ControlSeries", "control_series", "plot_run"]

_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
_KNOWN_LEVELS = tuple(p.value for p in Protocol)


@dataclass(frozen=True, slots=True)
class ControlSeries:
    """The plotted series, one entry per step record, in record order.

    ``levels`` index ``level_names``: the four protocol levels in order of severity,
    then any protocol name this version does not know, in order of appearance.
    """

    steps: tuple[int, ...]
    error: tuple[float, ...]
    control: tuple[float, ...]
    f_est: tuple[float, ...]
    quality: tuple[float, ...]
    levels: tuple[int, ...]
    level_names: tuple[str, ...]
    halt: HaltReason | None


def control_series(records: Sequence[StepRecord]) -> ControlSeries:
    """Extract the series :func:`plot_run` draws."""
    names = list(_KNOWN_LEVELS)
    levels: list[int] = []
    for record in records:
        if record.protocol not in names:
            names.append(record.protocol)
        levels.append(names.index(record.protocol))
    halts = [r.halt for r in records if r.halt is not None]
    return ControlSeries(
        steps=tuple(r.step for r in records),
        error=tuple(r.error for r in records),
        control=tuple(r.control for r in records),
        f_est=tuple(r.f_est for r in records),
        quality=tuple(r.quality for r in records),
        levels=tuple(levels),
        level_names=tuple(names),
        halt=halts[-1] if halts else None,
    )


def _save_atomically(figure: object, out: Path, fmt: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=out.suffix)
    os.close(fd)
    try:
        figure.savefig(tmp, format=fmt, dpi=110)  # type: ignore[attr-defined]
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def plot_run(
    records: Sequence[StepRecord],
    out: str | os.PathLike[str],
    *,
    title: str | None = None,
) -> Path:
    """Draw e(t), u(t), f_est(t) and the protocol level over the step index into ``out``.

    ``out`` ends in ``.png`` (or ``.svg``/``.pdf``); it is replaced atomically. Returns
    its path. Raises ``ConfigurationError`` when there are no records to plot.
    """
    path = Path(out)
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ConfigurationError("out", str(out), f"must end in one of {sorted(_FORMATS)}")
    if not records:
        raise ConfigurationError("records", [], "no steps to plot")
    series = control_series(records)
    first = records[0]
    if title is None:
        title = f"run {first.run_id} (task {first.task_id}): {len(records)} steps"
        if series.halt is not None:
            title += f", halt: {series.halt.value}"

    require_extra("matplotlib", "plots", "plotting a run")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(10, 8.5), layout="constrained")
    ax_e, ax_u, ax_f, ax_p = figure.subplots(4, 1, sharex=True)
    x = series.steps
    ax_e.plot(x, series.error, marker="o", markersize=3, color="tab:red", label="e(t)")
    ax_e.plot(x, series.quality, linestyle=":", color="grey", linewidth=1, label="quality q")
    ax_e.set_ylim(-0.05, 1.05)
    ax_e.set_ylabel("error e")
    ax_e.legend(loc="upper left", fontsize=8)

    ax_u.plot(x, series.control, marker="o", markersize=3, color="tab:blue")
    ax_u.set_ylabel("control u")

    ax_f.plot(x, series.f_est, marker="o", markersize=3, color="tab:purple")
    for threshold, name in zip(DEFAULT_PROTOCOL_THRESHOLDS, _KNOWN_LEVELS[1:], strict=True):
        ax_f.axhline(threshold, color="grey", linestyle="--", linewidth=0.7)
        ax_f.annotate(
            name,
            (1.0, threshold),
            xycoords=("axes fraction", "data"),
            ha="right",
            va="bottom",
            fontsize=7,
            color="grey",
        )
    ax_f.set_ylim(-0.05, 1.05)
    ax_f.set_ylabel("f_est")

    ax_p.step(x, series.levels, where="post", color="tab:orange", linewidth=1.8)
    # Markers show the level in force at each step, including the last one.
    ax_p.plot(x, series.levels, "o", color="tab:orange", markersize=4)
    ax_p.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_p.set_yticks(range(len(series.level_names)), series.level_names, fontsize=8)
    ax_p.set_ylim(-0.5, len(series.level_names) - 0.5)
    ax_p.set_ylabel("protocol")
    ax_p.set_xlabel("step")

    for ax in (ax_e, ax_u, ax_f, ax_p):
        ax.grid(alpha=0.3)
        if series.halt is not None:
            ax.axvline(x[-1], color="black", linestyle=":", linewidth=0.8)
    figure.suptitle(title, fontsize=11)
    _save_atomically(figure, path, fmt)
    return path
