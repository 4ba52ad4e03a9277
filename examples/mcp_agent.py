"""An agent whose tools come from an MCP server, runnable offline.

    python examples/mcp_agent.py

``mcp_server`` starts ``mcp_weather_server.py`` (next to this file) as a subprocess and
turns each of its MCP tools into a loop tool; the run holds the connection and closes it,
and the subprocess, when it ends. The model here is scripted so the example runs anywhere;
put a real one in its place (``"local:qwen2.5-coder-0.5b"``) to let a model choose.
"""

from __future__ import annotations

import sys
from pathlib import Path

from closedloop import Agent, Runtime, mcp_server
from closedloop.models import ScriptedModel

SERVER = Path(__file__).with_name("mcp_weather_server.py")


def main() -> None:
    # ``forecast`` is read-only by the server's annotation; ``book_umbrella`` is declared
    # here: it must happen at most once, so it runs through the effect ledger.
    weather = mcp_server([sys.executable, str(SERVER)], effects={"book_umbrella": "once"})
    model = ScriptedModel(
        [
            {"tool": "forecast", "arguments": {"city": "Paris"}},
            {"tool": "forecast", "arguments": {"city": "Atlantis"}},
            {"tool": "book_umbrella", "arguments": {"city": "Paris"}},
            {"final": "Paris: 18.5 C and cloudy, umbrella booked; no forecast for Atlantis."},
        ]
    )
    agent = Agent(model, tools=[weather], runtime=Runtime(trace=False))
    for name, tool in agent.tools.items():
        print(f"tool {name}: {tool.effect.value}")
    result = agent.run_sync("Weather in Paris and Atlantis; book an umbrella if it rains.")
    for step in result.steps:
        if step.observation is not None:
            seen = step.observation
            print(f"{step.step_type}: {seen['status']} {seen['value']}")
    print(f"answer: {result.output}")
    print(f"halt: {result.halt_reason.value}")


if __name__ == "__main__":
    main()
