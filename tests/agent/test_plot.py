"""The control plot: the series it draws, and a real PNG that shows them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.image import imread

from closedloop import ConfigurationError
from closedloop.agent._plot import control_series, plot_run
from closedloop.agent._records import HaltReason, StepRecord

PROTOCOLS = ["normal", "normal", "dual_verification", "dimension_reduction", "manual_handover"]


def record(step: int, **overrides: Any) -> StepRecord:
    fields: dict[str, Any] = {
        "run_id": "run-p",
        "task_id": "task-p",
        "step": step,
        "t_s": float(step),
        "phase": "search",
        "mode": "react",
        "step_type": "search",
        "error": 0.2 * step,
        "control": -0.5 + 0.4 * step,
        "quality": 1.0 - 0.2 * step,
        "f_est": 0.2 * step,
        "protocol": PROTOCOLS[step],
    }
    fields.update(overrides)
    return StepRecord(**fields)


def run(halt: bool = True) -> list[StepRecord]:
    records = [record(i) for i in range(5)]
    if halt:
        records[-1] = record(4, halt=HaltReason.HANDOVER)
    return records


def test_series_follow_the_records() -> None:
    series = control_series(run())
    assert series.steps == (0, 1, 2, 3, 4)
    assert series.error == pytest.approx((0.0, 0.2, 0.4, 0.6, 0.8))
    assert series.control == pytest.approx((-0.5, -0.1, 0.3, 0.7, 1.1))
    assert series.f_est == pytest.approx((0.0, 0.2, 0.4, 0.6, 0.8))
    assert series.levels == (0, 0, 1, 2, 3)
    assert series.level_names == (
        "normal",
        "dual_verification",
        "dimension_reduction",
        "manual_handover",
    )
    assert series.halt is HaltReason.HANDOVER


def test_an_unknown_protocol_gets_its_own_level_above_the_known_ones() -> None:
    series = control_series([record(0), record(1, protocol="quarantine"), record(2)])
    assert series.level_names[-1] == "quarantine"
    assert series.levels == (0, 4, 1)
    assert series.halt is None


def _pixels(path: Path) -> np.ndarray:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return imread(path)


def test_plot_writes_a_png_that_shows_the_signals(tmp_path: Path) -> None:
    out = plot_run(run(), tmp_path / "sub" / "control.png")
    assert out == tmp_path / "sub" / "control.png"
    pixels = _pixels(out)
    assert pixels.shape[:2] == (935, 1100)  # 10 x 8.5 inches at 110 dpi
    assert pixels[..., :3].std() > 0.05  # not a blank canvas
    assert [p.name for p in out.parent.iterdir()] == ["control.png"]  # no temp file left

    # Different signals draw a different picture (the data reaches the pixels).
    flat = [record(i, error=0.5, control=0.0, f_est=0.1, protocol="normal") for i in range(5)]
    other = plot_run(flat, tmp_path / "flat.png")
    assert not np.array_equal(_pixels(other), pixels)


def test_plot_replaces_an_existing_file_and_takes_other_formats(tmp_path: Path) -> None:
    out = tmp_path / "control.png"
    out.write_bytes(b"old")
    plot_run(run(halt=False), out, title="custom title")
    assert out.read_bytes()[:4] == b"\x89PNG"
    svg = plot_run(run(), tmp_path / "control.svg")
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "manual_handover" in text


def test_plot_refuses_nothing_to_draw_and_unknown_formats(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no steps to plot"):
        plot_run([], tmp_path / "x.png")
    with pytest.raises(ConfigurationError, match=r"out=.*x\.gif"):
        plot_run(run(), tmp_path / "x.gif")
    assert list(tmp_path.iterdir()) == []
