"""The plain-language view: control terms translated, each with its measured figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from closedloop.agent import ControlConfig, PlainView, Runtime, StepRecord, plain_view, render_plain
from closedloop.agent._plain import risk_label

from .conftest import add, call, final, make_agent, scripted


def record(step: int, **over: Any) -> StepRecord:
    base: dict[str, Any] = {
        "run_id": "r",
        "task_id": "t",
        "step": step,
        "t_s": float(step),
        "phase": "collecting",
        "mode": "react",
        "step_type": "search",
        "error": 0.0,
        "control": 0.2,
        "pid_components": (0.1, 0.0, 0.0),
        "quality": 1.0,
        "f_est": 0.1,
        "protocol": "normal",
    }
    base.update(over)
    return StepRecord(**base)


@pytest.mark.parametrize(
    ("f", "label"),
    [(0.0, "low"), (0.39, "low"), (0.4, "elevated"), (0.7, "high"), (0.9, "critical")],
)
def test_the_risk_label_follows_the_protocol_levels(f: float, label: str) -> None:
    assert risk_label(f) == label


def test_every_term_gets_its_figure() -> None:
    steps = [
        record(0, error=0.9, pid_components=(0.7, 0.05, 0.2), control=0.9, f_est=0.1),
        record(
            1,
            error=0.1,
            pid_components=(0.1, 0.06, 0.0),
            control=0.3,
            f_est=0.45,
            protocol="dual_verification",
        ),
        record(
            2, error=0.8, step_type="book", control=0.6, f_est=0.65, protocol="dimension_reduction"
        ),
        record(
            3, error=0.0, step_type="book", pid_components=(0.0, 0.0, 0.0), control=0.0, f_est=0.3
        ),
    ]
    view = plain_view(steps)
    assert view.risk == 65 and view.risk_label == "high"
    risk, memory, safety, care = view.lines
    assert "65/100" in risk.figure and "30/100" in risk.figure
    # the search failure was followed by a success while the integral worked; the book
    # failure's next try succeeded with no integral term: not credited to it
    assert memory.figure.startswith("1 of 2 failed steps") and "0.06" in memory.figure
    assert "double-checked" in safety.figure and "narrowed" in safety.figure
    assert "1 step(s)" in safety.figure
    assert care.figure.startswith("average 45 %")
    text = render_plain(view)
    assert "Risk: 65/100 (high)" in text and text.count("\n- ") == 4


def test_a_calm_run_says_no_action_was_needed() -> None:
    view = plain_view([record(0), record(1)])
    assert view.risk_label == "low"
    assert "none was needed" in view.lines[2].plain
    assert view.lines[2].figure == "all 2 steps ran normally"
    assert view.as_dict()["lines"][0]["term"].startswith("f_est")


def test_no_steps_is_said_plainly() -> None:
    view = plain_view([])
    assert view == PlainView(0, "low", view.lines) and "no step" in view.lines[0].plain


async def test_a_real_run_translates() -> None:
    agent, _ = make_agent(
        scripted(call("add", a=1, b=2), final("3")), [add], control=ControlConfig(prior_f_est=0.5)
    )
    result = await agent.run("add")
    view = plain_view(result)
    assert view.risk == 50 and view.risk_label == "elevated"
    assert "double-checked" in view.lines[2].figure


def test_the_dashboard_script_says_the_same_as_the_report() -> None:
    """server/static/plain.js mirrors this module; run it on the same steps in node."""
    import json
    import shutil
    import subprocess

    import closedloop.server

    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing: run scripts/install_system_deps.sh")
    script = Path(closedloop.server.__file__).parent / "static" / "plain.js"
    steps = [
        record(0, error=0.9, pid_components=(0.7, 0.05, 0.2), control=0.9, f_est=0.1),
        record(
            1,
            error=0.1,
            pid_components=(0.1, 0.06, 0.0),
            control=0.3,
            f_est=0.45,
            protocol="dual_verification",
        ),
        record(2, error=0.7, step_type="book", control=0.5, f_est=0.85, protocol="manual_handover"),
    ]
    points = [
        {
            "e": s.error,
            "u": s.control,
            "f_est": s.f_est,
            "protocol": s.protocol,
            "step_type": s.step_type,
            "pid": list(s.pid_components),
        }
        for s in steps
    ]
    code = (
        f"const p = require({json.dumps(str(script))});"
        f"console.log(JSON.stringify(p.plainView({json.dumps(points)})));"
    )
    out = json.loads(
        subprocess.run(
            [node, "-e", code], capture_output=True, text=True, check=True, timeout=30
        ).stdout
    )
    view = plain_view(steps)
    assert (out["risk"], out["label"]) == (view.risk, view.risk_label)
    assert [figure for _, figure, _term in out["lines"]] == [line.figure for line in view.lines]


async def test_the_run_report_prints_the_plain_view(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from closedloop.agent import JsonlTrace
    from closedloop.cli import main

    monkeypatch.setenv("COLUMNS", "220")
    trace = JsonlTrace(tmp_path / "run" / "trace.jsonl")
    agent, _ = make_agent(
        scripted(call("add", a=1, b=2), final("3")),
        [add],
        control=ControlConfig(prior_f_est=0.5),
        runtime=Runtime(trace=trace),
    )
    result = await agent.run("add")
    assert main(["trace", "show", str(tmp_path / "run")]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich may wrap long lines
    assert "In plain words — risk 50/100 (elevated):" in out
    assert "double-checked the proposal" in out
    assert f"over {len(result.steps)} steps" in out
