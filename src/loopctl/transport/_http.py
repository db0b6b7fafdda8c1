"""What every client shares: the body serialized once, one pooled HTTP client, reading the reply (SSE or a
whole JSON body), and turning every failure into a typed :class:`~loopctl.errors.ProviderError`.

A call does, in order: the codec writes the body's bytes (:meth:`HTTPClient.encode`), incrementally: the
start of the conversation laid out and written by an earlier call is reused as bytes, and only the messages
after it are converted, checked and written (:class:`~loopctl.providers.base.RequestCache`); the bytes go
to the pool with headers built when the client was made; the reply's bytes go to the codec's decoder as
they arrive. Nothing the SDKs do per call (their request transform, their
retries) is on this path.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import orjson

from loopctl.errors import (
    ConnectionFailed,
    InvalidBaseURL,
    ProviderError,
    ProviderProtocolError,
    ProviderTimeout,
    StreamTruncated,
)
from loopctl.message.model import _dumps_bytes
from loopctl.providers.base import EventCallback, ModelRequest, RequestCache, malformed_reply
from loopctl.response import ModelResponse
from loopctl.stream import loads_exact

__all__ = ["DEFAULT_TIMEOUT", "HTTPClient", "check_base_url", "merge_headers"]

DEFAULT_TIMEOUT = 600.0
"""Seconds the client waits for a connection, or for the next bytes of a reply, before
:class:`~loopctl.errors.ProviderTimeout` (the HTTP client's timeouts are per operation: a stream that keeps
sending is never cut by this)."""

REDACTED = "[redacted]"
"""What stands in for the client's API key wherever a reply quoted it (an error body, a malformed event)."""


def _library_of(http: Any) -> ModuleType:
    """The HTTP library the pool ``http`` comes from: httpx2 (the client the official SDKs use, and loopctl's),
    or httpx (an older SDK's pool, or one a caller passed). It is the package whose own ``AsyncClient`` is one
    of the pool's classes (an SDK's pool is a subclass, ``openai.DefaultAsyncHttpxClient``; a package that
    merely re-exports some of a library's names is not taken for it), read from the modules already loaded,
    so that no HTTP library is imported that the process does not use; httpx2 when none is."""
    for cls in type(http).__mro__:
        library = sys.modules.get(cls.__module__.partition(".")[0])
        if library is not None and getattr(library, "AsyncClient", None) is cls:
            return library
    import httpx2

    return httpx2


def merge_headers(*layers: Mapping[str, Any]) -> dict[str, str]:
    """The headers of ``layers`` laid one over the next, the later winning: a name is one header whatever its
    case (RFC 9110, section 5.1), so a caller's ``user-agent`` replaces the SDK's ``User-Agent`` rather than
    going out beside it, and keeps the caller's spelling. Values that are not strings (the SDKs' ``Omit``
    marker for a header they leave out) are dropped, and drop any earlier value of that name."""
    merged: dict[str, str] = {}
    spelled: dict[str, str] = {}  # lower-cased name -> the spelling in ``merged``
    for layer in layers:
        for name, value in layer.items():
            lower = name.lower()
            if (old := spelled.pop(lower, None)) is not None:
                del merged[old]
            if isinstance(value, str):
                merged[name] = value
                spelled[lower] = name
    return merged


