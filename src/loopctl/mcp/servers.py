"""MCP servers whose tools a ``BareLoop`` runs: :class:`MCPServerStdio` (a subprocess) and
:class:`MCPServerHTTP` (streamable HTTP), on the official ``mcp`` SDK (version 2).

A server is an async context manager and a :class:`~loopctl.tool.ToolProvider`::

    async with MCPServerStdio("python", ["server.py"], prefix="fs") as server:
        loop = BareLoop(client, [my_tool, server])
        run = await loop.run("...")

What it does, and why (the failures users of other frameworks report):

- **One owner task.** The SDK's session is opened and closed inside one task the server starts for it; tool
  calls from any task are handed to that task and served there concurrently. So no call runs an anyio cancel
  scope of another task ("attempted to exit cancel scope in a different task"), and ``async with`` may be
  entered and left in different tasks.
- **A per-call timeout** (``timeout``, seconds): a call that hangs becomes an error result the model reads, the
  request is cancelled on the server, and the session stays usable.
- **A cached tool list, refreshed on ``tools/list_changed``**: the notification of handshake-era sessions, or
  the ``subscriptions/listen`` stream of 2026-07-28 sessions. The new list takes effect at the next model call.
- **One re-initialisation.** When the connection drops (the process died, the HTTP server went away) or the
  HTTP session expired (404), the session is opened again once. The call is then sent again if it never
  reached the server, or if the tool says it is safe to repeat (``readOnlyHint`` or ``idempotentHint``);
  otherwise it fails with an error result saying it may have run, and the next call uses the new session.
- **Errors are results.** An MCP error (unknown tool, invalid arguments, a tool's ``isError`` result) becomes an
  error result the model reads; only :meth:`BaseMCPServer.connect` raises (:class:`MCPConnectionError`).

Results are mapped by :mod:`loopctl.mcp.convert`. Names may get a ``prefix``; retention classes can be set for
every tool of a server (``retention``) or per MCP tool name (``retention_by_tool``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

import anyio
import httpx2
import mcp_types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from loopctl.errors import LoopError
from loopctl.mcp.convert import exposed_names, to_tool_output
from loopctl.message import Retention
from loopctl.tool import ToolContext, ToolOutput

__all__ = ["BaseMCPServer", "MCPConnectionError", "MCPServerHTTP", "MCPServerStdio", "MCPTool"]

_log = logging.getLogger("loopctl.mcp")

DEFAULT_TIMEOUT = 60.0
"""Seconds one tool call may take before it becomes an error result."""
DEFAULT_CONNECT_TIMEOUT = 30.0
"""Seconds to start (or reach) a server, initialise the session and list its tools."""


class MCPConnectionError(LoopError):
    """An MCP server could not be started, reached or initialised, or was used after it was closed. The text
    names the server and the cause."""

    retryable = True


class _Lost(Exception):
    """The session ended under a call. ``delivered``: whether the request may have reached the server."""

    def __init__(self, reason: str, delivered: bool) -> None:
        super().__init__(reason)
        self.delivered = delivered


# --- the owner task --------------------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Job:
    fn: Callable[[Client], Awaitable[Any]]
    future: asyncio.Future[Any]
    timeout: float | None
    scope: anyio.CancelScope | None = None
    started: bool = False
    sent_dead: bool = False  # the session had already closed when the request was to be sent


def _session_closed(client: Client) -> bool:
    """Whether the session's connection has already ended (a request now fails without being sent).

    The SDK keeps this on its dispatcher, unexported; read defensively, and answer "no" if it moves (then a
    failed call counts as possibly delivered: the cautious side)."""
    dispatcher = getattr(client.session, "_dispatcher", None)
    return bool(getattr(dispatcher, "_closed", False))


def _walk(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _walk(inner)
    else:
        yield exc


def _never_sent(exc: BaseException) -> bool:
    """Whether a transport failure shows the request never left (the server could not be reached at all)."""
    return any(isinstance(e, (httpx2.ConnectError, ConnectionRefusedError)) for e in _walk(exc))


# How servers word an expired or unknown streamable-HTTP session (HTTP 404): the SDK's "Session terminated",
# its server's "Session not found", the TypeScript SDK's -32001 "Session not found"...
_SESSION_GONE = re.compile(r"\bsession\b.*\b(not found|terminated|expired|unknown|invalid)\b", re.IGNORECASE)


def _describe(exc: BaseException) -> str:
    leaves = list(_walk(exc))
    leaf = leaves[0] if leaves else exc
    text = str(leaf) or type(leaf).__name__
    return text if isinstance(leaf, MCPError) else f"{type(leaf).__name__}: {text}"


class _Connection:
    """One MCP session, opened, served and closed by its own task (the owner)."""

    def __init__(self, server: BaseMCPServer) -> None:
        self.server = server
        self.jobs: asyncio.Queue[_Job | None] = asyncio.Queue()
        self.pending: set[_Job] = set()
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ended = asyncio.Event()
        self.closed = False
        self.error: BaseException | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._relists = 0  # tool-list refreshes started
        self._relisting = 0  # refreshes running
        self._relisted = asyncio.Event()  # set while no refresh is running
        self._relisted.set()
        self.task = asyncio.create_task(self._main(), name=f"loopctl.mcp {server.name}")

    async def _main(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await stack.enter_async_context(self.server._client(stack, self._on_message))
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    await self.server._list_tools(client)
                    caps = client.server_capabilities.tools
                    modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
                    if modern and caps is not None and caps.list_changed:
                        tg.start_soon(self._listen, client)
                    self.ready.set_result(None)
                    while (job := await self.jobs.get()) is not None:
                        tg.start_soon(self._serve, client, job)
                    tg.cancel_scope.cancel()
        except asyncio.CancelledError:
            self.error = MCPConnectionError(f"MCP server {self.server.name!r}: the session was cancelled")
            raise
        except BaseException as exc:
            self.error = exc
            if not isinstance(exc, Exception):
                raise
        finally:
            self.closed = True
            self._tg = None
            reason = _describe(self.error) if self.error is not None else "the session was closed"
            for job in list(self.pending):
                if not job.future.done():
                    delivered = job.started and not job.sent_dead and not _never_sent(self.error or Exception())
                    job.future.set_exception(_Lost(reason, delivered))
            if not self.ready.done():
                self.ready.set_exception(
                    MCPConnectionError(f"MCP server {self.server.name!r} could not be started or reached: {reason}")
                )
                self.ready.exception()  # retrieved: whoever waits on it reads it, nobody else should log it
            self.ended.set()

    async def _serve(self, client: Client, job: _Job) -> None:
        if job.future.done():  # the caller gave up before the job was taken
            return
        job.started = True
        job.sent_dead = _session_closed(client)
        relists = self._relists
        try:
            with anyio.CancelScope() as scope:
                job.scope = scope
                with anyio.fail_after(job.timeout) if job.timeout is not None else contextlib.nullcontext():
                    result = await job.fn(client)
                    if self._relists != relists:
                        # The server changed its tool list during this call (a tool that adds tools):
                        # finish the refresh first, so the model's next request already offers the new list.
                        await self._relisted.wait()
                if not job.future.done():
                    job.future.set_result(result)
        except Exception as exc:  # a job's failure is its caller's to read, never the owner's to die of
            if not job.future.done():
                if isinstance(exc, MCPError) and exc.code == mcp_types.CONNECTION_CLOSED:
                    exc = _Lost(str(exc), delivered=not job.sent_dead)
                elif isinstance(exc, MCPError) and _SESSION_GONE.search(exc.message or ""):
                    exc = _Lost(f"the HTTP session has expired ({exc.message})", delivered=False)
                job.future.set_exception(exc)

    async def _on_message(self, message: Any) -> None:
        """The SDK's message handler: a handshake-era ``notifications/tools/list_changed`` refreshes the list."""
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._start_relist()

    def _start_relist(self) -> None:
        """Fetch the tool list again, in the owner's task group. Counted at once (not when the task starts), so
        a call whose reply follows the change notification waits for the new list."""
        if self._tg is None:
            return
        self._relists += 1
        self._relisting += 1
        self._relisted.clear()
        self._tg.start_soon(self._relist)

    async def _relist(self) -> None:
        try:
            await self.run(self.server._list_tools, self.server.connect_timeout)
        except Exception as exc:  # the old list stays; the next change notification tries again
            _log.warning("MCP server %r: listing the tools again failed (%s)", self.server.name, _describe(exc))
        finally:
            self._relisting -= 1
            if not self._relisting:
                self._relisted.set()

    async def _listen(self, client: Client) -> None:
        """Watch a 2026-07-28 session's ``subscriptions/listen`` stream for tool-list changes. A stream that
        drops (the server restarted) is opened again, and the list fetched again: changes are not replayed."""
        delay = 0.5
        while True:
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    delay = 0.5
                    async for _ in subscription:
                        self._start_relist()
                return  # the server ended the stream cleanly
            except ListenNotSupportedError as exc:
                _log.info("MCP server %r: no tool-list updates (%s)", self.server.name, exc)
                return
            except (MCPError, SubscriptionLost, TimeoutError, OSError, httpx2.TransportError) as exc:
                _log.info("MCP server %r: the tool-list stream dropped (%s); listening again", self.server.name, exc)
            await anyio.sleep(delay)
            delay = min(delay * 2, 30.0)
            with contextlib.suppress(Exception):
                await self.server._list_tools(client)

    async def run(self, fn: Callable[[Client], Awaitable[Any]], timeout: float | None) -> Any:
        """Run ``fn(client)`` in the owner task; raises what it raised, ``TimeoutError`` after ``timeout``
        seconds, or :class:`_Lost` when the session ends first."""
        if self.closed:
            raise _Lost("the session has ended", delivered=False)
        job = _Job(fn, asyncio.get_running_loop().create_future(), timeout)
        self.pending.add(job)
        self.jobs.put_nowait(job)
        try:
            return await job.future
        except asyncio.CancelledError:
            if job.scope is not None:
                job.scope.cancel()  # stop the request on the server too
            raise
        finally:
            self.pending.discard(job)

    async def close(self, wait: float = 10.0) -> None:
        """End the session (in its owner task) and wait for it, at most ``wait`` seconds."""
        if not self.closed:
            self.jobs.put_nowait(None)
        try:
            await asyncio.wait_for(self.ended.wait(), wait)
        except TimeoutError:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task


