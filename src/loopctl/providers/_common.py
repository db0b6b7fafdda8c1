"""Helpers the codecs share: HTTP error classification, retry-after parsing, tool-id rewriting.

Pure: no I/O, no clock (an HTTP-date ``Retry-After`` needs "now", so the caller passes it in).
"""

from __future__ import annotations

import datetime
import email.utils
import functools
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from loopctl.errors import (
    AuthenticationError,
    ContextOverflow,
    InvalidRequest,
    ModelNotFound,
    Overloaded,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ServerError,
    UnsupportedContent,
)
from loopctl.message import Message, Role, TextPart, ToolCallPart, ToolResultPart
from loopctl.message.check import ConversationRule, first_invalid_string
from loopctl.message.model import has_lone_surrogate, lone_surrogate_in_json
from loopctl.tool import ToolSchema

__all__ = [
    "TOOL_ERROR_MARKER",
    "check_pairing",
    "classify_http_error",
    "ends_on_an_empty_prompt",
    "error_from_status_code",
    "http_status_code",
    "is_context_overflow",
    "is_zero_valued",
    "nothing_to_send",
    "parse_retry_after",
    "refuse_unwritable_message",
    "refuse_unwritable_options",
    "rewrite_tool_id",
]

TOOL_ERROR_MARKER = "[tool error] "
"""Put before the text of a failed tool result where the API has no error flag for one (OpenAI Chat's
``role: "tool"`` message, OpenAI Responses' ``function_call_output``), so the model can tell a failure from
an output. Anthropic sends ``is_error: true``; Gemini puts a failure under the ``error`` key of
``functionResponse.response`` instead of ``output`` (google-genai ``FunctionResponse.response``)."""

# Phrases providers use for "the prompt is longer than the window" (OpenAI ``context_length_exceeded``,
# Anthropic "prompt is too long", Gemini "exceeds the maximum number of tokens", OpenRouter's mid-stream
# "Token limit reached"), and the local servers': llama.cpp's error type ``exceed_context_size_error`` and
# "request (N tokens) exceeds the available context size (M tokens)" (tools/server/server-common.cpp,
# server-context.cpp), vLLM's "This model's maximum context length is ..." and "the model's context length is
# only ..." (vllm/entrypoints/renderer.py, vllm/renderers/params.py), Ollama's "the prompt is longer than the
# context length currently available to the model" (llm/llama_server.go) and "the input length exceeds the
# context length" (server/routes.go). Compiled when an error is first read (docs/performance.md, section 12).
_OVERFLOW = (
    r"context[_ ]length[_ ]exceeded|maximum context length|prompt is too long|context window|"
    r"exceeds the maximum number of tokens|input token count.*exceeds|too many tokens|token limit reached|"
    r"exceed_context_size_error|exceeds the available context size|context length is only|"
    r"longer than the context length|input length exceeds the context length"
)


@functools.cache
def _overflow() -> re.Pattern[str]:
    return re.compile(_OVERFLOW, re.IGNORECASE)


def is_zero_valued(value: Any) -> bool:
    """True for a JSON value that holds nothing: ``null``, ``false``, ``0``, ``""``, ``[]``, or an object whose
    every value is zero-valued (``{"data": "", "expires_at": 0}``). Some OpenAI-compatible servers write every
    optional field of a reply this way instead of leaving it out (Snowflake Cortex sends ``"audio": {"id": "",
    "data": "", ...}`` and ``"function_call": {"name": "", "arguments": ""}`` in every reply, Go encoders
    without ``omitempty``); such an object is absent, not content."""
    if value is None or value is False or value == "":
        return True
    kind = type(value)
    if kind is dict:  # what JSON decodes to: checked first, as an ABC check costs more
        return all(is_zero_valued(v) for v in value.values())
    if kind is list:
        return not value
    if kind is int or kind is float:
        return bool(value == 0)
    if kind is bool or kind is str:
        return False
    # Not what JSON decodes to (subclasses, other mappings): the same rules by isinstance.
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return bool(value == 0)
    if isinstance(value, Mapping):
        return all(is_zero_valued(v) for v in value.values())
    if isinstance(value, list):
        return not value
    return False


