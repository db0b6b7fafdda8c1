"""A typed-output agent: the run's answer is a validated ``Weather``, checked by mypy --strict.

The scripted model stands in for a real one (no key needed); swap in ``from_string("openai:gpt-4o")``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from loopctl.engine import BareLoop
from loopctl.message import Message, MessagePart, Role
from loopctl.output import NativeOutput
from loopctl.testing import ScriptedClient
from loopctl.tool import ToolContext, tool


class Weather(BaseModel):
    """The weather in a city."""

    city: str
    celsius: float
    summary: str


@dataclass
class Station:
    """What the tools need, handed to each run as its deps."""

    readings: dict[str, float]


@tool
async def temperature(ctx: ToolContext[Station], city: str) -> str:
    """The latest reading of a city's thermometer.

    Args:
        city: the city's name
    """
    return f"{ctx.deps.readings[city]} °C"


model = ScriptedClient(
    [
        Message.new(Role.ASSISTANT, [MessagePart.tool_call("t1", "temperature", {"city": "Oslo"})]),
        Message.new(
            Role.ASSISTANT,
            [MessagePart.tool_call("f1", "final_result", {"city": "Oslo", "celsius": -3.5, "summary": "cold"})],
        ),
        '{"city": "Oslo", "celsius": -3.5, "summary": "still cold"}',
    ]
)
loop = BareLoop(model, [temperature])
station = Station({"Oslo": -3.5})

run = loop.run_sync("What is the weather in Oslo?", output_type=Weather, deps=station)
weather: Weather = run.output  # typed: Run[Weather]
print(weather.city, weather.celsius, weather.summary)

# The provider's own schema-constrained output instead of a final-result tool:
again = loop.run_sync("And now?", output_type=NativeOutput(Weather), deps=station)
print(again.output.summary)
