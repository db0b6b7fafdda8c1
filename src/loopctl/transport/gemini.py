"""The Gemini client: ``generateContent`` / ``streamGenerateContent?alt=sse`` over httpx2, the HTTP client
the official SDKs use (no SDK: google-genai
builds its requests from its own types and has no public way to send a prepared REST body and return the
raw event stream).

``POST {base_url}/{api_version}/models/{model}:generateContent`` and ``...:streamGenerateContent?alt=sse``
with the key in the ``x-goog-api-key`` header (ai.google.dev/api/generate-content).
"""

from __future__ import annotations

import operator
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx2
import orjson

from loopctl._frozen import dataclass
from loopctl.errors import InvalidRequest, MissingAPIKey, ModelNotFound, UnsupportedContent
from loopctl.message import Message, Role
from loopctl.message.model import _dumps_bytes
from loopctl.providers import gemini
from loopctl.providers.base import EventCallback, ModelRequest
from loopctl.providers.native import NativeTool
from loopctl.response import ModelResponse
from loopctl.stream import loads_exact
from loopctl.transport._http import DEFAULT_TIMEOUT, HTTPClient, check_base_url, merge_headers

__all__ = ["ExplicitCache", "GeminiClient"]

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"


@dataclass(frozen=True, slots=True)
class ExplicitCache:
    """Gemini explicit caching, where it pays (ai.google.dev/gemini-api/docs/caching): the conversation's stable
    start (system prompt, tools, the turns before the newest message) is stored once as a cached content and
    later requests send only what follows it, at the cached rate.

    A cache is made when that start is at least ``min_tokens`` long (estimated at 4 bytes of JSON a token;
    Gemini's own floor is 1,024 tokens for Flash models, 4,096 for Pro ones), and made again, covering more,
    once the part sent uncached has grown as long as the cached part (so the writes cost, amortized, a
    constant factor of what is read). ``ttl`` is its time to live in seconds (the API's default is an hour); a
    cache close to expiry is replaced rather than used. Gemini 2.5 and later also cache implicitly, with no
    guarantee: explicit caching pays for long prefixes read many times."""

    min_tokens: int = 32_768
    ttl: int = 3600


@dataclass(slots=True)
class _Cached:
    name: str
    messages: list[Message]  # the cached start, held for identity checks
    tokens: int
    expires: float  # time.monotonic() seconds


