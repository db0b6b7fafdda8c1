"""Google Gemini codec: messages to a ``generateContent`` body, and replies and SSE streams back to messages.

One REST JSON shape (camelCase) serves the Gemini Developer API (generativelanguage.googleapis.com) and
Vertex AI. What goes in the URL -- the model, ``:generateContent`` or ``:streamGenerateContent?alt=sse``, the
key -- is the client's business: the body has no model and nothing for streaming. Every wire rule below is
documented, with its source, in ``docs/providers/gemini.md``; the ones that shape the code:

- ``contents`` alternate ``user`` / ``model`` (adjacent same-role messages are merged in the request only);
  ``systemInstruction`` holds the ``system`` argument, then the text of every ``Role.SYSTEM`` message,
  joined with ``"\\n"`` (``docs/providers.md``, "Rules every codec keeps").
- Tool calls are ``functionCall`` parts; results are ``functionResponse`` parts whose ``name`` is the called
  tool's (the call's, found by ``call_id``; the result's own name only when the call is gone) and whose
  ``response`` is ``{"output": ...}`` or, for a failed call, ``{"error": ...}`` (google-genai
  ``types.FunctionResponse.response``). A user content answering calls puts its ``functionResponse`` parts
  first, in the order of the calls (Gemini matches them by order when there are no ids). Images in results
  ride inside the ``functionResponse`` (``parts``, Gemini 3) or are moved, in order, to ``inlineData`` parts
  right after the responses.
- ``thoughtSignature`` rides on the part it signs. A signature that came on a text or call part is kept as
  ``ThinkingPart(text="", signature=..., provider="gemini")`` right before that part, and put back on it;
  a signature that came on a thought part stays on that ThinkingPart. Only Gemini's own thinking is replayed
  (``docs/providers.md``, "The reasoning replay policy").
- A call Gemini sent without an id gets ``<responseId>_<position>``; such ids, and other providers' ids, are
  never sent to Gemini (Vertex refuses ``functionCall.id``); ids Gemini minted are echoed
  (``ToolCallPart.provider == "gemini"``).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any, Literal, NamedTuple

import orjson

from loopctl._frozen import dataclass
from loopctl.errors import ProviderError, ProviderProtocolError, UnsupportedContent
from loopctl.message import (
    CompactionPart,
    ImagePart,
    ImageSource,
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
    ends_on_an_empty_prompt,
    is_zero_valued,
    nothing_to_send,
    parse_retry_after,
    refuse_unwritable_message,
    refuse_unwritable_options,
)
from loopctl.providers._gemini_schema import json_schema_parameters, openapi_parameters
from loopctl.providers.base import ConversionCache, ModelRequest, OutputFormat, ReasoningEffort, SSEStreamDecoder
from loopctl.providers.native import (
    CodeExecution,
    FileSearch,
    NativeTool,
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
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.stream import (
    PartFinished,
    PartStarted,
    ResponseFinished,
    ResponseStarted,
    StreamAccumulator,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ThinkingSignature,
    ToolCallDelta,
    UsageReported,
    dumps_exact,
    loads_exact,
)
from loopctl.tool import ForceTool, ToolChoice, ToolSchema

__all__ = [
    "build_cached_request",
    "cached_content_body",
    "response_schema",
    "PROVIDER",
    "SKIP_SIGNATURE",
    "StreamDecoder",
    "build_request",
    "build_request_from",
    "error_from_http",
    "model_generation",
    "parse_response",
    "parse_stream",
]

PROVIDER = "gemini"
"""The name in errors and in ``ThinkingPart.provider`` / ``ToolCallPart.provider``."""

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""The dummy ``thoughtSignature`` Google documents for function calls the model did not produce
(ai.google.dev/gemini-api/docs/thought-signatures, FAQ 1; Vertex "thought signatures" page: the one value
both APIs accept)."""

SchemaDialect = Literal["json_schema", "openapi"]

# Multimodal function responses take these image types (ai.google.dev/gemini-api/docs/function-calling,
# "Multimodal function responses", Gemini 3 series); others move out as inlineData.
_RESPONSE_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp"})

# reasoning_effort for models before Gemini 3, as thinkingBudget tokens. Every value lies inside every 2.5
# model's range (Pro 128-32768, Flash 0-24576, Flash-Lite 512-24576; ai.google.dev/gemini-api/docs/thinking).
_BUDGETS: dict[str, int] = {"minimal": 512, "low": 2048, "medium": 8192, "high": 24576}

_TOOL_CHOICE = {"auto": "AUTO", "none": "NONE", "required": "ANY"}

# finishReason values that mean a content filter or safety stop (google-genai types.FinishReason), and
# promptFeedback.blockReason values (types.BlockedReason) all read as a refusal.
_REFUSALS = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "LANGUAGE",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
        "MODEL_ARMOR",
        "ESCALATION",
        "PUP_LIMITED_DISABLED",
        "JAILBREAK",
    }
)
_MAX_TOKENS = frozenset({"MAX_TOKENS", "CONTINUATION"})

_GENERATION = re.compile(r"(?:^|/)gemini-(\d+)(?=[.\-]|$)")
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*")
_B64_VALUE = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")} | {
    "-": 62,
    "_": 63,
}


def model_generation(model: str) -> int | None:
    """The Gemini generation of a model name (``"gemini-3-pro-preview"`` -> 3, ``"models/gemini-2.5-flash"``
    -> 2, ``"publishers/google/models/gemini-3.1-pro"`` -> 3), or ``None`` for a name without one
    (``"gemini-flash-latest"``)."""
    match = _GENERATION.search(model)
    return int(match.group(1)) if match else None


