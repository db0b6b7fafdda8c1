"""Typed output end to end: each mode through the four real clients and the fake provider server, every
request the server received validated against the official SDK's request types (issue 10, item 1)."""

from __future__ import annotations

import warnings
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from loopctl.engine import BareLoop, OutcomeKind, OutputRetry, Run, RunConfig, SessionConfig
from loopctl.errors import OutputInvalid, OutputValidationError
from loopctl.message import Message, MessagePart, Role, ToolResultPart, check_conversation
from loopctl.output import NativeOutput, OutputTool, PromptedOutput, RejectOutput, StrictSchemaWarning
from loopctl.testing import FakeProviderServer
from loopctl.tool import tool
from tests.fake_clients import KINDS, make_client
from tests.providers.responses_wire import validate_with_sdk as validate_responses
from tests.providers.test_anthropic_properties import validate_with_sdk as validate_anthropic
from tests.providers.test_gemini_properties import validate_with_the_sdk as validate_gemini
from tests.providers.test_openai_chat_properties import validate as validate_chat

FAST = RunConfig(retry_initial_delay=0.001, retry_max_delay=0.01)


class City(BaseModel):
    """A city and how many people live there."""

    name: str
    population: int


class Cat(BaseModel):
    kind: Literal["cat"]
    meows: int


class Dog(BaseModel):
    kind: Literal["dog"]
    barks: int


class Loose(BaseModel):
    name: str
    counts: dict[str, int]


PARIS = {"name": "Paris", "population": 2_100_000}


def validate_request(kind: str, body: dict[str, Any]) -> None:
    """``body`` validates against the SDK's request type of ``kind``'s API."""
    if kind == "openai":
        validate_chat(body)
    elif kind == "openai-responses":
        validate_responses(body)
    elif kind == "anthropic":
        validate_anthropic(body)
    else:
        validate_gemini(body)


def final(args: dict[str, Any], call_id: str = "out1", name: str = "final_result") -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(call_id, name, args)])


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def run_against(
    kind: str, script: list[Any], *, tools: tuple[Any, ...] = (), config: RunConfig = FAST, **run: Any
) -> tuple[Run[Any], BareLoop, FakeProviderServer]:
    with FakeProviderServer(script) as server:
        client = make_client(kind, server)
        loop = BareLoop(client, tools, SessionConfig(system_prompt="Be brief."))
        try:
            result = await loop.run("Name a big city.", config, **run)
        finally:
            await client.aclose()
    for request in server.requests:
        validate_request(kind, request.body)
    assert check_conversation(list(loop.history)) == []
    return result, loop, server


def sent_tool_names(kind: str, body: dict[str, Any]) -> list[str]:
    tools = body.get("tools", [])
    if kind == "gemini":
        return [d["name"] for t in tools for d in t["functionDeclarations"]]
    if kind == "openai":
        return [t["function"]["name"] for t in tools]
    return [t["name"] for t in tools]


FORCED = {
    "openai": {"type": "function", "function": {"name": "final_result"}},
    "openai-responses": {"type": "function", "name": "final_result"},
    "anthropic": {"type": "tool", "name": "final_result"},
}


# --- OutputTool ------------------------------------------------------------------------------------------------


async def test_output_tool_forces_the_final_result_call_and_retries_an_invalid_one(kind: str) -> None:
    script = [final({"name": "Paris", "population": "many"}), final(PARIS, "out2")]
    run, loop, server = await run_against(kind, script, output_type=City)
    assert run.outcome.kind is OutcomeKind.COMPLETED
    assert run.output == City(**PARIS)
    first = server.requests[0].body
    assert sent_tool_names(kind, first) == ["final_result"]
    if kind == "gemini":
        assert first["toolConfig"]["functionCallingConfig"] == {"mode": "ANY", "allowedFunctionNames": ["final_result"]}
    else:
        assert first["tool_choice"] == FORCED[kind]
    # The invalid call's result went back as an error the model could fix.
    (rejected,) = [p for p in loop.history[2].parts if isinstance(p, ToolResultPart)]
    assert rejected.is_error is True
    assert str(rejected.output) == (
        "The answer is not valid: population: Input should be a valid integer, unable to parse string as an "
        "integer. Fix it by calling final_result again."
    )
    (accepted,) = [p for p in loop.history[4].parts if isinstance(p, ToolResultPart)]
    assert (str(accepted.output), accepted.is_error) == ("Final result processed.", False)
    assert len(server.requests) == 2


async def test_output_tool_with_other_tools_requires_a_tool_call_and_ends_on_the_final_one(kind: str) -> None:
    looked_up: list[str] = []

    @tool
    async def lookup(city: str) -> str:
        """Population of a city."""
        looked_up.append(city)
        return "2.1 million"

    script = [
        Message.new(Role.ASSISTANT, [MessagePart.tool_call("l1", "lookup", {"city": "Paris"})]),
        final(PARIS),
    ]
    run, _, server = await run_against(kind, script, tools=(lookup,), output_type=City)
    assert (run.output, looked_up) == (City(**PARIS), ["Paris"])
    first = server.requests[0].body
    assert sent_tool_names(kind, first) == ["lookup", "final_result"]
    expected = {"openai": "required", "openai-responses": "required", "anthropic": {"type": "any"}}
    if kind == "gemini":
        assert first["toolConfig"]["functionCallingConfig"] == {"mode": "ANY"}
    else:
        assert first["tool_choice"] == expected[kind]


