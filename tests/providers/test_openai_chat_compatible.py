"""OpenAI-compatible servers' own shapes on the Chat codec: Mistral's thinking content parts and OpenRouter's
numeric error codes.

- Mistral's reasoning models send ``content`` as a list: ``{"type": "thinking", "thinking": [{"type": "text",
  "text": ...}]}`` then ``{"type": "text", "text": ...}`` (Mistral API ``ThinkChunk`` / ``TextChunk``,
  docs.mistral.ai/capabilities/reasoning); streamed, ``delta.content`` is a list of such chunks while the
  model thinks and plain strings after. The codec raised ``ProviderProtocolError`` ("unknown content part
  type 'thinking'") for the whole reply and dropped list content from streams silently.
- OpenRouter sends an error that happens after the 200 as ``{"error": {"code": 400, "message": ...}}``
  (openrouter.ai/docs/api/reference/errors-and-debugging: the code is the HTTP status the error stands for);
  "Token limit reached" with code 400 read as a retryable ``ServerError``, so the engine sent the same
  overlong request again.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from loopctl.errors import (
    ContextOverflow,
    InvalidRequest,
    ProviderProtocolError,
    ProviderTimeout,
    RateLimited,
    ServerError,
)
from loopctl.message import Message, Role, TextPart, ThinkingPart, ToolCallPart
from loopctl.providers import openai_chat, openai_responses
from loopctl.providers.openai_chat import COMPATIBLE_REASONING
from loopctl.response import StopReason
from loopctl.stream import TextDelta, ThinkingDelta


def sse(*events: Any, done: bool = True) -> bytes:
    data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return data + (b"data: [DONE]\n\n" if done else b"")


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "chat.completion.chunk",
        "model": "magistral-medium-2509",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def think(*texts: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": [{"type": "text", "text": t} for t in texts], "closed": True}


# --- Mistral thinking -----------------------------------------------------------------------------------------


def test_mistral_thinking_content_reads_as_thinking_then_text() -> None:
    body = {
        "id": "cmpl-1",
        "object": "chat.completion",
        "model": "magistral-medium-2509",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "tool_calls": None,
                    "content": [think("Okay, 6 times 7", " is 42."), {"type": "text", "text": "The answer is 42."}],
                },
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 30, "total_tokens": 40},
    }
    response = openai_chat.parse_response(body)
    assert response.message == Message.new(
        Role.ASSISTANT,
        [
            ThinkingPart(text="Okay, 6 times 7 is 42.", provider=COMPATIBLE_REASONING),
            TextPart(text="The answer is 42."),
        ],
    )
    assert response.stop_reason is StopReason.END_TURN


def test_mistral_thinking_beside_tool_calls_and_references() -> None:
    message = {
        "role": "assistant",
        "content": [think("Need the weather."), {"type": "reference", "reference_ids": [1, 2]}, {"type": "text", "text": ""}],
        "tool_calls": [{"id": "D681PevKs", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}],
    }  # fmt: skip
    body = {"id": "c", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}]}
    response = openai_chat.parse_response(body)
    assert response.message.parts == (
        ThinkingPart(text="Need the weather.", provider=COMPATIBLE_REASONING),
        ToolCallPart(id="D681PevKs", name="weather", input={"city": "Paris"}),
    )


def test_mistral_thinking_streams_as_thinking_deltas_then_text() -> None:
    stream = sse(
        chunk({"role": "assistant", "content": [think("Okay,")]}),
        chunk({"content": [think(" 6 times 7")]}),
        chunk({"content": [think(" is 42.")]}),
        chunk({"content": "The answer"}),
        chunk({"content": [{"type": "text", "text": " is 42."}]}),
        chunk({}, "stop"),
    )
    decoder = openai_chat.StreamDecoder()
    events = [e for i in range(0, len(stream), 9) for e in decoder.feed(stream[i : i + 9])]
    response = decoder.finish()
    assert response.message == Message.new(
        Role.ASSISTANT,
        [
            ThinkingPart(text="Okay, 6 times 7 is 42.", provider=COMPATIBLE_REASONING),
            TextPart(text="The answer is 42."),
        ],
    )
    deltas = [e for e in events if isinstance(e, (ThinkingDelta, TextDelta))]
    assert [type(e).__name__ for e in deltas] == ["ThinkingDelta"] * 3 + ["TextDelta"] * 2


def test_a_content_part_of_an_unknown_type_is_still_a_protocol_error() -> None:
    body = {"id": "c", "choices": [{"index": 0, "message": {"role": "assistant", "content": [{"type": "audio"}]}}]}
    with pytest.raises(ProviderProtocolError, match="unknown content part type 'audio'"):
        openai_chat.parse_response(body)
    with pytest.raises(ProviderProtocolError, match="unknown content part type 'audio'"):
        openai_chat.parse_stream([sse(chunk({"content": [{"type": "audio"}]}), chunk({}, "stop"))])


def test_mistral_thinking_is_not_replayed_by_default() -> None:
    # The project's replay policy: reasoning from a compatible server goes back only on request
    # (replay_reasoning_content); Mistral takes a history without it.
    reply = Message.new(Role.ASSISTANT, [ThinkingPart(text="hmm", provider=COMPATIBLE_REASONING), TextPart(text="42")])
    body = openai_chat.build_request([Message.user("6*7?"), reply, Message.user("thanks")], model="magistral")
    assert body["messages"][1] == {"role": "assistant", "content": "42"}


# --- OpenRouter error codes ---------------------------------------------------------------------------------


def openrouter_error(code: Any, message: str) -> dict[str, Any]:
    return chunk({"content": ""}, "error", error={"code": code, "message": message, "metadata": {"provider_name": "X"}})


@pytest.mark.parametrize(
    ("code", "message", "error_type", "retryable"),
    [
        (400, "Token limit reached", ContextOverflow, False),
        (400, "Invalid request", InvalidRequest, False),
        ("400", "Token limit reached", ContextOverflow, False),
        (402, "Insufficient credits", InvalidRequest, False),
        (408, "Request timed out", ProviderTimeout, True),
        (429, "Rate limited", RateLimited, True),
        (502, "Provider returned error", ServerError, True),
        ("server_error", "Provider disconnected unexpectedly", ServerError, True),
    ],
)
def test_a_mid_stream_error_is_classified_by_its_code(
    code: Any, message: str, error_type: type[Exception], retryable: bool
) -> None:
    stream = sse(chunk({"role": "assistant", "content": "Partial"}), openrouter_error(code, message), done=False)
    decoder = openai_chat.StreamDecoder()
    with pytest.raises(error_type) as info:
        decoder.feed(stream)
    error = info.value
    assert type(error) is error_type
    assert error.retryable is retryable  # type: ignore[attr-defined]
    assert error.status is None  # type: ignore[attr-defined]  # the reply's own status was 200
    assert error.provider_message == message  # type: ignore[attr-defined]


def test_a_whole_reply_that_is_an_openrouter_error_is_classified_by_its_code() -> None:
    with pytest.raises(ContextOverflow):
        openai_chat.parse_response({"error": {"code": 400, "message": "Token limit reached"}})


def test_the_responses_codec_reads_numeric_codes_too() -> None:
    stream = sse(
        {"type": "response.created", "response": {"id": "r", "model": "m"}},
        {"type": "error", "code": 400, "message": "Token limit reached", "param": None},
        done=False,
    )
    with pytest.raises(ContextOverflow) as info:
        openai_responses.StreamDecoder().feed(stream)
    assert info.value.retryable is False
