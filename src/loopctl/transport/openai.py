"""OpenAI clients: Chat Completions (also any OpenAI-compatible server) and Responses, configured by the
official ``openai`` SDK (the ``openai`` extra) and sent as the codec's bytes through the SDK's HTTP client.

``POST {base_url}chat/completions`` and ``POST {base_url}responses``
(platform.openai.com/docs/api-reference/chat/create, .../responses/create); a streamed reply is read as
server-sent events.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit

from loopctl.errors import MissingAPIKey
from loopctl.providers import openai_chat, openai_responses
from loopctl.transport._http import DEFAULT_TIMEOUT, HTTPClient
from loopctl.transport._sdk import import_sdk, sdk_headers

__all__ = ["OpenAIChatClient", "OpenAIResponsesClient"]


class _OpenAIClient(HTTPClient):
    """What the two OpenAI clients share: an ``AsyncOpenAI`` for configuration and its HTTP client."""

    provider = "openai"
    endpoint: ClassVar[str] = ""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        codec_options: Mapping[str, Any] | None = None,
        default_headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(model, codec_options)
        sdk = import_sdk("openai", "openai")
        base = base_url or os.environ.get("OPENAI_BASE_URL")
        # A local OpenAI-compatible server usually needs no key; the SDK still wants a non-empty one.
        key = api_key or os.environ.get("OPENAI_API_KEY") or ("not-needed" if base else None)
        if not key:
            raise MissingAPIKey("openai", "OPENAI_API_KEY")
        http = sdk.DefaultAsyncHttpxClient(timeout=timeout)
        self._sdk_client = sdk.AsyncOpenAI(
            api_key=key,
            base_url=base,
            timeout=timeout,
            max_retries=0,
            default_headers=dict(default_headers or {}),
            http_client=http,
        )
        url = f"{str(self._sdk_client.base_url).rstrip('/')}/{self.endpoint}"
        self._connect(http, own=True, headers=sdk_headers(self._sdk_client), url=url, stream_url=url, secret=key)
        if self.codec is openai_chat and "max_tokens_param" not in self.codec_options and not _openai_host(url):
            # OpenAI-compatible servers read the output limit from `max_tokens`: Ollama knows no other
            # (openai/openai.go, ChatCompletionRequest.MaxTokens), llama.cpp reads it as `n_predict`;
            # `max_completion_tokens` is OpenAI's own name, which they may ignore and generate on.
            self.codec_options["max_tokens_param"] = "max_tokens"


def _openai_host(url: str) -> bool:
    """Whether ``url`` is OpenAI's own API (or Azure OpenAI's), whose reasoning models refuse ``max_tokens``."""
    host = urlsplit(url).hostname or ""
    return host == "api.openai.com" or host.endswith(".openai.azure.com")


class OpenAIChatClient(_OpenAIClient):
    """OpenAI Chat Completions, or any OpenAI-compatible server (give ``base_url``).

    ``model``: the model name. ``api_key`` / ``base_url``: default ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``
    (with a ``base_url`` and no key, none is needed); a missing key raises
    :class:`~loopctl.errors.MissingAPIKey`. ``timeout``: seconds (connect, and between bytes of a reply).
    ``codec_options``: extra keyword arguments for :func:`loopctl.providers.openai_chat.build_request`
    (``strict_tools``, ``max_tokens_param``...; at a server other than OpenAI's own API the output limit is
    sent as ``max_tokens``, the name compatible servers read, unless ``max_tokens_param`` says otherwise).
    ``default_headers`` are sent with every request.
    :meth:`~loopctl.transport._http.HTTPClient.generate` gives the errors.
    """

    codec = openai_chat
    endpoint = "chat/completions"


class OpenAIResponsesClient(_OpenAIClient):
    """OpenAI Responses. Arguments as :class:`OpenAIChatClient`; ``codec_options`` go to
    :func:`loopctl.providers.openai_responses.build_request`."""

    codec = openai_responses
    endpoint = "responses"
