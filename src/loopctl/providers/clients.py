"""Model clients: the only place in loopctl that talks to a provider over the network.

Each client turns a :class:`~loopctl.providers.ModelRequest` into its codec's request body, sends it, and
decodes the reply with the same codec, so what goes over the wire is exactly what the pure codecs build and
what the tests check against recorded traffic.

Transport:

- OpenAI (Chat Completions, Responses, any OpenAI-compatible server) and Anthropic go through the official
  SDKs (the ``openai`` / ``anthropic`` extras), whose public ``with_streaming_response`` API sends our body
  and hands back the raw bytes for our decoders. The SDK's own retries are off (``max_retries=0``): the
  engine retries retryable errors with one policy for every provider.
- Gemini goes through httpx: google-genai builds its requests from its own types and has no public way to
  send a prepared REST body and return the raw event stream.

Keys and base URLs come from each provider's usual environment variables (``OPENAI_API_KEY`` /
``OPENAI_BASE_URL``, ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``, ``GOOGLE_API_KEY`` or ``GEMINI_API_KEY``
/ ``GEMINI_BASE_URL``) unless given; a missing key raises :class:`~loopctl.errors.MissingAPIKey` naming the
variable. Every error is a :class:`~loopctl.errors.ProviderError` subclass: HTTP errors through the codec's
``error_from_http``; a failure before the reply began (refused, reset, no response) as
:class:`~loopctl.errors.ConnectionFailed`; no reply, or a reply that stalls, within ``timeout`` as
:class:`~loopctl.errors.ProviderTimeout`; a reply (streamed or not) whose connection breaks off after it
began as :class:`~loopctl.errors.StreamTruncated`.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import ModuleType
from typing import Any

import httpx
import orjson

from loopctl.errors import (
    ConnectionFailed,
    MissingAPIKey,
    ProviderError,
    ProviderProtocolError,
    ProviderTimeout,
    StreamTruncated,
)
from loopctl.providers import anthropic, gemini, openai_chat, openai_responses
from loopctl.providers.base import ConversionCache, EventCallback, ModelRequest, malformed_reply
from loopctl.response import ModelResponse
from loopctl.stream import loads_exact

__all__ = [
    "AnthropicClient",
    "GeminiClient",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "from_string",
]

DEFAULT_TIMEOUT = 600.0
"""Seconds the client waits for a connection, or for the next bytes of a reply, before
:class:`~loopctl.errors.ProviderTimeout` (httpx timeouts are per operation: a stream that keeps sending is
never cut by this)."""


class _Client:
    """What the clients share: the codec, the conversion cache, decoding and error mapping."""

    provider: str = ""
    codec: ModuleType

    def __init__(self, model: str, codec_options: Mapping[str, Any] | None) -> None:
        self.model = model
        self.codec_options = dict(codec_options or {})
        self._cache = ConversionCache()

    def build(self, request: ModelRequest, stream: bool) -> dict[str, Any]:
        """The request body for ``request`` (the codec's ``build_request_from``)."""
        body: dict[str, Any] = self.codec.build_request_from(
            request, model=self.model, stream=stream, cache=self._cache, **self.codec_options
        )
        return body

    async def _decode_stream(self, chunks: AsyncIterator[bytes], on_event: EventCallback | None) -> ModelResponse:
        decoder = self.codec.StreamDecoder()
        try:
            async for chunk in chunks:
                events = decoder.feed(chunk)
                if on_event is not None:
                    for event in events:
                        on_event(event)
        except _TIMEOUT_ERRORS as exc:
            raise ProviderTimeout(f"the stream stalled: {_describe(exc)}", provider=self.provider) from exc
        except _TRANSPORT_ERRORS as exc:
            raise StreamTruncated(f"the stream broke off: {_describe(exc)}", provider=self.provider) from exc
        response: ModelResponse = decoder.finish()
        return response

    async def _read(self, body: Awaitable[bytes]) -> bytes:
        """A whole reply body, once its headers have arrived: a stall is a
        :class:`~loopctl.errors.ProviderTimeout`, a connection lost half way a
        :class:`~loopctl.errors.StreamTruncated` (the reply began, so this is no ``ConnectionFailed``)."""
        try:
            return await body
        except _TIMEOUT_ERRORS as exc:
            raise ProviderTimeout(f"the reply stalled: {_describe(exc)}", provider=self.provider) from exc
        except _TRANSPORT_ERRORS as exc:
            raise StreamTruncated(f"the reply broke off: {_describe(exc)}", provider=self.provider) from exc

    def _parse(self, content: bytes) -> ModelResponse:
        try:
            body = loads_exact(content)  # a tool input's integers past 64 bits stay exact
        except orjson.JSONDecodeError:
            raise ProviderProtocolError(f"the reply is not JSON: {content[:200]!r}", provider=self.provider) from None
        try:
            response: ModelResponse = self.codec.parse_response(body)
        except ProviderError:
            raise
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:  # a reply of the wrong shape
            raise malformed_reply(self.provider, exc, content) from exc
        return response

    def _http_error(self, status: int, content: bytes, headers: Mapping[str, str]) -> ProviderError:
        # The codecs read no clock: "now" turns a Retry-After HTTP-date into seconds.
        error: ProviderError = self.codec.error_from_http(status, content, headers, now=time.time())
        return error

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"


def _httpx2_errors(name: str) -> tuple[type[BaseException], ...]:
    """The error class ``name`` of httpx2 (used by the newest SDKs) when it is installed."""
    try:
        import httpx2
    except ImportError:
        return ()
    return (getattr(httpx2, name),)


_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (httpx.TransportError, *_httpx2_errors("TransportError"))
_TIMEOUT_ERRORS: tuple[type[BaseException], ...] = (httpx.TimeoutException, *_httpx2_errors("TimeoutException"))


def _describe(exc: BaseException) -> str:
    # httpx's ReadTimeout and kin often carry no text.
    return str(exc) or type(exc).__name__


def _key(explicit: str | None, provider: str, *names: str) -> str:
    if explicit:
        return explicit
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    raise MissingAPIKey(provider, " or ".join(names))


# --- SDK-based clients ---------------------------------------------------------------------------------------


class _SDKClient(_Client):
    """A client over an official SDK's ``with_streaming_response.create``: our body in, raw bytes out."""

    def _create(self) -> Callable[..., Any]:
        raise NotImplementedError

    def _split(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Keyword arguments for ``create``: the keys it knows, the rest in ``extra_body``."""
        known = self._params
        kwargs = {k: v for k, v in body.items() if k in known}
        extra = {k: v for k, v in body.items() if k not in known}
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    async def generate(
        self, request: ModelRequest, *, stream: bool = True, on_event: EventCallback | None = None
    ) -> ModelResponse:
        """Send ``request`` (streamed when ``stream``) and decode the reply; see the module docstring for
        the errors."""
        body = self.build(request, stream)
        sdk = self._sdk
        try:
            async with self._create()(**self._split(body)) as raw:
                # Past the headers: reading errors are raw transport errors, typed by _decode_stream / _read.
                if stream:
                    return await self._decode_stream(raw.iter_bytes(), on_event)
                return self._parse(await self._read(raw.read()))
        except sdk.APIStatusError as exc:
            content = exc.response.content if exc.response is not None else b""
            raise self._http_error(exc.status_code, content, dict(exc.response.headers)) from None
        except sdk.APITimeoutError as exc:
            raise ProviderTimeout(f"no reply in time ({exc})", provider=self.provider) from None
        except sdk.APIConnectionError as exc:
            # Raised only before the reply began (connect, send, or no response at all), stream or not.
            raise ConnectionFailed(f"cannot reach the provider ({exc})", provider=self.provider) from None

    _sdk: Any
    _params: frozenset[str]


class _OpenAIClient(_SDKClient):
    """What the two OpenAI clients share: the ``AsyncOpenAI`` client, keys and base URL."""

    provider = "openai"

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
        self._sdk = _import("openai", "openai")
        base = base_url or os.environ.get("OPENAI_BASE_URL")
        # A local OpenAI-compatible server usually needs no key; the SDK still wants a non-empty one.
        key = api_key or os.environ.get("OPENAI_API_KEY") or ("not-needed" if base else None)
        self._client = self._sdk.AsyncOpenAI(
            api_key=_key(key, "openai", "OPENAI_API_KEY"),
            base_url=base,
            timeout=timeout,
            max_retries=0,
            default_headers=dict(default_headers or {}),
        )
        self._params = _params_of(self._resource().create)

    def _resource(self) -> Any:
        raise NotImplementedError

    def _create(self) -> Callable[..., Any]:
        create: Callable[..., Any] = self._resource().with_streaming_response.create
        return create

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.close()


class OpenAIChatClient(_OpenAIClient):
    """OpenAI Chat Completions, or any OpenAI-compatible server (give ``base_url``), over the ``openai`` SDK.

    ``model``: the model name. ``api_key`` / ``base_url``: default ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``
    (with a ``base_url`` and no key, none is needed). ``timeout``: seconds. ``codec_options``: extra keyword
    arguments for :func:`loopctl.providers.openai_chat.build_request` (``strict_tools``,
    ``max_tokens_param``...). ``default_headers`` are sent with every request.
    """

    codec = openai_chat

    def _resource(self) -> Any:
        return self._client.chat.completions


class OpenAIResponsesClient(_OpenAIClient):
    """OpenAI Responses over the ``openai`` SDK. Arguments as :class:`OpenAIChatClient`; ``codec_options``
    go to :func:`loopctl.providers.openai_responses.build_request`."""

    codec = openai_responses

    def _resource(self) -> Any:
        return self._client.responses


class AnthropicClient(_SDKClient):
    """Anthropic Messages over the ``anthropic`` SDK.

    ``api_key`` / ``base_url``: default ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``. ``timeout``: seconds.
    ``codec_options`` go to :func:`loopctl.providers.anthropic.build_request` (``prompt_cache``...).
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
    ) -> None:
        super().__init__(model, codec_options)
        self._sdk = _import("anthropic", "anthropic")
        self._client = self._sdk.AsyncAnthropic(
            api_key=_key(api_key, "anthropic", "ANTHROPIC_API_KEY"),
            base_url=base_url or os.environ.get("ANTHROPIC_BASE_URL"),
            timeout=timeout,
            max_retries=0,
            default_headers=dict(default_headers or {}),
        )
        self._params = _params_of(self._client.messages.create)

    def _create(self) -> Callable[..., Any]:
        create: Callable[..., Any] = self._client.messages.with_streaming_response.create
        return create

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.close()


# --- Gemini over httpx ---------------------------------------------------------------------------------------


class GeminiClient(_Client):
    """Google Gemini (``generateContent`` / ``streamGenerateContent?alt=sse``) over httpx.

    ``api_key``: default ``GOOGLE_API_KEY``, then ``GEMINI_API_KEY`` (google-genai's order), sent as the
    ``x-goog-api-key`` header. ``base_url``: default ``GEMINI_BASE_URL`` or
    ``https://generativelanguage.googleapis.com``; ``api_version`` the path prefix (``v1beta``). ``timeout``:
    seconds. ``codec_options`` go to :func:`loopctl.providers.gemini.build_request`.
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
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(model, codec_options)
        key = _key(api_key, "gemini", "GOOGLE_API_KEY", "GEMINI_API_KEY")
        base = (base_url or os.environ.get("GEMINI_BASE_URL") or "https://generativelanguage.googleapis.com").rstrip(
            "/"
        )
        self._url = f"{base}/{api_version}/models/{model}"
        self._headers = {"x-goog-api-key": key, "content-type": "application/json"}
        self._http = http_client or httpx.AsyncClient(timeout=timeout)
        self._own_http = http_client is None

    async def generate(
        self, request: ModelRequest, *, stream: bool = True, on_event: EventCallback | None = None
    ) -> ModelResponse:
        """Send ``request`` and decode the reply; see the module docstring for the errors."""
        body = orjson.dumps(self.build(request, stream))
        url = f"{self._url}:streamGenerateContent?alt=sse" if stream else f"{self._url}:generateContent"
        try:
            async with self._http.stream("POST", url, content=body, headers=self._headers) as raw:
                # Past the headers: reading errors are typed by _decode_stream / _read, not as ConnectionFailed.
                if raw.status_code >= 400:
                    content = await self._read(raw.aread())
                    raise self._http_error(raw.status_code, content, dict(raw.headers))
                if stream:
                    return await self._decode_stream(raw.aiter_bytes(), on_event)
                return self._parse(await self._read(raw.aread()))
        except httpx.TimeoutException as exc:
            raise ProviderTimeout(f"no reply in time ({_describe(exc)})", provider=self.provider) from None
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"cannot reach the provider ({exc})", provider=self.provider) from None

    async def aclose(self) -> None:
        """Close the connection pool (when this client made it)."""
        if self._own_http:
            await self._http.aclose()


# --- from a string ---------------------------------------------------------------------------------------------

_PREFIXES: dict[str, type[Any]] = {
    "openai": OpenAIChatClient,
    "openai-responses": OpenAIResponsesClient,
    "anthropic": AnthropicClient,
    "gemini": GeminiClient,
}


def from_string(spec: str, **options: Any) -> OpenAIChatClient | OpenAIResponsesClient | AnthropicClient | GeminiClient:
    """A client from ``"provider:model"``: prefixes ``openai:`` (Chat Completions, or any OpenAI-compatible
    server with ``base_url=``), ``openai-responses:``, ``anthropic:`` and ``gemini:``. ``options`` go to the
    client (``api_key``, ``base_url``, ``timeout``, ``codec_options``...). Raises ``ValueError`` for an
    unknown prefix and :class:`~loopctl.errors.MissingAPIKey` when no key is found."""
    prefix, sep, model = spec.partition(":")
    if not sep or not model or prefix not in _PREFIXES:
        known = ", ".join(f"{p}:MODEL" for p in _PREFIXES)
        raise ValueError(f"unknown model spec {spec!r}; expected one of {known}")
    client: Any = _PREFIXES[prefix](model, **options)
    return client  # type: ignore[no-any-return]


def _import(module: str, extra: str) -> ModuleType:
    try:
        return __import__(module)
    except ImportError:
        raise ImportError(f"the {module} SDK is not installed: pip install 'loopctl[{extra}]'") from None


def _params_of(fn: Callable[..., Any]) -> frozenset[str]:
    return frozenset(
        name
        for name, p in inspect.signature(fn).parameters.items()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and not name.startswith("extra_")
    )
