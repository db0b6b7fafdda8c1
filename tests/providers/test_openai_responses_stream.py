"""OpenAI Responses stream decoding beyond the recordings: SSE framing edge cases, event kinds, stop reasons,
errors inside the stream, truncation. Events are written the way the API writes them (openai-python
``types/responses/response_stream_event.py``)."""

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
from loopctl.message import TextPart, ThinkingPart, ToolCallPart
from loopctl.providers import openai_responses as codec
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.stream import PartFinished, PartStarted, TextDelta, ThinkingDelta, ThinkingSignature, ToolCallDelta
from tests.conftest import Recording

USAGE = {
    "input_tokens": 10,
    "input_tokens_details": {"cached_tokens": 4},
    "output_tokens": 7,
    "output_tokens_details": {"reasoning_tokens": 3},
    "total_tokens": 17,
}


def event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


def created() -> dict[str, Any]:
    return event(
        "response.created", sequence_number=0, response={"id": "resp_1", "model": "gpt-5", "status": "in_progress"}
    )


def completed(status: str = "completed", reason: str | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"id": "resp_1", "model": "gpt-5", "status": status, "usage": USAGE}
    response["incomplete_details"] = {"reason": reason} if reason else None
    kind = "response.completed" if status == "completed" else "response.incomplete"
    return event(kind, sequence_number=99, response=response)


def text_events(text: str = "Hi there", item_id: str = "msg_1", index: int = 0) -> list[dict[str, Any]]:
    return [
        event(
            "response.output_item.added",
            output_index=index,
            item={"id": item_id, "type": "message", "role": "assistant", "content": []},
        ),
        event(
            "response.content_part.added",
            item_id=item_id,
            output_index=index,
            content_index=0,
            part={"type": "output_text", "text": ""},
        ),
        *(
            event(
                "response.output_text.delta",
                item_id=item_id,
                output_index=index,
                content_index=0,
                delta=text[i : i + 3],
                obfuscation="xx",
            )
            for i in range(0, len(text), 3)
        ),
        event("response.output_text.done", item_id=item_id, output_index=index, content_index=0, text=text),
        event(
            "response.output_item.done",
            output_index=index,
            item={"id": item_id, "type": "message", "content": [{"type": "output_text", "text": text}]},
        ),
    ]


def sse(events: list[dict[str, Any]], eol: str = "\n", space: str = " ", named: bool = True) -> bytes:
    out = []
    for e in events:
        if named:
            out.append(f"event: {e['type']}{eol}")
        out.append(f"data:{space}{json.dumps(e)}{eol}{eol}")
    return "".join(out).encode()


def decode(data: bytes) -> ModelResponse:
    whole = codec.parse_stream([data])
    assert codec.parse_stream(data[i : i + 1] for i in range(len(data))) == whole
    return whole


SIMPLE = [created(), *text_events(), completed()]


class TestSSEFraming:
    EXPECTED = (TextPart(text="Hi there", item_id="msg_1"),)

    @pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
    def test_line_ends(self, eol: str) -> None:
        assert decode(sse(SIMPLE, eol=eol)).message.parts == self.EXPECTED

    def test_data_without_a_space_after_the_colon(self) -> None:
        assert decode(sse(SIMPLE, space="")).message.parts == self.EXPECTED

    def test_events_without_an_event_line_are_read_by_their_type(self) -> None:
        assert decode(sse(SIMPLE, named=False)).message.parts == self.EXPECTED

    def test_comments_and_keepalives_are_ignored(self) -> None:
        data = b": keep-alive\n\n" + sse(SIMPLE[:3]) + b":comment\n" + sse(SIMPLE[3:])
        assert decode(data).message.parts == self.EXPECTED

    @pytest.mark.parametrize("done", [b"data: [DONE]\n\n", b"data:[DONE]\n\n"])
    def test_done_sentinel_with_or_without_a_space_is_ignored(self, done: bytes) -> None:
        assert decode(sse(SIMPLE) + done).message.parts == self.EXPECTED

    def test_byte_order_mark_is_skipped(self) -> None:
        assert decode(b"\xef\xbb\xbf" + sse(SIMPLE)).message.parts == self.EXPECTED

    def test_multibyte_characters_split_across_chunks(self) -> None:
        events = [created(), *text_events("héllo 漢字 🚀"), completed()]
        assert decode(sse(events)).message.parts == (TextPart(text="héllo 漢字 🚀", item_id="msg_1"),)