# --- building a request ----------------------------------------------------------------------------------


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
    include_thoughts: bool | None = None,
    function_response_parts: bool | None = None,
    signature_fallback: bool | None = None,
    schema_dialect: SchemaDialect = "json_schema",
    output_format: OutputFormat | None = None,
    native_tools: Sequence[NativeTool] = (),
    context_management: object = None,
) -> dict[str, Any]:
    """The JSON body of a ``generateContent`` / ``streamGenerateContent`` request.

    ``model`` is not written (it belongs in the URL) but picks per-generation behaviour (see
    :func:`model_generation`): for Gemini 3 and later, ``reasoning_effort`` becomes ``thinkingLevel``
    (otherwise ``thinkingBudget``: minimal 512, low 2048, medium 8192, high 24576 tokens), images in tool
    results ride inside ``functionResponse.parts``, and the first ``functionCall`` of a model turn that has no
    Gemini signature gets :data:`SKIP_SIGNATURE`. ``stream`` changes nothing in the body. ``max_tokens``,
    ``temperature`` and ``stop`` become ``generationConfig.maxOutputTokens`` / ``temperature`` /
    ``stopSequences``; ``tool_choice`` becomes ``toolConfig.functionCallingConfig`` (written only with
    ``tools``). ``extra`` is merged in last, objects merged key by key (so ``{"generationConfig": {"topK":
    5}}`` adds to the generated config).

    Gemini-specific options: ``include_thoughts`` sets ``thinkingConfig.includeThoughts`` (default: on when
    ``reasoning_effort`` is given); ``function_response_parts`` and ``signature_fallback`` override the
    per-generation defaults above; ``schema_dialect`` sends tool schemas as ``parametersJsonSchema`` (full
    JSON Schema, the default) or converted to the OpenAPI subset in ``parameters`` (``"openapi"``).

    ``cache`` reuses each message's converted form between calls (the body is the same with or without it;
    do not mutate the returned body's ``contents``, which share their part objects with the cache). Raises
    :class:`~loopctl.errors.UnsupportedContent` naming the path (``messages[3].parts[1]``) for a part type
    this release does not know, a part in a role Gemini cannot carry it in, a tool result with no name
    whose call is not in the conversation, a tool call or result that breaks the pairing rules
    (:func:`~loopctl.providers._common.check_pairing`), or a conversation with nothing to send.

    ``system`` is the system prompt (``systemInstruction``); ``output_format`` (an
    :class:`~loopctl.providers.base.OutputFormat`) asks for schema-constrained output (``docs/output.md`` says
    what each API gets).

    ``native_tools``: built-in tool objects (:mod:`loopctl.providers.native`) sent as Gemini's tools
    (``googleSearch``, ``codeExecution``, ``urlContext``); one Gemini has no such tool for raises
    :class:`~loopctl.errors.UnsupportedContent`. ``context_management``: Gemini has no provider-side compaction, so
    any strategy raises :class:`~loopctl.errors.UnsupportedContent`.
    """
    generation = model_generation(model)
    modern = generation is not None and generation >= 3
    options = _Options(
        response_parts=modern if function_response_parts is None else function_response_parts,
        fallback=modern if signature_fallback is None else signature_fallback,
    )
    refuse_unwritable_options(system, tools, "Gemini")
    if context_management is not None:
        raise UnsupportedContent(
            f"context_management: Gemini has no provider-side compaction ({type(context_management).__name__}); "
            "use a local compactor"
        )
    check_pairing(messages, "Gemini")
    contents, system_texts = _contents(messages, options, cache)
    if cache is not None:
        cache.sweep()
    if not contents:
        raise nothing_to_send("Gemini", len(messages))

    body: dict[str, Any] = {"contents": contents}
    instruction = "\n".join(t for t in [system or "", *system_texts] if t)
    if instruction:
        body["systemInstruction"] = {"parts": [{"text": instruction}]}
    builtin = _native_tools(native_tools) if native_tools else []
    if tools:
        body["tools"] = [
            {"functionDeclarations": [_declaration(t, f"tools[{i}]", schema_dialect) for i, t in enumerate(tools)]},
            *builtin,
        ]
        if tool_choice is not None:
            body["toolConfig"] = {"functionCallingConfig": _function_calling(tool_choice)}
    elif builtin:
        body["tools"] = builtin
    config = _generation_config(
        max_tokens=max_tokens,
        temperature=temperature,
        stop=stop,
        effort=reasoning_effort,
        include_thoughts=include_thoughts,
        modern=modern,
    )
    if output_format is not None:
        config = {**(config or {}), **response_schema(output_format, schema_dialect)}
    if config:
        body["generationConfig"] = config
    if extra:
        _merge_into(body, extra)
    return body


_CACHED_KEYS = ("systemInstruction", "tools", "toolConfig")  # what a cached content holds besides contents


def cached_content_body(messages: Sequence[Message], *, model: str, ttl_seconds: int, **options: Any) -> dict[str, Any]:
    """The body of ``POST /v1beta/cachedContents`` caching ``messages`` with the system prompt, tools and tool
    config of :func:`build_request` given the same ``options``: ``{"model": "models/<model>", "contents",
    "systemInstruction"?, "tools"?, "toolConfig"?, "ttl": "<seconds>s"}`` (ai.google.dev/gemini-api/docs/caching;
    ai.google.dev/api/caching#CachedContent).

    ``ttl_seconds`` is how long the cache lives, in seconds; ``model`` the model id.
    """
    body = build_request(messages, model=model, **options)
    out: dict[str, Any] = {"model": model if model.startswith("models/") else f"models/{model}"}
    out["contents"] = body["contents"]
    for key in _CACHED_KEYS:
        if key in body:
            out[key] = body[key]
    out["ttl"] = f"{int(ttl_seconds)}s"
    return out


def build_cached_request(
    messages: Sequence[Message], *, model: str, cached_content: str, cached_messages: int, **options: Any
) -> dict[str, Any]:
    """:func:`build_request`'s body for a request whose first ``cached_messages`` messages, system prompt, tools
    and tool config are held in the cached content named ``cached_content`` (made by
    :func:`cached_content_body` from those messages and the same ``options``): ``"cachedContent"`` set, the
    cached parts left out (the API refuses ``systemInstruction``, ``tools`` or ``toolConfig`` beside a cached
    content: ai.google.dev/gemini-api/docs/caching). Raises :class:`~loopctl.errors.UnsupportedContent` when the
    request does not continue the cached content exactly (a system message or tool added since, a turn merged
    across the boundary) or adds nothing to it: the caller then sends the request whole.

    ``messages`` is the whole conversation; ``model`` the model id; ``options`` those of :func:`build_request`.
    """
    body = build_request(messages, model=model, **options)
    cached = cached_content_body(messages[:cached_messages], model=model, ttl_seconds=0, **options)
    n = len(cached["contents"])
    if body["contents"][:n] != cached["contents"] or any(body.get(k) != cached.get(k) for k in _CACHED_KEYS):
        raise UnsupportedContent(f"the request does not continue the cached content {cached_content!r}")
    if len(body["contents"]) <= n:
        raise UnsupportedContent(f"the request adds nothing to the cached content {cached_content!r}")
    for key in _CACHED_KEYS:
        body.pop(key, None)
    body["contents"] = body["contents"][n:]
    return {"cachedContent": cached_content, **body}


def build_request_from(
    request: ModelRequest,
    *,
    model: str,
    stream: bool = False,
    cache: ConversionCache | None = None,
    **provider_specific: Any,
) -> dict[str, Any]:
    """:func:`build_request` for a :class:`~loopctl.providers.base.ModelRequest` (what the clients call);
    ``provider_specific`` takes :func:`build_request`'s Gemini options (``include_thoughts``...).

    ``request`` is the provider-neutral request; ``model`` the model to name; ``stream`` asks for a streamed reply;
    ``cache`` (optional, kept by the client across calls) reuses the conversion of the messages the previous request
    already had.
    """
    return build_request(
        request.messages, model=model, stream=stream, cache=cache, **request.options(), **provider_specific
    )


class _Options(NamedTuple):
    """What changes how a message converts; part of the cache key (a tuple: hashed and compared in C)."""

    response_parts: bool  # images of tool results inside functionResponse.parts
    fallback: bool  # SKIP_SIGNATURE on an unsigned first functionCall of a model turn


@dataclass(frozen=True, slots=True)
class _Piece:
    """One message converted (cached as is, never mutated)."""

    role: str
    parts: list[dict[str, Any]]
    responses: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (call id, part)
    media: list[dict[str, Any]] = field(default_factory=list)  # images moved out of tool results
    calls: tuple[tuple[str, str, bool], ...] = ()  # (id, name, minted by Gemini)


