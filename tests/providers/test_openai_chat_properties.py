"""Property tests for the OpenAI Chat codec: for generated valid conversations the body validates strictly against
the openai SDK's request TypedDicts and keeps Chat's invariants; generated streams decode the same however the
bytes are split."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)
from pydantic import BaseModel, ConfigDict, ValidationError

from loopctl.message import ImagePart, Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart, check_conversation
from loopctl.providers import ConversionCache, openai_chat
from loopctl.response import StopReason
from loopctl.tool import ForceTool, ToolSchema
from tests.strategies import conversations, identifier

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Streaming(BaseModel):
    """The SDK's params, strict, with unknown keys refused (``extra`` reaches the nested TypedDicts)."""

    model_config = ConfigDict(strict=True, extra="forbid")
    body: CompletionCreateParamsStreaming


class NonStreaming(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    body: CompletionCreateParamsNonStreaming


def materialize(value: Any) -> Any:
    """Walk a validated value; pydantic validates ``Iterable`` fields lazily, only when they are iterated."""
    if isinstance(value, dict):
        return {k: materialize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, Iterator)):
        return [materialize(v) for v in value]
    return value


def validate(body: dict[str, Any]) -> None:
    model = Streaming if body.get("stream") else NonStreaming
    materialize(model.model_validate({"body": body}, strict=True).body)