class TestEvents:
    def test_unknown_event_types_are_ignored(self) -> None:
        extra = [
            event("response.in_progress", response={"id": "resp_1"}),
            event("response.queued", response={"id": "resp_1"}),
            event("response.output_text.annotation.added", output_index=0, annotation={}),
            event("response.something_new", payload=[1, 2]),
            event("keepalive"),
        ]
        events = [created(), extra[0], extra[1], *text_events()[:3], *extra[2:], *text_events()[3:], completed()]
        assert decode(sse(events)).message.parts == (TextPart(text="Hi there", item_id="msg_1"),)

    def test_response_id_model_and_usage(self) -> None:
        r = decode(sse(SIMPLE))
        assert (r.id, r.model) == ("resp_1", "gpt-5")
        assert r.usage == Usage(input_tokens=10, output_tokens=7, cache_read_tokens=4, reasoning_tokens=3)
        assert (r.stop_reason, r.raw_stop_reason) == (StopReason.END_TURN, "completed")

    def test_events_reported_as_they_are_decoded(self) -> None:
        decoder = codec.StreamDecoder()
        got = decoder.feed(sse(SIMPLE))
        parts = [e for e in got if isinstance(e, (PartStarted, TextDelta, PartFinished))]
        assert parts == [
            PartStarted(0, TextPart(text="", item_id="msg_1")),
            TextDelta(0, "Hi "),
            TextDelta(0, "the"),
            TextDelta(0, "re"),
            PartFinished(0),
        ]

    def test_parallel_calls_are_kept_apart_by_output_index(self) -> None:
        def added(i: int) -> dict[str, Any]:
            item = {"id": f"fc_{i}", "type": "function_call", "call_id": f"call_{i}", "name": "f", "arguments": ""}
            return event("response.output_item.added", output_index=i, item=item)

        def delta(i: int, text: str) -> dict[str, Any]:
            return event("response.function_call_arguments.delta", output_index=i, item_id=f"fc_{i}", delta=text)

        events = [
            created(),
            added(0),
            added(1),
            delta(0, '{"a"'),
            delta(1, '{"b"'),
            delta(0, ":1}"),
            delta(1, ":2}"),
            completed(),
        ]
        r = decode(sse(events))
        assert r.message.parts == (
            ToolCallPart(id="call_0", name="f", input={"a": 1}, item_id="fc_0"),
            ToolCallPart(id="call_1", name="f", input={"b": 2}, item_id="fc_1"),
        )
        assert r.stop_reason is StopReason.TOOL_CALL

    def test_arguments_delta_found_by_item_id_without_output_index(self) -> None:
        item = {"id": "fc_9", "type": "function_call", "call_id": "call_9", "name": "f", "arguments": ""}
        events = [
            created(),
            event("response.output_item.added", output_index=0, item=item),
            event("response.function_call_arguments.delta", item_id="fc_9", delta='{"x":true}'),
            completed(),
        ]
        assert decode(sse(events)).message.parts[0] == ToolCallPart(
            id="call_9", name="f", input={"x": True}, item_id="fc_9"
        )

    def test_streamed_arguments_that_are_empty_read_as_an_empty_object(self) -> None:
        item = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": ""}
        events = [
            created(),
            event("response.output_item.added", output_index=0, item=item),
            event("response.function_call_arguments.done", output_index=0, item_id="fc_1", arguments=""),
            event("response.output_item.done", output_index=0, item=item),
            completed(),
        ]
        r = decode(sse(events))
        assert r.message.parts == (ToolCallPart(id="call_1", name="f", input={}, item_id="fc_1"),)
        assert r.invalid_tool_calls == ()

    def test_arguments_cut_off_by_max_output_tokens_are_an_invalid_tool_call(self) -> None:
        item = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": ""}
        events = [
            created(),
            event("response.output_item.added", output_index=0, item=item),
            event("response.function_call_arguments.delta", output_index=0, delta='{"city": "Par'),
            completed("incomplete", "max_output_tokens"),
        ]
        r = decode(sse(events))
        assert r.message.parts == (ToolCallPart(id="call_1", name="f", input={}, item_id="fc_1"),)
        assert [(c.id, c.arguments) for c in r.invalid_tool_calls] == [("call_1", '{"city": "Par')]
        assert (r.stop_reason, r.raw_stop_reason) == (StopReason.MAX_TOKENS, "max_output_tokens")

    def test_arguments_that_arrive_whole_in_done_are_used(self) -> None:
        item = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": ""}
        events = [
            created(),
            event("response.output_item.added", output_index=0, item=item),
            event("response.function_call_arguments.done", output_index=0, arguments='{"k":1}'),
            event("response.output_item.done", output_index=0, item={**item, "arguments": '{"k":1}'}),
            completed(),
        ]
        assert decode(sse(events)).message.parts[0].input == {"k": 1}  # type: ignore[union-attr]

    def test_text_that_arrives_whole_in_done_events_is_used_once(self) -> None:
        events = [
            created(),
            *(e for e in text_events("whole") if e["type"] != "response.output_text.delta"),
            completed(),
        ]
        assert decode(sse(events)).message.parts == (TextPart(text="whole", item_id="msg_1"),)

    def test_text_that_arrives_only_in_content_part_done_is_used(self) -> None:
        events = [
            created(),
            text_events()[0],
            event(
                "response.content_part.added", output_index=0, content_index=0, part={"type": "output_text", "text": ""}
            ),
            event(
                "response.content_part.done",
                output_index=0,
                content_index=0,
                part={"type": "output_text", "text": "late"},
            ),
            completed(),
        ]
        assert decode(sse(events)).message.parts == (TextPart(text="late", item_id="msg_1"),)

    def test_summary_that_arrives_only_in_summary_part_done_is_used(self) -> None:
        rs = {"id": "rs_1", "type": "reasoning", "summary": []}
        events = [
            created(),
            event("response.output_item.added", output_index=0, item=rs),
            event(
                "response.reasoning_summary_part.added",
                output_index=0,
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            ),
            event(
                "response.reasoning_summary_part.done",
                output_index=0,
                summary_index=0,
                part={"type": "summary_text", "text": "s"},
            ),
            completed(),
        ]
        assert decode(sse(events)).message.parts == (ThinkingPart(text="s", provider="openai", item_id="rs_1"),)

    def test_reasoning_summary_parts_and_latched_encrypted_content(self) -> None:
        rs = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "partial"}
        events = [
            created(),
            event("response.output_item.added", output_index=0, item=rs),
            event(
                "response.reasoning_summary_part.added",
                output_index=0,
                item_id="rs_1",
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            ),
            event(
                "response.reasoning_summary_text.delta", output_index=0, item_id="rs_1", summary_index=0, delta="one"
            ),
            event(
                "response.reasoning_summary_part.added",
                output_index=0,
                item_id="rs_1",
                summary_index=1,
                part={"type": "summary_text", "text": ""},
            ),
            event(
                "response.reasoning_summary_text.delta", output_index=0, item_id="rs_1", summary_index=1, delta="two"
            ),
            event("response.reasoning_summary_text.done", output_index=0, item_id="rs_1", summary_index=1, text="two"),
            event(
                "response.output_item.done",
                output_index=0,
                item={
                    **rs,
                    "summary": [{"type": "summary_text", "text": "one"}, {"type": "summary_text", "text": "two"}],
                    "encrypted_content": "FINAL",
                },
            ),
            *text_events("answer", index=1),
            completed(),
        ]
        decoder = codec.StreamDecoder()
        got = decoder.feed(sse(events))
        assert [e for e in got if isinstance(e, (ThinkingDelta, ThinkingSignature))] == [
            ThinkingDelta(0, "one"),
            ThinkingDelta(1, "two"),
            ThinkingSignature(0, "FINAL"),
        ]
        assert decoder.finish().message.parts == (
            ThinkingPart(text="one", signature="FINAL", provider="openai", item_id="rs_1"),
            ThinkingPart(text="two", provider="openai", item_id="rs_1"),
            TextPart(text="answer", item_id="msg_1"),
        )

    def test_reasoning_summary_that_arrives_only_in_output_item_done(self) -> None:
        rs = {"id": "rs_1", "type": "reasoning", "summary": []}
        done = {**rs, "summary": [{"type": "summary_text", "text": "a"}, {"type": "summary_text", "text": "b"}]}
        events = [
            created(),
            event("response.output_item.added", output_index=0, item=rs),
            event("response.output_item.done", output_index=0, item=done),
            completed(),
        ]
        assert decode(sse(events)).message.parts == (
            ThinkingPart(text="a", provider="openai", item_id="rs_1"),
            ThinkingPart(text="b", provider="openai", item_id="rs_1"),
        )

    def test_refusal_is_kept_as_text_and_stops_as_refusal(self) -> None:
        events = [
            created(),
            event("response.output_item.added", output_index=0, item={"id": "msg_1", "type": "message", "content": []}),
            event(
                "response.content_part.added", output_index=0, content_index=0, part={"type": "refusal", "refusal": ""}
            ),
            event("response.refusal.delta", output_index=0, content_index=0, delta="I can't help"),
            event("response.refusal.done", output_index=0, content_index=0, refusal="I can't help"),
            completed(),
        ]
        r = decode(sse(events))
        assert r.message.parts == (TextPart(text="I can't help", item_id="msg_1"),)
        assert (r.stop_reason, r.raw_stop_reason) == (StopReason.REFUSAL, "completed")

    def test_incomplete_for_max_output_tokens_is_max_tokens(self) -> None:
        r = decode(sse([created(), *text_events()[:3], completed("incomplete", "max_output_tokens")]))
        assert (r.stop_reason, r.raw_stop_reason) == (StopReason.MAX_TOKENS, "max_output_tokens")
        assert r.message.parts == (TextPart(text="Hi ", item_id="msg_1"),)

    def test_incomplete_for_content_filter_is_refusal(self) -> None:
        r = decode(sse([created(), *text_events()[:3], completed("incomplete", "content_filter")]))
        assert (r.stop_reason, r.raw_stop_reason) == (StopReason.REFUSAL, "content_filter")

    def test_unknown_output_item_type_raises_naming_it(self) -> None:
        data = sse(
            [
                created(),
                event("response.output_item.added", output_index=0, item={"id": "hg_1", "type": "hologram_call"}),
            ]
        )
        with pytest.raises(ProviderProtocolError, match="hologram_call"):
            codec.parse_stream([data])

    def test_unknown_message_content_type_raises_naming_it(self) -> None:
        events = [
            created(),
            text_events()[0],
            event("response.content_part.added", output_index=0, content_index=0, part={"type": "output_audio"}),
        ]
        with pytest.raises(ProviderProtocolError, match="output_audio"):
            codec.parse_stream([sse(events)])

    def test_data_that_is_not_json_raises(self) -> None:
        with pytest.raises(ProviderProtocolError, match="not JSON"):
            codec.parse_stream([b"event: response.created\ndata: {oops\n\n"])


