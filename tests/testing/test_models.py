"""Test doubles for agents: override() for code holding a module-level agent, TestModel (every tool called with
valid arguments, then an answer), a priced scripted model, and the pairing rules the doubles apply."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from loopctl import Agent
from loopctl.engine import OutcomeKind, RunConfig, UsageLimits
from loopctl.errors import UnsupportedContent
from loopctl.message import Message, MessagePart, Role, ToolResultPart
from loopctl.output import NativeOutput
from loopctl.providers import ModelRequest
from loopctl.response import Usage
from loopctl.testing import ScriptedClient, TestModel
from loopctl.testing.models import example_for
from loopctl.tool import ToolContext, tool


@dataclass
class Shop:
    owner: str


@tool
def greet(ctx: ToolContext[Shop], name: str) -> str:
    """Greet someone."""
    return f"{ctx.deps.owner} greets {name}"


support = Agent(ScriptedClient(["never used in the tests"]), tools=[greet], deps_type=Shop, name="support")


def handle_request(text: str) -> str:
    """Application code holding the module-level agent."""
    return support.run_sync(text, deps=Shop("the real owner")).output


def test_override_replaces_the_model_and_deps_of_a_module_level_agent_in_a_test() -> None:
    call = Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "greet", {"name": "Ada"})])
    double = ScriptedClient([call, "Hello Ada!"])
    with support.override(model=double, deps=Shop("a test owner")):
        assert handle_request("greet Ada") == "Hello Ada!"
    result = next(p for p in double.requests[1].messages[-1].parts if isinstance(p, ToolResultPart))
    assert str(result.output) == "a test owner greets Ada"
    assert support.model is not double  # the agent itself is unchanged


async def test_an_override_holds_only_in_its_own_context() -> None:
    agent = Agent(ScriptedClient(["real"]))
    inside: list[str] = []

    async def overridden() -> None:
        with agent.override(model=ScriptedClient(["double"])):
            await asyncio.sleep(0.01)
            inside.append((await agent.run("x")).output)

    task = asyncio.ensure_future(overridden())
    await asyncio.sleep(0)
    assert (await agent.run("y")).output == "real"
    await task
    assert inside == ["double"]


class Address(BaseModel):
    city: str
    zip_code: Annotated[str, Field(min_length=5)]


@tool
def book(
    ctx: ToolContext[None],
    guests: Annotated[int, Field(ge=2)],
    day: date,
    kind: Literal["table", "room"],
    address: Address,
    tags: list[str],
    note: str | None = None,
) -> str:
    """Book something."""
    return f"{guests} {day} {kind} {address.city} {tags} {note}"


@tool
def ping() -> str:
    """Ping."""
    return "pong"


async def test_test_model_calls_every_tool_with_valid_arguments_then_answers() -> None:
    model = TestModel()
    run = await Agent(model, tools=[book, ping]).run("go")
    assert run.ok
    calls = run.turns[0].output.tool_calls()
    assert [c.name for c in calls] == ["book", "ping"]
    results = {r.call.name: r.result for r in run.turns[0].tool_calls}
    assert not results["book"].is_error, results["book"].output  # the arguments validated
    assert str(results["book"].output) == "2 2024-01-01 table a [] None"
    assert run.output == '{"book":"2 2024-01-01 table a [] None","ping":"pong"}'


class Verdict(BaseModel):
    ok: bool
    score: Annotated[int, Field(ge=1, le=5)]


async def test_test_model_answers_typed_output_by_tool_and_natively() -> None:
    run = await Agent(TestModel(), tools=[ping], output_type=Verdict).run("judge")
    assert run.output == Verdict(ok=False, score=1)
    native = await Agent(TestModel(), output_type=NativeOutput(Verdict)).run("judge")
    assert native.output == Verdict(ok=False, score=1)


async def test_test_model_calls_only_the_tools_named() -> None:
    run = await Agent(TestModel(call_tools=["ping"], text="done"), tools=[book, ping]).run("go")
    assert [c.name for c in run.turns[0].output.tool_calls()] == ["ping"]
    assert run.output == "done"


async def test_a_priced_scripted_model_gives_costs_and_trips_a_cost_limit_offline() -> None:
    usage = Usage(input_tokens=1000, output_tokens=100)
    call = Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "ping", {})])
    client = ScriptedClient([call, "done"], usage=usage, price=("3", "15"))  # USD per million tokens
    run = await Agent(client, tools=[ping]).run("go")
    assert run.cost == Decimal("0.0045") * 2
    limited_client = ScriptedClient([call, call, "done"], usage=usage, price=("3", "15"))
    limited = await Agent(limited_client, tools=[ping]).run(
        "go", config=RunConfig(limits=UsageLimits(cost=Decimal("0.005")), loop_detection=None)
    )
    assert limited.outcome.kind is OutcomeKind.LIMIT_REACHED
    assert len(limited_client.requests) == 2
    priced = await Agent(TestModel(price=("1", "1")), tools=[ping]).run("go")
    assert priced.cost == Decimal(60) / 1_000_000 * 2


async def test_test_model_refuses_a_conversation_whose_calls_and_results_do_not_pair() -> None:
    call = Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "ping", {})])
    request = ModelRequest(
        messages=[Message.user("go"), call, Message.user("no result"), Message.assistant("ok"), Message.user("on")]
    )
    with pytest.raises(UnsupportedContent, match="c1"):
        await TestModel().generate(request)


def test_example_for_follows_refs_unions_and_bounds() -> None:
    schema = Address.model_json_schema()
    assert Address.model_validate(example_for(schema)) == Address(city="a", zip_code="aaaaa")
    assert example_for({"anyOf": [{"type": "null"}, {"type": "integer", "exclusiveMinimum": 3}]}) == 4
    assert example_for({"type": "array", "items": {"type": "string"}, "minItems": 2}) == ["a", "a"]
