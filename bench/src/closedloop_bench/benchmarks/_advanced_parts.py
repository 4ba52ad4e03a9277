"""The advanced-control variants as faults-benchmark strategies.

Each wraps closedloop's own loop (``ClosedLoopAgent`` with the ReAct planner, ADRC on)
and changes one thing: the gains (a table or a predictor picks them), a pre-warmed f_est
and PID history, or a tiered response (a cheap re-read of empty answers once the run's
f_est reaches a warning level, before the dual-verification level). Every variant records
per-episode extras (first-step error, the highest level reached, where the gains came
from) in a shared :class:`Extras`, keyed like the benchmark's episodes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from closedloop.agent import (
    Agent,
    ControlConfig,
    FingerprintCache,
    ReadRetry,
    RunResult,
    StepRecord,
    TraceSink,
    prewarm,
)
from closedloop.agent._prewarm import query_features
from closedloop.control import GainPredictor, GainTable, Protocol
from closedloop.feedback import MemoryStore
from closedloop.perception import Observation, ObservationStatus

from ..reference import DOMAIN_TOOLS, WorldTools
from ..reference.report_team import run_report_team
from ._closed import ClosedLoopAgent
from ._closed import react_agent as closed_react_agent
from ._strategies import Episode, Outcome
from ._testmodel import IdealReference

__all__ = [
    "DOMAINS",
    "Extras",
    "GainVariant",
    "PlainVariant",
    "PrewarmVariant",
    "TeamVariant",
    "TieredVariant",
    "episode_key",
]

DOMAINS = tuple(sorted(DOMAIN_TOOLS))
ControlEdit = Callable[[Episode, ControlConfig], ControlConfig]


def episode_key(strategy: str, task_id: str) -> tuple[str, str]:
    return (strategy, task_id)


@dataclass(slots=True)
class Extras:
    """Per-episode figures the benchmark's ``EpisodeResult`` does not carry, by strategy
    and task (one profile at a time, each task once per strategy)."""

    rows: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def put(self, strategy: str, episode: Episode, **values: Any) -> None:
        self.rows.setdefault(episode_key(strategy, episode.task.id), {}).update(values)

    def get(self, strategy: str, task_id: str) -> dict[str, Any]:
        return self.rows.get(episode_key(strategy, task_id), {})


class _NullTrace:
    async def write(self, record: StepRecord) -> None:
        return None

    async def close(self, result: RunResult) -> None:
        return None


# The advanced bench's rows (bench/results/advanced.json) were measured with the agent's
# default read retry, not the faults bench's ``READ_RETRY`` (which also retries drifted
# answers); kept so the published rows stay reproducible.
_ADVANCED_READ_RETRY = ReadRetry()


def react_agent(
    episode: Episode,
    control: ControlConfig,
    *,
    tools: Any = None,
    trace: TraceSink | None = None,
) -> Agent:
    """The ReAct agent of :class:`ClosedLoopAgent`, with a control, tools or trace of ours."""
    return closed_react_agent(
        episode, control, tools=tools, trace=trace, read_retry=_ADVANCED_READ_RETRY
    )


def _peak_level(result: RunResult | None, warn: float | None = None) -> float:
    """The highest level a run reached: protocol level 0–3, 0.5 for the warning tier."""
    if result is None or not result.steps:
        return 0.0
    peak = max(Protocol(s.protocol).level for s in result.steps)
    if peak == 0 and warn is not None and any(s.f_est >= warn for s in result.steps):
        return 0.5
    return float(peak)


class PlainVariant:
    """closedloop as configured by default (ADRC on, ReAct planner): the reference row."""

    def __init__(self, name: str, extras: Extras) -> None:
        self.name = name
        self.label = name
        self.extras = extras
        self.inner = ClosedLoopAgent(adrc=True, planner="react", builder=self.build)

    def edit(self, episode: Episode, control: ControlConfig) -> ControlConfig:
        return control

    def build(self, episode: Episode, control: ControlConfig) -> Agent:
        return react_agent(episode, self.edit(episode, control))

    async def run(self, episode: Episode) -> Outcome:
        outcome = await self.inner.run(episode)
        self.record(episode, outcome)
        return outcome

    def record(self, episode: Episode, outcome: Outcome, **more: Any) -> None:
        run = outcome.run
        first = run.steps[0].error if run is not None and run.steps else None
        self.extras.put(
            self.name,
            episode,
            first_error=first,
            level=_peak_level(run),
            run=run,
            **more,
        )


class GainVariant(PlainVariant):
    """Gains from a table (by domain) or a predictor (by query features)."""

    def __init__(
        self,
        name: str,
        extras: Extras,
        gains: GainTable | GainPredictor | str,
        *,
        max_age_s: float | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(name, extras)
        self.gains = gains
        self.max_age_s = max_age_s
        self.clock = clock

    def edit(self, episode: Episode, control: ControlConfig) -> ControlConfig:
        task = episode.task
        extra: dict[str, Any] = {} if self.clock is None else {"gain_clock": self.clock}
        adapted = dataclasses.replace(
            control,
            gains=self.gains,
            gain_key=task.domain,
            gain_features=query_features(task.prompt, task.domain, DOMAINS),
            gain_max_age_s=self.max_age_s,
            **extra,
        )
        self.extras.put(
            self.name, episode, gain_source=adapted.gain_source, gain_warning=adapted.gain_warning
        )
        return adapted


class PrewarmVariant(PlainVariant):
    """A prior f_est and PID history from earlier episodes' fingerprints (shared memory)."""

    def __init__(self, name: str, extras: Extras, *, ttl_s: float = 3600.0) -> None:
        super().__init__(name, extras)
        self.memory = MemoryStore()
        self.cache = FingerprintCache(self.memory, ttl_s=ttl_s)
        self.priors: dict[str, float | None] = {}
        self.enabled = True

    def edit(self, episode: Episode, control: ControlConfig) -> ControlConfig:
        return dataclasses.replace(control, prior_f_est=self.priors.pop(episode.task.id, None))

    async def run(self, episode: Episode) -> Outcome:
        if not self.enabled:
            outcome = await self.inner.run(episode)
            self.record(episode, outcome)
            return outcome
        task = episode.task
        tools = DOMAIN_TOOLS[task.domain]
        warm = await prewarm(
            self.cache, query=task.prompt, family=task.domain, tools=tools, history=self.memory
        )
        await warm.seed(episode.store)
        self.priors[task.id] = warm.f_est
        outcome = await self.inner.run(episode)
        if outcome.run is not None:
            await self.cache.remember_run(outcome.run, query=task.prompt, family=task.domain)
        for name in tools:  # the run's PID histories become the next runs' signals
            record = await episode.store.record_get("control", name)
            if record is not None:
                await self.memory.record_put("control", name, dict(record.value))
        self.record(episode, outcome, prior_f_est=warm.f_est)
        return outcome


