"""A first agent: a model, its tools, and a task.

Run it with ``python examples/first_agent.py``. The model here is a ``ScriptedModel``, a
deterministic stand-in that answers from a script, so the example runs offline in a
second. Swap in a real one by its spec string (see the comment below); nothing else
changes.
"""

from __future__ import annotations

import json

from closedloop import Agent, tool
from closedloop.models import ScriptedModel


# 1. A tool: a typed function. Its signature and docstring become the schema the model
#    sees and the validator checks every proposed call against.
@tool
def get_weather(city: str) -> dict[str, object]:
    """Today's weather for a city."""
    return {"city": city, "temperature_c": 23, "sky": "clear"}


# 2. A model. A real one: model = "local:qwen2.5-coder-0.5b" (the built-in, after
#    `closedloop models pull`), or "openai:gpt-4o-mini", or an OpenAI-compatible server
#    such as "openai-compatible:http://127.0.0.1:8080/v1#my-model".
model = ScriptedModel(
    [
        json.dumps({"tool": "get_weather", "arguments": {"city": "Paris"}}),
        json.dumps({"final": "Paris: 23 °C and clear"}),
    ]
)

# 3. A task. The agent runs it to a named halt and returns a typed result; each step's
#    control signals go to a JSONL trace under $CLOSEDLOOP_HOME/runs.
agent = Agent(model, tools=[get_weather])
result = agent.run_sync("What is the weather in Paris?")

for step in result.steps:
    did = f"called {step.action.tool}({step.action.arguments})" if step.action else "answered"
    print(f"step {step.step}: {did}")
print(f"halt: {result.halt_reason}")
print(f"success: {result.success}")
print(f"output: {result.output}")
print(f"model calls: {result.usage.model_calls}")
print(f"trace: closedloop trace show {result.run_id}")
