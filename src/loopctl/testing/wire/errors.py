"""Scripted error replies in each provider's own error shape, before a stream or in the middle of one.

Shapes: OpenAI ``{"error": {message, type, param, code}}`` (recordings ``openai/*error*``; a rate limit is
type ``requests`` / ``tokens`` with code ``rate_limit_exceeded``); Anthropic ``{"type": "error", "error":
{type, message}, "request_id"}`` (``anthropic/error-*``; https://docs.claude.com/en/api/errors lists the
types, 529 ``overloaded_error`` included); Gemini ``{"error": {code, message, status[, details]}}``
(``gemini/error-*``; a 429 is ``RESOURCE_EXHAUSTED`` with a ``google.rpc.RetryInfo`` detail). Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import field
from typing import Any, Literal, TypeAlias

from loopctl._frozen import dataclass
from loopctl.testing.wire._common import API, Encoded, dumps

__all__ = ["ErrorKind", "ErrorReply", "encode_error", "error_body", "stream_error_frame"]

ErrorKind: TypeAlias = Literal[
    "invalid_request", "unauthorized", "not_found", "rate_limited", "overloaded", "server_error", "context_overflow"
]
"""What went wrong, provider-neutral; each API words it its own way."""


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """A scripted error reply, written in the API's error body shape.

    Give a ``kind`` (the status and the provider's error type follow, per API: ``"overloaded"`` is
    Anthropic's 529 ``overloaded_error`` and a 503 elsewhere), or a ``status`` (the kind is inferred), or
    both. ``message``, ``error_type`` (OpenAI ``type``, Anthropic ``error.type``, Gemini ``status``) and
    ``code`` (OpenAI only) default to what the provider sends for that kind. ``retry_after`` (seconds)
    becomes a ``retry-after`` header for OpenAI and Anthropic, and a ``google.rpc.RetryInfo`` detail with
    ``retryDelay`` in the Gemini body (Gemini's way). ``headers`` are added as given; ``body`` (a JSON value,
    or bytes) replaces the generated body.
    """

    kind: ErrorKind | None = None
    status: int | None = None
    message: str | None = None
    error_type: str | None = None
    code: str | None = None
    retry_after: float | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None

    @classmethod
    def rate_limited(cls, retry_after: float | None = 1.0, **kw: Any) -> ErrorReply:
        """HTTP 429 with the provider's rate-limit body; ``retry_after`` in seconds (``None``: no hint).

        Other keywords (``kw``) set the remaining fields (``message``, ``headers``...).
        """
        return cls(kind="rate_limited", retry_after=retry_after, **kw)

    @classmethod
    def overloaded(cls, retry_after: float | None = None, **kw: Any) -> ErrorReply:
        """Anthropic's 529 ``overloaded_error``; a 503 with the provider's overload body elsewhere.

        ``retry_after`` in seconds (``None``: no hint); other keywords (``kw``) set the remaining fields.
        """
        return cls(kind="overloaded", retry_after=retry_after, **kw)

    @classmethod
    def context_overflow(cls, **kw: Any) -> ErrorReply:
        """HTTP 400 saying the prompt is longer than the context window, in the provider's words.

        Other keywords (``kw``) set the remaining fields.
        """
        return cls(kind="context_overflow", **kw)

    def resolved_kind(self) -> ErrorKind:
        """``kind``, or the kind its ``status`` means (500 when neither is given)."""
        if self.kind is not None:
            return self.kind
        status = self.status or 500
        if status == 429:
            return "rate_limited"
        if status in (503, 529):
            return "overloaded"
        if status in (401, 403):
            return "unauthorized"
        if status == 404:
            return "not_found"
        return "server_error" if status >= 500 else "invalid_request"


# Per kind: status, OpenAI (type, code), Anthropic type, Gemini status, message.
_KINDS: dict[str, tuple[int, tuple[str, str | None], str, str, str]] = {
    "invalid_request": (400, ("invalid_request_error", None), "invalid_request_error", "INVALID_ARGUMENT",
                        "Invalid request."),
    "unauthorized": (401, ("invalid_request_error", "invalid_api_key"), "authentication_error", "UNAUTHENTICATED",
                     "Invalid API key."),
    "not_found": (404, ("invalid_request_error", "model_not_found"), "not_found_error", "NOT_FOUND",
                  "The model {model} does not exist."),
    "rate_limited": (429, ("requests", "rate_limit_exceeded"), "rate_limit_error", "RESOURCE_EXHAUSTED",
                     "Rate limit reached for {model}. Please try again later."),
    "overloaded": (503, ("server_error", None), "overloaded_error", "UNAVAILABLE",
                   "The model is overloaded. Please try again later."),
    "server_error": (500, ("server_error", None), "api_error", "INTERNAL", "Internal server error."),
    "context_overflow": (400, ("invalid_request_error", "context_length_exceeded"), "invalid_request_error",
                         "INVALID_ARGUMENT", ""),
}  # fmt: skip

# Each provider's wording for a prompt over the window (phrases loopctl.providers._common recognizes).
_OVERFLOW = {
    "openai": "This model's maximum context length is 128000 tokens. However, your messages resulted in "
    "130000 tokens. Please reduce the length of the messages.",
    "anthropic": "prompt is too long: 210000 tokens > 200000 maximum",
    "gemini": "The input token count (1100000) exceeds the maximum number of tokens allowed (1048576).",
}


def _family(api: str) -> str:
    return "openai" if api.startswith("openai") else api


def error_body(api: API, error: ErrorReply, *, model: str = "") -> tuple[int, Any]:
    """``(HTTP status, body)`` of ``error`` as ``api`` sends it.

    ``model`` fills the default message's model name ("the model" when empty).
    """
    kind = error.resolved_kind()
    status, (oa_type, oa_code), an_type, gm_status, text = _KINDS[kind]
    family = _family(api)
    if error.status is not None:
        status = error.status
    elif kind == "overloaded" and family == "anthropic":
        status = 529
    if error.body is not None:
        return status, error.body
    if kind == "context_overflow":
        text = _OVERFLOW[family]
    message = error.message if error.message is not None else text.format(model=model or "the model")
    if family == "openai":
        code = error.code if error.code is not None else oa_code
        return status, {"error": {"message": message, "type": error.error_type or oa_type, "param": None, "code": code}}
    if family == "anthropic":
        inner = {"type": error.error_type or an_type, "message": message}
        return status, {"type": "error", "error": inner, "request_id": "req_fake"}
    detail: dict[str, Any] = {"code": status, "message": message, "status": error.error_type or gm_status}
    if error.retry_after is not None:
        retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{error.retry_after:g}s"}
        detail["details"] = [retry]
    return status, {"error": detail}


def encode_error(api: API, error: ErrorReply, *, stream: bool = False, model: str = "") -> Encoded:
    """``error`` as a whole HTTP reply. An error comes before any event even when a stream was asked for, as
    plain JSON; Gemini labels that JSON ``text/event-stream`` (recording gemini/error-404-on-stream-request),
    the others ``application/json`` (openai/responses-error-400-on-stream-request).

    ``api`` is one of :data:`~loopctl.testing.wire.APIS`; ``model`` fills the default message's model name.
    """
    status, body = error_body(api, error, model=model)
    raw = body if isinstance(body, bytes) else json.dumps(body, indent=2).encode()
    headers = dict(error.headers)
    if error.retry_after is not None and _family(api) != "gemini":
        headers.setdefault("retry-after", f"{error.retry_after:g}")
    content_type = "text/event-stream" if api == "gemini" and stream else "application/json"
    return Encoded(status, content_type, (raw,), False, tuple(headers.items()))


def stream_error_frame(api: API, error: ErrorReply, *, sequence_number: int = 0, model: str = "") -> bytes:
    """The SSE frame a provider sends when a stream fails after it began: Anthropic ``event: error`` with
    ``{"type": "error", "error": {...}}`` (docs, "Error events", e.g. ``overloaded_error``); Responses
    ``event: error`` with ``code``, ``message``, ``param`` and ``sequence_number`` (the SDK's
    ``ResponseErrorEvent``); Chat and Gemini a ``data:`` line holding the error object (what the openai SDK
    looks for in a Chat stream).

    ``api`` is one of :data:`~loopctl.testing.wire.APIS`; ``model`` is named in the frame where the provider names
    it.
    """
    _, body = error_body(api, error, model=model)
    if api == "anthropic":
        return b"event: error\ndata: " + dumps({"type": "error", "error": body["error"]}) + b"\n\n"
    if api == "openai-responses":
        inner = body["error"]
        payload = {
            "type": "error",
            "code": inner.get("code") or inner.get("type"),
            "message": inner["message"],
            "param": None,
            "sequence_number": sequence_number,
        }
        return b"event: error\ndata: " + dumps(payload) + b"\n\n"
    if api == "gemini":
        from loopctl.testing.wire import gemini

        return b"data: " + gemini.dumps(body) + b"\r\n\r\n"
    return b"data: " + dumps(body) + b"\n\n"