def _contents(
    messages: Sequence[Message], options: _Options, cache: ConversionCache | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """``contents`` and the system texts. One pass: convert (or fetch) each message, fill result names from
    the calls seen so far, and merge adjacent same-role pieces."""
    contents: list[dict[str, Any]] = []
    system_texts: list[str] = []
    calls: dict[str, tuple[str, bool]] = {}  # call id -> (tool name, minted by Gemini)
    order: dict[str, int] = {}  # call id -> position of the latest call with that id, to order responses
    seen = 0  # calls seen so far
    role = ""
    parts: list[dict[str, Any]] = []
    responses: list[tuple[int, dict[str, Any]]] = []
    media: list[dict[str, Any]] = []

    def flush() -> None:
        if responses:
            responses.sort(key=lambda r: r[0])  # stable: unknown calls keep their order, last
            parts[:0] = [r[1] for r in responses] + media
        if parts:
            contents.append({"role": role, "parts": parts})

    for i, message in enumerate(messages):
        if message.role is Role.SYSTEM:
            text = _system_text(message, i)
            if text:
                system_texts.append(text)
            continue
        if message.role is Role.ASSISTANT:
            key: Any = ("model", options.fallback)
            piece = cache.get(message, key) if cache is not None else None
            if piece is None:
                piece = _model_piece(message, i, options)
                if cache is not None:
                    cache.put(message, piece, key)
        else:
            resolved = _resolve_results(message, i, calls)
            key = ("user", options.response_parts, resolved)
            piece = cache.get(message, key) if cache is not None else None
            if piece is None:
                piece = _user_piece(message, i, resolved, options)
                if cache is not None:
                    cache.put(message, piece, key)
        if not (piece.parts or piece.responses):
            continue  # nothing to send (say, only empty text): it must not split the turns around it
        if piece.role != role:
            flush()
            role, parts, responses, media = piece.role, [], [], []
        parts.extend(piece.parts)
        if piece.responses:
            # A result whose call is unknown goes after every known one.
            responses.extend((order.get(call_id, seen), part) for call_id, part in piece.responses)
            media.extend(piece.media)
        for call_id, name, minted in piece.calls:
            calls[call_id] = (name, minted)
            order[call_id] = seen
            seen += 1
    flush()
    if ends_on_an_empty_prompt(messages) and (not contents or contents[-1]["role"] != "user"):
        # An empty prompt is still the user's turn: generateContent answers {"text": ""} with a 200, while
        # leaving it out would end the request on a model turn (or send nothing at all).
        contents.append({"role": "user", "parts": [{"text": ""}]})
    return contents, system_texts


# Candidate metadata of the built-in tools: google_search and file_search grounding, url_context retrieval
# (ai.google.dev/gemini-api/docs/google-search, .../url-context, .../file-search; google-genai
# ``types.GroundingMetadata``, ``types.UrlContextMetadata``).
_METADATA_KEYS = frozenset({"groundingMetadata", "urlContextMetadata"})


def _native_tools(tools: Sequence[NativeTool]) -> list[dict[str, Any]]:
    """The ``tools`` entries of the built-in tools (ai.google.dev/api/caching#Tool: ``googleSearch``,
    ``codeExecution``, ``urlContext``, ``fileSearch``); raises :class:`~loopctl.errors.UnsupportedContent` for a
    tool or an option Gemini does not have."""
    check_native_tools(tools, "Gemini")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        path = f"native_tools[{i}]"
        if isinstance(tool, WebSearch):
            refuse_options(
                tool,
                path,
                "Gemini",
                ("max_uses", "allowed_domains", "blocked_domains", "user_location", "search_context_size"),
            )
            out.append({"googleSearch": {}})
        elif isinstance(tool, WebFetch):
            refuse_options(
                tool,
                path,
                "Gemini",
                ("max_uses", "allowed_domains", "blocked_domains", "citations", "max_content_tokens"),
            )
            out.append({"urlContext": {}})
        elif isinstance(tool, CodeExecution):
            refuse_options(tool, path, "Gemini", ("container", "file_ids"))
            out.append({"codeExecution": {}})
        elif isinstance(tool, FileSearch):
            refuse_options(tool, path, "Gemini", ("vector_store_ids",))
            if not tool.store_names:
                raise UnsupportedContent(f"{path}.store_names: Gemini's file search needs a file search store")
            entry: dict[str, Any] = {"fileSearchStoreNames": list(tool.store_names)}
            if tool.max_num_results is not None:
                entry["topK"] = tool.max_num_results
            out.append({"fileSearch": entry})
        else:
            raise unsupported_tool(tool, path, "Gemini")
    return out


def _system_text(message: Message, i: int) -> str:
    refuse_unwritable_message(message, f"messages[{i}]", "Gemini")
    for j, part in enumerate(message.parts):
        if not isinstance(part, TextPart):
            raise _misplaced(part, i, j, "a system message (only text is folded into systemInstruction)")
    return message.text_content()


def _resolve_results(message: Message, i: int, calls: Mapping[str, tuple[str, bool]]) -> tuple[tuple[str, bool], ...]:
    """(name, echo the id?) per tool result of a user message. The name is the call's, found by ``call_id``:
    a result stored with a stale name (``"unknown"``, a tool renamed since) must not answer another
    function, and in a parallel turn one call's result must not go out under the other call's name. The
    result's own ``name`` stands in only when its call is not in the conversation."""
    out = []
    for j, part in enumerate(message.parts):
        if isinstance(part, ToolResultPart):
            name, minted = calls.get(part.call_id, ("", False))
            name = name or part.name
            if not name:
                raise UnsupportedContent(
                    f"messages[{i}].parts[{j}]: a tool result with no name whose call {part.call_id!r} is not "
                    "in the conversation (Gemini matches results by function name)"
                )
            out.append((name, minted))
    return tuple(out)


def _model_piece(message: Message, i: int, options: _Options) -> _Piece:
    refuse_unwritable_message(message, f"messages[{i}]", "Gemini")
    parts = message.parts
    out: list[dict[str, Any]] = []
    calls: list[tuple[str, str, bool]] = []
    pending: str | None = None  # a signature for the next part
    first_call = True
    replayed: set[str] = set()  # the ids of the provider-side calls sent (or carried) verbatim
    for j, part in enumerate(parts):
        if isinstance(part, ThinkingPart):
            if part.provider != PROVIDER:
                continue  # replay policy: another provider's (or nobody's) reasoning is not sent
            signature = part.signature if part.signature is not None and _is_base64(part.signature) else None
            signs_next = j + 1 < len(parts) and isinstance(parts[j + 1], (TextPart, ToolCallPart))
            if not part.text and signature is not None and signs_next:
                pending = signature
            elif part.text or signature is not None:
                thought: dict[str, Any] = {"text": part.text, "thought": True}
                if signature is not None:
                    thought["thoughtSignature"] = signature
                out.append(thought)
        elif isinstance(part, TextPart):
            if pending is not None:
                out.append({"text": part.text, "thoughtSignature": pending})
                pending = None
            elif part.text:  # Gemini refuses an empty text part
                out.append({"text": part.text})
        elif isinstance(part, ToolCallPart):
            minted = part.provider == PROVIDER
            call: dict[str, Any] = {"name": part.name, "args": _args(part.input)}
            if minted:
                call["id"] = part.id
            entry: dict[str, Any] = {"functionCall": call}
            if pending is not None:
                entry["thoughtSignature"] = pending
                pending = None
            elif first_call and options.fallback:
                entry["thoughtSignature"] = SKIP_SIGNATURE
            first_call = False
            out.append(entry)
            calls.append((part.id, part.name, minted))
        elif isinstance(part, ServerToolCallPart):
            raw = part.raw if part.provider == PROVIDER else None
            if raw is not None and "executableCode" in raw:
                out.append(raw)  # verbatim, its thoughtSignature included
                replayed.add(part.id)
            elif raw is not None and _METADATA_KEYS.intersection(raw):
                replayed.add(part.id)  # grounding metadata: Gemini's own history carries none (content only)
            else:
                out.append({"text": call_note(part)})
        elif isinstance(part, ServerToolResultPart):
            raw = part.raw if part.provider == PROVIDER else None
            if raw is not None and "codeExecutionResult" in raw and part.call_id in replayed:
                out.append(raw)
            elif raw is None and part.provider == PROVIDER and part.call_id in replayed:
                pass  # carried by its call (grounding metadata)
            else:
                out.append({"text": result_note(part)})
        elif isinstance(part, CompactionPart):
            continue  # Gemini has no compaction of its own; another provider's is never sent
        elif isinstance(part, (ImagePart, ToolResultPart)):
            raise _misplaced(part, i, j, "an assistant message")
        else:
            raise _unknown(part, i, j)
    return _Piece("model", out, calls=tuple(calls))


def _user_piece(message: Message, i: int, resolved: tuple[tuple[str, bool], ...], options: _Options) -> _Piece:
    refuse_unwritable_message(message, f"messages[{i}]", "Gemini")
    parts: list[dict[str, Any]] = []
    responses: list[tuple[str, dict[str, Any]]] = []
    media: list[dict[str, Any]] = []
    results = iter(resolved)
    for j, part in enumerate(message.parts):
        if isinstance(part, TextPart):
            if part.text:
                parts.append({"text": part.text})
        elif isinstance(part, ImagePart):
            parts.append(_inline(part.source))
        elif isinstance(part, ToolResultPart):
            name, minted = next(results)
            response: dict[str, Any] = {"name": name, "response": _response(part)}
            if minted:
                response["id"] = part.call_id
            nested = []
            for image in part.output.images():
                if options.response_parts and image.source.media_type in _RESPONSE_IMAGE_TYPES:
                    nested.append(_inline(image.source))
                else:
                    media.append(_inline(image.source))
            if nested:
                response["parts"] = nested
            responses.append((part.call_id, {"functionResponse": response}))
        elif isinstance(part, (ThinkingPart, ToolCallPart, ServerToolCallPart, ServerToolResultPart, CompactionPart)):
            raise _misplaced(part, i, j, "a user message")
        else:
            raise _unknown(part, i, j)
    return _Piece("user", parts, responses, media)


def _response(part: ToolResultPart) -> dict[str, Any]:
    # "Use "output" key to specify function output and "error" key to specify error details" (google-genai
    # types.FunctionResponse.response); the object form is required even for a plain string.
    return {"error" if part.failed() else "output": str(part.output)}


def _inline(source: ImageSource) -> dict[str, Any]:
    return {"inlineData": {"mimeType": source.media_type, "data": source.data}}


def _args(value: Any) -> Any:
    # functionCall.args is a JSON object (a protobuf Struct); another provider's call may hold any JSON value.
    if isinstance(value, dict):
        return value
    return {} if value is None else {"value": value}


def _is_base64(text: str) -> bool:
    """Gemini signatures are base64 bytes on the wire (a protobuf ``bytes`` field; google-genai's
    ``Part.thought_signature``); anything that is not canonical base64 cannot be one and is not replayed.

    Canonical as the SDK's own check reads it: standard or URL-safe alphabet, padding optional but never
    more than the length needs, and the unused low bits of the last character zero (``"QQ"``, not ``"QR"``).
    """
    body = text.rstrip("=")
    padding = len(text) - len(body)
    tail = len(body) % 4
    if not body or tail == 1 or _BASE64.fullmatch(body) is None:
        return False
    if padding > (4 - tail) % 4:
        return False
    unused_bits = {0: 0, 2: 4, 3: 2}[tail]
    return _B64_VALUE[body[-1]] & ((1 << unused_bits) - 1) == 0


def _misplaced(part: MessagePart, i: int, j: int, where: str) -> UnsupportedContent:
    kind = getattr(part, "type", type(part).__name__)
    return UnsupportedContent(f"messages[{i}].parts[{j}]: the {kind} part cannot be sent to Gemini in {where}")


def _unknown(part: MessagePart, i: int, j: int) -> UnsupportedContent:
    kind = getattr(part, "type", type(part).__name__)
    return UnsupportedContent(
        f"messages[{i}].parts[{j}]: unknown part type {kind!r} (from a newer release?); the Gemini codec "
        "knows text, image, tool_call, thinking and tool_result"
    )


# "Must start with a letter or an underscore. Must be a-z, A-Z, 0-9, or contain underscores, dots, colons and
# dashes, with a maximum length of 128" (google-genai FunctionDeclaration.name).
TOOL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_.:-]{0,127}")


