"""Zero-valued optional objects are absent, not content (``providers._common.is_zero_valued``).

Snowflake Cortex's OpenAI-compatible endpoint writes every optional field of a reply zero-valued instead of
leaving it out (a Go encoder without ``omitempty``): ``"audio": {"id": "", "data": "", "expires_at": 0,
"transcript": ""}`` made the Chat codec raise "the reply holds audio", and ``"function_call": {"name": "",
"arguments": ""}`` became a nameless tool call with stop reason ``tool_call``. The same reading covers the
siblings: a zero-valued ``error`` object beside a reply (Chat, Responses, Gemini, Anthropic), a tool call
``"type": ""``, ``""`` ids, signatures, finish reasons and models.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopctl.message import Message, TextPart, ThinkingPart, ToolCallPart
from loopctl.providers import anthropic, gemini, openai_chat, openai_responses
from loopctl.providers._common import is_zero_valued
from loopctl.response import StopReason

AUDIO = {"id": "", "data": "", "expires_at": 0, "transcript": ""}
LEGACY = {"name": "", "arguments": ""}


def snowflake_message(**fields: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "Hello.",
        "refusal": "",
        "reasoning_content": "",
        "audio": AUDIO,
        "function_call": LEGACY,
        "tool_calls": [],
        "annotations": [],
        **fields,
    }


def snowflake_reply(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "",
        "object": "chat.completion",
        "created": 0,
        "model": "",
        "system_fingerprint": "",
        "service_tier": "",
        "error": {"code": 0, "message": "", "type": "", "param": ""},
        "choices": [{"index": 0, "finish_reason": finish, "logprobs": {"content": None}, "message": message}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }


@pytest.mark.parametrize(
    ("value", "zero"),
    [
        (None, True), ("", True), (0, True), (0.0, True), (False, True), ([], True), ({}, True),
        (AUDIO, True), ({"a": {"b": [], "c": None}}, True),
        ("x", False), (1, False), (True, False), ([0], False), ({"data": "AAAA"}, False), ({"a": {"b": 1}}, False),
    ],
)  # fmt: skip
def test_is_zero_valued(value: Any, zero: bool) -> None:
    assert is_zero_valued(value) is zero


def test_a_chat_reply_with_every_optional_field_zero_valued_is_its_text() -> None:
    response = openai_chat.parse_response(snowflake_reply(snowflake_message()))
    assert response.message == Message.assistant("Hello.")
    assert response.stop_reason is StopReason.END_TURN
    assert (response.id, response.model, response.raw_stop_reason) == (None, None, "stop")
    assert response.usage.input_tokens == 12


def test_zero_valued_fields_beside_a_real_tool_call_add_no_call() -> None:
    call = {"id": "call_1", "type": "", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    message = snowflake_message(content="", tool_calls=[call, {"id": "", "type": "", "function": LEGACY}])
    response = openai_chat.parse_response(snowflake_reply(message, finish="tool_calls"))
    assert response.message.parts == (ToolCallPart(id="call_1", name="lookup", input={"q": "x"}),)
    assert response.stop_reason is StopReason.TOOL_CALL


def test_real_audio_is_still_refused() -> None:
    with pytest.raises(Exception, match="the reply holds audio"):
        openai_chat.parse_response(snowflake_reply(snowflake_message(audio={**AUDIO, "data": "UklGRg=="})))


def sse(*events: Any, done: bool = True) -> list[bytes]:
    data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return [data + (b"data: [DONE]\n\n" if done else b"")]


def test_a_chat_stream_with_zero_valued_deltas_is_its_text() -> None:
    def chunk(delta: dict[str, Any], finish: str = "") -> dict[str, Any]:
        full = {"role": "assistant", "content": "", "refusal": "", "reasoning_content": "", "function_call": LEGACY,
                "tool_calls": [{"index": 0, "id": "", "type": "", "function": LEGACY}], **delta}  # fmt: skip
        return {"id": "", "model": "", "choices": [{"index": 0, "delta": full, "finish_reason": finish}]}

    response = openai_chat.parse_stream(sse(chunk({"content": "Hel"}), chunk({"content": "lo."}), chunk({}, "stop")))
    assert response.message == Message.assistant("Hello.")
    assert response.stop_reason is StopReason.END_TURN


def test_a_chat_stream_call_with_an_empty_type_is_a_function_call() -> None:
    first = {"index": 0, "id": "call_1", "type": "", "function": {"name": "lookup", "arguments": ""}}
    rest = {"index": 0, "id": "", "type": "", "function": {"name": "", "arguments": '{"q": 1}'}}
    stream = sse(
        {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [first]}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [rest]}, "finish_reason": "tool_calls"}]},
    )
    response = openai_chat.parse_stream(stream)
    assert response.message.parts == (ToolCallPart(id="call_1", name="lookup", input={"q": 1}),)


def test_a_responses_reply_with_a_zero_valued_error_and_empty_ids_reads_as_its_items() -> None:
    body = {
        "id": "resp_1",
        "status": "completed",
        "error": {"code": "", "message": ""},
        "incomplete_details": {"reason": ""},
        "output": [
            {"type": "reasoning", "id": "", "summary": [], "encrypted_content": ""},
            {"type": "message", "id": "", "role": "assistant", "content": [{"type": "output_text", "text": "Hi."}]},
        ],
    }
    response = openai_responses.parse_response(body)
    assert response.message.parts == (ThinkingPart(text="", provider="openai"), TextPart(text="Hi."))
    # So nothing sends an "id": "" back (the API would refuse it as an unknown item).
    sent = openai_responses.build_request([Message.user("x"), response.message, Message.user("y")], model="gpt-5")
    assert all(item.get("id") != "" for item in sent["input"])


def test_a_gemini_reply_beside_a_zero_valued_error_is_the_reply() -> None:
    body = {
        "error": {"code": 0, "message": "", "status": ""},
        "candidates": [{"content": {"role": "model", "parts": [{"text": "Hi."}]}, "finishReason": "STOP", "index": 0}],
    }
    assert gemini.parse_response(body).message == Message.assistant("Hi.")
    assert gemini.parse_stream([b"data: " + json.dumps(body).encode() + b"\r\n\r\n"]).message == Message.assistant(
        "Hi."
    )


def test_an_anthropic_reply_beside_a_null_error_is_the_reply() -> None:
    body = {"type": "message", "error": None, "content": [{"type": "text", "text": "Hi."}], "stop_reason": "end_turn"}
    assert anthropic.parse_response(body).message == Message.assistant("Hi.")
    with pytest.raises(Exception, match="no content list"):
        anthropic.parse_response({"type": "message", "error": {"type": "", "message": ""}})


_JSON_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from([0.0, 1.5]), st.sampled_from(["", "x"])
)
_JSON = st.recursive(
    _JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=2)
        | st.dictionaries(st.sampled_from(["id", "function", "arguments", "name", "index", "type"]), inner, max_size=4)
    ),
    max_leaves=8,
)


@given(_JSON)
def test_a_tool_call_delta_has_content_exactly_when_it_is_an_object_that_is_not_zero_valued(value: Any) -> None:
    # _has_content reads the answer off a non-empty id or arguments string before the whole check.
    expected = isinstance(value, dict) and not is_zero_valued(value)
    assert openai_chat._has_content(value) is expected
