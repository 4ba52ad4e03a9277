"""One run's context, the rules a domain implements, the policy in the loop, the agent."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from closedloop._exceptions import ConfigurationError
from closedloop.agent import (
    Agent,
    ContextSettings,
    ControlConfig,
    ErrorMetric,
    RequiredField,
    RunLimits,
    RunResult,
    Runtime,
    TaskState,
    as_tool,
    stop_on_no_progress,
    stop_on_repeats,
)
from closedloop.agent import Task as AgentTask
from closedloop.agent._control import ControllerBank
from closedloop.feedback import HandoverQueue, MemoryStore, StateStore
from closedloop.models import DEFAULT_REQUEST, Completion, Model, ModelRequest, Usage, load_model

from .._cities import CityNormaliser
from .._tasks import ReferenceTask
from .._tools import WorldTools
from ._reads import ControlledReads, reference_control
from ._state import (
    ASK_HUMAN_ACTION,
    Facts,
    Language,
    Move,
    Seen,
    Turn,
    ask_human,
    call,
    impossible,
    pick,
)
from ._text import Lang, lang_of

__all__ = ["Policy", "ReferenceAgent", "Rules", "RunContext", "TaskRunner", "task_runner"]


@dataclass
class RunContext:
    """What a domain's rules may use during one run."""

    task: ReferenceTask | None
    prompt: str
    lang: Lang
    today: dt.date
    directory: dict[str, Any]
    language: Language
    reads: ControlledReads
    world: WorldTools
    bank: ControllerBank
    control: ControlConfig


class Rules:
    """A domain's decision rules for one run; subclasses set ``tools`` and implement ``decide``."""

    tools: tuple[str, ...] = ()
    noncore: tuple[str, ...] = ()
    effects: tuple[str, ...] = ()

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    async def decide(self, turn: Turn) -> Move:  # pragma: no cover - abstract
        raise NotImplementedError

    def metrics(self) -> dict[str, ErrorMetric]:
        return {name: self.ctx.reads.metric() for name in self.tools}

    def extra_tools(self) -> list[Any]:
        return []

    def format_answer(self, text: str, fields: Mapping[str, Any]) -> str:
        return text

    def answer_check(self, value: Any) -> bool | str:
        return True

    def say(self, zh: str, en: str) -> str:
        """The text in the request's language."""
        return zh if self.ctx.lang == "zh" else en

    def directory(self, turn: Turn, key: str, tool: str, field_name: str) -> list[Any] | Move:
        """A directory the world publishes (cities, rooms, documents), fetched once per agent."""
        cached = self.ctx.directory.get(key)
        if isinstance(cached, list):
            return cached
        seen = turn.facts.seen(tool)
        if seen is not None and seen.ok and isinstance(pick(seen.value, field_name), list):
            items: list[Any] = pick(seen.value, field_name)
            self.ctx.directory[key] = items
            return items
        if seen is not None and not seen.ok:
            return ask_human(f"{tool} could not be read ({seen.meaning})")
        return call(tool)

    def first_answer(
        self,
        turn: Turn,
        tool: str,
        forms: Sequence[Mapping[str, Any]],
        complete: Callable[[Seen], bool] = lambda seen: True,
    ) -> Seen | Move:
        """The first complete answer to one question asked in equivalent forms (a city by
        name, English name, code). An empty, incomplete or failed answer is asked again in
        the next form, since the loop never repeats a call; a refusal is final."""
        last: Seen | None = None
        for args in forms:
            seen = turn.facts.seen(tool, **args)
            if seen is None:
                return call(tool, **args)
            if seen.problem is not None or (seen.ok and complete(seen)):
                return seen
            last = seen
        assert last is not None, "no form to ask"
        return last

    def city_forms(self, row: Mapping[str, Any], **arguments: Any) -> list[dict[str, Any]]:
        """One call per name the service knows the city by (name, English name, code)."""
        names = dict.fromkeys(
            str(n) for n in (row["name"], pick(row, "name_en"), row.get("code")) if n
        )
        return [{"city": name, **arguments} for name in names]

    async def places(
        self,
        turn: Turn,
        phrases: Sequence[str],
        cities: list[dict[str, Any]],
        service: str,
        needed: int = 1,
    ) -> list[tuple[dict[str, Any], str]] | Move:
        """The served city each phrase names, by rule; past the gate, by the model.

        A Latin name no rule can place is not served (Latin has no homophones); a Chinese
        one goes to the model: ``none`` is a stated impossibility, a city is a correction no
        rule can verify, so a person is asked (their approval is remembered in the state).
        ``service`` names the step type whose PID level sets the prompt's rigour. Once
        ``needed`` cities are placed, pieces no rule places are taken for stray words.
        """
        normaliser = CityNormaliser(cities)
        rows = {c["name"]: c for c in cities}
        found: list[tuple[dict[str, Any], str]] = []
        if sum(normaliser.resolve(p).resolved for p in phrases) >= needed:
            phrases = [p for p in phrases if normaliser.resolve(p).resolved]
        for phrase in phrases:
            name = normaliser.resolve(phrase).city
            if name is None and len(phrase) < 2:
                continue  # a stray character, not a place
            if name is None and not phrase.isascii():
                approved = turn.facts.approved(f"「{phrase}」")
                if isinstance(approved, str) and approved in rows:
                    name = approved  # a person confirmed the model's reading
                else:
                    guess = await self._guess_place(turn, phrase, cities, service)
                    if guess is not None:
                        question = f"「{phrase}」不是服务认识的城市名；模型读作{guess}，对吗？"
                        return ask_human(question, guess)
            if name is None:
                return impossible(
                    self.ctx.lang,
                    f"服务不认识「{phrase}」这个城市",
                    f"the service does not know the city {phrase}",
                )
            found.append((rows[name], phrase))
        return found

    async def _guess_place(
        self, turn: Turn, phrase: str, cities: list[dict[str, Any]], service: str
    ) -> str | None:
        listing = "; ".join(f"{c['name']} ({pick(c, 'name_en')})" for c in cities)
        answer = await self.ctx.language.ask(
            turn,
            "You read place names in requests to a travel service. It covers exactly these "
            f"cities: {listing}. If the name written below means one of them (a misspelling, "
            "a homophone, another name), answer that city; if it is any other place, answer "
            f"none. {await self.rigour(service)}",
            f"Request: {self.ctx.prompt}\nName as written: {phrase}",
            {
                "type": "object",
                "properties": {"city": {"enum": [c["name"] for c in cities] + ["none"]}},
                "required": ["city"],
            },
        )
        city = None if answer is None else answer.get("city")
        return city if isinstance(city, str) and city != "none" else None

    async def rigour(self, step_type: str) -> str:
        """The PID level of ``step_type`` as prompt text (a dynamic prompt)."""
        settings = self.ctx.control.schedule(await self.ctx.bank.output(step_type))
        return {
            "light": "Answer directly.",
            "medium": "Recent answers needed corrections: check every value against the text.",
            "heavy": "Recent answers were often wrong: use only values written in the text; "
            "when unsure, answer none.",
        }[settings.feedback_intensity.value]


