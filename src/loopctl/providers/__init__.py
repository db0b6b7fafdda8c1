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

__all__ = ["ConversionCache", "EventCallback", "ModelClient", "ModelRequest", "ReasoningEffort", "SSEStreamDecoder"]
