"""The sandbox on real subprocesses: every bad input ends as a failed evaluation with a reason."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from closedloop import ConfigurationError
from closedloop.harness import (
    EvaluationStatus,
    ModelGenerator,
    Refiner,
    Sandbox,
    SandboxEvaluator,
    SandboxLimits,
    self_refine,
)
from closedloop.models import FunctionModel

from .conftest import ADD_TASK, fenced

GOOD = "def add(a, b):\n    return a + b\n"

pytestmark = pytest.mark.integration


async def test_good_code_passes_every_check(sandbox: Sandbox) -> None:
    ev = await sandbox.run(ADD_TASK, GOOD)
    assert ev.status is EvaluationStatus.PASSED
    assert (ev.passed, ev.total, ev.pass_rate) == (4, 4, 1.0)
    assert ev.reason == "all 4 checks passed"


async def test_wrong_code_reports_call_got_expected(sandbox: Sandbox) -> None:
    ev = await sandbox.run(ADD_TASK, "def add(a, b):\n    return a - b\n")
    assert ev.status is EvaluationStatus.FAILED
    t1 = ev.checks[0]
    assert (t1.passed, t1.call, t1.got, t1.expected) == (False, "add(1, 2)", "-1", "3")
    assert t1.describe() == "T1: add(1, 2) -> got -1, expected 3"
    t3 = ev.checks[2]
    assert t3.error is not None and t3.error.startswith("raised TypeError")
    assert "line 2: return a - b" in t3.error
    # A block check reports the last call it made and the failing assert.
    t4 = ev.checks[3]
    assert t4.call.startswith("add(1, 1)")
    assert t4.error is not None and "assert add(i, i) == 2 * i" in t4.error


async def test_partial_pass_rate(sandbox: Sandbox) -> None:
    ev = await sandbox.run(ADD_TASK, "def add(a, b):\n    return a + b if a != 1 else 0\n")
    assert [c.passed for c in ev.checks] == [False, True, True, False]
    assert ev.pass_rate == 0.5


async def test_endless_loop_in_a_check_fails_each_check_and_goes_on(sandbox: Sandbox) -> None:
    code = (
        "def add(a, b):\n    if a == 1:\n        while True:\n            pass\n    return a + b\n"
    )
    ev = await sandbox.run(ADD_TASK, code)
    assert ev.status is EvaluationStatus.FAILED
    assert ev.checks[0].error is not None and ev.checks[0].error.startswith("timeout")
    assert ev.checks[1].passed and ev.checks[2].passed  # the next checks still ran


async def test_endless_loop_at_module_level_is_a_timeout(sandbox: Sandbox) -> None:
    ev = await sandbox.run(ADD_TASK, "while True:\n    pass\n")
    assert ev.status is EvaluationStatus.TIMEOUT
    assert "loading the code took longer than 1.0 s" in ev.reason
    assert all(c.error and c.error.startswith("not run") for c in ev.checks)


async def test_loop_that_swallows_the_alarm_is_killed_by_the_wall_clock() -> None:
    sandbox = Sandbox(SandboxLimits(check_timeout_s=0.2, load_timeout_s=0.5, wall_timeout_s=1.5))
    code = (
        "def add(a, b):\n    while True:\n        try:\n            while True:\n"
        "                pass\n        except BaseException:\n            pass\n"
    )
    ev = await sandbox.run(ADD_TASK, code)
    assert ev.status is EvaluationStatus.TIMEOUT
    assert "wall-clock limit of 1.5 s" in ev.reason
    assert ev.checks[0].error is not None and ev.checks[0].error.startswith("stopped")
    assert ev.checks[1].error is not None and ev.checks[1].error.startswith("not run")


# Generous time limits: filling the address space must end in MemoryError, not in a timeout,
# even on a loaded machine.
ROOMY = SandboxLimits(check_timeout_s=20.0, load_timeout_s=20.0, memory_mb=128)


async def test_unbounded_allocation_hits_the_memory_limit() -> None:
    sandbox = Sandbox(ROOMY)
    code = "def add(a, b):\n    hoard = []\n    while True:\n        hoard.append(' ' * 10**6)\n"
    ev = await sandbox.run(ADD_TASK, code)
    assert ev.pass_rate == 0.0
    assert all(c.error and c.error.startswith("raised MemoryError") for c in ev.checks[:3])


async def test_unbounded_allocation_at_load() -> None:
    sandbox = Sandbox(ROOMY)
    ev = await sandbox.run(ADD_TASK, "hoard = [bytearray(10**6) for _ in range(10**6)]\n")
    assert ev.status is EvaluationStatus.MEMORY_LIMIT
    assert "MemoryError" in ev.reason


async def test_fork_is_refused(sandbox: Sandbox) -> None:
    code = "import os\ndef add(a, b):\n    os.fork()\n    return a + b\n"
    ev = await sandbox.run(ADD_TASK, code)
    assert ev.pass_rate == 0.0
    assert ev.checks[0].error is not None
    assert "PermissionError: sandbox: starting or signalling processes" in ev.checks[0].error


async def test_subprocess_is_refused(sandbox: Sandbox, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    code = f"import subprocess\ndef add(a, b):\n    subprocess.run(['touch', {str(marker)!r}])\n"
    ev = await sandbox.run(ADD_TASK, code)
    assert "subprocess.Popen" in (ev.checks[0].error or "")
    assert not marker.exists()


async def test_sockets_are_refused(sandbox: Sandbox) -> None:
    code = (
        "import socket\ndef add(a, b):\n    s = socket.socket()\n"
        "    s.connect(('127.0.0.1', 9))\n    return a + b\n"
    )
    ev = await sandbox.run(ADD_TASK, code)
    assert ev.pass_rate == 0.0
    assert "PermissionError: sandbox: network access is not allowed (socket.__new__)" in (
        ev.checks[0].error or ""
    )


async def test_writing_outside_the_directory_is_refused(sandbox: Sandbox, tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    code = f"def add(a, b):\n    open({str(target)!r}, 'w').write('x')\n    return a + b\n"
    ev = await sandbox.run(ADD_TASK, code)
    assert "writing outside the working directory" in (ev.checks[0].error or "")
    assert not target.exists()


async def test_writing_inside_the_directory_is_allowed(sandbox: Sandbox) -> None:
    code = (
        "def add(a, b):\n    with open('scratch.txt', 'w') as fh:\n        fh.write(str(a + b))\n"
        "    return int(open('scratch.txt').read()) if isinstance(a, int) else a + b\n"
    )
    ev = await sandbox.run(ADD_TASK, code)
    assert ev.status is EvaluationStatus.PASSED


async def test_removing_files_outside_is_refused(sandbox: Sandbox, tmp_path: Path) -> None:
    victim = tmp_path / "keep.txt"
    victim.write_text("important")
    code = f"import os\ndef add(a, b):\n    os.remove({str(victim)!r})\n    return a + b\n"
    ev = await sandbox.run(ADD_TASK, code)
    assert "os.remove" in (ev.checks[0].error or "")
    assert victim.read_text() == "important"


async def test_printing_megabytes_stops_the_run(sandbox: Sandbox) -> None:
    code = "def add(a, b):\n    print('x' * 3_000_000)\n    return a + b\n"
    ev = await sandbox.run(ADD_TASK, code)
    assert ev.status is EvaluationStatus.OUTPUT_LIMIT
    assert "printed more than 1048576 bytes" in ev.reason
    assert len(ev.stdout) < 10_000 and "more bytes not kept" in ev.stdout


async def test_moderate_output_is_kept_and_truncated_with_a_note() -> None:
    sandbox = Sandbox(SandboxLimits(keep_output_bytes=100))
    code = "def add(a, b):\n    print('y' * 500)\n    return a + b\n"
    ev = await sandbox.run(ADD_TASK, code)
    assert ev.status is EvaluationStatus.PASSED
    assert ev.stdout.startswith("y" * 100)
    assert "more bytes not kept" in ev.stdout


async def test_not_python_is_a_syntax_error(sandbox: Sandbox) -> None:
    ev = await sandbox.run(ADD_TASK, "Sure! Here is a function that adds two numbers.")
    assert ev.status is EvaluationStatus.SYNTAX_ERROR
    assert ev.reason.startswith("line 1:")
    assert ev.pass_rate == 0.0


async def test_empty_code_is_no_code(sandbox: Sandbox) -> None:
    ev = await sandbox.run(ADD_TASK, "  \n")
    assert ev.status is EvaluationStatus.NO_CODE


async def test_missing_entry_point_is_a_load_error(sandbox: Sandbox) -> None:
    ev = await sandbox.run(ADD_TASK, "def plus(a, b):\n    return a + b\n")
    assert ev.status is EvaluationStatus.LOAD_ERROR
    assert ev.reason == "the code does not define 'add'"


async def test_exception_at_load_is_a_load_error(sandbox: Sandbox) -> None:
    ev = await sandbox.run(ADD_TASK, "import no_such_module_anywhere\n")
    assert ev.status is EvaluationStatus.LOAD_ERROR
    assert "ModuleNotFoundError" in ev.reason


async def test_hard_exit_mid_run_is_a_crash(sandbox: Sandbox) -> None:
    code = "import os\ndef add(a, b):\n    if a == -1:\n        os._exit(3)\n    return a + b\n"
    ev = await sandbox.run(ADD_TASK, code)
    assert ev.status is EvaluationStatus.CRASHED
    assert "exited with status 3" in ev.reason
    assert ev.checks[0].passed  # results before the crash are kept
    assert ev.checks[1].error is not None and ev.checks[1].error.startswith("stopped")
    assert ev.checks[2].error is not None and ev.checks[2].error.startswith("not run")


async def test_sys_exit_fails_only_that_check(sandbox: Sandbox) -> None:
    code = "import sys\ndef add(a, b):\n    if a == 1:\n        sys.exit(4)\n    return a + b\n"
    ev = await sandbox.run(ADD_TASK, code)
    assert ev.checks[0].error == "called exit(4)"
    assert ev.checks[1].passed


async def test_the_environment_is_stripped(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLOSEDLOOP_SECRET_FOR_TEST", "hunter2")
    code = "import os\ndef add(a, b):\n    return sorted(os.environ)\n"
    ev = await sandbox.run(ADD_TASK, code)
    got = ev.checks[0].got or ""
    assert "CLOSEDLOOP_SECRET_FOR_TEST" not in got
    assert "PATH" in got


async def test_concurrent_runs_do_not_interfere(sandbox: Sandbox) -> None:
    good, bad = await asyncio.gather(
        sandbox.run(ADD_TASK, GOOD), sandbox.run(ADD_TASK, "def add(a, b):\n    return 0\n")
    )
    assert good.pass_rate == 1.0
    assert bad.pass_rate == 0.25  # add(-1, 1) == 0 holds by accident


def test_run_sync(sandbox: Sandbox) -> None:
    assert sandbox.run_sync(ADD_TASK, GOOD).status is EvaluationStatus.PASSED


def test_limits_are_validated() -> None:
    with pytest.raises(ConfigurationError, match="check_timeout_s"):
        SandboxLimits(check_timeout_s=0)
    with pytest.raises(ConfigurationError, match="memory_mb"):
        SandboxLimits(memory_mb=1)
    assert SandboxLimits(check_timeout_s=1, load_timeout_s=2).wall_timeout_for(3) == 10.0


@pytest.mark.parametrize(
    "bad",
    [
        "while True:\n    pass\n",
        "import os\nos.fork()\n",
        "import socket\nsocket.socket()\n",
        "print('z' * 2_000_000)\n",
        "this is not python",
        "x = [0] * (10**10)\n",
    ],
    ids=["loop", "fork", "socket", "print", "prose", "alloc"],
)
async def test_the_harness_goes_on_after_a_bad_round(sandbox: Sandbox, bad: str) -> None:
    answers = iter([fenced(bad), fenced(GOOD)])
    model = FunctionModel(lambda messages, call: next(answers))
    refiner = Refiner(ModelGenerator(model), SandboxEvaluator(sandbox), self_refine(), max_rounds=3)
    result = await refiner.run(ADD_TASK)
    first = result.rounds[0].evaluation
    assert first is not None and first.status is not EvaluationStatus.PASSED
    assert first.reason  # a clear reason, not an exception
    assert result.scores[:2] == (0.0, 1.0)
    assert result.best_round == 2 and result.stop_reason == "target_met"


async def test_a_missing_interpreter_is_a_configuration_error(tmp_path: Path) -> None:
    sandbox = Sandbox(python=str(tmp_path / "no-python"))
    with pytest.raises(ConfigurationError, match="python"):
        await sandbox.run(ADD_TASK, GOOD)
