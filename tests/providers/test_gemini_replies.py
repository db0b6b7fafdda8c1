"""Gemini replies and streams -> ModelResponse: every recording, stream framing, errors, stop reasons, usage.

Recordings: tests/fixtures/provider-traffic/gemini (INDEX.md). Wire rules: docs/providers/gemini.md.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from loopctl.errors import (
    AuthenticationError,
    ContextOverflow,
    InvalidRequest,
    ModelNotFound,
    Overloaded,
    ProviderProtocolError,
    RateLimited,
    ServerError,
    StreamTruncated,
)
from loopctl.message import Message, Role, TextPart, ThinkingPart, ToolCallPart
from loopctl.providers import gemini
from loopctl.response import InvalidToolCall, ModelResponse, StopReason, Usage
from loopctl.stream import PartStarted, ResponseFinished, StreamEvent, ToolCallDelta
from tests.conftest import Recording, recordings

STREAMS = [n for n in recordings("gemini") if Recording("gemini", n).meta["streaming"] and "error" not in n]


def sse(*chunks: dict[str, Any], end: str = "\r\n\r\n") -> bytes:
    """A Gemini SSE body: one ``data:`` line per chunk, events separated as Gemini does."""
    return "".join(f"data: {json.dumps(c)}{end}" for c in chunks).encode()


def chunk(
    *parts: dict[str, Any], finish: str | None = None, response_id: str = "resp1", **extra: Any
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "modelVersion": "gemini-3-pro-preview", "responseId": response_id, **extra}


def decode(body: bytes, split: str = "whole") -> tuple[ModelResponse, list[StreamEvent]]:
    if split == "whole":
        pieces = [body]
    elif split == "lines":
        pieces = body.splitlines(keepends=True)
    else:
        pieces = [body[i : i + 1] for i in range(len(body))]
    decoder = gemini.StreamDecoder()
    events: list[StreamEvent] = []
    for piece in pieces:
        events.extend(decoder.feed(piece))
    return decoder.finish(), events


def signature(recording: str, event: int = 0, part: int = 0) -> str:
    """The thoughtSignature as it stands in the recorded reply (read with plain json, not the codec)."""
    rec = Recording("gemini", recording)
    if rec.has("response.json"):
        body = rec.response_json
    else:
        lines = [ln for ln in rec.response_sse.decode().splitlines() if ln.startswith("data:")]
        body = json.loads(lines[event][5:])
    return body["candidates"][0]["content"]["parts"][part]["thoughtSignature"]


def assistant(*parts: Any) -> Message:
    return Message.new(Role.ASSISTANT, parts)


def thought_carrier(sig: str) -> ThinkingPart:
    return ThinkingPart(text="", signature=sig, provider="gemini")


# --- every successful recording, value by value --------------------------------------------------------


class TestRecordedReplies:
    def test_text(self) -> None:
        body = Recording("gemini", "text").response_json
        response = gemini.parse_response(body)
        assert response.message == Message.assistant(body["candidates"][0]["content"]["parts"][0]["text"])
        assert response.message.text_content().endswith("So, 4200 + 42 = **4242**.")
        # output = candidatesTokenCount 77 + thoughtsTokenCount 25
        assert response.usage == Usage(input_tokens=13, output_tokens=102, cache_read_tokens=0, reasoning_tokens=25)
        assert (response.stop_reason, response.raw_stop_reason) == (StopReason.END_TURN, "STOP")
        assert (response.model, response.id) == ("gemini-2.5-flash", "SJfyaMbrNJKlqtsPvNOW8Ao")

    def test_image_inline_data(self) -> None:
        response = gemini.parse_response(Recording("gemini", "image-inline-data").response_json)
        assert response.message == Message.assistant(
            "The image displays a three-dimensional jigsaw puzzle globe, composed of white pieces featuring "
            "characters from various writing systems, with a few pieces missing to reveal a dark gray interior."
        )
        assert response.usage == Usage(input_tokens=266, output_tokens=34 + 145, cache_read_tokens=0, reasoning_tokens=145)
        assert response.stop_reason is StopReason.END_TURN

    def test_implicit_cache_usage(self) -> None:
        response = gemini.parse_response(Recording("gemini", "implicit-cache-usage").response_json)
        # promptTokenCount already includes the 3055 cached tokens.
        assert response.usage == Usage(
            input_tokens=3797, output_tokens=656 + 1549, cache_read_tokens=3055, reasoning_tokens=1549
        )
        assert response.message.text_content().startswith('"Impressive... most impressive." Indeed!')
        assert response.stop_reason is StopReason.END_TURN

    def test_tools_parallel(self) -> None:
        response = gemini.parse_response(Recording("gemini", "tools-parallel").response_json)
        assert response.message == assistant(
            thought_carrier(signature("tools-parallel")),
            ToolCallPart(id="AJnyaJv6GPulqtsP5Z6fgAs_0", name="secret_retrieval_tool", input={"password": "mellon"}),
            ToolCallPart(id="AJnyaJv6GPulqtsP5Z6fgAs_1", name="secret_retrieval_tool", input={"password": "radiance"}),
        )
        assert response.usage == Usage(input_tokens=70, output_tokens=40 + 76, cache_read_tokens=0, reasoning_tokens=76)
        assert (response.stop_reason, response.raw_stop_reason) == (StopReason.TOOL_CALL, "STOP")

    def test_text_stream(self) -> None:
        response, _ = decode(Recording("gemini", "text-stream").response_sse)
        assert response.message == Message.assistant(
            "To find the sum of 4200 + 42, we can align the numbers by their place values:\n\n  4200\n+   42\n"
            "------\n  4242\n\nSo, 4200 + 42 = **4242**."
        )
        assert response.usage == Usage(input_tokens=13, output_tokens=63 + 75, cache_read_tokens=0, reasoning_tokens=75)
        assert (response.stop_reason, response.raw_stop_reason) == (StopReason.END_TURN, "STOP")
        assert (response.model, response.id) == ("gemini-2.5-flash", "VJfyaP7eE_6zmtkP4qLV6Ao")

    def test_thinking_stream_joins_thought_summary_pieces_into_one_thinking_part(self) -> None:
        rec = Recording("gemini", "thinking-stream")
        thoughts = [
            json.loads(line[5:])["candidates"][0]["content"]["parts"][0]["text"]
            for line in rec.response_sse.decode().splitlines()[:-2]
            if line.startswith("data:")
        ]
        response, _ = decode(rec.response_sse)
        assert len(thoughts) == 4
        assert response.message == assistant(
            ThinkingPart(text="".join(thoughts), provider="gemini"), TextPart(text="3")
        )
        assert response.message.parts[0].text.startswith("**Analyzing Prime Substrings**")  # type: ignore[union-attr]
        # The last chunk reports no candidatesTokenCount: output is the 1947 thought tokens.
        assert response.usage == Usage(input_tokens=30, output_tokens=1947, cache_read_tokens=0, reasoning_tokens=1947)
        assert response.stop_reason is StopReason.END_TURN

    def test_tools_parallel_stream(self) -> None:
        response, _ = decode(Recording("gemini", "tools-parallel-stream").response_sse)
        assert response.message == assistant(
            thought_carrier(signature("tools-parallel-stream")),
            ToolCallPart(id="G5nyaJuGE-yrqtsPmJHUoAs_0", name="secret_retrieval_tool", input={"password": "mellon"}),
            ToolCallPart(id="G5nyaJuGE-yrqtsPmJHUoAs_1", name="secret_retrieval_tool", input={"password": "radiance"}),
        )
        assert response.usage == Usage(input_tokens=70, output_tokens=40 + 61, cache_read_tokens=0, reasoning_tokens=61)
        assert response.stop_reason is StopReason.TOOL_CALL

    def test_tools_parallel_stream_followup(self) -> None:
        response, _ = decode(Recording("gemini", "tools-parallel-stream-followup").response_sse)
        assert response.message == Message.assistant(
            'The secrets associated with the passwords "mellon" and "radiance" are "Welcome to Moria!" and '
            '"Life before Death" respectively.'
        )
        assert response.usage == Usage(input_tokens=211, output_tokens=30, cache_read_tokens=0, reasoning_tokens=0)
        assert response.stop_reason is StopReason.END_TURN

    def test_gemini3_tool_signature_stream_drops_the_final_empty_unsigned_text(self) -> None:
        response, _ = decode(Recording("gemini", "gemini3-tool-signature-stream").response_sse)
        assert response.message == assistant(
            thought_carrier(signature("gemini3-tool-signature-stream")),
            ToolCallPart(id="QUVVadTSNJ6_qtsPvN7J8Q0_0", name="get_country", input={}),
        )
        assert response.usage == Usage(input_tokens=29, output_tokens=10 + 202, cache_read_tokens=0, reasoning_tokens=202)
        assert (response.stop_reason, response.model) == (StopReason.TOOL_CALL, "gemini-3-pro-preview")

    def test_gemini3_tool_signature_stream_followup(self) -> None:
        response, _ = decode(Recording("gemini", "gemini3-tool-signature-stream-followup").response_sse)
        assert response.message == Message.assistant("The capital of Mexico is Mexico City.")
        assert response.usage == Usage(input_tokens=257, output_tokens=8, cache_read_tokens=0, reasoning_tokens=0)
        assert response.stop_reason is StopReason.END_TURN

    def test_vertex_partial_args_build_each_parallel_call(self) -> None:
        response, events = decode(Recording("gemini", "vertex-stream-partial-args-parallel").response_sse)
        assert response.message == assistant(
            thought_carrier(signature("vertex-stream-partial-args-parallel")),
            ToolCallPart(id="dqHOab6xGLzWodAPkPuViA4_0", name="getWeather", input={"location": "Boston"}),
            ToolCallPart(id="dqHOab6xGLzWodAPkPuViA4_1", name="getWeather", input={"location": "San Francisco"}),
        )
        # Each call's arguments reach observers once, when the call is complete.
        assert [e for e in events if isinstance(e, ToolCallDelta)] == [
            ToolCallDelta(1, '{"location":"Boston"}'),
            ToolCallDelta(2, '{"location":"San Francisco"}'),
        ]
        assert response.usage == Usage(input_tokens=26, output_tokens=23 + 132, cache_read_tokens=0, reasoning_tokens=132)
        assert response.stop_reason is StopReason.TOOL_CALL

    def test_every_successful_recording_is_covered_above(self) -> None:
        covered = {
            "text",
            "image-inline-data",
            "implicit-cache-usage",
            "tools-parallel",
            "text-stream",
            "thinking-stream",
            "tools-parallel-stream",
            "tools-parallel-stream-followup",
            "gemini3-tool-signature-stream",
            "gemini3-tool-signature-stream-followup",
            "vertex-stream-partial-args-parallel",
        }
        # The native-* recordings (built-in tools) are covered by tests/providers/test_native_recordings.py.
        assert {n for n in recordings("gemini") if not n.startswith(("error-", "native-"))} == covered


@pytest.mark.parametrize("name", STREAMS)
@pytest.mark.parametrize("split", ["lines", "bytes"])
def test_stream_decodes_the_same_however_the_bytes_are_split(name: str, split: str) -> None:
    body = Recording("gemini", name).response_sse
    whole, whole_events = decode(body)
    assert decode(body, split) == (whole, whole_events)


# --- errors ----------------------------------------------------------------------------------------------


class TestRecordedErrors:
    def test_api_key_invalid_is_an_authentication_error_although_gemini_sends_400(self) -> None:
        body = Recording("gemini", "error-400-api-key-invalid").response_json
        with pytest.raises(AuthenticationError) as caught:
            gemini.parse_response(body)
        assert caught.value.status == 400
        assert caught.value.provider_message == "API key not valid. Please pass a valid API key."
        error = gemini.error_from_http(400, json.dumps(body).encode())
        assert isinstance(error, AuthenticationError)
        assert error.provider == "gemini"

    @pytest.mark.parametrize("split", ["whole", "lines", "bytes"])
    def test_a_404_body_sent_in_place_of_a_stream_raises_model_not_found_from_finish(self, split: str) -> None:
        rec = Recording("gemini", "error-404-on-stream-request")
        assert rec.meta["response_content_type"] == "text/event-stream"
        raw = (rec.base / f"{rec.name}.response.json").read_bytes()
        with pytest.raises(ModelNotFound) as caught:
            decode(raw, split)
        assert caught.value.status == 404
        assert caught.value.provider_message is not None
        assert caught.value.provider_message.startswith("models/this-model-does-not-exist-12345 is not found")


class TestErrorFromHttp:
    def test_resource_exhausted_takes_retry_after_from_retry_info(self) -> None:
        # Body shape: google.rpc.Status with QuotaFailure + RetryInfo details (ai.google.dev/gemini-api/docs/
        # troubleshooting, 429 RESOURCE_EXHAUSTED).
        body = {
            "error": {
                "code": 429,
                "message": "You exceeded your current quota, please check your plan.",
                "status": "RESOURCE_EXHAUSTED",
                "details": [
                    {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaId": "x"}]},
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"},
                ],
            }
        }
        error = gemini.error_from_http(429, body, {"retry-after": "5"})
        assert isinstance(error, RateLimited)
        assert error.retry_after == 30.0
        assert error.retryable

    def test_fractional_retry_delay(self) -> None:
        body = {
            "error": {
                "code": 429,
                "status": "RESOURCE_EXHAUSTED",
                "message": "slow down",
                "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "34.4s"}],
            }
        }
        error = gemini.error_from_http(429, json.dumps(body))
        assert isinstance(error, RateLimited)
        assert error.retry_after == 34.4

    def test_retry_after_header_when_the_body_has_none(self) -> None:
        body = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
        error = gemini.error_from_http(503, body, {"Retry-After": "7"})
        assert isinstance(error, Overloaded)
        assert error.retry_after == 7.0

    def test_unavailable_is_overloaded(self) -> None:
        error = gemini.error_from_http(503, {"error": {"code": 503, "message": "x", "status": "UNAVAILABLE"}})
        assert isinstance(error, Overloaded)
        assert error.retry_after is None

    def test_invalid_argument_over_the_token_limit_is_a_context_overflow(self) -> None:
        message = "The input token count (1205846) exceeds the maximum number of tokens allowed (1048576)."
        error = gemini.error_from_http(400, {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}})
        assert isinstance(error, ContextOverflow)
        assert error.provider_message == message

    def test_other_invalid_argument_is_an_invalid_request_with_the_providers_message(self) -> None:
        message = "Function call is missing a thought_signature in functionCall parts."
        error = gemini.error_from_http(400, {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}})
        assert type(error) is InvalidRequest
        assert error.provider_message == message
        assert message in str(error)

    def test_internal_is_a_server_error(self) -> None:
        error = gemini.error_from_http(500, b'{"error": {"code": 500, "message": "boom", "status": "INTERNAL"}}')
        assert isinstance(error, ServerError)

    def test_permission_denied_is_an_authentication_error(self) -> None:
        body = {"error": {"code": 403, "message": "denied", "status": "PERMISSION_DENIED"}}
        assert isinstance(gemini.error_from_http(403, body), AuthenticationError)

    def test_error_in_a_json_array_as_stream_requests_without_alt_sse_get_it(self) -> None:
        body = [{"error": {"code": 404, "message": "no such model", "status": "NOT_FOUND"}}]
        error = gemini.error_from_http(404, json.dumps(body))
        assert isinstance(error, ModelNotFound)
        assert error.provider_message == "no such model"

    def test_a_body_that_is_not_json_keeps_its_text(self) -> None:
        error = gemini.error_from_http(502, b"<html>Bad Gateway</html>")
        assert isinstance(error, ServerError)
        assert error.provider_message == "<html>Bad Gateway</html>"


class TestStreamErrors:
    def test_an_error_event_mid_stream_raises_from_feed(self) -> None:
        decoder = gemini.StreamDecoder()
        decoder.feed(sse(chunk({"text": "Hel"})))
        with pytest.raises(ServerError) as caught:
            decoder.feed(
                sse({"error": {"code": 500, "message": "An internal error has occurred.", "status": "INTERNAL"}})
            )
        assert caught.value.provider_message == "An internal error has occurred."

    def test_a_stream_that_ends_before_finish_reason_is_truncated(self) -> None:
        with pytest.raises(StreamTruncated):
            decode(sse(chunk({"text": "Hel"})))

    def test_a_stream_cut_inside_its_last_event_is_truncated(self) -> None:
        body = sse(chunk({"text": "Hello"}), chunk({"text": "!"}, finish="STOP"))
        with pytest.raises(StreamTruncated):
            decode(body[:-10])

    def test_event_data_that_is_not_json_is_a_protocol_error(self) -> None:
        with pytest.raises(ProviderProtocolError, match="not JSON"):
            gemini.StreamDecoder().feed(b"data: {nope\r\n\r\n")


class TestSSEFraming:
    BODY = (chunk({"text": "Hello"}), chunk({"text": " world"}, finish="STOP"))

    def expected(self) -> Message:
        return Message.assistant("Hello world")

    @pytest.mark.parametrize("end", ["\r\n\r\n", "\n\n", "\r\r"])
    def test_line_ends(self, end: str) -> None:
        for split in ("whole", "bytes"):
            assert decode(sse(*self.BODY, end=end), split)[0].message == self.expected()

    def test_comments_and_data_without_a_space_after_the_colon(self) -> None:
        body = b": keep-alive\r\n\r\n" + b"data:" + json.dumps(self.BODY[0]).encode() + b"\r\n\r\n" + sse(self.BODY[1])
        assert decode(body)[0].message == self.expected()

    def test_named_events_and_done_sentinels_are_ignored(self) -> None:
        # Gemini sends neither; events with another name are not reply chunks.
        body = b"event: ping\r\ndata: {}\r\n\r\n" + sse(*self.BODY) + b"data: [DONE]\r\n\r\n"
        assert decode(body)[0].message == self.expected()

    def test_a_usage_only_chunk_after_the_last_candidate_updates_usage(self) -> None:
        usage = {"usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7}}
        response, _ = decode(sse(*self.BODY, usage))
        assert response.message == self.expected()
        assert response.usage == Usage(input_tokens=5, output_tokens=2, cache_read_tokens=0, reasoning_tokens=0)


# --- parts of a reply ------------------------------------------------------------------------------------


class TestReplyParts:
    def test_an_unknown_part_type_in_a_reply_is_a_protocol_error_naming_it(self) -> None:
        body = chunk({"hologram": {"code": "print(1)"}}, finish="STOP")
        with pytest.raises(ProviderProtocolError, match=r"unknown part type 'hologram'.*parts\[0\]|parts\[0\].*hologram"):
            gemini.parse_response(body)

    def test_a_reply_that_is_not_an_object_is_a_protocol_error(self) -> None:
        with pytest.raises(ProviderProtocolError):
            gemini.parse_response([1, 2])  # type: ignore[arg-type]

    def test_signed_text_is_not_joined_with_unsigned_pieces(self) -> None:
        # "Don't concatenate parts with signatures together" (ai.google.dev/gemini-api/docs/thinking).
        body = sse(chunk({"text": "I'll", "thoughtSignature": "c2ln"}), chunk({"text": " check."}, finish="STOP"))
        assert decode(body)[0].message == assistant(
            thought_carrier("c2ln"), TextPart(text="I'll"), TextPart(text=" check.")
        )

    def test_thought_pieces_join_and_a_signed_empty_thought_piece_closes_the_run(self) -> None:
        body = sse(
            chunk({"text": "Let me ", "thought": True}),
            chunk({"text": "think.", "thought": True}),
            chunk({"text": "", "thought": True, "thoughtSignature": "c2lnMQ=="}),
            chunk({"text": "Done."}, finish="STOP"),
        )
        assert decode(body)[0].message == assistant(
            ThinkingPart(text="Let me think.", signature="c2lnMQ==", provider="gemini"), TextPart(text="Done.")
        )

    def test_a_thought_part_keeps_its_own_signature(self) -> None:
        body = chunk({"text": "plan", "thought": True, "thoughtSignature": "c2ln"}, {"text": "answer"}, finish="STOP")
        assert gemini.parse_response(body).message == assistant(
            ThinkingPart(text="plan", signature="c2ln", provider="gemini"), TextPart(text="answer")
        )

    def test_a_call_with_arguments_missing_has_empty_input(self) -> None:
        body = chunk({"functionCall": {"name": "now"}}, finish="STOP")
        assert gemini.parse_response(body).message == assistant(ToolCallPart(id="resp1_0", name="now", input={}))

    def test_only_candidate_zero_is_read(self) -> None:
        body = chunk({"text": "first"}, finish="STOP")
        body["candidates"].append({"content": {"parts": [{"text": "second"}]}, "index": 1, "finishReason": "STOP"})
        assert gemini.parse_response(body).message == Message.assistant("first")


class TestVertexPartialArgs:
    def test_nested_paths_arrays_numbers_booleans_and_null(self) -> None:
        pieces = [
            {"functionCall": {"name": "plan", "willContinue": True}},
            {
                "functionCall": {
                    "partialArgs": [{"jsonPath": "$.trip.city", "stringValue": "Par", "willContinue": True}],
                    "willContinue": True,
                }
            },
            {"functionCall": {"partialArgs": [{"jsonPath": "$.trip.city", "stringValue": "is"}], "willContinue": True}},
            {
                "functionCall": {
                    "partialArgs": [
                        {"jsonPath": "$.stops[0]", "numberValue": 3},
                        {"jsonPath": "$.stops[1]", "numberValue": 4.5},
                        {"jsonPath": "$['fast mode']", "boolValue": True},
                        {"jsonPath": "$.note", "nullValue": "NULL_VALUE"},
                    ],
                    "willContinue": True,
                }
            },
            {"functionCall": {}},
        ]
        body = sse(*[chunk(p) for p in pieces], chunk(finish="STOP"))
        response, _ = decode(body, "bytes")
        assert response.message == assistant(
            ToolCallPart(
                id="resp1_0",
                name="plan",
                input={"trip": {"city": "Paris"}, "stops": [3, 4.5], "fast mode": True, "note": None},
            )
        )

    def test_a_call_still_streaming_when_finish_reason_arrives_is_completed(self) -> None:
        body = sse(
            chunk(
                {
                    "functionCall": {
                        "name": "f",
                        "willContinue": True,
                        "partialArgs": [{"jsonPath": "$.a", "stringValue": "x"}],
                    }
                }
            ),
            chunk(finish="STOP"),
        )
        assert decode(body)[0].message == assistant(ToolCallPart(id="resp1_0", name="f", input={"a": "x"}))

    def test_a_call_still_streaming_when_the_output_limit_arrives_is_an_invalid_call(self) -> None:
        body = sse(
            chunk({"functionCall": {"name": "f", "args": {"whole": 1}}}),
            chunk(
                {
                    "functionCall": {
                        "name": "g",
                        "willContinue": True,
                        "partialArgs": [{"jsonPath": "$.a", "stringValue": "hal", "willContinue": True}],
                    }
                }
            ),
            chunk(finish="MAX_TOKENS"),
        )
        response = decode(body)[0]
        assert response.message == assistant(
            ToolCallPart(id="resp1_0", name="f", input={"whole": 1}), ToolCallPart(id="resp1_1", name="g", input={})
        )
        assert response.stop_reason is StopReason.MAX_TOKENS
        assert response.invalid_tool_calls == (
            InvalidToolCall(
                "resp1_1",
                "g",
                '{"a":"hal"',
                "arguments are not valid JSON: unexpected end of data: line 1 column 11 (char 10)",
            ),
        )

    @pytest.mark.parametrize(
        ("piece", "match"),
        [
            ({"jsonPath": "$.a[3]", "numberValue": 1}, "skips elements"),
            ({"jsonPath": "$.a", "stringValue": 5}, "stringValue is not a string"),
            ({"stringValue": "x"}, "no jsonPath"),
        ],
    )
    def test_malformed_pieces_are_protocol_errors(self, piece: dict[str, Any], match: str) -> None:
        body = sse(chunk({"functionCall": {"name": "f", "willContinue": True, "partialArgs": [piece]}}))
        with pytest.raises(ProviderProtocolError, match=match):
            decode(body)

    def test_an_unsupported_json_path_is_a_protocol_error(self) -> None:
        body = sse(
            chunk(
                {
                    "functionCall": {
                        "name": "f",
                        "willContinue": True,
                        "partialArgs": [{"jsonPath": "$..a", "stringValue": "x"}],
                    }
                }
            )
        )
        with pytest.raises(ProviderProtocolError, match="jsonPath"):
            decode(body)


# --- stop reasons and usage --------------------------------------------------------------------------------


class TestStopReasons:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("STOP", StopReason.END_TURN),
            ("MAX_TOKENS", StopReason.MAX_TOKENS),
            ("SAFETY", StopReason.REFUSAL),
            ("RECITATION", StopReason.REFUSAL),
            ("BLOCKLIST", StopReason.REFUSAL),
            ("PROHIBITED_CONTENT", StopReason.REFUSAL),
            ("SPII", StopReason.REFUSAL),
            ("IMAGE_SAFETY", StopReason.REFUSAL),
            ("MALFORMED_FUNCTION_CALL", StopReason.END_TURN),
            ("OTHER", StopReason.END_TURN),
        ],
    )
    def test_finish_reason_maps_and_the_raw_value_is_kept(self, raw: str, expected: StopReason) -> None:
        response = gemini.parse_response(chunk(finish=raw))
        assert (response.stop_reason, response.raw_stop_reason) == (expected, raw)

    def test_stop_with_function_calls_is_tool_call(self) -> None:
        response = gemini.parse_response(chunk({"functionCall": {"name": "f", "args": {}}}, finish="STOP"))
        assert response.stop_reason is StopReason.TOOL_CALL

    def test_max_tokens_with_a_call_stays_max_tokens(self) -> None:
        response = gemini.parse_response(chunk({"functionCall": {"name": "f", "args": {}}}, finish="MAX_TOKENS"))
        assert response.stop_reason is StopReason.MAX_TOKENS

    def test_a_blocked_prompt_is_a_refusal_with_an_empty_message(self) -> None:
        body = {"promptFeedback": {"blockReason": "OTHER"}, "usageMetadata": {"promptTokenCount": 9}, "responseId": "r"}
        for response in (gemini.parse_response(body), decode(sse(body))[0]):
            assert (response.stop_reason, response.raw_stop_reason) == (StopReason.REFUSAL, "OTHER")
            assert response.message == Message.new(Role.ASSISTANT, [])
            assert response.usage == Usage(input_tokens=9, output_tokens=0, cache_read_tokens=0, reasoning_tokens=0)


class TestUsage:
    def test_tool_use_prompt_tokens_count_as_input_and_thoughts_as_output(self) -> None:
        body = chunk(
            finish="STOP",
            usageMetadata={
                "promptTokenCount": 100,
                "toolUsePromptTokenCount": 20,
                "cachedContentTokenCount": 60,
                "candidatesTokenCount": 7,
                "thoughtsTokenCount": 30,
                "totalTokenCount": 157,
            },
        )
        usage = gemini.parse_response(body).usage
        assert usage == Usage(input_tokens=120, output_tokens=37, cache_read_tokens=60, reasoning_tokens=30)
        assert usage.total_tokens == 157

    def test_a_count_that_is_not_an_integer_is_a_protocol_error(self) -> None:
        with pytest.raises(ProviderProtocolError, match="promptTokenCount"):
            gemini.parse_response(chunk(finish="STOP", usageMetadata={"promptTokenCount": "9"}))


def test_events_start_parts_in_order_and_finish_once() -> None:
    _, events = decode(Recording("gemini", "tools-parallel-stream").response_sse)
    assert [e.index for e in events if isinstance(e, PartStarted)] == [0, 1, 2]
    assert sum(isinstance(e, ResponseFinished) for e in events) == 1
