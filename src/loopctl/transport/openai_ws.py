"""The OpenAI Responses API over its WebSocket mode: one long-lived connection to ``/v1/responses``, each turn a
``response.create`` message with only the new input and the previous response's id, the reply's stream events
coming back as JSON text messages (platform.openai.com/docs/guides/websocket-mode).

Built on ``websockets`` (asyncio), the library the official ``openai`` SDK's own WebSocket mode uses
(``client.responses.connect()``, ``openai[realtime]``), configured by the SDK as the HTTP clients are (key,
base URL, headers). The events are decoded by the same codec as the HTTP stream (one event a message), so
replies, usage and errors are exactly those of :class:`~loopctl.transport.OpenAIResponsesClient`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from loopctl.errors import (
    ConnectionFailed,
    ProviderError,
    ProviderTimeout,
    StreamTruncated,
)
from loopctl.message.model import _dumps_bytes
from loopctl.providers.base import EventCallback, ModelRequest
from loopctl.providers.native import NativeTool
from loopctl.response import ModelResponse
from loopctl.transport._chain import Chains, lost_state
from loopctl.transport._http import DEFAULT_TIMEOUT
from loopctl.transport.openai import OpenAIResponsesClient

__all__ = ["CONNECTION_LIFETIME", "OpenAIResponsesWebSocketClient"]

CONNECTION_LIFETIME = 55 * 60.0
"""Seconds a connection is used for new turns: the API closes one after 60 minutes
(``websocket_connection_limit_reached``), so the client opens a new one a little before."""


@dataclass(eq=False, slots=True)
class _Connection:
    socket: Any  # websockets.asyncio.client.ClientConnection
    opened: float  # time.monotonic()
    responses: set[str] = field(default_factory=set)  # the ids this connection holds in memory
    busy: bool = False


class OpenAIResponsesWebSocketClient(OpenAIResponsesClient):
    """OpenAI Responses over the WebSocket mode. Arguments as :class:`~loopctl.transport.OpenAIResponsesClient`
    (``codec_options``, ``native_tools``...), plus:

    - ``websocket_url``: default the base URL with ``ws``/``wss`` and ``/responses``;
    - ``ping_interval``: seconds between keep-alive pings (``websockets``' own; ``None`` for none), and
      ``ping_timeout``: seconds to wait for the pong before the connection counts as dropped;
    - ``max_connections``: connections kept open (one response at a time on each: the API runs one
      in-flight response per connection); a turn goes on the connection its conversation last used when it is
      free, where the previous response is held in memory even with ``store=False``.

    Each turn sends only the messages after the conversation's previous reply, with its
    ``previous_response_id``. When the server does not hold it (another connection with ``store=False``, a
    dropped connection, ``previous_response_not_found``), the turn is sent again whole, once. A connection past
    :data:`CONNECTION_LIFETIME` is replaced before a turn. Errors are those of the HTTP client: the API's error
    events and a refused upgrade as their typed :class:`~loopctl.errors.ProviderError`,
    :class:`~loopctl.errors.ConnectionFailed` when no connection opens, :class:`~loopctl.errors.ProviderTimeout`
    when no event comes within ``timeout``, :class:`~loopctl.errors.StreamTruncated` (retryable: the engine's
    next attempt opens a new connection) when the connection drops mid-turn.

    ``model`` is the model id (``gpt-5``); ``api_key``, ``base_url`` and ``default_headers`` as for
    :class:`~loopctl.transport.OpenAIChatClient` (the key is sent in the upgrade request's ``Authorization``
    header).
    """

    def __init__(
        self,
        model: str,
        *,
        websocket_url: str | None = None,
        ping_interval: float | None = 20.0,
        ping_timeout: float | None = 20.0,
        max_connections: int = 4,
        timeout: float = DEFAULT_TIMEOUT,
        api_key: str | None = None,
        base_url: str | None = None,
        codec_options: Mapping[str, Any] | None = None,
        default_headers: Mapping[str, str] | None = None,
        native_tools: Sequence[NativeTool] = (),
    ) -> None:
        # The WebSocket mode holds a connection's responses in memory: store=False is fine (the docs).
        super().__init__(
            model,
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            codec_options=codec_options,
            default_headers=default_headers,
            native_tools=native_tools,
        )
        self.timeout = timeout
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.max_connections = max_connections
        self._ws_url = websocket_url or _websocket_url(str(self._sdk_client.base_url))
        self._ws_chains = Chains()
        self._links: dict[int, _Connection] = {}  # id(first message) -> the connection that holds its chain
        self._open: list[_Connection] = []
        self._free = asyncio.Condition()
        self.connections_opened = 0
        """How many connections this client opened (reconnections included)."""

    @property
    def websocket_url(self) -> str:
        """The URL connections open to."""
        return self._ws_url

    # --- one turn -------------------------------------------------------------------------------------------

    async def generate(
        self, request: ModelRequest, *, stream: bool = True, on_event: EventCallback | None = None
    ) -> ModelResponse:
        """Send ``request`` as a ``response.create`` message and decode the reply's events (always streamed:
        ``stream`` only says whether ``on_event`` is called). Raises what the class docstring lists."""
        messages = request.messages
        link = self._ws_chains.find(messages)
        home = self._links.get(id(messages[0])) if messages else None
        connection = await self._acquire(home)
        try:
            plan = None
            held = link is not None and link.response_id is not None
            if (
                held
                and link is not None
                and (link.response_id in connection.responses or self.codec_options.get("store") is not False)
            ):
                plan = {"previous_response_id": link.response_id, "continue_from": len(link.messages)}
            try:
                response = await self._turn(connection, request, plan, on_event if stream else None)
            except ProviderError as exc:
                if plan is None or not lost_state(exc):
                    raise
                self._ws_chains.forget(messages)
                response = await self._turn(connection, request, None, on_event if stream else None)
        finally:
            await self._release(connection)
        if response.id is not None:
            connection.responses.add(response.id)
        self._ws_chains.record(messages, response.message, response_id=response.id)
        if messages:
            self._links[id(messages[0])] = connection
        return response

    async def _turn(
        self,
        connection: _Connection,
        request: ModelRequest,
        plan: dict[str, Any] | None,
        on_event: EventCallback | None,
    ) -> ModelResponse:
        body = self.codec.build_request_from(
            self._with_native(request),
            model=self.model,
            cache=self._cache.conversions,
            **{**self.codec_options, **(plan or {})},
        )
        # "stream is implicit over WebSocket and should not be sent; background is not supported" (the WebSocket
        # events reference, response.create).
        body.pop("stream", None)
        message = _dumps_bytes({"type": "response.create", **body})
        import websockets

        socket = connection.socket
        decoder = self.codec.StreamDecoder()
        began = False
        try:
            await socket.send(message.decode())
            while True:
                try:
                    data = await asyncio.wait_for(socket.recv(decode=False), self.timeout)
                except TimeoutError:
                    await self._discard(connection)
                    raise ProviderTimeout(f"no event in {self.timeout:g} s", provider=self.provider) from None
                began = True
                events = decoder.feed_event(data)
                if on_event is not None:
                    for event in events:
                        on_event(event)
                if decoder.accumulator.finished:  # response.completed or .incomplete (failed and error raise)
                    break
        except websockets.ConnectionClosed as exc:
            await self._discard(connection)
            if not began:
                raise ConnectionFailed(
                    f"the WebSocket closed before the reply began ({exc})", provider=self.provider
                ) from None
            raise StreamTruncated(f"the WebSocket closed mid-reply ({exc})", provider=self.provider) from None
        except ProviderError as exc:
            self._scrub(exc)
            raise
        response: ModelResponse = decoder.finish()
        return response

    # --- connections ----------------------------------------------------------------------------------------

    async def _acquire(self, home: _Connection | None) -> _Connection:
        """A free connection: ``home`` when it is free and young enough, another free one, a new one while
        fewer than ``max_connections`` are open, else the first to be freed."""
        async with self._free:
            while True:
                now = time.monotonic()
                for old in [c for c in self._open if not c.busy and now - c.opened > CONNECTION_LIFETIME]:
                    await self._discard(old)
                free = [c for c in self._open if not c.busy]
                chosen = home if home is not None and home in free else (free[0] if free else None)
                if chosen is None and len(self._open) < self.max_connections:
                    chosen = await self._open_connection()
                    self._open.append(chosen)
                if chosen is not None:
                    chosen.busy = True
                    return chosen
                await self._free.wait()

    async def _release(self, connection: _Connection) -> None:
        async with self._free:
            connection.busy = False
            self._free.notify()

    async def _discard(self, connection: _Connection) -> None:
        """Close ``connection`` and forget it (its in-memory responses with it)."""
        if connection in self._open:
            self._open.remove(connection)
        for key, held in list(self._links.items()):
            if held is connection:
                del self._links[key]
        with contextlib.suppress(Exception):  # already broken: nothing more to do
            await connection.socket.close()

    async def _open_connection(self) -> _Connection:
        """Open a connection (the upgrade carries the SDK's headers: the key, OpenAI-Beta...). A refused
        upgrade is the API's typed error for its status and body."""
        import websockets
        from websockets.asyncio.client import connect

        try:
            socket = await asyncio.wait_for(
                connect(
                    self._ws_url,
                    additional_headers=self._headers,
                    ping_interval=self.ping_interval,
                    ping_timeout=self.ping_timeout,
                    max_size=None,  # a reply may be large (the SDK sets no limit either)
                    open_timeout=None,
                ),
                self.timeout,
            )
        except TimeoutError:
            raise ProviderTimeout(f"no WebSocket connection in {self.timeout:g} s", provider=self.provider) from None
        except websockets.InvalidStatus as exc:
            response = exc.response
            error: ProviderError = self.codec.error_from_http(
                response.status_code, self._redact(bytes(response.body or b"")), dict(response.headers), now=time.time()
            )
            self._scrub(error)
            raise error from None
        except (OSError, websockets.InvalidHandshake, websockets.ConnectionClosed) as exc:
            raise ConnectionFailed(f"cannot open the WebSocket ({exc})", provider=self.provider) from None
        self.connections_opened += 1
        return _Connection(socket, time.monotonic())

    async def aclose(self) -> None:
        """Close every connection, then the HTTP pool."""
        for connection in list(self._open):
            await self._discard(connection)
        await super().aclose()


def _websocket_url(base_url: str) -> str:
    """``https://api.openai.com/v1/`` -> ``wss://api.openai.com/v1/responses`` (as the SDK's
    ``responses.connect()`` builds it)."""
    parts = urlsplit(base_url)
    scheme = "ws" if parts.scheme == "http" else "wss"
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + "/responses", parts.query, ""))
