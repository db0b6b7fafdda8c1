"""The limits of the HTTP servers loopctl runs (``loopctl web``, ``loopctl a2a serve``, ``loopctl mcp serve --http``):
what one client can make the server hold, and for how long (``docs/web.md``, "Server limits").

- **request bodies**: :class:`BodyLimit`, ASGI middleware, reads a request's body before the app sees it, up to
  ``max_body_bytes`` (a larger one is answered ``413`` with a JSON ``{"error": ...}``, from its
  ``Content-Length`` before anything is read, or as soon as a chunked body passes the limit), and within a
  deadline that grows with what arrived: ``body_timeout`` seconds plus one second per ``body_min_rate`` bytes
  (Apache's ``mod_reqtimeout`` rule). A body sent a byte at a time is answered ``408`` once it is late.
- **request heads**: a connection must send a request's head (its request line and headers) within
  ``header_timeout`` seconds of opening, or of the previous response's end; a head that trickles in byte by
  byte is cut off then (``408``, connection closed). uvicorn alone waits forever for a head that is still
  arriving. A head larger than ``max_header_bytes`` is answered ``400`` (h11's limit).
- **idle connections**: closed ``keep_alive_timeout`` seconds after a response (uvicorn's
  ``timeout_keep_alive``).
- **connections**: past ``max_connections`` open connections or running requests, a request is answered
  ``503`` (uvicorn's ``limit_concurrency``).

:func:`uvicorn_config` makes the ``uvicorn.Config`` that applies them all to an ASGI app. Needs the ``[web]``
extra (uvicorn, Starlette).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import orjson

from loopctl._frozen import dataclass
from loopctl._lazy import LazyModule

if TYPE_CHECKING:
    import uvicorn
else:  # imported when an annotation is read (loopctl._lazy), or when a server is made
    uvicorn = LazyModule("uvicorn")

__all__ = [
    "BODY_MIN_RATE",
    "BODY_TIMEOUT",
    "HEADER_TIMEOUT",
    "KEEP_ALIVE_TIMEOUT",
    "MAX_BODY_BYTES",
    "MAX_CONNECTIONS",
    "MAX_HEADER_BYTES",
    "BodyLimit",
    "BodyRefused",
    "ServerLimits",
    "read_bounded",
    "uvicorn_config",
]

MAX_BODY_BYTES = 32 * 1024 * 1024
"""The largest request body read, by default (32 MiB: a prompt with a few large images, base64-encoded)."""

HEADER_TIMEOUT = 10.0
"""Seconds a connection has to send a request's head, by default."""

BODY_TIMEOUT = 20.0
"""Seconds a request's body may take before it counts what arrived, by default (see :data:`BODY_MIN_RATE`)."""

BODY_MIN_RATE = 500
"""Bytes per second a slow body must keep up, by default: each ``BODY_MIN_RATE`` bytes received extend its
deadline by one second (at 500 B/s a 32 MiB body may take 18 hours; one byte a second is cut off after 20 s)."""

KEEP_ALIVE_TIMEOUT = 5
"""Seconds an idle connection is kept open after a response, by default (uvicorn's own default)."""

MAX_CONNECTIONS = 1000
"""Open connections (or running requests) served at once, by default; past it a request is answered ``503``."""

MAX_HEADER_BYTES = 16 * 1024
"""The largest request head read, by default (16 KiB, h11's default); a larger one is answered ``400``."""

LINGER_SECONDS = 2.0
"""Seconds the rest of a body refused as too large is read and dropped before the 413 is sent, so that a client
still sending gets the answer rather than a reset connection (a body still arriving then is cut off)."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """The limits of one server (the module docstring): ``max_body_bytes`` (bytes), ``header_timeout`` and
    ``body_timeout`` (seconds), ``body_min_rate`` (bytes per second), ``keep_alive_timeout`` (whole seconds),
    ``max_connections`` (``None``: no limit) and ``max_header_bytes`` (bytes). Every value must be positive,
    and fit a float (``ValueError`` names the one that does not)."""

    max_body_bytes: int = MAX_BODY_BYTES
    header_timeout: float = HEADER_TIMEOUT
    body_timeout: float = BODY_TIMEOUT
    body_min_rate: int = BODY_MIN_RATE
    keep_alive_timeout: int = KEEP_ALIVE_TIMEOUT
    max_connections: int | None = MAX_CONNECTIONS
    max_header_bytes: int = MAX_HEADER_BYTES

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "header_timeout", "body_timeout", "body_min_rate", "keep_alive_timeout",
                     "max_connections", "max_header_bytes"):  # fmt: skip
            value = getattr(self, name)
            if value is None and name == "max_connections":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"ServerLimits: {name} must be a positive number, not {value!r}")
            try:  # the event loop's timers are floats: a whole number past them fails each connection
                float(value)
            except OverflowError:
                raise ValueError(f"ServerLimits: {name} is too large (more than a float holds)") from None


class BodyRefused(Exception):
    """A request body refused by :func:`read_bounded`: ``status`` 413 (larger than the limit) or 408 (late), and
    the reason as the message."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


