"""A small MCP weather server for the examples: run it with ``python mcp_weather_server.py``.

It speaks MCP over stdio (the client starts it). ``forecast`` is annotated read-only, so
closedloop may ask it again after a fault; ``book_umbrella`` changes the world and is not.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

FORECASTS = {
    "paris": [{"day": "today", "temp_c": 18.5, "sky": "cloudy"}],
    "oslo": [{"day": "today", "temp_c": 4.0, "sky": "snow"}],
}
server = MCPServer("weather", log_level="ERROR")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def forecast(city: str) -> list[dict[str, object]]:
    """The forecast for a city (an empty list when the city is unknown)."""
    return FORECASTS.get(city.lower(), [])


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def book_umbrella(city: str) -> dict[str, str]:
    """Book an umbrella for pick-up in a city."""
    return {"booked": city, "pick_up": "the station"}


if __name__ == "__main__":
    server.run()
