"""The transport: the only part of loopctl that talks to a provider over the network.

The codecs in :mod:`loopctl.providers` are pure (messages to a body, bytes to a reply); the clients here do
the I/O. Each client turns a :class:`~loopctl.providers.ModelRequest` into its codec's body, writes it once
to bytes, sends those bytes through one pooled HTTP connection per client (keep-alive), and feeds the reply's
bytes to the same codec's decoder, so what goes over the wire is exactly what the codecs build and the tests
check against recorded traffic. ``docs/transport.md`` says how, what a call costs, and the measurements.

- :class:`OpenAIChatClient` (Chat Completions, and any OpenAI-compatible server by ``base_url``),
  :class:`OpenAIResponsesClient` and :class:`AnthropicClient` are configured by the official SDKs (key, base
  URL and their environment variables, headers, timeouts, HTTP client), whose per-call request transform and
  retries are skipped: the engine retries, with one policy for every provider.
- :class:`OpenAIResponsesWebSocketClient` speaks the Responses API's WebSocket mode (``websockets``, the
  library the SDK's own WebSocket mode uses): one connection, each turn only its new input.
- :class:`GeminiClient` speaks REST over httpx2 (the HTTP client of the official SDKs).
- :func:`from_string` makes one from ``"provider:model"``.

Keys come from each provider's usual environment variables unless given (a missing key raises
:class:`~loopctl.errors.MissingAPIKey` naming the variable); a key never appears in a repr or an error
message. Every failure is a :class:`~loopctl.errors.ProviderError` subclass (see
:meth:`OpenAIChatClient.generate`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, TypeAlias

from loopctl._lazy import LazyModule
from loopctl.providers._spec import PREFIXES, parse_model_spec
from loopctl.transport._http import DEFAULT_TIMEOUT

if TYPE_CHECKING:  # the clients load on first use (a process that makes one client loads only its module)
    import loopctl.transport
    from loopctl.transport.anthropic import AnthropicClient
    from loopctl.transport.gemini import GeminiClient
    from loopctl.transport.openai import OpenAIChatClient, OpenAIResponsesClient
    from loopctl.transport.openai_ws import OpenAIResponsesWebSocketClient

    Client: TypeAlias = (
        OpenAIChatClient | OpenAIResponsesClient | OpenAIResponsesWebSocketClient | AnthropicClient | GeminiClient
    )
    """Any of the four clients (what :func:`from_string` returns)."""
else:  # the annotation of from_string reads Client through the package, which loads it (loopctl._lazy)
    loopctl = LazyModule("loopctl")

__all__ = [
    "DEFAULT_TIMEOUT",
    "AnthropicClient",
    "Client",
    "GeminiClient",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "OpenAIResponsesWebSocketClient",
    "from_string",
]

# Each client's module: imported when the client is first asked for (``loopctl.transport.GeminiClient``, or
# ``from_string("gemini:...")``), so that a process pays for the codecs and HTTP set-up of the clients it uses.
_MODULES = {
    "OpenAIChatClient": "loopctl.transport.openai",
    "OpenAIResponsesClient": "loopctl.transport.openai",
    "OpenAIResponsesWebSocketClient": "loopctl.transport.openai_ws",
    "AnthropicClient": "loopctl.transport.anthropic",
    "GeminiClient": "loopctl.transport.gemini",
}

_PREFIXES: dict[str, str] = {
    "openai": "OpenAIChatClient",
    "openai-responses": "OpenAIResponsesClient",
    "openai-responses-ws": "OpenAIResponsesWebSocketClient",
    "anthropic": "AnthropicClient",
    "gemini": "GeminiClient",
}
assert tuple(_PREFIXES) == PREFIXES


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif name == "Client":
        value = (
            __getattr__("OpenAIChatClient")
            | __getattr__("OpenAIResponsesClient")
            | __getattr__("OpenAIResponsesWebSocketClient")
            | __getattr__("AnthropicClient")
            | __getattr__("GeminiClient")
        )
    else:
        raise AttributeError(f"module 'loopctl.transport' has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def from_string(spec: str, **options: Any) -> loopctl.transport.Client:
    """A client from ``"provider:model"``: prefixes ``openai:`` (Chat Completions, or any OpenAI-compatible
    server with ``base_url=``), ``openai-responses:``, ``openai-responses-ws:`` (the Responses WebSocket mode),
    ``anthropic:`` and ``gemini:``; the model keeps any
    colons of its own (``openai:org/model:tag``). ``options`` go to the client (``api_key``, ``base_url``,
    ``timeout``, ``codec_options``, ``default_headers``...). Raises :class:`~loopctl.errors.InvalidModelSpec`
    (a ``ValueError``) for an unknown prefix or no model name, with a suggestion for another framework's
    spelling (``"gpt-5"``: did you mean ``"openai:gpt-5"``?), and :class:`~loopctl.errors.MissingAPIKey`
    when no key is found. Only the named client's module is imported.

    ``spec`` is ``"provider:model"``.
    """
    prefix, model = parse_model_spec(spec)
    client: Client = __getattr__(_PREFIXES[prefix])(model, **options)
    return client