# --- tools -----------------------------------------------------------------------------------------------------


class MCPTool:
    """One tool of an MCP server, as a :class:`~loopctl.tool.Tool`: ``name`` is what the model calls it
    (prefixed, provider-safe), ``mcp_name`` what the server calls it. ``annotations`` are the server's hints
    (``read_only_hint``, ``idempotent_hint``...).

    ``definition`` is the server's ``Tool`` (schema, description, annotations); ``retention`` the
    :class:`~loopctl.message.Retention` its results get (``None``: untagged).
    """

    __slots__ = ("annotations", "description", "input_schema", "mcp_name", "name", "retention", "server")

    def __init__(
        self,
        server: BaseMCPServer,
        name: str,
        definition: mcp_types.Tool,
        retention: Retention | None,
    ) -> None:
        self.server = server
        self.name = name
        self.mcp_name = definition.name
        self.description = definition.description or definition.title or ""
        self.input_schema: Mapping[str, Any] = definition.input_schema or {"type": "object", "properties": {}}
        self.annotations = definition.annotations
        self.retention = retention

    @property
    def safe_to_repeat(self) -> bool:
        """Whether the server says a second run does no harm (``readOnlyHint`` or ``idempotentHint``)."""
        hints = self.annotations
        return hints is not None and bool(hints.read_only_hint or hints.idempotent_hint)

    async def call(self, input: Any, context: ToolContext) -> ToolOutput:  # noqa: A002 - the Tool protocol's name
        """Call the tool on the server; every failure is an error result (see the module docstring).

        ``input`` is the model's arguments (a JSON object) and ``context`` the call's
        :class:`~loopctl.tool.ToolContext` (its timeout and cancellation apply).
        """
        arguments = input if isinstance(input, dict) else {}
        if not isinstance(input, dict):
            return ToolOutput(f"expected a JSON object as input, got {type(input).__name__}", is_error=True)
        return await self.server._call(self, arguments)

    def __repr__(self) -> str:
        return f"MCPTool(name={self.name!r}, server={self.server.name!r})"