def check_base_url(url: str, source: str = "base_url") -> str:
    """``url`` when it is an ``http://`` or ``https://`` URL with a host; else raises
    :class:`~loopctl.errors.InvalidBaseURL`, suggesting ``http://`` in front of one written without a scheme
    (``localhost:11434/v1``), or the URL without the spaces around it. ``source`` says where the URL came
    from (``"base_url"``, or the environment variable read). The clients check their base URL with it when
    they are made."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - reading it checks it: a port that is not a number raises ValueError
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and url == url.strip()
    except ValueError:  # a port that is not a number or out of range, a bad IPv6 address
        ok = False
    if ok:
        return url
    # urlsplit reads past spaces around the URL, where the SDK sent to '%20http://...'.
    likely = url.strip() if url != url.strip() else f"http://{url}" if "://" not in url else None
    raise InvalidBaseURL(url, likely if likely is not None and _valid(likely) else None, source=source)


def _valid(url: str) -> bool:
    """Whether :func:`check_base_url` takes ``url``."""
    try:
        check_base_url(url)
    except InvalidBaseURL:
        return False
    return True


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _other_origin(url: Any, target: Any) -> bool:
    """Whether a redirect from ``url`` to ``target`` (two of the pool's ``URL``: httpx2's or httpx's) leaves the
    origin: another scheme, host or port, an upgrade from ``http`` to ``https`` on the same host with the
    default ports excepted (the rule httpx2 and httpx apply to ``Authorization``)."""
    here = (url.scheme, url.host, url.port or _DEFAULT_PORTS.get(url.scheme))
    there = (target.scheme, target.host, target.port or _DEFAULT_PORTS.get(target.scheme))
    upgrade = here[1] == there[1] and (here[0], here[2], there[0], there[2]) == ("http", 80, "https", 443)
    return here != there and not upgrade


def _describe(exc: BaseException) -> str:
    # The HTTP client's ReadTimeout and kin often carry no text.
    return str(exc) or type(exc).__name__


def _without(value: Any, secret: str) -> Any:
    """``value`` (text, or a JSON value) with ``secret`` replaced wherever a string holds it."""
    if isinstance(value, str):
        return value.replace(secret, REDACTED) if secret in value else value
    if isinstance(value, bytes):
        return value.replace(secret.encode(), REDACTED.encode())
    if isinstance(value, dict):
        return {_without(k, secret): _without(v, secret) for k, v in value.items()}
    if isinstance(value, list):
        return [_without(v, secret) for v in value]
    return value


class HTTPClient:
    """Base of the four clients: a codec, its conversion cache, one pooled HTTP client and prebuilt headers.

    A subclass sets :attr:`provider` and :attr:`codec` and calls :meth:`_connect` with the pool (an
    ``httpx2.AsyncClient``, the HTTP client of the official SDKs; an ``httpx.AsyncClient`` shares its API), the
    headers of every request, the URL of each mode, and the API key (kept out of every error message).
    """

    provider: str = ""
    codec: ModuleType

    def __init__(
        self, model: str, codec_options: Mapping[str, Any] | None, native_tools: Sequence[Any] = ()
    ) -> None:
        self.model = model
        self.codec_options = dict(codec_options or {})
        self.native_tools: tuple[Any, ...] = tuple(native_tools)
        """Built-in tools (:mod:`loopctl.providers.native`) added to every request this client sends."""
        self._cache = RequestCache()
        self._http: Any = None
        self._own_http = True
        self._headers: dict[str, str] = {}
        self._urls: tuple[str, str] = ("", "")  # (whole reply, streamed reply)
        self._targets: tuple[Any, Any] = ("", "")  # the same, parsed once by the pool's library
        self._secret = b""
        self._timeout_errors: tuple[type[BaseException], ...] = ()
        self._transport_errors: tuple[type[BaseException], ...] = ()

    def _connect(
        self, http: Any, *, own: bool, headers: Mapping[str, str], url: str, stream_url: str, secret: str
    ) -> None:
        self._http = http
        self._own_http = own
        self._headers = dict(headers)
        self._urls = (url, stream_url)
        self._secret = secret.encode()
        library = _library_of(http)
        self._timeout_errors, self._transport_errors = (library.TimeoutException,), (library.TransportError,)
        # Parsed and merged once, not on every call (about 27 us a call with fifteen headers): the URLs as the
        # pool's own URL type, and, in a pool this client made, the headers as the pool's default headers.
        parsed = isinstance(http, library.AsyncClient)
        self._targets = (library.URL(url), library.URL(stream_url)) if parsed else (url, stream_url)
        if own:
            http.headers.update(self._headers)

    @property
    def api_url(self) -> str:
        """The URL whole (non-streamed) requests are sent to; what :mod:`loopctl.pricing` checks is the
        provider's own API before it applies the provider's prices."""
        return self._urls[0]

    # --- the body ----------------------------------------------------------------------------------------

    def build(self, request: ModelRequest, stream: bool) -> dict[str, Any]:
        """The request body for ``request`` as a JSON value: the codec's ``build_request_from`` (cached per
        message). What is sent is :meth:`encode`'s bytes, the same body written."""
        body: dict[str, Any] = self.codec.build_request_from(
            self._with_native(request),
            model=self.model,
            stream=stream,
            cache=self._cache.conversions,
            **self.codec_options,
        )
        return body

    def _with_native(self, request: ModelRequest) -> ModelRequest:
        """``request`` with this client's built-in tools added to its own."""
        if not self.native_tools:
            return request
        return dataclasses.replace(request, native_tools=(*request.native_tools, *self.native_tools))

    def encode(self, request: ModelRequest, stream: bool) -> bytes:
        """The bytes this client sends for ``request``: :meth:`build`'s body as compact UTF-8 JSON, exactly as
        the project's serializer writes it (integers past 64 bits exact), built incrementally by the codec's
        ``encode_request_from`` when it has one (O(new messages) for a conversation this client sent before).
        Raises :class:`~loopctl.errors.UnsupportedContent` for what the codec refuses and
        :class:`~loopctl.errors.InvalidMessage` for text that is not valid Unicode (a lone surrogate)."""
        encode = getattr(self.codec, "encode_request_from", None)
        if encode is None:
            return _dumps_bytes(self.build(request, stream))
        content: bytes = encode(
            self._with_native(request), model=self.model, stream=stream, cache=self._cache, **self.codec_options
        )
        return content

    def request_headers(self, request: ModelRequest) -> Mapping[str, str]:
        """The headers of the request for ``request``: those built when the client was made (a subclass adds
        what a request's options need, such as Anthropic's ``anthropic-beta`` flags)."""
        return self._headers

    # --- one call ----------------------------------------------------------------------------------------

    async def generate(
        self, request: ModelRequest, *, stream: bool = True, on_event: EventCallback | None = None
    ) -> ModelResponse:
        """Send ``request`` (streamed when ``stream``, calling ``on_event`` with each decoded event) and decode
        the reply.

        Raises a :class:`~loopctl.errors.ProviderError` subclass: the codec's typed error for an HTTP error
        (``retry-after`` read from the reply); :class:`~loopctl.errors.ConnectionFailed` when no reply began
        (refused, reset); :class:`~loopctl.errors.ProviderTimeout` for no reply, or a reply that stalls,
        within the timeout; :class:`~loopctl.errors.StreamTruncated` for a reply cut off after it began. One
        request per call: retrying is the caller's (the engine's) policy. A cancel closes the connection.
        """
        content = self.encode(request, stream)
        http = self._http
        headers = self.request_headers(request)
        try:
            # Redirects are followed here, not by the pool: a header holding the key must not go to another host.
            raw = await http.send(
                http.build_request(
                    "POST",
                    self._targets[stream],
                    content=content,
                    headers=None if self._own_http and headers is self._headers else headers,
                ),
                stream=True,
                follow_redirects=False,
            )
            if raw.next_request is not None and http.follow_redirects:
                raw = await self._redirected(http, raw, stream=True)
        except self._timeout_errors as exc:
            raise ProviderTimeout(f"no reply in time ({_describe(exc)})", provider=self.provider) from None
        except self._transport_errors as exc:
            raise ConnectionFailed(f"cannot reach the provider ({_describe(exc)})", provider=self.provider) from None
        try:
            # Past the headers: reading errors are typed as a stall or a cut, never as ConnectionFailed.
            if raw.status_code >= 300:
                if raw.status_code < 400:  # a redirect the pool does not follow: no reply to decode
                    where = raw.headers.get("location", "nowhere")
                    raise ProviderProtocolError(
                        f"HTTP {raw.status_code}, a redirect to {where!r}, not followed (the HTTP client follows "
                        "no redirects)",
                        provider=self.provider,
                    )
                body = self._redact(await self._read(raw.aread()))
                # The codecs read no clock: "now" turns a Retry-After HTTP-date into seconds.
                error: ProviderError = self.codec.error_from_http(
                    raw.status_code, body, dict(raw.headers), now=time.time()
                )
                raise error
            if stream:
                return await self._decode_stream(raw.aiter_bytes(), on_event)
            return self._parse(await self._read(raw.aread()))
        except ProviderError as exc:
            self._scrub(exc)
            raise
        finally:
            await raw.aclose()

    async def _post(self, url: str, content: bytes) -> Any:
        """The pool's whole reply to a POST of ``content`` to ``url`` (another endpoint than the model call's:
        a cache, a conversation) with the client's headers, redirects followed as :meth:`generate` follows
        them. The pool's errors are left to the caller."""
        http = self._http
        raw = await http.send(
            http.build_request("POST", url, content=content, headers=self._headers), follow_redirects=False
        )
        if raw.next_request is not None and http.follow_redirects:
            raw = await self._redirected(http, raw, stream=False)
        return raw

    async def _redirected(self, http: Any, raw: Any, *, stream: bool) -> Any:
        """The reply at the end of the redirects ``raw`` starts, for a pool that follows redirects: each next
        request as the pool's library builds it (the method and body a 301, 302, 303, 307 or 308 calls for, no
        ``Authorization`` to another origin), less every header holding the API key when it leaves the origin
        (the library strips only ``Authorization``, where Gemini sends its key in ``x-goog-api-key``, and a
        caller's ``default_headers`` may carry it too; an upgrade from ``http`` to ``https`` on the same host
        keeps them, as the library keeps ``Authorization``). More than the pool's ``max_redirects`` is a
        :class:`~loopctl.errors.ProviderProtocolError`."""
        secret = self._secret.decode()
        for _ in range(http.max_redirects):
            request = raw.next_request
            await raw.aclose()
            if secret and _other_origin(raw.request.url, request.url):
                for name in [name for name, value in request.headers.items() if secret in value]:
                    del request.headers[name]
            raw = await http.send(request, stream=stream, follow_redirects=False)
            if raw.next_request is None:
                return raw
        await raw.aclose()
        where = str(raw.next_request.url)
        where = where.replace(secret, REDACTED) if secret else where
        raise ProviderProtocolError(
            f"more than {http.max_redirects} redirects (the last to {where!r})", provider=self.provider
        )

    async def _decode_stream(self, chunks: AsyncIterator[bytes], on_event: EventCallback | None) -> ModelResponse:
        decoder = self.codec.StreamDecoder()
        try:
            async for chunk in chunks:
                events = decoder.feed(chunk)
                if on_event is not None:
                    for event in events:
                        on_event(event)
        except self._timeout_errors as exc:
            raise ProviderTimeout(f"the stream stalled: {_describe(exc)}", provider=self.provider) from exc
        except self._transport_errors as exc:
            raise StreamTruncated(f"the stream broke off: {_describe(exc)}", provider=self.provider) from exc
        response: ModelResponse = decoder.finish()
        return response

    async def _read(self, body: Awaitable[bytes]) -> bytes:
        """A whole reply body, once its headers have arrived: a stall is a
        :class:`~loopctl.errors.ProviderTimeout`, a connection lost half way a
        :class:`~loopctl.errors.StreamTruncated` (the reply began, so this is no ``ConnectionFailed``)."""
        try:
            return await body
        except self._timeout_errors as exc:
            raise ProviderTimeout(f"the reply stalled: {_describe(exc)}", provider=self.provider) from exc
        except self._transport_errors as exc:
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

    # --- keeping the key secret ------------------------------------------------------------------------------

    def _redact(self, content: bytes) -> bytes:
        """``content`` with this client's API key replaced (a provider's error may quote the key it refused)."""
        if self._secret and self._secret in content:
            return content.replace(self._secret, REDACTED.encode())
        return content

    def _scrub(self, error: ProviderError) -> None:
        """Replace, in place, every quote of the API key in ``error``'s text."""
        secret = self._secret.decode()
        if not secret:
            return
        for name in ("message", "provider_message", "body"):
            value = getattr(error, name, None)
            if value is not None:
                setattr(error, name, _without(value, secret))
        if error.args and isinstance(error.args[0], str) and secret in error.args[0]:
            error.args = (error.args[0].replace(secret, REDACTED), *error.args[1:])

    # --- the pool ----------------------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the connection pool (when this client made it)."""
        if self._own_http and self._http is not None:
            await self._http.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"