def _declaration(tool: ToolSchema, path: str, dialect: SchemaDialect) -> dict[str, Any]:
    if not TOOL_NAME.fullmatch(tool.name):
        raise UnsupportedContent(
            f"{path}.name: {tool.name!r} is not a name Gemini accepts (a letter or _ first, then up to 127 of "
            "a-z, A-Z, 0-9, _, ., : and -)"
        )
    out: dict[str, Any] = {"name": tool.name}
    if tool.description:
        out["description"] = tool.description
    if dialect == "openapi":
        parameters = openapi_parameters(tool.input_schema, tool=tool.name)
        if parameters is not None:
            out["parameters"] = parameters
    elif dialect == "json_schema":
        out["parametersJsonSchema"] = json_schema_parameters(tool.input_schema)
    else:
        raise UnsupportedContent(f"schema_dialect must be 'json_schema' or 'openapi', not {dialect!r}")
    return out


def _function_calling(choice: ToolChoice) -> dict[str, Any]:
    if isinstance(choice, ForceTool):
        return {"mode": "ANY", "allowedFunctionNames": [choice.name]}
    if choice not in _TOOL_CHOICE:
        raise UnsupportedContent(f"tool_choice must be 'auto', 'none', 'required' or ForceTool, not {choice!r}")
    return {"mode": _TOOL_CHOICE[choice]}


