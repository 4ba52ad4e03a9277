"""The generated task sets: five families over the catalog's domains and the toy APIs.

- ``single``: one function offered, one call with typed and enum arguments;
- ``choose``: two to six functions offered, one of them fits;
- ``parallel``: two to four calls in one answer, in any order;
- ``irrelevance``: only functions of other domains offered; the right answer is no call;
- ``multi_turn``: a stateful toy API, two to five calls in order, checked on the final state.

Every family draws from its own pseudo-random stream, keyed by the family's name and
a fixed base, so the sets are the same on every machine and regenerating them is
byte-identical. Dev and eval tasks of a family come from one stream with duplicates
dropped, so no task is in both splits.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ._catalog import CATALOG, Fn
from ._envs import ENVIRONMENTS
from ._format import FAMILIES, ToolTask, dump_tasks, parse_task
from ._scenarios import ENV_DOMAINS, draw_scenario
from ._score import Call

__all__ = [
    "DATA_DIR",
    "DEFAULT_COUNTS",
    "generate_split",
    "generate_tasks",
    "rule_for",
    "write_data",
]

DATA_DIR = Path(__file__).parent / "data"
"""Where the committed dev and eval sets live."""

DEFAULT_COUNTS = {"dev": 20, "eval": 84}
"""Tasks per family in each split: 100 dev and 420 eval tasks in all."""

_BASE = "closedloop-tools-v1"
_FORMATTER = string.Formatter()


def rule_for(schema: dict[str, Any], value: Any) -> dict[str, Any]:
    """The matching rule a generated argument gets: names and free text up to case,
    numbers to a cent, everything with a fixed form (enums, patterns, integers) exactly."""
    kind = schema.get("type")
    if kind == "number":
        return {"number": float(value), "tol": 0.005}
    if kind == "string" and "enum" not in schema and "pattern" not in schema:
        return {"text": value}
    return {"exact": value}


def _fields(template: str) -> list[str]:
    return [name for _, name, _, _ in _FORMATTER.parse(template) if name]


def _ask(rng: random.Random, fn: Fn, avoid: Mapping[str, Any] | None = None) -> tuple[str, Call]:
    """A request for ``fn`` in words and the call that answers it."""
    template = rng.choice(fn.asks)
    mentioned = set(_fields(template))
    args: dict[str, Any] = {}
    for param in fn.params:
        if param.name not in mentioned:
            continue
        pool = [v for v in param.values if avoid is None or avoid.get(param.name) != v]
        args[param.name] = rng.choice(pool or list(param.values))
    spoken = {p.name: p.spoken(args[p.name]) for p in fn.params if p.name in args}
    text = template.format(**spoken)
    return text[0].upper() + text[1:], Call(fn.name, args)


def _expected_call(fn_tool: dict[str, Any], call: Call) -> dict[str, Any]:
    properties = fn_tool["function"]["parameters"]["properties"]
    rules = {name: rule_for(properties[name], value) for name, value in call.arguments.items()}
    for name in properties:
        if name not in rules:
            # The user did not say: any value, or none, is right.
            rules[name] = {"any": True, "optional": True}
    return {"name": call.name, "arguments": rules}


def _task(
    family: str,
    domain: str,
    user: Sequence[str],
    tools: Sequence[dict[str, Any]],
    expected: dict[str, Any],
    **extra: Any,
) -> dict[str, Any]:
    return {
        "id": "",
        "family": family,
        "domain": domain,
        "split": "dev",
        "messages": [{"role": "user", "content": text} for text in user],
        "tools": list(tools),
        "expected": expected,
        **extra,
    }


def _by_name() -> dict[str, Fn]:
    return {fn.name: fn for fn in CATALOG}


def _single(rng: random.Random, index: int) -> dict[str, Any]:
    fn = CATALOG[index % len(CATALOG)]
    text, call = _ask(rng, fn)
    tool = fn.tool()
    return _task("single", fn.domain, [text], [tool], {"calls": [_expected_call(tool, call)]})


def _distractors(rng: random.Random, fn: Fn, count: int) -> list[Fn]:
    same = [f for f in CATALOG if f.domain == fn.domain and f is not fn]
    other = [f for f in CATALOG if f.domain != fn.domain]
    rng.shuffle(same)
    rng.shuffle(other)
    return (same + other)[:count]


def _choose(rng: random.Random, index: int) -> dict[str, Any]:
    fn = CATALOG[index % len(CATALOG)]
    text, call = _ask(rng, fn)
    offered = [fn, *_distractors(rng, fn, rng.randint(1, 5))]
    rng.shuffle(offered)
    tools = [f.tool() for f in offered]
    expected = {"calls": [_expected_call(fn.tool(), call)]}
    return _task("choose", fn.domain, [text], tools, expected)


_JOINS = ("{0} Also, {1}", "Two things. {0} And {1}", "{0} {1}")


def _parallel(rng: random.Random, index: int) -> dict[str, Any]:
    fn = CATALOG[index % len(CATALOG)]
    count = rng.choice([2, 2, 3, 4])
    if rng.random() < 0.5:
        used = [fn] * count  # the same function with different arguments
    else:
        pool = [f for f in CATALOG if f.domain == fn.domain and f is not fn]
        pool += rng.sample([f for f in CATALOG if f.domain != fn.domain], 3)
        used = [fn, *rng.sample(pool, count - 1)]
    asks: list[str] = []
    calls: list[Call] = []
    for f in used:
        for _ in range(8):
            text, call = _ask(
                rng, f, calls[-1].arguments if calls and calls[-1].name == f.name else None
            )
            if call not in calls:
                break
        asks.append(text)
        calls.append(call)
    if len(asks) == 2:
        text = rng.choice(_JOINS).format(asks[0], asks[1][0].lower() + asks[1][1:])
    else:
        text = "Please do all of these: " + " ".join(f"({i + 1}) {a}" for i, a in enumerate(asks))
    offered = _unique([*used, *_distractors(rng, fn, rng.randint(0, 2))])
    rng.shuffle(offered)
    by_name = _by_name()
    expected_calls = [_expected_call(by_name[c.name].tool(), c) for c in calls]
    return _task(
        "parallel",
        fn.domain,
        [text],
        [f.tool() for f in offered],
        {"calls": expected_calls, "order": "any"},
    )


def _unique(fns: Sequence[Fn]) -> list[Fn]:
    return list({f.name: f for f in fns}.values())


def _irrelevance(rng: random.Random, index: int) -> dict[str, Any]:
    fn = CATALOG[index % len(CATALOG)]
    text, _ = _ask(rng, fn)
    other = [f for f in CATALOG if f.domain != fn.domain]
    offered = rng.sample(other, rng.randint(1, 4))
    return _task("irrelevance", fn.domain, [text], [f.tool() for f in offered], {"no_call": True})


def _multi_turn(rng: random.Random, index: int) -> dict[str, Any]:
    env_name = list(ENVIRONMENTS)[index % len(ENVIRONMENTS)]
    env_cls = ENVIRONMENTS[env_name]
    scenario = draw_scenario(rng, env_name)
    tools = [env_cls.tool(name) for name in env_cls.function_names()]
    by_name = {t["function"]["name"]: t for t in tools}
    expected_calls = []
    for call in scenario.calls:
        entry = _expected_call(by_name[call.name], call)
        for name in by_name[call.name]["function"]["parameters"]["properties"]:
            if name not in call.arguments and (call.name, name) in _DEFAULTS:
                # The API's own default is the only value the final state accepts.
                entry["arguments"][name] = {
                    "one_of": [_DEFAULTS[(call.name, name)]],
                    "optional": True,
                }
        expected_calls.append(entry)
    return _task(
        "multi_turn",
        ENV_DOMAINS[env_name],
        scenario.turns,
        tools,
        {"calls": expected_calls, "order": "sequence"},
        env=env_name,
        initial_state=scenario.initial_state,
        final_state=scenario.final_state,
    )


_DEFAULTS = {("add_todo", "priority"): "normal", ("create_event", "duration_min"): 60}

_GENERATORS: dict[str, Callable[[random.Random, int], dict[str, Any]]] = {
    "single": _single,
    "choose": _choose,
    "parallel": _parallel,
    "irrelevance": _irrelevance,
    "multi_turn": _multi_turn,
}


def _key(task: dict[str, Any]) -> str:
    texts = "|".join(m["content"] for m in task["messages"])
    names = ",".join(sorted(t["function"]["name"] for t in task["tools"]))
    return f"{texts}#{names}"


def generate_tasks(counts: dict[str, int] | None = None) -> dict[str, list[ToolTask]]:
    """The dev and eval sets, ``counts[split]`` tasks per family (``DEFAULT_COUNTS``)."""
    wanted = dict(DEFAULT_COUNTS if counts is None else counts)
    out: dict[str, list[ToolTask]] = {split: [] for split in wanted}
    for family in FAMILIES:
        rng = random.Random(f"{_BASE}:{family}")
        seen: set[str] = set()
        drawn: list[dict[str, Any]] = []
        total = sum(wanted.values())
        index = 0
        while len(drawn) < total:
            if index > 50 * total:
                raise RuntimeError(f"the {family} generator repeats itself")
            task = _GENERATORS[family](rng, index)
            index += 1
            key = _key(task)
            if key in seen:
                continue
            seen.add(key)
            drawn.append(task)
        rng.shuffle(drawn)  # the catalog is walked in order; the splits should mix domains
        start = 0
        for split, n in wanted.items():
            for number, task in enumerate(drawn[start : start + n], start=1):
                task["split"] = split
                task["id"] = f"{split}-{family}-{number:03d}"
                out[split].append(parse_task(task, source=f"generated {split}", line=number))
            start += n
    return out


def generate_split(split: str) -> list[ToolTask]:
    """One generated split (``dev`` or ``eval``) with the default counts."""
    if split not in DEFAULT_COUNTS:
        raise ValueError(f"split={split!r}: must be one of {', '.join(DEFAULT_COUNTS)}")
    return generate_tasks()[split]


def write_data(directory: Path = DATA_DIR) -> dict[str, Path]:
    """Write ``dev.jsonl`` and ``eval.jsonl`` under ``directory``; their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for split, tasks in generate_tasks().items():
        path = directory / f"{split}.jsonl"
        path.write_text(dump_tasks(tasks), encoding="utf-8")
        paths[split] = path
    return paths
