"""The task-level chain as the loop runs it: the ESO's estimate through the dwelling selector.

Three runs of step quality under the loop's default control: constant failure must
escalate one level at a time, a single bad step must not reach a defence, and
alternating steps must settle on one level instead of flapping.
"""

from __future__ import annotations

import itertools

from closedloop.agent import ControlConfig
from closedloop.agent._control import TaskControl
from closedloop.control import Protocol


def run(qualities: list[float], config: ControlConfig | None = None) -> list[Protocol]:
    """Feed the qualities as the loop does: the PID's u from the last error, then observe."""
    config = config or ControlConfig()
    pid = config.new_pid()
    ctl = TaskControl(config, 1.0)
    u = 0.0
    out = []
    for q in qualities:
        out.append(ctl.observe(u, q, None).protocol)
        u = pid(q, dt=1.0)
    return out


def changes(protocols: list[Protocol]) -> int:
    return sum(1 for a, b in itertools.pairwise(protocols) if a is not b)


def test_constant_failure_escalates_level_by_level() -> None:
    out = run([1.0] * 5 + [0.0] * 15)
    levels = [p.level for p in out]
    assert levels[-1] == Protocol.MANUAL_HANDOVER.level
    assert levels == sorted(levels)  # it never steps back while failure persists
    assert all(b - a <= 1 for a, b in itertools.pairwise(levels))
    assert {0, 1, 2, 3} <= set(levels)  # every level on the way is visited


def test_constant_failure_from_the_first_step_does_not_jump_to_handover() -> None:
    out = run([0.0] * 12)
    first = next(i for i, p in enumerate(out) if p is not Protocol.NORMAL)
    assert out[first] is Protocol.DUAL_VERIFICATION
    assert out[-1] is Protocol.MANUAL_HANDOVER


def test_without_the_dwell_constant_failure_from_the_start_jumps() -> None:
    # The control case for the test above: the dwell is what prevents the jump.
    out = run([0.0] * 12, ControlConfig(protocol_dwell=0))
    first = next(i for i, p in enumerate(out) if p is not Protocol.NORMAL)
    assert out[first] is Protocol.MANUAL_HANDOVER


def test_a_single_bad_step_stays_normal() -> None:
    out = run([1.0] * 6 + [0.0] + [1.0] * 10)
    assert set(out) == {Protocol.NORMAL}


def test_alternating_steps_settle_without_flapping() -> None:
    out = run([1.0, 0.0] * 12)
    assert changes(out) <= 3  # escalation only: up to one level, no way back and forth
    tail = out[-10:]
    assert len(set(tail)) == 1 and tail[0] is not Protocol.NORMAL


def test_a_snapshot_without_a_dwell_takes_the_configured_one() -> None:
    ctl = TaskControl(ControlConfig(), 1.0)
    for _ in range(6):
        ctl.observe(0.0, 0.0, None)
    snapshot = ctl.snapshot()
    old = dict(snapshot["selector"])
    for key in ("min_dwell", "since", "exit_thresholds"):
        old.pop(key)  # what a snapshot written before the dwell existed holds
    restored = TaskControl(ControlConfig(), 1.0)
    restored.restore({**snapshot, "selector": old})
    assert restored.selector.min_dwell == ControlConfig().protocol_dwell
    assert restored.protocol is ctl.protocol