async def test_a_union_of_models_is_one_wrapped_schema_and_validates_to_the_member(kind: str) -> None:
    run, _, server = await run_against(kind, [final({"response": {"kind": "dog", "barks": 3}})], output_type=Cat | Dog)
    assert run.output == Dog(kind="dog", barks=3)
    assert sent_tool_names(kind, server.requests[0].body) == ["final_result"]


# --- NativeOutput ---------------------------------------------------------------------------------------------


def native_schema(kind: str, body: dict[str, Any]) -> tuple[Any, Any]:
    """(the schema sent, its strict flag or None)."""
    if kind == "openai":
        spec = body["response_format"]["json_schema"]
        return spec["schema"], spec["strict"]
    if kind == "openai-responses":
        spec = body["text"]["format"]
        return spec["schema"], spec["strict"]
    if kind == "anthropic":
        return body["output_config"]["format"]["schema"], None
    return body["generationConfig"]["responseJsonSchema"], None


async def test_native_output_sends_the_providers_schema_and_reads_the_text(kind: str) -> None:
    run, _, server = await run_against(
        kind, ['{"name": "Paris", "population": 2100000}'], output_type=NativeOutput(City)
    )
    assert run.output == City(**PARIS)
    schema, strict = native_schema(kind, server.requests[0].body)
    assert set(schema["properties"]) == {"name", "population"}
    assert strict is (True if kind.startswith("openai") else None)
    assert "tools" not in server.requests[0].body  # no tool support needed


async def test_native_output_retries_without_tools_then_ends_output_invalid(kind: str) -> None:
    events: list[Any] = []
    script = ['{"name": "Paris"}', '{"name": "Paris", "population": "a lot"}']
    with FakeProviderServer(script) as server:
        client = make_client(kind, server)
        loop = BareLoop(client, observers=[events.append])
        try:
            run = await loop.run("Name a big city.", FAST, output_type=NativeOutput(City))
        finally:
            await client.aclose()
    for request in server.requests:
        validate_request(kind, request.body)
        assert "tools" not in request.body and "tool_choice" not in request.body
    assert run.outcome.kind is OutcomeKind.OUTPUT_INVALID
    assert run.outcome.error == "population: Input should be a valid integer, unable to parse string as an integer"
    assert isinstance(run.error, OutputValidationError)
    assert run.error.errors == ["population: Input should be a valid integer, unable to parse string as an integer"]
    with pytest.raises(OutputInvalid) as info:
        _ = run.output
    assert info.value.errors == run.error.errors
    # The retry was a plain user message: no tool semantics for a server without tools.
    history = list(loop.history)
    assert [m.role for m in history] == [Role.USER, Role.ASSISTANT, Role.USER, Role.ASSISTANT]
    assert (
        history[2].text_content() == "The answer is not valid: population: Field required. Fix it by answering again."
    )
    assert [(e.turn, e.attempt) for e in events if isinstance(e, OutputRetry)] == [(1, 1), (2, 2)]
    assert len(server.requests) == 2
    assert check_conversation(history) == []


@pytest.mark.parametrize("kind", ["openai", "openai-responses"])
async def test_a_type_strict_mode_cannot_express_goes_non_strict_with_a_warning_never_a_400(kind: str) -> None:
    reply = '{"name": "x", "counts": {"a": 1}}'
    with pytest.warns(StrictSchemaWarning, match=r"schema\.properties\.counts: strict mode cannot express"):
        run, _, server = await run_against(kind, [reply], output_type=NativeOutput(Loose))
    assert run.output == Loose(name="x", counts={"a": 1})
    schema, strict = native_schema(kind, server.requests[0].body)
    assert strict is False
    assert schema["properties"]["counts"]["additionalProperties"] == {"type": "integer"}


# --- PromptedOutput -------------------------------------------------------------------------------------------


async def test_prompted_output_puts_the_schema_in_the_instructions_and_parses_a_fenced_answer(kind: str) -> None:
    reply = 'Here you go:\n```json\n{"name": "Paris", "population": 2100000}\n```'
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run, _, server = await run_against(kind, [reply], output_type=PromptedOutput(City))
    assert run.output == City(**PARIS)
    body = server.requests[0].body
    assert "tools" not in body
    assert '"population":{"title":"Population","type":"integer"}' in str(body).replace("'", '"').replace(" ", "")
    assert run.text == reply


# --- the output validator -------------------------------------------------------------------------------------


async def test_an_output_validator_can_reject_a_valid_value_with_a_message_for_the_model(kind: str) -> None:
    def big_only(city: City) -> City:
        if city.population < 1_000_000:
            raise RejectOutput(f"{city.name} is not big; name a city of over a million people.")
        return city

    script = [final({"name": "Oslo", "population": 700_000}), final(PARIS, "out2")]
    run, loop, _ = await run_against(kind, script, output_type=OutputTool(City), output_validator=big_only)
    assert run.output == City(**PARIS)
    (rejected,) = [p for p in loop.history[2].parts if isinstance(p, ToolResultPart)]
    assert (str(rejected.output), rejected.is_error) == (
        "Oslo is not big; name a city of over a million people.",
        True,
    )
