"""The OpenAI Responses codec (``POST /v1/responses``): messages to a request body, replies back to messages.

Pure: no I/O, no clock. The client sends what :func:`build_request` returns and feeds the reply to
:func:`parse_response`, :class:`StreamDecoder` or :func:`error_from_http`.

How each part rides (``docs/providers/openai_responses.md`` has the full table and sources):

- user text and images: one input message (``{"role": "user", "content": ...}``), images as ``input_image``
  data URLs;
- tool results: one ``function_call_output`` item each (``call_id``, ``output``; a failed one's text starts
  with ``[tool error]``, as on Chat: the item has no error flag); a multipart result keeps
  its images in place, as ``input_image`` items of ``output`` (openai-python
  ``types/responses/response_input_item_param.py``, ``FunctionCallOutput.output: str |
  ResponseFunctionCallOutputItemListParam``);
- tool calls: ``function_call`` items (``call_id``, ``name``, ``arguments`` as a JSON string, and the item id
  ``fc_…`` from :attr:`ToolCallPart.item_id <loopctl.message.ToolCallPart.item_id>`);
- assistant text with an item id: an output ``message`` item (``id`` ``msg_…``, ``output_text`` content);
  without one, the easy form ``{"role": "assistant", "content": text}``;
- thinking: ``reasoning`` items (``id`` ``rs_…``, ``summary``, ``encrypted_content``), one
  :class:`~loopctl.message.ThinkingPart` per summary part, replayed under the pairing rule below;
- system: ``Role.SYSTEM`` messages stay inline where they stand as ``developer`` messages; the ``system``
  argument comes first, inline, or as top-level ``instructions`` on request.

Reasoning pairing rule. The API refuses a reasoning item sent without the item that followed it in the reply
(``Item 'rs_…' of type 'reasoning' was provided without its required following item``, recorded in
``responses-error-400-reasoning-without-following-item``), and an item sent with its id but without its
reasoning item (``Item 'fc_…' of type 'function_call' was provided without its required 'reasoning' item``,
e.g. cline/cline#12242, openai/openai-python#3009). So a reasoning item is replayed only when the part right
after its thinking parts, in the same message, is a text or tool-call part carrying an ``item_id`` (the
original following item, sent with that id). When a reasoning item of this provider is left out, the text and
tool calls after it, up to the next replayed reasoning item, are sent without their item ids (id-less items
are always accepted: they are new input, not references to stored output).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import orjson

from loopctl.compact.provider import OpenAICompaction, provider_window
from loopctl.errors import (
    Overloaded,
    ProviderError,
    ProviderProtocolError,
    RateLimited,
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
from loopctl.message.model import _dumps_bytes
from loopctl.providers._common import (
    TOOL_ERROR_MARKER,
    check_pairing,
    classify_http_error,
    ends_on_an_empty_prompt,
    http_status_code,
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
from loopctl.providers.base import held_messages as _held
from loopctl.providers.cache import PromptCacheRetention, openai_cache_fields
from loopctl.providers.native import (
    CodeExecution,
    FileSearch,
    ImageGeneration,
    NativeTool,
    RemoteMCP,
    ToolSearch,
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
    "PROVIDER",
    "TOOL_ERROR_MARKER",
    "StreamDecoder",
    "build_compact_request",
    "build_request",
    "build_request_from",
    "encode_request",
    "encode_request_from",
    "error_from_http",
    "parse_compacted",
    "parse_response",
    "parse_stream",
    "strict_schema",
    "text_format",
]

_API = "OpenAI Responses"

PROVIDER = "openai"
"""The name in errors and in :attr:`ThinkingPart.provider <loopctl.message.ThinkingPart.provider>`."""

ReasoningSummary = Literal["auto", "concise", "detailed"]
SystemRole = Literal["developer", "system"]

# The Responses API refuses a ``call_id`` longer than 64 characters (``string_above_max_length``, e.g.
# AnswerDotAI/fastllm#45); ids other providers minted are rewritten to 64 safe characters, identically on the
# call and on its result.
_MAX_CALL_ID = 64

_ENCRYPTED_REASONING = "reasoning.encrypted_content"


# --- request -------------------------------------------------------------------------------------------------


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
    system_role: SystemRole = "developer",
    system_as_instructions: bool = False,
    reasoning_summary: ReasoningSummary | None = None,
    encrypted_reasoning: bool | None = None,
    store: bool | None = None,
    strict_tools: bool = False,
    output_format: OutputFormat | None = None,
    native_tools: Sequence[NativeTool] = (),
    prompt_cache_key: str | None = None,
    prompt_cache_retention: PromptCacheRetention | None = None,
    prompt_cache_options: Mapping[str, Any] | None = None,
    previous_response_id: str | None = None,
    conversation: str | None = None,
    continue_from: int = 0,
    context_management: object = None,
) -> dict[str, Any]:
    """The JSON body of a ``POST /v1/responses`` request for ``messages``.

    Common options: ``max_tokens`` (tokens) -> ``max_output_tokens``; ``temperature`` as is; ``tool_choice``
    ``"auto"``/``"none"``/``"required"`` as is, :class:`~loopctl.tool.ForceTool` -> ``{"type": "function",
    "name": ...}``; ``reasoning_effort`` -> ``reasoning.effort``; ``stream=True`` -> ``"stream": true``;
    ``extra`` is merged into the body last (it wins). ``stop`` is refused: the Responses API has no stop
    sequences (no ``stop`` in openai-python ``ResponseCreateParams``), so a non-empty ``stop`` raises
    :class:`~loopctl.errors.UnsupportedContent` rather than being dropped silently.

    Responses options:

    - ``system_role``: the role of inline system text, ``"developer"`` (default; what OpenAI's reasoning
      models read system text as) or ``"system"``;
    - ``system_as_instructions``: send ``system`` as top-level ``instructions`` instead of a first inline
      message (``Role.SYSTEM`` messages stay inline either way);
    - ``reasoning_summary``: ``reasoning.summary`` (``"auto"``, ``"concise"``, ``"detailed"``); unset by
      default because an unverified organisation gets a 400 for it ("Your organization must be verified to
      generate reasoning summaries", continuedev/continue#9283);
    - ``encrypted_reasoning``: ask for ``include: ["reasoning.encrypted_content"]``, the payload that lets a
      reasoning item be replayed without server-side storage. Default: on when ``reasoning_effort`` is set
      (the API refuses it for non-reasoning models: "Encrypted content is not supported with this model",
      pydantic/pydantic-ai#2865);
    - ``store``: sent as ``store`` when set. With ``store=False`` nothing is kept server-side, so a reasoning
      part without encrypted content cannot be resolved by its id and is left out;
    - ``prompt_cache_key``: sent as is, or ``"auto"`` for a key stable per conversation
      (:func:`loopctl.providers.cache.prompt_cache_key`); ``prompt_cache_retention`` (``"in_memory"`` or
      ``"24h"``) and ``prompt_cache_options`` as given (platform.openai.com/docs/guides/prompt-caching). The
      :class:`~loopctl.transport.OpenAIResponsesClient` sends ``"auto"`` to OpenAI's own API by default;
    - ``previous_response_id`` (a stored response, or one of this WebSocket connection) or ``conversation``
      (a Conversations API id) with ``continue_from``: the server already holds ``messages[:continue_from]``
      (the response chain's input and output), so only the input items of ``messages[continue_from:]`` are
      sent, with that field; the inline system message goes with the first request only (``instructions``,
      which a chain does not carry over, are sent every time). The two ids cannot be sent together
      (platform.openai.com/docs/api-reference/responses/create);
    - ``context_management``: an :class:`~loopctl.compact.provider.OpenAICompaction`, sent as
      ``context_management: [{"type": "compaction", "compact_threshold": N}]`` (another provider's strategy
      raises :class:`~loopctl.errors.UnsupportedContent`). A conversation holding an OpenAI compaction item
      is sent from the latest one on, system messages before it kept: "you can drop items that came before the
      most recent compaction item" (developers.openai.com/api/docs/guides/compaction), except the user
      messages that open a window the compact endpoint returned ("Do not prune the compact response"); a request that
      continues server-held state is never pruned ("If you use previous_response_id chaining, do not manually
      prune");
    - ``strict_tools``: send tools with ``strict: true`` in OpenAI's strict schema dialect
      (:func:`strict_schema`); tools are sent with ``strict: false`` otherwise, because Responses treats an
      absent ``strict`` as strict.

    ``cache`` reuses each message's converted items between calls (the body is the same with or without
    it); the body shares those items, so treat it as read-only. Raises
    :class:`~loopctl.errors.UnsupportedContent` for a part this API cannot carry (a part type from a newer
    release, an image in an assistant message, a tool call outside an assistant message, a tool call or result
    that breaks the pairing rules: :func:`~loopctl.providers._common.check_pairing`...), naming its path
    (``messages[3].parts[1]``), and for a request with nothing to send.

    ``output_format`` (an :class:`~loopctl.providers.base.OutputFormat`) asks for schema-constrained output
    (``docs/output.md`` says what each API gets).

    ``native_tools``: built-in tool objects (:mod:`loopctl.providers.native`) sent in ``tools`` as the Responses
    API's built-in tools; one it has no such tool for raises :class:`~loopctl.errors.UnsupportedContent`.
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
        system_role=system_role,
        system_as_instructions=system_as_instructions,
        reasoning_summary=reasoning_summary,
        encrypted_reasoning=encrypted_reasoning,
        store=store,
        strict_tools=strict_tools,
        output_format=output_format,
        native_tools=native_tools,
        prompt_cache_key=prompt_cache_key,
        prompt_cache_retention=prompt_cache_retention,
        prompt_cache_options=prompt_cache_options,
        previous_response_id=previous_response_id,
        conversation=conversation,
        continue_from=continue_from,
        context_management=context_management,
        requests=None,
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
    incremental: when ``messages`` extend the previous request of a conversation (the same message objects
    first), the input items before its last assistant message are the bytes of that call and only the
    messages from there on are checked, converted, laid out and written (a reasoning item stays with the
    items of its own message, so no neighbour changes it). Tool schemas are converted once while the same
    objects come back. Raises what :func:`build_request` raises.
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
    system_role: SystemRole = "developer",
    system_as_instructions: bool = False,
    reasoning_summary: ReasoningSummary | None = None,
    encrypted_reasoning: bool | None = None,
    store: bool | None = None,
    strict_tools: bool = False,
    output_format: OutputFormat | None = None,
    native_tools: Sequence[NativeTool] = (),
    prompt_cache_key: str | None = None,
    prompt_cache_retention: PromptCacheRetention | None = None,
    prompt_cache_options: Mapping[str, Any] | None = None,
    previous_response_id: str | None = None,
    conversation: str | None = None,
    continue_from: int = 0,
    context_management: object = None,
) -> tuple[dict[str, Any], LaidOutPrefix | None, tuple[tuple[bytes, ...], list[dict[str, Any]]] | None]:
    """The body and, with ``requests``, the prefix to keep and the parts of the ``input`` array (see
    :func:`encode_request`; ``body["input"]`` is then :data:`~loopctl.providers.base.ITEMS_MARK`)."""
    if context_management is not None and not isinstance(context_management, OpenAICompaction):
        raise UnsupportedContent(
            f"context_management: {type(context_management).__name__} is not an OpenAI Responses strategy "
            "(OpenAICompaction; OpenAICompactEndpoint is a pass of the engine's, not a request option)"
        )
    whole = messages  # the prompt cache key stays the conversation's across a compaction
    if not continue_from:
        messages = provider_window(messages, PROVIDER, user_run=True)
    if stop:
        raise UnsupportedContent(
            f"{PROVIDER}: the Responses API has no stop sequences; `stop` ({list(stop)!r}) cannot be sent "
            "(use the Chat Completions codec, or drop `stop`)"
        )
    if requests is None:
        refuse_unwritable_options(system, tools, _API)
    else:  # the tools' strings are checked once while the same tools come back
        refuse_unwritable_options(system, (), _API)
        requests.tools(("writable", _API), tools, lambda: refuse_unwritable_options(None, tools, _API))
    options = _Options(system_role=system_role, store_off=store is False)
    # Namespaced, so one cache can serve several codecs.
    key = ("openai_responses", system_role, options.store_off)
    continued = _continuation(messages, previous_response_id, conversation, continue_from)
    if continued:
        # The server holds messages[:continue_from] (a stored response chain, or a conversation): only what
        # follows is sent, laid out on its own (the short tail needs no kept prefix).
        conversions = requests.conversions if requests is not None else cache
        requests = None
    else:
        conversions = requests.conversions if requests is not None else cache
    prefix = requests.prefix(messages, key) if requests is not None else None
    start = continue_from if continued else prefix.start if prefix is not None else 0
    held_turn = _latest_assistant(messages, continue_from) if continued else -1
    check_pairing(messages, _API, max(held_turn, 0) if continued else start)
    tail = messages[start:] if start else messages
    head: list[dict[str, Any]] = []
    if system and not system_as_instructions and not continued:
        head.append({"role": system_role, "content": system})
    items: list[dict[str, Any]] = head if requests is None else []
    calls: tuple[dict[str, Any], ...] = ()  # the items of the latest assistant message
    if held_turn >= 0:  # its results are among the new input: sent in the order of its calls
        calls = _convert_message(messages[held_turn], held_turn, options)
    outputs: list[int] = []  # where the function_call_output items answering it stand in ``items``
    starts: list[tuple[int, int]] = []  # (index in tail, position in items) of each assistant message
    for index, message in enumerate(tail, start):
        converted: tuple[dict[str, Any], ...] | None = (
            conversions.get(message, key) if conversions is not None else None
        )
        if converted is None:
            converted = _convert_message(message, index, options)
            if conversions is not None:
                conversions.put(message, converted, key)
        if message.role is Role.ASSISTANT:
            _outputs_in_call_order(items, outputs, calls)
            calls, outputs = converted, []
            starts.append((index - start, len(items)))
        else:
            outputs.extend(len(items) + k for k, item in enumerate(converted) if item.get("type") == _OUTPUT)
        items.extend(converted)
    _outputs_in_call_order(items, outputs, calls)
    if conversions is not None:
        conversions.sweep()
    ends_on_user = _is_user_item(items[-1]) if items else bool(prefix is not None and prefix.state)
    if ends_on_an_empty_prompt(messages) and not ends_on_user:
        # An empty prompt is still the user's turn: the API answers {"role": "user", "content": ""} with a
        # 200, while leaving it out would end the input on the assistant's turn (or send nothing at all).
        items.append({"role": "user", "content": ""})
    if not items and not head and (prefix is None or not prefix.count) and not (system and system_as_instructions):
        raise nothing_to_send(_API, len(messages))
    if continued and not items:
        raise UnsupportedContent(
            f"messages[{continue_from}:]: nothing new to send after the {continue_from} messages the server holds"
        )

    body: dict[str, Any] = {"model": model}
    if system and system_as_instructions:
        body["instructions"] = system
    keep: LaidOutPrefix | None = None
    parts: tuple[tuple[bytes, ...], list[dict[str, Any]]] | None = None
    if requests is None:
        body["input"] = items
    else:
        # The items before an assistant message never change when messages are added after it (its outputs
        # are ordered when the next assistant message comes): everything before the last one is kept.
        cut = next((s for s in reversed(starts) if s[0] > 0), None)
        done, rest = (items[: cut[1]], items[cut[1] :]) if cut is not None else ([], items)
        chunks = prefix.chunks if prefix is not None else ()
        written = write_items(done)
        if written:
            chunks = (*chunks, written)
        body["input"] = ITEMS_MARK
        parts = ((write_items(head), *chunks) if head else chunks, rest)
        if cut is not None:
            count = (prefix.count if prefix is not None else 0) + len(done)
            last_user = _is_user_item(done[-1]) if done else bool(prefix is not None and prefix.state)
            keep = LaidOutPrefix(key, _held(messages), start + cut[0], chunks, count, last_user)
    builtin, include = _native_tools(native_tools) if native_tools else ([], [])
    if tools or builtin:
        if requests is not None:
            body["tools"] = requests.tools(
                (_API, strict_tools),
                (*tools, *native_tools),
                lambda: orjson.Fragment(
                    _dumps_bytes([*(_tool(t, f"tools[{i}]", strict_tools) for i, t in enumerate(tools)), *builtin])
                ),
            )
        else:
            body["tools"] = [*(_tool(t, f"tools[{i}]", strict_tools) for i, t in enumerate(tools)), *builtin]
    if tool_choice is not None:
        body["tool_choice"] = (
            {"type": "function", "name": tool_choice.name} if isinstance(tool_choice, ForceTool) else tool_choice
        )
    if max_tokens is not None:
        body["max_output_tokens"] = max_tokens
    if temperature is not None:
        body["temperature"] = temperature
    reasoning: dict[str, Any] = {}
    if reasoning_effort is not None:
        reasoning["effort"] = reasoning_effort
    if reasoning_summary is not None:
        reasoning["summary"] = reasoning_summary
    if reasoning:
        body["reasoning"] = reasoning
    if encrypted_reasoning if encrypted_reasoning is not None else reasoning_effort is not None:
        include.insert(0, _ENCRYPTED_REASONING)
    if include:
        body["include"] = include
    if store is not None:
        body["store"] = store
    if stream:
        body["stream"] = True
    if output_format is not None:
        body["text"] = {"format": text_format(output_format)}
    if previous_response_id is not None:
        body["previous_response_id"] = previous_response_id
    if conversation is not None:
        body["conversation"] = conversation
    if context_management is not None:
        body["context_management"] = context_management.entries()
    if prompt_cache_key is not None or prompt_cache_retention is not None or prompt_cache_options:
        body.update(
            openai_cache_fields(
                whole,
                system,
                key=prompt_cache_key,
                retention=prompt_cache_retention,
                options=prompt_cache_options,
            )
        )
    if extra:
        body.update(extra)
    return body, keep, parts


def _continuation(
    messages: Sequence[Message], previous_response_id: str | None, conversation: str | None, continue_from: int
) -> bool:
    """Whether the request continues server-held state; raises for options that contradict each other."""
    if previous_response_id is not None and conversation is not None:
        # "previous_response_id cannot be combined with the conversation parameter" (Responses API reference).
        raise UnsupportedContent("previous_response_id and conversation cannot be sent together")
    if continue_from and previous_response_id is None and conversation is None:
        raise UnsupportedContent("continue_from needs previous_response_id or conversation: who holds the start?")
    if not 0 <= continue_from <= len(messages):
        raise UnsupportedContent(f"continue_from {continue_from} is outside the {len(messages)} messages")
    return continue_from > 0


def _latest_assistant(messages: Sequence[Message], before: int) -> int:
    """The index of the last assistant message before ``before``, or -1."""
    for i in range(before - 1, -1, -1):
        if messages[i].role is Role.ASSISTANT:
            return i
    return -1


def build_request_from(
    request: ModelRequest,
    *,
    model: str,
    stream: bool = False,
    cache: ConversionCache | None = None,
    **provider_specific: Any,
) -> dict[str, Any]:
    """:func:`build_request` for a :class:`~loopctl.providers.base.ModelRequest` (what the clients call);
    ``provider_specific`` takes the Responses options of :func:`build_request`.

    ``request`` is the provider-neutral request; ``model`` the model to name; ``stream`` asks for a streamed reply;
    ``cache`` (optional, kept by the client across calls) reuses the conversion of the messages the previous request
    already had.
    """
    return build_request(
        request.messages, model=model, stream=stream, cache=cache, **request.options(), **provider_specific
    )


_OUTPUT = "function_call_output"


def _is_user_item(item: Mapping[str, Any]) -> bool:
    return item.get("role") == "user" or item.get("type") == _OUTPUT


def _outputs_in_call_order(items: list[dict[str, Any]], outputs: list[int], calls: Sequence[dict[str, Any]]) -> None:
    """Put the ``function_call_output`` items at ``outputs`` in the order of the ``function_call`` items in
    ``calls`` (the assistant message they answer), keeping the slots they stand in, so text around them stays
    in place. The API pairs them by ``call_id``, but they are sent in call order, as every codec sends them
    (strict compatible servers expect it). Outputs of unknown calls keep their order, after the known ones."""
    if len(outputs) < 2:
        return
    order = {item["call_id"]: k for k, item in enumerate(i for i in calls if i.get("type") == "function_call")}
    found = [items[i] for i in outputs]
    keys = [order.get(item["call_id"], len(order)) for item in found]
    if keys != sorted(keys):
        for slot, k in zip(outputs, sorted(range(len(found)), key=keys.__getitem__), strict=True):
            items[slot] = found[k]


class _Options:
    """The options that change how one message converts (they are part of the cache key)."""

    __slots__ = ("store_off", "system_role")

    def __init__(self, *, system_role: SystemRole, store_off: bool) -> None:
        self.system_role = system_role
        self.store_off = store_off


def _convert_message(message: Message, index: int, options: _Options) -> tuple[dict[str, Any], ...]:
    path = f"messages[{index}]"
    refuse_unwritable_message(message, path, "OpenAI Responses")
    if message.role is Role.ASSISTANT:
        return tuple(_assistant_items(message.parts, path, options))
    if message.role is Role.USER:
        return tuple(_user_items(message.parts, path))
    return tuple(_system_items(message.parts, path, options))


def _unsupported(part: MessagePart, path: str, why: str) -> UnsupportedContent:
    kind = getattr(part, "type", type(part).__name__)
    return UnsupportedContent(f"{path}: {PROVIDER} Responses cannot carry {why} (part type {kind!r})")


_KNOWN = (
    TextPart,
    ImagePart,
    ToolCallPart,
    ThinkingPart,
    ToolResultPart,
    ServerToolCallPart,
    ServerToolResultPart,
    CompactionPart,
)


def _check_known(part: MessagePart, path: str) -> None:
    if not isinstance(part, _KNOWN):
        raise _unsupported(part, path, "a part type this release does not know")


def _system_items(parts: Sequence[MessagePart], path: str, options: _Options) -> list[dict[str, Any]]:
    texts: list[str] = []
    for i, part in enumerate(parts):
        ppath = f"{path}.parts[{i}]"
        _check_known(part, ppath)
        if isinstance(part, TextPart):
            texts.append(part.text)
        elif isinstance(part, ThinkingPart):
            continue  # thinking is replayed only where the model wrote it (assistant messages)
        else:
            raise _unsupported(part, ppath, "this part in a system message")
    text = "".join(texts)
    return [{"role": options.system_role, "content": text}] if text else []


def _image_url(part: ImagePart) -> str:
    return f"data:{part.source.media_type};base64,{part.source.data}"


IMAGE_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The image types OpenAI accepts as input: PNG, JPEG, WEBP and non-animated GIF (platform.openai.com/docs/
guides/images-vision, "Image input requirements"); another type is a 400 the request need not risk."""


def _input_content(part: TextPart | ImagePart, path: str) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text} if part.text else None
    if part.source.media_type not in IMAGE_MEDIA_TYPES:
        raise UnsupportedContent(
            f"{path}: image media type {part.source.media_type!r} is not one OpenAI accepts "
            f"({', '.join(sorted(IMAGE_MEDIA_TYPES))})"
        )
    return {"type": "input_image", "image_url": _image_url(part), "detail": "auto"}


def _user_items(parts: Sequence[MessagePart], path: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []

    def flush() -> None:
        if not content:
            return
        if len(content) == 1 and content[0]["type"] == "input_text":
            items.append({"role": "user", "content": content[0]["text"]})
        else:
            items.append({"role": "user", "content": list(content)})
        content.clear()

    for i, part in enumerate(parts):
        ppath = f"{path}.parts[{i}]"
        _check_known(part, ppath)
        if isinstance(part, (TextPart, ImagePart)):
            piece = _input_content(part, ppath)
            if piece is not None:
                content.append(piece)
        elif isinstance(part, ToolResultPart):
            # Results travel as their own items; text around them keeps its place.
            flush()
            items.append(_function_call_output(part, ppath))
        elif isinstance(part, ThinkingPart):
            continue
        elif isinstance(part, ToolCallPart):
            raise _unsupported(part, ppath, "a tool call in a user message")
        else:
            raise _unsupported(part, ppath, "this part in a user message")
    flush()
    return items


def _function_call_output(part: ToolResultPart, path: str) -> dict[str, Any]:
    """A ``function_call_output`` item. The API has no error flag on it (openai-python ``FunctionCallOutput``:
    ``call_id``, ``output``, ``type``, ``id``, ``status``; ``status`` is the item's progress, not the tool's
    success), so a failed result's text starts with :data:`TOOL_ERROR_MARKER`, as on Chat: its first text
    piece, or a text piece of its own before an output that opens with an image."""
    root = part.output.root
    failed = part.failed()
    output: str | list[dict[str, Any]]
    if isinstance(root, str):
        output = TOOL_ERROR_MARKER + root if failed else root
    else:
        pieces = [
            piece for oi, sub in enumerate(root) if (piece := _input_content(sub, f"{path}.output[{oi}]")) is not None
        ]
        if failed:
            if pieces and pieces[0]["type"] == "input_text":
                pieces[0] = {**pieces[0], "text": TOOL_ERROR_MARKER + pieces[0]["text"]}
            else:
                pieces.insert(0, {"type": "input_text", "text": TOOL_ERROR_MARKER.rstrip()})
        output = pieces if pieces else ""
    return {
        "type": "function_call_output",
        "call_id": rewrite_tool_id(part.call_id, max_len=_MAX_CALL_ID),
        "output": output,
    }


def _assistant_items(parts: Sequence[MessagePart], path: str, options: _Options) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    n = len(parts)
    calls_here: set[str] = set()  # the server tool calls of this message
    replayed: set[str] = set()  # ... and those sent as their own items
    # True after a reasoning item of this provider was left out: the items that followed it lose their ids.
    orphaned = False
    seen_reasoning: set[str] = set()
    i = 0
    while i < n:
        part = parts[i]
        ppath = f"{path}.parts[{i}]"
        _check_known(part, ppath)
        if isinstance(part, ThinkingPart):
            ours = part.provider == PROVIDER and part.item_id is not None
            j = i + 1
            if ours:
                while j < n and _same_reasoning(parts[j], part.item_id):
                    j += 1
            if ours and _replayable(parts[i:j], options) and _is_following_item(parts, j):
                item_id = part.item_id
                assert item_id is not None
                if item_id not in seen_reasoning:
                    seen_reasoning.add(item_id)
                    items.append(_reasoning_item(parts[i:j], item_id))
                    orphaned = False
                else:
                    orphaned = True
            elif ours:
                orphaned = True
            i = j
        elif isinstance(part, TextPart):
            item_id = None if orphaned else part.item_id
            texts = [part.text]
            j = i + 1
            while j < n:
                nxt = parts[j]
                if not isinstance(nxt, TextPart) or (None if orphaned else nxt.item_id) != item_id:
                    break
                texts.append(nxt.text)
                j += 1
            if item_id is not None:
                items.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "id": item_id,
                        "status": "completed",
                        "content": [
                            {"type": "output_text", "text": p.text, "annotations": _annotations(p)}
                            for p in parts[i:j]
                            if isinstance(p, TextPart)
                        ],
                    }
                )
            elif joined := "".join(texts):
                items.append({"role": "assistant", "content": joined})
            i = j
        elif isinstance(part, ServerToolCallPart):
            calls_here.add(part.id)
            if part.provider == PROVIDER and part.raw is not None and not orphaned:
                items.append(part.raw)
                replayed.add(part.id)
            else:
                items.append({"role": "assistant", "content": call_note(part)})
            i += 1
        elif isinstance(part, ServerToolResultPart):
            ours = part.provider == PROVIDER
            if ours and part.raw is None and part.call_id in replayed:
                pass  # carried inside its call's item
            elif (
                ours
                and part.raw is not None
                and not orphaned
                and (part.call_id in replayed or part.call_id not in calls_here)
            ):
                items.append(part.raw)
            else:
                items.append({"role": "assistant", "content": result_note(part)})
            i += 1
        elif isinstance(part, CompactionPart):
            if part.provider == PROVIDER:  # another provider's compaction is never sent
                items.append(part.raw)
            i += 1
        elif isinstance(part, ToolCallPart):
            item: dict[str, Any] = {
                "type": "function_call",
                "call_id": rewrite_tool_id(part.id, max_len=_MAX_CALL_ID),
                "name": part.name,
                "arguments": dumps_exact(part.input),  # compact: the form models emit arguments in
            }
            if part.item_id is not None and not orphaned:
                item["id"] = part.item_id
            items.append(item)
            i += 1
        elif isinstance(part, ImagePart):
            raise _unsupported(part, ppath, "an image in an assistant message")
        else:
            raise _unsupported(part, ppath, "a tool result in an assistant message")
    return items


def _annotations(part: TextPart) -> list[Any]:
    """An ``output_text``'s ``annotations``: the part's citations when OpenAI made them, else none."""
    return list(part.citations) if part.citations is not None and part.provider == PROVIDER else []


def _same_reasoning(part: MessagePart, item_id: str | None) -> bool:
    return isinstance(part, ThinkingPart) and part.provider == PROVIDER and part.item_id == item_id


def _replayable(group: Sequence[MessagePart], options: _Options) -> bool:
    """A reasoning item can be sent: with its encrypted content, or by id alone while the API stores items."""
    return not options.store_off or any(isinstance(p, ThinkingPart) and p.signature for p in group)


def _is_following_item(parts: Sequence[MessagePart], j: int) -> bool:
    """The part at ``j`` is the item that followed a reasoning item in the reply: text or a tool call that
    still carries the provider's item id."""
    if j >= len(parts):
        return False
    nxt = parts[j]
    if isinstance(nxt, ServerToolCallPart):
        return nxt.provider == PROVIDER and nxt.raw is not None
    return isinstance(nxt, (TextPart, ToolCallPart)) and nxt.item_id is not None


def _reasoning_item(group: Sequence[MessagePart], item_id: str) -> dict[str, Any]:
    """Rebuild a ``reasoning`` item from its thinking parts: one ``summary_text`` per part (none for a single
    empty part), ``encrypted_content`` from the first part that carries one."""
    thinking = [p for p in group if isinstance(p, ThinkingPart)]
    summary: list[dict[str, Any]] = []
    if not (len(thinking) == 1 and thinking[0].text == ""):
        summary = [{"type": "summary_text", "text": p.text} for p in thinking]
    item: dict[str, Any] = {"type": "reasoning", "id": item_id, "summary": summary}
    signature = next((p.signature for p in thinking if p.signature is not None), None)
    if signature is not None:
        item["encrypted_content"] = signature
    return item


# --- tools ------------------------------------------------------------------------------------------------------


# "Must be a-z, A-Z, 0-9, or contain underscores and dashes, with a maximum length of 64" (openai-python
# FunctionDefinition.name); "Invalid 'tools[0].function.name': string does not match pattern" otherwise.
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def _tool(tool: ToolSchema, path: str, strict: bool) -> dict[str, Any]:
    if not TOOL_NAME.fullmatch(tool.name):
        raise UnsupportedContent(
            f"{path}.name: {tool.name!r} is not a name OpenAI accepts (1 to 64 of a-z, A-Z, 0-9, _ and -)"
        )
    parameters: dict[str, Any] | None = None
    if strict:
        try:
            parameters = strict_schema(tool.input_schema)
        except UnsupportedContent:
            parameters = None  # no strict form (a free-form map, a non-object root): sent non-strict
    out: dict[str, Any] = {
        "type": "function",
        "name": tool.name,
        "parameters": parameters if parameters is not None else dict(tool.input_schema),
        "strict": parameters is not None,
    }
    if tool.description:
        out["description"] = tool.description
    return out


# The built-in tools (platform.openai.com/docs/guides/tools; openai-python ``types/responses/tool_param.py``:
# ``WebSearchToolParam``, ``CodeInterpreter``, ``FileSearchToolParam``, ``Mcp``, ``ToolSearch``...,
# ``ImageGeneration``), each with the ``include`` that makes its item carry its results.
_INCLUDES = {
    CodeExecution: "code_interpreter_call.outputs",
    FileSearch: "file_search_call.results",
}


def _native_tools(tools: Sequence[NativeTool]) -> tuple[list[dict[str, Any]], list[str]]:
    """``(tool entries, include values)`` for the built-in tools; raises
    :class:`~loopctl.errors.UnsupportedContent` for a tool or an option Responses does not have."""
    check_native_tools(tools, _API)
    out: list[dict[str, Any]] = []
    include: list[str] = []
    for i, tool in enumerate(tools):
        path = f"native_tools[{i}]"
        entry: dict[str, Any]
        if isinstance(tool, WebSearch):
            refuse_options(tool, path, _API, ("max_uses", "blocked_domains"))
            entry = {"type": "web_search"}
            if tool.allowed_domains is not None:
                entry["filters"] = {"allowed_domains": list(tool.allowed_domains)}
            if tool.user_location is not None:
                entry["user_location"] = tool.user_location.to_dict()
            if tool.search_context_size is not None:
                entry["search_context_size"] = tool.search_context_size
        elif isinstance(tool, CodeExecution):
            container: Any = tool.container
            if container is None:
                container = {"type": "auto", "file_ids": list(tool.file_ids)} if tool.file_ids else {"type": "auto"}
            elif tool.file_ids:
                raise UnsupportedContent(f"{path}.file_ids: files go with a new container, not an existing one")
            entry = {"type": "code_interpreter", "container": container}
        elif isinstance(tool, FileSearch):
            refuse_options(tool, path, _API, ("store_names",))
            if not tool.vector_store_ids:
                raise UnsupportedContent(
                    f"{path}.vector_store_ids: OpenAI's file search needs at least one vector store"
                )
            entry = {"type": "file_search", "vector_store_ids": list(tool.vector_store_ids)}
            if tool.max_num_results is not None:
                entry["max_num_results"] = tool.max_num_results
        elif isinstance(tool, RemoteMCP):
            entry = {"type": "mcp", "server_label": tool.name, "server_url": tool.url}
            if tool.description is not None:
                entry["server_description"] = tool.description
            if tool.allowed_tools is not None:
                entry["allowed_tools"] = list(tool.allowed_tools)
            if tool.headers is not None:
                entry["headers"] = dict(tool.headers)
            if tool.authorization is not None:
                entry["authorization"] = tool.authorization
            entry["require_approval"] = tool.require_approval
        elif isinstance(tool, ToolSearch):
            refuse_options(tool, path, _API, ("mode",))
            entry = {"type": "tool_search"}
        elif isinstance(tool, ImageGeneration):
            entry = {"type": "image_generation", **tool.options}
        else:  # WebFetch
            raise unsupported_tool(tool, path, _API, "use WebSearch")
        out.append(entry)
        extra = _INCLUDES.get(type(tool))
        if extra is not None and extra not in include:
            include.append(extra)
    return out, include


# --- reply -----------------------------------------------------------------------------------------------------


def parse_response(body: Mapping[str, Any]) -> ModelResponse:
    """A non-streamed reply (a ``Response`` object) as a :class:`~loopctl.response.ModelResponse`.

    ``output`` items become parts in order: ``reasoning`` -> one :class:`~loopctl.message.ThinkingPart` per
    summary part (``provider="openai"``, ``item_id`` the ``rs_…`` id, ``signature`` the
    ``encrypted_content`` on the first; an item without summary gives one part with ``text=""``);
    ``message`` -> a :class:`~loopctl.message.TextPart` per ``output_text`` or ``refusal`` content
    (``item_id`` the ``msg_…`` id); ``function_call`` -> a :class:`~loopctl.message.ToolCallPart`
    (``id`` the ``call_id``, ``item_id`` the ``fc_…`` id; arguments that are not JSON give ``input={}`` and an
    :class:`~loopctl.response.InvalidToolCall`). An error body, or a ``failed`` response, raises the typed
    error; an output item or content type this codec does not know raises
    :class:`~loopctl.errors.ProviderProtocolError` naming it.
    """
    if not isinstance(body, Mapping):
        raise ProviderProtocolError(f"a reply must be a JSON object, not {type(body).__name__}", provider=PROVIDER)
    error = body.get("error")
    status = body.get("status")
    if is_zero_valued(error):
        error = None  # a zero-valued error object (all "" and 0), as some compatible servers write, is no error
    if isinstance(error, Mapping) or status == "failed":
        raise _error_from_object(
            error if isinstance(error, Mapping) else {"message": "the response failed"},
            body=dict(body),
            default_status=500 if status == "failed" else 400,
        )
    if status not in (None, "completed", "incomplete"):
        raise ProviderProtocolError(f"the response is not finished (status {status!r})", provider=PROVIDER)
    output = body.get("output")
    if not isinstance(output, list):
        raise ProviderProtocolError("the reply has no `output` list", provider=PROVIDER)
    parts: list[MessagePart] = []
    invalid: list[InvalidToolCall] = []
    refusal = False
    for n, item in enumerate(output):
        where = f"output[{n}]"
        kind = item.get("type") if isinstance(item, Mapping) else None
        if kind == "reasoning":
            parts.extend(_reasoning_parts(item, where))
        elif kind == "message":
            for c, content in enumerate(_list(item.get("content"))):
                text, is_refusal = _message_text(content, f"{where}.content[{c}]")
                refusal = refusal or is_refusal
                parts.append(_text_part(text, _field(item, "id", where), content))
        elif kind == "function_call":
            arguments = _field(item, "arguments", where) or ""
            value, problem = parse_arguments(arguments)
            call = ToolCallPart(
                id=_field(item, "call_id", where, required=True),
                name=_field(item, "name", where, required=True),
                input=value,
                item_id=_field(item, "id", where),
            )
            if problem is not None:
                invalid.append(InvalidToolCall(call.id, call.name, arguments, problem))
            parts.append(call)
        elif kind in NATIVE_ITEMS:
            parts.extend(_native_parts(item, where, parts))
        else:
            raise ProviderProtocolError(f"{where}: unknown output item type {kind!r}", provider=PROVIDER)
    details = body.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, Mapping) else None
    stop, raw = _stop_reason(status, reason, any(isinstance(p, ToolCallPart) for p in parts), refusal)
    return ModelResponse(
        message=Message(role=Role.ASSISTANT, parts=tuple(parts)),
        usage=_usage(body.get("usage")),
        stop_reason=stop,
        raw_stop_reason=raw,
        model=body.get("model"),
        id=body.get("id"),
        invalid_tool_calls=tuple(invalid),
    )


# --- the standalone compact endpoint ---------------------------------------------------------------------------


def build_compact_request(
    messages: Sequence[Message],
    *,
    model: str,
    system: str | None = None,
    instructions: str | None = None,
    prompt_cache_key: str | None = None,
    prompt_cache_retention: PromptCacheRetention | None = None,
    **_: Any,
) -> dict[str, Any]:
    """The JSON body of a ``POST /v1/responses/compact`` request: ``model``, the conversation as ``input``
    (the items :func:`build_request` sends, system messages inline), ``instructions`` (default ``system``)
    and the prompt-cache fields (openai-python ``ResponseCompactParams``; developers.openai.com/api/docs/
    guides/compaction, "Standalone compact endpoint"). Other options of :func:`build_request` are accepted
    and ignored. Raises what :func:`build_request` raises.

    ``prompt_cache_key`` and ``prompt_cache_retention`` are sent as given (``None``: left out).
    """
    full = build_request(
        messages,
        model=model,
        system=instructions if instructions is not None else system,
        system_as_instructions=True,
        prompt_cache_key=prompt_cache_key,
        prompt_cache_retention=prompt_cache_retention,
    )
    body: dict[str, Any] = {"model": model, "input": full["input"]}
    for key in ("instructions", "prompt_cache_key", "prompt_cache_retention"):
        if key in full:
            body[key] = full[key]
    return body


def parse_compacted(body: Mapping[str, Any]) -> tuple[list[Message], Usage]:
    """A ``response.compaction`` object (openai-python ``CompactedResponse``: "a list of all user messages,
    followed by a single compaction item") as the conversation that replaces the compacted one: each
    message item as a message of its role (its text parts), the ``compaction`` item as a
    :class:`~loopctl.message.CompactionPart` in an assistant message of its own; and the pass's usage. An
    error body raises the typed error; any other item raises :class:`~loopctl.errors.ProviderProtocolError`."""
    if not isinstance(body, Mapping):
        raise ProviderProtocolError(f"a reply must be a JSON object, not {type(body).__name__}", provider=PROVIDER)
    error = body.get("error")
    if isinstance(error, Mapping) and not is_zero_valued(error):
        raise _error_from_object(error, body=dict(body))
    output = body.get("output")
    if not isinstance(output, list):
        raise ProviderProtocolError("the compacted reply has no `output` list", provider=PROVIDER)
    messages: list[Message] = []
    for n, item in enumerate(output):
        where = f"output[{n}]"
        kind = item.get("type", "message") if isinstance(item, Mapping) else None
        if kind == "compaction":
            messages.append(Message(role=Role.ASSISTANT, parts=(CompactionPart(provider=PROVIDER, raw=dict(item)),)))
        elif kind == "message" and item.get("role") in ("user", "assistant", "developer", "system"):
            role = {"user": Role.USER, "assistant": Role.ASSISTANT}.get(item["role"], Role.SYSTEM)
            content = item.get("content")
            texts = (
                [content]
                if isinstance(content, str)
                else [_compacted_text(c, f"{where}.content[{k}]") for k, c in enumerate(_list(content))]
            )
            if role is Role.ASSISTANT:
                parts: tuple[MessagePart, ...] = tuple(
                    TextPart(text=t, item_id=_field(item, "id", where)) for t in texts
                )
            else:
                parts = tuple(TextPart(text=t) for t in texts)
            if parts:
                messages.append(Message(role=role, parts=parts))
        else:
            raise ProviderProtocolError(f"{where}: unexpected item {kind!r} in a compacted window", provider=PROVIDER)
    return messages, _usage(body.get("usage"))


def _compacted_text(content: Any, where: str) -> str:
    kind = content.get("type") if isinstance(content, Mapping) else None
    if kind in ("input_text", "output_text", "text"):
        return _field(content, "text", where) or ""
    raise ProviderProtocolError(f"{where}: unexpected content {kind!r} in a compacted window", provider=PROVIDER)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text_part(text: str, item_id: str | None, content: Any) -> TextPart:
    """An ``output_text`` as a text part; its ``annotations`` (``url_citation``, ``file_citation``,
    ``container_file_citation``...) kept as the part's citations."""
    annotations = content.get("annotations") if isinstance(content, Mapping) else None
    if isinstance(annotations, list) and annotations:
        return TextPart(text=text, item_id=item_id, citations=tuple(annotations), provider=PROVIDER)
    return TextPart(text=text, item_id=item_id)


# Output items of tools the API runs itself (platform.openai.com/docs/guides/tools; openai-python
# ``types/responses/response_output_item.py``), and the opaque ``compaction`` item
# (platform.openai.com/docs/guides/compaction). A call item holds its result too.
NATIVE_ITEMS = frozenset(
    {
        "web_search_call",
        "code_interpreter_call",
        "file_search_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "tool_search_call",
        "tool_search_output",
        "image_generation_call",
        "compaction",
    }
)

_NATIVE_NAMES = {
    "web_search_call": "web_search",
    "code_interpreter_call": "code_interpreter",
    "file_search_call": "file_search",
    "mcp_list_tools": "mcp_list_tools",
    "tool_search_call": "tool_search",
    "tool_search_output": "tool_search",
    "image_generation_call": "image_generation",
}


def _native_parts(item: Mapping[str, Any], where: str, before: Sequence[MessagePart]) -> list[MessagePart]:
    """A provider-run tool's item as a :class:`~loopctl.message.ServerToolCallPart` (the item whole as its
    ``raw``) and a :class:`~loopctl.message.ServerToolResultPart` with what the item reports (no ``raw``: the
    call's item carries it); a ``tool_search_output`` as a result of its own (``raw``) answering the last
    ``tool_search_call`` before it; a ``compaction`` item as a :class:`~loopctl.message.CompactionPart`."""
    kind = item["type"]
    raw = dict(item)
    if kind == "compaction":
        return [CompactionPart(provider=PROVIDER, raw=raw)]
    item_id = _field(item, "id", where, required=True)
    if kind == "tool_search_output":
        call = next(
            (p for p in reversed(before) if isinstance(p, ServerToolCallPart) and p.name == "tool_search"), None
        )
        tools = [t.get("name") for t in _list(item.get("tools")) if isinstance(t, Mapping)]
        return [
            ServerToolResultPart(
                call_id=call.id if call is not None else item_id,
                name="tool_search",
                output="tools found: " + ", ".join(str(t) for t in tools),
                provider=PROVIDER,
                raw=raw,
            )
        ]
    server: str | None = None
    output: str | None = None
    failed = False
    if kind == "web_search_call":
        action = item.get("action")
        call_input: Any = action if isinstance(action, Mapping) else {}
        sources = call_input.get("sources") if isinstance(call_input, Mapping) else None
        if isinstance(sources, list) and sources:
            output = "\n".join(
                result_text((s.get("url") or s.get("name") or "") if isinstance(s, Mapping) else s) for s in sources
            )
        else:
            output = f"search {result_text(item.get('status') or 'done')}"
        failed = item.get("status") == "failed"
    elif kind == "code_interpreter_call":
        call_input = {"code": item.get("code") or "", "container_id": item.get("container_id")}
        pieces = []
        for out in _list(item.get("outputs")):
            if isinstance(out, Mapping) and out.get("type") == "logs":
                pieces.append(result_text(out.get("logs") or ""))
            elif isinstance(out, Mapping) and out.get("type") == "image":
                url = out.get("url")
                pieces.append(f"[image: {len(url)} characters]" if isinstance(url, str) else "[image]")
        output = "\n".join(pieces) if pieces else f"code run {result_text(item.get('status') or 'done')}"
        failed = item.get("status") == "failed"
    elif kind == "file_search_call":
        call_input = {"queries": _list(item.get("queries"))}
        hits = [
            f"{result_text(r.get('filename') or r.get('file_id') or '')}: {result_text(r.get('text') or '')}"
            for r in _list(item.get("results"))
            if isinstance(r, Mapping)
        ]
        output = "\n".join(hits) if hits else f"search {result_text(item.get('status') or 'done')}"
        failed = item.get("status") == "failed"
    elif kind in ("mcp_call", "mcp_approval_request"):
        server = _field(item, "server_label", where)
        arguments = item.get("arguments")
        value, _ = parse_arguments(arguments) if isinstance(arguments, str) else (arguments or {}, None)
        call_input = value
        if kind == "mcp_call":
            error = item.get("error")
            failed = not is_zero_valued(error)
            output = result_text(error if failed else (item.get("output") or ""))
    elif kind == "mcp_list_tools":
        server = _field(item, "server_label", where)
        call_input = {}
        tools = [t.get("name") for t in _list(item.get("tools")) if isinstance(t, Mapping)]
        output = "tools: " + ", ".join(str(t) for t in tools)
        failed = not is_zero_valued(item.get("error"))
    elif kind == "tool_search_call":
        arguments = item.get("arguments")
        call_input = arguments if arguments is not None else {}
        output = None  # its tool_search_output item answers it
    else:  # image_generation_call
        result = item.get("result")
        call_input = {"revised_prompt": item["revised_prompt"]} if isinstance(item.get("revised_prompt"), str) else {}
        output = f"[image generated: {len(result)} base64 characters]" if isinstance(result, str) else "[no image]"
        failed = item.get("status") == "failed"
    name = _NATIVE_NAMES.get(kind) or _field(item, "name", where, required=True)
    parts: list[MessagePart] = [
        ServerToolCallPart(id=item_id, name=name, input=call_input, provider=PROVIDER, server=server, raw=raw)
    ]
    if output is not None:
        parts.append(
            ServerToolResultPart(
                call_id=item_id, name=name, output=output, provider=PROVIDER, is_error=True if failed else None
            )
        )
    return parts


def _field(item: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> Any:
    """A string field of a reply item (``None`` when absent and not required); anything else is the
    provider's protocol error."""
    value = item.get(key)
    if isinstance(value, str):
        return value if value or required else None  # an optional "" (zero-valued) is absent
    if value is None and not required:
        return value
    what = "missing" if value is None else f"not a string ({type(value).__name__})"
    raise ProviderProtocolError(f"{where}.{key} is {what}", provider=PROVIDER)


def _message_text(content: Any, where: str) -> tuple[str, bool]:
    """The text of one ``message`` content and whether it is a ``refusal`` (kept as text: it is what the model
    said; the stop reason reports it)."""
    kind = content.get("type") if isinstance(content, Mapping) else None
    if kind == "output_text":
        return _field(content, "text", where) or "", False
    if kind == "refusal":
        return _field(content, "refusal", where) or "", True
    raise ProviderProtocolError(f"{where}: unknown message content type {kind!r}", provider=PROVIDER)


def _reasoning_parts(item: Mapping[str, Any], where: str) -> list[ThinkingPart]:
    item_id = _field(item, "id", where)
    signature = _field(item, "encrypted_content", where)
    summaries = _list(item.get("summary"))
    texts = [
        _field(s, "text", f"{where}.summary[{k}]") or "" for k, s in enumerate(summaries) if isinstance(s, Mapping)
    ]
    texts = texts or [""]
    return [
        ThinkingPart(text=text, signature=signature if k == 0 else None, provider=PROVIDER, item_id=item_id)
        for k, text in enumerate(texts)
    ]


def _stop_reason(status: Any, reason: Any, has_tool_call: bool, refusal: bool) -> tuple[StopReason, str | None]:
    """``incomplete`` with ``max_output_tokens`` -> max_tokens, with ``content_filter`` -> refusal (any other
    reason cut the reply short too: max_tokens); ``completed`` -> tool_call when the reply calls tools,
    refusal when it holds a refusal, else end_turn. The raw value is the incomplete reason or the status."""
    if status == "incomplete":
        raw = reason if isinstance(reason, str) else "incomplete"
        return (StopReason.REFUSAL if raw == "content_filter" else StopReason.MAX_TOKENS), raw
    raw = status if isinstance(status, str) else "completed"
    if has_tool_call:
        return StopReason.TOOL_CALL, raw
    if refusal:
        return StopReason.REFUSAL, raw
    return StopReason.END_TURN, raw


def _usage(usage: Any) -> Usage:
    """``input_tokens`` already counts the cached ones (``input_tokens_details.cached_tokens`` are "retrieved
    from the cache"), ``output_tokens`` the reasoning ones (openai-python ``ResponseUsage``). A count the reply
    does not carry is ``None`` (not reported)."""
    if not isinstance(usage, Mapping):
        return Usage()
    inp = usage.get("input_tokens_details")
    out = usage.get("output_tokens_details")
    inp = inp if isinstance(inp, Mapping) else {}
    out = out if isinstance(out, Mapping) else {}
    return Usage(
        input_tokens=_count(usage.get("input_tokens")),
        output_tokens=_count(usage.get("output_tokens")),
        cache_read_tokens=_count(inp.get("cached_tokens")),
        cache_write_tokens=_count(inp.get("cache_write_tokens")),
        reasoning_tokens=_count(out.get("reasoning_tokens")),
    )


def _count(value: Any) -> int | None:
    """A token count as reported: a whole number, or ``None`` when it is missing. Raises ``TypeError`` or
    ``ValueError`` for a value that is not a number (the decoder's protocol error)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"a token count is not a whole number: {value!r}")
    return int(value)


# --- stream ---------------------------------------------------------------------------------------------------


class _Item:
    """What the decoder knows of one output item (keyed by ``output_index``)."""

    __slots__ = ("filled", "id", "kind", "parts")

    def __init__(self, kind: str, item_id: str | None) -> None:
        self.kind = kind
        self.id = item_id
        self.parts: dict[int, int] = {}  # content / summary index (0 for a call) -> part index
        self.filled: set[int] = set()  # sub-indexes that received text (or arguments)


class StreamDecoder(SSEStreamDecoder):
    """Decodes a Responses event stream into neutral :data:`~loopctl.stream.StreamEvent` values.

    Events read (openai-python ``types/responses/response_stream_event.py``): ``response.created`` and
    ``response.in_progress`` (id, model); ``response.output_item.added`` / ``.done``; ``response.content_part.added``;
    ``response.output_text.delta`` and ``response.refusal.delta``; ``response.function_call_arguments.delta``
    / ``.done`` (keyed by ``output_index``, so parallel calls stay apart);
    ``response.reasoning_summary_part.added`` and ``response.reasoning_summary_text.delta``;
    ``response.completed`` and ``response.incomplete`` (usage, stop reason). A reasoning item's
    ``encrypted_content`` is latched from ``response.output_item.done``: the SDK documents that the value in
    ``response.output_item.added`` may be incomplete (``ResponseReasoningItemParam.encrypted_content``).
    ``response.failed`` and ``error`` events raise the typed error from :meth:`feed`. ``sequence_number``,
    ``obfuscation``, ``[DONE]`` and unknown event types are ignored; an unknown output item or content type
    raises :class:`~loopctl.errors.ProviderProtocolError`.
    """

    provider = PROVIDER

    def __init__(self) -> None:
        super().__init__()
        self._items: dict[int, _Item] = {}
        self._next = 0
        self._native: list[MessagePart] = []  # the provider-native parts completed so far (a search output's call)
        self._has_tool_call = False
        self._refusal = False

    def error_body(self, body: Any) -> ProviderError:
        """The typed error for an error body sent in place of a stream."""
        error = body.get("error") if isinstance(body, Mapping) else None
        if not isinstance(error, Mapping):
            return ProviderProtocolError("the stream body is JSON but not an error", provider=PROVIDER, body=body)
        return _error_from_object(error, body=body)

    def on_event(self, event: ServerSentEvent) -> list[StreamEvent]:
        """Translate one SSE event (see the class docstring)."""
        if event.data == "[DONE]":
            return []
        try:
            # Arguments arrive as JSON text, parsed exactly when the call ends (parse_arguments): no event holds
            # them as a JSON value, so orjson alone reads the events.
            data = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            raise ProviderProtocolError(f"an event that is not JSON: {event.data[:80]!r}", provider=PROVIDER) from None
        if not isinstance(data, dict):
            return []
        kind = data.get("type") or event.event
        handler = _HANDLERS.get(kind)
        return handler(self, data) if handler is not None else []

    # --- handlers ------------------------------------------------------------------------------------------

    def _start(self, part: MessagePart) -> tuple[int, PartStarted]:
        index = self._next
        self._next += 1
        return index, PartStarted(index, part)

    def _item(self, data: Mapping[str, Any], kind: str | None = None) -> _Item | None:
        item = self._items.get(data.get("output_index", -1))
        if item is None:
            item_id = data.get("item_id")
            item = next((it for it in self._items.values() if item_id is not None and it.id == item_id), None)
        if item is None or (kind is not None and item.kind != kind):
            return None
        return item

    def _created(self, data: Mapping[str, Any]) -> list[StreamEvent]:
        response = data.get("response")
        if not isinstance(response, Mapping):
            return []
        return [ResponseStarted(id=response.get("id"), model=response.get("model"))]

    def _item_added(self, data: Mapping[str, Any]) -> list[StreamEvent]:
        item = data.get("item")
        if not isinstance(item, Mapping):
            return []
        kind = item.get("type")
        state = _Item(str(kind), item.get("id") or None)  # "" (zero-valued) is no id
        self._items[data.get("output_index", len(self._items))] = state
        if kind == "message":
            return []  # its parts start with response.content_part.added
        if kind == "reasoning":
            index, started = self._start(ThinkingPart(text="", provider=PROVIDER, item_id=state.id))
            state.parts[0] = index
            return [started]
        if kind == "function_call":
            self._has_tool_call = True
            index, started = self._start(
                ToolCallPart(id=item.get("call_id") or "", name=item.get("name") or "", input={}, item_id=state.id)
            )
            state.parts[0] = index
            out: list[StreamEvent] = [started]
            if item.get("arguments"):
                state.filled.add(0)
                out.append(ToolCallDelta(index, item["arguments"]))
            return out
        if kind in NATIVE_ITEMS:
            # The item as added may be partial (no results yet): its parts start now, and are completed from
            # response.output_item.done, which carries the whole item.
            out = []
            for k, part in enumerate(_native_parts(item, "output", self._native)[:1]):
                index, started = self._start(part)
                state.parts[k] = index
                out.append(started)
            return out
        raise ProviderProtocolError(f"unknown output item type {kind!r} in the stream", provider=PROVIDER)

    def _content_added(self, data: Mapping[str, Any]) -> list[StreamEvent]:
        state = self._item(data, "message")
        if state is None:
            return []
        part = data.get("part")
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind not in ("output_text", "refusal"):
            raise ProviderProtocolError(f"unknown message content type {kind!r} in the stream", provider=PROVIDER)
        self._refusal = self._refusal or kind == "refusal"
        return self._open_text(state, int(data.get("content_index", 0)))

    def _open_text(self, state: _Item, sub: int) -> list[StreamEvent]:
        if sub in state.parts:
            return []
        index, started = self._start(TextPart(text="", item_id=state.id))
        state.parts[sub] = index
        return [started]

    def _text_delta(self, data: Mapping[str, Any]) -> list[StreamEvent]:
        state = self._item(data, "message")
        if state is None:
            return []
        if data.get("type") == "response.refusal.delta":
            self._refusal = True
        sub = int(data.get("content_index", 0))
        out = self._open_text(state, sub)
        state.filled.add(sub)
        out.append(TextDelta(state.parts[sub], str(data.get("delta") or "")))
        return out

    def _text_done(self, data: Mapping[str, Any]) -> list[StreamEvent]:
        # Only a fallback: the text arrived whole, with no deltas.
        state = self._item(data, "message")
        if state is None:
            return []
        sub = int(data.get("content_index", 0))
        kind = data.get("type")
        if kind == "response.content_part.done":
            part = data.get("part")
            part = part if isinstance(part, Mapping) else {}
            text = part.get("text") if part.get("type") == "output_text" else part.get("refusal")
        else:
            text = data.get("text") if kind == "response.output_text.done" else data.get("refusal")
        return self._fill_text(state, sub, text)

    def _fill_text(self, state: _Item, sub: int, text: Any) -> list[StreamEvent]:
        if sub in state.filled or not text:
            return []
        out = self._open_text(state, sub)
        state.filled.add(sub)
        out.append(TextDelta(state.parts[sub], str(text)))
        return out

    def _arguments_delta(self, data: Mapping[str, Any]) -> list[StreamEvent]:
        state = self._item(data, "function_call")
        if state is None:
            return []
        state.filled.add(0)
        return [ToolCallDelta(state.parts[0], str(data.get("delta") or ""))]

    def _arguments_done(self, data: Mapping[str, Any]) -> list[StreamEvent]:
        state = self._item(data, "function_call")
        if state is None or 0 in state.filled or not data.get("arguments"):
            return []
        state.filled.add(0)
        return [ToolCallDelta(state.parts[0], str(data["arguments"]))]

    def _summary_added(self, data: Mapping[str, Any]) -> list[StreamEvent]:
        state = self._item(data, "reasoning")
        if state is None:
            return []
        return self._open_summary(state, int(data.get("summary_index", 0)))

    def _open_summary(self, state: _Item, sub: int) -> list[StreamEvent]:
        if sub in state.parts:
            return []
        index, started = self._start(ThinkingPart(text="", provider=PROVIDER, item_id=state.id))
        state.parts[sub] = index
        return [started]

    def _summary_delta(self, data: Mapping[str, Any]) -> list[StreamEvent]:
        state = self._item(data, "reasoning")
        if state is None:
            return []
        sub = int(data.get("summary_index", 0))
        out = self._open_summary(state, sub)
        state.filled.add(sub)
        out.append(ThinkingDelta(state.parts[sub], str(data.get("delta") or "")))
        return out

    def _summary_done(self, data: Mapping[str, Any]) -> list[StreamEvent]:
        state = self._item(data, "reasoning")
        if state is None:
            return []
        text = data.get("text")
        if text is None and isinstance(data.get("part"), Mapping):
            text = data["part"].get("text")
        return self._fill_summary(state, int(data.get("summary_index", 0)), text)

    def _fill_summary(self, state: _Item, sub: int, text: Any) -> list[StreamEvent]:
        # Only a fallback: the summary arrived whole, with no deltas.
        if sub in state.filled or not text:
            return []
        out = self._open_summary(state, sub)
        state.filled.add(sub)
        out.append(ThinkingDelta(state.parts[sub], str(text)))
        return out

    def _item_done(self, data: Mapping[str, Any]) -> list[StreamEvent]:
        item = data.get("item")
        state = self._items.get(data.get("output_index", -1))
        if not isinstance(item, Mapping) or state is None:
            return []
        out: list[StreamEvent] = []
        if state.kind == "reasoning":
            for sub, summary in enumerate(_list(item.get("summary"))):
                if isinstance(summary, Mapping):
                    out += self._fill_summary(state, sub, summary.get("text"))
            if item.get("encrypted_content"):
                out.append(ThinkingSignature(state.parts[0], str(item["encrypted_content"])))
        elif state.kind == "function_call":
            if 0 not in state.filled and item.get("arguments"):
                state.filled.add(0)
                out.append(ToolCallDelta(state.parts[0], str(item["arguments"])))
        elif state.kind == "message":
            for sub, content in enumerate(_list(item.get("content"))):
                text, is_refusal = _message_text(content, f"output[{data.get('output_index')}].content[{sub}]")
                self._refusal = self._refusal or is_refusal
                if sub not in state.parts:
                    out += self._open_text(state, sub)
                out += self._fill_text(state, sub, text)
                cited = _text_part("", state.id, content)
                if cited.citations is not None:
                    out.append(PartUpdated(state.parts[sub], cited))
        elif state.kind in NATIVE_ITEMS:
            parts = _native_parts(item, f"output[{data.get('output_index')}]", self._native)
            self._native.extend(parts)
            for k, part in enumerate(parts):
                if k in state.parts:
                    out.append(PartUpdated(state.parts[k], part))
                else:
                    index, started = self._start(part)
                    state.parts[k] = index
                    out.append(started)
        out.extend(PartFinished(index) for index in sorted(state.parts.values()))
        return out

    def _finished(self, data: Mapping[str, Any]) -> list[StreamEvent]:
        response = data.get("response")
        response = response if isinstance(response, Mapping) else {}
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        status = response.get("status") or ("incomplete" if data.get("type") == "response.incomplete" else None)
        stop, raw = _stop_reason(status, reason, self._has_tool_call, self._refusal)
        out: list[StreamEvent] = []
        if response.get("id") is not None or response.get("model") is not None:
            out.append(ResponseStarted(id=response.get("id"), model=response.get("model")))
        out.append(UsageReported(_usage(response.get("usage"))))
        out.append(ResponseFinished(stop, raw))
        return out

    def _failed(self, data: Mapping[str, Any]) -> list[StreamEvent]:
        response = data.get("response")
        error = response.get("error") if isinstance(response, Mapping) else None
        if not isinstance(error, Mapping):
            error = {"message": "the response failed"}
        raise _error_from_object(error, body=data, default_status=500)

    def _error(self, data: Mapping[str, Any]) -> list[StreamEvent]:
        # The `error` event carries code/message/param at the top level (ResponseErrorEvent, whose "type" is
        # the event's own); some servers nest them under "error".
        nested = data.get("error")
        error = nested if isinstance(nested, Mapping) else {k: v for k, v in data.items() if k != "type"}
        # The WebSocket mode's error event names the HTTP status it stands for ({"type": "error", "status": 400,
        # "error": {...}}: platform.openai.com/docs/guides/websocket-mode): the same typed error as over HTTP.
        status = data.get("status")
        if isinstance(status, int) and not isinstance(status, bool) and 400 <= status < 600:
            raise error_from_http(status, {"error": dict(error)})
        raise _error_from_object(error, body=data, default_status=500)


_HANDLERS: dict[str, Any] = {
    "response.created": StreamDecoder._created,
    "response.in_progress": StreamDecoder._created,
    "response.output_item.added": StreamDecoder._item_added,
    "response.output_item.done": StreamDecoder._item_done,
    "response.content_part.added": StreamDecoder._content_added,
    "response.output_text.delta": StreamDecoder._text_delta,
    "response.refusal.delta": StreamDecoder._text_delta,
    "response.output_text.done": StreamDecoder._text_done,
    "response.refusal.done": StreamDecoder._text_done,
    "response.content_part.done": StreamDecoder._text_done,
    "response.function_call_arguments.delta": StreamDecoder._arguments_delta,
    "response.function_call_arguments.done": StreamDecoder._arguments_done,
    "response.reasoning_summary_part.added": StreamDecoder._summary_added,
    "response.reasoning_summary_text.delta": StreamDecoder._summary_delta,
    "response.reasoning_summary_text.done": StreamDecoder._summary_done,
    "response.reasoning_summary_part.done": StreamDecoder._summary_done,
    "response.completed": StreamDecoder._finished,
    "response.incomplete": StreamDecoder._finished,
    "response.failed": StreamDecoder._failed,
    "error": StreamDecoder._error,
}


def parse_stream(chunks: Iterable[bytes]) -> ModelResponse:
    """Decode a whole Responses event stream (chunks split anywhere) into a
    :class:`~loopctl.response.ModelResponse`; raises as :meth:`StreamDecoder.finish` does."""
    return StreamDecoder.parse(chunks)


# --- errors -----------------------------------------------------------------------------------------------------


def error_from_http(
    status: int,
    body: bytes | str | Mapping[str, Any] | None,
    headers: Mapping[str, str] | None = None,
    *,
    now: float | None = None,
) -> ProviderError:
    """The typed error for a non-2xx reply: ``{"error": {"message", "type", "code", "param"}}``.

    Classified by ``providers._common.classify_http_error`` on the status and the error ``code`` (or ``type``
    when there is no code): 429 -> :class:`~loopctl.errors.RateLimited`, 503 ->
    :class:`~loopctl.errors.Overloaded`, 401/403 -> :class:`~loopctl.errors.AuthenticationError`, 404 ->
    :class:`~loopctl.errors.ModelNotFound`, ``context_length_exceeded`` ->
    :class:`~loopctl.errors.ContextOverflow`, other 4xx -> :class:`~loopctl.errors.InvalidRequest`, 5xx ->
    :class:`~loopctl.errors.ServerError`. ``retry_after`` (seconds) comes from ``retry-after-ms`` /
    ``retry-after`` headers, else from the message's "Please try again in 1.5s".

    ``now`` is the current Unix time in seconds: with it, a ``Retry-After`` given as an HTTP-date (RFC 9110
    section 10.2.3, ``Wed, 21 Oct 2015 07:28:00 GMT``) becomes the seconds from ``now`` to that date (0 for a
    date past); the codec reads no clock, so without ``now`` only a number of seconds is read. The clients
    pass ``time.time()``.

    ``body`` is the error body as received (bytes, text or parsed JSON).
    """
    parsed: Any = body
    if isinstance(body, (bytes, bytearray, str)):
        try:
            parsed = loads_exact(body)
        except orjson.JSONDecodeError:
            parsed = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else body
    error = parsed.get("error") if isinstance(parsed, Mapping) else None
    if not isinstance(error, Mapping):
        text = parsed.strip()[:200] if isinstance(parsed, str) and parsed.strip() else None
        return classify_http_error(
            PROVIDER, status, message=text, body=parsed, retry_after=parse_retry_after(headers, now=now)
        )
    message = _text(error.get("message"))
    kind = _text(error.get("code")) or _text(error.get("type"))
    retry = parse_retry_after(headers, now=now)
    if retry is None:
        retry = _retry_from_message(message)
    return classify_http_error(PROVIDER, status, message=message, error_type=kind, body=parsed, retry_after=retry)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# The HTTP status an error code stands for, for errors that arrive without one (inside a 200 stream, or a
# body handed to parse_response): only the error class is taken from it; the error carries no status.
_CODE_STATUS = {
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "rate_limit_error": 429,
    "server_error": 500,
    "internal_error": 500,
    "api_error": 500,
    "vector_store_timeout": 500,
    "server_is_overloaded": 503,
    "overloaded": 503,
    "invalid_api_key": 401,
    "authentication_error": 401,
    "permission_error": 403,
    "model_not_found": 404,
    "not_found_error": 404,
    # What the request asked for cannot be done; sending it again will not help.
    "invalid_request_error": 400,
    "context_length_exceeded": 400,
    "invalid_prompt": 400,
    "bio_policy": 400,
    "data_residency_mismatch": 400,
    "misalignment_policy_violation": 400,
}


def _error_from_object(error: Mapping[str, Any], *, body: Any, default_status: int = 400) -> ProviderError:
    """The typed error for an error object that came without an HTTP status: an error body given to
    :func:`parse_response` or sent in place of a stream (``default_status`` 400), or a stream ``error`` /
    ``response.failed`` event (500: the request was accepted, so an unexplained failure is the server's).

    Codes are those of openai-python ``ResponseError.code`` and the API's error bodies; image codes
    (``invalid_image``, ``image_too_large``...) are request errors."""
    message = _text(error.get("message"))
    code = _text(error.get("code"))
    kind = _text(error.get("type"))
    # A numeric code is the HTTP status it stands for (OpenRouter's errors; _common.http_status_code).
    status = http_status_code(error) or _CODE_STATUS.get(code or "") or _CODE_STATUS.get(kind or "")
    if status is None and code is not None and ("image" in code or code.startswith("invalid")):
        status = 400
    cls = type(classify_http_error(PROVIDER, status or default_status, message=message, error_type=code or kind))
    text = message or f"error {code or kind or 'without a message'}"
    kw: dict[str, Any] = {"provider": PROVIDER, "provider_message": message, "body": body}
    if issubclass(cls, (RateLimited, Overloaded)):
        return cls(text, retry_after=_retry_from_message(message), **kw)
    return cls(text, **kw)


_RETRY_IN = re.compile(r"try again in\s+((?:\d+(?:\.\d+)?(?:h|ms|m|s))+)", re.IGNORECASE)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _retry_from_message(message: str | None) -> float | None:
    """Seconds from OpenAI's rate-limit text ("Please try again in 1m12.5s", "in 20ms")."""
    if not message:
        return None
    found = _RETRY_IN.search(message)
    if found is None:
        return None
    return sum(float(n) * _UNIT[u] for n, u in _DURATION.findall(found.group(1)))


# --- NativeOutput: the text format -------------------------------------------------------------------------


def text_format(output: OutputFormat) -> dict[str, Any]:
    """``text.format`` for ``output`` (Structured Outputs in the Responses API,
    https://platform.openai.com/docs/guides/structured-outputs, and the ``text`` parameter of
    https://platform.openai.com/docs/api-reference/responses/create): ``{"type": "json_schema", "name",
    "description", "schema", "strict"}``, the schema converted by :func:`strict_schema` when ``strict``."""
    schema = strict_schema(output.schema, path="output_format.schema") if output.strict else _plain(output.schema)
    spec: dict[str, Any] = {"type": "json_schema", "name": output.name}
    if output.description:
        spec["description"] = output.description
    spec["schema"] = schema
    spec["strict"] = output.strict
    return spec
