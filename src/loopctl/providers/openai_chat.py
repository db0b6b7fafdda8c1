"""OpenAI Chat Completions codec (``POST /v1/chat/completions``), also for any OpenAI-compatible server.

Messages go in, a JSON request body comes out (:func:`build_request`); a reply body (:func:`parse_response`)
or an SSE stream (:class:`StreamDecoder`, :func:`parse_stream`) comes back as a
:class:`~loopctl.response.ModelResponse`; an HTTP error becomes a typed error (:func:`error_from_http`).
``docs/providers/openai_chat.md`` states every rule with its source; the main ones:

- System messages stay inline where they stand (``role: "system"``, or ``"developer"`` with
  ``system_role``); the ``system`` argument becomes a first system message.
- One ``role: "tool"`` message per tool result, right after the assistant message that made the calls, in
  the order of the calls. Tool messages carry text only, so the images of a result move, in order, to a
  user message right after the tool messages, and the tool message says so in a short note. Chat has no
  ``is_error`` field: a failed result's text starts with ``[tool error]``.
- An assistant turn that only calls tools has ``content: null``; ``arguments`` is JSON text.
- Thinking is never sent (Chat Completions has no reasoning replay), except the ``reasoning_content`` that an
  OpenAI-compatible server minted, when the caller opts in with ``replay_reasoning_content`` (DeepSeek's
  thinking mode wants it back after tool calls). ``reasoning_content`` / ``reasoning`` fields of replies are
  decoded into ``ThinkingPart(provider="openai-compatible")``.
- Tool-call ids longer than 40 characters or outside ``[A-Za-z0-9_-]`` are rewritten deterministically.

Pure: no I/O, no clock. Never imports the ``openai`` SDK.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, TypeGuard

import orjson

from loopctl._frozen import dataclass
from loopctl._lazy import LazyModule
from loopctl.errors import (
    ContextOverflow,
    InvalidRequest,
    Overloaded,
    ProviderError,
    ProviderProtocolError,
    RateLimited,
    ServerError,
    UnsupportedContent,
)
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
from loopctl.message.model import _dumps_bytes, assemble
from loopctl.providers._common import (
    TOOL_ERROR_MARKER,
    check_pairing,
    classify_http_error,
    error_from_status_code,
    http_status_code,
    is_context_overflow,
    is_zero_valued,
    nothing_to_send,
    parse_retry_after,
    refuse_unwritable_message,
    refuse_unwritable_options,
    rewrite_tool_id,
)
from loopctl.providers._openai_strict import plain_schema as _plain
from loopctl.providers._openai_strict import strict_schema
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
from loopctl.providers.cache import PromptCacheRetention, openai_cache_fields
from loopctl.providers.sse import ServerSentEvent
from loopctl.response import InvalidToolCall, ModelResponse, StopReason, Usage
from loopctl.stream import (
    PartStarted,
    ResponseFinished,
    ResponseStarted,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    UsageReported,
    dumps_exact,
    loads_exact,
    parse_arguments,
)
from loopctl.tool import ForceTool, ToolChoice, ToolSchema

if TYPE_CHECKING:  # the built-in tools' module is imported where a request or a reply has one
    import loopctl.providers.native
else:  # the annotations' modules, imported when an annotation is read (loopctl._lazy)
    loopctl = LazyModule("loopctl")

__all__ = [
    "COMPATIBLE_REASONING",
    "PROVIDER",
    "TOOL_CALL_ID_MAX_LENGTH",
    "TOOL_ERROR_MARKER",
    "StreamDecoder",
    "build_request",
    "build_request_from",
    "encode_request",
    "encode_request_from",
    "error_from_http",
    "parse_response",
    "parse_stream",
    "response_format",
    "strict_schema",
]

PROVIDER: Final = "openai"
"""The name used in errors (``ProviderError.provider``)."""

_API: Final = "OpenAI Chat Completions"

COMPATIBLE_REASONING: Final = "openai-compatible"
"""``ThinkingPart.provider`` of reasoning text decoded from a compatible server's ``reasoning_content`` /
``reasoning`` field (OpenAI itself never returns reasoning on Chat Completions)."""

TOOL_CALL_ID_MAX_LENGTH: Final = 40
"""OpenAI refuses longer tool-call ids: ``Invalid 'messages[2].tool_calls[0].id': string too long. Expected a
string with maximum length 40`` (code ``string_above_max_length``; reported in agno-agi/agno#5382,
microsoft/autogen#6377)."""

SystemRole = Literal["system", "developer"]
MaxTokensParam = Literal["max_completion_tokens", "max_tokens"]
ImageDetail = Literal["auto", "low", "high"]

# --- building requests -------------------------------------------------------------------------------------


class _Options(NamedTuple):
    """What changes how a message converts; part of the cache key (a tuple: hashed and compared in C on every
    cache lookup, where a dataclass's ``__hash__`` and ``__eq__`` ran as Python, eleven times a call)."""

    system_role: SystemRole
    image_detail: ImageDetail | None
    replay_reasoning_content: bool
    tool_call_id_max_length: int


@dataclass(frozen=True, slots=True)
class _ToolReply:
    """One tool result: its ``role: "tool"`` message and the user content parts moved out of it (a label,
    then its images)."""

    tool_call_id: str
    message: dict[str, Any]
    moved: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class _Piece:
    """One message converted. ``message`` is the Chat message (``None`` when nothing remains, such as a user
    message that holds only tool results); ``tool_call_ids`` are an assistant's calls in order; ``replies``
    are a user message's tool results in order. Cached: never mutated."""

    role: Role
    message: dict[str, Any] | None
    tool_call_ids: tuple[str, ...] = ()
    replies: tuple[_ToolReply, ...] = ()


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
    system_role: SystemRole = "system",
    max_tokens_param: MaxTokensParam = "max_completion_tokens",
    strict_tools: bool = False,
    image_detail: ImageDetail | None = None,
    replay_reasoning_content: bool = False,
    tool_call_id_max_length: int = TOOL_CALL_ID_MAX_LENGTH,
    output_format: OutputFormat | None = None,
    native_tools: Sequence[loopctl.providers.native.NativeTool] = (),
    prompt_cache_key: str | None = None,
    prompt_cache_retention: PromptCacheRetention | None = None,
    prompt_cache_options: Mapping[str, Any] | None = None,
    context_management: object = None,
) -> dict[str, Any]:
    """The JSON body of a Chat Completions request for ``messages``.

    Common options: ``max_tokens`` (tokens) is sent as ``max_completion_tokens`` (OpenAI deprecated
    ``max_tokens`` and o-series models refuse it; ``max_tokens_param="max_tokens"`` for servers that only
    know the old name); ``temperature``; ``stop`` (a list); ``tool_choice`` (``"auto"``, ``"none"``,
    ``"required"`` or :class:`~loopctl.tool.ForceTool`); ``reasoning_effort`` (passed as is);
    ``stream=True`` adds ``stream: true`` and ``stream_options: {"include_usage": true}``; ``extra`` is merged
    into the body last (shallow). ``cache`` reuses each message's conversion between calls (the body is the
    same with or without it, and shares structure with the cache: do not mutate it).

    Provider-specific options: ``system_role`` (``"developer"`` for the role OpenAI's reasoning models name;
    ``"system"`` is accepted by every model and compatible server); ``strict_tools`` (``strict: true`` and
    each schema converted by :func:`strict_schema`); ``image_detail`` (``image_url.detail`` of every image);
    ``replay_reasoning_content`` (send back the text of ``ThinkingPart(provider="openai-compatible")`` parts as
    the assistant message's ``reasoning_content``, as DeepSeek's thinking mode requires after tool calls; not
    a field of OpenAI's own API); ``tool_call_id_max_length`` (ids longer than this, or outside
    ``[A-Za-z0-9_-]``, are rewritten by :func:`~loopctl.providers._common.rewrite_tool_id`).
    ``output_format`` becomes ``response_format`` (:func:`response_format`). ``prompt_cache_key`` (``"auto"``:
    a key stable per conversation, :func:`loopctl.providers.cache.prompt_cache_key`), ``prompt_cache_retention``
    and ``prompt_cache_options`` are OpenAI's cache fields (platform.openai.com/docs/guides/prompt-caching),
    sent only when given (a compatible server may refuse them); ``native_tools`` are refused: Chat Completions
    runs no tools itself.

    Raises :class:`~loopctl.errors.UnsupportedContent` naming the path (``messages[3].parts[1]``) of a part the
    API cannot carry: a part type this release does not know, an image outside user messages and tool results,
    a tool call outside an assistant message, a tool result outside a user message, tool-call input that is
    not JSON, a tool schema strict mode cannot express, a tool call or result that breaks the pairing rules
    (:func:`~loopctl.providers._common.check_pairing`), or a conversation with nothing to send. Raises
    ``ValueError`` for a bad option value.

    ``tools`` are the tool schemas offered, sent as ``tools`` of type ``function``.

    ``context_management``: Chat Completions has no provider-side compaction, so any strategy raises
    :class:`~loopctl.errors.UnsupportedContent`.
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
        system_role=system_role,
        max_tokens_param=max_tokens_param,
        strict_tools=strict_tools,
        image_detail=image_detail,
        replay_reasoning_content=replay_reasoning_content,
        tool_call_id_max_length=tool_call_id_max_length,
        output_format=output_format,
        native_tools=native_tools,
        prompt_cache_key=prompt_cache_key,
        prompt_cache_retention=prompt_cache_retention,
        prompt_cache_options=prompt_cache_options,
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
    only the messages from the last assistant message on are checked, converted, laid out and written; the
    rest is the bytes of the previous call. Tool schemas are converted once while the same objects come back.
    Raises what :func:`build_request` raises, and ``InvalidMessage`` for text with a lone surrogate.
    """
    return encode_built(_build, messages, model=model, cache=cache, **options)


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
    system_role: SystemRole = "system",
    max_tokens_param: MaxTokensParam = "max_completion_tokens",
    strict_tools: bool = False,
    image_detail: ImageDetail | None = None,
    replay_reasoning_content: bool = False,
    tool_call_id_max_length: int = TOOL_CALL_ID_MAX_LENGTH,
    output_format: OutputFormat | None = None,
    native_tools: Sequence[loopctl.providers.native.NativeTool] = (),
    prompt_cache_key: str | None = None,
    prompt_cache_retention: PromptCacheRetention | None = None,
    prompt_cache_options: Mapping[str, Any] | None = None,
    context_management: object = None,
) -> tuple[dict[str, Any], LaidOutPrefix | None, tuple[tuple[bytes, ...], list[dict[str, Any]]] | None]:
    """The body, and (with ``requests``) the prefix to keep for the next call and the parts of the messages
    array. Without ``requests`` the messages are laid out whole (``body["messages"]`` a list); with it, from
    the stored prefix on (``body["messages"]`` is :data:`~loopctl.providers.base.ITEMS_MARK`, the array the
    written chunks of the prefix and the new items: see :func:`~loopctl.providers.base.write_spliced`)."""
    if max_tokens_param not in ("max_completion_tokens", "max_tokens"):
        raise ValueError(f"max_tokens_param must be 'max_completion_tokens' or 'max_tokens', not {max_tokens_param!r}")
    if system_role not in ("system", "developer"):
        raise ValueError(f"system_role must be 'system' or 'developer', not {system_role!r}")
    if native_tools:
        from loopctl.providers.native import check_native_tools, unsupported_tool

        check_native_tools(native_tools, _API)
        raise unsupported_tool(
            native_tools[0], "native_tools[0]", _API, "Chat Completions runs no tools itself; use openai-responses"
        )
    if context_management is not None:
        raise UnsupportedContent(
            "context_management: Chat Completions has no provider-side compaction "
            f"({type(context_management).__name__}); use openai-responses with OpenAICompaction, or a local compactor"
        )
    opts = _Options(system_role, image_detail, replay_reasoning_content, tool_call_id_max_length)
    if requests is None:
        refuse_unwritable_options(system, tools, _API)
    else:  # the tools' strings are checked once while the same tools come back
        refuse_unwritable_options(system, (), _API)
        requests.tools(("writable", _API), tools, lambda: refuse_unwritable_options(None, tools, _API))
    conversions = requests.conversions if requests is not None else cache
    prefix = requests.prefix(messages, opts) if requests is not None else None
    start = prefix.start if prefix is not None else 0
    check_pairing(messages, _API, start)
    tail = messages[start:] if start else messages
    pieces: list[_Piece] = []
    for index, message in enumerate(tail, start):
        piece = conversions.get(message, opts) if conversions is not None else None
        if piece is None:
            piece = _convert_message(message, f"messages[{index}]", opts)
            if conversions is not None:
                conversions.put(message, piece, opts)
        pieces.append(piece)
    if conversions is not None:
        conversions.sweep()

    head: list[dict[str, Any]] = []
    if system:
        head.append({"role": system_role, "content": system})
    chat: list[dict[str, Any]] = head if requests is None else []
    starts: list[tuple[int, int]] = []  # (piece, position in chat) of each assistant message
    _assemble(pieces, chat, starts)
    if not chat and not head and (prefix is None or not prefix.count):
        raise nothing_to_send(_API, len(messages))

    body: dict[str, Any] = {"model": model, "messages": chat}
    keep: LaidOutPrefix | None = None
    parts: tuple[tuple[bytes, ...], list[dict[str, Any]]] | None = None
    if requests is not None:
        # The layout before an assistant message never changes when messages are added after it (results are
        # gathered up to the next assistant message): everything before the last one becomes the prefix.
        cut = next((s for s in reversed(starts) if s[0] > 0), None)
        done, rest = (chat[: cut[1]], chat[cut[1] :]) if cut is not None else ([], chat)
        chunks = prefix.chunks if prefix is not None else ()
        written = write_items(done)
        if written:
            chunks = (*chunks, written)
        body["messages"] = ITEMS_MARK
        parts = ((write_items(head), *chunks) if head else chunks, rest)
        if cut is not None:
            count = (prefix.count if prefix is not None else 0) + len(done)
            keep = LaidOutPrefix(opts, _held(messages), start + cut[0], chunks, count)
        if tools:
            body["tools"] = requests.tools((_API, strict_tools), tools, lambda: _tools_fragment(tools, strict_tools))
    elif tools:
        body["tools"] = [_tool(t, f"tools[{i}]", strict_tools) for i, t in enumerate(tools)]
    if tool_choice is not None:
        body["tool_choice"] = _tool_choice(tool_choice)
    if max_tokens is not None:
        body[max_tokens_param] = max_tokens
    if temperature is not None:
        body["temperature"] = temperature
    if stop is not None:
        body["stop"] = list(stop)
    if reasoning_effort is not None:
        body["reasoning_effort"] = reasoning_effort
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if output_format is not None:
        body["response_format"] = response_format(output_format)
    if prompt_cache_key is not None or prompt_cache_retention is not None or prompt_cache_options:
        body.update(
            openai_cache_fields(
                messages,
                system,
                key=prompt_cache_key,
                retention=prompt_cache_retention,
                options=prompt_cache_options,
            )
        )
    if extra:
        body.update(extra)
    return body, keep, parts