def _generation_config(
    *,
    max_tokens: int | None,
    temperature: float | None,
    stop: Sequence[str] | None,
    effort: ReasoningEffort | None,
    include_thoughts: bool | None,
    modern: bool,
) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if max_tokens is not None:
        config["maxOutputTokens"] = max_tokens
    if temperature is not None:
        config["temperature"] = temperature
    if stop:
        config["stopSequences"] = list(stop)
    thinking: dict[str, Any] = {}
    if effort is not None:
        if effort not in _BUDGETS:
            raise UnsupportedContent(f"reasoning_effort must be one of {sorted(_BUDGETS)}, not {effort!r}")
        # Gemini 3 names its levels like ours (ai.google.dev/gemini-api/docs/thinking, "Thinking levels").
        thinking["thinkingLevel" if modern else "thinkingBudget"] = effort if modern else _BUDGETS[effort]
    if include_thoughts is None and effort is not None:
        include_thoughts = True
    if include_thoughts is not None:
        thinking["includeThoughts"] = include_thoughts
    if thinking:
        config["thinkingConfig"] = thinking
    return config


def _merge_into(target: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        current = target.get(key)
        if isinstance(value, Mapping) and isinstance(current, dict):
            merged = dict(current)
            _merge_into(merged, value)
            target[key] = merged
        else:
            target[key] = value


# --- reading a reply -------------------------------------------------------------------------------------


def parse_response(body: Mapping[str, Any]) -> ModelResponse:
    """A non-streamed ``generateContent`` reply as a :class:`~loopctl.response.ModelResponse`.

    An error body (``{"error": {...}}``) raises its typed :class:`~loopctl.errors.ProviderError`; a reply that
    is not a Gemini reply, or holds a part type this codec does not know, raises
    :class:`~loopctl.errors.ProviderProtocolError` naming it. Only candidate 0 is read.
    """
    if not isinstance(body, Mapping):
        raise ProviderProtocolError(f"expected a JSON object, got {type(body).__name__}", provider=PROVIDER)
    if not is_zero_valued(body.get("error")):  # a zero-valued error object (all "" and 0) is no error
        raise _error_from_body(body)
    reader = _ReplyReader()
    accumulator = StreamAccumulator(PROVIDER)
    for event in reader.chunk(body):
        accumulator.add(event)
    for event in reader.close():
        accumulator.add(event)
    return accumulator.finish()


class StreamDecoder(SSEStreamDecoder):
    """Decodes a ``streamGenerateContent?alt=sse`` body: ``feed(bytes) -> list[StreamEvent]``, ``finish()``.

    Each SSE event's data is one ``GenerateContentResponse`` chunk (events are separated by ``\\r\\n\\r\\n``, no
    event names, no ``[DONE]``); text and thoughts arrive as pieces, ``functionCall`` parts whole (or, on
    Vertex with streamed arguments, as ``partialArgs`` pieces), and the last chunk carries ``finishReason``.
    An ``{"error": ...}`` event raises from :meth:`feed`; an error body sent instead of a stream (Gemini
    answers a bad stream request with plain JSON under ``text/event-stream``) raises from :meth:`finish`; a
    stream that ends before a ``finishReason`` raises :class:`~loopctl.errors.StreamTruncated`.
    """

    provider = PROVIDER

    def __init__(self) -> None:
        super().__init__()
        self._reader = _ReplyReader()

    def on_event(self, event: ServerSentEvent) -> list[StreamEvent]:
        data = event.data
        # Gemini names no events and sends no [DONE]; anything of the kind is not a reply chunk.
        if event.event != "message" or not data.strip() or data.strip() == "[DONE]":
            return []
        try:
            # A functionCall's args are a JSON object in the event: read exactly (integers past 64 bits); the
            # other events, text and thoughts, go through orjson alone (loads_exact scans the text).
            body = loads_exact(data) if '"functionCall"' in data else orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ProviderProtocolError(
                f"a stream event whose data is not JSON: {data[:80]!r}", provider=PROVIDER
            ) from None
        if isinstance(body, dict) and not is_zero_valued(body.get("error")):
            raise _error_from_body(body)
        return self._reader.chunk(body)

    def error_body(self, body: Any) -> ProviderError:
        """The typed error for a JSON error body (or ``[{"error": ...}]``) sent in place of the stream; other
        JSON is a protocol error, not a server error."""
        first = body[0] if isinstance(body, list) and body else body
        if not (isinstance(first, Mapping) and isinstance(first.get("error"), Mapping)):
            return ProviderProtocolError("the stream body is JSON but not an error object", provider=PROVIDER)
        return _error_from_body(body)


def parse_stream(chunks: Iterable[bytes]) -> ModelResponse:
    """A whole ``streamGenerateContent?alt=sse`` body (chunks split anywhere) as a ``ModelResponse``."""
    return StreamDecoder.parse(chunks)


class _OpenCall:
    """A function call whose arguments still stream in (Vertex ``partialArgs`` / ``willContinue``).

    Each ``PartialArg`` sets the value at its ``jsonPath`` (RFC 9535, e.g. ``$.location``); a
    ``stringValue`` with ``willContinue`` is continued by the next pieces for the same path
    (google-genai ``types.PartialArg``).
    """

    __slots__ = ("args", "index", "strings")

    def __init__(self, index: int, args: dict[str, Any]) -> None:
        self.index = index
        self.args = args
        self.strings: set[str] = set()  # paths whose string value continues

    def apply(self, call: Mapping[str, Any], where: str) -> None:
        args = call.get("args")
        if isinstance(args, dict):
            self.args.update(args)
        pieces = call.get("partialArgs") or []
        if not isinstance(pieces, list):
            raise _protocol(f"{where}.partialArgs is not a list")
        for k, piece in enumerate(pieces):
            path = piece.get("jsonPath") if isinstance(piece, dict) else None
            if not isinstance(path, str):
                raise _protocol(f"{where}.partialArgs[{k}] has no jsonPath")
            tokens = _json_path(path, f"{where}.partialArgs[{k}]")
            if "stringValue" in piece:
                value: Any = piece["stringValue"]
                if not isinstance(value, str):
                    raise _protocol(f"{where}.partialArgs[{k}].stringValue is not a string")
                if path in self.strings:
                    previous = _get(self.args, tokens)
                    value = (previous if isinstance(previous, str) else "") + value
                if piece.get("willContinue") is True:
                    self.strings.add(path)
                else:
                    self.strings.discard(path)
            elif "numberValue" in piece:
                value = piece["numberValue"]
            elif "boolValue" in piece:
                value = piece["boolValue"]
            elif "nullValue" in piece:
                value = None
            else:
                continue
            _set(self.args, tokens, value, f"{where}.partialArgs[{k}]")


_PATH_SEGMENT = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]|\[\"((?:[^\"\\]|\\.)*)\"\]")


def _json_path(path: str, where: str) -> list[str | int]:
    """The segments of a normalized JSON path (``$.a.b[0]['c d']``)."""
    if not path.startswith("$"):
        raise _protocol(f"{where}: unsupported jsonPath {path!r}")
    tokens: list[str | int] = []
    pos = 1
    while pos < len(path):
        match = _PATH_SEGMENT.match(path, pos)
        if match is None:
            raise _protocol(f"{where}: unsupported jsonPath {path!r}")
        name, index, quoted, double = match.groups()
        if index is not None:
            tokens.append(int(index))
        elif name is not None:
            tokens.append(name)
        else:
            tokens.append(re.sub(r"\\(.)", r"\1", quoted if quoted is not None else double))
        pos = match.end()
    if not tokens:
        raise _protocol(f"{where}: a jsonPath must name an argument, got {path!r}")
    return tokens


