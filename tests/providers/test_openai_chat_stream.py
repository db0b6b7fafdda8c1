"""OpenAI Chat stream decoding with hand-written chunks: the SSE edge cases and the delta rules that the
recordings do not show (reasoning from compatible servers, refusals, calls without ids, error chunks)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from loopctl.errors import (
    ContextOverflow,
    InvalidRequest,
    ProviderProtocolError,
    RateLimited,
    ServerError,
    StreamTruncated,
)
from loopctl.message import Message, TextPart, ThinkingPart, ToolCallPart
from loopctl.providers import openai_chat
from loopctl.response import InvalidToolCall, StopReason, Usage
from loopctl.stream import (
    PartStarted,
    ResponseFinished,
    ResponseStarted,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    UsageReported,
)

ID = "chatcmpl-test"


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **top: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": ID, "object": "chat.completion.chunk", "model": "gpt-test"}
    body["choices"] = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    body.update(top)
    return body


def sse(*chunks: dict[str, Any] | str, eol: str = "\n", space: str = " ") -> bytes:
    lines = []
    for c in chunks:
        data = c if isinstance(c, str) else json.dumps(c)
        lines.append(f"data:{space}{data}{eol}{eol}")
    return "".join(lines).encode()


def usage_chunk(prompt: int = 10, completion: int = 5, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return chunk(
        None,
        usage={
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning},
        },
    )


def tool_delta(
    index: int, call_id: str | None = None, name: str | None = None, args: str | None = None
) -> dict[str, Any]:
    tc: dict[str, Any] = {"index": index}
    if call_id is not None:
        tc["id"] = call_id
        tc["type"] = "function"
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if args is not None:
        function["arguments"] = args
    tc["function"] = function
    return {"tool_calls": [tc]}


def decode(data: bytes) -> Any:
    return openai_chat.parse_stream([data])


TEXT_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hel"}),
    chunk({"content": "lo"}),
    chunk({}, "stop"),
    usage_chunk(),
    "[DONE]",
]


class TestFraming:
    @pytest.mark.parametrize("eol", ["\r\n", "\r", "\n"])
    def test_line_ends_cr_lf_and_crlf(self, eol: str) -> None:
        data = sse(*TEXT_STREAM, eol=eol)
        assert decode(data) == decode(sse(*TEXT_STREAM))
        assert openai_chat.parse_stream([data[i : i + 1] for i in range(len(data))]) == decode(data)

    def test_comments_and_unknown_fields_are_ignored(self) -> None:
        data = b": keep-alive\n\n" + sse(*TEXT_STREAM[:2]) + b": ping\nretry: 10\n\n" + sse(*TEXT_STREAM[2:])
        assert decode(data).message == Message.assistant("Hello")

    def test_unknown_event_types_are_ignored(self) -> None:
        data = sse(*TEXT_STREAM[:2]) + b'event: progress\ndata: {"x": 1}\n\n' + sse(*TEXT_STREAM[2:])
        assert decode(data).message == Message.assistant("Hello")

    def test_obfuscation_fields_are_ignored(self) -> None:
        chunks = [chunk({"content": "x"}, obfuscation="aZ3"), chunk({}, "stop", obfuscation=""), "[DONE]"]
        assert decode(sse(*chunks)).message == Message.assistant("x")

    def test_events_after_done_are_ignored(self) -> None:
        assert decode(sse(*TEXT_STREAM, chunk({"content": "late"}))).message == Message.assistant("Hello")

    def test_data_that_is_not_json_is_a_protocol_error(self) -> None:
        with pytest.raises(ProviderProtocolError, match="not JSON"):
            decode(sse(chunk({"content": "x"}), "{oops"))


class TestEnding:
    def test_usage_chunk_carries_cached_and_reasoning_tokens(self) -> None:
        chunks = [chunk({"content": "x"}), chunk({}, "stop"), usage_chunk(100, 40, cached=64, reasoning=30), "[DONE]"]
        assert decode(sse(*chunks)).usage == Usage(100, 40, cache_read_tokens=64, reasoning_tokens=30)

    def test_usage_on_the_finish_chunk_as_some_servers_send_it(self) -> None:
        chunks = [
            chunk({"content": "x"}),
            chunk({}, "stop", usage={"prompt_tokens": 3, "completion_tokens": 1}),
            "[DONE]",
        ]
        assert decode(sse(*chunks)).usage == Usage(3, 1)

    def test_an_empty_stream_is_truncated(self) -> None:
        with pytest.raises(StreamTruncated):
            decode(b"")

    def test_done_without_a_finish_reason_still_finishes(self) -> None:
        reply = decode(sse(chunk({"content": "x"}), "[DONE]"))
        assert (reply.stop_reason, reply.raw_stop_reason) == (StopReason.END_TURN, None)

    def test_the_events_of_a_text_stream(self) -> None:
        decoder = openai_chat.StreamDecoder()
        events = decoder.feed(sse(*TEXT_STREAM))
        assert events == [
            ResponseStarted(ID, "gpt-test"),
            PartStarted(0, TextPart(text="")),
            TextDelta(0, "Hel"),
            TextDelta(0, "lo"),
            UsageReported(Usage(10, 5, cache_read_tokens=0, reasoning_tokens=0)),
            ResponseFinished(StopReason.END_TURN, "stop"),
        ]
        reply = decoder.finish()
        assert (reply.id, reply.model) == (ID, "gpt-test")


class TestToolCalls:
    def test_the_events_of_a_tool_call(self) -> None:
        decoder = openai_chat.StreamDecoder()
        events = decoder.feed(sse(chunk(tool_delta(0, "call_1", "read", "")), chunk(tool_delta(0, args='{"p": 1}'))))
        assert events[1:] == [
            PartStarted(0, ToolCallPart(id="call_1", name="read", input={})),
            ToolCallDelta(0, '{"p": 1}'),
        ]

    def test_parallel_calls_are_kept_apart_by_index_even_interleaved(self) -> None:
        chunks = [
            chunk(tool_delta(0, "call_a", "read", "")),
            chunk(tool_delta(1, "call_b", "list", "")),
            chunk(tool_delta(0, args='{"path"')),
            chunk(tool_delta(1, args='{"dir": "/"}')),
            chunk(tool_delta(0, args=': "a"}')),
            chunk({}, "tool_calls"),
            "[DONE]",
        ]
        assert decode(sse(*chunks)).message.parts == (
            ToolCallPart(id="call_a", name="read", input={"path": "a"}),
            ToolCallPart(id="call_b", name="list", input={"dir": "/"}),
        )

    def test_calls_reusing_index_zero_with_new_ids_are_new_calls(self) -> None:
        chunks = [
            chunk(tool_delta(0, "call_a", "read", '{"p": 1}')),
            chunk(tool_delta(0, "call_b", "read", '{"p": 2}')),
            chunk({}, "tool_calls"),
            "[DONE]",
        ]
        assert [p.input for p in decode(sse(*chunks)).message.parts] == [{"p": 1}, {"p": 2}]  # type: ignore[union-attr]

    def test_calls_without_index_continue_the_last_call(self) -> None:
        first = {
            "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "read", "arguments": '{"p"'}}]
        }
        rest = {"tool_calls": [{"function": {"arguments": ": 1}"}}]}
        reply = decode(sse(chunk(first), chunk(rest), chunk({}, "tool_calls"), "[DONE]"))
        assert reply.message.parts == (ToolCallPart(id="call_a", name="read", input={"p": 1}),)

    def test_a_call_without_an_id_gets_one_from_the_response_id_and_its_position(self) -> None:
        chunks = [
            chunk(tool_delta(0, name="a", args="{}")),
            chunk(tool_delta(1, name="b", args="{}")),
            chunk({}, "stop"),
            "[DONE]",
        ]
        reply = decode(sse(*chunks))
        assert [p.id for p in reply.message.parts] == [f"call_{ID}_0", f"call_{ID}_1"]  # type: ignore[union-attr]

    def test_stop_with_tool_calls_reads_as_tool_call(self) -> None:
        chunks = [chunk(tool_delta(0, "call_a", "read", "{}")), chunk({}, "stop"), "[DONE]"]
        reply = decode(sse(*chunks))
        assert (reply.stop_reason, reply.raw_stop_reason) == (StopReason.TOOL_CALL, "stop")

    def test_arguments_cut_by_max_tokens_give_an_invalid_tool_call(self) -> None:
        chunks = [chunk(tool_delta(0, "call_a", "write", '{"text": "unfinis')), chunk({}, "length"), "[DONE]"]
        reply = decode(sse(*chunks))
        assert reply.message.parts == (ToolCallPart(id="call_a", name="write", input={}),)
        [invalid] = reply.invalid_tool_calls
        assert isinstance(invalid, InvalidToolCall)
        assert (invalid.id, invalid.name, invalid.arguments) == ("call_a", "write", '{"text": "unfinis')
        assert reply.stop_reason is StopReason.MAX_TOKENS

    def test_text_then_calls_keep_their_order(self) -> None:
        chunks = [
            chunk({"content": "Let me look."}),
            chunk(tool_delta(0, "call_a", "read", "{}")),
            chunk({}, "tool_calls"),
            "[DONE]",
        ]
        assert decode(sse(*chunks)).message.parts == (
            TextPart(text="Let me look."),
            ToolCallPart(id="call_a", name="read", input={}),
        )

    def test_legacy_function_call_delta_is_a_tool_call(self) -> None:
        chunks = [
            chunk({"function_call": {"name": "read", "arguments": ""}}),
            chunk({"function_call": {"arguments": '{"p": 1}'}}),
            chunk({}, "function_call"),
            "[DONE]",
        ]
        reply = decode(sse(*chunks))
        assert reply.message.parts == (ToolCallPart(id=f"call_{ID}_0", name="read", input={"p": 1}),)
        assert reply.stop_reason is StopReason.TOOL_CALL

    def test_a_tool_call_of_an_unknown_type_is_a_protocol_error(self) -> None:
        delta = {"tool_calls": [{"index": 0, "id": "c", "type": "custom", "custom": {"name": "x", "input": "y"}}]}
        with pytest.raises(ProviderProtocolError, match="unknown tool call type 'custom'"):
            decode(sse(chunk(delta)))


class TestReasoningAndRefusal:
    @pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
    def test_compatible_reasoning_becomes_a_thinking_part(self, field: str) -> None:
        chunks = [
            chunk({"role": "assistant", field: "Let me "}),
            chunk({field: "think."}),
            chunk({"content": "4"}),
            chunk({}, "stop"),
            "[DONE]",
        ]
        assert decode(sse(*chunks)).message.parts == (
            ThinkingPart(text="Let me think.", provider="openai-compatible"),
            TextPart(text="4"),
        )

    def test_reasoning_content_wins_when_both_fields_come(self) -> None:
        chunks = [chunk({"reasoning_content": "a", "reasoning": "a"}), chunk({}, "stop"), "[DONE]"]
        assert decode(sse(*chunks)).message.parts == (ThinkingPart(text="a", provider="openai-compatible"),)

    def test_reasoning_after_a_tool_call_starts_a_new_part(self) -> None:
        chunks = [
            chunk({"reasoning_content": "first"}),
            chunk(tool_delta(0, "c1", "read", "{}")),
            chunk({"reasoning_content": "second"}),
            chunk({}, "tool_calls"),
            "[DONE]",
        ]
        kinds = [type(p).__name__ for p in decode(sse(*chunks)).message.parts]
        assert kinds == ["ThinkingPart", "ToolCallPart", "ThinkingPart"]

    def test_the_events_of_reasoning(self) -> None:
        decoder = openai_chat.StreamDecoder()
        events = decoder.feed(sse(chunk({"reasoning_content": "hm"})))
        assert events[1:] == [
            PartStarted(0, ThinkingPart(text="", provider="openai-compatible")),
            ThinkingDelta(0, "hm"),
        ]

    def test_refusal_deltas_are_text_and_stop_as_refusal(self) -> None:
        chunks = [chunk({"refusal": "I can't "}), chunk({"refusal": "help with that."}), chunk({}, "stop"), "[DONE]"]
        reply = decode(sse(*chunks))
        assert reply.message == Message.assistant("I can't help with that.")
        assert (reply.stop_reason, reply.raw_stop_reason) == (StopReason.REFUSAL, "stop")

    def test_content_filter_is_refusal(self) -> None:
        reply = decode(sse(chunk({"content": "x"}), chunk({}, "content_filter"), "[DONE]"))
        assert reply.stop_reason is StopReason.REFUSAL

    def test_choices_other_than_the_first_are_ignored(self) -> None:
        second = chunk({"content": "other"})
        second["choices"][0]["index"] = 1
        assert decode(
            sse(chunk({"content": "mine"}), second, chunk({}, "stop"), "[DONE]")
        ).message == Message.assistant("mine")


class TestErrors:
    def test_an_error_chunk_raises_from_feed(self) -> None:
        decoder = openai_chat.StreamDecoder()
        decoder.feed(sse(chunk({"content": "partial"})))
        error = {"error": {"message": "The server had an error.", "type": "server_error", "param": None, "code": None}}
        with pytest.raises(ServerError) as info:
            decoder.feed(sse(error, "[DONE]"))
        assert info.value.provider_message == "The server had an error."
        assert info.value.status is None
        assert info.value.retryable is True

    @pytest.mark.parametrize(
        ("error", "kind"),
        [
            (
                {
                    "message": "Rate limit reached. Please try again in 2s.",
                    "type": "tokens",
                    "code": "rate_limit_exceeded",
                },
                RateLimited,
            ),
            (
                {"message": "too long", "type": "invalid_request_error", "code": "context_length_exceeded"},
                ContextOverflow,
            ),
            ({"message": "bad", "type": "invalid_request_error", "code": None}, InvalidRequest),
            ("thinking_budget is not supported", ServerError),
        ],
    )
    def test_error_chunks_map_to_typed_errors(self, error: Any, kind: type) -> None:
        with pytest.raises(kind) as info:
            decode(sse({"error": error}))
        assert type(info.value) is kind
        if isinstance(info.value, RateLimited):
            assert info.value.retry_after == 2.0

    def test_an_event_named_error_raises(self) -> None:
        with pytest.raises(ServerError, match="boom"):
            decode(b'event: error\ndata: {"message": "boom"}\n\n')

    def test_an_error_body_in_place_of_the_stream_raises_from_finish(self) -> None:
        decoder = openai_chat.StreamDecoder()
        body = b'{"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}}'
        assert decoder.feed(body[:10]) == []
        assert decoder.feed(body[10:]) == []
        with pytest.raises(InvalidRequest, match="Incorrect API key"):
            decoder.finish()

    def test_json_in_place_of_the_stream_that_is_no_error_is_a_protocol_error(self) -> None:
        decoder = openai_chat.StreamDecoder()
        decoder.feed(b'{"choices": []}')
        with pytest.raises(ProviderProtocolError):
            decoder.finish()


@pytest.mark.parametrize("arguments", ["", '{"a": 1}'])
def test_a_calls_starting_part_is_the_one_its_constructor_makes_fields_set_and_all(arguments: str) -> None:
    # The starting part is assembled without validation; it had every field marked as set, where the
    # constructor it replaced sets id, name and input: model_dump(exclude_unset=True) of the started part,
    # and of a call that got no arguments (which finishes as that part), had gained type, item_id and provider.
    import pickle

    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "t", "arguments": arguments}}
    first = {"id": "r", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
    last = {"id": "r", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    decoder = openai_chat.StreamDecoder()
    events = decoder.feed(f"data: {json.dumps(first)}\n\ndata: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
    (started,) = [e.part for e in events if isinstance(e, PartStarted)]
    made = ToolCallPart(id="c1", name="t", input={})
    assert started == made
    assert started.model_fields_set == made.model_fields_set == {"id", "name", "input"}
    assert started.model_dump(exclude_unset=True) == {"id": "c1", "name": "t", "input": {}}
    assert pickle.loads(pickle.dumps(started)).model_fields_set == {"id", "name", "input"}
    (finished,) = decoder.finish().message.parts
    assert finished == ToolCallPart(id="c1", name="t", input=json.loads(arguments or "{}"))
    if not arguments:
        assert finished.model_dump(exclude_unset=True) == {"id": "c1", "name": "t", "input": {}}