# --- servers ---------------------------------------------------------------------------------------------------


class BaseMCPServer:
    """What :class:`MCPServerStdio` and :class:`MCPServerHTTP` share: the session's owner task, the tool list,
    calls, timeouts and re-initialisation. Options (keyword-only):

    ``name``: for messages and logs. ``prefix``: the model sees ``{prefix}_{tool}``. ``timeout``: seconds per
    call (``None``: no limit; the engine's ``RunConfig.tool_timeout`` still applies). ``connect_timeout``:
    seconds to start, initialise and list tools. ``retention`` / ``retention_by_tool``: the retention class of
    every result / of the results of the named MCP tools (``docs/compaction.md``). ``mode``: the SDK's
    protocol negotiation (``"auto"``: the 2026-07-28 protocol when the server offers it, else the initialize
    handshake; ``"legacy"``: always the handshake).
    """

    def __init__(
        self,
        *,
        name: str,
        prefix: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        retention: Retention | None = None,
        retention_by_tool: Mapping[str, Retention | None] | None = None,
        mode: str = "auto",
    ) -> None:
        self.name = name
        self.prefix = prefix
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retention = retention
        self.retention_by_tool = dict(retention_by_tool or {})
        self.mode = mode
        self._tools: tuple[MCPTool, ...] = ()
        self._conn: _Connection | None = None
        self._lock: asyncio.Lock | None = None
        self._closed = False
        self.connections = 0
        """How many sessions have been opened (1 after :meth:`connect`; more after re-initialisations)."""

    # --- the session -----------------------------------------------------------------------------------------

    def _client(self, stack: contextlib.AsyncExitStack, on_message: Callable[[Any], Awaitable[None]]) -> Client:
        """The SDK client for one session (entered by the owner task); resources go on ``stack``."""
        raise NotImplementedError

    def _client_options(self, on_message: Callable[[Any], Awaitable[None]]) -> dict[str, Any]:
        return {"message_handler": on_message, "mode": self.mode, "cache": None, "raise_exceptions": False}

    async def connect(self) -> None:
        """Start the session (and the server process, for stdio) and list the tools. Raises
        :class:`MCPConnectionError` when it cannot within ``connect_timeout`` seconds. Idempotent."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        self._closed = False
        async with self._lock:
            if self._conn is not None and not self._conn.closed:
                return
            await self._open()

    async def _open(self) -> _Connection:
        conn = _Connection(self)
        self.connections += 1
        try:
            await asyncio.wait_for(asyncio.shield(conn.ready), self.connect_timeout)
        except TimeoutError:
            await conn.close(wait=5.0)
            raise MCPConnectionError(
                f"MCP server {self.name!r} did not start and list its tools within {self.connect_timeout:g} s"
            ) from None
        except MCPConnectionError:
            await conn.close(wait=5.0)
            raise
        self._conn = conn
        return conn

    async def _live(self) -> _Connection:
        """The open session, re-opened if it ended. Raises :class:`MCPConnectionError`."""
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        if self._closed or self._lock is None:
            raise MCPConnectionError(f"MCP server {self.name!r} is not connected (use `async with` or connect())")
        async with self._lock:
            if self._conn is not None and not self._conn.closed:
                return self._conn
            _log.info("MCP server %r: opening the session again", self.name)
            return await self._open()

    async def _discard(self, conn: _Connection) -> None:
        """Close a session whose connection failed; the next call opens a new one."""
        if self._conn is conn:
            self._conn = None
        await conn.close(wait=5.0)

    async def aclose(self) -> None:
        """Close the session (and stop the server process, for stdio). Calls after this are error results."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def __aenter__(self) -> BaseMCPServer:
        await self.connect()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # --- tools -----------------------------------------------------------------------------------------------

    @property
    def tools(self) -> tuple[MCPTool, ...]:
        """The server's tools as last listed (a new tuple each time the list changes)."""
        return self._tools

    async def _list_tools(self, client: Client) -> None:
        listed: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(100):  # a paginator that never ends cannot hang the session
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            listed += page.tools
            cursor = page.next_cursor
            if cursor is None:
                break
        names = exposed_names([t.name for t in listed], self.prefix)
        self._tools = tuple(
            MCPTool(self, name, t, self.retention_by_tool.get(t.name, self.retention))
            for name, t in zip(names, listed, strict=True)
        )

    async def refresh_tools(self) -> tuple[MCPTool, ...]:
        """List the tools again now (they are also refreshed on the server's change notifications)."""
        conn = await self._live()
        await conn.run(self._list_tools, self.connect_timeout)
        return self._tools

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolOutput:
        """Call the server's tool ``name`` (its MCP name) directly, as the engine would.

        ``arguments`` is the tool's input (a JSON object; none: ``{}``).
        """
        for t in self._tools:
            if t.mcp_name == name:
                return await self._call(t, dict(arguments or {}))
        return ToolOutput(f"MCP server {self.name!r} has no tool {name!r}", is_error=True)

    async def _call(self, tool: MCPTool, arguments: dict[str, Any]) -> ToolOutput:
        for attempt in (1, 2):
            try:
                conn = await self._live()
            except MCPConnectionError as exc:
                return ToolOutput(str(exc), is_error=True)

            async def send(client: Client) -> Any:
                return await client.call_tool(tool.mcp_name, arguments)

            try:
                result = await conn.run(send, self.timeout)
            except TimeoutError:
                return ToolOutput(
                    f"MCP tool {tool.mcp_name!r} ({self.name}) timed out after {self.timeout:g} s and was cancelled",
                    is_error=True,
                )
            except _Lost as lost:
                await self._discard(conn)
                if attempt == 1 and (not lost.delivered or tool.safe_to_repeat):
                    continue  # re-initialise once and send the call again
                if lost.delivered:
                    return ToolOutput(
                        f"MCP server {self.name!r} lost the connection during the call ({lost}); the call may "
                        "have run. The session is opened again for the next call.",
                        is_error=True,
                    )
                return ToolOutput(f"MCP server {self.name!r} is unreachable: {lost}", is_error=True)
            except MCPError as exc:
                return ToolOutput(f"MCP error {exc.code} from {self.name!r}: {exc.message}", is_error=True)
            except Exception as exc:  # the SDK refused the reply (a result of the wrong shape...)
                return ToolOutput(f"MCP server {self.name!r}: {_describe(exc)}", is_error=True)
            return to_tool_output(result, tool.retention)
        raise AssertionError("unreachable")  # pragma: no cover

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, tools={len(self._tools)})"


