"""The four real clients pointed at a :class:`~loopctl.testing.FakeProviderServer`, for end-to-end tests.

``KINDS`` are the ``from_string`` prefixes; each maps to the wire API the fake server speaks for it, the
``ThinkingPart.provider`` that API mints, and the key of the request body that holds the conversation.
"""

from __future__ import annotations

from typing import Any

from loopctl.testing import FakeProviderServer
from loopctl.testing.wire import API, THINKING_PROVIDER
from loopctl.transport import AnthropicClient, GeminiClient, OpenAIChatClient, OpenAIResponsesClient

KINDS = ("openai", "openai-responses", "anthropic", "gemini")

API_OF: dict[str, API] = {
    "openai": "openai-chat",
    "openai-responses": "openai-responses",
    "anthropic": "anthropic",
    "gemini": "gemini",
}

THINKING_OF = {kind: THINKING_PROVIDER[api] for kind, api in API_OF.items()}
"""The ``ThinkingPart.provider`` each client's API mints (Chat: ``openai-compatible``)."""

MODEL_OF = {"openai": "gpt-4o", "openai-responses": "gpt-5", "anthropic": "claude-test-1", "gemini": "gemini-3-pro"}

CONVERSATION_KEY = {"openai": "messages", "openai-responses": "input", "anthropic": "messages", "gemini": "contents"}
"""Where each API's request body holds the conversation."""

Client = OpenAIChatClient | OpenAIResponsesClient | AnthropicClient | GeminiClient


def base_url_for(kind: str, base: str) -> str:
    """The base URL a client of ``kind`` takes for a server at ``base`` (the openai SDK appends no ``/v1``)."""
    return f"{base}/v1" if kind.startswith("openai") else base


def make_client(kind: str, server: FakeProviderServer | str, *, api_key: str | None = "test-key", **kw: Any) -> Client:
    """A client of ``kind`` talking to ``server`` (or a base URL), with a test key unless ``api_key=None``."""
    base = server if isinstance(server, str) else server.base_url
    cls = {
        "openai": OpenAIChatClient,
        "openai-responses": OpenAIResponsesClient,
        "anthropic": AnthropicClient,
        "gemini": GeminiClient,
    }[kind]
    client: Client = cls(MODEL_OF[kind], api_key=api_key, base_url=base_url_for(kind, base), **kw)
    return client
