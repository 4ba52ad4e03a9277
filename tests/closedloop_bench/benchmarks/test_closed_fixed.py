"""The controller-off strategy: the same loop with every actuator frozen at one setting."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from closedloop_bench.benchmarks import get_strategy
from closedloop_bench.benchmarks._closed import FIXED_U, READ_RETRY, control_config, fixed_config


@given(u=st.floats(min_value=0.0, max_value=1.0))
def test_fixed_settings_ignore_the_control_signal(u: float) -> None:
    live = control_config(adrc=False, attempts=3)
    fixed = fixed_config(live)
    # ``u`` itself is still recorded; every setting derived from it is frozen
    got = dataclasses.replace(fixed.schedule(u), u=0.0)
    assert got == dataclasses.replace(live.schedule(FIXED_U), u=0.0)


def test_the_pid_schedule_does_move_with_the_signal() -> None:
    live = control_config(adrc=False, attempts=3)
    assert live.schedule(0.0) != live.schedule(1.0)  # else "fixed" would compare nothing


def test_the_two_model_every_step_strategies_differ_only_in_the_controller() -> None:
    pid = get_strategy("closedloop_model_pid")
    off = get_strategy("closedloop_model_fixed")
    assert pid.name == "closedloop_model_pid" and off.name == "closedloop_model_fixed"
    assert (pid.planner, pid.adrc, pid.fixed) == ("react", False, False)  # type: ignore[attr-defined]
    assert (off.planner, off.adrc, off.fixed) == ("react", False, True)  # type: ignore[attr-defined]
    assert READ_RETRY.partial and READ_RETRY.enabled