def _tools_fragment(tools: Sequence[ToolSchema], strict: bool) -> Any:
    return orjson.Fragment(_dumps_bytes([_tool(t, f"tools[{i}]", strict) for i, t in enumerate(tools)]))


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


def build_request_from(
    request: ModelRequest,
    *,
    model: str,
    stream: bool = False,
    cache: ConversionCache | None = None,
    **provider_specific: Any,
) -> dict[str, Any]:
    """:func:`build_request` for a :class:`~loopctl.providers.base.ModelRequest` (what the clients use);
    ``provider_specific`` takes :func:`build_request`'s provider-specific options.

    ``request`` is the provider-neutral request; ``model`` the model to name; ``stream`` asks for a streamed reply;
    ``cache`` (optional, kept by the client across calls) reuses the conversion of the messages the previous request
    already had.
    """
    return build_request(
        request.messages, model=model, stream=stream, cache=cache, **request.options(), **provider_specific
    )


def _assemble(pieces: list[_Piece], out: list[dict[str, Any]], starts: list[tuple[int, int]] | None = None) -> None:
    """Lay the converted messages out in Chat's order.

    OpenAI requires the tool messages answering an assistant's ``tool_calls`` to follow it directly (a 400
    otherwise: "An assistant message with 'tool_calls' must be followed by tool messages responding to each
    'tool_call_id'", reported in BerriAI/litellm#10083), so the results of a turn are gathered from every
    message up to the next assistant message and placed first, in the order of the calls; then the user
    message holding the images moved out of them; then, in their original order, the system messages and user
    content that stood among the results. ``starts`` receives ``(index, len(out))`` at each assistant piece.
    """
    i, n = 0, len(pieces)
    while i < n:
        piece = pieces[i]
        if starts is not None and piece.role is Role.ASSISTANT:
            starts.append((i, len(out)))
        if piece.role is not Role.ASSISTANT or not piece.tool_call_ids:
            if piece.replies:  # results with no call before them: sent where they stand
                _emit_replies(list(piece.replies), out)
            if piece.message is not None:
                out.append(piece.message)
            i += 1
            continue
        if piece.message is not None:  # always, for an assistant
            out.append(piece.message)
        wanted = set(piece.tool_call_ids)
        answers: dict[str, _ToolReply] = {}
        others: list[_ToolReply] = []
        rest: list[dict[str, Any]] = []
        i += 1
        while i < n and pieces[i].role is not Role.ASSISTANT:
            for reply in pieces[i].replies:
                if reply.tool_call_id in wanted and reply.tool_call_id not in answers:
                    answers[reply.tool_call_id] = reply
                else:
                    others.append(reply)
            message = pieces[i].message
            if message is not None:
                rest.append(message)
            i += 1
        ordered = [answers[c] for c in piece.tool_call_ids if c in answers]
        _emit_replies(ordered + others, out)
        out.extend(rest)