def _get(container: Any, tokens: list[str | int]) -> Any:
    for token in tokens:
        if isinstance(token, int) and isinstance(container, list) and token < len(container):
            container = container[token]
        elif isinstance(token, str) and isinstance(container, dict):
            container = container.get(token)
        else:
            return None
    return container


def _set(root: dict[str, Any], tokens: list[str | int], value: Any, where: str) -> None:
    container: Any = root
    for token, following in zip(tokens, [*tokens[1:], None], strict=True):
        last = following is None
        if isinstance(token, str):
            if not isinstance(container, dict):
                raise _protocol(f"{where}: jsonPath goes through a value that is not an object")
            if last:
                container[token] = value
                return
            child = container.get(token)
            if not isinstance(child, (dict, list)):
                child = container[token] = {} if isinstance(following, str) else []
        else:
            if not isinstance(container, list):
                raise _protocol(f"{where}: jsonPath goes through a value that is not an array")
            if token > len(container):  # arrays stream in order: an index may only extend by one
                raise _protocol(f"{where}: jsonPath index {token} skips elements")
            if token == len(container):
                container.append(None)
            if last:
                container[token] = value
                return
            child = container[token]
            if not isinstance(child, (dict, list)):
                child = container[token] = {} if isinstance(following, str) else []
        container = child


class _ReplyReader:
    """Turns reply chunks (a whole non-streamed reply, or each stream event) into neutral stream events.

    Parts are kept as Gemini sent them, with two joins: consecutive unsigned text pieces form one
    ``TextPart``, consecutive unsigned thought pieces one ``ThinkingPart``. A part that carries a
    ``thoughtSignature`` is never joined with another ("Don't concatenate parts with signatures together",
    ai.google.dev/gemini-api/docs/thinking), except that an empty signed thought piece closes the thought
    run before it (the signature latched on it). Empty unsigned text is dropped.
    """

    __slots__ = (
        "_call",
        "_calls",
        "_code",
        "_finished",
        "_id",
        "_metadata",
        "_native",
        "_next",
        "_open",
        "_open_kind",
        "_started",
    )

    def __init__(self) -> None:
        self._native = 0  # provider-side parts so far, for their derived ids
        self._code: list[str] = []  # executableCode ids not answered yet, oldest first
        self._metadata: dict[str, Any] = {}  # the latest non-empty grounding / url-context metadata
        self._next = 0
        self._open = -1  # index of the part that takes more pieces, or -1
        self._open_kind = ""  # "text" or "thought"
        self._calls = 0
        self._call: _OpenCall | None = None
        self._id: str | None = None
        self._started = False
        self._finished = False

    def chunk(self, body: Any) -> list[StreamEvent]:
        if not isinstance(body, dict):
            raise _protocol(f"expected a JSON object, got {type(body).__name__}")
        events: list[StreamEvent] = []
        response_id = body.get("responseId")
        if not self._started or (isinstance(response_id, str) and response_id != self._id):
            self._started = True
            self._id = response_id if isinstance(response_id, str) else self._id
            model = body.get("modelVersion")
            events.append(ResponseStarted(self._id, model if isinstance(model, str) else None))
        candidates = body.get("candidates") or []
        if not isinstance(candidates, list):
            raise _protocol("candidates is not a list")
        candidate = next((c for c in candidates if isinstance(c, dict) and c.get("index", 0) == 0), None)
        if candidate is not None:
            content = candidate.get("content") or {}
            parts = (content.get("parts") or []) if isinstance(content, dict) else None
            if not isinstance(parts, list):
                raise _protocol("candidates[0].content.parts is not a list")
            for k, part in enumerate(parts):
                self._part(part, f"candidates[0].content.parts[{k}]", events)
        if candidate is not None:
            for key in _METADATA_KEYS:
                value = candidate.get(key)
                if isinstance(value, dict) and value:
                    self._metadata[key] = value
        usage = body.get("usageMetadata")
        if isinstance(usage, dict):
            events.append(UsageReported(_usage(usage)))
        reason = candidate.get("finishReason") if candidate is not None else None
        feedback = body.get("promptFeedback")
        if reason is None and not candidates and isinstance(feedback, dict):
            blocked = feedback.get("blockReason")  # the prompt itself was blocked: no candidates at all
            if isinstance(blocked, str):
                self._finish(blocked, events, refused=True)
        elif isinstance(reason, str):
            self._finish(reason, events)
        return events

    def close(self) -> list[StreamEvent]:
        """For a non-streamed reply: a reply without ``finishReason`` ends the turn there."""
        events: list[StreamEvent] = []
        if not self._finished:
            self._finish(None, events)
        return events

    def _finish(self, reason: str | None, events: list[StreamEvent], *, refused: bool = False) -> None:
        # A call still streaming at STOP is taken as complete; at the output limit it was cut off.
        self._end_call(events, cut=reason in _MAX_TOKENS)
        self._close(events)
        for key in ("groundingMetadata", "urlContextMetadata"):
            if key in self._metadata:
                for native in _metadata_parts(key, self._metadata.pop(key), self._native_id(key)):
                    self._start(native, events, "")
        self._finished = True
        stop = StopReason.REFUSAL if refused else _stop_reason(reason, self._calls > 0)
        events.append(ResponseFinished(stop, reason))

    # --- parts ---

    def _part(self, part: Any, where: str, events: list[StreamEvent]) -> None:
        if not isinstance(part, dict):
            raise _protocol(f"{where} is not an object")
        signature = part.get("thoughtSignature")
        if signature is not None and not isinstance(signature, str):
            raise _protocol(f"{where}.thoughtSignature is not a string")
        signature = signature or None
        if "functionCall" in part:
            self._function_call(part["functionCall"], signature, f"{where}.functionCall", events)
            return
        if "executableCode" in part or "codeExecutionResult" in part:
            self._code_part(part, where, events)
            return
        data = [k for k in part if k not in _PART_METADATA]
        if data and data != ["text"]:
            raise _protocol(f"{where}: unknown part type {data[0]!r}")
        text = part.get("text", "")
        if not isinstance(text, str):
            raise _protocol(f"{where}.text is not a string")
        if part.get("thought") is True:
            self._thought(text, signature, events)
        else:
            self._text(text, signature, events)

    def _text(self, text: str, signature: str | None, events: list[StreamEvent]) -> None:
        if signature is None:
            if not text:
                return
            if self._open_kind == "text":
                events.append(TextDelta(self._open, text))
            else:
                self._start(TextPart(text=text), events, "text")
            return
        # The signed part, even an empty one (Gemini 3 streams put the signature of a text answer on a last,
        # empty text piece): its carrier, then the part itself, taking no more pieces.
        self._start(ThinkingPart(text="", signature=signature, provider=PROVIDER), events, "")
        self._start(TextPart(text=text), events, "")

    def _thought(self, text: str, signature: str | None, events: list[StreamEvent]) -> None:
        if signature is None:
            if not text:
                return
            if self._open_kind == "thought":
                events.append(ThinkingDelta(self._open, text))
            else:
                self._start(ThinkingPart(text=text, provider=PROVIDER), events, "thought")
        elif not text and self._open_kind == "thought":
            events.append(ThinkingSignature(self._open, signature))
            self._close(events)
        else:
            self._start(ThinkingPart(text=text, signature=signature, provider=PROVIDER), events, "")

    def _function_call(self, call: Any, signature: str | None, where: str, events: list[StreamEvent]) -> None:
        if not isinstance(call, dict):
            raise _protocol(f"{where} is not an object")
        name = call.get("name")
        if self._call is not None and not name:  # the next piece of a call whose arguments stream in
            if signature is not None:
                raise _protocol(f"{where}: a thoughtSignature on a continued function call")
            self._call.apply(call, where)
            if call.get("willContinue") is not True:
                self._end_call(events)
            return
        self._end_call(events)
        if not name:
            if call:
                raise _protocol(f"{where} has no name")
            return  # an empty piece that closes nothing
        if not isinstance(name, str):
            raise _protocol(f"{where}.name is not a string")
        args = call.get("args")
        if args is None:
            args = {}
        elif not isinstance(args, dict):
            raise _protocol(f"{where}.args is not an object")
        call_id = call.get("id")
        minted = isinstance(call_id, str) and call_id != ""
        if not minted:
            # Deterministic, so results pair by id however the stream was split.
            call_id = f"{self._id or PROVIDER}_{self._calls}"
        self._calls += 1
        streaming = call.get("willContinue") is True or "partialArgs" in call
        if signature is not None:
            self._start(ThinkingPart(text="", signature=signature, provider=PROVIDER), events, "")
        part = ToolCallPart(
            id=call_id, name=name, input={} if streaming else args, provider=PROVIDER if minted else None
        )
        index = self._start(part, events, "")
        if streaming:
            self._call = _OpenCall(index, dict(args))
            self._call.apply({"partialArgs": call.get("partialArgs")}, where)
            if call.get("willContinue") is not True:
                self._end_call(events)
        else:
            events.append(PartFinished(index))

    def _native_id(self, kind: str) -> str:
        """A deterministic id for a provider-side part that came without one: ``<responseId>_<kind>_<n>``."""
        self._native += 1
        return f"{self._id or PROVIDER}_{kind}_{self._native}"

    def _code_part(self, part: dict[str, Any], where: str, events: list[StreamEvent]) -> None:
        """An ``executableCode`` or ``codeExecutionResult`` part (ai.google.dev/gemini-api/docs/code-execution):
        a server tool call or result, the part kept whole (its ``thoughtSignature`` too) as ``raw``. Gemini 3
        gives both an ``id``; older models pair a result with the code before it."""
        code = part.get("executableCode")
        if code is not None:
            if not isinstance(code, dict):
                raise _protocol(f"{where}.executableCode is not an object")
            code_id = code.get("id")
            call_id = code_id if isinstance(code_id, str) and code_id else self._native_id("code")
            self._code.append(call_id)
            call_input = {k: v for k, v in code.items() if k in ("language", "code")}
            self._start(
                ServerToolCallPart(id=call_id, name="code_execution", input=call_input, provider=PROVIDER, raw=part),
                events,
                "",
            )
            return
        result = part["codeExecutionResult"]
        if not isinstance(result, dict):
            raise _protocol(f"{where}.codeExecutionResult is not an object")
        result_id = result.get("id")
        if isinstance(result_id, str) and result_id:
            call_id = result_id
            if result_id in self._code:
                self._code.remove(result_id)
        else:
            call_id = self._code.pop(0) if self._code else self._native_id("code")
        outcome = result.get("outcome")
        output = result.get("output")
        self._start(
            ServerToolResultPart(
                call_id=call_id,
                name="code_execution",
                output=output if isinstance(output, str) else result_text(outcome or ""),
                provider=PROVIDER,
                is_error=True if isinstance(outcome, str) and outcome != "OUTCOME_OK" else None,
                raw=part,
            ),
            events,
            "",
        )

    def _end_call(self, events: list[StreamEvent], *, cut: bool = False) -> None:
        """Close the call whose arguments stream in. ``cut``: the output limit (``MAX_TOKENS``) ended the
        reply while they were still coming (``willContinue``); they are sent unterminated, so the accumulator
        records an :class:`~loopctl.response.InvalidToolCall` and the engine never runs a call with half its
        input."""
        call = self._call
        if call is not None:
            self._call = None
            text = dumps_exact(call.args)
            events.append(ToolCallDelta(call.index, text[:-1] if cut else text))
            events.append(PartFinished(call.index))

    def _start(self, part: MessagePart, events: list[StreamEvent], kind: str) -> int:
        """Start ``part`` at the next index; ``kind`` ("text"/"thought") if later pieces may join it."""
        self._close(events)
        index = self._next
        self._next += 1
        events.append(PartStarted(index, part))
        if kind:
            self._open, self._open_kind = index, kind
        elif not isinstance(part, ToolCallPart):
            events.append(PartFinished(index))
        return index

    def _close(self, events: list[StreamEvent]) -> None:
        if self._open_kind:
            events.append(PartFinished(self._open))
            self._open, self._open_kind = -1, ""


