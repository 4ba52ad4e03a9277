"""The gain tuner: coordinate search on a known objective, and its refusal on too little data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from closedloop import ConfigurationError
from closedloop.control import Gains, GainTable, tune_gains

FIXED = Gains()


class Objective:
    """Success falls with the distance from a per-domain optimum (flight: kp 1.6)."""

    def __init__(self) -> None:
        self.asked: list[dict[str, list[Gains]]] = []
        self.best = {"flight": (1.6, 0.05), "weather": (0.8, 0.05), "report": (0.3, 0.2)}

    async def __call__(self, asked: Mapping[str, Sequence[Gains]]) -> dict[str, list[float]]:
        self.asked.append({d: list(c) for d, c in asked.items()})
        out = {}
        for domain, candidates in asked.items():
            kp, ki = self.best[domain]
            out[domain] = [1.0 - abs(g.kp - kp) / 4 - abs(g.ki - ki) for g in candidates]
        return out


async def test_each_domain_gets_the_gains_its_objective_prefers() -> None:
    objective = Objective()
    result = await tune_gains(
        ["flight", "weather", "report"], objective, fixed=FIXED, episodes=10, created_at=5.0
    )
    assert result.changed and result.table is not None
    rows = result.table.rows
    assert (rows["flight"].kp, rows["flight"].ki) == (1.6, 0.05)
    assert rows["weather"] == FIXED  # already optimal: only a gain can move it, not a tie
    assert (rows["report"].kp, rows["report"].ki) == (0.3, 0.2)
    assert rows["default"] == FIXED
    assert result.best_scores["flight"] == pytest.approx(1.0)
    assert result.fixed_scores["flight"] == pytest.approx(0.8)
    assert result.episodes_used == result.evaluations * 10
    # one batch per coordinate step, every domain in it
    assert all(set(batch) <= {"flight", "weather", "report"} for batch in objective.asked)


async def test_the_same_scores_give_the_same_table() -> None:
    a = await tune_gains(["flight"], Objective(), fixed=FIXED, episodes=8, created_at=1.0)
    b = await tune_gains(["flight"], Objective(), fixed=FIXED, episodes=8, created_at=1.0)
    assert a.table == b.table


async def test_too_few_episodes_say_so_and_change_nothing() -> None:
    current = GainTable({"default": FIXED, "flight": Gains(kp=2.0)}, created_at=3.0)
    objective = Objective()
    result = await tune_gains(
        ["flight"],
        objective,
        fixed=FIXED,
        episodes=3,
        min_episodes=8,
        created_at=9.0,
        current=current,
    )
    assert not result.changed and result.table is current
    assert "too few episodes" in result.message and "3" in result.message
    assert objective.asked == []  # it did not even spend the episodes


async def test_an_unknown_gain_in_the_grid_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="levels"):
        await tune_gains(
            ["flight"],
            Objective(),
            fixed=FIXED,
            episodes=8,
            created_at=0.0,
            levels={"gain": (1.0,)},
        )