def _emit_replies(replies: list[_ToolReply], out: list[dict[str, Any]]) -> None:
    moved: list[dict[str, Any]] = []
    for reply in replies:
        out.append(reply.message)
        moved.extend(reply.moved)
    if moved:
        out.append({"role": "user", "content": moved})


def _convert_message(message: Message, path: str, opts: _Options) -> _Piece:
    refuse_unwritable_message(message, path, "OpenAI Chat Completions")
    role = message.role
    if role is Role.ASSISTANT:
        return _convert_assistant(message, path, opts)
    if role is Role.USER:
        return _convert_user(message, path, opts)
    return _convert_system(message, path, opts)


def _convert_system(message: Message, path: str, opts: _Options) -> _Piece:
    texts: list[str] = []
    for pi, part in enumerate(message.parts):
        if isinstance(part, TextPart):
            texts.append(part.text)
        elif not isinstance(part, ThinkingPart):  # thinking is never sent (the replay policy)
            raise _unsupported(part, f"{path}.parts[{pi}]", "a system message")
    text = "".join(texts)
    # An empty system message says nothing; it is left out rather than sent as "".
    return _Piece(Role.SYSTEM, {"role": opts.system_role, "content": text} if text else None)


def _convert_user(message: Message, path: str, opts: _Options) -> _Piece:
    content: list[dict[str, Any]] = []
    replies: list[_ToolReply] = []
    for pi, part in enumerate(message.parts):
        ppath = f"{path}.parts[{pi}]"
        if isinstance(part, TextPart):
            if part.text:
                content.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            content.append(_image_url(part, opts))
        elif isinstance(part, ToolResultPart):
            replies.append(_tool_reply(part, ppath, opts))
        elif not isinstance(part, ThinkingPart):
            raise _unsupported(part, ppath, "a user message")
    if not content and replies:
        return _Piece(Role.USER, None, replies=tuple(replies))
    if len(content) == 1 and content[0]["type"] == "text":
        user: dict[str, Any] = {"role": "user", "content": content[0]["text"]}
    else:
        user = {"role": "user", "content": content or ""}
    return _Piece(Role.USER, user, replies=tuple(replies))