def _metadata_parts(key: str, metadata: dict[str, Any], call_id: str) -> list[MessagePart]:
    """A candidate's grounding or url-context metadata as a server tool call and its result: the call holds
    the metadata as ``raw`` (which the Gemini codec never sends back: a model ``Content`` has no place for it),
    the result the sources as text. ``google_search`` (``webSearchQueries``, web chunks), ``file_search``
    (chunks from ``retrievedContext``), ``url_context`` (``urlMetadata``)."""
    raw = {key: metadata}
    if key == "urlContextMetadata":
        urls = [u for u in metadata.get("urlMetadata") or () if isinstance(u, dict)]
        call_input: dict[str, Any] = {"urls": [u.get("retrievedUrl") for u in urls]}
        output = "\n".join(
            f"{result_text(u.get('retrievedUrl') or '')}: {result_text(u.get('urlRetrievalStatus') or '')}"
            for u in urls
        )
        name = "url_context"
    else:
        chunks = [c for c in metadata.get("groundingChunks") or () if isinstance(c, dict)]
        lines = []
        for chunk in chunks:
            source = chunk.get("web") or chunk.get("retrievedContext") or {}
            if isinstance(source, dict):
                label = " ".join(
                    piece
                    for piece in (
                        result_text(source.get("title") or ""),
                        f"<{result_text(source['uri'])}>" if source.get("uri") else "",
                    )
                    if piece
                )
                text = source.get("text")
                lines.append(
                    f"{label}: {result_text(text)}" if text and label else result_text(text) if text else label
                )
        queries = metadata.get("webSearchQueries")
        queries = queries if isinstance(queries, list) else []
        if any("retrievedContext" in c for c in chunks):
            name = "file_search"
        elif queries:
            name = "google_search"
        else:
            name = "grounding"
        call_input = {"queries": queries}
        output = "\n".join(lines)
    return [
        ServerToolCallPart(id=call_id, name=name, input=call_input, provider=PROVIDER, raw=raw),
        ServerToolResultPart(call_id=call_id, name=name, output=output, provider=PROVIDER),
    ]


