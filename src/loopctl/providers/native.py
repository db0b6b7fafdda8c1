"""Provider-native (built-in) tools: the typed tool objects a user turns on, and what the codecs share to carry
what a provider ran on its own side.

A built-in tool runs at the provider, inside the model call: the reply holds the call and its result (a
:class:`~loopctl.message.ServerToolCallPart` and a :class:`~loopctl.message.ServerToolResultPart`), and the
engine runs nothing. Turn one on by giving its object to a client (``native_tools=[WebSearch()]``) or in a
:class:`~loopctl.providers.ModelRequest`; each codec encodes it as its provider's tool, or raises
:class:`~loopctl.errors.UnsupportedContent` before anything is sent when the provider has no such tool or
cannot honour an option. What each provider offers: ``docs/providers/*.md``, "Built-in tools".

How a native part crosses providers (``docs/providers.md``, "Provider-native parts"): replayed verbatim
(its ``raw`` block, ids, encrypted content and signatures kept) to the provider that ran it; sent to any other
provider, or when its ``raw`` is gone (pruned), as a short note in the assistant's text
(:func:`call_note`, :func:`result_note`), so a request never carries a block its API does not know. A
:class:`~loopctl.message.CompactionPart` goes only to its provider.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any, ClassVar, Literal, TypeAlias, Union

from loopctl._frozen import dataclass
from loopctl.errors import UnsupportedContent
from loopctl.message import (
    CompactionPart,
    Message,
    ServerToolCallPart,
    ServerToolResultPart,
)
from loopctl.message.model import _display_json

__all__ = [
    "CodeExecution",
    "FileSearch",
    "ImageGeneration",
    "NativeTool",
    "RemoteMCP",
    "ToolSearch",
    "UserLocation",
    "WebFetch",
    "WebSearch",
    "call_note",
    "check_native_tools",
    "native_parts",
    "refuse_options",
    "result_note",
    "result_text",
    "unsupported_tool",
]


@dataclass(frozen=True, slots=True)
class UserLocation:
    """An approximate user location for web search (OpenAI and Anthropic ``user_location``, ``type:
    "approximate"``): ``city``, ``region``, ``country`` (ISO 3166-1 alpha-2), ``timezone`` (IANA)."""

    city: str | None = None
    region: str | None = None
    country: str | None = None
    timezone: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"type": "approximate", ...}`` with the fields that are set."""
        out: dict[str, Any] = {"type": "approximate"}
        for name in ("city", "region", "country", "timezone"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@dataclass(frozen=True, slots=True)
class WebSearch:
    """Search the web at the provider. OpenAI Responses ``web_search``, Anthropic ``web_search_20250305``,
    Gemini ``googleSearch``.

    ``max_uses`` (Anthropic), ``allowed_domains`` (OpenAI ``filters.allowed_domains``, Anthropic),
    ``blocked_domains`` (Anthropic), ``user_location`` (OpenAI, Anthropic), ``search_context_size`` (OpenAI:
    ``"low"``, ``"medium"``, ``"high"``). An option a provider cannot take is refused there."""

    max_uses: int | None = None
    allowed_domains: Sequence[str] | None = None
    blocked_domains: Sequence[str] | None = None
    user_location: UserLocation | None = None
    search_context_size: Literal["low", "medium", "high"] | None = None

    kind: ClassVar[str] = "web search"


@dataclass(frozen=True, slots=True)
class WebFetch:
    """Fetch a page the conversation named, at the provider. Anthropic ``web_fetch_20250910``, Gemini
    ``urlContext``. ``max_uses``, ``allowed_domains``, ``blocked_domains``, ``citations`` (cite the fetched
    document), ``max_content_tokens``: Anthropic only."""

    max_uses: int | None = None
    allowed_domains: Sequence[str] | None = None
    blocked_domains: Sequence[str] | None = None
    citations: bool | None = None
    max_content_tokens: int | None = None

    kind: ClassVar[str] = "web fetch"


@dataclass(frozen=True, slots=True)
class CodeExecution:
    """Run code in the provider's sandbox. OpenAI Responses ``code_interpreter`` (``container``: a container
    id, or a new one made for the request with ``file_ids``), Anthropic ``code_execution_20250825``, Gemini
    ``codeExecution``."""

    container: str | None = None
    file_ids: Sequence[str] = ()

    kind: ClassVar[str] = "code execution"


@dataclass(frozen=True, slots=True)
class FileSearch:
    """Search the user's uploaded files at the provider. OpenAI Responses ``file_search``
    (``vector_store_ids``, ``max_num_results``), Gemini ``fileSearch`` (``store_names``:
    ``fileSearchStores/…``)."""

    vector_store_ids: Sequence[str] = ()
    store_names: Sequence[str] = ()
    max_num_results: int | None = None

    kind: ClassVar[str] = "file search"


@dataclass(frozen=True, slots=True)
class RemoteMCP:
    """Let the provider call a remote MCP server's tools itself. OpenAI Responses ``mcp`` tool (``server_label``
    = ``name``, ``server_url`` = ``url``, ``require_approval``: ``"never"`` by default, as loopctl has no
    approval round trip for provider-side calls; ``headers``, ``description``), Anthropic's MCP connector
    (``mcp_servers`` with ``type: "url"``, ``authorization_token``; beta ``mcp-client-2025-04-04``).
    ``allowed_tools`` limits the tools used (both); ``authorization`` is the bearer token."""

    name: str
    url: str
    authorization: str | None = None
    allowed_tools: Sequence[str] | None = None
    headers: Mapping[str, str] | None = None
    description: str | None = None
    require_approval: Literal["never", "always"] = "never"

    kind: ClassVar[str] = "remote MCP"

    def __repr__(self) -> str:
        # The token is a secret: never in a repr (or an error quoting one).
        token = "<set>" if self.authorization else None
        return f"RemoteMCP(name={self.name!r}, url={self.url!r}, authorization={token!r})"


@dataclass(frozen=True, slots=True)
class ToolSearch:
    """Let the model search a large tool list at the provider. OpenAI Responses ``tool_search``; Anthropic
    ``tool_search_tool_regex_20251119`` or ``tool_search_tool_bm25_20251119`` (``mode``, regex by default;
    OpenAI has no modes)."""

    mode: Literal["regex", "bm25"] | None = None

    kind: ClassVar[str] = "tool search"


@dataclass(frozen=True, slots=True)
class ImageGeneration:
    """Generate images at the provider. OpenAI Responses ``image_generation``; ``options`` are its settings
    (``size``, ``quality``, ``output_format``...) sent as they are."""

    options: Mapping[str, Any] = field(default_factory=dict)

    kind: ClassVar[str] = "image generation"


NativeTool: TypeAlias = Union[WebSearch, WebFetch, CodeExecution, FileSearch, RemoteMCP, ToolSearch, ImageGeneration]
"""Any built-in tool object."""

NATIVE_TOOLS: tuple[type, ...] = (
    WebSearch,
    WebFetch,
    CodeExecution,
    FileSearch,
    RemoteMCP,
    ToolSearch,
    ImageGeneration,
)


def unsupported_tool(tool: object, path: str, api: str, why: str = "") -> UnsupportedContent:
    """The error for a built-in tool (or one of its options) ``api`` cannot carry.

    ``path`` is where ``tool`` sits in the request (``native_tools[0]``); ``why`` is added to the message when
    given.
    """
    if not isinstance(tool, NATIVE_TOOLS):
        return UnsupportedContent(
            f"{path}: {type(tool).__name__} is not a built-in tool (expected WebSearch, WebFetch, CodeExecution, "
            "FileSearch, RemoteMCP, ToolSearch or ImageGeneration)"
        )
    detail = f": {why}" if why else ""
    return UnsupportedContent(f"{path}: {api} has no built-in {getattr(tool, 'kind', '')} tool{detail}")


def refuse_options(tool: object, path: str, api: str, names: Sequence[str]) -> None:
    """Raise :class:`~loopctl.errors.UnsupportedContent` when one of the options ``names`` of ``tool`` is set:
    ``api`` cannot honour it, and dropping it silently would do something else than asked.

    ``path`` is where ``tool`` sits in the request (``native_tools[0]``), named in the error.
    """
    for name in names:
        value = getattr(tool, name)
        if value is not None and value not in ((), {}):
            raise UnsupportedContent(
                f"{path}.{name}: {api}'s {getattr(tool, 'kind', 'built-in')} tool has no such option"
            )


def check_native_tools(tools: Sequence[object], api: str) -> None:
    """Refuse anything in ``tools`` that is not a built-in tool object.

    ``api`` names the API in the error (``"OpenAI Chat Completions"``); raises
    :class:`~loopctl.errors.UnsupportedContent`.
    """
    for i, tool in enumerate(tools):
        if not isinstance(tool, NATIVE_TOOLS):
            raise unsupported_tool(tool, f"native_tools[{i}]", api)


# --- crossing providers ---------------------------------------------------------------------------------------


def call_note(part: ServerToolCallPart) -> str:
    """The text another provider reads for a provider-side call: ``[web_search ran at anthropic with input:
    {"query":"…"}]`` (the input as compact JSON, keys sorted).

    ``part`` is the provider-side call.
    """
    where = f" on {part.server}" if part.server else ""
    return f"[{part.name}{where} ran at {part.provider} with input: {_display_json(part.input)}]"


def result_note(part: ServerToolResultPart) -> str:
    """The text another provider reads for a provider-side result: ``[web_search result: …]`` (``error`` for a
    failed call).

    ``part`` is the provider-side result.
    """
    kind = "error" if part.failed() else "result"
    return f"[{part.name} {kind}: {part.output}]"


def native_parts(message: Message) -> bool:
    """True when ``message`` holds a provider-native part (a cheap test codecs use to keep the common path
    fast)."""
    return any(isinstance(p, (ServerToolCallPart, ServerToolResultPart, CompactionPart)) for p in message.parts)


def result_text(value: Any, limit: int | None = None) -> str:
    """A JSON value as readable text: a string as it is, anything else as compact JSON.

    ``value`` is the JSON value; ``limit``: at most this many characters, then ``…`` (``None``: no limit).
    """
    text = value if isinstance(value, str) else _display_json(value)
    if limit is not None and len(text) > limit:
        return text[:limit] + "…"
    return text
