"""Resuming a long fleet run: every finished cell's episodes, kept in a file as they end.

A cell is one (schedule, strategy) over every seed. The file is JSON lines under the
output folder, the first line naming the settings it was made with; a run with other
settings starts it afresh, a run with the same ones skips the cells it holds. The file
is removed once the report is written.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ._metrics import Episode

__all__ = ["Checkpoint"]


class Checkpoint:
    """The finished cells of one run's settings (``key``), read from and appended to ``path``."""

    def __init__(self, path: Path, key: dict[str, Any]) -> None:
        self.path = path
        self.key = json.dumps(key, sort_keys=True, default=str)
        self.cells: dict[str, list[Episode]] = {}
        lines = path.read_text().splitlines() if path.exists() else []
        if lines and json.loads(lines[0]).get("settings") == self.key:
            for line in lines[1:]:
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:  # a line cut short when the run was stopped
                    break
                self.cells[entry["cell"]] = [Episode(**e) for e in entry["episodes"]]
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"settings": self.key}) + "\n")

    def add(self, cell: str, episodes: list[Episode]) -> None:
        """Keep one finished cell (infinite recovery times are written as JSON's Infinity)."""
        self.cells[cell] = episodes
        entry = {"cell": cell, "episodes": [asdict(e) for e in episodes]}
        with self.path.open("a") as file:
            file.write(json.dumps(entry) + "\n")

    def done(self) -> None:
        """The report is written: the file is no longer needed."""
        self.path.unlink(missing_ok=True)
