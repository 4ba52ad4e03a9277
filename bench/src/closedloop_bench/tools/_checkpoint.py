"""A run's checkpoint: each scored result appended as one JSON line the moment it exists.

A long run on an embedded model takes hours on two cores; killed half way, it loses
nothing. The first line names what the run is (the task ids, the models, the strategies
and the model options); a run started again with the same checkpoint skips every
(task, strategy, model) it already holds and appends the rest. A checkpoint written by
a different run is refused with an error naming the difference, never mixed in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from closedloop import ConfigurationError

from ._report import TaskResult

__all__ = ["Checkpoint"]

_KIND = "closedloop-bench-tools-checkpoint/1"
Key = tuple[str, str, str]


class Checkpoint:
    """The results of one run so far, kept in a JSONL file at ``path``."""

    def __init__(self, path: Path, identity: Mapping[str, Any]) -> None:
        self.path = path
        self._identity = {"kind": _KIND, **identity}
        self._done = self._read()

    def _read(self) -> dict[Key, TaskResult]:
        if not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self._identity) + "\n", encoding="utf-8")
            return {}
        text = self.path.read_text(encoding="utf-8")
        if text and not text.endswith("\n"):
            # A kill cut the last line short: drop it, so the next append starts clean.
            text = text[: text.rfind("\n") + 1]
            self.path.write_text(text, encoding="utf-8")
        lines = text.splitlines()
        head = self._parse(lines[0], 1) if lines else {}
        if head != self._identity:
            differ = sorted(
                k for k in {*head, *self._identity} if head.get(k) != self._identity.get(k)
            )
            raise ConfigurationError(
                "checkpoint",
                str(self.path),
                f"was written by a different run (differs in {', '.join(differ) or 'kind'}); "
                "delete it or start a fresh run",
            )
        done: dict[Key, TaskResult] = {}
        for number, line in enumerate(lines[1:], start=2):
            row = self._parse(line, number)
            try:
                result = TaskResult(
                    **{**row, "calls": tuple(row["calls"]), "steps": tuple(row.get("steps", ()))}
                )
            except (KeyError, TypeError) as exc:
                raise self._bad_line(number, f"is not a task result ({exc})") from None
            done[(result.task_id, result.strategy, result.model)] = result
        return done

    def _parse(self, line: str, number: int) -> dict[str, Any]:
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise self._bad_line(number, f"is not JSON ({exc.msg})") from None
        if not isinstance(value, dict):
            raise self._bad_line(number, "is not a JSON object")
        return value

    def _bad_line(self, number: int, why: str) -> ConfigurationError:
        # Only the last line can be cut by a kill (dropped above): any other bad line was
        # written by something else, so the file is not trusted and nothing is rerun.
        return ConfigurationError(
            "checkpoint",
            f"{self.path}:{number}",
            f"line {number} {why}; delete the file or start a fresh run",
        )

    def get(self, task_id: str, strategy: str, model: str) -> TaskResult | None:
        """The result already held for this task, strategy and model, if any."""
        return self._done.get((task_id, strategy, model))

    @property
    def held(self) -> int:
        """How many results the checkpoint held when the run started."""
        return len(self._done)

    def append(self, result: TaskResult) -> None:
        """Keep ``result`` (flushed before returning, so a kill after it loses nothing)."""
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(asdict(result), ensure_ascii=False) + "\n")
            out.flush()

    def remove(self) -> None:
        """Delete the file (the run's report now holds every result)."""
        self.path.unlink(missing_ok=True)