class _Level:
    def __init__(self) -> None:
        self.f_est = 0.0
        self.checks = 0
        self.rereads_fixed = 0


class _LevelSink:
    """Follows the run's f_est from its step records (the tools read it)."""

    def __init__(self, level: _Level, inner: TraceSink | None) -> None:
        self.level = level
        self.inner = inner

    async def write(self, record: StepRecord) -> None:
        self.level.f_est = record.f_est
        if self.inner is not None:
            await self.inner.write(record)

    async def close(self, result: RunResult) -> None:
        if self.inner is not None:
            await self.inner.close(result)


class _CheckedTools:
    """``WorldTools`` whose reads get a cheap check at the warning level: an empty answer
    (a 200 that carried nothing, which the loop's sensing lets through) is read once more."""

    def __init__(self, tools: WorldTools, level: _Level, warn: float) -> None:
        self._tools = tools
        self._level = level
        self._warn = warn

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._tools, name)
        if name not in DOMAIN_TOOLS_FLAT or name in self._tools.actions:
            return found
        return self._checked(found)

    def _checked(
        self, method: Callable[..., Awaitable[Observation]]
    ) -> Callable[..., Awaitable[Observation]]:
        level, warn = self._level, self._warn

        @functools.wraps(method)
        async def read(**arguments: Any) -> Observation:
            observation = await method(**arguments)
            if level.f_est >= warn and observation.status is ObservationStatus.EMPTY:
                level.checks += 1
                again = await method(**arguments)
                if again.status is not ObservationStatus.EMPTY:
                    level.rereads_fixed += 1
                return again
            return observation

        return read


DOMAIN_TOOLS_FLAT = frozenset(n for names in DOMAIN_TOOLS.values() for n in names)


class TieredVariant(PrewarmVariant):
    """A warning tier below dual verification: from ``warn`` on, empty answers are re-read
    (tool requests, no model calls). ``prewarmed`` adds the pre-warm's prior f_est."""

    def __init__(self, name: str, extras: Extras, *, warn: float, prewarmed: bool) -> None:
        super().__init__(name, extras)
        self.warn = warn
        self.enabled = prewarmed
        self.levels: dict[str, _Level] = {}

    def build(self, episode: Episode, control: ControlConfig) -> Agent:
        level = self.levels[episode.task.id]
        control = self.edit(episode, control)
        level.f_est = 0.0 if control.prior_f_est is None else control.prior_f_est
        return react_agent(
            episode,
            control,
            tools=_CheckedTools(episode.tools, level, self.warn),
            trace=_LevelSink(level, episode.trace),
        )

    async def run(self, episode: Episode) -> Outcome:
        self.levels[episode.task.id] = level = _Level()
        outcome = await super().run(episode)
        self.levels.pop(episode.task.id, None)
        run = outcome.run
        peak = _peak_level(run, self.warn)
        if peak == 0 and level.checks:
            peak = 0.5
        self.extras.put(self.name, episode, level=peak, checks=level.checks)
        return outcome


class TeamVariant:
    """The report task as a team of sub-agents (``closedloop_bench.reference.report_team``)."""

    def __init__(self, name: str, extras: Extras, mode: str, reference: IdealReference) -> None:
        self.name = name
        self.label = name
        self.extras = extras
        self.mode = mode
        self.reference = reference

    async def run(self, episode: Episode) -> Outcome:
        expected = await self.reference.expected(episode.task)
        team = await run_report_team(
            episode.task,
            episode.tools,
            expected=expected,
            mode=self.mode,
            attempts=episode.limits.attempts,
            sleep=episode.sleep,
        )
        self.extras.put(
            self.name, episode, replans=len(team.replans), peak=team.peak, calls=team.calls
        )
        handed = team.answer.handed_over
        return Outcome(
            answer=team.answer,
            halt="handover" if handed else "final",
            steps=team.calls,
            handed_over=handed,
            planner=f"team:{self.mode}",
        )
