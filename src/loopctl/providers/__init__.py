"""Providers: pure codecs from messages to each provider's request and back, and the clients that send them.

Codec modules: ``openai_chat`` (OpenAI Chat Completions and compatible servers), ``openai_responses``
(OpenAI Responses), ``anthropic`` (Anthropic Messages), ``gemini`` (Google Gemini). Each is pure: no network,
no clock. The shared types are in :mod:`loopctl.providers.base`.
"""

from loopctl.providers.base import (
    ConversionCache,
    EventCallback,
    ModelClient,
    ModelRequest,
    ReasoningEffort,
    SSEStreamDecoder,
)

__all__ = [
    "AnthropicClient",
    "ConversionCache",
    "EventCallback",
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
    # The clients pull in httpx (and, when used, an SDK); import them only when asked for.
    if name in _CLIENTS:
        from loopctl.providers import clients

        return getattr(clients, name)
    raise AttributeError(f"module 'loopctl.providers' has no attribute {name!r}")
