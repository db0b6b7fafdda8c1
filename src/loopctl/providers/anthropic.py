"""Anthropic Messages codec: loopctl messages to a ``POST /v1/messages`` body, and replies back to messages.

Pure: no I/O, no clock. What goes in the URL and headers (``anthropic-version``, beta flags, the API key)
is the client's business; this module only builds and reads JSON bodies and SSE streams.

Request rules (each with its source; ``docs/providers/anthropic.md`` is the long form):

- **System**: top-level ``system`` gets the ``system`` argument first, then the text of every
  ``Role.SYSTEM`` message, joined with ``"\\n"``; system messages never appear in ``messages`` (``docs/providers.md``;
  Messages API reference, ``system``).
- **Tool results** ride user-side as ``tool_result`` blocks at the *start* of one user message; results the
  history split over several user messages are merged, other user content follows them ("In the user
  message containing tool results, the tool_result blocks must come FIRST in the content array. Any text
  must come AFTER all tool results": platform.claude.com/docs/en/agents-and-tools/tool-use/handle-tool-calls).
  ``is_error: true`` is carried; ``content`` holds text and image blocks (SDK ``ToolResultBlockParam``), and
  is omitted for an empty result (allowed: same page, "content ... or omitted"). Results go in the order of
  the calls they answer (strict compatible endpoints want it; the other codecs send that order too).
- **No empty text**: empty or whitespace-only text blocks are dropped ("text content blocks must contain
  non-whitespace text"); a message left with nothing is dropped, never sent as ``content: []``.
- **Alternation**: adjacent same-role messages are merged in the request view only (the SDK's
  ``MessageCreateParams.messages``: consecutive same-role turns are one turn).
- **Thinking** is replayed verbatim, in place, only when ``ThinkingPart.provider == "anthropic"`` and it is
  signed (``thinking`` + ``signature``) or redacted (``redacted_thinking`` + ``data``); everything else is
  omitted from the request and stays in history (the project's replay policy,
  ``docs/providers.md``). Thinking blocks must open their assistant message ("If an assistant message
  contains any thinking blocks, the first block must be thinking or redacted_thinking": API 400 text), so
  a thinking part that follows text or a tool call in the same (merged) message is omitted too.
- **Tool-use ids** must match ``^[a-zA-Z0-9_-]+$`` (API 400 "tool_use.id: String should match pattern");
  other ids are rewritten with :func:`~loopctl.providers._common.rewrite_tool_id`, identically on
  ``tool_use.id`` and ``tool_result.tool_use_id``.
- **Prompt caching** (``prompt_cache=True``): ``cache_control: {"type": "ephemeral"}`` on the last tool, on
  the system prompt and on the last block of the last two user turns, at most four in all (the documented
  limit), never on a thinking block or an empty one (platform.claude.com/docs/en/build-with-claude/
  prompt-caching: the prefix is tools, system, messages, in that order; a breakpoint looks back about 20
  blocks for an earlier hit, so the previous turn's breakpoint is kept to catch a turn that added more).

Reply rules: stop reasons map to :class:`~loopctl.response.StopReason` (``refusal`` -> ``REFUSAL``,
``model_context_window_exceeded`` -> ``MAX_TOKENS``); usage ``input_tokens`` is input + cache read + cache
creation; ``message_delta`` usage is cumulative; ``signature_delta`` is latched whole; ``redacted_thinking``
arrives whole in ``content_block_start``; ``ping`` and unknown events are ignored; an ``error`` event
raises its typed error from :meth:`StreamDecoder.feed`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

import orjson

from loopctl._frozen import dataclass
from loopctl.compact.provider import (
    ANTHROPIC_COMPACTION_BETA,
    ANTHROPIC_CONTEXT_EDITING_BETA,
    COMPACTED_PLACEHOLDER,
    AnthropicClearToolUses,
    AnthropicCompaction,
    provider_window,
    window_start,
)
from loopctl.errors import ContextOverflow, InvalidRequest, ProviderError, ProviderProtocolError, UnsupportedContent
from loopctl.message import (
    CompactionPart,
    ImagePart,
    Message,
    MessagePart,
    Role,
    ServerToolCallPart,
    ServerToolResultPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from loopctl.providers._common import (
    check_pairing,
    classify_http_error,
    is_zero_valued,
    nothing_to_send,
    parse_retry_after,
    refuse_unwritable_message,
    refuse_unwritable_options,
    rewrite_tool_id,
)
from loopctl.providers.base import (
    ITEMS_MARK,
    ConversionCache,
    LaidOutPrefix,
    ModelRequest,
    OutputFormat,
    ReasoningEffort,
    RequestCache,
    SSEStreamDecoder,
    encode_built,
    write_items,
)
from loopctl.providers.base import (
    held_messages as _held,
)
from loopctl.providers.native import (
    CodeExecution,
    FileSearch,
    ImageGeneration,
    NativeTool,
    RemoteMCP,
    ToolSearch,
    WebFetch,
    WebSearch,
    call_note,
    check_native_tools,
    refuse_options,
    result_note,
    result_text,
    unsupported_tool,
)
from loopctl.providers.sse import ServerSentEvent
from loopctl.response import InvalidToolCall, ModelResponse, StopReason, Usage
from loopctl.stream import (
    PartFinished,
    PartStarted,
    PartUpdated,
    ResponseFinished,
    ResponseStarted,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ThinkingSignature,
    ToolCallDelta,
    UsageReported,
    dumps_exact,
    loads_exact,
    parse_arguments,
)
from loopctl.tool import ForceTool, ToolChoice, ToolSchema

__all__ = [
    "MCP_BETA",
    "beta_flags",
    "json_output_format",
    "DEFAULT_MAX_TOKENS",
    "MAX_CACHE_BREAKPOINTS",
    "PROVIDER",
    "THINKING_BUDGETS",
    "StreamDecoder",
    "build_request",
    "build_request_from",
    "encode_request",
    "encode_request_from",
    "error_from_http",
    "parse_response",
    "parse_stream",
]

PROVIDER: Final = "anthropic"
"""The name used in errors and in ``ThinkingPart.provider``."""

DEFAULT_MAX_TOKENS: Final = 8192
"""``max_tokens`` when the caller gives none (the API requires one). With extended thinking on and no
``max_tokens`` given, the default is ``budget_tokens + DEFAULT_MAX_TOKENS``, so thinking never eats the
answer's room."""

THINKING_BUDGETS: Final[Mapping[str, int]] = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384}
"""``reasoning_effort`` -> ``thinking.budget_tokens`` (tokens). The API wants ``1024 <= budget_tokens <
max_tokens`` (SDK ``ThinkingConfigEnabledParam``); a budget that does not fit an explicit ``max_tokens`` is
lowered to ``max_tokens - 1``, and thinking is left off when even 1024 does not fit."""

MIN_THINKING_BUDGET: Final = 1024
"""The smallest ``budget_tokens`` the API accepts."""

MAX_CACHE_BREAKPOINTS: Final = 4
"""The most ``cache_control`` breakpoints one request may carry (prompt-caching docs)."""

