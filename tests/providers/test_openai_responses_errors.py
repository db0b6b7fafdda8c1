"""OpenAI Responses error mapping: HTTP error replies and error bodies to ``loopctl.errors`` types.

Bodies are the API's documented error shape ``{"error": {"message", "type", "param", "code"}}``; the two
recorded 400s are covered in test_openai_responses_recordings.py."""

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
    ProviderError,
    ProviderProtocolError,
    RateLimited,
    ServerError,
)
from loopctl.providers import openai_responses as codec


def body(message: str, type_: str | None = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


RATE = body(
    "Rate limit reached for gpt-5 in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, "
    "Requested 2000. Please try again in 2.5s. Visit https://platform.openai.com/account/rate-limits.",
    "tokens",
    "rate_limit_exceeded",
)


class TestRateLimits:
    def test_429_is_rate_limited_and_retryable(self) -> None:
        err = codec.error_from_http(429, RATE)
        assert type(err) is RateLimited
        assert err.retryable
        assert err.status == 429
        assert err.provider == "openai"

    def test_retry_after_from_headers_wins(self) -> None:
        assert codec.error_from_http(429, RATE, {"Retry-After": "7"}).retry_after == 7.0  # type: ignore[attr-defined]
        assert codec.error_from_http(429, RATE, {"retry-after-ms": "1500"}).retry_after == 1.5  # type: ignore[attr-defined]

    @pytest.mark.parametrize(
        ("text", "seconds"),
        [
            ("Please try again in 2.5s.", 2.5),
            ("Please try again in 20ms.", 0.02),
            ("Please try again in 1m12.5s.", 72.5),
        ],
    )
    def test_retry_after_from_the_message_when_no_header(self, text: str, seconds: float) -> None:
        err = codec.error_from_http(429, body(text, "tokens", "rate_limit_exceeded"))
        assert isinstance(err, RateLimited)
        assert err.retry_after == pytest.approx(seconds)

    def test_no_retry_hint_is_none(self) -> None:
        err = codec.error_from_http(
            429, body("You exceeded your current quota.", "insufficient_quota", "insufficient_quota")
        )
        assert isinstance(err, RateLimited)
        assert err.retry_after is None


class TestStatuses:
    def test_401_is_authentication(self) -> None:
        err = codec.error_from_http(401, body("Incorrect API key provided: sk-...", code="invalid_api_key"))
        assert type(err) is AuthenticationError
        assert not err.retryable

    def test_403_is_authentication(self) -> None:
        assert (
            type(codec.error_from_http(403, body("Project does not have access", "permission_error")))
            is AuthenticationError
        )

    def test_404_is_model_not_found(self) -> None:
        err = codec.error_from_http(
            404, body("The model `gpt-9` does not exist or you do not have access to it.", code="model_not_found")
        )
        assert type(err) is ModelNotFound
        assert err.provider_message == "The model `gpt-9` does not exist or you do not have access to it."

    def test_context_overflow(self) -> None:
        err = codec.error_from_http(
            400,
            body(
                "Your input exceeds the context window of this model. Please adjust your input and try again.",
                code="context_length_exceeded",
            ),
        )
        assert type(err) is ContextOverflow
        assert isinstance(err, InvalidRequest)

    def test_other_400_is_invalid_request_with_the_provider_message(self) -> None:
        err = codec.error_from_http(400, body("Unsupported parameter: 'stop'.", code="unsupported_parameter"))
        assert type(err) is InvalidRequest
        assert err.provider_message == "Unsupported parameter: 'stop'."
        assert "Unsupported parameter" in str(err)
        assert "HTTP 400" in str(err)

    def test_500_is_server_error(self) -> None:
        err = codec.error_from_http(500, body("The server had an error while processing your request.", "server_error"))
        assert type(err) is ServerError
        assert err.retryable

    def test_503_is_overloaded(self) -> None:
        err = codec.error_from_http(
            503,
            body("The engine is currently overloaded, please try again later", "server_error"),
            {"retry-after": "3"},
        )
        assert type(err) is Overloaded
        assert err.retry_after == 3.0


class TestBodies:
    def test_bytes_str_and_mapping_bodies_agree(self) -> None:
        raw = json.dumps(RATE)
        errors = [codec.error_from_http(429, b) for b in (raw.encode(), raw, RATE)]
        assert {type(e) for e in errors} == {RateLimited}
        assert {e.provider_message for e in errors} == {RATE["error"]["message"]}
        assert all(e.body == RATE for e in errors)

    def test_a_body_that_is_not_json_is_kept_as_text(self) -> None:
        err = codec.error_from_http(502, b"<html>Bad gateway</html>")
        assert type(err) is ServerError
        assert err.body == "<html>Bad gateway</html>"

    def test_no_body(self) -> None:
        assert type(codec.error_from_http(429, None)) is RateLimited
        assert type(codec.error_from_http(418, None)) is InvalidRequest


class TestParseResponseErrors:
    def test_an_error_body_raises_its_type(self) -> None:
        with pytest.raises(RateLimited) as info:
            codec.parse_response(RATE)
        assert info.value.retry_after == 2.5
        assert info.value.status is None

    def test_a_failed_response_raises(self) -> None:
        failed = {
            "id": "resp_1",
            "status": "failed",
            "output": [],
            "error": {"code": "server_error", "message": "boom"},
        }
        with pytest.raises(ServerError, match="boom"):
            codec.parse_response(failed)

    def test_a_failed_response_without_error_details_is_a_server_error(self) -> None:
        with pytest.raises(ServerError):
            codec.parse_response({"id": "resp_1", "status": "failed", "output": [], "error": None})

    @pytest.mark.parametrize("status", ["in_progress", "queued", "cancelled"])
    def test_an_unfinished_response_is_a_protocol_error(self, status: str) -> None:
        with pytest.raises(ProviderProtocolError, match=status):
            codec.parse_response({"id": "resp_1", "status": status, "output": [], "error": None})

    def test_not_an_object(self) -> None:
        with pytest.raises(ProviderProtocolError):
            codec.parse_response([])  # type: ignore[arg-type]

    def test_no_output(self) -> None:
        with pytest.raises(ProviderProtocolError, match="output"):
            codec.parse_response({"id": "resp_1", "status": "completed"})

    def test_unknown_output_item_type_names_it(self) -> None:
        reply = {
            "status": "completed",
            "output": [{"type": "message", "id": "m", "content": []}, {"type": "computer_call", "id": "cu_1"}],
        }
        with pytest.raises(ProviderProtocolError, match=r"output\[1\].*computer_call"):
            codec.parse_response(reply)

    def test_unknown_content_type_names_it(self) -> None:
        reply = {
            "status": "completed",
            "output": [{"type": "message", "id": "m", "content": [{"type": "output_audio"}]}],
        }
        with pytest.raises(ProviderProtocolError, match=r"output\[0\]\.content\[0\].*output_audio"):
            codec.parse_response(reply)

    def test_function_call_without_call_id_is_a_protocol_error(self) -> None:
        reply = {
            "status": "completed",
            "output": [{"type": "function_call", "id": "fc_1", "name": "f", "arguments": "{}"}],
        }
        with pytest.raises(ProviderProtocolError, match=r"output\[0\]\.call_id is missing"):
            codec.parse_response(reply)

    def test_every_error_is_a_provider_error(self) -> None:
        for status in (400, 401, 403, 404, 409, 422, 429, 500, 503):
            assert isinstance(codec.error_from_http(status, body("x")), ProviderError)
