"""Context reduction: a model the error says is lost is shown fewer, more relevant tools."""

from __future__ import annotations

import pytest

from closedloop import ConfigurationError
from closedloop.agent import ControlConfig, Tool, as_tool, tool
from closedloop.agent._relevance import relevant_tools, shown_count
from closedloop.control import ActuatorSchedule, ActuatorSettings, schedule_context

from .conftest import call, final, make_agent, scripted, system_of


@tool
def weather(city: str) -> dict[str, object]:
    """Current weather for a city.

    Args:
        city: the city name
    """
    return {"city": city, "temp_c": 21}


@tool
def stock_price(ticker: str) -> float:
    """The last traded price of a stock.

    Args:
        ticker: the exchange ticker symbol
    """
    return 101.5


@tool
def book_meeting(room: str, hour: int) -> str:
    """Book a meeting room in the office calendar.

    Args:
        room: the room name
        hour: the starting hour, 0-23
    """
    return "booked"


@tool
def convert_currency(amount: float, to: str) -> float:
    """Convert an amount of money into another currency.

    Args:
        amount: the amount in euros
        to: the currency code wanted
    """
    return amount * 1.1


TOOLS: list[Tool] = [as_tool(f) for f in (stock_price, weather, book_meeting, convert_currency)]


def names(tools: list[Tool]) -> list[str]:
    return [t.name for t in tools]


def test_the_most_relevant_tools_are_kept_in_their_order() -> None:
    assert names(relevant_tools(TOOLS, 0.25, "What is the weather in Paris today?")) == ["weather"]
    kept = relevant_tools(TOOLS, 0.5, "book the Blue room at 10 and tell me the weather")
    assert names(kept) == ["weather", "book_meeting"]


def test_a_tool_the_run_called_stays_shown() -> None:
    kept = relevant_tools(TOOLS, 0.25, "weather in Paris", used=["convert_currency"])
    assert names(kept) == ["convert_currency"]


def test_the_whole_share_shows_every_tool() -> None:
    assert relevant_tools(TOOLS, 1.0, "anything") == TOOLS


@pytest.mark.parametrize(
    ("total", "share", "expected"), [(0, 0.5, 0), (4, 0.5, 2), (4, 0.01, 1), (3, 0.5, 2)]
)
def test_the_shown_count_rounds_up_and_keeps_one(total: int, share: float, expected: int) -> None:
    assert shown_count(total, share) == expected


def test_the_context_schedule_is_off_unless_asked_for() -> None:
    assert ActuatorSchedule()(1.0).context == 1.0
    on = schedule_context()
    assert on(0.0) == 1.0 and on(0.9) == 0.5


@pytest.mark.parametrize("share", [0.0, -0.5, 1.5])
def test_a_context_share_out_of_range_is_refused(share: float) -> None:
    with pytest.raises(ConfigurationError, match="above"):
        schedule_context(above=share)
    with pytest.raises(ConfigurationError, match="context"):
        ActuatorSettings(
            u=0.5,
            feedback_intensity=ActuatorSchedule()(0.5).feedback_intensity,
            strictness=ActuatorSchedule()(0.5).strictness,
            retry_delay_ms=100.0,
            timeout_ms=200.0,
            max_retries=0,
            context=share,
        )


async def test_a_reduced_step_shows_and_offers_only_the_relevant_tools() -> None:
    # The schedule reduces from u = 0 on, so the first step already shows half the tools.
    reduce_now = ActuatorSchedule(context=schedule_context(threshold=0.0, above=0.5))
    model = scripted(call("weather", city="Paris"), final("21 C"))
    agent, _ = make_agent(
        model, TOOLS, control=ControlConfig(schedule=reduce_now, strictness_prior="loose")
    )
    result = await agent.run("What is the weather in Paris, and convert 10 euros to dollars?")
    assert result.success
    system = system_of(model, 0)
    assert "weather" in system and "convert_currency" in system
    assert "stock_price" not in system and "book_meeting" not in system
    assert result.steps[0].actuators["context"] == 0.5


async def test_without_reduction_every_tool_is_shown() -> None:
    model = scripted(call("weather", city="Paris"), final("21 C"))
    agent, _ = make_agent(model, TOOLS, control=ControlConfig(strictness_prior="loose"))
    result = await agent.run("What is the weather in Paris?")
    system = system_of(model, 0)
    assert all(name in system for name in names(TOOLS))
    assert result.steps[0].actuators["context"] == 1.0
