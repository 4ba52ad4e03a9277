"""Agent fixtures: a hand-driven clock, canned replies, and tool sets the loop was not written for."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Literal

import pytest
import uvicorn
from pydantic import BaseModel, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from closedloop.agent import Agent, MemoryTrace, RunResult, Runtime
from closedloop.models import CallInfo, FunctionModel, Message, ScriptedModel


class FakeClock:
    """Monotonic time that moves only when told to (or when the fake sleep is awaited)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        # Give the call being watched a few turns of the loop to finish first (a watcher
        # that loses is cancelled here, as a real timer would be); then time passes at
        # once, so a deadline fires without anyone waiting for it.
        for _ in range(20):
            await asyncio.sleep(0)
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    """A JSON tool-call reply."""
    return {"tool": tool, "arguments": arguments}


def final(answer: str, **fields: Any) -> dict[str, Any]:
    """A JSON final-answer reply."""
    reply: dict[str, Any] = {"final": answer}
    if fields:
        reply["fields"] = fields
    return reply


def scripted(*answers: object, cycle: bool = False) -> ScriptedModel:
    return ScriptedModel(list(answers), cycle=cycle)


def prompt_of(model: FunctionModel | ScriptedModel, index: int) -> str:
    """The user message of the ``index``-th model call (the projected state)."""
    return model.calls[index].messages[-1].content


def system_of(model: FunctionModel | ScriptedModel, index: int) -> str:
    return model.calls[index].messages[0].content


def plain(result: RunResult | None) -> RunResult | None:
    """A typed ``AgentResult`` as the plain ``RunResult`` its trace was closed with."""
    if result is None:
        return None
    return RunResult.model_validate(result.model_dump(exclude={"output"}))


def make_agent(model: Any, tools: Sequence[Any], **options: Any) -> tuple[Agent, MemoryTrace]:
    """An agent whose trace is kept in memory, unless ``runtime`` names another trace."""
    trace = MemoryTrace()
    runtime = options.pop("runtime", None) or Runtime()
    if runtime.trace is None:
        runtime = dataclasses.replace(runtime, trace=trace)
    return Agent(model, tools, runtime=runtime, **options), trace


ReplyFn = Callable[[tuple[Message, ...], CallInfo], Any]


# --- tool set 1: a calculator -------------------------------------------------------------


def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: the first addend
        b: the second addend
    """
    return a + b


def answered(messages: tuple[Message, ...]) -> bool:
    """Whether the last message shows the result of ``add(2, 3)``."""
    return '"result"' in messages[-1].content or "5.0" in messages[-1].content


class Adder:
    """The ``add`` tool, remembering every call that ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[float, float]] = []

    def add(self, a: float, b: float) -> float:
        """Add two numbers."""
        self.ran.append((a, b))
        return a + b


def divide(numerator: float, denominator: float) -> float:
    """Divide one number by another."""
    return numerator / denominator


# --- tool set 2: a unit converter with enums and ranges -----------------------------------


class Unit(StrEnum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"
    KELVIN = "kelvin"


def convert_temperature(
    value: float,
    from_unit: Unit,
    to_unit: Unit,
    precision: Annotated[int, Field(ge=0, le=6)] = 2,
) -> dict[str, Any]:
    """Convert a temperature between units.

    Args:
        value: the temperature to convert
        from_unit: the unit of ``value``
        to_unit: the unit wanted
        precision: decimal places of the result
    """
    kelvin = {
        Unit.CELSIUS: value + 273.15,
        Unit.FAHRENHEIT: (value - 32) * 5 / 9 + 273.15,
        Unit.KELVIN: value,
    }[from_unit]
    out = {
        Unit.CELSIUS: kelvin - 273.15,
        Unit.FAHRENHEIT: (kelvin - 273.15) * 9 / 5 + 32,
        Unit.KELVIN: kelvin,
    }[to_unit]
    return {"value": round(out, precision), "unit": to_unit.value}


# --- tool set 3: a nested-object inventory API --------------------------------------------


class Dimensions(BaseModel):
    width_cm: float = Field(gt=0)
    height_cm: float = Field(gt=0)


class Item(BaseModel):
    sku: str = Field(pattern=r"^[A-Z]{3}-\d{3}$")
    quantity: int = Field(ge=1, le=1000)
    tags: list[str] = Field(default_factory=list, max_length=5)
    size: Dimensions | None = None


class Inventory:
    """A tiny in-memory inventory service whose tools take nested objects and arrays."""

    def __init__(self) -> None:
        self.stock: dict[str, int] = {"ABC-001": 5}
        self.calls: list[tuple[str, Any]] = []

    def add_items(self, items: list[Item], warehouse: Literal["north", "south"]) -> dict[str, int]:
        """Add items to a warehouse's stock.

        Args:
            items: the items to add
            warehouse: which warehouse receives them
        """
        self.calls.append(("add_items", (items, warehouse)))
        for item in items:
            self.stock[item.sku] = self.stock.get(item.sku, 0) + item.quantity
        return dict(self.stock)

    def find(self, sku_prefix: str) -> list[dict[str, Any]]:
        """Find stock whose SKU starts with a prefix."""
        self.calls.append(("find", sku_prefix))
        return [
            {"sku": s, "quantity": q} for s, q in self.stock.items() if s.startswith(sku_prefix)
        ]


@pytest.fixture
def inventory() -> Inventory:
    return Inventory()


# --- a real HTTP service on 127.0.0.1 -----------------------------------------------------


@dataclass
class Service:
    """A starlette app served by uvicorn in a thread; the test scripts its answers."""

    base_url: str = ""
    calls: dict[str, int] = field(default_factory=dict)
    rooms: list[dict[str, Any]] = field(default_factory=list)
    bookings: list[dict[str, Any]] = field(default_factory=list)


def _app(service: Service) -> Starlette:
    def count(name: str) -> None:
        service.calls[name] = service.calls.get(name, 0) + 1

    async def availability(request: Request) -> Response:
        count("availability")
        return JSONResponse({"date": request.query_params.get("date"), "rooms": service.rooms})

    async def book(request: Request) -> Response:
        count("book")
        body = await request.json()
        service.bookings.append(body)
        return JSONResponse({"booking_id": f"B{len(service.bookings)}", **body})

    async def weather(request: Request) -> Response:
        count("weather")
        city = request.path_params["city"]
        temps = {"paris": 18.5, "tokyo": 22.0, "beijing": 25.5}
        if city.lower() not in temps:
            return JSONResponse({"city": city, "forecast": []})
        return JSONResponse({"city": city, "temperature_c": temps[city.lower()]})

    return Starlette(
        routes=[
            Route("/availability", availability),
            Route("/book", book, methods=["POST"]),
            Route("/weather/{city}", weather),
        ]
    )


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    state = Service()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    state.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(
        uvicorn.Config(
            _app(state), log_level="warning", lifespan="off", timeout_graceful_shutdown=1
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def fresh_service(service: Service) -> Service:
    service.calls.clear()
    service.rooms.clear()
    service.bookings.clear()
    return service