def _convert_assistant(message: Message, path: str, opts: _Options) -> _Piece:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for pi, part in enumerate(message.parts):
        ppath = f"{path}.parts[{pi}]"
        if isinstance(part, TextPart):
            texts.append(part.text)
        elif isinstance(part, ToolCallPart):
            calls.append(
                {
                    "id": rewrite_tool_id(part.id, max_len=opts.tool_call_id_max_length),
                    "type": "function",
                    "function": {"name": part.name, "arguments": _arguments(part.input, f"{ppath}.input")},
                }
            )
        elif isinstance(part, ThinkingPart):
            # The replay policy: only reasoning a compatible server minted, and only when asked for.
            if opts.replay_reasoning_content and part.provider == COMPATIBLE_REASONING:
                reasoning.append(part.text)
        elif isinstance(part, ServerToolCallPart):
            from loopctl.providers.native import call_note

            texts.append(call_note(part))  # Chat Completions runs no tools itself: what another API ran, as text
        elif isinstance(part, ServerToolResultPart):
            from loopctl.providers.native import result_note

            texts.append(result_note(part))
        elif not isinstance(part, CompactionPart):  # another API's compaction is never sent
            raise _unsupported(part, ppath, "an assistant message")
    # Consecutive text parts are one logical stream (``Message.text_content``); one string suits every
    # compatible server. A turn that only calls tools has content null, not "".
    text = "".join(texts)
    assistant: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if reasoning:
        assistant["reasoning_content"] = "".join(reasoning)
    if calls:
        assistant["tool_calls"] = calls
    return _Piece(Role.ASSISTANT, assistant, tool_call_ids=tuple(c["id"] for c in calls))


def _tool_reply(part: ToolResultPart, path: str, opts: _Options) -> _ToolReply:
    call_id = rewrite_tool_id(part.call_id, max_len=opts.tool_call_id_max_length)
    output = part.output
    root = output.root
    images: tuple[ImagePart, ...] = ()
    if isinstance(root, str):  # the text form (``output.parts`` would make a TextPart of it, validated again)
        text = root
    else:
        for oi, sub in enumerate(root):
            if not isinstance(sub, (TextPart, ImagePart)):
                raise _unsupported(sub, f"{path}.output[{oi}]", "a tool result")
        text = str(output)
        images = output.images()
    if part.failed():
        text = TOOL_ERROR_MARKER + text
    moved: tuple[dict[str, Any], ...] = ()
    if images:
        note = (
            "[the image of this result follows in the next user message]"
            if len(images) == 1
            else f"[the {len(images)} images of this result follow in the next user message]"
        )
        text = f"{text}\n{note}" if text else note
        label = {"type": "text", "text": f"[images returned by tool call {call_id}]"}
        moved = (label, *(_image_url(image, opts) for image in images))
    return _ToolReply(call_id, {"role": "tool", "tool_call_id": call_id, "content": text}, moved)


def _image_url(part: ImagePart, opts: _Options) -> dict[str, Any]:
    source = part.source
    image_url: dict[str, Any] = {"url": f"data:{source.media_type};base64,{source.data}"}
    if opts.image_detail is not None:
        image_url["detail"] = opts.image_detail
    return {"type": "image_url", "image_url": image_url}


_ARGUMENTS = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
"""What ``json.dumps(value, ensure_ascii=False, allow_nan=False)`` writes with, made once (``dumps`` makes an
encoder on every call given any option)."""


def _arguments(value: Any, path: str) -> str:
    # Python's default separators (", ", ": ") are the spacing OpenAI's models write, so a replayed call
    # reads as the model wrote it (the recorded follow-ups match byte for byte).
    try:
        return _ARGUMENTS.encode(value)
    except (TypeError, ValueError) as exc:
        raise UnsupportedContent(f"{path}: tool-call input is not a JSON value ({exc})") from None


def _unsupported(part: MessagePart, path: str, where: str) -> UnsupportedContent:
    kind = getattr(part, "type", None) or type(part).__name__
    if kind in ("text", "image", "tool_call", "tool_result", "thinking"):
        return UnsupportedContent(f"{path}: a {kind!r} part cannot be sent in {where} to OpenAI Chat Completions")
    return UnsupportedContent(f"{path}: unknown part type {kind!r}; this release cannot convert it")


