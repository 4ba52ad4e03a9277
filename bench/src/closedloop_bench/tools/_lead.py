"""The lead result: spending only when unsure, on every eval task, replayed from the banks.

The committed sample banks hold k samples of the constrained single call per eval task
and model; replaying a strategy from them is exact and takes seconds, so the demo can
open with all 420 tasks instead of the handful a live run on two cores affords. The rows
are the ones a user chooses between: the single call, a fixed vote of five, and the
confidence-gated strategies with the settings picked on the development bank (the
confident single call, and abstaining below a confidence floor); each is paired per task
with the single call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from closedloop import ConfigurationError

from ._plane import Row, plane_report
from ._replay import Record, Votes
from ._replay_command import dev_choices, load_records, strategy_grid

__all__ = ["BANK_DIR", "lead_report"]

BANK_DIR = Path(__file__).resolve().parents[3] / "results" / "tools" / "bank"
"""Where the committed banks lie in a checkout (bench/results/tools/bank)."""
STRONG = "qwen2.5-coder-0.5b"
FALLBACK = {"confident": "confident[0.8]@3", "abstain": "confident[0.8]@3+abstain<0.3"}
"""The settings used where no development bank is found (named as such in the report)."""


def _bank(folder: Path, model: str, split: str) -> Path:
    return folder / f"{model}-{split}.jsonl.gz"


def lead_report(folder: Path = BANK_DIR, *, model: str = STRONG) -> dict[str, Any]:
    """The lead rows for ``model``'s eval bank under ``folder``, with the gated settings
    picked on its development bank where there is one."""
    from ._generate import DATA_DIR

    eval_path = _bank(folder, model, "eval")
    if not eval_path.exists():
        raise ConfigurationError(
            "bank", str(eval_path), "not found: the lead table needs the committed sample bank"
        )
    _, records = load_records(eval_path, DATA_DIR / "eval.jsonl")
    if not records:
        raise ConfigurationError("bank", str(eval_path), "holds no task yet")
    dev_path = _bank(folder, model, "dev")
    chosen, source = dict(FALLBACK), "fixed defaults (no development bank found)"
    if dev_path.exists():
        _, dev = load_records(dev_path, DATA_DIR / "dev.jsonl")
        if dev:
            chosen = dev_choices(dev)
            source = f"picked on the development bank ({len(dev)} tasks)"
    rows = _rows(records, chosen)
    report = plane_report(rows, f"{model} · single")
    return {**report, "model": model, "settings": chosen, "settings_source": source}


def _rows(records: list[Record], chosen: dict[str, str]) -> list[Row]:
    k = min(len(r.samples) for r in records)
    grid = {s.name: (s, group) for s, group in strategy_grid(k)}
    picks: list[tuple[Any, str]] = [(Votes(1), "fixed"), (Votes(min(5, k)), "fixed")]
    picks += [grid[chosen[kind]] for kind in ("confident", "abstain") if chosen.get(kind) in grid]
    model = records[0].model
    return [Row(s.name, model, group, tuple(s.replay([r]) for r in records)) for s, group in picks]
