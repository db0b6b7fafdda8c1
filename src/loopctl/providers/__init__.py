"""Providers: pure codecs from messages to each provider's request and back; the clients that send them.

Codec modules: ``openai_chat`` (OpenAI Chat Completions and compatible servers), ``openai_responses``
(OpenAI Responses), ``anthropic`` (Anthropic Messages), ``gemini`` (Google Gemini). Each is pure: no network,
no clock. The shared types are in :mod:`loopctl.providers.base`.

The clients (:func:`from_string`, :class:`OpenAIChatClient`, :class:`OpenAIResponsesClient`,
:class:`AnthropicClient`, :class:`GeminiClient`) live in :mod:`loopctl.transport` and are importable from
here too; they are loaded on first use, so importing this package stays cheap (no HTTP client, no SDK).
:class:`FallbackClient` (a client made of several, tried in order: ``docs/guardrails.md``) lives in
:mod:`loopctl.engine.fallback`, whose retry policy it follows, and is importable from here the same way.
"""

from typing import TYPE_CHECKING

from loopctl.providers.base import (
    ConversionCache,
    EventCallback,
    ModelClient,
    ModelRequest,
    ReasoningEffort,
    SSEStreamDecoder,
)

if TYPE_CHECKING:  # what the lazy names below are, for type checkers
    from loopctl.engine.fallback import FallbackClient
    from loopctl.transport import (
        AnthropicClient,
        GeminiClient,
        OpenAIChatClient,
        OpenAIResponsesClient,
        from_string,
    )

__all__ = [
    "AnthropicClient",
    "ConversionCache",
    "EventCallback",
    "FallbackClient",
    "GeminiClient",
    "ModelClient",
    "ModelRequest",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "ReasoningEffort",
    "SSEStreamDecoder",
    "from_string",
]

_CLIENTS = frozenset({"AnthropicClient", "GeminiClient", "OpenAIChatClient", "OpenAIResponsesClient", "from_string"})


def __getattr__(name: str) -> object:
    # The clients pull in httpx2 (and, when used, an SDK); import them only when asked for.
    if name == "FallbackClient":
        from loopctl.engine.fallback import FallbackClient

        return FallbackClient
    if name in _CLIENTS:
        import loopctl.transport

        return getattr(loopctl.transport, name)
    raise AttributeError(f"module 'loopctl.providers' has no attribute {name!r}")