@pytest.mark.parametrize(
    "bad",
    [
        {"model": "m", "messages": [{"role": "assistant", "content": "", "reasoning_content": "x"}]},
        {
            "model": "m",
            "messages": [
                {"role": "tool", "tool_call_id": "c", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}
            ],
        },
        {"model": "m", "messages": [{"role": "user", "content": None}]},
        {"model": "m", "messages": [], "stream": True, "stream_options": {"include_usage": "yes"}},
    ],
)
def test_the_sdk_check_refuses_what_openai_refuses(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        validate(bad)


tool_schemas = st.lists(
    st.builds(
        ToolSchema,
        name=identifier,
        description=st.text(max_size=20),
        input_schema=st.just({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}),
    ),
    max_size=2,
)
options = st.fixed_dictionaries(
    {},
    optional={
        "system": st.text(min_size=1, max_size=20),
        "max_tokens": st.integers(1, 100_000),
        "temperature": st.floats(0, 2),
        "stop": st.lists(st.text(min_size=1, max_size=5), max_size=4),
        "tool_choice": st.one_of(st.sampled_from(["auto", "none", "required"]), st.builds(ForceTool, identifier)),
        "reasoning_effort": st.sampled_from(["minimal", "low", "medium", "high"]),
        "stream": st.booleans(),
        "system_role": st.sampled_from(["system", "developer"]),
        "strict_tools": st.booleans(),
        "image_detail": st.sampled_from(["auto", "low", "high"]),
    },
)


@SETTINGS
@given(conversations(), tool_schemas, options)
def test_the_body_validates_strictly_against_the_sdk_request_type(
    conversation: list[Message], tools: list[ToolSchema], opts: dict[str, Any]
) -> None:
    assert check_conversation(conversation) == []
    validate(openai_chat.build_request(conversation, model="gpt-4o", tools=tools, **opts))


@SETTINGS
@given(conversations())
def test_tool_messages_follow_their_calls_directly_in_the_order_of_the_calls(conversation: list[Message]) -> None:
    chat = openai_chat.build_request(conversation, model="m")["messages"]
    results = sum(len(m.tool_results()) for m in conversation)
    assert sum(m["role"] == "tool" for m in chat) == results
    for i, message in enumerate(chat):
        if message["role"] == "assistant" and "tool_calls" in message:
            ids = [c["id"] for c in message["tool_calls"]]
            answers = chat[i + 1 : i + 1 + len(ids)]
            assert [m["role"] for m in answers] == ["tool"] * len(ids)
            assert [m["tool_call_id"] for m in answers] == ids
        if message["role"] == "tool":
            before = chat[i - 1]
            assert before["role"] == "tool" or "tool_calls" in before


@SETTINGS
@given(conversations())
def test_content_is_null_exactly_for_assistant_turns_that_only_call_tools(conversation: list[Message]) -> None:
    for message in openai_chat.build_request(conversation, model="m")["messages"]:
        if message["content"] is None:
            assert message["role"] == "assistant"
            assert message["tool_calls"]
        if message["role"] == "assistant" and "tool_calls" in message:
            assert message["content"] is None or message["content"] != ""


@SETTINGS
@given(conversations())
def test_tool_call_ids_fit_the_api(conversation: list[Message]) -> None:
    for message in openai_chat.build_request(conversation, model="m")["messages"]:
        ids = [c["id"] for c in message.get("tool_calls", [])] + (
            [message["tool_call_id"]] if "tool_call_id" in message else []
        )
        for call_id in ids:
            assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", call_id), call_id


@SETTINGS
@given(conversations())
def test_every_image_is_sent_once(conversation: list[Message]) -> None:
    images = 0
    for m in conversation:
        for p in m.parts:
            images += isinstance(p, ImagePart)
            if isinstance(p, ToolResultPart):
                images += len(p.output.images())
    sent = json.dumps(openai_chat.build_request(conversation, model="m")).count('"image_url": {"url": "data:')
    assert sent == images


@SETTINGS
@given(conversations())
def test_thinking_never_changes_the_body(conversation: list[Message]) -> None:
    without = [
        m.model_copy(update={"parts": tuple(p for p in m.parts if not isinstance(p, ThinkingPart))})
        for m in conversation
    ]
    assert openai_chat.build_request(conversation, model="m") == openai_chat.build_request(without, model="m")


@SETTINGS
@given(conversations(), st.booleans())
def test_the_body_is_the_same_with_and_without_a_cache(conversation: list[Message], replay: bool) -> None:
    plain = openai_chat.build_request(conversation, model="m", replay_reasoning_content=replay)
    cache = ConversionCache()
    for _ in range(2):
        assert openai_chat.build_request(conversation, model="m", cache=cache, replay_reasoning_content=replay) == plain


# --- streams ---------------------------------------------------------------------------------------------------

segment = st.one_of(
    st.tuples(st.just("text"), st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=4)),
    st.tuples(st.just("reasoning"), st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=4)),
    st.tuples(st.just("call"), st.dictionaries(identifier, st.integers() | st.text(max_size=5), max_size=3)),
)


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[Any], str]:
    """An SSE body, the parts it must decode to, and its finish reason."""
    segments = draw(st.lists(segment, max_size=6))
    chunks: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    parts: list[Any] = []
    calls = 0
    for kind, value in segments:
        if kind == "call":
            args = json.dumps(value)
            cuts = sorted(draw(st.lists(st.integers(0, len(args)), max_size=3)))
            pieces = [args[a:b] for a, b in zip([0, *cuts], [*cuts, len(args)], strict=True)]
            chunks.append(
                {
                    "tool_calls": [
                        {
                            "index": calls,
                            "id": f"call_{calls}",
                            "type": "function",
                            "function": {"name": "f", "arguments": ""},
                        }
                    ]
                }
            )
            chunks.extend({"tool_calls": [{"index": calls, "function": {"arguments": p}}]} for p in pieces)
            parts.append(ToolCallPart(id=f"call_{calls}", name="f", input=value))
            calls += 1
            continue
        field = "content" if kind == "text" else "reasoning_content"
        chunks.extend({field: t} for t in value)
        text = "".join(value)
        cls = TextPart if kind == "text" else ThinkingPart
        if parts and type(parts[-1]) is cls:
            parts[-1] = parts[-1].model_copy(update={"text": parts[-1].text + text})
        elif kind == "text":
            parts.append(TextPart(text=text))
        else:
            parts.append(ThinkingPart(text=text, provider="openai-compatible"))
    finish = draw(st.sampled_from(["stop", "length", "tool_calls", "content_filter"]))
    events = [{"id": "x", "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in chunks]
    events.append({"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    events.append({"id": "x", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}})
    eol = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    body = (
        "".join(f"data: {json.dumps(e)}{eol}{eol}" for e in events)
        + f"data:{draw(st.sampled_from(['', ' ']))}[DONE]{eol}{eol}"
    )
    return body.encode(), parts, finish


@SETTINGS
@given(streams(), st.data())
def test_a_stream_decodes_the_same_however_it_is_split(
    stream: tuple[bytes, list[Any], str], data: st.DataObject
) -> None:
    body, parts, finish = stream
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=20)))
    chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    whole = openai_chat.parse_stream([body])
    assert openai_chat.parse_stream(chunks) == whole
    assert list(whole.message.parts) == parts
    assert whole.raw_stop_reason == finish
    if finish == "stop" and any(isinstance(p, ToolCallPart) for p in parts):
        assert whole.stop_reason is StopReason.TOOL_CALL