class TestErrorsAndTruncation:
    def test_error_event_raises_from_feed(self) -> None:
        decoder = codec.StreamDecoder()
        decoder.feed(sse([created(), *text_events()[:3]]))
        bad = event(
            "error",
            sequence_number=5,
            code="rate_limit_exceeded",
            message="Slow down. Please try again in 1.5s.",
            param=None,
        )
        with pytest.raises(RateLimited) as info:
            decoder.feed(sse([bad]))
        assert info.value.retry_after == 1.5
        assert info.value.status is None
        assert info.value.retryable

    def test_error_event_without_a_code_is_a_server_error(self) -> None:
        with pytest.raises(ServerError, match="Something went wrong"):
            codec.parse_stream(
                [sse([created(), event("error", code=None, message="Something went wrong", param=None)])]
            )

    def test_error_event_for_context_overflow(self) -> None:
        bad = event(
            "error", code="context_length_exceeded", message="Your input exceeds the context window of this model."
        )
        with pytest.raises(ContextOverflow):
            codec.parse_stream([sse([created(), bad])])

    def test_response_failed_raises_its_error(self) -> None:
        failed = event(
            "response.failed",
            response={
                "id": "resp_1",
                "status": "failed",
                "error": {"code": "server_error", "message": "The server had an error."},
            },
        )
        with pytest.raises(ServerError, match="The server had an error"):
            codec.parse_stream([sse([created(), failed])])

    def test_response_failed_for_a_bad_image_is_an_invalid_request(self) -> None:
        failed = event(
            "response.failed", response={"status": "failed", "error": {"code": "invalid_image", "message": "bad image"}}
        )
        with pytest.raises(InvalidRequest, match="bad image") as info:
            codec.parse_stream([sse([created(), failed])])
        assert not info.value.retryable

    def test_stream_cut_before_its_final_event_is_truncated(self) -> None:
        data = sse([created(), *text_events()])
        for cut in (len(data), len(data) - 7, 40):
            with pytest.raises(StreamTruncated):
                codec.parse_stream([data[:cut]])

    def test_empty_stream_is_truncated(self) -> None:
        with pytest.raises(StreamTruncated):
            codec.parse_stream([])

    def test_recorded_stream_cut_anywhere_before_completed_is_truncated(self) -> None:
        data = Recording("openai", "responses-tools-parallel-stream").response_sse
        cut = data.index(b"event: response.completed")
        with pytest.raises(StreamTruncated):
            codec.parse_stream([data[:cut]])

    def test_json_error_body_in_place_of_a_stream_raises_from_finish(self) -> None:
        decoder = codec.StreamDecoder()
        body = {
            "error": {
                "message": "Incorrect API key provided.",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        }
        assert decoder.feed(b"  \n" + json.dumps(body).encode()) == []
        from loopctl.errors import AuthenticationError

        with pytest.raises(AuthenticationError, match="Incorrect API key"):
            decoder.finish()

    def test_json_body_that_is_not_an_error_is_a_protocol_error(self) -> None:
        with pytest.raises(ProviderProtocolError):
            codec.parse_stream([b'{"hello": 1}'])


def test_tool_call_delta_events_carry_the_fragments() -> None:
    item = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": ""}
    decoder = codec.StreamDecoder()
    got = decoder.feed(
        sse(
            [
                created(),
                event("response.output_item.added", output_index=0, item=item),
                event("response.function_call_arguments.delta", output_index=0, delta="{"),
                event("response.function_call_arguments.delta", output_index=0, delta="}"),
                event("response.function_call_arguments.done", output_index=0, arguments="{}"),
            ]
        )
    )
    assert [e for e in got if isinstance(e, ToolCallDelta)] == [ToolCallDelta(0, "{"), ToolCallDelta(0, "}")]


def test_a_websocket_event_with_a_byte_that_is_not_utf8_decodes_as_the_same_event_over_sse() -> None:
    # feed_event decoded bytes strictly, outside its error handling: a binary WebSocket frame holding a stray
    # byte raised a bare UnicodeDecodeError out of the WebSocket client; the SSE path reads it as U+FFFD.
    from pathlib import Path

    from loopctl.providers.openai_responses import StreamDecoder

    recorded = Path(__file__).parents[1] / "fixtures/provider-traffic/openai/responses-text-stream.response.sse"
    payloads = [line[6:] for line in recorded.read_bytes().splitlines() if line.startswith(b"data: ")]
    payloads = [p.replace(b'"delta":"', b'"delta":"\\u00e9\xff', 1) if b"output_text.delta" in p else p for p in payloads]
    over_ws, over_sse = StreamDecoder(), StreamDecoder()
    ws_events = [e for p in payloads for e in over_ws.feed_event(p)]
    sse_events = [e for p in payloads for e in over_sse.feed(b"data: " + p + b"\n\n")]
    assert ws_events == sse_events
    message = over_ws.finish().message
    assert message == over_sse.finish().message
    assert "\u00e9\ufffd" in message.text_content()