# Keys of a Part that describe it rather than carry its data (google-genai types.Part).
_PART_METADATA = frozenset(
    {"thought", "thoughtSignature", "partMetadata", "videoMetadata", "mediaResolution", "mediaProcessing"}
)


def _stop_reason(reason: str | None, has_calls: bool) -> StopReason:
    """finishReason -> StopReason. MAX_TOKENS (and CONTINUATION) -> max_tokens; content filters and safety
    stops -> refusal; anything else -> tool_call when the reply holds calls, end_turn otherwise. Gemini
    reports a matched stop sequence as STOP, so stop_sequence never occurs."""
    if reason in _MAX_TOKENS:
        return StopReason.MAX_TOKENS
    if reason in _REFUSALS:
        return StopReason.REFUSAL
    return StopReason.TOOL_CALL if has_calls else StopReason.END_TURN


def _usage(usage: Mapping[str, Any]) -> Usage:
    """usageMetadata -> Usage: input = promptTokenCount (cached tokens included) + toolUsePromptTokenCount;
    output = candidatesTokenCount + thoughtsTokenCount; cache read = cachedContentTokenCount; reasoning =
    thoughtsTokenCount (google-genai types.GenerateContentResponseUsageMetadata). Gemini leaves zero counts out
    of a usageMetadata it sends, so a missing count there is 0; cache writes are not reported (``None``), and a
    reply without usageMetadata reports nothing."""

    def count(key: str) -> int:
        value = usage.get(key, 0)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int):
            raise _protocol(f"usageMetadata.{key} is not an integer")
        return value

    thoughts = count("thoughtsTokenCount")
    return Usage(
        input_tokens=count("promptTokenCount") + count("toolUsePromptTokenCount"),
        output_tokens=count("candidatesTokenCount") + thoughts,
        cache_read_tokens=count("cachedContentTokenCount"),
        reasoning_tokens=thoughts,
    )


def _protocol(what: str) -> ProviderProtocolError:
    return ProviderProtocolError(f"not a Gemini reply: {what}", provider=PROVIDER)


# --- errors ----------------------------------------------------------------------------------------------

_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?)s\s*")


def error_from_http(
    status: int,
    body: bytes | str | Mapping[str, Any] | None,
    headers: Mapping[str, str] | None = None,
    *,
    now: float | None = None,
) -> ProviderError:
    """The typed error for a non-2xx reply.

    Reads Google's error object ``{"error": {"code", "message", "status", "details"}}`` (also as the first
    element of a JSON array): ``status`` names the kind (``RESOURCE_EXHAUSTED`` -> RateLimited, ``UNAVAILABLE``
    -> Overloaded, ``NOT_FOUND`` -> ModelNotFound, ``UNAUTHENTICATED``/``PERMISSION_DENIED`` ->
    AuthenticationError); an ``ErrorInfo`` reason ``API_KEY_...`` is an authentication failure although
    Gemini sends it as 400 INVALID_ARGUMENT; a ``RetryInfo.retryDelay`` (``"30s"``) gives ``retry_after`` in
    seconds, else the ``Retry-After`` header; an invalid argument whose message says the input is over the
    token limit is a ContextOverflow.

    ``now`` is the current Unix time in seconds: with it, a ``Retry-After`` given as an HTTP-date (RFC 9110
    section 10.2.3, ``Wed, 21 Oct 2015 07:28:00 GMT``) becomes the seconds from ``now`` to that date (0 for a
    date past); the codec reads no clock, so without ``now`` only a number of seconds is read. The clients
    pass ``time.time()``.

    ``body`` is the error body as received (bytes, text or parsed JSON); ``headers`` the reply's headers; ``now``
    (seconds since the epoch) reads an HTTP-date ``Retry-After``.
    """
    data: Any = body
    text: str | None = None
    if isinstance(body, (bytes, bytearray)):
        body = bytes(body).decode("utf-8", "replace")
    if isinstance(body, str):
        text = body.strip() or None
        try:
            data = loads_exact(body)
        except orjson.JSONDecodeError:
            data = None
    if isinstance(data, list) and data and isinstance(data[0], Mapping):
        data = data[0]
    message, kind, reason, delay = text, None, None, None
    error = data.get("error") if isinstance(data, Mapping) else None
    if isinstance(error, str):
        message = error
    elif isinstance(error, Mapping):
        message = error.get("message") if isinstance(error.get("message"), str) else message
        kind = error.get("status") if isinstance(error.get("status"), str) else None
        for detail in error.get("details") or []:
            if not isinstance(detail, Mapping):
                continue
            detail_type = str(detail.get("@type", ""))
            if detail_type.endswith("RetryInfo"):
                delay = _seconds(detail.get("retryDelay"))
            elif detail_type.endswith("ErrorInfo") and isinstance(detail.get("reason"), str):
                reason = detail["reason"]
    if reason is not None and reason.startswith("API_KEY_"):
        kind = "UNAUTHENTICATED"
    retry_after = delay if delay is not None else parse_retry_after(headers, now=now)
    raw = data if data is not None else text
    return classify_http_error(PROVIDER, status, message=message, error_type=kind, body=raw, retry_after=retry_after)


def _seconds(value: Any) -> float | None:
    """A google.protobuf.Duration in JSON (``"30s"``, ``"1.5s"``) in seconds."""
    if isinstance(value, str):
        match = _DURATION.fullmatch(value)
        if match:
            return float(match.group(1))
    return None


def _error_from_body(body: Any) -> ProviderError:
    """The typed error for an error object received with a 2xx status or in place of a stream: the HTTP
    status is taken from ``error.code``."""
    error = body.get("error") if isinstance(body, Mapping) else None
    if isinstance(body, list) and body and isinstance(body[0], Mapping):
        error = body[0].get("error")
    code = error.get("code") if isinstance(error, Mapping) else None
    status = code if isinstance(code, int) and not isinstance(code, bool) else 500
    return error_from_http(status, body)


# --- NativeOutput: the response schema -------------------------------------------------------------------------


def response_schema(output: OutputFormat, dialect: SchemaDialect = "json_schema") -> dict[str, Any]:
    """The ``generationConfig`` fields for ``output`` (structured output,
    https://ai.google.dev/gemini-api/docs/structured-output, and ``GenerationConfig`` in
    https://ai.google.dev/api/generate-content#generationconfig): ``responseMimeType: "application/json"``
    with the schema in ``responseJsonSchema`` (JSON Schema), or, with the ``"openapi"`` dialect, converted to
    the OpenAPI subset in ``responseSchema``. Gemini has no strict switch: ``strict`` is not sent."""
    fields: dict[str, Any] = {"responseMimeType": "application/json"}
    if dialect == "openapi":
        converted = openapi_parameters(output.schema, tool=output.name)
        fields["responseSchema"] = converted if converted is not None else {"type": "OBJECT"}
    else:
        fields["responseJsonSchema"] = json_schema_parameters(output.schema)
    return fields
