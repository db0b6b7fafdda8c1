"""How tool results go out, the same rule in every codec: in the order of the calls they answer, under the
name of the call, and marked when they failed.

- Order: Anthropic sent the results of one user message in stored order (Chat and Gemini reorder them);
  strict Anthropic-compatible endpoints refuse results out of call order. Now every codec sends them in
  call order, results split over several user messages included.
- Name (Gemini, which matches results by function name): the call's name, found by ``call_id``.
- Failure: where the API has no error flag (Chat's tool message, Responses' ``function_call_output``) the
  text starts with ``[tool error] ``; Anthropic has ``is_error``, Gemini the ``error`` key of
  ``functionResponse.response`` (google-genai ``FunctionResponse.response``).

Every body is validated against the official SDK's request type, as the codecs' own tests do.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from loopctl.message import Message, MessagePart, Role, TextPart, ToolCallPart, ToolResultPart
from loopctl.providers import anthropic, gemini, openai_chat, openai_responses
from tests.providers.responses_wire import validate_with_sdk as validate_responses
from tests.providers.test_anthropic_properties import validate_with_sdk as validate_anthropic
from tests.providers.test_gemini_properties import validate_with_the_sdk as validate_gemini
from tests.providers.test_openai_chat_properties import validate as validate_chat

CODECS: dict[str, tuple[ModuleType, str, Callable[[dict[str, Any]], None]]] = {
    "openai_chat": (openai_chat, "gpt-4o", validate_chat),
    "openai_responses": (openai_responses, "gpt-5", validate_responses),
    "anthropic": (anthropic, "claude-sonnet-4-5", validate_anthropic),
    "gemini": (gemini, "gemini-2.5-flash", validate_gemini),
}


def build(name: str, messages: list[Message]) -> dict[str, Any]:
    codec, model, validate = CODECS[name]
    body: dict[str, Any] = codec.build_request(messages, model=model)
    validate(body)
    return body


def results_sent(name: str, body: dict[str, Any]) -> list[tuple[str, Any]]:
    """``(call id or function name, output)`` of every tool result in ``body``, in the order sent."""
    if name == "openai_chat":
        return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]
    if name == "openai_responses":
        return [(i["call_id"], i["output"]) for i in body["input"] if i.get("type") == "function_call_output"]
    if name == "anthropic":
        return [
            (b["tool_use_id"], (b.get("content"), b.get("is_error", False)))
            for m in body["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_result"
        ]
    return [
        (p["functionResponse"]["name"], p["functionResponse"]["response"])
        for c in body["contents"]
        for p in c["parts"]
        if "functionResponse" in p
    ]


def call(call_id: str, name: str) -> ToolCallPart:
    return ToolCallPart(id=call_id, name=name, input={"q": call_id})


def result(call_id: str, name: str, output: str, is_error: bool = False) -> ToolResultPart:
    return ToolResultPart(call_id=call_id, name=name, output=output, is_error=is_error)


def user(*parts: MessagePart) -> Message:
    return Message.new(Role.USER, parts)


NAMES = list(CODECS)


@pytest.mark.parametrize("name", NAMES)
def test_results_go_out_in_the_order_of_the_calls(name: str) -> None:
    conversation = [
        Message.user("Look these up."),
        Message.new(Role.ASSISTANT, [call("toolu_a", "alpha"), call("toolu_b", "beta"), call("toolu_c", "gamma")]),
        user(result("toolu_c", "gamma", "C"), result("toolu_a", "alpha", "A"), TextPart(text="and")),
        user(result("toolu_b", "beta", "B")),
    ]
    sent = results_sent(name, build(name, conversation))
    expected = {
        "openai_chat": [("toolu_a", "A"), ("toolu_b", "B"), ("toolu_c", "C")],
        "openai_responses": [("toolu_a", "A"), ("toolu_b", "B"), ("toolu_c", "C")],
        "anthropic": [("toolu_a", ("A", False)), ("toolu_b", ("B", False)), ("toolu_c", ("C", False))],
        "gemini": [("alpha", {"output": "A"}), ("beta", {"output": "B"}), ("gamma", {"output": "C"})],
    }[name]
    assert sent == expected


@pytest.mark.parametrize("name", NAMES)
def test_a_failed_result_carries_its_failure(name: str) -> None:
    conversation = [
        Message.user("Read it."),
        Message.new(Role.ASSISTANT, [call("toolu_a", "read_file"), call("toolu_b", "read_file")]),
        user(result("toolu_a", "read_file", "No such file", is_error=True), result("toolu_b", "read_file", "ok")),
    ]
    sent = results_sent(name, build(name, conversation))
    expected = {
        "openai_chat": [("toolu_a", "[tool error] No such file"), ("toolu_b", "ok")],
        "openai_responses": [("toolu_a", "[tool error] No such file"), ("toolu_b", "ok")],
        "anthropic": [("toolu_a", ("No such file", True)), ("toolu_b", ("ok", False))],
        "gemini": [("read_file", {"error": "No such file"}), ("read_file", {"output": "ok"})],
    }[name]
    assert sent == expected


def test_gemini_results_go_out_under_their_calls_names_whatever_name_they_were_stored_with() -> None:
    conversation = [
        Message.user("Look these up."),
        Message.new(Role.ASSISTANT, [call("a", "alpha"), call("b", "beta")]),
        user(result("a", "beta", "A"), result("b", "unknown", "B")),
    ]
    assert results_sent("gemini", build("gemini", conversation)) == [
        ("alpha", {"output": "A"}),
        ("beta", {"output": "B"}),
    ]
