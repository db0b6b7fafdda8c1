"""The Anthropic client: Messages, configured by the official ``anthropic`` SDK (the ``anthropic`` extra) and
sent as the codec's bytes through the SDK's HTTP client.

``POST {base_url}/v1/messages`` (docs.anthropic.com/en/api/messages); a streamed reply is read as
server-sent events (docs.anthropic.com/en/api/messages-streaming).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from loopctl.errors import MissingAPIKey
from loopctl.providers import anthropic
from loopctl.providers.base import ModelRequest
from loopctl.providers.native import NativeTool
from loopctl.transport._http import DEFAULT_TIMEOUT, HTTPClient, check_base_url
from loopctl.transport._sdk import import_sdk, sdk_headers

__all__ = ["AnthropicClient"]


class AnthropicClient(HTTPClient):
    """Anthropic Messages.

    ``api_key`` / ``base_url``: default ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL`` (with a ``base_url`` and
    no key, none is needed and none is sent, as for :class:`~loopctl.transport.OpenAIChatClient`); a missing
    key raises :class:`~loopctl.errors.MissingAPIKey`. ``timeout``: seconds (connect, and between bytes of a reply).
    ``codec_options`` go to :func:`loopctl.providers.anthropic.build_request` (``prompt_cache``...).
    ``default_headers`` are sent with every request (``anthropic-beta``, for one). ``native_tools``: built-in
    tools (:mod:`loopctl.providers.native`) on every request; the beta flags a request needs
    (:func:`loopctl.providers.anthropic.beta_flags`) are added to its ``anthropic-beta`` header.
    :meth:`~loopctl.transport._http.HTTPClient.generate` gives the errors.

    ``model`` is the model id (``claude-sonnet-4-5``).
    """

    provider = "anthropic"
    codec = anthropic

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
        sdk = import_sdk("anthropic", "anthropic")
        base = base_url or os.environ.get("ANTHROPIC_BASE_URL")
        if base:
            check_base_url(base, "base_url" if base_url else "ANTHROPIC_BASE_URL")
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        # A server of one's own (llama.cpp's Anthropic-compatible endpoint, a gateway) usually needs no key, as
        # for the OpenAI clients: with a base URL and no key, the request goes without one.
        if not key and not base:
            raise MissingAPIKey("anthropic", "ANTHROPIC_API_KEY")
        http = sdk.DefaultAsyncHttpxClient(timeout=timeout)
        self._sdk_client = sdk.AsyncAnthropic(
            api_key=key or None,
            base_url=base,
            timeout=timeout,
            max_retries=0,
            default_headers=dict(default_headers or {}),
            http_client=http,
        )
        url = f"{str(self._sdk_client.base_url).rstrip('/')}/v1/messages"
        self._connect(http, own=True, headers=sdk_headers(self._sdk_client), url=url, stream_url=url, secret=key or "")

    def request_headers(self, request: ModelRequest) -> Mapping[str, str]:
        """The client's headers, with the ``anthropic-beta`` flags ``request`` needs added to any given."""
        flags = anthropic.beta_flags(**{**self.codec_options, **self._with_native(request).options()})
        if not flags:
            return self._headers
        headers = {k: v for k, v in self._headers.items() if k.lower() != "anthropic-beta"}
        given = [
            flag.strip()
            for k, v in self._headers.items()
            if k.lower() == "anthropic-beta"
            for flag in v.split(",")
            if flag.strip()
        ]
        headers["anthropic-beta"] = ",".join(dict.fromkeys([*given, *flags]))
        return headers
