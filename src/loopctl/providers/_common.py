"""Helpers the codecs share: HTTP error classification, retry-after parsing, tool-id rewriting.

Pure: no I/O, no clock (an HTTP-date ``Retry-After`` needs "now", so the caller passes it in).
"""

from __future__ import annotations

import email.utils
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from loopctl.errors import (
    AuthenticationError,
    ContextOverflow,
    InvalidRequest,
    ModelNotFound,
    Overloaded,
    ProviderError,
    RateLimited,
    ServerError,
)

__all__ = ["classify_http_error", "is_context_overflow", "parse_retry_after", "rewrite_tool_id"]

# Phrases providers use for "the prompt is longer than the window" (OpenAI ``context_length_exceeded``,
# Anthropic "prompt is too long", Gemini "exceeds the maximum number of tokens").
_OVERFLOW = re.compile(
    r"context[_ ]length[_ ]exceeded|maximum context length|prompt is too long|context window|"
    r"exceeds the maximum number of tokens|input token count.*exceeds|too many tokens",
    re.IGNORECASE,
)


def is_context_overflow(message: str | None, code: str | None = None) -> bool:
    """True when a provider's error text or code says the request is over the context window."""
    return bool((code and _OVERFLOW.search(code)) or (message and _OVERFLOW.search(message)))


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds, or an HTTP-date when ``now``, a
    Unix time in seconds, is given). ``None`` when absent or unreadable."""
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    ms = lower.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = lower.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    if now is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - now)


def classify_http_error(
    provider: str,
    status: int,
    *,
    message: str | None,
    error_type: str | None = None,
    body: Any = None,
    retry_after: float | None = None,
) -> ProviderError:
    """The typed error for an HTTP error reply.

    ``error_type`` is the provider's own error kind when it gives one (Anthropic ``overloaded_error``, OpenAI
    ``invalid_request_error`` / ``context_length_exceeded``, Gemini ``RESOURCE_EXHAUSTED``); it wins over the
    status where the two disagree (Anthropic sends ``overloaded_error`` as 529).
    """
    kind = (error_type or "").lower()
    text = message or f"HTTP {status}"
    kw: dict[str, Any] = {"provider": provider, "status": status, "provider_message": message, "body": body}
    if kind in ("overloaded_error", "unavailable") or status in (503, 529):
        return Overloaded(text, retry_after=retry_after, **kw)
    if kind in ("rate_limit_error", "rate_limit_exceeded", "resource_exhausted") or status == 429:
        return RateLimited(text, retry_after=retry_after, **kw)
    if kind in ("authentication_error", "permission_error", "unauthenticated", "permission_denied") or status in (
        401,
        403,
    ):
        return AuthenticationError(text, **kw)
    if kind in ("not_found_error", "model_not_found", "not_found") or status == 404:
        return ModelNotFound(text, **kw)
    if status >= 500 or kind in ("api_error", "internal", "server_error"):
        return ServerError(text, **kw)
    if is_context_overflow(message, error_type):
        return ContextOverflow(text, **kw)
    return InvalidRequest(text, **kw)


_SAFE = re.compile(r"^[A-Za-z0-9_-]+$")


def rewrite_tool_id(call_id: str, *, max_len: int = 64, pattern: re.Pattern[str] = _SAFE) -> str:
    """A tool-call id the target API accepts, derived deterministically from ``call_id``.

    An id that already matches ``pattern`` and fits ``max_len`` comes back unchanged. Otherwise the
    unsafe characters become ``_`` and a short hash of the original is appended, so two different ids never
    collide and the call and its result, rewritten separately, still match.
    """
    if len(call_id) <= max_len and pattern.match(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", call_id)
    keep = max(0, max_len - len(digest) - 1)
    return f"{cleaned[:keep]}_{digest}" if keep else digest[:max_len]
