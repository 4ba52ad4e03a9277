"""``closedloop trace show RUN`` and ``closedloop plot RUN``: read a run back after the fact.

``RUN`` is a run id (under ``$CLOSEDLOOP_HOME/runs``), a run directory or a trace file.
Missing or unreadable files raise ``ConfigurationError``, which the root prints as one
line (exit 2); a truncated last line only warns.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .._exceptions import ConfigurationError
from ..agent._plain import plain_view
from ..agent._plot import plot_run
from ..agent._records import RunResult, StepRecord
from ..agent._trace_files import RunPaths, read_trace, resolve_run

__all__ = ["plot", "show", "trace_app"]

trace_app = typer.Typer(help="Read run traces.", no_args_is_help=True)


def _out() -> Console:
    # Built per command so the terminal width (COLUMNS) is read when the command runs.
    return Console()


def _err() -> Console:
    return Console(stderr=True)


# Short enough for a narrow terminal; the summary and the plot use the full names.
_PROTOCOL_LABELS = {
    "normal": "normal",
    "dual_verification": "dual-verify",
    "dimension_reduction": "reduced",
    "manual_handover": "handover",
}

_RunArgument = Annotated[
    str, typer.Argument(help="A run id, a run directory, or a trace.jsonl file.", metavar="RUN")
]


def _load(run: str) -> tuple[RunPaths, list[StepRecord], RunResult | None]:
    paths = resolve_run(run)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records, result = read_trace(paths)
    for warning in caught:
        _err().print(Text(f"warning: {warning.message}", style="yellow"), soft_wrap=True)
    return paths, records, result


def _short(value: Any, width: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _action_cell(record: StepRecord) -> Text:
    cell = Text()
    if record.action is not None:
        cell.append(record.action.tool, style="bold")
        cell.append(" " + _short(record.action.arguments, 48), style="dim")
    elif record.final_answer is not None:
        cell.append("final: ", style="bold green")
        cell.append(_short(record.final_answer, 48))
    else:
        cell.append("—", style="dim")
    for error in record.validation_errors:
        cell.append(f"\ninvalid: {_short(error, 60)}", style="red")
    notes = list(record.notes)
    if record.repeat_count:
        notes.insert(0, f"repeat ×{record.repeat_count}")
    if notes:
        cell.append("\n" + _short("; ".join(notes), 80), style="italic")
    if record.halt is not None:
        cell.append(f"\nhalt: {record.halt.value}", style="bold")
    return cell


def _observation_cell(record: StepRecord) -> Text:
    observation = record.observation
    if not observation:
        return Text("—", style="dim")
    status = str(observation.get("status", "?"))
    confidence = observation.get("confidence")
    style = "green" if status == "ok" else "yellow" if status in ("partial", "stale") else "red"
    cell = Text(status, style=style)
    if isinstance(confidence, int | float):
        cell.append(f" {confidence:.2f}")
    return cell


def _summary(paths: RunPaths, records: list[StepRecord], result: RunResult | None) -> Text:
    if result is None:
        run = records[-1].run_id if records else paths.run_dir.name
        return Text(
            f"run {run}: {len(records)} steps, no result yet "
            "(still running, or it stopped before writing one)",
            style="yellow",
        )
    usage = result.usage
    line = Text(f"run {result.run_id} (task {result.task_id}): {len(records)} steps, halt ")
    line.append(result.halt_reason.value, style="bold")
    line.append(", ")
    line.append(
        "success" if result.success else "not a success", style="green" if result.success else "red"
    )
    line.append(
        f", {usage.model_calls} model calls, {usage.prompt_tokens} in / "
        f"{usage.completion_tokens} out tokens"
    )
    if usage.cost:
        line.append(f", cost {usage.cost:.4g}")
    if result.handover_id:
        line.append(f", handover {result.handover_id}")
    if result.answer is not None:
        line.append(f", answer: {_short(result.answer, 80)}")
    if result.message:
        line.append(f" — {_short(result.message, 120)}")
    return line


@trace_app.command("show")
def show(
    run: _RunArgument,
    last: Annotated[
        int | None, typer.Option("--last", min=1, help="Show only the last N steps.")
    ] = None,
) -> None:
    """Print a run's timeline: each step's action, observation and control signals."""
    paths, records, result = _load(run)
    shown = records[-last:] if last else records
    table = Table(
        title=f"trace {paths.trace}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
        pad_edge=False,
    )
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("t (s)", justify="right", no_wrap=True)
    table.add_column("phase", max_width=14, overflow="ellipsis", no_wrap=True)
    table.add_column("action · notes", min_width=12, ratio=1, overflow="fold")
    table.add_column("observed", no_wrap=True)
    for name in ("e", "u", "f_est"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("protocol", no_wrap=True)
    for record in shown:
        table.add_row(
            Text(str(record.step)),
            Text(f"{record.t_s:.2f}"),
            Text(record.phase),
            _action_cell(record),
            _observation_cell(record),
            Text(f"{record.error:.2f}"),
            Text(f"{record.control:.2f}"),
            Text(f"{record.f_est:.2f}"),
            Text(
                _PROTOCOL_LABELS.get(record.protocol, record.protocol),
                style="bold red" if record.protocol != "normal" else "",
            ),
        )
    if records:
        _out().print(table)
    else:
        _out().print(Text("no steps recorded", style="dim"))
    if records:  # the control terms in plain words, each with its figure
        view = plain_view(records)
        _out().print(Text(f"In plain words — risk {view.risk}/100 ({view.risk_label}):"))
        for line in view.lines:
            _out().print(Text(f"  {line.plain}: {line.figure}"), soft_wrap=True)
    _out().print(_summary(paths, records, result), soft_wrap=True)


def plot(
    run: _RunArgument,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Where to write the PNG (default: <run dir>/control.png)."),
    ] = None,
) -> None:
    """Write a PNG of a run's e(t), u(t), f_est(t) and protocol level over the steps."""
    paths, records, result = _load(run)
    if not records and result is not None:
        records = list(result.steps)
    if not records:
        raise ConfigurationError("RUN", run, f"no steps to plot in {paths.run_dir}")
    written = plot_run(records, out if out is not None else paths.run_dir / "control.png")
    _out().print(Text(str(written)), soft_wrap=True)
