"""Closed-loop step-response scenarios: the reference cases for PID and ADRC.

Each scenario pairs a controller with a plant from ``_plants`` and simulates a unit step
with an explicit sample time, so the figures are exact and repeatable. ``closedloop demo
control`` prints and plots them; the tests pin their bands.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ._eso import LADRC
from ._pid import PID
from ._plants import FirstOrderPlant, FOPDTPlant, SecondOrderPlant, StepMetrics, step_metrics

__all__ = ["Scenario", "ScenarioResult", "reference_scenarios", "run_scenario"]


class _Plant(Protocol):
    """Structural type of the plants: one ``step(u, disturbance)`` per sample."""

    def step(self, u: float, disturbance: float = 0.0) -> float: ...


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named closed loop: how to build the controller and the plant, and what to inject."""

    name: str
    controller: str
    plant: str
    make: Callable[[], tuple[Callable[[float, float], float], _Plant]]
    h: float
    t_end: float
    setpoint: float = 1.0
    disturbance_at: float | None = None
    disturbance: float = 0.0


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    """The simulated trajectory and its step metrics."""

    scenario: Scenario
    t: tuple[float, ...]
    y: tuple[float, ...]
    u: tuple[float, ...]
    metrics: StepMetrics
    disturbance_dip: float | None
    recovery_time: float | None
    recovered: bool | None


def run_scenario(scenario: Scenario) -> ScenarioResult:
    """Simulate ``scenario``: controller sees y(k), plant receives u(k) (+ disturbance)."""
    control, plant = scenario.make()
    n = round(scenario.t_end / scenario.h)
    t_list: list[float] = []
    y_list: list[float] = []
    u_list: list[float] = []
    y = 0.0
    for k in range(n + 1):
        t = k * scenario.h
        u = control(scenario.setpoint, y)
        d = (
            scenario.disturbance
            if scenario.disturbance_at is not None and t >= scenario.disturbance_at
            else 0.0
        )
        t_list.append(t)
        y_list.append(y)
        u_list.append(u)
        y = plant.step(u, d)
    before = [
        (t, yv)
        for t, yv in zip(t_list, y_list, strict=True)
        if scenario.disturbance_at is None or t < scenario.disturbance_at
    ]
    metrics = step_metrics([p[0] for p in before], [p[1] for p in before], scenario.setpoint)
    dip: float | None = None
    recovery: float | None = None
    recovered: bool | None = None
    if scenario.disturbance_at is not None:
        after = [
            (t, yv) for t, yv in zip(t_list, y_list, strict=True) if t >= scenario.disturbance_at
        ]
        dip = max(abs(yv - scenario.setpoint) for _, yv in after)
        last_out = scenario.disturbance_at
        for t, yv in after:
            if abs(yv - scenario.setpoint) >= 1e-3:
                last_out = t
        recovery = last_out - scenario.disturbance_at
        recovered = last_out < after[-1][0]
    return ScenarioResult(
        scenario=scenario,
        t=tuple(t_list),
        y=tuple(y_list),
        u=tuple(u_list),
        metrics=metrics,
        disturbance_dip=dip,
        recovery_time=recovery,
        recovered=recovered,
    )


def _pid_loop(pid: PID, h: float) -> Callable[[float, float], float]:
    def control(r: float, y: float) -> float:
        pid.setpoint = r
        return pid(y, dt=h)

    return control


def _ladrc_loop(ladrc: LADRC) -> Callable[[float, float], float]:
    def control(r: float, y: float) -> float:
        return ladrc(r, y)

    return control


def reference_scenarios() -> list[Scenario]:
    """The reference scenarios: PID anti-windup on FOPDT, LADRC on first and second order."""
    out: list[Scenario] = []
    fopdt_h = 0.01
    for mode in ("none", "clamp", "conditional", "back_calculation"):

        def make_pid(
            mode: str = mode,
        ) -> tuple[Callable[[float, float], float], _Plant]:
            pid = PID(2.5, 2.5, 0.0, setpoint=1.0, output_limits=(0.0, 1.2), anti_windup=mode)
            return _pid_loop(pid, fopdt_h), FOPDTPlant(1.0, 1.0, 0.2, h=fopdt_h)

        out.append(
            Scenario(
                name=f"pid-{mode.replace('back_calculation', 'backcalc')}",
                controller=f"PID kp=ki=2.5, anti_windup={mode}",
                plant="FOPDT k=1 τ=1 θ=0.2, u∈[0,1.2]",
                make=make_pid,
                h=fopdt_h,
                t_end=10.0,
            )
        )
    h = 0.001

    def make_ladrc1() -> tuple[Callable[[float, float], float], _Plant]:
        return _ladrc_loop(LADRC(1, 1.0, 4.0, 40.0, h)), FirstOrderPlant(1.0, 1.0, h=h)

    def make_ladrc2() -> tuple[Callable[[float, float], float], _Plant]:
        return _ladrc_loop(LADRC(2, 1.0, 3.0, 30.0, h)), SecondOrderPlant(1.0, 1.0, h=h)

    def make_pid1() -> tuple[Callable[[float, float], float], _Plant]:
        # A PID tuned for the same closed-loop bandwidth (ωc = 4), for comparison.
        pid = PID(3.0, 4.0, 0.0, setpoint=1.0, derivative_on="measurement")
        return _pid_loop(pid, h), FirstOrderPlant(1.0, 1.0, h=h)

    # LADRC and a PID of the same bandwidth face the same plant and load step.
    load_step = functools.partial(
        Scenario,
        plant="first order K=T=1, d=−0.5 at 3 s",
        h=h,
        t_end=5.0,
        disturbance_at=3.0,
        disturbance=-0.5,
    )
    out.append(
        load_step(name="ladrc-1st", controller="LADRC order 1, b0=1, ωc=4, ωo=40", make=make_ladrc1)
    )
    out.append(
        load_step(name="pid-1st", controller="PID kp=3 ki=4 (same bandwidth)", make=make_pid1)
    )
    out.append(
        Scenario(
            name="ladrc-2nd",
            controller="LADRC order 2, b0=1, ωc=3, ωo=30",
            plant="second order K=T=1",
            make=make_ladrc2,
            h=h,
            t_end=5.0,
        )
    )
    return out
