"""What the wire encoders share: the API names, the reply context, the encoded reply, delta splitting,
signature minting and the choice of parts a provider would send.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import field
from typing import Any, Literal, TypeAlias, Union

import orjson

from loopctl._frozen import dataclass
from loopctl.errors import UnsupportedContent
from loopctl.message import (
    CompactionPart,
    Message,
    ServerToolCallPart,
    ServerToolResultPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
)
from loopctl.response import ModelResponse, Usage

__all__ = [
    "API",
    "APIS",
    "THINKING_PROVIDER",
    "Encoded",
    "ReplyContext",
    "ReplyPart",
    "dumps",
    "fake_signature",
    "reply_parts",
    "split",
    "tool_arguments",
]

ReplyPart: TypeAlias = Union[
    TextPart, ThinkingPart, ToolCallPart, ServerToolCallPart, ServerToolResultPart, CompactionPart
]
"""A part a model reply carries."""

API: TypeAlias = Literal["openai-chat", "openai-responses", "anthropic", "gemini"]
"""The four wire formats the fake server speaks."""

APIS: tuple[API, ...] = ("openai-chat", "openai-responses", "anthropic", "gemini")
"""Every :data:`API`, in the order the fake server's routes list them."""

THINKING_PROVIDER: Mapping[str, str] = {
    "openai-chat": "openai-compatible",
    "openai-responses": "openai",
    "anthropic": "anthropic",
    "gemini": "gemini",
}
"""Which ``ThinkingPart.provider`` each API mints (``docs/wire-format.md``, "Extension keys"). Chat
Completions: ``"openai-compatible"``, since api.openai.com never returns reasoning there and DeepSeek-style
servers send ``reasoning_content``."""


@dataclass(frozen=True, slots=True)
class ReplyContext:
    """What an encoder needs besides the reply.

    ``model``: the model name to report (a ``ModelResponse.model`` wins); ``token``: a unique id fragment for
    this reply (ids become ``msg_<token>``, ``chatcmpl-<token>``, ``resp_<token>``...); ``created``: Unix
    time in seconds; ``request``: the parsed request body (read for ``stream_options``, ``include``,
    ``stop_sequences``, ``tools`` and the settings a Responses reply echoes).
    """

    model: str
    token: str = "fake0001"
    created: int = 1_700_000_000
    request: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Encoded:
    """A reply ready to send: HTTP ``status``, ``content_type``, extra ``headers`` and the body in
    ``pieces`` (one piece for a JSON body; one SSE event per piece for a stream, which ``stream`` marks)."""

    status: int
    content_type: str
    pieces: tuple[bytes, ...]
    stream: bool = False
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def body(self) -> bytes:
        """All pieces joined."""
        return b"".join(self.pieces)


MAX_PIECES = 64
"""The most deltas :func:`split` cuts one text into: a long text goes in bigger pieces, so a stream played
with a delay between events (the demo's ``LOOPCTL_DEMO_DELAY``) takes at most this many delays per block."""


def split(text: str, size: int = 12) -> list[str]:
    """``text`` cut into pieces of at most ``size`` characters (bigger for a text of more than
    :data:`MAX_PIECES` such pieces: then into :data:`MAX_PIECES` pieces), and into at least two pieces when it
    has two or more characters, so every decoder has to join deltas. ``""`` gives ``[""]``."""
    if len(text) < 2:
        return [text]
    size = max(1, min(max(size, -(-len(text) // MAX_PIECES)), (len(text) + 1) // 2))
    return [text[i : i + size] for i in range(0, len(text), size)]


def fake_signature(text: str) -> str:
    """A deterministic stand-in for a provider's signature over ``text``: standard base64 of its SHA-256,
    shaped like the real opaque base64 blobs. Used when a scripted thinking part has no signature but the
    provider always signs (Anthropic ``thinking``; OpenAI ``encrypted_content`` when the request asks)."""
    return base64.b64encode(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()).decode()


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON (the OpenAI and Anthropic stream style)."""
    return orjson.dumps(value)


def reply_parts(api: str, message: Message) -> list[ReplyPart]:
    """The parts ``api`` would send: thinking only when its ``provider`` is that API's
    :data:`THINKING_PROVIDER` (like a real provider, which mints only its own); text and tool calls as they
    are; the provider-native parts of that API's provider with their ``raw`` blocks, sent as those blocks
    (what the provider ran itself, as it reported it). An image or a tool result is no model output, nor is a
    native part of another provider or one without its block:
    :class:`~loopctl.errors.UnsupportedContent`."""
    out: list[ReplyPart] = []
    for i, part in enumerate(message.parts):
        if isinstance(part, ThinkingPart):
            if part.provider == THINKING_PROVIDER[api]:
                out.append(part)
        elif isinstance(part, (TextPart, ToolCallPart)):
            out.append(part)
        elif isinstance(part, (ServerToolCallPart, ServerToolResultPart, CompactionPart)):
            if part.provider != THINKING_PROVIDER[api]:
                raise UnsupportedContent(f"parts[{i}]: {api} does not reply with a part {part.provider} ran")
            if part.raw is None and not (isinstance(part, ServerToolResultPart) and api != "anthropic"):
                raise UnsupportedContent(f"parts[{i}]: a {part.type!r} part without its raw block cannot be sent")
            out.append(part)
        else:
            raise UnsupportedContent(f"parts[{i}]: a model reply cannot carry a {part.type!r} part")
    return out


def tool_arguments(response: ModelResponse, call: ToolCallPart) -> tuple[str, bool]:
    """``(JSON text, cut)``: the call's arguments as JSON text, or, for a call listed in
    ``response.invalid_tool_calls``, its raw cut-off text with ``cut=True`` (a ``max_tokens`` stop in the
    middle of the call)."""
    for bad in response.invalid_tool_calls:
        if bad.id == call.id:
            return bad.arguments, True
    return orjson.dumps(call.input).decode(), False


@dataclass(frozen=True, slots=True)
class Counts:
    """A reply's token counts as a provider's wire reports them: every count a number."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def counted(usage: Usage | Counts) -> Counts:
    """``usage`` with every count a number, as the wire has it (a count the script left out is 0)."""
    if isinstance(usage, Counts):
        return usage
    return Counts(
        usage.input_tokens or 0,
        usage.output_tokens or 0,
        usage.cache_read_tokens or 0,
        usage.cache_write_tokens or 0,
        usage.reasoning_tokens or 0,
    )
