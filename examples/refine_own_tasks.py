"""Refinement on your own tasks: a task file in HumanEval form, checked and fed back.

Run it with ``python examples/refine_own_tasks.py``. Each line of the file is one task:
``task_id``, ``prompt`` (the function to write), ``entry_point`` (its name), ``test`` (a
``check(candidate)`` function whose asserts become the checks) and a reference
``canonical_solution``. The refiner runs generate → check in a sandbox → feedback rounds,
with the PID controller setting how much the next prompt says. A deterministic stand-in
plays the model (its first try is wrong, the next one right), so it runs offline in
seconds; a real model is one line (see below).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections import Counter
from pathlib import Path

from closedloop.harness import (
    ModelGenerator,
    Refiner,
    SandboxEvaluator,
    load_humaneval,
    pid_feedback,
)
from closedloop.models import CallInfo, FunctionModel, Message

TASKS = [
    {
        "task_id": "mine/clamp",
        "prompt": 'def clamp(x, lo, hi):\n    """Limit x to the range [lo, hi]."""\n',
        "entry_point": "clamp",
        "canonical_solution": "    return max(lo, min(x, hi))\n",
        "test": (
            "def check(candidate):\n"
            "    assert candidate(5, 0, 10) == 5\n"
            "    assert candidate(-1, 0, 10) == 0\n"
            "    assert candidate(11, 0, 10) == 10\n"
        ),
    },
    {
        "task_id": "mine/last_word",
        "prompt": 'def last_word(text):\n    """The last word of text, or "" if it has none."""\n',
        "entry_point": "last_word",
        "canonical_solution": "    words = text.split()\n    return words[-1] if words else ''\n",
        "test": (
            "def check(candidate):\n"
            "    assert candidate('closed loop control') == 'control'\n"
            "    assert candidate('  spaced  out  ') == 'out'\n"
            "    assert candidate('') == ''\n"
        ),
    },
]

# What the stand-in writes: a first try with a bug, then the fix.
ATTEMPTS = {
    "clamp": [
        "def clamp(x, lo, hi):\n    return max(lo, x)\n",
        "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
    ],
    "last_word": [
        "def last_word(text):\n    return text.split()[-1]\n",
        "def last_word(text):\n    words = text.split()\n    return words[-1] if words else ''\n",
    ],
}
calls: Counter[str] = Counter()


def reply(messages: tuple[Message, ...], info: CallInfo) -> str:
    text = "\n".join(m.content for m in messages)
    name = next(n for n in ATTEMPTS if f"def {n}(" in text)
    attempt = ATTEMPTS[name][min(calls[name], len(ATTEMPTS[name]) - 1)]
    calls[name] += 1
    return f"```python\n{attempt}```"


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "my_tasks.jsonl"
        path.write_text("".join(json.dumps(t) + "\n" for t in TASKS), encoding="utf-8")
        problems = load_humaneval(path)
        # The real model: ModelGenerator(load_model("local:qwen2.5-coder-0.5b"))
        refiner = Refiner(
            ModelGenerator(FunctionModel(reply, name="stand-in")),
            SandboxEvaluator(),
            pid_feedback(),
            max_rounds=3,
        )
        for problem in problems:
            task = problem.task()
            result = await refiner.run(task)
            scores = ", ".join(f"{s:.2f}" for s in result.scores if s is not None)
            print(f"{task.name}: {len(task.checks)} checks, scores {scores}")
            if len(result.rounds) > 1:  # what the second round heard about the first
                second = result.rounds[1]
                failing = [line for line in second.feedback.splitlines() if line[:2] == "- "]
                print(f"  round 2 was told ({second.level}): {failing[0][2:] if failing else '-'}")
            print(f"  best score {result.best_score:.2f} in round {result.best_round}")
            print(f"  stopped: {result.stop_reason}")


if __name__ == "__main__":
    asyncio.run(main())