class GeminiClient(HTTPClient):
    """Google Gemini.

    ``api_key``: default ``GOOGLE_API_KEY``, then ``GEMINI_API_KEY`` (google-genai's order); a missing key
    raises :class:`~loopctl.errors.MissingAPIKey`. ``base_url``: default ``GEMINI_BASE_URL`` or
    ``https://generativelanguage.googleapis.com``; ``api_version`` the path prefix (``v1beta``). ``timeout``:
    seconds (connect, and between bytes of a reply). ``codec_options`` go to
    :func:`loopctl.providers.gemini.build_request`. ``default_headers`` are sent with every request.
    ``http_client``: an ``httpx2.AsyncClient`` to send through (proxies, transports; an ``httpx.AsyncClient``,
    of the same API, works too, its errors typed the same way); the client then leaves closing it to the
    caller. ``explicit_cache``: cache long stable prefixes explicitly (:class:`ExplicitCache`; off by
    default). :meth:`~loopctl.transport._http.HTTPClient.generate` gives the errors.

    ``model`` is the model id (``gemini-2.5-flash``).

    ``native_tools``: built-in tools (:mod:`loopctl.providers.native`) on every request.
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
        http_client: httpx2.AsyncClient | None = None,
        explicit_cache: ExplicitCache | None = None,
    ) -> None:
        super().__init__(model, codec_options, native_tools)
        self.explicit_cache = explicit_cache
        self._cached: _Cached | None = None
        self._use: _Cached | None = None  # the cache the request being sent reads from
        self.cache_creates = 0
        """How many cached contents this client made."""
        key = api_key or os.environ.get("GOOGLE_API_KEY") or os.environ.get("GEMINI_API_KEY")
        if not key:
            raise MissingAPIKey("gemini", "GOOGLE_API_KEY or GEMINI_API_KEY")
        given = base_url or os.environ.get("GEMINI_BASE_URL") or DEFAULT_BASE_URL
        base = check_base_url(given, "base_url" if base_url else "GEMINI_BASE_URL").rstrip("/")
        root = f"{base}/{api_version}/models/{model}"
        self._caches_url = f"{base}/{api_version}/cachedContents"
        headers = merge_headers(default_headers or {}, {"x-goog-api-key": key, "content-type": "application/json"})
        self._connect(
            http_client or httpx2.AsyncClient(timeout=timeout),
            own=http_client is None,
            headers=headers,
            url=f"{root}:generateContent",
            stream_url=f"{root}:streamGenerateContent?alt=sse",
            secret=key,
        )

    # --- explicit caching ----------------------------------------------------------------------------------

    def encode(self, request: ModelRequest, stream: bool) -> bytes:
        """The body's bytes; with a cached content in use, the request that reads from it
        (:func:`loopctl.providers.gemini.build_cached_request`).

        ``stream`` asks for the streamed form of the request.
        """
        cached = self._use
        if cached is None:
            return super().encode(request, stream)
        body = gemini.build_cached_request(
            request.messages,
            model=self.model,
            cached_content=cached.name,
            cached_messages=len(cached.messages),
            stream=stream,
            cache=self._cache.conversions,
            **self._options(request),
        )
        return _dumps_bytes(body)

    def _options(self, request: ModelRequest) -> dict[str, Any]:
        return {**self._with_native(request).options(), **self.codec_options}

    async def generate(
        self, request: ModelRequest, *, stream: bool = True, on_event: EventCallback | None = None
    ) -> ModelResponse:
        """:meth:`HTTPClient.generate`, reading from an explicit cache where one pays (:class:`ExplicitCache`).
        A cache the server no longer has (expired, deleted: a 4xx naming it) is forgotten and the request sent
        whole, once.

        ``request``, ``stream`` and ``on_event`` as for :meth:`HTTPClient.generate`.
        """
        self._use = await self._plan(request) if self.explicit_cache is not None else None
        try:
            return await super().generate(request, stream=stream, on_event=on_event)
        except (InvalidRequest, ModelNotFound) as exc:
            if self._use is None or "cachedcontent" not in str(exc).lower().replace(" ", "").replace("_", ""):
                raise
            self._cached = self._use = None
            return await super().generate(request, stream=stream, on_event=on_event)
        finally:
            self._use = None

    async def _plan(self, request: ModelRequest) -> _Cached | None:
        """The cache this request should read from, made (or made again, larger) when that pays."""
        policy = self.explicit_cache
        assert policy is not None
        messages = request.messages
        held = self._cached
        now = time.monotonic()
        continues = (
            held is not None
            and held.expires - 60 > now
            and len(held.messages) < len(messages)
            and all(map(operator.is_, held.messages, messages[: len(held.messages)]))
        )
        cut = self._boundary(messages)
        if cut == 0:
            return held if continues else None
        options = self._options(request)
        try:
            stable = gemini.cached_content_body(messages[:cut], model=self.model, ttl_seconds=policy.ttl, **options)
        except UnsupportedContent:
            return held if continues else None
        tokens = len(_dumps_bytes(stable)) // 4
        if continues and held is not None:
            if tokens - held.tokens < max(held.tokens, policy.min_tokens):
                return held  # the uncached part is still small: keep reading from this cache
        elif tokens < policy.min_tokens:
            return None
        made = await self._create(stable)
        if made is None:
            return held if continues else None
        self._cached = _Cached(made, list(messages[:cut]), tokens, now + policy.ttl)
        self.cache_creates += 1
        return self._cached

    @staticmethod
    def _boundary(messages: Sequence[Message]) -> int:
        """How many messages a cache may hold: all but the newest, ending where the role changes (so no turn is
        merged across the boundary); 0 when there is no such place."""
        for k in range(len(messages) - 1, 0, -1):
            if messages[k - 1].role is not messages[k].role and messages[k].role is not Role.SYSTEM:
                return k
        return 0

    async def _create(self, body: dict[str, Any]) -> str | None:
        """``POST cachedContents``; the new cache's name, or ``None`` when the server refused it (too small for
        the model, a model without explicit caching): the request is then sent whole."""
        try:
            raw = await self._post(self._caches_url, _dumps_bytes(body))
        except self._transport_errors:
            return None
        if raw.status_code >= 400:
            return None
        try:
            name = loads_exact(raw.content).get("name")
        except (orjson.JSONDecodeError, AttributeError):
            return None
        return name if isinstance(name, str) and name else None
