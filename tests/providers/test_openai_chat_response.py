"""OpenAI Chat non-streamed replies and HTTP errors, with hand-written bodies for what no recording shows."""

from __future__ import annotations

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
)
from loopctl.message import Message, TextPart, ThinkingPart, ToolCallPart
from loopctl.providers import openai_chat
from loopctl.response import InvalidToolCall, StopReason, Usage


def completion(message: dict[str, Any], finish: str | None = "stop", **top: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m-1",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
    }
    body.update(top)
    return body


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


class TestReply:
    def test_text_reply(self) -> None:
        reply = openai_chat.parse_response(completion({"content": "hi", "refusal": None, "annotations": []}))
        assert reply.message == Message.assistant("hi")
        assert (reply.stop_reason, reply.raw_stop_reason, reply.model, reply.id) == (
            StopReason.END_TURN,
            "stop",
            "m-1",
            "chatcmpl-1",
        )
        assert reply.usage == Usage(9, 3)

    def test_arguments_that_are_not_json_give_empty_input_and_an_invalid_tool_call(self) -> None:
        reply = openai_chat.parse_response(
            completion({"content": None, "tool_calls": [call("c1", "w", '{"a": ')]}, "length")
        )
        assert reply.message.parts == (ToolCallPart(id="c1", name="w", input={}),)
        [invalid] = reply.invalid_tool_calls
        assert isinstance(invalid, InvalidToolCall)
        assert (invalid.id, invalid.name, invalid.arguments) == ("c1", "w", '{"a": ')
        assert invalid.error.startswith("arguments are not valid JSON")
        assert reply.stop_reason is StopReason.MAX_TOKENS

    def test_stop_with_tool_calls_reads_as_tool_call(self) -> None:
        reply = openai_chat.parse_response(completion({"content": "", "tool_calls": [call("c1", "x", "{}")]}, "stop"))
        assert (reply.stop_reason, reply.raw_stop_reason) == (StopReason.TOOL_CALL, "stop")

    @pytest.mark.parametrize(
        ("finish", "stop"),
        [
            ("stop", StopReason.END_TURN),
            ("length", StopReason.MAX_TOKENS),
            ("tool_calls", StopReason.TOOL_CALL),
            ("function_call", StopReason.TOOL_CALL),
            ("content_filter", StopReason.REFUSAL),
            ("abort", StopReason.END_TURN),
            (None, StopReason.END_TURN),
        ],
    )
    def test_finish_reason_maps_to_stop_reason_and_keeps_the_raw_value(
        self, finish: str | None, stop: StopReason
    ) -> None:
        reply = openai_chat.parse_response(completion({"content": "x"}, finish))
        assert (reply.stop_reason, reply.raw_stop_reason) == (stop, finish)

    def test_refusal_is_text_and_stops_as_refusal(self) -> None:
        reply = openai_chat.parse_response(completion({"content": None, "refusal": "I can't help with that."}))
        assert reply.message == Message.assistant("I can't help with that.")
        assert reply.stop_reason is StopReason.REFUSAL

    @pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
    def test_compatible_reasoning_comes_first_as_a_thinking_part(self, field: str) -> None:
        reply = openai_chat.parse_response(completion({"content": "4", field: "2+2 is 4."}))
        assert reply.message.parts == (ThinkingPart(text="2+2 is 4.", provider="openai-compatible"), TextPart(text="4"))

    def test_legacy_function_call_is_a_tool_call_with_a_derived_id(self) -> None:
        body = completion(
            {"content": None, "function_call": {"name": "read", "arguments": '{"p": 1}'}}, "function_call"
        )
        reply = openai_chat.parse_response(body)
        assert reply.message.parts == (ToolCallPart(id="call_chatcmpl-1_0", name="read", input={"p": 1}),)
        assert reply.stop_reason is StopReason.TOOL_CALL

    def test_content_parts_from_a_compatible_server(self) -> None:
        reply = openai_chat.parse_response(
            completion({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})
        )
        assert reply.message.parts == (TextPart(text="a"), TextPart(text="b"))

    def test_usage_details_and_deepseek_cache_hits(self) -> None:
        body = completion({"content": "x"})
        body["usage"] = {
            "prompt_tokens": 3806,
            "completion_tokens": 76,
            "prompt_tokens_details": {"cached_tokens": 3072, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 20},
        }
        assert openai_chat.parse_response(body).usage == Usage(3806, 76, cache_read_tokens=3072, reasoning_tokens=20)
        body["usage"] = {
            "prompt_tokens": 100,
            "completion_tokens": 5,
            "prompt_cache_hit_tokens": 64,
            "prompt_cache_miss_tokens": 36,
        }
        assert openai_chat.parse_response(body).usage == Usage(100, 5, cache_read_tokens=64)

    def test_missing_or_null_usage_is_zero(self) -> None:
        assert openai_chat.parse_response(completion({"content": "x"}, usage=None)).usage == Usage()

    @pytest.mark.parametrize(
        ("body", "match"),
        [
            ({"id": "x", "choices": []}, "no choices"),
            (completion({"content": 5}), "neither a string nor null"),
            (completion({"content": None, "audio": {"id": "a"}}), "audio"),
            (completion({"content": None, "tool_calls": [{"id": "c", "type": "custom", "custom": {}}]}), "'custom'"),
            (completion({"content": [{"type": "image_url"}]}), "unknown content part type 'image_url'"),
        ],
    )
    def test_replies_the_codec_cannot_read_are_protocol_errors(self, body: dict[str, Any], match: str) -> None:
        with pytest.raises(ProviderProtocolError, match=match):
            openai_chat.parse_response(body)

    def test_an_error_object_in_a_200_body_raises(self) -> None:
        with pytest.raises(ContextOverflow):
            openai_chat.parse_response(
                {
                    "error": {
                        "message": "This model's maximum context length is 8192 tokens.",
                        "code": "context_length_exceeded",
                    }
                }
            )


