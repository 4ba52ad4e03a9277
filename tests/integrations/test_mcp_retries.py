"""A read whose server died mid-call is answered by the server started again, and says so.

The MCP server's retry policy reconnects inside what the loop sees as one call. The shop
server's ``crash`` really ends its process (``os._exit``); given ``once_marker`` only the
first process dies, so the retry is answered by a second one. The step's record
(``StepRecord.retries``) and the observation the model reads must both show the retry.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from closedloop import Agent, Runtime
from closedloop.agent import RunLimits
from closedloop.integrations import mcp_server
from closedloop.models import ScriptedModel

from .conftest import SHOP_SERVER, PidFile

pytestmark = pytest.mark.integration  # the shop server imports the SDK: seconds to start


def test_a_read_answered_after_a_reconnect_says_it_was_retried(
    pidfile: PidFile, tmp_path: Path
) -> None:
    marker = tmp_path / "died"
    server = mcp_server([sys.executable, str(SHOP_SERVER), "--pidfile", str(pidfile.path)])
    model = ScriptedModel(
        [{"tool": "crash", "arguments": {"once_marker": str(marker)}}, {"final": "done"}]
    )
    agent = Agent(
        model,
        tools=[server],
        limits=RunLimits(max_steps=3, stop=None),
        runtime=Runtime(trace=False),
    )
    listed = len(pidfile.pids())  # the listing's server, closed once listed
    result = agent.run_sync("Ask the server that dies once.")
    assert result.success, result.message
    step = result.steps[0]
    assert step.observation is not None and step.observation["status"] == "ok"
    assert step.observation["value"] == "answered by a server that did not die"
    # the call ran in two server processes: the one that died, then the one that answered
    assert marker.read_text().startswith(str(pidfile.pids()[listed]))
    assert len(pidfile.pids()) == listed + 2 and pidfile.alive() == []
    (retry,) = step.retries
    assert retry["attempt"] == 1 and retry["status"] == "error"
    assert "broke during crash" in retry["error"] and "reconnected" in retry["reason"]
    assert "retried 1 time(s) after reconnecting" in step.observation["meaning"]
