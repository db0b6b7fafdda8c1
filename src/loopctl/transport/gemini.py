"""The Gemini client: ``generateContent`` / ``streamGenerateContent?alt=sse`` over httpx (no SDK: google-genai
builds its requests from its own types and has no public way to send a prepared REST body and return the
raw event stream).

``POST {base_url}/{api_version}/models/{model}:generateContent`` and ``...:streamGenerateContent?alt=sse``
with the key in the ``x-goog-api-key`` header (ai.google.dev/api/generate-content).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from loopctl.errors import MissingAPIKey
from loopctl.providers import gemini
from loopctl.providers.native import NativeTool
from loopctl.transport._http import DEFAULT_TIMEOUT, HTTPClient

__all__ = ["GeminiClient"]

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"


class GeminiClient(HTTPClient):
    """Google Gemini.

    ``api_key``: default ``GOOGLE_API_KEY``, then ``GEMINI_API_KEY`` (google-genai's order); a missing key
    raises :class:`~loopctl.errors.MissingAPIKey`. ``base_url``: default ``GEMINI_BASE_URL`` or
    ``https://generativelanguage.googleapis.com``; ``api_version`` the path prefix (``v1beta``). ``timeout``:
    seconds (connect, and between bytes of a reply). ``codec_options`` go to
    :func:`loopctl.providers.gemini.build_request`. ``default_headers`` are sent with every request.
    ``http_client``: an ``httpx.AsyncClient`` to send through (proxies, transports); the client then leaves
    closing it to the caller. :meth:`~loopctl.transport._http.HTTPClient.generate` gives the errors.
    """

    provider = "gemini"
    codec = gemini

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        api_version: str = "v1beta",
        timeout: float = DEFAULT_TIMEOUT,
        codec_options: Mapping[str, Any] | None = None,
        default_headers: Mapping[str, str] | None = None,
        native_tools: Sequence[NativeTool] = (),
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(model, codec_options, native_tools)
        key = api_key or os.environ.get("GOOGLE_API_KEY") or os.environ.get("GEMINI_API_KEY")
        if not key:
            raise MissingAPIKey("gemini", "GOOGLE_API_KEY or GEMINI_API_KEY")
        base = (base_url or os.environ.get("GEMINI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        root = f"{base}/{api_version}/models/{model}"
        headers = {**(default_headers or {}), "x-goog-api-key": key, "content-type": "application/json"}
        self._connect(
            http_client or httpx.AsyncClient(timeout=timeout),
            own=http_client is None,
            headers=headers,
            url=f"{root}:generateContent",
            stream_url=f"{root}:streamGenerateContent?alt=sse",
            secret=key,
        )