def openai_error(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class TestHttpErrors:
    def test_429_rate_limit_is_retryable_with_retry_after_from_headers(self) -> None:
        body = openai_error("Rate limit reached for gpt-4o on tokens per min (TPM).", "tokens", "rate_limit_exceeded")
        error = openai_chat.error_from_http(429, body, {"Retry-After-Ms": "1500", "retry-after": "2"})
        assert type(error) is RateLimited
        assert error.retryable is True
        assert error.retry_after == 1.5

    @pytest.mark.parametrize(("text", "seconds"), [("20s", 20.0), ("1.054s", 1.054), ("6ms", 0.006), ("1m30s", 90.0)])
    def test_retry_after_from_the_message(self, text: str, seconds: float) -> None:
        body = openai_error(
            f"Rate limit reached. Please try again in {text}. Visit ...", "requests", "rate_limit_exceeded"
        )
        error = openai_chat.error_from_http(429, body)
        assert isinstance(error, RateLimited)
        assert error.retry_after == pytest.approx(seconds)

    @pytest.mark.parametrize("code", ["insufficient_quota", "credit_balance_exhausted", "project_spend_limit_exceeded"])
    def test_429_insufficient_quota_is_not_retryable(self, code: str) -> None:
        body = openai_error(
            "You exceeded your current quota, please check your plan and billing details.", "insufficient_quota", code
        )
        error = openai_chat.error_from_http(429, body)
        assert type(error) is RateLimited
        assert error.retryable is False
        assert RateLimited.retryable is True  # only this instance

    def test_400_context_length_exceeded_is_context_overflow(self) -> None:
        body = openai_error(
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
            "invalid_request_error",
            "context_length_exceeded",
        )
        error = openai_chat.error_from_http(400, body)
        assert type(error) is ContextOverflow
        assert error.status == 400

    def test_400_invalid_request_keeps_the_provider_message(self) -> None:
        error = openai_chat.error_from_http(
            400,
            openai_error("Invalid 'messages[2].tool_calls[0].id'", "invalid_request_error", "string_above_max_length"),
        )
        assert type(error) is InvalidRequest
        assert error.provider_message == "Invalid 'messages[2].tool_calls[0].id'"

    @pytest.mark.parametrize(
        ("status", "body", "kind"),
        [
            (
                401,
                openai_error("Incorrect API key provided: sk-xx.", "invalid_request_error", "invalid_api_key"),
                AuthenticationError,
            ),
            (
                403,
                openai_error(
                    "Country, region, or territory not supported",
                    "request_forbidden",
                    "unsupported_country_region_territory",
                ),
                AuthenticationError,
            ),
            (
                404,
                openai_error("The model `x` does not exist", "invalid_request_error", "model_not_found"),
                ModelNotFound,
            ),
            (500, openai_error("The server had an error while processing your request.", "server_error"), ServerError),
            (502, "<html>Bad gateway</html>", ServerError),
            (
                503,
                openai_error("The engine is currently overloaded, please try again later.", "server_error"),
                Overloaded,
            ),
        ],
    )
    def test_status_and_code_map_to_typed_errors(self, status: int, body: Any, kind: type) -> None:
        error = openai_chat.error_from_http(status, body)
        assert type(error) is kind
        assert error.status == status

    @pytest.mark.parametrize(
        ("body", "message"),
        [
            ({"error": "model is loading"}, "model is loading"),
            (
                {
                    "object": "error",
                    "message": "max_tokens is too large",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                },
                "max_tokens is too large",
            ),
            ({"detail": "Not authenticated"}, "Not authenticated"),
            (b"upstream connect error", "upstream connect error"),
            (None, None),
        ],
    )
    def test_compatible_servers_error_shapes(self, body: Any, message: str | None) -> None:
        error = openai_chat.error_from_http(400, body)
        assert type(error) is InvalidRequest
        assert error.provider_message == message

    def test_body_given_as_bytes_is_parsed(self) -> None:
        error = openai_chat.error_from_http(
            404, b'{"error": {"message": "nope", "type": "invalid_request_error", "code": "model_not_found"}}'
        )
        assert type(error) is ModelNotFound
        assert error.body == {"error": {"message": "nope", "type": "invalid_request_error", "code": "model_not_found"}}
