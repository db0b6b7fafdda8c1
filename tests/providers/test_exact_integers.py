"""Integers past 64 bits in a model's tool-call arguments stay exact through every decoder of the four codecs,
streamed and whole (``loopctl.stream.loads_exact``; JSON numbers have no size limit, RFC 8259 section 6).

orjson reads such an integer as a lossy float and refuses to write one; each decoder read stream events with
orjson, so Gemini's streamed ``functionCall.args`` came back rounded (``12345678901234567890123`` as
``1.2345678901234568e+22``), and arguments that arrived as a JSON object raised ``TypeError`` on the way back
to text.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from loopctl.message import ToolCallPart
from loopctl.providers import anthropic, gemini, openai_chat, openai_responses
from loopctl.response import ModelResponse

BIG = 12345678901234567890123
NEG = -9223372036854775809  # one past the smallest 64-bit integer
ARGS: dict[str, Any] = {"id": BIG, "nested": {"list": [NEG, 2**64, 1.5]}}


def sse(*events: Any, done: bool = False) -> bytes:
    out = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return out + (b"data: [DONE]\n\n" if done else b"")


def the_call(response: ModelResponse) -> ToolCallPart:
    (call,) = response.message.tool_calls()
    assert response.invalid_tool_calls == ()
    return call


def assert_exact(value: Any) -> None:
    assert value == ARGS
    assert type(value["id"]) is int and type(value["nested"]["list"][0]) is int
    assert type(value["nested"]["list"][1]) is int


def chunks(data: bytes) -> list[bytes]:
    return [data[i : i + 7] for i in range(0, len(data), 7)]


# --- Gemini ------------------------------------------------------------------------------------------------


GEMINI_CHUNK = {
    "candidates": [
        {
            "content": {"role": "model", "parts": [{"functionCall": {"name": "lookup", "args": ARGS}}]},
            "finishReason": "STOP",
            "index": 0,
        }
    ],
    "responseId": "r1",
}


def test_gemini_streamed_function_call_arguments_stay_exact() -> None:
    assert_exact(the_call(gemini.parse_stream(chunks(sse(GEMINI_CHUNK)))).input)


def test_gemini_whole_reply_arguments_stay_exact() -> None:
    assert_exact(the_call(gemini.parse_response(GEMINI_CHUNK)).input)


def test_gemini_streamed_partial_arguments_stay_exact() -> None:
    # Vertex streams arguments as partialArgs; a numberValue past 64 bits raised TypeError when the
    # collected arguments were written back to text.
    start = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {
                            "functionCall": {
                                "name": "lookup",
                                "willContinue": True,
                                "partialArgs": [{"jsonPath": "$.id", "numberValue": BIG}],
                            }
                        }
                    ],
                },
                "index": 0,
            }
        ],
        "responseId": "r1",
    }
    end = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"functionCall": {"partialArgs": [{"jsonPath": "$.n", "numberValue": NEG}]}}],
                },
                "finishReason": "STOP",
                "index": 0,
            }
        ]
    }
    call = the_call(gemini.parse_stream(chunks(sse(start, end))))
    assert call.input == {"id": BIG, "n": NEG}
    assert type(call.input["id"]) is int


# --- Anthropic ---------------------------------------------------------------------------------------------


def anthropic_stream(block: dict[str, Any], *deltas: dict[str, Any]) -> bytes:
    return sse(
        {"type": "message_start", "message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": block},
        *({"type": "content_block_delta", "index": 0, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    )


def test_anthropic_streamed_input_json_deltas_stay_exact() -> None:
    text = json.dumps(ARGS)
    stream = anthropic_stream(
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}},
        {"type": "input_json_delta", "partial_json": text[:10]},
        {"type": "input_json_delta", "partial_json": text[10:]},
    )
    assert_exact(the_call(anthropic.parse_stream(chunks(stream))).input)


def test_anthropic_input_given_whole_at_block_start_stays_exact() -> None:
    # Compatible servers send the whole input in content_block_start and no deltas.
    stream = anthropic_stream({"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": ARGS})
    assert_exact(the_call(anthropic.parse_stream(chunks(stream))).input)


def test_anthropic_whole_reply_input_stays_exact() -> None:
    body = {
        "type": "message",
        "id": "msg_1",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": json.dumps(ARGS)}],
        "stop_reason": "tool_use",
        "usage": {},
    }
    assert_exact(the_call(anthropic.parse_response(body)).input)


# --- OpenAI Chat -------------------------------------------------------------------------------------------


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


@pytest.mark.parametrize("arguments", [json.dumps(ARGS), ARGS], ids=["text", "object"])
def test_chat_streamed_arguments_stay_exact(arguments: Any) -> None:
    # A compatible server that sends the arguments as an object (not JSON text) lost the integers to
    # orjson's floats, and writing them back raised TypeError.
    stream = sse(
        chat_chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "lookup", "arguments": ""}}]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
        chat_chunk({}, "tool_calls"),
        done=True,
    )
    assert_exact(the_call(openai_chat.parse_stream(chunks(stream))).input)


@pytest.mark.parametrize("arguments", [json.dumps(ARGS), ARGS], ids=["text", "object"])
def test_chat_whole_reply_arguments_stay_exact(arguments: Any) -> None:
    body = {
        "id": "chatcmpl-1",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": arguments}}
                    ],
                },
            }
        ],
    }
    assert_exact(the_call(openai_chat.parse_response(body)).input)


# --- OpenAI Responses --------------------------------------------------------------------------------------


def test_responses_streamed_arguments_stay_exact() -> None:
    text = json.dumps(ARGS)
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup", "arguments": ""}
    stream = sse(
        {"type": "response.created", "response": {"id": "resp_1", "model": "gpt"}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.function_call_arguments.delta", "output_index": 0, "item_id": "fc_1", "delta": text[:9]},
        {"type": "response.function_call_arguments.delta", "output_index": 0, "item_id": "fc_1", "delta": text[9:]},
        {"type": "response.output_item.done", "output_index": 0, "item": {**item, "arguments": text}},
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "usage": {}}},
    )
    assert_exact(the_call(openai_responses.parse_stream(chunks(stream))).input)


def test_responses_whole_reply_arguments_stay_exact() -> None:
    body = {
        "id": "resp_1",
        "status": "completed",
        "output": [
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "lookup",
                "arguments": json.dumps(ARGS),
            }
        ],
    }
    assert_exact(the_call(openai_responses.parse_response(body)).input)


# --- the same through the stream bodies every codec reads in place of a stream -----------------------------


@pytest.mark.parametrize(
    "codec", [anthropic, gemini, openai_chat, openai_responses], ids=lambda c: c.__name__.rsplit(".", 1)[-1]
)
def test_an_error_body_in_place_of_a_stream_keeps_its_numbers_exact(codec: Any) -> None:
    body = {"error": {"message": "bad", "type": "invalid_request_error", "code": 400, "limit": BIG}}
    with pytest.raises(Exception) as info:
        codec.parse_stream([json.dumps(body).encode()])
    kept = getattr(info.value, "body", None)
    assert isinstance(kept, dict) and kept["error"]["limit"] == BIG and type(kept["error"]["limit"]) is int
