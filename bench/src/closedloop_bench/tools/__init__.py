"""closedloop_bench.tools: a tool-calling benchmark on real models, with its own tasks.

Five task families (``single``, ``choose``, ``parallel``, ``irrelevance``,
``multi_turn``) over fourteen domains, generated with their checkers and split into dev
(100 tasks) and eval (420 tasks); functions are OpenAI-style schemas, so a user brings
their own tasks as JSONL (:func:`load_tool_tasks`, format in ``_format``). ``score`` checks an
answer's calls (and a stateful task's final state); the oracle solves every task.
``run_tools_bench`` runs strategies × models × tasks and reports success with 95 %
intervals and the cost per task; ``plot_plane`` draws the success–cost plane.

Strategies, all on the one shared prompt: ``open_loop`` (one call, no grammar),
``strict`` (one call under the tools' grammar), ``reask@N`` (re-asked with the validator's
error), ``votes@k`` (a majority of k samples), ``strong`` (strict on the strongest model),
and the agent loop: ``closedloop`` (controller on), ``frozen`` (every actuator held at
u = 0.5) and ``ladder`` (needs an Agent that takes a model ladder). More plug in with
``register_strategy`` and ``register_family``.
"""

from __future__ import annotations

import contextlib

from ._agents import DEFAULT_MAX_STEPS, FROZEN_U, AgentStrategy, agent_takes_ladder
from ._envs import ENVIRONMENTS, CallResult, Environment, states_match
from ._fixed import ReAsk, Votes, check_reply
from ._format import (
    FAMILIES,
    ArgRule,
    Expected,
    ExpectedCall,
    FunctionDef,
    TaskFileError,
    TaskMessage,
    ToolSchema,
    ToolTask,
    describe_tool_tasks,
    dump_tasks,
    load_tool_tasks,
    parse_task,
)
from ._generate import DATA_DIR, DEFAULT_COUNTS, generate_split, generate_tasks, write_data
from ._models import TOOL_TEST_MODELS, ModelProvider, resolve_models
from ._oracle import ideal_reply, oracle_calls
from ._prompt import (
    MAX_CALLS,
    STRING_LIMIT,
    ParsedReply,
    agent_instructions,
    build_messages,
    parse_reply,
    strict_schema,
    system_prompt,
    task_request,
)
from ._report import (
    Cell,
    TaskResult,
    ToolsReport,
    fixed_frontier,
    plot_plane,
    read_report,
    render_table,
    summarise,
    write_report,
)
from ._runner import ToolsConfig, run_tools_bench
from ._score import Call, TaskScore, replay, score
from ._strategies import (
    AGENT_STRATEGY_NAMES,
    Attempt,
    OpenLoop,
    Strict,
    TaskTools,
    ToolStrategy,
    get_tool_strategy,
    register_family,
    register_strategy,
    strategy_names,
)

__all__ = [
    "AGENT_STRATEGY_NAMES",
    "DATA_DIR",
    "DEFAULT_COUNTS",
    "DEFAULT_MAX_STEPS",
    "ENVIRONMENTS",
    "FAMILIES",
    "FROZEN_U",
    "MAX_CALLS",
    "STRING_LIMIT",
    "TOOL_TEST_MODELS",
    "AgentStrategy",
    "ArgRule",
    "Attempt",
    "Call",
    "CallResult",
    "Cell",
    "Environment",
    "Expected",
    "ExpectedCall",
    "FunctionDef",
    "ModelProvider",
    "OpenLoop",
    "ParsedReply",
    "ReAsk",
    "Strict",
    "TaskFileError",
    "TaskMessage",
    "TaskResult",
    "TaskScore",
    "TaskTools",
    "ToolSchema",
    "ToolStrategy",
    "ToolTask",
    "ToolsConfig",
    "ToolsReport",
    "Votes",
    "agent_instructions",
    "agent_takes_ladder",
    "build_messages",
    "check_reply",
    "describe_tool_tasks",
    "dump_tasks",
    "fixed_frontier",
    "generate_split",
    "generate_tasks",
    "get_tool_strategy",
    "ideal_reply",
    "load_tool_tasks",
    "oracle_calls",
    "parse_reply",
    "parse_task",
    "plot_plane",
    "read_report",
    "register_family",
    "register_strategy",
    "render_table",
    "replay",
    "resolve_models",
    "run_tools_bench",
    "score",
    "states_match",
    "strategy_names",
    "strict_schema",
    "summarise",
    "system_prompt",
    "task_request",
    "write_data",
    "write_report",
]

for _name in __all__:
    # Reprs and docs show the public home of each name, as httpx does; a re-export from
    # closedloop (TaskFileError, shared with the refinement benchmark) keeps its own.
    with contextlib.suppress(AttributeError, TypeError):
        _obj = globals()[_name]
        if (isinstance(_obj, type) or callable(_obj)) and _obj.__module__.startswith(__name__):
            _obj.__module__ = __name__