class Policy:
    """The proposer of a reference agent: the rules decide each step from the stored state.

    It implements the ``Model`` protocol, so the loop treats it as any proposer; each
    completion carries the tokens of the language model calls that decision made.
    """

    def __init__(self, rules: Rules, store: StateStore, session_id: str, name: str) -> None:
        self.rules = rules
        self.store = store
        self.session_id = session_id
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    async def complete(self, messages: Any, request: ModelRequest = DEFAULT_REQUEST) -> Completion:
        snapshot = await self.store.get(self.session_id)
        state = TaskState.model_validate(snapshot.to_dict())
        turn = Turn(Facts(state), request.temperature, request.seed or 0)
        move = await self.rules.decide(turn)
        return Completion(
            text=json.dumps(move, ensure_ascii=False),
            parsed=move if request.response_schema is not None else None,
            usage=Usage(prompt_tokens=turn.prompt_tokens, completion_tokens=turn.completion_tokens),
            model=self._name,
            call_id=request.call_id or uuid.uuid4().hex[:16],
        )


RulesFactory = Callable[[RunContext], Rules]


class ReferenceAgent:
    """A reference agent for one domain of ``closedloop_bench.world``; reuse it across tasks.

    ``run(task)`` builds the loop for one task (a reference ``ReferenceTask`` from ``load_tasks``, or
    a prompt) and returns its ``RunResult``, which ``reference.check`` judges. ``resume``
    continues a task a person has decided on. The directory (cities, rooms, documents) and
    the PID history (in ``store``) carry over from task to task. ``today`` is the service's
    date (read from its ``/health`` when None). ``trace``: False (none), None (the runs
    directory), a path or a ``TraceSink``. ``clock``, ``wall_clock`` and ``sleep`` are
    injectable so tests never wait. ``RunResult.usage.model_calls`` counts proposals (one
    per step); the language model's own calls are in ``model.usage``.
    """

    def __init__(
        self,
        rules: RulesFactory,
        model: Model | str | None,
        *,
        base_url: str,
        domain: str,
        control: ControlConfig | None = None,
        store: StateStore | None = None,
        today: dt.date | None = None,
        max_steps: int = 24,
        deadline_s: float = 300.0,
        no_progress: int = 12,
        trace: Any = False,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.model = load_model(model) if isinstance(model, str) else model
        self.language = Language(self.model)
        self.rules = rules
        self.base_url = base_url
        self.domain = domain
        self.control = control if control is not None else reference_control()
        self.store: StateStore = store if store is not None else MemoryStore()
        self.today = today
        self.limits = RunLimits(
            max_steps=max_steps,
            deadline_s=deadline_s,
            stop=stop_on_no_progress(no_progress) | stop_on_repeats(2),
        )
        self.trace = trace
        self.clock, self.wall_clock, self.sleep = clock, wall_clock, sleep
        self.directory: dict[str, Any] = {}
        self.client = httpx.AsyncClient(transport=transport)

    async def __aenter__(self) -> ReferenceAgent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.client.aclose()

    async def _today(self) -> dt.date:
        if self.today is None:
            for attempt in range(5):  # the service's own calendar, not this machine's
                try:
                    reply = await self.client.get(f"{self.base_url.rstrip('/')}/health")
                    reply.raise_for_status()
                    self.today = dt.date.fromisoformat(str(reply.json()["today"]))
                    break
                except (httpx.HTTPError, KeyError, ValueError) as exc:
                    if attempt == 4:
                        raise ConfigurationError(
                            "base_url", self.base_url, f"no /health: {exc}"
                        ) from exc
                    await self.sleep(0.2)
        assert self.today is not None
        return self.today

    def _task(self, task: ReferenceTask | str, task_id: str, rules: Rules) -> AgentTask:
        if isinstance(task, str):
            spec = RequiredField(name="answer", check=rules.answer_check)
            return AgentTask(prompt=task, task_id=task_id, required_fields=(spec,))
        base = task.agent_task(task_id=task_id).required_fields[0]
        spec = RequiredField(
            name=base.name, description=base.description, schema=base.schema,
            check=rules.answer_check,
        )  # fmt: skip
        return AgentTask(prompt=task.prompt, task_id=task_id, required_fields=(spec,))

    async def _agent(self, task: ReferenceTask | str, session_id: str) -> tuple[Agent, Rules]:
        prompt = task if isinstance(task, str) else task.prompt
        world = WorldTools(
            self.base_url, client=self.client, store=self.store, clock=self.wall_clock
        )
        reads = ControlledReads(world, sleep=self.sleep, clock=self.wall_clock)
        ctx = RunContext(
            task=None if isinstance(task, str) else task,
            prompt=prompt,
            lang=lang_of(prompt),
            today=await self._today(),
            directory=self.directory,
            language=self.language,
            reads=reads,
            world=world,
            bank=ControllerBank(self.control, self.store),  # warm: replays the stored history
            control=self.control,
        )
        rules = self.rules(ctx)
        metrics = {**rules.metrics(), **self.control.metrics}
        control = dataclasses.replace(self.control, metrics=metrics)
        tools: list[Any] = [
            as_tool(reads.tool(n), core=False) if n in rules.noncore else reads.tool(n)
            for n in rules.tools
        ]
        tools += [world.actions[n] for n in rules.effects]
        tools += [*rules.extra_tools(), ASK_HUMAN_ACTION]
        policy = Policy(rules, self.store, session_id, f"rules:{self.domain}")
        agent = Agent(
            policy,
            tools,
            control=control,
            limits=self.limits,
            context=ContextSettings(
                format_answer=rules.format_answer, observation_chars=40_000, keep_observations=64
            ),
            runtime=Runtime(
                clock=self.clock,
                wall_clock=self.wall_clock,
                sleep=self.sleep,
                store=self.store,
                trace=self.trace,
            ),
        )
        return agent, rules

    async def run(self, task: ReferenceTask | str, *, session_id: str | None = None) -> RunResult:
        """Run one task to its halt; the result carries the answer, the steps and the halt."""
        base = task.id if isinstance(task, ReferenceTask) else self.domain
        task_id = session_id or f"{base}.{uuid.uuid4().hex[:10]}"
        agent, rules = await self._agent(task, task_id)
        return await agent.run(self._task(task, task_id, rules), session_id=task_id)

    async def resume(self, handover_id: str, task: ReferenceTask | str) -> RunResult:
        """Continue ``task`` after a person decided on its handover ``handover_id``."""
        item = await HandoverQueue(self.store).get(handover_id)
        session = item.session_id or item.task_id
        agent, rules = await self._agent(task, session)
        return await agent.resume(handover_id, task=self._task(task, item.task_id, rules))


class TaskRunner(Protocol):
    """``await run(task, model, base_url=...)``: one task with a fresh domain agent."""

    async def __call__(
        self,
        task: ReferenceTask | str,
        model: Model | str | None = None,
        *,
        base_url: str,
        store: StateStore | None = None,
        **options: Any,
    ) -> RunResult: ...


def task_runner(build: Callable[..., ReferenceAgent], domain: str) -> TaskRunner:
    """A domain's ``run_<domain>``: build a fresh agent with ``build`` and run one task on it."""

    async def run(
        task: ReferenceTask | str,
        model: Model | str | None = None,
        *,
        base_url: str,
        store: StateStore | None = None,
        **options: Any,
    ) -> RunResult:
        async with build(model, base_url=base_url, store=store, **options) as agent:
            result: RunResult = await agent.run(task)
            return result

    run.__doc__ = f"Run one {domain} task with a fresh agent."
    return run