def _tool(tool: ToolSchema, path: str, strict: bool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    if strict:
        function["parameters"] = strict_schema(tool.input_schema, path=f"{path}.input_schema")
        function["strict"] = True
    else:
        function["parameters"] = _plain(tool.input_schema)
    return {"type": "function", "function": function}


def _tool_choice(choice: ToolChoice) -> Any:
    if isinstance(choice, ForceTool):
        return {"type": "function", "function": {"name": choice.name}}
    if choice not in ("auto", "none", "required"):
        raise ValueError(f"tool_choice must be 'auto', 'none', 'required' or ForceTool, not {choice!r}")
    return choice


# --- reading replies ---------------------------------------------------------------------------------------


def parse_response(body: Mapping[str, Any]) -> ModelResponse:
    """A non-streamed reply (a ``chat.completion`` object) as a :class:`~loopctl.response.ModelResponse`.

    Reads ``choices[0]``: ``reasoning_content`` / ``reasoning`` (compatible servers) into a ``ThinkingPart``
    with ``provider="openai-compatible"``; ``content`` (a non-empty string) and ``refusal`` into text parts;
    ``tool_calls`` (and the legacy ``function_call``) into ``ToolCallPart``s, arguments parsed (``""`` reads as
    ``{}``; text that is not JSON gives ``input={}`` and an ``InvalidToolCall``). Raises the typed error of an
    error body, and :class:`~loopctl.errors.ProviderProtocolError` for a reply without choices, a tool call of
    an unknown type or audio output.
    """
    if not isinstance(body, Mapping):
        raise ProviderProtocolError(
            f"expected a JSON object as the reply, got {type(body).__name__}", provider=PROVIDER
        )
    if _is_error_body(body):
        raise _error_from_body(body, status=None)
    choice = _first_choice(body.get("choices"))
    if choice is None:
        raise ProviderProtocolError("the reply has no choices", provider=PROVIDER, body=dict(body))
    message = choice.get("message")
    if not isinstance(message, Mapping):
        raise ProviderProtocolError("choices[0] has no message", provider=PROVIDER, body=dict(body))
    response_id = _str(body.get("id"))
    parts: list[MessagePart] = []
    invalid: list[InvalidToolCall] = []
    reasoning = _reasoning_of(message)
    if reasoning:
        parts.append(ThinkingPart(text=reasoning, provider=COMPATIBLE_REASONING))
    content = message.get("content")
    if isinstance(content, str):
        if content:
            parts.append(TextPart(text=content))
    elif isinstance(content, list):  # compatible servers' content parts (Mistral: thinking, then text)
        for kind, text in _content_chunks(content):
            if kind == "thinking":
                parts.append(ThinkingPart(text=text, provider=COMPATIBLE_REASONING))
            else:
                parts.append(TextPart(text=text))
    elif content is not None:
        raise ProviderProtocolError("message.content is neither a string nor null", provider=PROVIDER)
    refusal = _str(message.get("refusal"))
    if refusal:
        parts.append(TextPart(text=refusal))
    if not is_zero_valued(message.get("audio")):
        raise ProviderProtocolError("the reply holds audio, which loopctl does not request", provider=PROVIDER)
    calls = message.get("tool_calls") or []
    legacy = message.get("function_call")
    if isinstance(legacy, Mapping) and not is_zero_valued(legacy):
        calls = [*calls, {"type": "function", "function": legacy}]
    for position, call in enumerate(calls):
        if not isinstance(call, Mapping):
            raise ProviderProtocolError("a tool call is not an object", provider=PROVIDER)
        if is_zero_valued(call):
            continue  # a zero-valued placeholder, not a call
        function = _function_of(call)
        call_id = _str(call.get("id")) or _derived_id(response_id, position)
        name = _str(function.get("name")) or ""
        arguments = function.get("arguments")
        text = arguments if isinstance(arguments, str) else "" if arguments is None else dumps_exact(arguments)
        value, error = parse_arguments(text)
        if error is not None:
            invalid.append(InvalidToolCall(call_id, name, text, error))
        parts.append(ToolCallPart(id=call_id, name=name, input=value))
    raw = _str(choice.get("finish_reason"))
    has_calls = any(isinstance(p, ToolCallPart) for p in parts)
    return ModelResponse(
        message=Message(role=Role.ASSISTANT, parts=tuple(parts)),
        usage=_usage(body.get("usage")),
        stop_reason=_stop_reason(raw, has_calls=has_calls, refused=bool(refusal)),
        raw_stop_reason=raw,
        model=_str(body.get("model")),
        id=response_id,
        invalid_tool_calls=tuple(invalid),
    )


def _content_chunks(content: list[Any]) -> list[tuple[Literal["text", "thinking"], str]]:
    """``(kind, text)`` of each content part a compatible server sent as a list, in order, empty ones left out.

    ``{"type": "text", "text"}`` is text. Mistral's reasoning models send their reasoning as ``{"type":
    "thinking", "thinking": [{"type": "text", "text": "..."}], "closed": true}`` (Mistral API ``ThinkChunk``,
    whose ``thinking`` holds text and reference chunks; docs.mistral.ai/capabilities/reasoning), whole in a
    reply and in pieces in a stream's ``delta.content``; its text parts join into one thinking text (a plain
    string ``thinking`` is read too). ``{"type": "reference"}`` chunks (the ids of documents a tool found)
    carry no text and are skipped. Any other part type raises :class:`~loopctl.errors.ProviderProtocolError`.
    """
    out: list[tuple[Literal["text", "thinking"], str]] = []
    for item in content:
        kind = item.get("type") if isinstance(item, Mapping) else type(item).__name__
        if kind == "text":
            text = item.get("text")
            if not isinstance(text, str):
                raise ProviderProtocolError("a text content part has no text string", provider=PROVIDER)
            if text:
                out.append(("text", text))
        elif kind == "thinking":
            inner = item.get("thinking")
            if isinstance(inner, str):
                thought = inner
            elif isinstance(inner, list):
                thought = "".join(
                    c["text"]
                    for c in inner
                    if isinstance(c, Mapping) and c.get("type", "text") == "text" and isinstance(c.get("text"), str)
                )
            else:
                raise ProviderProtocolError("a thinking content part has no thinking text", provider=PROVIDER)
            if thought:
                out.append(("thinking", thought))
        elif kind != "reference":
            raise ProviderProtocolError(f"unknown content part type {kind!r} in the reply", provider=PROVIDER)
    return out


def _is_object(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """Whether ``value`` is a JSON object: a ``dict`` (what JSON decodes to) tested first, then any mapping (an
    ABC check, several times the cost). The stream decoder's checks of each event write the same test inline."""
    return type(value) is dict or isinstance(value, Mapping)


def _first_choice(choices: Any) -> Mapping[str, Any] | None:
    """The choice with ``index`` 0 (loopctl asks for one completion; ``n > 1`` extras are ignored)."""
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if (type(choice) is dict or isinstance(choice, Mapping)) and choice.get("index", 0) == 0:
            return choice
    return None


def _reasoning_of(fields: Mapping[str, Any]) -> str | None:
    # DeepSeek and older vLLM name it reasoning_content; OpenRouter and vLLM >= 0.11 name it reasoning.
    value = fields.get("reasoning_content")
    if not isinstance(value, str):
        value = fields.get("reasoning")
    return value if isinstance(value, str) else None


def _has_content(call: Any) -> bool:
    """Whether a ``tool_calls`` entry of a stream delta is a call's content: ``isinstance(call, Mapping) and not
    is_zero_valued(call)``, read off the entry's ``id`` or ``function.arguments`` when either is a non-empty
    string (a value that is not zero-valued, so neither is the entry), as nearly every delta carries one."""
    if type(call) is dict:
        call_id = call.get("id")
        if type(call_id) is str and call_id:
            return True
        function = call.get("function")
        if type(function) is dict:
            arguments = function.get("arguments")
            if type(arguments) is str and arguments:
                return True
    return isinstance(call, Mapping) and not is_zero_valued(call)


def _function_of(call: Mapping[str, Any]) -> Mapping[str, Any]:
    kind = call.get("type") or "function"  # absent, null or "" (zero-valued): a function call
    if kind != "function":
        raise ProviderProtocolError(f"unknown tool call type {kind!r} in the reply", provider=PROVIDER)
    function = call.get("function") or {}
    if type(function) is not dict and not isinstance(function, Mapping):
        raise ProviderProtocolError("tool_calls[].function is not an object", provider=PROVIDER)
    return function


def _derived_id(response_id: str | None, position: int) -> str:
    """An id for a call that arrived without one (legacy ``function_call``, some compatible servers): unique
    per response and deterministic, so a result pairs with it."""
    return f"call_{response_id or 'chatcmpl'}_{position}"


def _str(value: Any) -> str | None:
    """A string field of a reply; ``""`` (a zero-valued optional field) reads as absent."""
    return value if isinstance(value, str) and value else None


def _count(value: Any) -> int | None:
    """A token count as reported: a whole number, or ``None`` when it is missing (or not a number)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _usage(usage: Any) -> Usage:
    """OpenAI's ``usage`` as a :class:`~loopctl.response.Usage`; a count the reply does not carry is ``None``
    (not reported: an OpenAI-compatible server may send no ``usage``, or no ``*_details``).

    ``prompt_tokens`` already includes the cached ones (``prompt_tokens_details.cached_tokens``), and
    ``completion_tokens`` the reasoning ones (``completion_tokens_details.reasoning_tokens``); DeepSeek's
    ``prompt_cache_hit_tokens`` stands in when ``cached_tokens`` is absent. Chat reports no cache writes.
    """
    if not _is_object(usage):
        return Usage()
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    cached = _count(prompt_details.get("cached_tokens")) if _is_object(prompt_details) else None
    if not cached:
        cached = _count(usage.get("prompt_cache_hit_tokens")) or cached
    reasoning = _count(completion_details.get("reasoning_tokens")) if _is_object(completion_details) else None
    return Usage(
        input_tokens=_count(usage.get("prompt_tokens")),
        output_tokens=_count(usage.get("completion_tokens")),
        cache_read_tokens=cached,
        reasoning_tokens=reasoning,
    )


def _stop_reason(raw: str | None, *, has_calls: bool, refused: bool) -> StopReason:
    """``finish_reason`` as a :class:`~loopctl.response.StopReason` (values from the SDK's
    ``ChatCompletionChunk``: stop, length, tool_calls, content_filter, function_call).

    ``stop`` covers both a natural end and a matched stop sequence (Chat does not tell them apart), so it reads
    as ``end_turn``; with tool calls in the reply it reads as ``tool_call`` (compatible servers say ``stop``
    there). A ``refusal`` in the reply reads as ``refusal``. Unknown values read as ``end_turn``, or
    ``tool_call`` when the reply calls tools.
    """
    if raw in ("tool_calls", "function_call"):
        return StopReason.TOOL_CALL
    if raw == "length":
        return StopReason.MAX_TOKENS
    if raw == "content_filter" or refused:
        return StopReason.REFUSAL
    if has_calls:
        return StopReason.TOOL_CALL
    return StopReason.END_TURN


# --- streams -----------------------------------------------------------------------------------------------


_STARTED_CALL_FIELDS = ("id", "name", "input")


class StreamDecoder(SSEStreamDecoder):
    """Decodes a Chat Completions SSE stream (``chat.completion.chunk`` objects) into neutral stream events.

    Stream rules (openai SDK ``ChatCompletionChunk`` and ``ChatCompletionStreamOptionsParam``; the recorded
    streams): deltas of ``choices[0]`` carry ``content``, ``refusal``, ``tool_calls`` (keyed by ``index``: the
    first chunk of a call has its ``id``, ``name`` and ``"arguments": ""``, later ones only argument
    fragments; parallel calls have distinct indices) and, from compatible servers, ``reasoning_content`` /
    ``reasoning``. With ``include_usage`` a final chunk with ``"choices": []`` carries the usage. ``data:
    [DONE]`` (any spacing) ends the stream and is its final event: a stream cut before it raises
    :class:`~loopctl.errors.StreamTruncated` from :meth:`finish`, even after a ``finish_reason``. A chunk
    holding an ``error`` object raises the typed error from :meth:`feed`. ``obfuscation`` and other unknown
    fields are ignored; so are events named other than ``message`` / ``error``.

    Parts are started in the order their content arrives; a change of kind (reasoning, text, a new tool
    call) starts a new part. A call that arrives without an ``id`` gets ``call_<response id>_<position>``;
    a call that reuses a known ``index`` with a new ``id`` is a new call (some servers send every call at
    index 0).
    """

    provider = PROVIDER

    def __init__(self) -> None:
        super().__init__()
        self._started = False
        self._done = False
        self._next = 0
        self._open: tuple[str, int] | None = None  # kind and index of the part receiving deltas
        self._calls_by_index: dict[int, int] = {}  # wire tool-call index -> part index
        self._call_ids: dict[str, int] = {}  # tool-call id -> part index
        self._last_call: int | None = None
        self._response_id: str | None = None
        self._finish_reason: str | None = None
        self._refused = False

    def on_event(self, event: ServerSentEvent) -> list[StreamEvent]:
        if self._done or event.event not in ("message", "error"):
            return []
        data = event.data.strip()
        if not data:
            return []
        if data == "[DONE]":
            self._done = True
            stop = _stop_reason(self._finish_reason, has_calls=bool(self._call_ids), refused=self._refused)
            return [ResponseFinished(stop, self._finish_reason)]
        try:
            # Arguments are JSON text (parsed exactly when the call ends), but compatible servers may send them
            # as an object: events with calls are read exactly, the others by orjson alone.
            chunk = loads_exact(data) if '"tool_calls"' in data or '"function_call"' in data else orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ProviderProtocolError(f"a stream event is not JSON: {data[:200]!r}", provider=PROVIDER) from None
        if not isinstance(chunk, dict):
            raise ProviderProtocolError("a stream event is not a JSON object", provider=PROVIDER)
        if event.event == "error" or _is_error_body(chunk):
            raise _error_from_body(chunk, status=None)
        out: list[StreamEvent] = []
        if not self._started:
            self._started = True
            self._response_id = _str(chunk.get("id"))
            out.append(ResponseStarted(id=self._response_id, model=_str(chunk.get("model"))))
        choice = _first_choice(chunk.get("choices"))
        if choice is not None:
            delta = choice.get("delta")
            if type(delta) is dict or isinstance(delta, Mapping):
                self._delta(delta, out)
            finish = _str(choice.get("finish_reason"))
            if finish:
                self._finish_reason = finish
        usage = chunk.get("usage")
        if type(usage) is dict or isinstance(usage, Mapping):
            out.append(UsageReported(_usage(usage)))
        return out

    def error_body(self, body: Any) -> ProviderError:
        if isinstance(body, Mapping) and _is_error_body(body):
            return _error_from_body(body, status=None)
        return ProviderProtocolError("the stream body is JSON but not an error object", provider=PROVIDER, body=body)

    def _delta(self, delta: Mapping[str, Any], out: list[StreamEvent]) -> None:
        reasoning = _reasoning_of(delta)
        if reasoning:
            index = self._part("thinking", out)
            out.append(ThinkingDelta(index, reasoning))
        for key in ("content", "refusal"):
            text = delta.get(key)
            if isinstance(text, str) and text:
                self._refused = self._refused or key == "refusal"
                out.append(TextDelta(self._part("text", out), text))
            elif key == "content" and isinstance(text, list):  # Mistral: thinking chunks, then text chunks
                for kind, piece in _content_chunks(text):
                    if kind == "thinking":
                        out.append(ThinkingDelta(self._part("thinking", out), piece))
                    else:
                        out.append(TextDelta(self._part("text", out), piece))
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                if _has_content(call):
                    self._tool_call(call, out)
        legacy = delta.get("function_call")
        if legacy is not None and isinstance(legacy, Mapping) and not is_zero_valued(legacy):
            self._tool_call({"index": -1, "type": "function", "function": legacy}, out)

    def _part(self, kind: Literal["text", "thinking"], out: list[StreamEvent]) -> int:
        if self._open is not None and self._open[0] == kind:
            return self._open[1]
        part: MessagePart = (
            TextPart(text="") if kind == "text" else ThinkingPart(text="", provider=COMPATIBLE_REASONING)
        )
        return self._start(kind, part, out)

    def _start(self, kind: str, part: MessagePart, out: list[StreamEvent]) -> int:
        index = self._next
        self._next += 1
        self._open = (kind, index)
        out.append(PartStarted(index, part))
        return index

    def _tool_call(self, call: Mapping[str, Any], out: list[StreamEvent]) -> None:
        wire = call.get("index")
        wire_index = wire if isinstance(wire, int) and not isinstance(wire, bool) else None
        call_id = _str(call.get("id")) or None
        function = _function_of(call)
        index: int | None
        if call_id is not None:
            index = self._call_ids.get(call_id)  # a new id is a new call, even at a known index
        elif wire_index is not None:
            index = self._calls_by_index.get(wire_index)
        else:
            index = self._last_call
        if index is None:
            call_id = call_id or _derived_id(self._response_id, len(self._call_ids))
            name = _str(function.get("name")) or ""
            # ``ToolCallPart(id=call_id, name=name, input={})`` unvalidated: both strings were read by orjson,
            # which refuses a lone surrogate (a call that gets no arguments finishes as this part).
            part = assemble(
                ToolCallPart,
                set_fields=_STARTED_CALL_FIELDS,
                type="tool_call",
                id=call_id,
                name=name,
                input={},
                item_id=None,
                provider=None,
            )
            index = self._start("tool_call", part, out)
            self._call_ids[call_id] = index
        if wire_index is not None:
            self._calls_by_index[wire_index] = index
        self._last_call = index
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            if arguments:
                out.append(ToolCallDelta(index, arguments))
        elif arguments is not None:  # a server that sends the arguments as an object
            out.append(ToolCallDelta(index, dumps_exact(arguments)))


def parse_stream(chunks: Iterable[bytes]) -> ModelResponse:
    """Decode a whole stream (bytes split anywhere) into a :class:`~loopctl.response.ModelResponse`; raises as
    :meth:`StreamDecoder.finish` does.

    ``chunks`` are the stream's bytes.
    """
    return StreamDecoder.parse(chunks)


# --- errors ------------------------------------------------------------------------------------------------

# Compiled when first used (the re module's cache): only an error's message is read with them.
_RETRY_IN = r"try again in ((?:\d+(?:\.\d+)?(?:ms|h|m|s))+)"
_DURATION = r"(\d+(?:\.\d+)?)(ms|h|m|s)"
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_QUOTA_CODES = frozenset(
    {
        "insufficient_quota",
        "credit_balance_exhausted",
        "organization_spend_limit_exceeded",
        "project_spend_limit_exceeded",
        "organization_usage_limit_exceeded",
    }
)


def error_from_http(
    status: int,
    body: bytes | str | Mapping[str, Any] | None,
    headers: Mapping[str, str] | None = None,
    *,
    now: float | None = None,
) -> ProviderError:
    """The typed error for a non-2xx reply: ``{"error": {"message", "type", "param", "code"}}`` (OpenAI), or the
    shapes compatible servers use (``{"error": "text"}``, a top-level ``message``).

    Mapping (via :func:`~loopctl.providers._common.classify_http_error`, the ``code`` taking precedence over
    the ``type``): 429 ``rate_limit_exceeded`` -> ``RateLimited``; 429 ``insufficient_quota`` (and the billing
    codes under that type) -> ``RateLimited`` with ``retryable`` false, since waiting does not refill a
    quota; 400 ``context_length_exceeded`` -> ``ContextOverflow``; other 400s -> ``InvalidRequest``; 401/403 ->
    ``AuthenticationError``; 404 ``model_not_found`` -> ``ModelNotFound``; 503 -> ``Overloaded``; other 5xx
    -> ``ServerError``. ``retry_after`` (seconds) comes from the ``retry-after-ms`` / ``retry-after`` headers,
    else from the message's "Please try again in 1.5s".

    ``now`` is the current Unix time in seconds: with it, a ``Retry-After`` given as an HTTP-date (RFC 9110
    section 10.2.3, ``Wed, 21 Oct 2015 07:28:00 GMT``) becomes the seconds from ``now`` to that date (0 for a
    date past); the codec reads no clock, so without ``now`` only a number of seconds is read. The clients
    pass ``time.time()``.

    ``status`` is the HTTP status and ``body`` the error body as received (bytes, text or parsed JSON).
    """
    parsed = _parse_body(body)
    message, kind, code = _error_fields(parsed)
    retry_after = parse_retry_after(headers, now=now)
    if retry_after is None:
        retry_after = _retry_after_in(message)
    error = classify_http_error(
        PROVIDER, status, message=message, error_type=code or kind, body=parsed, retry_after=retry_after
    )
    if isinstance(error, RateLimited) and (kind in _QUOTA_CODES or code in _QUOTA_CODES):
        error.retryable = False
    return error


def _parse_body(body: bytes | str | Mapping[str, Any] | None) -> Any:
    if isinstance(body, (bytes, str)):
        try:
            return loads_exact(body)
        except orjson.JSONDecodeError:
            return body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    return body


def _error_fields(body: Any) -> tuple[str | None, str | None, str | None]:
    """``(message, type, code)`` of an error body; each ``None`` when absent."""
    if isinstance(body, str):
        return (body.strip() or None), None, None
    if not isinstance(body, Mapping):
        return None, None, None
    error = body.get("error")
    if isinstance(error, str):
        return error, None, None
    if not isinstance(error, Mapping):
        error = body  # vLLM and FastAPI servers put the fields at the top level
    message = _str(error.get("message")) or _str(error.get("detail"))
    return message, _str(error.get("type")), _str(error.get("code"))


def _is_error_body(body: Mapping[str, Any]) -> bool:
    return not is_zero_valued(body.get("error")) or body.get("object") == "error"


def _error_from_body(body: Mapping[str, Any], *, status: int | None) -> ProviderError:
    """The typed error for an error object met outside an HTTP error status (a stream chunk, or a 200 body);
    classified by its ``code`` / ``type`` alone: a numeric ``code`` is the HTTP status it stands for
    (OpenRouter, :func:`~loopctl.providers._common.http_status_code`), a named one the OpenAI kind. An
    unknown kind is a ``ServerError`` (retryable): mid-stream failures are the server's (``"type":
    "server_error"`` in OpenAI's)."""
    message, kind, code = _error_fields(body)
    names = {(kind or "").lower(), (code or "").lower()}
    numeric = http_status_code(body.get("error"))
    if numeric is not None:  # OpenRouter: {"error": {"code": 400, "message": "Token limit reached"}}
        found = error_from_status_code(
            PROVIDER, numeric, message=message, error_type=kind, body=dict(body), retry_after=_retry_after_in(message)
        )
        if isinstance(found, RateLimited) and names & _QUOTA_CODES:
            found.retryable = False
        return found
    text = message or "an error object in the reply"
    kw: dict[str, Any] = {"provider": PROVIDER, "status": status, "provider_message": message, "body": dict(body)}
    if names & _QUOTA_CODES:
        error: ProviderError = RateLimited(text, retry_after=None, **kw)
        error.retryable = False
        return error
    if names & {"rate_limit_exceeded", "rate_limit_error", "tokens", "requests"}:
        return RateLimited(text, retry_after=_retry_after_in(message), **kw)
    if names & {"overloaded", "overloaded_error", "engine_overloaded"}:
        return Overloaded(text, retry_after=_retry_after_in(message), **kw)
    if is_context_overflow(message, code):
        return ContextOverflow(text, **kw)
    if names & {"invalid_request_error", "badrequesterror"}:
        return InvalidRequest(text, **kw)
    return ServerError(text, **kw)


def _retry_after_in(message: str | None) -> float | None:
    """Seconds from OpenAI's "Please try again in 20s" / "in 1m30s" / "in 6ms", or ``None``."""
    if not message:
        return None
    found = re.search(_RETRY_IN, message, re.IGNORECASE)
    if found is None:
        return None
    return sum(float(n) * _SECONDS[unit.lower()] for n, unit in re.findall(_DURATION, found.group(1), re.IGNORECASE))


# --- NativeOutput: the response format ---------------------------------------------------------------------


def response_format(output: OutputFormat) -> dict[str, Any]:
    """``response_format`` for ``output`` (Structured Outputs,
    https://platform.openai.com/docs/guides/structured-outputs): ``{"type": "json_schema", "json_schema":
    {"name", "description", "schema", "strict"}}``, the schema converted by :func:`strict_schema` when
    ``strict`` (raising :class:`~loopctl.errors.UnsupportedContent` for what strict mode cannot express;
    :func:`loopctl.output.plan` sends such a type non-strict, with a warning)."""
    schema = strict_schema(output.schema, path="output_format.schema") if output.strict else _plain(output.schema)
    spec: dict[str, Any] = {"name": output.name}
    if output.description:
        spec["description"] = output.description
    spec["schema"] = schema
    spec["strict"] = output.strict
    return {"type": "json_schema", "json_schema": spec}