def is_context_overflow(message: str | None, code: str | None = None) -> bool:
    """True when a provider's error text or code says the request is over the context window."""
    return bool((code and _overflow().search(code)) or (message and _overflow().search(message)))


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (milliseconds, OpenAI's) or ``retry-after`` (RFC 9110 section
    10.2.3: a number of seconds, or an HTTP-date, read when ``now``, the current Unix time in seconds, is
    given; a date in the past is 0). ``None`` when absent or unreadable. Header names are matched without
    regard to case."""
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
        date = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if date.tzinfo is None:  # "-0000": the zone is not given; an HTTP-date is always GMT
        date = date.replace(tzinfo=datetime.UTC)
    return max(0.0, date.timestamp() - now)


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
    if status == 408:  # Request Timeout (RFC 9110 section 15.5.9): the request may be repeated
        return ProviderTimeout(text, **kw)
    if status >= 500 or kind in ("api_error", "internal", "server_error"):
        return ServerError(text, **kw)
    if is_context_overflow(message, error_type):
        return ContextOverflow(text, **kw)
    return InvalidRequest(text, **kw)


def http_status_code(error: Any) -> int | None:
    """The HTTP status an error object names as its ``code`` (an integer, or a string of digits, from 400 to
    599), or ``None``. OpenRouter's errors are ``{"error": {"code": 400, "message", "metadata"}}``, where
    "the HTTP Response will have the same status code as error.code" (openrouter.ai/docs/api/reference/
    errors-and-debugging); an error that occurs while the model is producing the output comes after a 200,
    "emitted in the response body or as an SSE data event", so its ``code`` is the only status it has."""
    if not isinstance(error, Mapping):
        return None
    code = error.get("code")
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
        return code
    return None


def error_from_status_code(
    provider: str,
    code: int,
    *,
    message: str | None,
    error_type: str | None = None,
    body: Any = None,
    retry_after: float | None = None,
) -> ProviderError:
    """The typed error for an error object that names an HTTP status (``code``, see :func:`http_status_code`)
    but arrived without one: classified as :func:`classify_http_error` classifies that status (a 400 saying
    "Token limit reached" is a :class:`~loopctl.errors.ContextOverflow`, not retryable; a 429 is
    ``RateLimited``, a 502 a ``ServerError``), with ``status`` left unset (the reply's own status was 200)."""
    cls = type(classify_http_error(provider, code, message=message, error_type=error_type))
    text = message or f"error {code}"
    kw: dict[str, Any] = {"provider": provider, "provider_message": message, "body": body}
    if issubclass(cls, (RateLimited, Overloaded)):
        return cls(text, retry_after=retry_after, **kw)
    return cls(text, **kw)


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


def check_pairing(messages: Sequence[Message], api: str, start: int = 0) -> int:
    """Raise :class:`~loopctl.errors.UnsupportedContent` naming the path of the first tool call or result that
    breaks the pairing every provider enforces, so a request it would refuse is never sent.

    The rules are :func:`~loopctl.message.check_conversation`'s pairing rules (``docs/wire-format.md``): a result
    answers a call of the assistant message before it, once; a call's id is unique in its message; every
    call is answered before the next assistant message, and the last assistant message's calls before the
    request ends when any message follows it (they may still be waiting only when that message is the
    request's last, as check_conversation allows). Each provider refuses each break with a 400:
    Anthropic "unexpected `tool_use_id` found in `tool_result` blocks" and "`tool_use` ids were found without
    `tool_result` blocks immediately after" (anthropics/claude-code#13460, #5060); Chat Completions "messages
    with role 'tool' must be a response to a preceeding message with 'tool_calls'" and "An assistant message
    with 'tool_calls' must be followed by tool messages" (BerriAI/litellm#10083); Responses "No tool call
    found for function call output" and "No tool output found for function call" (continuedev/continue#10092,
    openai/openai-agents-python#673); Gemini "the number of function response parts is equal to the number
    of function call parts of the function call turn" (google-gemini/gemini-cli#5443). A call removed by
    compaction while its result stayed is the usual cause. ``api`` names the API in the error. Calls outside
    assistant messages and results outside user messages are left to the codec, which refuses them itself.
    One pass over the parts, no allocation for messages without tool parts.

    ``start`` (the index of an assistant message, or 0) checks ``messages[start:]`` only, paths still counted
    from the start: what an incremental build does when ``messages[:start + 1]`` passed before (the pairing
    state starts afresh at every assistant message once the turn before it is known to be answered).

    Returns the index of the last assistant message in ``messages[start:]`` (-1 when there is none): where the
    next incremental check of a conversation that continues this one may start.
    """
    calls: dict[str, None] = {}  # the latest assistant message's call ids, in order (the error names the first)
    answered: set[str] = set()
    turn = -1  # index of that assistant message
    assistant, user = Role.ASSISTANT, Role.USER
    for mi, message in enumerate(messages[start:] if start else messages, start):
        role = message.role
        if role is assistant:
            if len(answered) < len(calls):
                call_id = next(c for c in calls if c not in answered)
                raise _pairing_error(
                    _part_path(messages, turn, call_id, ToolCallPart),
                    f"tool call {call_id!r} has no result before the next assistant message (messages[{mi}])",
                    ConversationRule.UNANSWERED_TOOL_CALL,
                    api,
                )
            if calls:
                calls = {}
                answered = set()
            turn = mi
            for part in message.parts:
                if isinstance(part, ToolCallPart):  # a subclass's call is a call (as the codecs send it)
                    if part.id in calls:
                        raise _pairing_error(
                            _part_path(messages, mi, part.id, ToolCallPart, nth=1),
                            f"tool-call id {part.id!r} is used twice in one message",
                            ConversationRule.DUPLICATE_TOOL_CALL_ID,
                            api,
                        )
                    calls[part.id] = None
        elif role is user:
            for pi, part in enumerate(message.parts):
                if isinstance(part, ToolResultPart):
                    call_id = part.call_id
                    if call_id not in calls:
                        raise _pairing_error(
                            f"messages[{mi}].parts[{pi}]",
                            f"the tool result for {call_id!r} answers no tool call of the assistant message "
                            "before it (was its call removed?)",
                            ConversationRule.TOOL_RESULT_WITHOUT_CALL,
                            api,
                        )
                    if call_id in answered:
                        raise _pairing_error(
                            f"messages[{mi}].parts[{pi}]",
                            f"tool call {call_id!r} is answered twice",
                            ConversationRule.DUPLICATE_TOOL_RESULT,
                            api,
                        )
                    answered.add(call_id)
    if len(answered) < len(calls) and turn < len(messages) - 1:
        # A message follows the last reply without answering all of its calls (a session cut or forked after
        # a reply that called tools, then given new input): refused as the rule above is.
        call_id = next(c for c in calls if c not in answered)
        raise _pairing_error(
            _part_path(messages, turn, call_id, ToolCallPart),
            f"tool call {call_id!r} has no result in the messages after it (up to messages[{len(messages) - 1}])",
            ConversationRule.UNANSWERED_TOOL_CALL,
            api,
        )
    return turn


def _part_path(messages: Sequence[Message], mi: int, call_id: str, kind: type, nth: int = 0) -> str:
    """The path of the ``nth`` (from 0) call or result with ``call_id`` in ``messages[mi]`` (found again only
    for an error, so the pass over good conversations keeps no indices)."""
    seen = 0
    for pi, part in enumerate(messages[mi].parts):
        if isinstance(part, kind) and getattr(part, "id" if kind is ToolCallPart else "call_id") == call_id:
            if seen == nth:
                return f"messages[{mi}].parts[{pi}]"
            seen += 1
    return f"messages[{mi}]"


def _pairing_error(path: str, problem: str, rule: ConversationRule, api: str) -> UnsupportedContent:
    return UnsupportedContent(f"{path}: {problem}; {api} refuses such a request [{rule.value}]")


def ends_on_an_empty_prompt(messages: Sequence[Message]) -> bool:
    """True when the last message that is not a system message is a user message of empty text only (an
    empty prompt: ``Message.user("")``). Chat, Responses and Gemini send it as an empty user turn; Anthropic
    refuses empty text. Looks at the end of the conversation only."""
    for message in reversed(messages):
        if message.role is not Role.SYSTEM:
            return (
                message.role is Role.USER
                and bool(message.parts)
                and all(isinstance(p, TextPart) and not p.text for p in message.parts)
            )
    return False


def nothing_to_send(api: str, count: int) -> UnsupportedContent:
    """The error for a request with no conversation left to send (no messages, only system messages where
    system is folded out, only empty messages): every provider refuses an empty conversation with a 400
    (Anthropic and Chat Completions want at least one message; Gemini "contents is not specified",
    quarkiverse/quarkus-langchain4j#2480). An empty prompt is not this: Chat, Responses and Gemini send it,
    Anthropic refuses it with its own error."""
    return UnsupportedContent(
        f"messages: nothing to send to {api}: the {count} message(s) hold no user or assistant content it "
        "accepts (system messages are folded elsewhere, empty text is not sent)"
    )


def _unwritable(path: str, api: str) -> UnsupportedContent:
    return UnsupportedContent(
        f"{path}: a string that is not valid Unicode (a lone surrogate) cannot be sent to {api}: it has no UTF-8 form"
    )


def refuse_unwritable_message(message: Message, path: str, api: str) -> None:
    """Raise :class:`~loopctl.errors.UnsupportedContent` naming the path (``messages[3].parts[1].text``) of a
    string of ``message`` that cannot be written as UTF-8. The model's constructors refuse such strings
    (``InvalidMessage``); this catches one that got in without validation, which would otherwise fail in the
    client with a bare ``UnicodeEncodeError`` (or orjson's ``TypeError``) after the request was built. A
    codec calls it once per converted message (the conversion is cached)."""
    bad = first_invalid_string(message, path)
    if bad is not None:
        raise _unwritable(bad, api)


def refuse_unwritable_options(system: str | None, tools: Sequence[ToolSchema], api: str) -> None:
    """:func:`refuse_unwritable_message` for the system prompt (``system``) and the tools
    (``tools[1].description``, ``tools[0].input_schema.properties.q``)."""
    if system is not None and has_lone_surrogate(system):
        raise _unwritable("system", api)
    for ti, tool in enumerate(tools):
        for name in ("name", "description"):
            value = getattr(tool, name)
            if isinstance(value, str) and has_lone_surrogate(value):
                raise _unwritable(f"tools[{ti}].{name}", api)
        found = lone_surrogate_in_json(dict(tool.input_schema), f"tools[{ti}].input_schema")
        if found is not None:
            raise _unwritable(found, api)
