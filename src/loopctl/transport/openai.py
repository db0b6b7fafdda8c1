"""OpenAI clients: Chat Completions (also any OpenAI-compatible server) and Responses, configured by the
official ``openai`` SDK (the ``openai`` extra) and sent as the codec's bytes through the SDK's HTTP client.

``POST {base_url}chat/completions`` and ``POST {base_url}responses``
(platform.openai.com/docs/api-reference/chat/create, .../responses/create); a streamed reply is read as
server-sent events.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit

from loopctl.errors import MissingAPIKey
from loopctl.providers import openai_chat, openai_responses
from loopctl.providers.native import NativeTool
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
        native_tools: Sequence[NativeTool] = (),
    ) -> None:
        super().__init__(model, codec_options, native_tools)
        sdk = import_sdk("openai", "openai")
        base = base_url or os.environ.get("OPENAI_BASE_URL")
        if not base or urlsplit(base).hostname == "api.openai.com":
            # OpenAI's own API: requests of one conversation share a prompt_cache_key, so they reach the
            # machines holding their prefix (platform.openai.com/docs/guides/prompt-caching); a compatible
            # server may not know the field, so it is sent there only when asked for.
            self.codec_options.setdefault("prompt_cache_key", "auto")
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


class OpenAIChatClient(_OpenAIClient):
    """OpenAI Chat Completions, or any OpenAI-compatible server (give ``base_url``).

    ``model``: the model name. ``api_key`` / ``base_url``: default ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``
    (with a ``base_url`` and no key, none is needed); a missing key raises
    :class:`~loopctl.errors.MissingAPIKey`. ``timeout``: seconds (connect, and between bytes of a reply).
    ``codec_options``: extra keyword arguments for :func:`loopctl.providers.openai_chat.build_request`
    (``strict_tools``, ``max_tokens_param``...). ``default_headers`` are sent with every request.
    :meth:`~loopctl.transport._http.HTTPClient.generate` gives the errors.
    """

    codec = openai_chat
    endpoint = "chat/completions"


class OpenAIResponsesClient(_OpenAIClient):
    """OpenAI Responses. Arguments as :class:`OpenAIChatClient`; ``codec_options`` go to
    :func:`loopctl.providers.openai_responses.build_request`."""

    codec = openai_responses
    endpoint = "responses"
