"""A model ladder: the cheap model proposes while things go well, the strong one when not.

Run it with ``python examples/model_ladder.py``. Give the agent a list of models, cheapest
first, and each step runs on the rung its controller schedules from the measured error:
a refused reply raises the error, the next step climbs, and once a step succeeds the
ladder comes back down. Two deterministic stand-ins play the models here so the example
runs offline in a second; the real ladder is one line (see below).
"""

from __future__ import annotations

import re
from typing import Any

from closedloop import Agent, Runtime, tool
from closedloop.models import CallInfo, FunctionModel, Message, ModelLadder


@tool
def convert(amount: float, currency: str) -> dict[str, object]:
    """Convert an amount of euros into another currency."""
    rates = {"USD": 1.08, "JPY": 162.0}
    return {"amount": round(amount * rates[currency.upper()], 2), "currency": currency}


def small_reply(messages: tuple[Message, ...], info: CallInfo) -> str:
    # A cheap model that never manages a valid action: prose, not a tool call.
    return "I think you should look that up online."


def strong_reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
    # A stronger model: converts, then answers from the tool's result.
    seen = re.search(r'^value: \{"amount": ([0-9.]+)', messages[-1].content, re.MULTILINE)
    if seen:
        return {"final": f"100 EUR is {seen.group(1)} USD"}
    return {"tool": "convert", "arguments": {"amount": 100, "currency": "USD"}}


# The real ladder, with prices in dollars per 1,000 tokens (a plain list of specs,
# Agent(["local:smollm2-135m", "local:qwen2.5-coder-0.5b"], ...), is a ladder too):
#   ladder = ModelLadder.of(["local:smollm2-135m", "local:qwen2.5-coder-0.5b"],
#                           prices=[0.0, 0.1])
ladder = ModelLadder.of(
    [FunctionModel(small_reply, name="small"), FunctionModel(strong_reply, name="strong")],
    prices=[0.01, 0.1],
)
agent = Agent(ladder, tools=[convert], runtime=Runtime(trace=False))
result = agent.run_sync("How much is 100 euros in US dollars?")

for step in result.steps:
    what = step.action.tool if step.action else ("answer" if step.final_answer else "refused")
    rung, model = step.actuators["model_rung"], step.actuators["model"]
    print(f"step {step.step}: rung {rung} ({model}) {what}")
for used in result.usage.rungs:
    tokens = used.prompt_tokens + used.completion_tokens
    cost = f"${used.cost:.4f}"
    print(f"rung {used.rung} {used.model}: {used.model_calls} calls, {tokens} tokens, {cost}")
print(f"halt: {result.halt_reason}")
print(f"output: {result.output}")