class MCPServerStdio(BaseMCPServer):
    """An MCP server run as a subprocess (``command`` with ``args``), spoken to over its stdin and stdout.

    ``env``: variables added to the SDK's safe default environment (``HOME``, ``PATH``...; the parent's other
    variables are not passed on, so no key leaks by accident). ``cwd``: the process's working folder.
    ``stderr``: where its standard error goes (default ``sys.stderr``). The other options are
    :class:`BaseMCPServer`'s; ``name`` defaults to the command line with file names for paths
    (``python server.py``).
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        stderr: TextIO | None = None,
        name: str | None = None,
        **options: Any,
    ) -> None:
        shown = [Path(command).name, *(Path(x).name if "/" in x else x for x in args)]
        super().__init__(name=name or " ".join(shown)[:60], **options)
        self.params = StdioServerParameters(
            command=command, args=list(args), env=dict(env) if env is not None else None, cwd=cwd
        )
        self.stderr = stderr

    def _client(self, stack: contextlib.AsyncExitStack, on_message: Callable[[Any], Awaitable[None]]) -> Client:
        transport = stdio_client(self.params, errlog=self.stderr or sys.stderr)
        return Client(transport, **self._client_options(on_message))

    def __repr__(self) -> str:
        return f"MCPServerStdio({self.params.command!r}, {self.params.args!r}, tools={len(self._tools)})"


class MCPServerHTTP(BaseMCPServer):
    """An MCP server at ``url``, spoken to over streamable HTTP.

    ``headers`` are sent with every request (an ``Authorization`` header, for example); they never appear in
    ``repr`` or in messages. The other options are :class:`BaseMCPServer`'s; ``name`` defaults to the URL's
    host.
    """

    def __init__(self, url: str, headers: Mapping[str, str] | None = None, *, name: str | None = None, **options: Any):
        super().__init__(name=name or (httpx2.URL(url).host or url), **options)
        self.url = url
        self._headers = dict(headers or {})

    def _client(self, stack: contextlib.AsyncExitStack, on_message: Callable[[Any], Awaitable[None]]) -> Client:
        # The SDK's own defaults: 30 s to connect or write, 300 s to read (a server may hold a stream open).
        http = httpx2.AsyncClient(headers=self._headers, timeout=httpx2.Timeout(30.0, read=300.0))
        stack.push_async_callback(http.aclose)
        return Client(streamable_http_client(self.url, http_client=http), **self._client_options(on_message))

    def __repr__(self) -> str:
        return f"MCPServerHTTP({self.url!r}, tools={len(self._tools)})"