IMAGE_MEDIA_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""The media types a base64 image source may have (SDK ``Base64ImageSourceParam``)."""

_CACHE_KEY: Final = PROVIDER
# Error ``type`` -> the HTTP status the errors page gives it (platform.claude.com/docs/en/api/errors), used
# when an error arrives without a status (a stream ``error`` event, an error body in place of a stream).
_STATUS_OF_ERROR: Final[Mapping[str, int]] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
# "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000" is Anthropic's other
# context-window 400 (besides "prompt is too long"), which the shared matcher does not know.
_CONTEXT_LIMIT = re.compile(r"exceed(?:s|ed)? (?:the )?context limit", re.IGNORECASE)

_STOP_REASONS: Final[Mapping[str, StopReason]] = {
    "end_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_CALL,
    "max_tokens": StopReason.MAX_TOKENS,
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "refusal": StopReason.REFUSAL,
    # "pause_turn" (a long server-tool turn paused) has no neutral counterpart; it reads as END_TURN with
    # the raw value kept, like any value this release does not know.
}


# --- request ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Converted:
    """One message in Anthropic's terms, cached per message object; never mutated once built.

    ``content`` is already normalized as a single message: tool results first (user), thinking only at
    the start (assistant), no empty text.
    """

    role: str
    content: list[dict[str, Any]]
    system_text: str = ""
    notes: Mapping[str, dict[str, Any]] | None = None
    """The notes of the results replayed whole without their call in the message (by call id): used instead
    when no earlier message of the turn holds the call either (:func:`_orphan_results_as_notes`)."""


def build_request(
    messages: Sequence[Message],
    *,
    model: str,
    system: str | None = None,
    tools: Sequence[ToolSchema] = (),
    max_tokens: int | None = None,
    temperature: float | None = None,
    stop: Sequence[str] | None = None,
    tool_choice: ToolChoice | None = None,
    reasoning_effort: ReasoningEffort | None = None,
    stream: bool = False,
    extra: Mapping[str, Any] | None = None,
    cache: ConversionCache | None = None,
    prompt_cache: bool = True,
    output_format: OutputFormat | None = None,
    native_tools: Sequence[NativeTool] = (),
    cache_ttl: CacheTTL | None = None,
    prefix_cache_ttl: CacheTTL | None = None,
    cache_breakpoints: Sequence[int | Literal["tools", "system"]] | None = None,
    context_management: object = None,
) -> dict[str, Any]:
    """The JSON body of a Messages API request for ``messages``.

    ``max_tokens`` (tokens) defaults to :data:`DEFAULT_MAX_TOKENS`. ``reasoning_effort`` turns on extended
    thinking with ``budget_tokens`` from :data:`THINKING_BUDGETS`; it is left off when ``tool_choice``
    forces a tool (the API refuses thinking with forced tool use), and for a request that continues a tool
    loop whose assistant turn does not open with a replayable thinking block (the API's "a final assistant
    message must start with a thinking block" 400). ``temperature`` is sent only when thinking is off
    (thinking is incompatible with temperature changes: extended-thinking docs, "Feature compatibility").
    ``stop`` becomes ``stop_sequences``; ``tool_choice`` maps ``"auto"``/``"required"``/``"none"``/
    :class:`~loopctl.tool.ForceTool` to ``auto``/``any``/``none``/``tool`` and is sent only with tools.
    ``prompt_cache`` places the cache breakpoints described in the module docstring; ``cache_ttl`` (``"5m"``
    or ``"1h"``) sets their time to live (``None``: the API's default, five minutes), ``prefix_cache_ttl``
    that of the tools' and the system prompt's (default: ``cache_ttl``); a one-hour breakpoint may not come
    after a five-minute one (prompt-caching docs, "Mixing different TTLs"), so a longer conversation TTL than
    prefix TTL raises :class:`~loopctl.errors.UnsupportedContent`. ``cache_breakpoints`` replaces the
    automatic placement: ``"tools"``, ``"system"`` and message indexes (the last block of the turn that
    message is sent in gets one), at most four. ``context_management``: a provider-side compaction strategy
    (:class:`~loopctl.compact.provider.AnthropicCompaction` or
    :class:`~loopctl.compact.provider.AnthropicClearToolUses`), sent as ``context_management.edits`` (its
    beta flag: :func:`beta_flags`); another provider's strategy raises
    :class:`~loopctl.errors.UnsupportedContent`. A conversation holding an Anthropic compaction block is sent
    from its last one on (the API "drops all message blocks prior to the compaction block": compaction docs),
    after :data:`~loopctl.compact.provider.COMPACTED_PLACEHOLDER` and with the system messages before it kept;
    ``cache_breakpoints`` indexes still count in ``messages``. ``stream=True`` sets
    ``"stream": true``. ``extra`` is merged into the body last (shallow). ``cache`` reuses each message's
    conversion between calls; the body is the same with or without it.

    The returned body shares content blocks with ``cache`` (and with the messages' tool inputs): treat it
    as read-only. Raises :class:`~loopctl.errors.UnsupportedContent` naming the path
    (``messages[3].parts[1]``) for content Anthropic cannot carry: a part type this release does not know,
    a part in a role that cannot hold it, an image media type outside :data:`IMAGE_MEDIA_TYPES`, a tool
    call whose ``input`` is not a JSON object, a tool call or result that breaks the pairing rules
    (:func:`~loopctl.providers._common.check_pairing`), or a conversation with nothing left to send.

    ``model`` is the model id (``claude-sonnet-4-5``); ``system`` the system prompt, sent as the top-level
    ``system``; ``output_format`` (an :class:`~loopctl.providers.base.OutputFormat`) asks for schema-constrained output
    (``docs/output.md`` says what each API gets).

    ``native_tools``: built-in tool objects (:mod:`loopctl.providers.native`) sent in ``tools`` as Anthropic's
    server tools; one Anthropic has no such tool for raises :class:`~loopctl.errors.UnsupportedContent`.
    """
    body, _, _ = _build(
        messages,
        model=model,
        system=system,
        tools=tools,
        max_tokens=max_tokens,
        temperature=temperature,
        stop=stop,
        tool_choice=tool_choice,
        reasoning_effort=reasoning_effort,
        stream=stream,
        extra=extra,
        cache=cache,
        requests=None,
        prompt_cache=prompt_cache,
        output_format=output_format,
        native_tools=native_tools,
        cache_ttl=cache_ttl,
        prefix_cache_ttl=prefix_cache_ttl,
        cache_breakpoints=cache_breakpoints,
        context_management=context_management,
    )
    return body


def encode_request(
    messages: Sequence[Message],
    *,
    model: str,
    cache: RequestCache | None = None,
    **options: Any,
) -> bytes:
    """The bytes of :func:`build_request`'s body for the same arguments (``options`` are its keyword
    arguments), written as compact UTF-8 JSON by the project's serializer: exactly
    ``_dumps_bytes(build_request(messages, model=model, **options))``.

    With ``cache`` (a :class:`~loopctl.providers.base.RequestCache`, one per client) the build is
    incremental: when ``messages`` continue a conversation laid out before (the same message objects first),
    the turns before a closed assistant turn are the bytes of the previous call and only what follows is
    converted, merged, checked and written. What depends on the end of the conversation is always laid out
    afresh: the cache breakpoints of the last two user turns (the kept prefix stops before them), the
    prefill fixes of a final assistant turn, the empty-prompt check, and whether thinking can be enabled
    (the first block of the assistant turn after the last plain user turn is carried over when that turn
    lies in the prefix). Raises what :func:`build_request` raises.
    """
    return encode_built(_build, messages, model=model, cache=cache, **options)


def encode_request_from(
    request: ModelRequest,
    *,
    model: str,
    stream: bool = False,
    cache: RequestCache | None = None,
    **provider_specific: Any,
) -> bytes:
    """:func:`encode_request` for a :class:`~loopctl.providers.base.ModelRequest` (what the client sends).

    ``request`` is the provider-neutral request; ``model`` the model to name; ``stream`` asks for a streamed reply;
    ``cache`` (a :class:`~loopctl.providers.base.RequestCache` the client keeps) reuses the bytes already written
    for the start of the conversation; ``provider_specific`` takes the provider options of :func:`build_request`.
    Returns the body's JSON bytes, byte-identical to a fresh build.
    """
    return encode_request(
        request.messages, model=model, stream=stream, cache=cache, **request.options(), **provider_specific
    )


_Turn = tuple[str, list[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class _Carry:
    """What an incremental build carries past the kept prefix of ``turns`` turns: the texts of its system
    messages, the index of its last plain user turn (one without tool results; -1 for none) and, when the
    turn after that one is in the prefix too, whether it lets thinking be enabled (``None``: that turn is the
    first one after the prefix)."""

    system_texts: tuple[str, ...] = ()
    plain: int = -1
    opens: bool | None = None


def _build(
    messages: Sequence[Message],
    *,
    model: str,
    system: str | None = None,
    tools: Sequence[ToolSchema] = (),
    max_tokens: int | None = None,
    temperature: float | None = None,
    stop: Sequence[str] | None = None,
    tool_choice: ToolChoice | None = None,
    reasoning_effort: ReasoningEffort | None = None,
    stream: bool = False,
    extra: Mapping[str, Any] | None = None,
    cache: ConversionCache | None = None,
    requests: RequestCache | None = None,
    prompt_cache: bool = True,
    output_format: OutputFormat | None = None,
    native_tools: Sequence[NativeTool] = (),
    cache_ttl: CacheTTL | None = None,
    prefix_cache_ttl: CacheTTL | None = None,
    cache_breakpoints: Sequence[int | Literal["tools", "system"]] | None = None,
    context_management: object = None,
) -> tuple[dict[str, Any], LaidOutPrefix | None, tuple[tuple[bytes, ...], list[dict[str, Any]]] | None]:
    """The body and, with ``requests``, the prefix to keep for the next call and the parts of the messages
    array (``body["messages"]`` is then :data:`~loopctl.providers.base.ITEMS_MARK`; see
    :func:`encode_request`)."""
    edits = _context_edits(context_management)
    window = provider_window(messages, PROVIDER, lead=True)
    if window is not messages:
        if cache_breakpoints is not None:
            cache_breakpoints = _shift_breakpoints(cache_breakpoints, messages, window)
        messages = window
    if requests is None:
        refuse_unwritable_options(system, tools, "Anthropic")
    else:  # the tools' strings are checked once while the same tools come back
        refuse_unwritable_options(system, (), "Anthropic")
        requests.tools(("writable", "Anthropic"), tools, lambda: refuse_unwritable_options(None, tools, "Anthropic"))
    manual = cache_breakpoints is not None
    ttls = _cache_ttls(cache_ttl, prefix_cache_ttl)
    key = (_CACHE_KEY, prompt_cache, ttls, manual)
    prefix = requests.prefix(messages, key) if requests is not None else None
    start = prefix.start if prefix is not None else 0
    carry: _Carry = prefix.state if prefix is not None else _Carry()
    check_pairing(messages, "Anthropic", start)
    tail = messages[start:] if start else messages
    pieces = _convert_all(tail, requests.conversions if requests is not None else cache, start)

    system_texts = [system] if system is not None and system.strip() else []
    system_texts.extend(carry.system_texts)
    tail_system: list[tuple[int, str]] = []  # (index in tail, text) of the tail's system messages
    turns: list[_Turn] = []
    firsts: list[int] = []  # index in tail of each turn's first message
    notes: dict[int, dict[str, dict[str, Any]]] = {}  # by turn: the notes of results replayed without their call
    for off, piece in enumerate(pieces):
        if piece.role == "system":
            if piece.system_text.strip():
                tail_system.append((off, piece.system_text))
        elif piece.content:
            if turns and turns[-1][0] == piece.role:
                turns[-1] = (piece.role, _merge(piece.role, turns[-1][1], piece.content))
            else:
                turns.append((piece.role, piece.content))
                firsts.append(off)
            if piece.notes:
                notes.setdefault(len(turns) - 1, {}).update(piece.notes)
    if notes:
        _orphan_results_as_notes(turns, notes)
    system_texts.extend(text for _, text in tail_system)

    _refuse_an_empty_prompt(tail, pieces, turns, start)
    _results_in_call_order(turns)
    laid_out = list(turns)  # before the end of the request is fixed and marked
    thinking = _thinking_config(reasoning_effort, max_tokens, tool_choice, bool(tools), turns, carry)
    if thinking is not None:
        budget = thinking["budget_tokens"]
        max_out = max_tokens if max_tokens is not None else budget + DEFAULT_MAX_TOKENS
    else:
        max_out = max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS
    if turns and turns[-1][0] == "assistant":
        _fix_prefill(turns, thinking_on=thinking is not None)
    if not turns and (prefix is None or not prefix.count):
        raise nothing_to_send("Anthropic", len(messages))

    if requests is not None:
        tool_list = list(requests.tools(key, tools, lambda: _tool_list(tools)))
    else:
        tool_list = _tool_list(tools)
    mcp_servers: list[dict[str, Any]] = []
    if native_tools:
        builtin, mcp_servers = _native_tools(native_tools)
        tool_list.extend(builtin)
    system_blocks = [{"type": "text", "text": "\n".join(system_texts)}] if system_texts else []
    if cache_breakpoints is not None:
        _place_manual_breakpoints(cache_breakpoints, tool_list, system_blocks, turns, firsts, pieces, start, ttls)
    elif prompt_cache:
        _place_cache_breakpoints(tool_list, system_blocks, turns, ttls)

    body: dict[str, Any] = {"model": model, "max_tokens": max_out}
    if system_blocks:
        body["system"] = system_blocks
    keep: LaidOutPrefix | None = None
    parts: tuple[tuple[bytes, ...], list[dict[str, Any]]] | None = None
    if requests is None:
        body["messages"] = [{"role": role, "content": content} for role, content in turns]
    else:
        # Manual breakpoints may fall anywhere: such a request is laid out whole, never kept as a prefix.
        cut = 0 if manual else _cut(laid_out, prompt_cache)
        done = [{"role": role, "content": content} for role, content in laid_out[:cut]]
        rest = [{"role": role, "content": content} for role, content in turns[cut:]]
        chunks = prefix.chunks if prefix is not None else ()
        written = write_items(done)
        if written:
            chunks = (*chunks, written)
        body["messages"] = ITEMS_MARK
        parts = (chunks, rest)
        if cut:
            upto = firsts[cut]
            count = (prefix.count if prefix is not None else 0) + cut
            state = _carry(carry, count - cut, laid_out, cut, [t for off, t in tail_system if off < upto])
            keep = LaidOutPrefix(key, _held(messages), start + upto, chunks, count, state)
    if mcp_servers:
        body["mcp_servers"] = mcp_servers
    if tool_list:
        body["tools"] = tool_list
        if tool_choice is not None:
            body["tool_choice"] = _tool_choice(tool_choice)
    if thinking is not None:
        body["thinking"] = thinking
    elif temperature is not None:
        body["temperature"] = temperature
    if stop:
        body["stop_sequences"] = list(stop)
    if stream:
        body["stream"] = True
    if output_format is not None:
        body["output_config"] = {"format": json_output_format(output_format)}
    if edits:
        body["context_management"] = {"edits": edits}
    if extra:
        body.update(extra)
    return body, keep, parts


def _context_edits(strategy: object) -> list[dict[str, Any]]:
    """The ``context_management.edits`` of a provider-side compaction strategy (none for ``None``)."""
    if strategy is None:
        return []
    if isinstance(strategy, AnthropicCompaction):
        return strategy.edits()
    if isinstance(strategy, AnthropicClearToolUses):
        return [strategy.edit()]
    raise UnsupportedContent(
        f"context_management: {type(strategy).__name__} is not an Anthropic strategy "
        "(AnthropicCompaction or AnthropicClearToolUses)"
    )


def _shift_breakpoints(
    wanted: Sequence[int | Literal["tools", "system"]], messages: Sequence[Message], window: Sequence[Message]
) -> list[int | Literal["tools", "system"]]:
    """Manual breakpoint indexes of ``messages`` as indexes of ``window`` (what is sent of them once the
    conversation holds a compaction block); an index before the window names a message the API drops."""
    at = {id(m): k for k, m in enumerate(window)}
    shifted: list[int | Literal["tools", "system"]] = []
    for where in wanted:
        if isinstance(where, int) and not isinstance(where, bool) and 0 <= where < len(messages):
            k = at.get(id(messages[where]))
            if k is None:
                i, _ = window_start(messages, PROVIDER)
                if where != i:
                    raise UnsupportedContent(
                        f"cache_breakpoints: messages[{where}] comes before the compaction block, which the "
                        "API reads nothing before"
                    )
                k = next(
                    n for n, m in enumerate(window) if m.role is not Role.SYSTEM and m is not COMPACTED_PLACEHOLDER
                )
            shifted.append(k)
        else:
            shifted.append(where)
    return shifted


def _tool_list(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    return [_tool(t, f"tools[{i}]") for i, t in enumerate(tools)]


def _markable(turn: _Turn) -> bool:
    """A user turn that can carry a cache breakpoint (a block other than an empty tool result)."""
    return turn[0] == "user" and any(b["type"] != "tool_result" or "content" in b for b in turn[1])


def _cut(turns: list[_Turn], prompt_cache: bool) -> int:
    """How many of ``turns`` (laid out from the kept prefix on) can join the prefix: up to the last assistant
    turn (never the first one, which starts where the prefix ends) after which, with ``prompt_cache``, at
    least two user turns can carry a breakpoint, so the breakpoints of this and every later request fall
    after the prefix (appending never makes a user turn unable to carry one). 0 for none."""
    marks = 0
    for ti in range(len(turns) - 1, 0, -1):
        role = turns[ti][0]
        if role == "user":
            marks += _markable(turns[ti])
        elif (marks >= 2 or not prompt_cache) and turns[ti - 1][0] == "user":
            return ti
    return 0


def _plain(turn: _Turn) -> bool:
    return turn[0] == "user" and not any(b["type"] == "tool_result" for b in turn[1])


def _opens(turn: _Turn) -> bool:
    """Whether thinking can be enabled when ``turn`` follows the last plain user turn."""
    return turn[0] != "assistant" or turn[1][0]["type"] in ("thinking", "redacted_thinking")


def _carry(carry: _Carry, base: int, turns: list[_Turn], cut: int, system_texts: list[str]) -> _Carry:
    """The carry past ``turns[:cut]`` added to a prefix of ``base`` turns carried by ``carry``."""
    plain, opens = carry.plain, carry.opens
    for ti in range(cut - 1, -1, -1):
        if _plain(turns[ti]):
            plain = base + ti
            opens = _opens(turns[ti + 1]) if ti + 1 < cut else None
            break
    else:
        if opens is None:
            opens = _opens(turns[0])
    return _Carry((*carry.system_texts, *system_texts), plain, opens)


def build_request_from(
    request: ModelRequest,
    *,
    model: str,
    stream: bool = False,
    cache: ConversionCache | None = None,
    **provider_specific: Any,
) -> dict[str, Any]:
    """:func:`build_request` for a :class:`~loopctl.providers.base.ModelRequest` (what the clients call);
    ``provider_specific`` takes :func:`build_request`'s Anthropic options (``prompt_cache``, on by default).

    ``request`` is the provider-neutral request; ``model`` the model to name; ``stream`` asks for a streamed reply;
    ``cache`` (optional, kept by the client across calls) reuses the conversion of the messages the previous request
    already had.
    """
    return build_request(
        request.messages, model=model, stream=stream, cache=cache, **request.options(), **provider_specific
    )


def _convert_all(messages: Sequence[Message], cache: ConversionCache | None, start: int = 0) -> list[_Converted]:
    """Each message converted (``start``: the index of ``messages[0]`` in the conversation, for paths)."""
    if cache is None:
        return [_convert_message(m, mi) for mi, m in enumerate(messages, start)]
    out: list[_Converted] = []
    for mi, m in enumerate(messages, start):
        piece = cache.get(m, _CACHE_KEY)
        if piece is None:
            piece = _convert_message(m, mi)
            cache.put(m, piece, _CACHE_KEY)
        out.append(piece)
    cache.sweep()
    return out


def _convert_message(message: Message, mi: int) -> _Converted:
    role = message.role
    where = f"messages[{mi}]"
    refuse_unwritable_message(message, where, "Anthropic")
    if role is Role.SYSTEM:
        texts: list[str] = []
        for pi, part in enumerate(message.parts):
            if isinstance(part, TextPart):
                texts.append(part.text)
            else:
                raise _unsupported(part, f"{where}.parts[{pi}]", "a system message (Anthropic's system is text)")
        return _Converted("system", [], "".join(texts))
    if role is Role.USER:
        results: list[dict[str, Any]] = []
        others: list[dict[str, Any]] = []
        for pi, part in enumerate(message.parts):
            path = f"{where}.parts[{pi}]"
            if isinstance(part, ToolResultPart):
                results.append(_tool_result(part, path))
            elif isinstance(part, TextPart):
                if part.text.strip():
                    others.append({"type": "text", "text": part.text})
            elif isinstance(part, ImagePart):
                others.append(_image(part, path))
            else:
                raise _unsupported(part, path, "a user message")
        return _Converted("user", results + others if results else others)
    blocks: list[dict[str, Any]] = []
    opened = False  # a non-thinking block was emitted: later thinking cannot be replayed in this message
    native = _NativeReplay(message.parts)
    for pi, part in enumerate(message.parts):
        path = f"{where}.parts[{pi}]"
        if isinstance(part, ThinkingPart):
            block = _thinking_block(part)
            if block is not None and not opened:
                blocks.append(block)
        elif isinstance(part, TextPart):
            if part.text.strip():
                if part.citations is not None and part.provider == PROVIDER:
                    blocks.append({"type": "text", "text": part.text, "citations": list(part.citations)})
                else:
                    blocks.append({"type": "text", "text": part.text})
                opened = True
        elif isinstance(part, (ServerToolCallPart, ServerToolResultPart, CompactionPart)):
            block = native.block(part)
            if block is not None:
                blocks.append(block)
                opened = True
        elif isinstance(part, ToolCallPart):
            if not isinstance(part.input, dict):
                raise UnsupportedContent(
                    f"{path}.input: Anthropic tool_use input must be a JSON object, "
                    f"got {type(part.input).__name__} (tool call {part.id!r})"
                )
            blocks.append({"type": "tool_use", "id": rewrite_tool_id(part.id), "name": part.name, "input": part.input})
            opened = True
        else:
            raise _unsupported(part, path, "an assistant message")
    return _Converted("assistant", blocks, notes=native.orphans or None)


class _NativeReplay:
    """How one assistant message's provider-native parts go out (``docs/providers.md``, "Provider-native
    parts"): Anthropic's own blocks verbatim, everything else as a note in a text block, compaction blocks of
    other providers not at all.

    A ``server_tool_use`` must be followed by its result block (the API's pairing of server tools), so a call
    is replayed whole only while every Anthropic result answering it in the message still has its block; a
    result is replayed whole only after its replayed call (or when its call is in an earlier message: a
    ``pause_turn`` continuation). Pruning takes the blocks of both, so a pruned pair becomes two notes."""

    __slots__ = ("_calls", "_replayed", "_unreplayable", "orphans")

    def __init__(self, parts: Sequence[MessagePart]) -> None:
        self._calls = {p.id for p in parts if isinstance(p, ServerToolCallPart)}
        self._unreplayable = {
            p.call_id
            for p in parts
            if isinstance(p, ServerToolResultPart) and (p.provider != PROVIDER or p.raw is None)
        }
        self._replayed: set[str] = set()
        self.orphans: dict[str, dict[str, Any]] = {}  # results replayed whole whose call is not in the message

    def block(self, part: ServerToolCallPart | ServerToolResultPart | CompactionPart) -> dict[str, Any] | None:
        if isinstance(part, CompactionPart):
            return part.raw if part.provider == PROVIDER else None
        if isinstance(part, ServerToolCallPart):
            if part.provider == PROVIDER and part.raw is not None and part.id not in self._unreplayable:
                self._replayed.add(part.id)
                return part.raw
            return {"type": "text", "text": call_note(part)}
        if (
            part.provider == PROVIDER
            and part.raw is not None
            and (part.call_id in self._replayed or part.call_id not in self._calls)
        ):
            if part.call_id not in self._calls:
                self.orphans[part.call_id] = {"type": "text", "text": result_note(part)}
            return part.raw
        return {"type": "text", "text": result_note(part)}


def _orphan_results_as_notes(turns: list[_Turn], notes: Mapping[int, Mapping[str, dict[str, Any]]]) -> None:
    """Each server tool result block whose call block is not before it in its assistant turn (the call was
    compacted away, or the file was edited) becomes its note: the API pairs a result with the call before it in
    the turn and refuses a result alone with a 400 (``docs/wire-format.md``, "How they travel": never a block
    the API would refuse). The turns' lists are cached conversions: a changed turn gets a new list."""
    for index, orphans in notes.items():
        role, content = turns[index]
        seen: set[Any] = set()
        out: list[dict[str, Any]] = []
        changed = False
        for block in content:
            kind = block.get("type")
            if kind in ("server_tool_use", "mcp_tool_use"):
                seen.add(block.get("id"))
            call_id = block.get("tool_use_id")
            if kind != "tool_result" and isinstance(call_id, str) and call_id in orphans and call_id not in seen:
                out.append(orphans[call_id])
                changed = True
            else:
                out.append(block)
        if changed:
            turns[index] = (role, out)


def _unsupported(part: object, path: str, place: str) -> UnsupportedContent:
    if isinstance(
        part,
        (
            TextPart,
            ImagePart,
            ToolCallPart,
            ThinkingPart,
            ToolResultPart,
            ServerToolCallPart,
            ServerToolResultPart,
            CompactionPart,
        ),
    ):
        return UnsupportedContent(f"{path}: a {part.type!r} part cannot be sent to Anthropic in {place}")
    kind = getattr(part, "type", None) or type(part).__name__
    return UnsupportedContent(
        f"{path}: unknown part type {kind!r} (from a newer release?); the Anthropic codec cannot send it"
    )


def _thinking_block(part: ThinkingPart) -> dict[str, Any] | None:
    """The block that replays ``part`` verbatim, or ``None`` when the replay policy omits it."""
    if part.provider != PROVIDER:
        return None
    if part.redacted is not None:
        return {"type": "redacted_thinking", "data": part.redacted}
    if part.signature:
        return {"type": "thinking", "thinking": part.text, "signature": part.signature}
    return None


def _image(part: ImagePart, path: str) -> dict[str, Any]:
    media_type = part.source.media_type
    if media_type not in IMAGE_MEDIA_TYPES:
        raise UnsupportedContent(
            f"{path}: image media type {media_type!r} is not one Anthropic accepts "
            f"({', '.join(sorted(IMAGE_MEDIA_TYPES))})"
        )
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": part.source.data}}


def _tool_result(part: ToolResultPart, path: str) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": rewrite_tool_id(part.call_id)}
    root = part.output.root
    if isinstance(root, str):
        if root.strip():
            block["content"] = root
    else:
        items: list[dict[str, Any]] = []
        for oi, sub in enumerate(root):
            if isinstance(sub, TextPart):
                if sub.text.strip():
                    items.append({"type": "text", "text": sub.text})
            else:
                items.append(_image(sub, f"{path}.output[{oi}]"))
        if items:
            block["content"] = items
    if part.is_error:
        block["is_error"] = True
    return block


def _merge(role: str, first: list[dict[str, Any]], second: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two adjacent same-role contents as one, keeping each role's shape rules."""
    if role == "user":
        if not any(b["type"] == "tool_result" for b in second):
            return first + second
        both = first + second
        return [b for b in both if b["type"] == "tool_result"] + [b for b in both if b["type"] != "tool_result"]
    merged = list(first)
    opened = any(b["type"] not in ("thinking", "redacted_thinking") for b in first)
    for b in second:
        if b["type"] in ("thinking", "redacted_thinking"):
            if not opened:
                merged.append(b)
        else:
            merged.append(b)
            opened = True
    return merged


def _refuse_an_empty_prompt(
    messages: Sequence[Message],
    pieces: list[_Converted],
    turns: list[tuple[str, list[dict[str, Any]]]],
    start: int = 0,
) -> None:
    """Raise :class:`~loopctl.errors.UnsupportedContent` when the conversation ends on a user message of
    empty (or whitespace-only) text that nothing else stands in for. Anthropic refuses such text ("text
    content blocks must contain non-whitespace text"), and leaving it out would end the request on the
    assistant's turn, which Anthropic reads as a prefill to continue rather than a question to answer.
    (Chat, Responses and Gemini send an empty prompt: their APIs accept it.) ``messages`` may be the end of
    the conversation from index ``start`` on, when it holds a non-system message."""
    for mi in range(len(messages) - 1, -1, -1):
        message = messages[mi]
        if message.role is Role.SYSTEM:
            continue
        empty = (
            message.role is Role.USER
            and not pieces[mi].content
            and bool(message.parts)
            and all(isinstance(p, TextPart) for p in message.parts)
        )
        if empty and (not turns or turns[-1][0] == "assistant"):
            raise UnsupportedContent(
                f"messages[{start + mi}]: the prompt is empty; Anthropic refuses empty or whitespace-only text, and "
                "without it the request would end on the assistant's turn (a prefill)"
            )
        return


def _results_in_call_order(turns: list[tuple[str, list[dict[str, Any]]]]) -> None:
    """Put the ``tool_result`` blocks of each user turn in the order of the ``tool_use`` blocks of the
    assistant turn before it (results stored in another order, or merged from several messages): the API
    pairs them by id, but strict Anthropic-compatible endpoints want them in call order, as OpenAI Chat and
    Gemini are sent. Results of unknown calls keep their place after the known ones. Cached block lists are
    never changed: a reordered turn gets a new list. One pass over the blocks."""
    for ti in range(1, len(turns)):
        role, content = turns[ti]
        if role != "user" or turns[ti - 1][0] != "assistant" or content[0]["type"] != "tool_result":
            continue
        order = {b["id"]: k for k, b in enumerate(turns[ti - 1][1]) if b["type"] == "tool_use"}
        results = [b for b in content if b["type"] == "tool_result"]
        keys = [order.get(b["tool_use_id"], len(order)) for b in results]
        if keys != sorted(keys):
            ranked = [results[i] for i in sorted(range(len(results)), key=keys.__getitem__)]  # stable
            turns[ti] = (role, ranked + content[len(results) :])


def _thinking_config(
    effort: ReasoningEffort | None,
    max_tokens: int | None,
    tool_choice: ToolChoice | None,
    has_tools: bool,
    turns: list[tuple[str, list[dict[str, Any]]]],
    carry: _Carry | None = None,
) -> dict[str, Any] | None:
    if effort is None:
        return None
    try:
        budget = THINKING_BUDGETS[effort]
    except KeyError:
        raise UnsupportedContent(f"reasoning_effort {effort!r} is not one of {', '.join(THINKING_BUDGETS)}") from None
    if has_tools and (tool_choice == "required" or isinstance(tool_choice, ForceTool)):
        return None
    if max_tokens is not None:
        budget = min(budget, max_tokens - 1)
        if budget < MIN_THINKING_BUDGET:
            return None
    if not _turn_opens_with_thinking(turns, carry):
        return None
    return {"type": "enabled", "budget_tokens": budget}


def _turn_opens_with_thinking(turns: list[tuple[str, list[dict[str, Any]]]], carry: _Carry | None = None) -> bool:
    """False when the request continues a tool loop whose assistant turn does not start with thinking.

    The turn starts at the assistant message after the last user message that holds no tool result; when
    the request ends on tool results, that message must open with a thinking block or the API answers 400
    ("When thinking is enabled, a final assistant message must start with a thinking block"). ``turns`` may
    be the turns after a kept prefix, whose ``carry`` answers when that user message lies in the prefix.
    """
    if not turns or turns[-1][0] != "user" or turns[-1][1][0]["type"] != "tool_result":
        return True
    for i in range(len(turns) - 1, -1, -1):
        if _plain(turns[i]):
            break
    else:
        if carry is not None and carry.opens is not None:
            return carry.opens
        i = -1
    if i + 1 >= len(turns):
        return True
    return _opens(turns[i + 1])


def _fix_prefill(turns: list[tuple[str, list[dict[str, Any]]]], *, thinking_on: bool) -> None:
    """A request that ends on an assistant message (a prefill) may not end in whitespace ("final assistant
    content cannot end with trailing whitespace") nor, with thinking off, hold thinking ("When thinking is
    disabled, an assistant message in the final position cannot contain thinking")."""
    role, content = turns[-1]
    if not thinking_on:
        content = [b for b in content if b["type"] not in ("thinking", "redacted_thinking")]
    if content and content[-1]["type"] == "text":
        text = content[-1]["text"].rstrip()
        content = content[:-1] + ([{**content[-1], "text": text}] if text else [])
    if content:
        turns[-1] = (role, content)
    else:
        turns.pop()


CacheTTL = Literal["5m", "1h"]
"""A cache breakpoint's time to live (SDK ``CacheControlEphemeralParam.ttl``)."""

_TTL_ORDER = {None: 0, "5m": 0, "1h": 1}


def _cache_ttls(ttl: CacheTTL | None, prefix_ttl: CacheTTL | None) -> tuple[str | None, str | None]:
    """``(prefix ttl, conversation ttl)``; raises for a value the API does not take, or a one-hour breakpoint
    after a five-minute one ("Cache entries with longer TTL must appear before shorter TTLs": prompt-caching
    docs, "Mixing different TTLs")."""
    for name, value in (("cache_ttl", ttl), ("prefix_cache_ttl", prefix_ttl)):
        if value not in (None, "5m", "1h"):
            raise UnsupportedContent(f"{name} must be '5m' or '1h', not {value!r}")
    prefix = prefix_ttl if prefix_ttl is not None else ttl
    if _TTL_ORDER[ttl] > _TTL_ORDER[prefix]:
        raise UnsupportedContent(
            f"cache_ttl {ttl!r} is longer than prefix_cache_ttl {prefix!r}: a one-hour cache breakpoint may not come "
            "after a five-minute one"
        )
    return prefix, ttl


def _mark(block: dict[str, Any], ttl: str | None) -> dict[str, Any]:
    control: dict[str, Any] = {"type": "ephemeral"} if ttl is None else {"type": "ephemeral", "ttl": ttl}
    return {**block, "cache_control": control}


def _place_manual_breakpoints(
    wanted: Sequence[int | str],
    tools: list[dict[str, Any]],
    system_blocks: list[dict[str, Any]],
    turns: list[tuple[str, list[dict[str, Any]]]],
    firsts: list[int],
    pieces: list[_Converted],
    start: int,
    ttls: tuple[str | None, str | None],
) -> None:
    """Breakpoints exactly where the caller said: ``"tools"`` (the last tool), ``"system"``, and message
    indexes (the last block that can carry one, of the turn the message went into). Raises
    :class:`~loopctl.errors.UnsupportedContent` for more than four, a place with nothing to mark, or an index
    outside the conversation."""
    if len(wanted) > MAX_CACHE_BREAKPOINTS:
        raise UnsupportedContent(f"cache_breakpoints: at most {MAX_CACHE_BREAKPOINTS} breakpoints, got {len(wanted)}")
    prefix_ttl, ttl = ttls
    for where in wanted:
        if where == "tools":
            if not tools:
                raise UnsupportedContent("cache_breakpoints: 'tools' given, but the request has no tools")
            tools[-1] = _mark(tools[-1], prefix_ttl)
        elif where == "system":
            if not system_blocks:
                raise UnsupportedContent("cache_breakpoints: 'system' given, but the request has no system prompt")
            system_blocks[-1] = _mark(system_blocks[-1], prefix_ttl)
        elif isinstance(where, int) and not isinstance(where, bool) and start <= where < start + len(pieces):
            ti = bisect.bisect_right(firsts, where - start) - 1
            role, content = turns[ti] if ti >= 0 and pieces[where - start].content else ("", [])
            bi = next(
                (
                    i
                    for i in range(len(content) - 1, -1, -1)
                    if content[i]["type"] not in _UNMARKABLE and _has_content(content[i])
                ),
                None,
            )
            if bi is None:
                raise UnsupportedContent(
                    f"cache_breakpoints: messages[{where}] sends no block that can carry a breakpoint"
                )
            marked = list(content)
            marked[bi] = _mark(content[bi], ttl)
            turns[ti] = (role, marked)
        else:
            raise UnsupportedContent(f"cache_breakpoints: {where!r} is not 'tools', 'system' or a message index")


_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def _has_content(block: dict[str, Any]) -> bool:
    return block["type"] != "tool_result" or "content" in block


def _place_cache_breakpoints(
    tools: list[dict[str, Any]],
    system_blocks: list[dict[str, Any]],
    turns: list[tuple[str, list[dict[str, Any]]]],
    ttls: tuple[str | None, str | None] = (None, None),
) -> None:
    """Mark the last tool, the system prompt and the last two user turns (at most four breakpoints)."""
    prefix_ttl, ttl = ttls
    used = 0
    if tools:
        tools[-1] = _mark(tools[-1], prefix_ttl)
        used += 1
    if system_blocks:
        system_blocks[-1] = _mark(system_blocks[-1], prefix_ttl)
        used += 1
    user_marks = 0
    for ti in range(len(turns) - 1, -1, -1):
        if user_marks == 2 or used == MAX_CACHE_BREAKPOINTS:
            break
        role, content = turns[ti]
        if role != "user":
            continue
        for bi in range(len(content) - 1, -1, -1):
            block = content[bi]
            if block["type"] == "tool_result" and "content" not in block:
                continue  # an empty block may not carry a breakpoint
            marked = list(content)  # the cached list stays as it was
            marked[bi] = _mark(block, ttl)
            turns[ti] = (role, marked)
            used += 1
            user_marks += 1
            break


# "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'" (API 400; home-assistant/core#147760).
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")


def _tool(tool: ToolSchema, path: str) -> dict[str, Any]:
    if not TOOL_NAME.fullmatch(tool.name):
        raise UnsupportedContent(
            f"{path}.name: {tool.name!r} is not a name Anthropic accepts (1 to 128 of a-z, A-Z, 0-9, _ and -)"
        )
    out: dict[str, Any] = {"name": tool.name}
    if tool.description:
        out["description"] = tool.description
    out["input_schema"] = dict(tool.input_schema)
    return out


# The built-in tools (platform.claude.com/docs/en/agents-and-tools/tool-use/overview, "Server tools"; the SDK's
# ``WebSearchTool20250305Param``, ``WebFetchTool20250910Param``, ``CodeExecutionTool20250825Param``,
# ``ToolSearchToolRegex20251119Param``), and the MCP connector's server definitions
# (platform.claude.com/docs/en/agents-and-tools/mcp-connector; SDK ``BetaRequestMCPServerURLDefinitionParam``).
MCP_BETA: Final = "mcp-client-2025-04-04"
"""The ``anthropic-beta`` flag the MCP connector (``mcp_servers``) needs."""


def _native_tools(tools: Sequence[NativeTool]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(tool entries, mcp_servers entries)`` for the built-in tools; raises
    :class:`~loopctl.errors.UnsupportedContent` for a tool or an option Anthropic does not have."""
    check_native_tools(tools, "Anthropic")
    out: list[dict[str, Any]] = []
    servers: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        path = f"native_tools[{i}]"
        if isinstance(tool, WebSearch):
            refuse_options(tool, path, "Anthropic", ("search_context_size",))
            entry: dict[str, Any] = {"type": "web_search_20250305", "name": "web_search"}
            _put_domains(entry, tool.allowed_domains, tool.blocked_domains, path)
            if tool.max_uses is not None:
                entry["max_uses"] = tool.max_uses
            if tool.user_location is not None:
                entry["user_location"] = tool.user_location.to_dict()
            out.append(entry)
        elif isinstance(tool, WebFetch):
            entry = {"type": "web_fetch_20250910", "name": "web_fetch"}
            _put_domains(entry, tool.allowed_domains, tool.blocked_domains, path)
            if tool.max_uses is not None:
                entry["max_uses"] = tool.max_uses
            if tool.citations is not None:
                entry["citations"] = {"enabled": tool.citations}
            if tool.max_content_tokens is not None:
                entry["max_content_tokens"] = tool.max_content_tokens
            out.append(entry)
        elif isinstance(tool, CodeExecution):
            refuse_options(tool, path, "Anthropic", ("container", "file_ids"))
            out.append({"type": "code_execution_20250825", "name": "code_execution"})
        elif isinstance(tool, ToolSearch):
            mode = tool.mode or "regex"
            out.append({"type": f"tool_search_tool_{mode}_20251119", "name": f"tool_search_tool_{mode}"})
        elif isinstance(tool, RemoteMCP):
            refuse_options(tool, path, "Anthropic", ("headers",))
            if tool.require_approval != "never":
                raise UnsupportedContent(
                    f"{path}.require_approval: Anthropic's MCP connector runs the server's tools without approval"
                )
            server: dict[str, Any] = {"type": "url", "url": tool.url, "name": tool.name}
            if tool.authorization is not None:
                server["authorization_token"] = tool.authorization
            if tool.allowed_tools is not None:
                server["tool_configuration"] = {"enabled": True, "allowed_tools": list(tool.allowed_tools)}
            servers.append(server)
        elif isinstance(tool, (FileSearch, ImageGeneration)):
            raise unsupported_tool(tool, path, "Anthropic")
    return out, servers


def _put_domains(
    entry: dict[str, Any], allowed: Sequence[str] | None, blocked: Sequence[str] | None, path: str
) -> None:
    if allowed is not None and blocked is not None:
        raise UnsupportedContent(f"{path}: Anthropic takes allowed_domains or blocked_domains, not both")
    if allowed is not None:
        entry["allowed_domains"] = list(allowed)
    if blocked is not None:
        entry["blocked_domains"] = list(blocked)


def beta_flags(
    *, native_tools: Sequence[NativeTool] = (), context_management: object = None, **_: Any
) -> tuple[str, ...]:
    """The ``anthropic-beta`` flags a request built with these options needs (the client sends them as the
    ``anthropic-beta`` header): :data:`MCP_BETA` for a :class:`~loopctl.providers.native.RemoteMCP`,
    ``compact-2026-01-12`` for :class:`~loopctl.compact.provider.AnthropicCompaction` and
    ``context-management-2025-06-27`` for :class:`~loopctl.compact.provider.AnthropicClearToolUses` (on its
    own or inside the compaction). Other options of :func:`build_request` are accepted and ignored.

    ``native_tools`` are the request's built-in tool objects; ``context_management`` its provider-side compaction
    strategy (or ``None``).
    """
    flags: list[str] = []
    if any(isinstance(t, RemoteMCP) for t in native_tools):
        flags.append(MCP_BETA)
    clear = context_management
    if isinstance(context_management, AnthropicCompaction):
        flags.append(ANTHROPIC_COMPACTION_BETA)
        clear = context_management.clear_tool_uses
    if isinstance(clear, AnthropicClearToolUses):
        flags.append(ANTHROPIC_CONTEXT_EDITING_BETA)
    return tuple(flags)


def _tool_choice(choice: ToolChoice) -> dict[str, Any]:
    if isinstance(choice, ForceTool):
        return {"type": "tool", "name": choice.name}
    if choice == "required":
        return {"type": "any"}
    if choice in ("auto", "none"):
        return {"type": choice}
    raise UnsupportedContent(f"tool_choice {choice!r} is not 'auto', 'none', 'required' or a ForceTool")


# --- replies ------------------------------------------------------------------------------------------------


def parse_response(body: Mapping[str, Any]) -> ModelResponse:
    """A non-streamed reply (a ``Message`` object) as a :class:`~loopctl.response.ModelResponse`.

    An error body (``{"type": "error", "error": {...}}``) raises its typed error; a reply that is not a
    message, or holds a content block type this release does not know, raises
    :class:`~loopctl.errors.ProviderProtocolError` naming it. Tool inputs that arrive as JSON text are
    parsed (``""`` reads as ``{}``; text that is not JSON gives ``{}`` plus an
    :class:`~loopctl.response.InvalidToolCall`).
    """
    if not isinstance(body, Mapping):
        raise ProviderProtocolError(f"expected a JSON object, got {type(body).__name__}", provider=PROVIDER)
    if body.get("type") == "error" or (not is_zero_valued(body.get("error")) and "content" not in body):
        raise _error_from_body(body, None)
    content = body.get("content")
    if not isinstance(content, list):
        raise ProviderProtocolError("the reply has no content list", provider=PROVIDER, body=body)
    parts: list[MessagePart] = []
    invalid: list[InvalidToolCall] = []
    for i, block in enumerate(content):
        part = _decode_block(block, f"content[{i}]")
        if isinstance(part, ToolCallPart) and not isinstance(block.get("input"), dict):
            raw = block.get("input")
            text = raw if isinstance(raw, str) else dumps_exact(raw) if raw is not None else ""
            value, error = parse_arguments(text)
            if error is not None or not isinstance(value, dict):
                invalid.append(InvalidToolCall(part.id, part.name, text, error or "input is not a JSON object"))
                value = {}
            part = part.model_copy(update={"input": value})
        parts.append(part)
    raw_stop = body.get("stop_reason")
    has_calls = any(isinstance(p, ToolCallPart) for p in parts)
    return ModelResponse(
        message=Message(role=Role.ASSISTANT, parts=tuple(parts)),
        usage=_usage(body.get("usage") or {}),
        stop_reason=_stop_reason(raw_stop, has_calls),
        raw_stop_reason=raw_stop,
        model=body.get("model"),
        id=body.get("id"),
        invalid_tool_calls=tuple(invalid),
    )


def _decode_block(block: Any, where: str) -> MessagePart:
    if not isinstance(block, Mapping):
        raise ProviderProtocolError(f"{where}: expected a content block object", provider=PROVIDER)
    part = _block_part(block)
    if part is None:
        raise ProviderProtocolError(
            f"{where}: content block type {block.get('type')!r} is not one the Anthropic codec reads "
            "(text, thinking, redacted_thinking, tool_use, server_tool_use, mcp_tool_use, *_tool_result, compaction)",
            provider=PROVIDER,
        )
    return part


def _block_part(block: Mapping[str, Any]) -> MessagePart | None:
    """A reply content block (or the start of a streamed one) as a part; ``None`` for an unknown type.

    A thinking block's signature ``""`` (streamed blocks start so, ``signature_delta`` follows) reads as no
    signature; a tool call's input that is not an object reads as ``{}`` (the stream's deltas, or the
    caller's parse, supply the real one).
    """
    kind = block.get("type")
    if kind == "text":
        citations = block.get("citations")
        if isinstance(citations, list) and citations:
            return TextPart(text=block.get("text") or "", citations=tuple(citations), provider=PROVIDER)
        return TextPart(text=block.get("text") or "")
    if kind == "thinking":
        signature = block.get("signature") or None
        return ThinkingPart(text=block.get("thinking") or "", signature=signature, provider=PROVIDER)
    if kind == "redacted_thinking":
        return ThinkingPart(text="", redacted=block.get("data") or "", provider=PROVIDER)
    if kind == "tool_use":
        raw = block.get("input")
        name = block.get("name") or ""
        return ToolCallPart(id=block.get("id") or "", name=name, input=raw if isinstance(raw, dict) else {})
    return _native_part(block, kind)


def _native_part(block: Mapping[str, Any], kind: Any) -> MessagePart | None:
    """A server tool block (``server_tool_use``, ``mcp_tool_use``, a ``*_tool_result``) or a ``compaction``
    block as its provider-native part, the block kept whole as ``raw``; ``None`` for any other type.

    Blocks: platform.claude.com/docs/en/agents-and-tools/tool-use/server-tools (web search, web fetch, code
    execution, tool search), .../mcp-connector (``mcp_tool_use``, ``mcp_tool_result``) and
    .../build-with-claude/compaction (``compaction``); their shapes are the SDK's ``ContentBlock`` types."""
    if kind in ("server_tool_use", "mcp_tool_use"):
        raw = block.get("input")
        server = block.get("server_name") if kind == "mcp_tool_use" else None
        return ServerToolCallPart(
            id=_string(block, "id"),
            name=_string(block, "name"),
            input=raw if raw is not None else {},
            provider=PROVIDER,
            server=server if isinstance(server, str) and server else None,
            raw=dict(block),
        )
    if isinstance(kind, str) and kind.endswith("_tool_result") and kind != "tool_result":
        output, failed = _result_text(kind, block)
        return ServerToolResultPart(
            call_id=_string(block, "tool_use_id"),
            name=kind.removesuffix("_tool_result"),
            output=output,
            provider=PROVIDER,
            is_error=True if failed else None,
            raw=dict(block),
        )
    if kind == "compaction":
        summary = block.get("content")
        return CompactionPart(provider=PROVIDER, summary=summary if isinstance(summary, str) else "", raw=dict(block))
    return None


def _count(value: Any) -> int | None:
    """A token count as reported: a whole number, or ``None`` when it is missing. Raises ``TypeError`` for
    another value (the decoder's protocol error: a reply of an unexpected shape)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a token count is not a whole number: {value!r}")
    return value


def _string(block: Mapping[str, Any], key: str) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise ProviderProtocolError(f"a {block.get('type')} block whose {key} is not a string", provider=PROVIDER)
    return value


def _result_text(kind: str, block: Mapping[str, Any]) -> tuple[str, bool]:
    """A server tool result block as readable text, and whether it reports a failure (a content object of a
    ``*_error`` type, or ``is_error: true`` on an MCP result)."""
    content = block.get("content")
    if isinstance(content, Mapping) and str(content.get("type", "")).endswith("_error"):
        return f"error {result_text(content.get('error_code') or content.get('type'))}", True
    failed = block.get("is_error") is True
    if kind == "web_search_tool_result" and isinstance(content, list):
        lines = []
        for hit in content:
            if isinstance(hit, Mapping):
                age = f" ({hit['page_age']})" if isinstance(hit.get("page_age"), str) else ""
                lines.append(f"{result_text(hit.get('title') or '')} <{result_text(hit.get('url') or '')}>{age}")
        return "\n".join(lines), failed
    if isinstance(content, Mapping):
        ctype = content.get("type")
        if ctype == "web_fetch_result":
            document = content.get("content")
            source = document.get("source") if isinstance(document, Mapping) else None
            text = ""
            if isinstance(source, Mapping):
                data = source.get("data")
                text = (
                    data if source.get("type") == "text" and isinstance(data, str) else f"[{source.get('media_type')}]"
                )
            return f"{result_text(content.get('url') or '')}\n{text}", failed
        if "stdout" in content or "stderr" in content:  # (bash_)code_execution_result
            out = [result_text(content.get("stdout") or "")]
            if content.get("stderr"):
                out.append(f"[stderr] {result_text(content['stderr'])}")
            if content.get("return_code") not in (None, 0):
                out.append(f"[return code {content['return_code']}]")
            return "\n".join(o for o in out if o), failed
        if ctype == "tool_search_tool_search_result":
            names = [r.get("tool_name") for r in content.get("tool_references") or () if isinstance(r, Mapping)]
            return "tools found: " + ", ".join(str(n) for n in names), failed
    if isinstance(content, list):  # an MCP result: text blocks
        texts = [c.get("text") for c in content if isinstance(c, Mapping) and isinstance(c.get("text"), str)]
        if len(texts) == len(content):
            return "\n".join(t for t in texts if t is not None), failed
    return result_text(content if content is not None else ""), failed


def _usage(raw: Mapping[str, Any]) -> Usage:
    """Anthropic usage -> :class:`Usage`: input counts cached tokens too (input + cache read + creation); a
    count the reply does not carry is ``None`` (not reported; an Anthropic-compatible server may leave the
    cache counts, or the whole ``usage``, out)."""
    fresh = _count(raw.get("input_tokens"))
    read = _count(raw.get("cache_read_input_tokens"))
    written = _count(raw.get("cache_creation_input_tokens"))
    details = raw.get("output_tokens_details")
    reasoning = _count(details.get("thinking_tokens")) if isinstance(details, Mapping) else None
    parts = [n for n in (fresh, read, written) if n is not None]
    # The split of the writes by TTL (prompt-caching docs, "Tracking cache performance": cache_creation
    # .ephemeral_5m_input_tokens / .ephemeral_1h_input_tokens): an hour's write is priced higher.
    creation = raw.get("cache_creation")
    hour = _count(creation.get("ephemeral_1h_input_tokens")) if isinstance(creation, Mapping) else None
    hour = hour or None  # no hour-long writes: the count stays out (Usage.cache_write_1h_tokens)
    return Usage(
        input_tokens=sum(parts) if fresh is not None else None,
        output_tokens=_count(raw.get("output_tokens")),
        cache_read_tokens=read,
        cache_write_tokens=written,
        reasoning_tokens=reasoning,
        cache_write_1h_tokens=hour if hour is None or written is None else min(hour, written),
    )


def _stop_reason(raw: str | None, has_calls: bool) -> StopReason:
    stop = _STOP_REASONS.get(raw or "", StopReason.END_TURN)
    if has_calls and stop is StopReason.END_TURN:
        return StopReason.TOOL_CALL
    return stop


class StreamDecoder(SSEStreamDecoder):
    """Decodes a Messages API event stream (``stream: true``) into neutral stream events.

    Events (platform.claude.com/docs/en/build-with-claude/streaming): ``message_start``,
    ``content_block_start``/``_delta``/``_stop``, ``message_delta`` (stop reason, cumulative usage),
    ``message_stop``; ``ping`` and unknown event types are ignored; ``error`` raises its typed error from
    :meth:`feed` (``overloaded_error`` -> :class:`~loopctl.errors.Overloaded` and so on). The event's
    ``type`` is read from its JSON (runs of spaces before the closing brace are valid JSON whitespace), so
    a missing ``event:`` line costs nothing. A stream cut before ``message_stop`` raises
    :class:`~loopctl.errors.StreamTruncated` from :meth:`finish`.
    """

    provider = PROVIDER

    def __init__(self) -> None:
        super().__init__()
        self._index: dict[int, int] = {}
        # Blocks that arrive in pieces and are completed at content_block_stop: a server tool call's input,
        # a compaction's summary, a text's citations (part index -> what is gathered so far).
        self._pieces: dict[int, _Pieces] = {}
        self._usage_raw: dict[str, Any] = {}
        self._raw_stop: str | None = None
        self._has_calls = False

    def on_event(self, event: ServerSentEvent) -> list[StreamEvent]:
        """One SSE event -> neutral events; raises on an ``error`` event."""
        data = event.data
        if not data:
            return []
        try:
            # Only a block that starts a tool call can hold its input as a JSON value (compatible servers send
            # it whole there); every other event goes through orjson alone (loads_exact scans the text).
            obj = loads_exact(data) if '"tool_use"' in data else orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ProviderProtocolError(
                f"stream event {event.event!r} carries data that is not JSON: {data[:200]!r}", provider=PROVIDER
            ) from None
        if not isinstance(obj, dict):
            return []
        kind = obj.get("type") or event.event
        if kind == "content_block_delta":
            return self._delta(obj)
        if kind == "content_block_start":
            return self._start(obj)
        if kind == "content_block_stop":
            index = self._index.get(obj.get("index", -1))
            if index is None:
                return []
            pieces = self._pieces.pop(index, None)
            if pieces is None:
                return [PartFinished(index)]
            done = pieces.finish()
            if done is pieces.part:
                return [PartFinished(index)]
            return [PartUpdated(index, done), PartFinished(index)]
        if kind == "message_start":
            message = obj.get("message") or {}
            self._usage_raw = dict(message.get("usage") or {})
            return [ResponseStarted(message.get("id"), message.get("model")), UsageReported(_usage(self._usage_raw))]
        if kind == "message_delta":
            out: list[StreamEvent] = []
            delta = obj.get("delta") or {}
            if delta.get("stop_reason") is not None:
                self._raw_stop = delta["stop_reason"]
            usage = obj.get("usage")
            if isinstance(usage, dict):
                # Cumulative totals: each field present replaces the running one.
                self._usage_raw.update((k, v) for k, v in usage.items() if v is not None)
                out.append(UsageReported(_usage(self._usage_raw)))
            return out
        if kind == "message_stop":
            return [ResponseFinished(_stop_reason(self._raw_stop, self._has_calls), self._raw_stop)]
        if kind == "error":
            raise _error_from_body(obj, None)
        return []  # "ping", and event types added after this release

    def _start(self, obj: dict[str, Any]) -> list[StreamEvent]:
        block = obj.get("content_block") or {}
        part = _block_part(block) if isinstance(block, dict) else None
        if part is None:
            raise ProviderProtocolError(
                f"content block type {block.get('type')!r} at index {obj.get('index')} is not one the Anthropic "
                "codec reads (text, thinking, redacted_thinking, tool_use, server_tool_use, mcp_tool_use, "
                "*_tool_result, compaction)",
                provider=PROVIDER,
            )
        if isinstance(part, ToolCallPart):
            self._has_calls = True
        index = len(self._index)
        self._index[obj.get("index", index)] = index
        if isinstance(part, (ServerToolCallPart, CompactionPart, TextPart)):
            self._pieces[index] = _Pieces(part, block)
        return [PartStarted(index, part)]

    def _delta(self, obj: dict[str, Any]) -> list[StreamEvent]:
        index = self._index.get(obj.get("index", -1))
        if index is None:
            raise ProviderProtocolError(
                f"a content_block_delta for block {obj.get('index')}, which never started", provider=PROVIDER
            )
        delta = obj.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            return [TextDelta(index, delta.get("text") or "")]
        if kind == "input_json_delta":
            pieces = self._pieces.get(index)
            if pieces is not None:  # a server tool call's input: assembled here, the part updated at its stop
                pieces.chunks.append(delta.get("partial_json") or "")
                return []
            return [ToolCallDelta(index, delta.get("partial_json") or "")]
        if kind == "citations_delta":
            pieces = self._pieces.get(index)
            citation = delta.get("citation")
            if pieces is not None and isinstance(citation, dict):
                pieces.citations.append(citation)
            return []
        if kind == "compaction_delta":
            pieces = self._pieces.get(index)
            if pieces is not None and isinstance(delta.get("content"), str):
                pieces.chunks.append(delta["content"])
            return []
        if kind == "thinking_delta":
            return [ThinkingDelta(index, delta.get("thinking") or "")]
        if kind == "signature_delta":
            return [ThinkingSignature(index, delta.get("signature") or "")]
        return []  # delta types added after this release

    def error_body(self, body: Any) -> ProviderError:
        """The typed error for a JSON error body sent in place of the stream; JSON that is no error object
        (a whole message, from a proxy that ignored ``stream``) is a protocol error, not a server error."""
        if not (isinstance(body, Mapping) and "error" in body):
            return ProviderProtocolError(
                "the stream body is JSON but not an error object", provider=PROVIDER, body=body
            )
        return _error_from_body(body, None)


class _Pieces:
    """A block gathered from its stream events: its part as started, its ``content_block_start`` block, and the
    pieces that followed (a server tool call's ``input_json_delta`` text, a compaction's ``compaction_delta``
    content, a text's ``citations_delta`` citations)."""

    __slots__ = ("block", "chunks", "citations", "part")

    def __init__(self, part: MessagePart, block: Mapping[str, Any]) -> None:
        self.part = part
        self.block = block
        self.chunks: list[str] = []
        self.citations: list[dict[str, Any]] = []

    def finish(self) -> MessagePart:
        """The complete part, its ``raw`` the block as the non-streamed reply would hold it."""
        part = self.part
        if isinstance(part, ServerToolCallPart):
            text = "".join(self.chunks)
            value, problem = parse_arguments(text)
            if problem is not None:
                raise ProviderProtocolError(f"server tool call {part.id!r}: {problem}", provider=PROVIDER)
            if not text.strip():
                value = self.block.get("input") if self.block.get("input") is not None else {}
            return part.model_copy(update={"input": value, "raw": {**self.block, "input": value}})
        if isinstance(part, CompactionPart):
            if not self.chunks:
                return part
            summary = "".join(self.chunks)
            return part.model_copy(update={"summary": summary, "raw": {**self.block, "content": summary}})
        if isinstance(part, TextPart) and self.citations:
            return part.model_copy(
                update={"citations": (*(part.citations or ()), *self.citations), "provider": PROVIDER}
            )
        return part


def parse_stream(chunks: Iterable[bytes]) -> ModelResponse:
    """Decode a whole event stream (chunks split anywhere) into a :class:`~loopctl.response.ModelResponse`."""
    return StreamDecoder.parse(chunks)


# --- errors -------------------------------------------------------------------------------------------------


def error_from_http(
    status: int,
    body: bytes | str | Mapping[str, Any] | None,
    headers: Mapping[str, str] | None = None,
    *,
    now: float | None = None,
) -> ProviderError:
    """The typed error for a non-2xx reply (platform.claude.com/docs/en/api/errors).

    429 ``rate_limit_error`` -> :class:`~loopctl.errors.RateLimited` and 529 ``overloaded_error`` ->
    :class:`~loopctl.errors.Overloaded`, each with ``retry_after`` seconds from the ``retry-after`` header;
    400 ``invalid_request_error`` -> :class:`~loopctl.errors.InvalidRequest`, or
    :class:`~loopctl.errors.ContextOverflow` when it says "prompt is too long" or "exceed context limit";
    401/403 -> :class:`~loopctl.errors.AuthenticationError`; 404 -> :class:`~loopctl.errors.ModelNotFound`;
    other 5xx -> :class:`~loopctl.errors.ServerError`. A body that is not JSON keeps its text as the message.

    ``now`` is the current Unix time in seconds: with it, a ``Retry-After`` given as an HTTP-date (RFC 9110
    section 10.2.3, ``Wed, 21 Oct 2015 07:28:00 GMT``) becomes the seconds from ``now`` to that date (0 for a
    date past); the codec reads no clock, so without ``now`` only a number of seconds is read. The clients
    pass ``time.time()``.

    ``status`` is the HTTP status and ``headers`` the reply's headers (``retry-after``); ``now`` (seconds since the
    epoch) reads an HTTP-date ``retry-after``.
    """
    parsed: Any = body
    if isinstance(body, (bytes, str)):
        try:
            parsed = loads_exact(body)
        except orjson.JSONDecodeError:
            text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
            parsed = text.strip() or None
    return _error_from_body(parsed, status, parse_retry_after(headers, now=now))


def _error_from_body(body: Any, status: int | None, retry_after: float | None = None) -> ProviderError:
    message: str | None = None
    error_type: str | None = None
    if isinstance(body, Mapping):
        err = body.get("error")
        if isinstance(err, Mapping):
            message = err.get("message") if isinstance(err.get("message"), str) else None
            error_type = err.get("type") if isinstance(err.get("type"), str) else None
        elif isinstance(err, str):
            message = err
    elif isinstance(body, str):
        message = body
    if status is None:
        status = _STATUS_OF_ERROR.get(error_type or "", 500)
    error = classify_http_error(
        PROVIDER, status, message=message, error_type=error_type, body=body, retry_after=retry_after
    )
    if type(error) is InvalidRequest and message and _CONTEXT_LIMIT.search(message):
        return ContextOverflow(message, provider=PROVIDER, status=status, provider_message=message, body=body)
    return error


# --- NativeOutput: structured outputs (output_config.format) ---------------------------------------------------

# Keywords structured outputs do not take (https://platform.claude.com/docs/en/build-with-claude/structured-outputs,
# "JSON Schema limitations"): numerical, string and array constraints. As the SDK's ``transform_schema`` does,
# they move into the description, so the model still reads them (and loopctl's validation still checks them).
_UNSUPPORTED_CONSTRAINTS = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
)


def json_output_format(output: OutputFormat) -> dict[str, Any]:
    """``output_config.format`` for ``output``: ``{"type": "json_schema", "schema": ...}`` (Anthropic's
    structured outputs; ``OutputConfigParam`` / ``JSONOutputFormatParam`` in the SDK). The schema follows the
    documented limits: every object gets ``additionalProperties: false``, ``oneOf`` becomes ``anyOf``,
    unsupported constraints (and ``minItems`` other than 0 or 1) move into the description. Raises
    :class:`~loopctl.errors.UnsupportedContent` naming the field for what it cannot express: a free-form map
    (``additionalProperties`` true or a schema), a value of any type, or a recursive ``$ref`` (use
    ``OutputTool`` or ``PromptedOutput`` for such types)."""
    schema = _output_schema(dict(output.schema), "output_format.schema")
    _no_recursion(schema)
    return {"type": "json_schema", "schema": schema}


def _output_schema(schema: dict[str, Any], path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    notes: list[str] = []
    for key, value in schema.items():
        if key in _UNSUPPORTED_CONSTRAINTS or (key == "minItems" and value not in (0, 1)):
            notes.append(f"{key}: {value}")
        elif key in ("$defs", "definitions", "properties") and isinstance(value, dict):
            out[key] = {k: _output_schema(dict(v), f"{path}.{key}.{k}") for k, v in value.items()}
        elif key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
            target = "anyOf" if key == "oneOf" else key
            out[target] = [_output_schema(dict(v), f"{path}.{key}[{i}]") for i, v in enumerate(value)]
        elif key == "items" and isinstance(value, dict):
            out[key] = _output_schema(dict(value), f"{path}.items")
        elif key != "additionalProperties":
            out[key] = value
    if not any(k in out for k in ("type", "anyOf", "allOf", "$ref", "enum", "const")):
        raise UnsupportedContent(f"{path}: Anthropic's structured outputs cannot express a value of any type")
    if out.get("type") == "object" or "properties" in out:
        extra = schema.get("additionalProperties", False)
        if extra is not False or "patternProperties" in schema:
            raise UnsupportedContent(
                f"{path}: Anthropic's structured outputs cannot express a free-form map (additionalProperties "
                f"{extra!r}); use OutputTool or PromptedOutput for this type"
            )
        out["additionalProperties"] = False
    if notes:
        described = out.get("description")
        out["description"] = "\n\n".join([*([described] if described else []), "{" + ", ".join(notes) + "}"])
    return out


def _no_recursion(schema: dict[str, Any]) -> None:
    """Refuse a schema whose ``$defs`` refer back to themselves (the documented limits exclude recursion)."""
    defs = schema.get("$defs") or {}

    def refs(value: Any) -> set[str]:
        if isinstance(value, dict):
            found = {value["$ref"].rsplit("/", 1)[-1]} if isinstance(value.get("$ref"), str) else set()
            for v in value.values():
                found |= refs(v)
            return found
        if isinstance(value, list):
            return set().union(*(refs(v) for v in value)) if value else set()
        return set()

    graph = {name: refs(body) for name, body in defs.items()}
    for start, targets in graph.items():
        seen: set[str] = set()
        todo = list(targets)
        while todo:
            name = todo.pop()
            if name == start:
                raise UnsupportedContent(
                    f"output_format.schema.$defs.{start}: Anthropic's structured outputs cannot express a "
                    "recursive schema"
                )
            if name not in seen:
                seen.add(name)
                todo.extend(graph.get(name, ()))
