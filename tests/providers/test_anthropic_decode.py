"""Anthropic Messages replies: every recording decoded value by value, stream framing, errors.

Wire rules: platform.claude.com/docs/en/build-with-claude/streaming (events), /docs/en/api/errors (errors),
the SDK's ``Message.stop_reason`` docstring (stop reasons), ``MessageDeltaUsage`` ("cumulative").
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from loopctl.errors import (
    AuthenticationError,
    ContextOverflow,
    InvalidRequest,
    ModelNotFound,
    Overloaded,
    ProviderError,
    ProviderProtocolError,
    RateLimited,
    ServerError,
    StreamTruncated,
)
from loopctl.message import Message, Role, TextPart, ThinkingPart, ToolCallPart
from loopctl.providers.anthropic import StreamDecoder, error_from_http, parse_response, parse_stream
from loopctl.response import InvalidToolCall, ModelResponse, StopReason, Usage
from loopctl.stream import (
    PartFinished,
    PartStarted,
    ResponseFinished,
    ResponseStarted,
    StreamEvent,
    TextDelta,
    ThinkingSignature,
    ToolCallDelta,
    UsageReported,
)
from tests.conftest import Recording, recordings

STREAMS = [n for n in recordings("anthropic") if Recording("anthropic", n).has("response.sse")]


def rec(name: str) -> Recording:
    return Recording("anthropic", name)


def decoded(name: str) -> ModelResponse:
    r = rec(name)
    return parse_stream([r.response_sse]) if r.has("response.sse") else parse_response(r.response_json)


def followup_block(name: str, message: int, block: int) -> dict[str, Any]:
    """A content block as the recorded follow-up request sent it back (an independent source of values)."""
    return rec(name).request["messages"][message]["content"][block]


# --- every successful recording, value by value -------------------------------------------------------------


def test_text() -> None:
    r = decoded("text")
    assert r.message == Message.assistant("4200 + 42 = 4242")
    assert r.usage == Usage(input_tokens=17, output_tokens=15, cache_read_tokens=0, cache_write_tokens=0)
    assert (r.stop_reason, r.raw_stop_reason) == (StopReason.END_TURN, "end_turn")
    assert (r.id, r.model) == ("msg_01EXuhhFC9buDpjCcznFPSDs", "claude-sonnet-4-20250514")
    assert r.invalid_tool_calls == ()


def test_text_stream() -> None:
    r = decoded("text-stream")
    assert r.message == Message.assistant("4200 + 42 = 4242")
    assert r.usage == Usage(input_tokens=17, output_tokens=15, cache_read_tokens=0, cache_write_tokens=0)
    assert (r.stop_reason, r.raw_stop_reason) == (StopReason.END_TURN, "end_turn")
    assert (r.id, r.model) == ("msg_018bk6q16LtrDpGDm6TyXTgn", "claude-sonnet-4-20250514")


def test_cache_creation_and_read_counts_cached_tokens_as_input() -> None:
    r = decoded("cache-creation-and-read")
    # input_tokens 3 + cache_read 4597 + cache_creation 598
    assert r.usage == Usage(input_tokens=5198, output_tokens=350, cache_read_tokens=4597, cache_write_tokens=598)
    (part,) = r.message.parts
    assert isinstance(part, TextPart)
    assert part.text.startswith("*suddenly stops mid-cackle and straightens up*\n\n")
    assert part.text.endswith('The Force has brought balance once again. "This is the way" it should be.')
    assert len(part.text) == 1372
    assert (r.stop_reason, r.id) == (StopReason.END_TURN, "msg_014HVdCNpfaGPb4WodKLm3p8")


def test_image_base64() -> None:
    r = decoded("image-base64")
    assert r.message == Message.assistant(
        "This is the Wikipedia logo, which features a spherical puzzle globe made up of jigsaw puzzle pieces with "
        "text in various languages and scripts from around the world."
    )
    assert r.usage == Usage(input_tokens=34, output_tokens=36, cache_read_tokens=0, cache_write_tokens=0)
    assert (r.stop_reason, r.model) == (StopReason.END_TURN, "claude-sonnet-4-20250514")


def test_thinking_stream_latches_the_signature_the_followup_replays() -> None:
    r = decoded("thinking-stream")
    thinking, text = r.message.parts
    sent = followup_block("thinking-stream-followup", 1, 0)
    assert isinstance(thinking, ThinkingPart)
    assert thinking.text == sent["thinking"]
    assert len(thinking.text) == 1883
    assert thinking.signature == sent["signature"]
    assert len(thinking.signature) == 3312
    assert (thinking.provider, thinking.redacted) == ("anthropic", None)
    assert text == TextPart(text=followup_block("thinking-stream-followup", 1, 1)["text"])
    assert text.text.endswith("- 379: Prime\n\n3")
    assert r.usage == Usage(input_tokens=67, output_tokens=1193, cache_read_tokens=0, cache_write_tokens=0)
    assert (r.stop_reason, r.id) == (StopReason.END_TURN, "msg_01JtzJwWGbEdexuEuW7iraz1")


def test_thinking_stream_followup() -> None:
    r = decoded("thinking-stream-followup")
    thinking, text = r.message.parts
    assert isinstance(thinking, ThinkingPart)
    assert thinking.text.startswith("The user is asking me to recall the primes I found")
    assert thinking.text.endswith("So the primes were 79, 179, and 379.")
    assert len(thinking.text) == 245
    assert thinking.signature is not None
    assert thinking.signature.startswith("Ep0DCkYICxgCKkAeMhtpPiMllQ")
    assert len(thinking.signature) == 560
    assert text == TextPart(text="The primes were: 79, 179, and 379.")
    assert r.usage == Usage(input_tokens=171, output_tokens=107, cache_read_tokens=0, cache_write_tokens=0)


def test_thinking_tool_use_stream() -> None:
    r = decoded("thinking-tool-use-stream")
    sent = followup_block("thinking-tool-use-stream-followup", 1, 0)
    assert r.message == Message.new(
        Role.ASSISTANT,
        [
            ThinkingPart(text=sent["thinking"], signature=sent["signature"], provider="anthropic"),
            ToolCallPart(id="toolu_01825dXWLSoJwCst1qTsiWdb", name="fixed_version", input={}),
        ],
    )
    assert r.message.parts[0].text.startswith("The user wants me to:\n1. Use the fixed_version tool")  # type: ignore[attr-defined]
    # output_tokens_details.thinking_tokens -> reasoning_tokens
    assert r.usage == Usage(input_tokens=598, output_tokens=92, cache_read_tokens=0, cache_write_tokens=0, reasoning_tokens=53)
    assert (r.stop_reason, r.raw_stop_reason) == (StopReason.TOOL_CALL, "tool_use")
    assert r.invalid_tool_calls == ()


def test_thinking_tool_use_stream_followup() -> None:
    r = decoded("thinking-tool-use-stream-followup")
    (text,) = r.message.parts
    assert isinstance(text, TextPart)
    assert text.text.startswith("The version is **0.32a0**.\n\nHere's a joke about it:")
    assert len(text.text) == 277
    assert r.usage == Usage(input_tokens=707, output_tokens=89, cache_read_tokens=0, cache_write_tokens=0, reasoning_tokens=0)
    assert r.stop_reason is StopReason.END_TURN


def test_tool_single_stream_joins_nine_argument_fragments() -> None:
    r = decoded("tool-single-stream")
    assert r.message == Message.new(
        Role.ASSISTANT,
        [
            ToolCallPart(
                id="toolu_018acGYLtfR52q9yDbWaEdQZ",
                name="get_weather",
                input={"location": "San Francisco, CA", "units": "f"},
            )
        ],
    )
    assert r.usage == Usage(input_tokens=656, output_tokens=74, cache_read_tokens=0, cache_write_tokens=0)
    assert (r.stop_reason, r.model) == (StopReason.TOOL_CALL, "claude-haiku-4-5-20251001")


def test_tools_parallel_stream() -> None:
    r = decoded("tools-parallel-stream")
    assert r.message == Message.new(
        Role.ASSISTANT,
        [
            TextPart(text="I'll retrieve the secrets for both passwords you provided."),
            ToolCallPart(
                id="toolu_015cUijgET79LXjgeYQerN2h", name="secret_retrieval_tool", input={"password": "mellon"}
            ),
            ToolCallPart(
                id="toolu_01XZTimPexA7h3EVKesnKt5T", name="secret_retrieval_tool", input={"password": "radiance"}
            ),
        ],
    )
    assert r.usage == Usage(input_tokens=416, output_tokens=109, cache_read_tokens=0, cache_write_tokens=0)
    assert (r.stop_reason, r.id) == (StopReason.TOOL_CALL, "msg_013zKrzHmx2EAPhcF2gQKQ4k")


def test_tools_parallel_stream_followup() -> None:
    r = decoded("tools-parallel-stream-followup")
    (text,) = r.message.parts
    assert isinstance(text, TextPart)
    assert text.text.startswith("Here are the secrets retrieved for each password:\n\n1. **Pass")
    assert len(text.text) == 192
    assert r.usage == Usage(input_tokens=602, output_tokens=52, cache_read_tokens=0, cache_write_tokens=0)


def test_adaptive_thinking_stream_keeps_text_thinking_text_in_order() -> None:
    r = decoded("adaptive-thinking-stream")
    first, thinking, last = r.message.parts
    assert first == TextPart(text="\n\n")
    assert isinstance(thinking, ThinkingPart)
    assert thinking.text == "Brief answer with two pet pelican names."
    assert thinking.signature is not None
    assert thinking.signature.startswith("EtABCkYICxgCKkCVRmhlD4SUFC1Jfx")
    assert thinking.signature.endswith("SGAoENhIz4SWxgB")
    assert len(thinking.signature) == 284
    assert last == TextPart(text="1. **Captain Scoop**\n2. **Gullet**")
    assert r.usage == Usage(input_tokens=34, output_tokens=44, cache_read_tokens=0, cache_write_tokens=0)
    assert (r.model, r.stop_reason) == ("claude-opus-4-6", StopReason.END_TURN)


def test_redacted_thinking_stream_blocks_arrive_whole() -> None:
    r = decoded("redacted-thinking-stream")
    first, second, text = r.message.parts
    assert isinstance(first, ThinkingPart)
    assert isinstance(second, ThinkingPart)
    assert (first.text, first.signature, first.provider) == ("", None, "anthropic")
    assert first.redacted is not None
    assert first.redacted.startswith("EqkECkYIBxgCKkA8AZ4noDfV5VcOJe/p3JTRB6Xz")
    assert first.redacted.endswith("vnBd4ewJ/hgB")
    assert len(first.redacted) == 744
    assert second.redacted is not None
    assert second.redacted.endswith("RRFuab/DBV3yRYdZ1J0GAE=")
    assert len(second.redacted) == 296
    assert isinstance(text, TextPart)
    assert text.text.startswith("I notice that you've sent what appears to be")
    assert text.text.endswith("a legitimate task or question?")
    assert len(text.text) == 359
    assert r.usage == Usage(input_tokens=92, output_tokens=189, cache_read_tokens=0, cache_write_tokens=0)


def test_redacted_thinking_non_streamed() -> None:
    r = decoded("redacted-thinking-followup")
    thinking, text = r.message.parts
    assert isinstance(thinking, ThinkingPart)
    assert thinking.text == ""
    assert thinking.redacted is not None
    assert thinking.redacted.startswith("EtUFCkYIBxgCKkAE46qlfUcG4eBdm3DIV")
    assert len(thinking.redacted) == 976
    assert thinking.provider == "anthropic"
    assert isinstance(text, TextPart)
    assert text.text.startswith("That message appeared to be an attempt")
    assert r.usage == Usage(input_tokens=168, output_tokens=232, cache_read_tokens=0, cache_write_tokens=0)
    assert (r.id, r.stop_reason) == ("msg_012oSSVsQdwoGH6b2fryM4fF", StopReason.END_TURN)


# --- error recordings ---------------------------------------------------------------------------------------


def test_error_400_recording_is_an_invalid_request_with_the_providers_message() -> None:
    r = rec("error-400-invalid-request")
    error = error_from_http(r.meta["status"], orjson.dumps(r.response_json))
    assert type(error) is InvalidRequest
    assert error.status == 400
    assert error.provider == "anthropic"
    assert (
        error.provider_message
        == "This model does not support effort level 'xhigh'. Supported levels: high, low, max, medium."
    )
    with pytest.raises(InvalidRequest, match="does not support effort level 'xhigh'"):
        parse_response(r.response_json)


def test_error_404_recording_is_model_not_found() -> None:
    r = rec("error-404-not-found")
    error = error_from_http(404, r.response_json)
    assert isinstance(error, ModelNotFound)
    assert error.provider_message == "model: this-model-does-not-exist-12345"
    assert not error.retryable
    with pytest.raises(ModelNotFound):
        parse_response(r.response_json)


@pytest.mark.parametrize("name", ["error-400-invalid-request", "error-404-not-found"])
def test_error_body_sent_in_place_of_a_stream_raises_from_finish(name: str) -> None:
    decoder = StreamDecoder()
    assert decoder.feed(orjson.dumps(rec(name).response_json)) == []
    with pytest.raises((InvalidRequest, ModelNotFound)):
        decoder.finish()


# --- error_from_http ----------------------------------------------------------------------------------------


def _err(kind: str, message: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"})


def test_429_rate_limit_with_retry_after() -> None:
    error = error_from_http(
        429,
        _err("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
        {"Retry-After": "17"},
    )
    assert isinstance(error, RateLimited)
    assert error.retry_after == 17.0
    assert error.retryable


def test_529_overloaded() -> None:
    error = error_from_http(529, _err("overloaded_error", "Overloaded"), {"retry-after": "3"})
    assert isinstance(error, Overloaded)
    assert error.retry_after == 3.0
    assert error.status == 529


@pytest.mark.parametrize(
    "message",
    [
        "prompt is too long: 208310 tokens > 200000 maximum",
        "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again",
    ],
)
def test_400_over_the_context_window_is_context_overflow(message: str) -> None:
    error = error_from_http(400, _err("invalid_request_error", message))
    assert isinstance(error, ContextOverflow)
    assert error.provider_message == message
    assert error.status == 400


@pytest.mark.parametrize(
    ("status", "kind", "expected"),
    [
        (401, "authentication_error", AuthenticationError),
        (403, "permission_error", AuthenticationError),
        (404, "not_found_error", ModelNotFound),
        (500, "api_error", ServerError),
        (504, "timeout_error", ServerError),
        (413, "request_too_large", InvalidRequest),
    ],
)
def test_other_statuses(status: int, kind: str, expected: type[ProviderError]) -> None:
    assert type(error_from_http(status, _err(kind, "x"))) is expected


def test_body_that_is_not_json_keeps_its_text() -> None:
    error = error_from_http(502, b"<html>Bad gateway</html>")
    assert isinstance(error, ServerError)
    assert error.provider_message == "<html>Bad gateway</html>"
    assert isinstance(error_from_http(503, None), Overloaded)


# --- streams: framing and edge cases ------------------------------------------------------------------------


def _events(decoder: StreamDecoder, chunks: list[bytes]) -> list[StreamEvent]:
    out: list[StreamEvent] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    return out


@pytest.mark.parametrize("name", STREAMS)
def test_stream_result_does_not_depend_on_how_bytes_are_split(name: str) -> None:
    data = rec(name).response_sse
    splits = {
        "whole": [data],
        "lines": data.splitlines(keepends=True),
        "bytes": [data[i : i + 1] for i in range(len(data))],
    }
    results = {}
    events = {}
    for how, chunks in splits.items():
        decoder = StreamDecoder()
        events[how] = _events(decoder, chunks)
        results[how] = decoder.finish()
    assert results["whole"] == results["lines"] == results["bytes"]
    assert events["whole"] == events["lines"] == events["bytes"]


def _sse(*payloads: dict[str, Any], eol: str = "\n", space: str = " ", event_lines: bool = True) -> bytes:
    out = []
    for p in payloads:
        head = f"event:{space}{p['type']}{eol}" if event_lines else ""
        out.append(f"{head}data:{space}{orjson.dumps(p).decode()}{eol}{eol}")
    return "".join(out).encode()


START = {
    "type": "message_start",
    "message": {"id": "msg_1", "model": "claude-x", "usage": {"input_tokens": 10, "output_tokens": 1}},
}
TEXT_START = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
STOP = {"type": "message_stop"}


def _delta(index: int, **delta: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def _message_delta(stop: str | None, **usage: Any) -> dict[str, Any]:
    return {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": usage}


def _hello(**kw: Any) -> bytes:
    return _sse(
        START, TEXT_START, _delta(0, type="text_delta", text="Hel"), _delta(0, type="text_delta", text="lo"),
        {"type": "content_block_stop", "index": 0}, _message_delta("end_turn", output_tokens=5), STOP, **kw,
    )  # fmt: skip


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_crlf_cr_and_lf_line_ends(eol: str) -> None:
    r = parse_stream([_hello(eol=eol)])
    assert r.message == Message.assistant("Hello")
    assert r.usage == Usage(input_tokens=10, output_tokens=5)


def test_data_without_a_space_after_the_colon_and_no_event_lines() -> None:
    assert parse_stream([_hello(space="", event_lines=False)]).message == Message.assistant("Hello")


def test_comments_pings_and_unknown_events_are_ignored() -> None:
    noise = b': keep-alive comment\n\nevent: ping\ndata: {"type": "ping"}\n\nevent: brand_new\ndata: {"type":"brand_new","x":1}\n\n'
    data = _hello()
    cut = data.index(b"event: content_block_start")
    r = parse_stream([data[:cut] + noise + data[cut:]])
    assert r.message == Message.assistant("Hello")


def test_runs_of_spaces_before_the_closing_brace_are_valid_json() -> None:
    data = _hello().replace(b"}\n\n", b"}        \n\n")
    assert parse_stream([data]).message == Message.assistant("Hello")


def test_events_in_order() -> None:
    events = _events(StreamDecoder(), [_hello()])
    assert events == [
        ResponseStarted("msg_1", "claude-x"),
        UsageReported(Usage(input_tokens=10, output_tokens=1)),
        PartStarted(0, TextPart(text="")),
        TextDelta(0, "Hel"),
        TextDelta(0, "lo"),
        PartFinished(0),
        UsageReported(Usage(input_tokens=10, output_tokens=5)),
        ResponseFinished(StopReason.END_TURN, "end_turn"),
    ]


def test_signature_delta_arrives_whole_and_is_latched() -> None:
    data = _sse(
        START,
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        _delta(0, type="thinking_delta", thinking="hmm"),
        _delta(0, type="thinking_delta", thinking=""),
        _delta(0, type="signature_delta", signature="SIG+/=="),
        {"type": "content_block_stop", "index": 0},
        _message_delta("end_turn", output_tokens=9),
        STOP,
    )
    events = _events(StreamDecoder(), [data])
    assert ThinkingSignature(0, "SIG+/==") in events
    assert parse_stream([data]).message.parts == (ThinkingPart(text="hmm", signature="SIG+/==", provider="anthropic"),)


def test_thinking_block_that_never_got_a_signature_reads_unsigned() -> None:
    data = _sse(
        START,
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        _delta(0, type="thinking_delta", thinking="hmm"),
        _message_delta("end_turn", output_tokens=9),
        STOP,
    )
    (part,) = parse_stream([data]).message.parts
    assert isinstance(part, ThinkingPart)
    assert part.signature is None


def test_tool_input_streamed_from_an_empty_first_fragment() -> None:
    data = _sse(
        START,
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_9", "name": "f", "input": {}},
        },
        _delta(0, type="input_json_delta", partial_json=""),
        _delta(0, type="input_json_delta", partial_json='{"a": '),
        _delta(0, type="input_json_delta", partial_json="[1, 2]}"),
        _message_delta("tool_use", output_tokens=20),
        STOP,
    )
    events = _events(StreamDecoder(), [data])
    assert ToolCallDelta(0, "") in events
    r = parse_stream([data])
    assert r.message.parts == (ToolCallPart(id="toolu_9", name="f", input={"a": [1, 2]}),)
    assert r.stop_reason is StopReason.TOOL_CALL


def test_tool_input_cut_by_max_tokens_is_an_invalid_tool_call() -> None:
    data = _sse(
        START,
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_9", "name": "f", "input": {}},
        },
        _delta(0, type="input_json_delta", partial_json='{"path": "a.t'),
        _message_delta("max_tokens", output_tokens=20),
        STOP,
    )
    r = parse_stream([data])
    assert r.message.parts == (ToolCallPart(id="toolu_9", name="f", input={}),)
    assert r.stop_reason is StopReason.MAX_TOKENS
    (invalid,) = r.invalid_tool_calls
    assert (invalid.id, invalid.name, invalid.arguments) == ("toolu_9", "f", '{"path": "a.t')


def test_message_delta_usage_is_cumulative_and_counts_cache() -> None:
    data = _sse(
        {
            "type": "message_start",
            "message": {
                "id": "m",
                "model": "c",
                "usage": {
                    "input_tokens": 5,
                    "cache_read_input_tokens": 100,
                    "cache_creation_input_tokens": 20,
                    "output_tokens": 1,
                },
            },
        },
        TEXT_START,
        _delta(0, type="text_delta", text="x"),
        _message_delta(None, output_tokens=3),
        _message_delta("end_turn", output_tokens=7, cache_read_input_tokens=100),
        STOP,
    )
    r = parse_stream([data])
    assert r.usage == Usage(input_tokens=125, output_tokens=7, cache_read_tokens=100, cache_write_tokens=20)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("end_turn", StopReason.END_TURN),
        ("max_tokens", StopReason.MAX_TOKENS),
        ("stop_sequence", StopReason.STOP_SEQUENCE),
        ("tool_use", StopReason.TOOL_CALL),
        ("refusal", StopReason.REFUSAL),
        ("model_context_window_exceeded", StopReason.MAX_TOKENS),
        ("pause_turn", StopReason.END_TURN),
        ("something_new", StopReason.END_TURN),
    ],
)
def test_stop_reasons(raw: str, expected: StopReason) -> None:
    r = parse_stream(
        [_sse(START, TEXT_START, _delta(0, type="text_delta", text="x"), _message_delta(raw, output_tokens=2), STOP)]
    )
    assert (r.stop_reason, r.raw_stop_reason) == (expected, raw)
    body = {
        "id": "m",
        "model": "c",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": "x"}],
        "stop_reason": raw,
        "usage": {"input_tokens": 1, "output_tokens": 2},
    }
    assert parse_response(body).stop_reason is expected


def test_a_reply_with_tool_calls_and_a_plain_stop_reports_tool_call() -> None:
    body = {
        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
        "stop_reason": "pause_turn",
        "usage": {},
    }
    assert parse_response(body).stop_reason is StopReason.TOOL_CALL


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("overloaded_error", Overloaded),
        ("rate_limit_error", RateLimited),
        ("api_error", ServerError),
        ("invalid_request_error", InvalidRequest),
        ("authentication_error", AuthenticationError),
    ],
)
def test_error_event_mid_stream_raises_its_typed_error_from_feed(kind: str, expected: type[ProviderError]) -> None:
    data = _hello()
    cut = data.index(b"event: message_delta")
    error = (
        b'event: error\ndata: {"type": "error", "error": {"type": "%s", "message": "Overloaded"}}\n\n' % kind.encode()
    )
    decoder = StreamDecoder()
    with pytest.raises(expected) as info:
        decoder.feed(data[:cut] + error)
    assert type(info.value) is expected
    assert info.value.provider == "anthropic"
    assert info.value.provider_message == "Overloaded"


@pytest.mark.parametrize("cut_at", [b"event: message_stop", b"event: message_delta", b'"text":"lo"'])
def test_stream_cut_before_message_stop_is_truncated(cut_at: bytes) -> None:
    data = _hello()
    decoder = StreamDecoder()
    decoder.feed(data[: data.index(cut_at)])
    with pytest.raises(StreamTruncated):
        decoder.finish()


def test_unknown_content_block_type_in_a_reply_is_a_protocol_error() -> None:
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "hologram_use", "id": "x_1", "name": "project", "input": {}},
    }
    with pytest.raises(ProviderProtocolError, match="'hologram_use'"):
        StreamDecoder().feed(_sse(START, block))
    with pytest.raises(ProviderProtocolError, match=r"content\[0\]: content block type 'hologram'"):
        parse_response({"content": [{"type": "hologram"}], "stop_reason": "end_turn"})
    # A server tool block of the wrong shape is the provider's protocol error too, never a half-read part.
    with pytest.raises(ProviderProtocolError, match="web_search_tool_result block whose tool_use_id"):
        parse_response({"content": [{"type": "web_search_tool_result"}], "stop_reason": "end_turn"})


def test_data_that_is_not_json_is_a_protocol_error() -> None:
    with pytest.raises(ProviderProtocolError, match="not JSON"):
        StreamDecoder().feed(b"event: message_start\ndata: {oops\n\n")


def test_non_streamed_tool_input_as_json_text_is_parsed() -> None:
    body = {
        "content": [
            {"type": "tool_use", "id": "a", "name": "f", "input": '{"x": 1}'},
            {"type": "tool_use", "id": "b", "name": "f", "input": ""},
            {"type": "tool_use", "id": "c", "name": "f", "input": '{"x": '},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    r = parse_response(body)
    assert [p.input for p in r.message.parts] == [{"x": 1}, {}, {}]  # type: ignore[attr-defined]
    assert r.invalid_tool_calls == (InvalidToolCall("c", "f", '{"x": ', r.invalid_tool_calls[0].error),)
