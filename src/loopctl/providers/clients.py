"""The clients' former home, kept so existing imports work: everything here is :mod:`loopctl.transport`'s."""

from __future__ import annotations

from loopctl.transport import (
    DEFAULT_TIMEOUT,
    AnthropicClient,
    GeminiClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    from_string,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "AnthropicClient",
    "GeminiClient",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "from_string",
]