async def read_bounded(
    chunks: AsyncIterator[bytes],
    *,
    limit: int,
    timeout: float,
    min_rate: int = BODY_MIN_RATE,
    length: str | None = None,
    who: str = "this server",
) -> bytes:
    """A request body read from ``chunks``, bounded in size and time (the module docstring): refused with
    :class:`BodyRefused` ``413`` when its ``Content-Length`` (``length``, the header's value) says more than
    ``limit`` bytes (nothing is read) or when it grows past them (the rest is not read), ``408`` when it is not
    whole ``timeout`` seconds plus one per ``min_rate`` bytes received after the read began. ``who`` names the
    refusing side in the reasons."""
    too_large = f"the request body is larger than {who} accepts ({limit} bytes)"
    if length is not None and length.isdigit() and int(length) > limit:
        raise BodyRefused(413, too_large)
    got: list[bytes] = []
    size = 0
    started = time.monotonic()
    while True:
        deadline = started + timeout + size / min_rate
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):  # no task per chunk, as wait_for
                chunk = await anext(chunks, None)
        except TimeoutError:
            raise BodyRefused(
                408,
                f"the request body came too slowly: {size} bytes in {time.monotonic() - started:.0f} s ({who} "
                f"waits {timeout:g} s plus 1 s per {min_rate} bytes received)",
            ) from None
        if chunk is None:
            return b"".join(got)
        size += len(chunk)
        if size > limit:
            raise BodyRefused(413, too_large)
        if chunk:
            got.append(chunk)


class BodyLimit:
    """ASGI middleware: the request's body is read (bounded in size and time, the module docstring) before
    ``app`` is called, then given to it as one ``http.request`` message; later ``receive`` calls (a
    disconnect) go to the server. A body over ``limits.max_body_bytes`` is answered ``413``, one that is late
    ``408``, both with a JSON ``{"error": "<what and the limit>"}``; ``app`` is not called then. Other scopes
    (``lifespan``, ``websocket``) pass through."""

    def __init__(self, app: Any, limits: ServerLimits | None = None) -> None:
        self.app = app
        self.limits = limits or ServerLimits()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits = self.limits
        gone = False  # the client went away before its body's end: nobody to answer

        async def bodies() -> AsyncIterator[bytes]:
            nonlocal gone
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    gone = True
                    return
                yield message.get("body", b"")
                if not message.get("more_body", False):
                    return

        # Every Content-Length the request gave: the largest decides (a lie in one is refused as the largest).
        lengths = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == b"content-length"]
        length = max(lengths, key=lambda v: int(v) if v.isdigit() else -1, default=None)
        stream = bodies()
        try:
            body = await read_bounded(
                stream, limit=limits.max_body_bytes, timeout=limits.body_timeout, min_rate=limits.body_min_rate,
                length=length,
            )  # fmt: skip
        except BodyRefused as refused:
            if refused.status == 413:
                # Closing a connection with a body still arriving resets it, and the client, still sending, loses
                # the answer (a reset, not a 413): what is still coming is read and dropped for a while first.
                await _discard(stream, LINGER_SECONDS)
            await _send_json(send, refused.status, str(refused))
            return
        if gone:
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _discard(chunks: AsyncIterator[bytes], seconds: float) -> None:
    """Read and drop what ``chunks`` still brings, for at most ``seconds``."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            async for _ in chunks:
                pass


async def _send_json(send: Send, status: int, error: str) -> None:
    body = orjson.dumps({"error": error})
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _guarded_h11(header_timeout: float) -> type[Any]:
    """uvicorn's h11 protocol with a deadline on request heads (the module docstring)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeadDeadlineH11(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(header_timeout, self._head_late)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            super().data_received(data)
            # A request's head arrived whole; or it asked for a WebSocket, whose protocol has the connection now.
            if self.cycle is not cycle or self.transport.get_protocol() is not self:
                self._disarm()

        def on_response_complete(self) -> None:
            cycle = self.cycle
            super().on_response_complete()
            if self.cycle is cycle and not self.transport.is_closing():  # waiting for the next request's head
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _head_late(self) -> None:
            self._head_timer = None
            if self.transport.is_closing() or (self.cycle is not None and not self.cycle.response_complete):
                return
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"content-length: 32\r\nconnection: close\r\n\r\nthe request head came too slowly"
            )
            self.transport.close()

    return HeadDeadlineH11


def uvicorn_config(app: Any, limits: ServerLimits | None = None, **options: Any) -> uvicorn.Config:
    """A ``uvicorn.Config`` serving ``app`` within ``limits`` (default: :class:`ServerLimits`'s defaults):
    the app wrapped in :class:`BodyLimit`, uvicorn's h11 protocol with the head deadline, and uvicorn's
    ``timeout_keep_alive``, ``limit_concurrency`` (``max_connections`` + 1: uvicorn counts the connection asking)
    and ``h11_max_incomplete_event_size``. ``options`` go to
    ``uvicorn.Config`` as they are (``host``, ``port``, ``log_level``...)."""
    import uvicorn

    limits = limits or ServerLimits()
    return uvicorn.Config(
        BodyLimit(app, limits),
        http=_guarded_h11(limits.header_timeout),
        timeout_keep_alive=limits.keep_alive_timeout,
        # uvicorn counts the connection asking among the open ones: its limit N serves N - 1 connections.
        limit_concurrency=limits.max_connections + 1 if limits.max_connections is not None else None,
        h11_max_incomplete_event_size=limits.max_header_bytes,
        **options,
    )
