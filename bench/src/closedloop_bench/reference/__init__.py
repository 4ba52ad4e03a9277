"""Reference parts for agents on ``closedloop_bench.world``: tools, city rules and task sets.

``WorldTools(base_url)`` exposes the world's services as agent tools (reads return scored
``Observation``s; bookings and payments are ``AtomicAction``s with idempotency keys from
the effect ledger, compensations and reconcilers). ``CityNormaliser`` resolves typed city
names by rule before any model is asked. ``load_tasks("dev" | "eval", seed)`` generates
the benchmark's tasks from the world's data, each with a checker (``check``) and the
ideal trajectory an oracle agent follows (``play_ideal``, ``ideal_model``).

    async with serve_world_async("none", latency_scale=0) as world:
        tools = WorldTools(world.base_url, store=store)
        task = load_tasks("dev")[0]
        agent = Agent(model, tools.tools(task.domain), runtime=Runtime(store=store))
        result = await agent.run(task.agent_task())
        verdict = check(task, result, world)
"""

from __future__ import annotations

from inspect import isfunction

from ._checkers import CHECKERS, Checker, check
from ._cities import CityMatch, CityNormaliser, CityRule
from ._effects import OrderItem, observed_value
from ._plumbing import READS, ReadSpec, ToolCallRecord
from ._task_file import describe_world_tasks, load_world_tasks, verify_world_tasks
from ._taskgen import SPLIT_SEEDS, load_tasks, task_counts
from ._tasks import (
    ANSWER_FIELD,
    Answer,
    CheckerVerdict,
    Domain,
    ReferenceTask,
    Split,
    TrajectoryCall,
    answer_schema,
)
from ._tools import DOMAIN_TOOLS, WorldTools
from ._trajectory import ideal_model, play_ideal, resolve_arguments

__all__ = [
    "ANSWER_FIELD",
    "CHECKERS",
    "DOMAIN_TOOLS",
    "READS",
    "SPLIT_SEEDS",
    "Answer",
    "Checker",
    "CheckerVerdict",
    "CityMatch",
    "CityNormaliser",
    "CityRule",
    "Domain",
    "OrderItem",
    "ReadSpec",
    "ReferenceTask",
    "Split",
    "ToolCallRecord",
    "TrajectoryCall",
    "WorldTools",
    "answer_schema",
    "check",
    "describe_world_tasks",
    "ideal_model",
    "load_tasks",
    "load_world_tasks",
    "observed_value",
    "play_ideal",
    "resolve_arguments",
    "task_counts",
    "verify_world_tasks",
]

# Public names show as closedloop_bench.reference.X in reprs and docs (httpx does the same).
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) or isfunction(_obj):
        _obj.__module__ = __name__
del _name, _obj
