"""MCP servers whose tools a ``BareLoop`` runs: :class:`MCPServerStdio` (a subprocess) and
:class:`MCPServerHTTP` (streamable HTTP), on the official ``mcp`` SDK (version 2), with the client features of
MCP 2025-11-25 (``docs/mcp.md`` lists each with an example).

A server is an async context manager and a :class:`~loopctl.tool.ToolProvider`::

    async with MCPServerStdio("python", ["server.py"], prefix="fs", sampling=client, roots=["."]) as server:
        loop = BareLoop(client, [my_tool, server])
        run = await loop.run("...")

What it does, and why (the failures users of other frameworks report):

- **One owner task.** The SDK's session is opened and closed inside one task the server starts for it; tool
  calls from any task are handed to that task and served there concurrently. So no call runs an anyio cancel
  scope of another task ("attempted to exit cancel scope in a different task"), and ``async with`` may be
  entered and left in different tasks.
- **A per-call timeout** (``timeout``, seconds): a call that hangs becomes an error result the model reads, the
  request is cancelled on the server, and the session stays usable. With ``progress_resets_timeout`` each
  progress notification of the call starts its timeout again.
- **Progress at a bounded rate**: a call's progress notifications reach the run as
  :class:`~loopctl.engine.ToolProgress` events at most one every ``progress_interval`` seconds (default 0.25):
  a flood of them is coalesced into its newest, which always arrives.
- **A cached tool list, refreshed on ``tools/list_changed``**: the notification of handshake-era sessions, or
  the ``subscriptions/listen`` stream of 2026-07-28 sessions. The new list takes effect at the next model call.
- **One re-initialisation.** When the connection drops (the process died, the HTTP server went away) or the
  HTTP session expired (404), the session is opened again once. The call is then sent again if it never
  reached the server, or if the tool says it is safe to repeat (``readOnlyHint`` or ``idempotentHint``);
  otherwise it fails with an error result saying it may have run, and the next call uses the new session.
- **Errors are results.** An MCP error (unknown tool, invalid arguments, a tool's ``isError`` result) becomes an
  error result the model reads; only :meth:`BaseMCPServer.connect` and the library calls (resources,
  prompts) raise (:class:`MCPConnectionError`, :class:`MCPRequestError`).
- **The client features**: sampling (``sampling=`` a model client, ``on_sampling=`` to refuse, edit or answer;
  counted in the calling run's usage and limits), elicitation (``elicitation=``, form and URL modes), roots
  (``roots=``, :meth:`BaseMCPServer.set_roots`), progress (:class:`~loopctl.engine.ToolProgress` events),
  server logs (Python ``logging``, ``log_level=``), resources and prompts (library calls, and an opt-in
  ``resource_tool``), the server's instructions (:func:`mcp_instructions`), tasks, tool filters and approval
  rules.

Results are mapped by :mod:`loopctl.mcp.convert`. Names may get a ``prefix``; retention classes can be set for
every tool of a server (``retention``) or per MCP tool name (``retention_by_tool``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import logging
import re
import sys
import time
import urllib.parse
import warnings
import weakref
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterator, Mapping, Sequence
from decimal import Decimal
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TextIO, TypeAlias

import anyio
import httpx2
import mcp_types
import orjson
import pydantic
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry import context as otel_context

from loopctl._frozen import dataclass
from loopctl._progress import PROGRESS_INTERVAL, ProgressGate
from loopctl.errors import LoopError
from loopctl.mcp.convert import exposed_names, to_tool_output
from loopctl.mcp.elicitation import (
    Accept,
    Cancel,
    Decline,
    Elicitation,
    ElicitationAnswer,
    ElicitationHandler,
    check_content,
    schema_problem,
    wire_content,
)
from loopctl.mcp.resources import MCPPrompt, prompt_of, resource_output
from loopctl.mcp.sampling import REJECTED, SamplingError, SamplingHandler, sampling_request, to_sampling_result
from loopctl.message import Retention
from loopctl.providers import ModelClient, ModelRequest
from loopctl.response import ModelResponse
from loopctl.tool import ToolContext, ToolOutput

__all__ = [
    "BaseMCPServer",
    "MCPConnectionError",
    "MCPRequestError",
    "MCPResourceTool",
    "MCPServerHTTP",
    "MCPServerStdio",
    "MCPTool",
    "Root",
    "mask_url",
    "mcp_instructions",
]

_log = logging.getLogger("loopctl.mcp")

DEFAULT_TIMEOUT = 60.0
"""Seconds one tool call may take before it becomes an error result."""
DEFAULT_CONNECT_TIMEOUT = 30.0
"""Seconds to start (or reach) a server, initialise the session and list its tools."""
REFRESH_SETTLE = 0.05
"""Seconds a tool-list refresh waits after a change notification, so that a burst of them is one listing."""

LogLevel: TypeAlias = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
"""An MCP log level (RFC 5424's syslog severities)."""

# MCP log levels (RFC 5424) as Python logging levels: notice between INFO and WARNING, alert and emergency above
# CRITICAL, so that Python's level filter keeps their order.
LOG_LINES_PER_SECOND = 100
"""At most this many of a server's log lines (``notifications/message``) are logged in any one second; the
rest of that second's are counted and said in one line (a server cannot flood the host's logs)."""

_LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO + 5,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL + 5,
    "emergency": logging.CRITICAL + 10,
}
for _level in ("notice", "alert", "emergency"):  # named, so that a log line says NOTICE, not "Level 25"
    if logging.getLevelName(_LOG_LEVELS[_level]).startswith("Level "):
        logging.addLevelName(_LOG_LEVELS[_level], _level.upper())


class MCPConnectionError(LoopError):
    """An MCP server could not be started, reached or initialised, or was used after it was closed. The text
    names the server and the cause."""

    retryable = True


class MCPRequestError(LoopError):
    """A library call (resources, prompts...) that the server answered with an error, or that timed out:
    ``code`` is the JSON-RPC error code (``None`` for a timeout or a reply of the wrong shape); the text names
    the server and its message."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class _Lost(Exception):
    """The session ended under a call. ``delivered``: whether the request may have reached the server."""

    def __init__(self, reason: str, delivered: bool) -> None:
        super().__init__(reason)
        self.delivered = delivered


@dataclass(frozen=True, slots=True)
class Root:
    """A folder (or file) the host tells the server it may work in (MCP "Roots"): ``uri`` is a ``file://``
    URI, ``name`` a label. ``roots=`` and :meth:`BaseMCPServer.set_roots` also take paths (``str`` or
    ``Path``), made absolute and named after their last component."""

    uri: str
    name: str | None = None

    @classmethod
    def of(cls, value: str | Path | Root) -> Root:
        """``value`` as a root: a ``Root`` as is, a ``file://`` URI, or a path."""
        if isinstance(value, Root):
            return value
        if isinstance(value, str) and value.startswith("file://"):
            return cls(value)
        path = Path(value).expanduser().resolve()
        return cls(path.as_uri(), path.name or str(path))


# --- the owner task --------------------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Job:
    fn: Callable[[Client], Awaitable[Any]]
    future: asyncio.Future[Any]
    timeout: float | None
    trace_context: otel_context.Context  # the caller's OpenTelemetry context: the SDK's spans nest under it
    scope: anyio.CancelScope | None = None
    timer: anyio.CancelScope | None = None  # the timeout's scope, while the job runs
    started: bool = False
    sent_dead: bool = False  # the session had already closed when the request was to be sent

    def extend(self) -> None:
        """Start the job's timeout again (a progress notification came)."""
        if self.timer is not None and self.timeout is not None:
            self.timer.deadline = anyio.current_time() + self.timeout


_JOB: contextvars.ContextVar[_Job | None] = contextvars.ContextVar("loopctl_mcp_job", default=None)
"""The job running in the current task of a session (its ``fn`` reads it to extend the timeout)."""


_MAX_PAGES = 100
"""The most pages a paginated list (tools, resources, templates, prompts) is read for: a paginator that never
ends cannot hang the session."""


async def _all_pages(list_page: Callable[..., Awaitable[Any]], field: str) -> list[Any]:
    """Every item of a paginated MCP list: ``list_page(cursor=..., cache_mode="bypass")`` read page after page
    (at most :data:`_MAX_PAGES`), ``field`` of each page joined."""
    found: list[Any] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await list_page(cursor=cursor, cache_mode="bypass")
        found += getattr(page, field)
        cursor = page.next_cursor
        if cursor is None:
            break
    return found


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


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _one_line(text: str, limit: int = 2000) -> str:
    """A server's text made safe for a log line: control characters (escape sequences, newlines) escaped,
    cut to ``limit`` characters."""
    out = _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)
    return out if len(out) <= limit else out[:limit] + "…"


@contextlib.contextmanager
def _no_deprecation() -> Iterator[None]:
    """The SDK marks the handshake-era features (logging/setLevel, roots, resources/subscribe) deprecated as of
    2026-07-28; loopctl uses them only on the sessions that have them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        yield


# --- tasks (MCP 2025-11-25, "Tasks") ---------------------------------------------------------------------------

TASK_TTL_MS = 600_000
"""How long (milliseconds) a tool task is asked to be kept on the server after it was created."""


def _task_support(tool: mcp_types.Tool) -> str:
    """A tool's ``execution.taskSupport``: ``"forbidden"`` (the default), ``"optional"`` or ``"required"``."""
    execution = tool.execution
    return (execution.task_support if execution is not None else None) or "forbidden"


def _can_call_as_task(client: Client) -> bool:
    """Whether tools can be called as tasks on this session: a 2025-11-25 session (tasks left the core protocol
    in 2026-07-28) with a server that declares ``tasks.requests.tools.call``, and an SDK session whose
    dispatcher sends raw requests (the SDK types tasks, but its ``tools/call`` reads only a final result)."""
    if client.protocol_version != "2025-11-25":
        return False
    tasks = client.server_capabilities.tasks
    if tasks is None or tasks.requests is None or tasks.requests.tools is None or tasks.requests.tools.call is None:
        return False
    return callable(getattr(getattr(client.session, "_dispatcher", None), "send_raw_request", None))


async def _call_as_task(
    client: Client,
    name: str,
    arguments: dict[str, Any],
    on_status: Callable[[int, str], None] | None = None,
) -> mcp_types.CallToolResult:
    """Call a tool as a task (MCP 2025-11-25, "Tasks"): ``tools/call`` with ``task`` returns a
    ``CreateTaskResult``; ``tasks/result`` then waits for the task to end and returns its ``CallToolResult``.
    Meanwhile ``tasks/get`` is polled (at the server's ``pollInterval``, at least every 5 s) and each new status
    message goes to ``on_status(n, message)``. A call given up on (its timeout, a cancelled run) cancels the
    task on the server (``tasks/cancel``)."""
    session = client.session
    dispatcher: Any = getattr(session, "_dispatcher", None)
    params = {"name": name, "arguments": arguments, "task": {"ttl": TASK_TTL_MS}}
    raw = await dispatcher.send_raw_request(
        "tools/call", params, {"headers": {MCP_PROTOCOL_VERSION_HEADER: client.protocol_version}}
    )
    if not isinstance(raw, dict) or "task" not in raw:  # the server answered at once
        return mcp_types.CallToolResult.model_validate(raw)
    task = mcp_types.CreateTaskResult.model_validate(raw).task
    task_id = task.task_id

    async def follow() -> None:
        seen = task.status_message
        count = 0
        if seen and on_status is not None:
            count += 1
            on_status(count, seen)
        interval = min(max((task.poll_interval or 1000) / 1000, 0.2), 5.0)
        while True:
            await anyio.sleep(interval)
            state = await session.send_request(
                mcp_types.GetTaskRequest(params=mcp_types.GetTaskRequestParams(task_id=task_id)),
                mcp_types.GetTaskResult,
            )
            if state.status_message and state.status_message != seen and on_status is not None:
                seen = state.status_message
                count += 1
                on_status(count, seen)
            if state.status in ("completed", "failed", "cancelled"):
                return

    try:
        async with anyio.create_task_group() as tg:
            if on_status is not None:
                tg.start_soon(_quietly, follow)
            result = await session.send_request(
                mcp_types.GetTaskPayloadRequest(params=mcp_types.GetTaskPayloadRequestParams(task_id=task_id)),
                mcp_types.CallToolResult,
            )
            tg.cancel_scope.cancel()
        return result
    except BaseException:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5.0), contextlib.suppress(Exception):
            await session.send_request(
                mcp_types.CancelTaskRequest(params=mcp_types.CancelTaskRequestParams(task_id=task_id)),
                mcp_types.CancelTaskResult,
            )
        raise


async def _quietly(fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn``; a failure is logged (status polling is a courtesy: the result does not depend on it)."""
    try:
        await fn()
    except Exception as exc:
        _log.debug("following an MCP task failed: %s", _describe(exc))


# --- the session ---------------------------------------------------------------------------------------------


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
        self.instructions: str | None = None
        self.modern = False  # a 2026-07-28 session
        self._tg: anyio.abc.TaskGroup | None = None
        self._client: Client | None = None
        self._changes = 0  # tool-list changes announced by the server (and refreshes asked for)
        self._listed = 0  # the changes the last finished refresh covers
        self._refreshing = False  # the refresher task is running
        self._fresh = asyncio.Event()  # set while the list is as fresh as the last announced change
        self._fresh.set()
        self.task = asyncio.create_task(self._main(), name=f"loopctl.mcp {server.name}")

    async def _main(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await stack.enter_async_context(self.server._client(stack, self._on_message))
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    self._client = client
                    self.instructions = client.instructions
                    self.modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
                    await self.server._list_tools(client)
                    await self.server._opened(client, self.modern)
                    caps = client.server_capabilities.tools
                    if self.modern and caps is not None and caps.list_changed:
                        tg.start_soon(self._listen, client)
                    for uri in list(self.server._subscriptions):
                        tg.start_soon(self.server._resubscribe, client, uri, self.modern)
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
            self._client = None
            self._fresh.set()  # nobody waits for a refresh that will never come
            reason = self.server._redact(
                _describe(self.error) if self.error is not None else "the session was closed"
            )
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
        changes = self._changes
        token = otel_context.attach(job.trace_context)
        _JOB.set(job)
        try:
            with anyio.CancelScope() as scope:
                job.scope = scope
                deadline = anyio.current_time() + job.timeout if job.timeout is not None else float("inf")
                with anyio.CancelScope(deadline=deadline) as timer:
                    job.timer = timer
                    result = await job.fn(client)
                job.timer = None
                if timer.cancelled_caught:
                    raise TimeoutError
                if self._changes != changes:
                    # The server changed its tool list during this call (a tool that adds tools): let the refresh
                    # finish first, so the model's next request already offers the new list. Outside the call's
                    # timeout (the call is done), and bounded: a refresh that hangs delays nothing for long.
                    with anyio.move_on_after(self.server.connect_timeout):
                        await self._fresh.wait()
                if not job.future.done():
                    job.future.set_result(result)
        except Exception as exc:  # a job's failure is its caller's to read, never the owner's to die of
            if not job.future.done():
                if isinstance(exc, MCPError) and exc.code == mcp_types.CONNECTION_CLOSED:
                    exc = _Lost(str(exc), delivered=not job.sent_dead)
                elif isinstance(exc, MCPError) and _SESSION_GONE.search(exc.message or ""):
                    exc = _Lost(f"the HTTP session has expired ({exc.message})", delivered=False)
                job.future.set_exception(exc)
        finally:
            otel_context.detach(token)

    async def _on_message(self, message: Any) -> None:
        """The SDK's message handler: a handshake-era ``notifications/tools/list_changed`` refreshes the list;
        ``notifications/resources/updated`` goes to the resource's subscribers; an elicitation's completion is
        logged."""
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self.changed()
        elif isinstance(message, mcp_types.ResourceUpdatedNotification):
            uri = str(message.params.uri)
            self.start(lambda: self.server._resource_updated(uri))  # a slow subscriber holds up no message
        elif isinstance(message, mcp_types.ElicitCompleteNotification):
            _log.info(
                "MCP server %r: elicitation %s completed", self.server.name, _one_line(message.params.elicitation_id)
            )

    def changed(self) -> None:
        """The tool list changed (or a refresh is asked for): fetch it again, in the owner's task group.

        Changes are counted at once, so a call whose reply follows the notification waits for the new list.
        One refresher task runs at a time: it waits :data:`REFRESH_SETTLE` seconds for the rest of a burst, lists,
        and lists again if changes came in meanwhile; so a burst of notifications is one listing, and a refresh
        never waits for another (or itself)."""
        if self._tg is None or self._client is None:
            return
        self._changes += 1
        self._fresh.clear()
        if not self._refreshing:
            self._refreshing = True
            self._tg.start_soon(self._refresh, self._client)

    async def _refresh(self, client: Client) -> None:
        try:
            while self._listed < self._changes:
                await anyio.sleep(REFRESH_SETTLE)  # a burst of notifications comes in meanwhile: one listing
                target = self._changes
                try:
                    with anyio.fail_after(self.server.connect_timeout):
                        await self.server._list_tools(client)
                except Exception as exc:  # the old list stays; the next change notification tries again
                    _log.warning(
                        "MCP server %r: listing the tools again failed (%s)",
                        self.server.name,
                        self.server._redact(_describe(exc)),
                    )
                self._listed = target
        finally:
            self._refreshing = False
            if self._listed >= self._changes:  # else cancelled mid-way: the session's end releases the waiters
                self._fresh.set()

    async def refresh(self) -> None:
        """Fetch the tool list now, and wait (at most ``connect_timeout``) until it is in."""
        self.changed()
        with anyio.move_on_after(self.server.connect_timeout):
            await self._fresh.wait()

    def start(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``fn`` in the owner's task group (ended with the session)."""
        if self._tg is not None:
            self._tg.start_soon(fn)

    async def _listen(self, client: Client) -> None:
        """Watch a 2026-07-28 session's ``subscriptions/listen`` stream for tool-list changes. A stream that
        drops (the server restarted) is opened again, and the list fetched again: changes are not replayed."""
        delay = 0.5
        while True:
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    delay = 0.5
                    async for _ in subscription:
                        self.changed()
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
        job = _Job(fn, asyncio.get_running_loop().create_future(), timeout, otel_context.get_current())
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
    (``read_only_hint``, ``idempotent_hint``...); ``requires_approval`` (the server's ``require_approval``
    rule) defers its calls until approved; ``as_task`` says it runs as an MCP task.

    ``definition`` is the server's ``Tool`` (schema, description, annotations); ``retention`` the
    :class:`~loopctl.message.Retention` its results get (``None``: untagged).
    """

    __slots__ = (
        "annotations",
        "as_task",
        "definition",
        "description",
        "input_schema",
        "mcp_name",
        "name",
        "requires_approval",
        "retention",
        "server",
    )

    def __init__(
        self,
        server: BaseMCPServer,
        name: str,
        definition: mcp_types.Tool,
        retention: Retention | None,
        as_task: bool = False,
    ) -> None:
        self.server = server
        self.name = name
        self.definition = definition
        """The tool as the server listed it (``mcp_types.Tool``)."""
        self.mcp_name = definition.name
        self.description = definition.description or definition.title or ""
        self.input_schema: Mapping[str, Any] = definition.input_schema or {"type": "object", "properties": {}}
        self.annotations = definition.annotations
        self.retention = retention
        self.as_task = as_task
        self.requires_approval = server._needs_approval(self)

    @property
    def safe_to_repeat(self) -> bool:
        """Whether the server says a second run does no harm (``readOnlyHint`` or ``idempotentHint``)."""
        hints = self.annotations
        return hints is not None and bool(hints.read_only_hint or hints.idempotent_hint)

    @property
    def read_only(self) -> bool:
        """Whether the server says the tool changes nothing (``readOnlyHint``)."""
        return self.annotations is not None and bool(self.annotations.read_only_hint)

    async def call(self, input: Any, context: ToolContext) -> ToolOutput:  # noqa: A002 - the Tool protocol's name
        """Call the tool on the server; every failure is an error result (see the module docstring).

        ``input`` is the model's arguments (a JSON object) and ``context`` the call's
        :class:`~loopctl.tool.ToolContext` (its timeout and cancellation apply; its events carry the server's
        progress).
        """
        if not isinstance(input, dict):
            return ToolOutput(f"expected a JSON object as input, got {type(input).__name__}", is_error=True)
        return await self.server._call(self, input, context)

    def __repr__(self) -> str:
        return f"MCPTool(name={self.name!r}, server={self.server.name!r})"


class MCPResourceTool:
    """The opt-in tool that lets the model read the server's resources (``resource_tool=True``): input
    ``{"uri": ...}``, output the resource's contents (:func:`loopctl.mcp.resources.resource_output`). Its
    description lists the resources the server listed (up to 50). A URI the server's ``resource_tool`` check
    refuses is an error result the model reads.

    ``server`` is the server it reads from, ``name`` the tool's name as the model sees it (``read_resource``,
    prefixed like the server's tools), ``resources`` the server's listed resources (for the description).
    """

    __slots__ = ("description", "input_schema", "name", "server")

    def __init__(self, server: BaseMCPServer, name: str, resources: Sequence[mcp_types.Resource]) -> None:
        self.server = server
        self.name = name
        listed = [f"- {r.uri}" + (f" ({r.name})" if r.name else "") for r in resources[:50]]
        more = f"\n... and {len(resources) - 50} more" if len(resources) > 50 else ""
        known = ("\nResources:\n" + "\n".join(listed) + more) if listed else ""
        self.description = f"Read a resource of the MCP server {server.name!r} by its URI.{known}"
        self.input_schema: Mapping[str, Any] = {
            "type": "object",
            "properties": {"uri": {"type": "string", "description": "The resource's URI."}},
            "required": ["uri"],
            "additionalProperties": False,
        }

    async def call(self, input: Any, context: ToolContext) -> ToolOutput:  # noqa: A002 - the Tool protocol's name
        """Read the resource; every failure is an error result.

        ``input`` is the model's arguments (``{"uri": ...}``), ``context`` the call's
        :class:`~loopctl.tool.ToolContext` (its timeout applies).
        """
        uri = input.get("uri") if isinstance(input, dict) else None
        if not isinstance(uri, str) or not uri:
            return ToolOutput("expected {\"uri\": \"...\"}", is_error=True)
        allowed = self.server.resource_tool
        if callable(allowed) and not allowed(uri):
            return ToolOutput(f"reading {uri!r} is not allowed", is_error=True)
        try:
            result = await self.server.read_resource(uri)
        except (MCPRequestError, MCPConnectionError) as exc:
            return ToolOutput(str(exc), is_error=True)
        return resource_output(result, self.server.retention)

    def __repr__(self) -> str:
        return f"MCPResourceTool(name={self.name!r}, server={self.server.name!r})"


ApprovalRule: TypeAlias = (
    "bool | Literal['always', 'never', 'unless_read_only'] | Collection[str] | Callable[[MCPTool], bool]"
)
"""Which of a server's tools need approval: ``True`` / ``"always"``, ``False`` / ``"never"``,
``"unless_read_only"`` (every tool the server does not mark ``readOnlyHint``), a collection of MCP tool names,
or a callable deciding per :class:`MCPTool`."""

ToolFilter: TypeAlias = Callable[[mcp_types.Tool], bool]
"""Decides whether one of the server's tools (as listed) is offered to the model."""


@dataclass(slots=True)
class _Running:
    """A tool call in flight on the server (its requests to the client are counted in its run)."""

    call_id: str
    context: ToolContext[Any]


# --- servers ---------------------------------------------------------------------------------------------------


class BaseMCPServer:
    """What :class:`MCPServerStdio` and :class:`MCPServerHTTP` share: the session's owner task, the tool list,
    calls, timeouts, re-initialisation and the client features. Options (keyword-only):

    ``name``: for messages and logs. ``prefix``: the model sees ``{prefix}_{tool}``. ``timeout``: seconds per
    call (``None``: no limit; the engine's ``RunConfig.tool_timeout`` still applies); ``progress_resets_timeout``:
    each progress notification of a call starts its timeout again. ``progress_interval``: seconds between two
    of a call's progress notifications passed on to the run (default :data:`PROGRESS_INTERVAL`; ``0``: each
    one): a burst is coalesced into its newest, which arrives once the interval has passed or the call ended.
    ``connect_timeout``: seconds to start, initialise and list tools. ``retention`` / ``retention_by_tool``:
    the retention class of every result / of the results of the named MCP tools (``docs/compaction.md``).
    ``mode``: the SDK's protocol negotiation (``"auto"``: the 2026-07-28 protocol when the server offers it,
    else the initialize handshake; ``"legacy"``: always the handshake).

    Tools: ``allow_tools`` / ``deny_tools`` (MCP tool names) and ``tool_filter`` (a callable on the listed
    ``mcp_types.Tool``) decide which tools the model is offered; ``require_approval`` (:data:`ApprovalRule`)
    which calls wait for approval (``docs/guardrails.md``); ``task_tools``: ``"required"`` runs as MCP tasks
    the tools that require it, ``"supported"`` also those that allow it.

    Client features: ``sampling`` (a :class:`~loopctl.providers.ModelClient` answering the server's
    ``sampling/createMessage``) and ``on_sampling`` (a :data:`~loopctl.mcp.sampling.SamplingHandler` to
    refuse, edit or answer each request); ``sampling_tools`` (default ``True``: tools in sampling);
    ``elicitation`` (an :data:`~loopctl.mcp.elicitation.ElicitationHandler`: the server's questions to the
    user, form and URL modes; the calls in flight wait without a timeout while the user is asked);
    ``roots`` (folders or ``file://`` URIs the server may work in; ``None``: the
    roots capability is not offered); ``log_level`` (the level from which the server is asked to send its
    logs, which go to the Python logger ``loopctl.mcp.server.<name>``); ``include_instructions`` (the server's
    ``instructions`` join :func:`mcp_instructions`); ``resource_tool`` (``True``, or a callable deciding per URI:
    a tool for the model to read the server's resources).
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
        sampling: ModelClient | None = None,
        on_sampling: SamplingHandler | None = None,
        sampling_tools: bool = True,
        elicitation: ElicitationHandler | None = None,
        roots: Sequence[str | Path | Root] | None = None,
        log_level: LogLevel | None = None,
        progress_resets_timeout: bool = False,
        progress_interval: float = PROGRESS_INTERVAL,
        allow_tools: Collection[str] | None = None,
        deny_tools: Collection[str] = (),
        tool_filter: ToolFilter | None = None,
        require_approval: ApprovalRule = False,
        task_tools: Literal["required", "supported"] = "required",
        include_instructions: bool = False,
        resource_tool: bool | Callable[[str], bool] = False,
    ) -> None:
        self.name = name
        self.prefix = prefix
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retention = retention
        self.retention_by_tool = dict(retention_by_tool or {})
        self.mode = mode
        self.sampling = sampling
        """The model client that answers sampling requests (``None``: only ``on_sampling`` can answer). Set it
        before connecting: the capability is declared when the session opens."""
        self.on_sampling = on_sampling
        self.sampling_tools = sampling_tools
        self.elicitation = elicitation
        self._roots: tuple[Root, ...] | None = None if roots is None else tuple(Root.of(r) for r in roots)
        self.log_level = log_level
        self.progress_resets_timeout = progress_resets_timeout
        if not progress_interval >= 0:
            raise ValueError(
                f"MCP server {name!r}: progress_interval must be 0 or more seconds, not {progress_interval}"
            )
        self.progress_interval = progress_interval
        self.allow_tools = None if allow_tools is None else frozenset(allow_tools)
        self.deny_tools = frozenset(deny_tools)
        self.tool_filter = tool_filter
        self.require_approval = require_approval
        self.task_tools = task_tools
        self.include_instructions = include_instructions
        self.resource_tool = resource_tool
        self._tools: tuple[MCPTool | MCPResourceTool, ...] = ()
        self._conn: _Connection | None = None
        self._lock: asyncio.Lock | None = None
        self._closed = False
        self._left_out: set[str] = set()  # tools not offered (logged once)
        self._running: list[_Running] = []
        self._subscriptions: dict[str, list[Callable[[str], Any]]] = {}
        self.connections = 0
        """How many sessions have been opened (1 after :meth:`connect`; more after re-initialisations)."""
        self.sampled = 0
        self._log_window = (0.0, 0, 0)  # the current second's start (monotonic), lines logged, lines dropped
        """How many sampling requests the server made and were answered."""

    def _redact(self, text: str) -> str:
        """``text`` with this server's secrets masked (an HTTP server's URL credentials); for every message."""
        return text

    # --- the session -----------------------------------------------------------------------------------------

    def _client(self, stack: contextlib.AsyncExitStack, on_message: Callable[[Any], Awaitable[None]]) -> Client:
        """The SDK client for one session (entered by the owner task); resources go on ``stack``."""
        raise NotImplementedError

    def _client_options(self, on_message: Callable[[Any], Awaitable[None]]) -> dict[str, Any]:
        options: dict[str, Any] = {
            "message_handler": on_message,
            "mode": self.mode,
            "cache": None,
            "raise_exceptions": False,
            "logging_callback": self._on_log,
            "log_level": self.log_level,
        }
        if self.sampling is not None or self.on_sampling is not None:
            options["sampling_callback"] = self._on_sampling
            tools = mcp_types.SamplingToolsCapability() if self.sampling_tools else None
            options["sampling_capabilities"] = mcp_types.SamplingCapability(tools=tools)
        if self.elicitation is not None:
            options["elicitation_callback"] = self._on_elicit
        if self._roots is not None:
            options["list_roots_callback"] = self._on_list_roots
        return options

    async def _opened(self, client: Client, modern: bool) -> None:
        """After the handshake: on a handshake-era session, ask for logs from ``log_level`` (2026-07-28
        sessions ask per request)."""
        if self.log_level is not None and not modern and client.server_capabilities.logging is not None:
            try:
                with _no_deprecation():
                    await client.set_logging_level(self.log_level)
            except Exception as exc:  # the logs stay at the server's own level
                _log.info("MCP server %r: setting the log level failed (%s)", self.name, _describe(exc))

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

    @property
    def instructions(self) -> str | None:
        """What the server said about how to use it (``instructions``), once connected; ``None`` when it said
        nothing. Untrusted text: :func:`mcp_instructions` adds it to a system prompt only when asked."""
        conn = self._conn
        return conn.instructions if conn is not None else None

    async def _request(self, what: str, fn: Callable[[Client], Awaitable[Any]]) -> Any:
        """Run a library call's request in the session; raises :class:`MCPConnectionError` or
        :class:`MCPRequestError` naming ``what``."""
        try:
            conn = await self._live()
            return await conn.run(fn, self.timeout)
        except TimeoutError:
            raise MCPRequestError(f"MCP server {self.name!r}: {what} timed out after {self.timeout:g} s") from None
        except _Lost as lost:
            raise MCPConnectionError(self._redact(f"MCP server {self.name!r}: {what} failed: {lost}")) from None
        except MCPError as exc:
            message = self._redact(f"MCP server {self.name!r}: {what} failed: {exc.message} ({exc.code})")
            raise MCPRequestError(message, exc.code) from None
        except (MCPConnectionError, MCPRequestError):
            raise
        except Exception as exc:  # a reply of the wrong shape
            raise MCPRequestError(self._redact(f"MCP server {self.name!r}: {what} failed: {_describe(exc)}")) from None

    # --- requests from the server ----------------------------------------------------------------------------

    def _calling(self) -> _Running | None:
        """The tool call in flight the server's request most likely belongs to: the latest one started (the
        protocol links a server request to a call only on some transports)."""
        return self._running[-1] if self._running else None

    async def _on_sampling(
        self, ctx: ClientRequestContext, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult | mcp_types.CreateMessageResultWithTools | mcp_types.ErrorData:
        """``sampling/createMessage``: ``on_sampling`` decides, ``sampling`` answers; the model call counts in
        the run whose tool call is in flight (its usage, cost and limits)."""
        running = self._calling()
        try:
            request = sampling_request(self.name, params, running.call_id if running is not None else None)
        except SamplingError as exc:
            return mcp_types.ErrorData(code=mcp_types.INVALID_PARAMS, message=str(exc))
        decision: ModelRequest | ModelResponse | None = request.request
        if self.on_sampling is not None:
            try:
                decision = await self.on_sampling(request)
            except Exception:
                _log.exception("MCP server %r: the sampling handler failed; the request is refused", self.name)
                decision = None
        if decision is None:
            return mcp_types.ErrorData(code=REJECTED, message="the user rejected the sampling request")
        with_tools = bool(params.tools) and self.sampling_tools
        if isinstance(decision, ModelResponse):
            self.sampled += 1
            return to_sampling_result(decision, decision.model or "host", with_tools=with_tools)
        client = self.sampling
        if client is None:
            return mcp_types.ErrorData(code=REJECTED, message="the host has no model to sample with")
        if running is None:
            # Nothing to count the model call against (no run's usage, cost or limits): refused.
            _log.warning("MCP server %r asked for sampling outside any tool call; refused", self.name)
            return mcp_types.ErrorData(
                code=REJECTED, message="sampling is answered only during a tool call of this server (no tool call)"
            )
        passed = running.context.next_model_call_limit()
        if passed is not None:
            _log.warning("MCP server %r: sampling refused, the run's %s limit is reached", self.name, passed)
            return mcp_types.ErrorData(
                code=REJECTED,
                message=f"the calling run's {passed.replace('_', ' ')} limit leaves no room for another model call",
            )
        decision = _capped(decision, running.context)
        try:
            response = await client.generate(decision, stream=False)
        except Exception as exc:
            _log.warning("MCP server %r: the sampling model call failed (%s)", self.name, _describe(exc))
            return mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message=f"the model call failed: {exc}")
        model = response.model or client.model
        running.context.record_usage(response.usage, cost=_price(client, response, model), requests=1)
        self.sampled += 1
        return to_sampling_result(response, model, with_tools=with_tools)

    async def _on_elicit(
        self, ctx: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        """``elicitation/create``: the application's ``elicitation`` handler asks the user."""
        running = self._calling()
        call_id = running.call_id if running is not None else None
        if isinstance(params, mcp_types.ElicitRequestURLParams):
            asked = Elicitation(self.name, "url", params.message, {}, params.url, params.elicitation_id, call_id)
        else:
            problem = schema_problem(params.requested_schema)
            if problem is not None:  # the user is not asked a form that could not be answered or checked
                _log.warning("MCP server %r sent a form the host cannot use: %s", self.name, _one_line(problem, 300))
                return mcp_types.ErrorData(
                    code=mcp_types.INVALID_PARAMS, message=f"the form's schema is not usable: {problem}"
                )
            asked = Elicitation(self.name, "form", params.message, dict(params.requested_schema), tool_call_id=call_id)
        answer = await self._ask(asked)
        if isinstance(answer, Accept):
            return mcp_types.ElicitResult(
                action="accept", content=wire_content(answer.content) if asked.mode == "form" else None
            )
        return mcp_types.ElicitResult(action="decline" if isinstance(answer, Decline) else "cancel")

    async def _ask(self, asked: Elicitation) -> ElicitationAnswer:
        """The user's answer to ``asked``: the handler's, checked against the form (a handler that fails, or
        an answer that does not fit the form, declines)."""
        handler = self.elicitation
        if handler is None:
            return Decline()
        if asked.mode == "url" and not _url_allowed(asked.url):
            _log.warning(
                "MCP server %r asked the user to open %s, not an http(s) URL; declined",
                self.name,
                _one_line(asked.url or "", 200),
            )
            return Decline()
        # A person may take longer than a call's timeout to answer: the calls in flight wait without a deadline
        # while the user is asked, and get their whole timeout again afterwards.
        conn = self._conn
        held = [job for job in (conn.pending if conn is not None else ()) if job.timer is not None]
        for job in held:
            assert job.timer is not None
            job.timer.deadline = float("inf")
        try:
            answer = await handler(asked)
        except Exception:
            _log.exception("MCP server %r: the elicitation handler failed; the request is declined", self.name)
            return Decline()
        finally:
            for job in held:
                job.extend()
        if not isinstance(answer, (Accept, Decline, Cancel)):
            _log.warning("MCP server %r: the elicitation handler returned %r; declined", self.name, answer)
            return Decline()
        if isinstance(answer, Accept) and asked.mode == "form":
            problems = check_content(asked.schema, answer.content)
            if problems:
                _log.warning(
                    "MCP server %r: the answer does not fit the form (%s); declined", self.name, "; ".join(problems)
                )
                return Decline()
        return answer

    async def _on_list_roots(self, ctx: ClientRequestContext) -> mcp_types.ListRootsResult | mcp_types.ErrorData:
        """``roots/list``: the roots as they are now."""
        return mcp_types.ListRootsResult(
            roots=[mcp_types.Root(uri=r.uri, name=r.name) for r in self._roots or ()]
        )

    async def _on_log(self, params: mcp_types.LoggingMessageNotificationParams) -> None:
        """``notifications/message``: the server's log line, to the Python logger ``loopctl.mcp.server.<name>``
        at the matching level (notice between INFO and WARNING; alert, emergency above CRITICAL). The text is
        the server's: control characters are escaped."""
        logger = _server_logger(self.name)
        start, logged, dropped = self._log_window
        now = time.monotonic()
        if now - start >= 1.0:
            if dropped:
                logger.warning("%d more log lines of the server were left out (at most %d a second)", dropped,
                               LOG_LINES_PER_SECOND)  # fmt: skip
            start, logged, dropped = now, 0, 0
        if logged >= LOG_LINES_PER_SECOND:
            self._log_window = (start, logged, dropped + 1)
            return
        self._log_window = (start, logged + 1, dropped)
        data = params.data
        text = data if isinstance(data, str) else orjson.dumps(data, default=str).decode()
        origin = f"[{_one_line(params.logger, 100)}] " if params.logger else ""
        logger.log(_LOG_LEVELS.get(params.level, logging.INFO), "%s%s", origin, _one_line(text))

    @property
    def roots(self) -> tuple[Root, ...] | None:
        """The roots offered to the server (``None``: the capability is not offered)."""
        return self._roots

    async def set_roots(self, roots: Sequence[str | Path | Root]) -> None:
        """Change the roots and tell the server (``notifications/roots/list_changed``; it lists them again).
        Only a server given ``roots=`` (a list, possibly empty) when it connected offers the capability."""
        self._roots = tuple(Root.of(r) for r in roots)
        conn = self._conn
        if conn is None or conn.closed or conn.modern:
            return  # told at the next connection (2026-07-28 sessions ask for roots with each request)

        async def notify(client: Client) -> None:
            with _no_deprecation():
                await client.send_roots_list_changed()

        with contextlib.suppress(_Lost, TimeoutError):
            await conn.run(notify, self.connect_timeout)

    # --- tools -----------------------------------------------------------------------------------------------

    @property
    def tools(self) -> tuple[MCPTool | MCPResourceTool, ...]:
        """The server's tools as last listed (a new tuple each time the list changes), after the filters; the
        resource tool last, when asked for."""
        return self._tools

    def _offered(self, tool: mcp_types.Tool) -> bool:
        if self.allow_tools is not None and tool.name not in self.allow_tools:
            return False
        if tool.name in self.deny_tools:
            return False
        return self.tool_filter is None or bool(self.tool_filter(tool))

    def _needs_approval(self, tool: MCPTool) -> bool:
        rule = self.require_approval
        if rule is True or rule == "always":
            return True
        if rule is False or rule == "never":
            return False
        if rule == "unless_read_only":
            return not tool.read_only
        if callable(rule):
            return bool(rule(tool))
        return tool.mcp_name in rule

    async def _list_tools(self, client: Client) -> None:
        listed: list[mcp_types.Tool] = await _all_pages(client.list_tools, "tools")
        usable: list[mcp_types.Tool] = []
        as_task: list[bool] = []
        for t in listed:
            if not self._offered(t):
                continue
            support = _task_support(t)
            if support == "required" and not _can_call_as_task(client):
                if t.name not in self._left_out:
                    self._left_out.add(t.name)
                    _log.warning(
                        "MCP server %r: tool %r is not offered: it must be called as a task (taskSupport "
                        '"required"), which this session cannot do (the server does not offer tasks for '
                        "tools/call, or the protocol version has no tasks)",
                        self.name,
                        t.name,
                    )
                continue
            usable.append(t)
            wanted = support == "required" or (support == "optional" and self.task_tools == "supported")
            as_task.append(wanted and _can_call_as_task(client))
        resources: list[mcp_types.Resource] | None = None
        if self.resource_tool and client.server_capabilities.resources is not None:
            resources = await self._all_resources(client)
        mcp_names = [t.name for t in usable] + (["read_resource"] if resources is not None else [])
        names = exposed_names(mcp_names, self.prefix)
        tools: list[MCPTool | MCPResourceTool] = [
            MCPTool(self, name, t, self.retention_by_tool.get(t.name, self.retention), as_task=task)
            for name, t, task in zip(names, usable, as_task, strict=False)
        ]
        if resources is not None:
            tools.append(MCPResourceTool(self, names[-1], resources))
        self._tools = tuple(tools)

    async def refresh_tools(self) -> tuple[MCPTool | MCPResourceTool, ...]:
        """List the tools again now (they are also refreshed on the server's change notifications); returns
        the new list."""
        conn = await self._live()
        await conn.refresh()
        return self._tools

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, context: ToolContext[Any] | None = None
    ) -> ToolOutput:
        """Call the server's tool ``name`` (its MCP name) directly, as the engine would.

        ``arguments`` is the tool's input (a JSON object; none: ``{}``); ``context`` the call's
        :class:`~loopctl.tool.ToolContext`, for its progress events and the usage of the server's sampling
        requests (none: a context of its own).
        """
        for t in self._tools:
            if isinstance(t, MCPTool) and t.mcp_name == name:
                return await self._call(t, dict(arguments or {}), context)
        return ToolOutput(f"MCP server {self.name!r} has no tool {name!r}", is_error=True)

    async def _call(
        self, tool: MCPTool, arguments: dict[str, Any], context: ToolContext[Any] | None = None
    ) -> ToolOutput:
        context = context if context is not None else ToolContext(f"direct-{id(arguments):x}", tool.name)
        running = _Running(context.call_id, context)
        self._running.append(running)
        try:
            return await self._call_with_elicitation(tool, arguments, context)
        finally:
            self._running.remove(running)

    async def _call_with_elicitation(
        self, tool: MCPTool, arguments: dict[str, Any], context: ToolContext[Any]
    ) -> ToolOutput:
        """The call; a ``-32042`` answer (URL elicitations the user must complete first) asks the user through
        the ``elicitation`` handler and, when every one was accepted, sends the call once more."""
        for attempt in (1, 2):
            try:
                return await self._call_once(tool, arguments, context)
            except MCPError as exc:
                if exc.code != mcp_types.URL_ELICITATION_REQUIRED or attempt == 2 or self.elicitation is None:
                    text = f"MCP error {exc.code} from {self.name!r}: {exc.message}"
                    return ToolOutput(self._redact(text), is_error=True)
                answers = []
                for needed in _url_elicitations(exc.data):
                    asked = Elicitation(
                        self.name, "url", needed.message, {}, needed.url, needed.elicitation_id, context.call_id
                    )
                    answers.append(await self._ask(asked))
                if not answers or not all(isinstance(a, Accept) for a in answers):
                    return ToolOutput(
                        self._redact(
                            f"MCP server {self.name!r} needs the user to complete a step in the browser first "
                            f"({exc.message}); the user did not accept."
                        ),
                        is_error=True,
                    )
        raise AssertionError("unreachable")  # pragma: no cover

    async def _call_once(self, tool: MCPTool, arguments: dict[str, Any], context: ToolContext[Any]) -> ToolOutput:
        # The server's progress notifications reach the run at most one every progress_interval seconds; the
        # newest is held and always arrives (by a timer, or here at the call's end).
        gate = ProgressGate(functools.partial(_report, context), self.progress_interval)
        try:
            output = await self._send_call(tool, arguments, context, gate)
        except BaseException:
            gate.stop()
            raise
        gate.flush()
        gate.stop()  # a notification after the result is not the call's progress any more
        return output

    async def _send_call(
        self, tool: MCPTool, arguments: dict[str, Any], context: ToolContext[Any], gate: ProgressGate
    ) -> ToolOutput:
        resets = self.progress_resets_timeout

        async def send(client: Client) -> Any:
            job = _JOB.get()

            def progress(done: float, total: float | None, message: str | None) -> None:
                if resets and job is not None:
                    job.extend()
                gate.report(done, total, message)

            if tool.as_task:
                return await _call_as_task(
                    client, tool.mcp_name, arguments, lambda n, message: progress(n, None, message)
                )
            return await client.call_tool(tool.mcp_name, arguments, progress_callback=_async(progress))

        for attempt in (1, 2):
            try:
                conn = await self._live()
            except MCPConnectionError as exc:
                return ToolOutput(self._redact(str(exc)), is_error=True)
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
                        self._redact(
                            f"MCP server {self.name!r} lost the connection during the call ({lost}); the call may "
                            "have run. The session is opened again for the next call."
                        ),
                        is_error=True,
                    )
                return ToolOutput(self._redact(f"MCP server {self.name!r} is unreachable: {lost}"), is_error=True)
            except MCPError:
                raise  # the caller reads it (a URL elicitation to complete, or an error result)
            except Exception as exc:  # the SDK refused the reply (a result of the wrong shape...)
                leaves = list(_walk(exc))
                leaf = leaves[0] if leaves else exc
                if isinstance(leaf, pydantic.ValidationError):
                    wrong = "; ".join(
                        f"{'.'.join(str(p) for p in e['loc']) or 'result'}: {e['msg']}"
                        for e in leaf.errors(include_url=False, include_input=False)[:5]
                    )
                    text = f"MCP server {self.name!r} answered tool {tool.mcp_name!r} with a malformed result ({wrong})"
                else:
                    text = f"MCP server {self.name!r}, tool {tool.mcp_name!r}: {_describe(exc)}"
                return ToolOutput(self._redact(_one_line(text)), is_error=True)
            return to_tool_output(result, tool.retention)
        raise AssertionError("unreachable")  # pragma: no cover

    # --- resources and prompts -------------------------------------------------------------------------------

    async def _all_resources(self, client: Client) -> list[mcp_types.Resource]:
        return await _all_pages(client.list_resources, "resources")

    async def list_resources(self) -> list[mcp_types.Resource]:
        """The server's resources (every page). Raises :class:`MCPRequestError` or :class:`MCPConnectionError`."""
        found: list[mcp_types.Resource] = await self._request("resources/list", self._all_resources)
        return found

    async def list_resource_templates(self) -> list[mcp_types.ResourceTemplate]:
        """The server's resource templates (URI templates, RFC 6570; every page)."""

        async def fetch(client: Client) -> list[mcp_types.ResourceTemplate]:
            return await _all_pages(client.list_resource_templates, "resource_templates")

        templates: list[mcp_types.ResourceTemplate] = await self._request("resources/templates/list", fetch)
        return templates

    async def read_resource(self, uri: str) -> mcp_types.ReadResourceResult:
        """The contents of the resource ``uri`` (``.contents``: text and blob contents; :func:`resource_output
        <loopctl.mcp.resources.resource_output>` makes them a tool output)."""

        async def fetch(client: Client) -> mcp_types.ReadResourceResult:
            return await client.read_resource(uri, cache_mode="bypass")

        result: mcp_types.ReadResourceResult = await self._request(f"reading {uri!r}", fetch)
        return result

    async def subscribe_resource(self, uri: str, on_update: Callable[[str], Any]) -> None:
        """Call ``on_update(uri)`` (a function or a coroutine function) each time the server says the resource
        changed: ``resources/subscribe`` and ``notifications/resources/updated`` on handshake-era sessions, a
        ``subscriptions/listen`` stream on 2026-07-28 sessions. Kept across re-initialisations."""
        first = uri not in self._subscriptions
        self._subscriptions.setdefault(uri, []).append(on_update)
        if not first:
            return
        conn = await self._live()

        async def subscribe(client: Client) -> None:
            await self._resubscribe(client, uri, conn.modern, start=conn.start)

        await self._request(f"subscribing to {uri!r}", subscribe)

    async def unsubscribe_resource(self, uri: str) -> None:
        """Stop the updates of ``uri``."""
        if self._subscriptions.pop(uri, None) is None:
            return
        conn = self._conn
        if conn is None or conn.closed or conn.modern:
            return  # a listen stream ends by itself once its subscriber is gone

        async def unsubscribe(client: Client) -> None:
            with _no_deprecation():
                await client.unsubscribe_resource(uri)

        await self._request(f"unsubscribing from {uri!r}", unsubscribe)

    async def _resubscribe(
        self,
        client: Client,
        uri: str,
        modern: bool,
        start: Callable[[Callable[[], Coroutine[Any, Any, None]]], None] | None = None,
    ) -> None:
        """Subscribe to ``uri`` on this session (at connect, for subscriptions made before)."""
        if not modern:
            with _no_deprecation():
                await client.subscribe_resource(uri)
            return

        async def listen() -> None:
            with contextlib.suppress(Exception):
                async with client.listen(resource_subscriptions=[uri]) as subscription:
                    async for _ in subscription:
                        if uri not in self._subscriptions:
                            return
                        await self._resource_updated(uri)

        if start is not None:
            start(listen)
        else:
            await listen()

    async def _resource_updated(self, uri: str) -> None:
        for callback in list(self._subscriptions.get(uri, ())):
            try:
                out = callback(uri)
                if inspect.isawaitable(out):
                    await out
            except Exception:
                _log.exception("MCP server %r: a subscriber of %s failed", self.name, uri)

    async def list_prompts(self) -> list[mcp_types.Prompt]:
        """The server's prompts (every page): ``name``, ``description``, ``arguments``."""

        async def fetch(client: Client) -> list[mcp_types.Prompt]:
            return await _all_pages(client.list_prompts, "prompts")

        prompts: list[mcp_types.Prompt] = await self._request("prompts/list", fetch)
        return prompts

    async def get_prompt(self, name: str, arguments: Mapping[str, str] | None = None) -> MCPPrompt:
        """The prompt ``name`` filled in with ``arguments``, as loopctl messages (:class:`MCPPrompt
        <loopctl.mcp.resources.MCPPrompt>`)."""

        async def fetch(client: Client) -> mcp_types.GetPromptResult:
            return await client.get_prompt(name, dict(arguments or {}))

        result: mcp_types.GetPromptResult = await self._request(f"getting the prompt {name!r}", fetch)
        return prompt_of(name, result)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, tools={len(self._tools)})"


def _report(context: ToolContext[Any], done: float, total: float | None, message: str | None) -> None:
    """A progress notification to the call's run, as a ``ToolProgress`` event (an observer's failure must not
    reach the session)."""
    try:
        context.report_progress(done, total, message)
    except Exception:
        _log.exception("an observer failed on a tool's progress")


def _async(fn: Callable[[float, float | None, str | None], None]) -> Any:
    """The SDK's progress callback (a coroutine function) around a plain one."""

    async def callback(progress: float, total: float | None, message: str | None) -> None:
        fn(progress, total, message)

    return callback


def _url_elicitations(data: Any) -> list[mcp_types.ElicitRequestURLParams]:
    """The URL elicitations of a ``-32042`` error's data (none when it has another shape)."""
    try:
        return list(mcp_types.ElicitationRequiredErrorData.model_validate(data).elicitations)
    except Exception:
        return []


def _capped(request: ModelRequest, context: ToolContext[Any]) -> ModelRequest:
    """``request`` with its ``max_tokens`` cut to the output tokens the calling run's limits leave (what the
    call already spent counted), so that one sampling request cannot pass an output or total token limit by
    more than the reply's own overrun."""
    left = context.limits
    if left is None:
        return request
    spent = context.spent
    used_out = (spent.usage.output_tokens or 0) if spent is not None else 0
    used_all = used_out + ((spent.usage.input_tokens or 0) if spent is not None else 0)
    caps = [c for c in (
        left.output_tokens - used_out if left.output_tokens is not None else None,
        left.total_tokens - used_all if left.total_tokens is not None else None,
    ) if c is not None]
    if not caps:
        return request
    cap = max(1, min(caps))
    if request.max_tokens is not None and request.max_tokens <= cap:
        return request
    return dataclasses.replace(request, max_tokens=cap)


def _url_allowed(url: str | None) -> bool:
    """Whether a URL-mode elicitation's ``url`` may be shown to the user: an ``https`` or ``http`` URL with a
    host. Any other scheme (``javascript:``, ``file:``, ``data:``...) could run or read something on the
    user's machine when opened, and is declined without asking (MCP 2025-11-25, "Elicitation", URL mode: the
    URL is for an out-of-band web interaction)."""
    if not url:
        return False
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError:
        return False
    return parts.scheme.lower() in ("https", "http") and bool(parts.hostname)


def _price(client: ModelClient, response: ModelResponse, model: str) -> Decimal | None:
    """The price of a sampling reply, as the engine prices a run's replies."""
    own = getattr(client, "price_usage", None)
    if callable(own):
        cost: Decimal | None = own(response.usage, model)
        if cost is not None:
            return cost
    from loopctl.pricing import price

    return price(response.usage, model, provider=client.provider, api_url=getattr(client, "api_url", None))


@cache
def _server_logger(name: str) -> logging.Logger:
    """``loopctl.mcp.server.<name>`` (dots and spaces in the name become ``_``)."""
    return logging.getLogger("loopctl.mcp.server").getChild(re.sub(r"[^A-Za-z0-9_-]", "_", name) or "server")


def mcp_instructions(*servers: BaseMCPServer) -> str:
    """The instructions of the given servers that were made with ``include_instructions=True`` and sent some,
    each under a line naming its server, to add to a system prompt (``SessionConfig(instructions=...)``). The
    text is the servers': only include servers you trust with your prompt. ``""`` when there are none."""
    blocks = [
        f'Instructions from the MCP server "{s.name}":\n{s.instructions.strip()}'
        for s in servers
        if s.include_instructions and s.instructions and s.instructions.strip()
    ]
    return "\n\n".join(blocks)


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
    ``repr`` or in messages. Credentials in the URL are kept out of sight too: a user and password
    (``http://user:pw@host/mcp``) are sent as a Basic ``Authorization`` header (unless ``headers`` has one) and
    never in the URL, and ``repr``, :attr:`url`, messages, logs (this module's, the SDK's and the HTTP
    client's) show the password and every query value (``?token=...``) as ``***``. The other options are
    :class:`BaseMCPServer`'s; ``name`` defaults to the URL's host.
    """

    def __init__(self, url: str, headers: Mapping[str, str] | None = None, *, name: str | None = None, **options: Any):
        parts = urllib.parse.urlsplit(url)
        super().__init__(name=name or parts.hostname or "mcp", **options)
        self._headers = dict(headers or {})
        self._secrets = _url_secrets(parts)
        self._masked = mask_url(url)
        if "@" in parts.netloc:  # the credentials go in a header; the URL the client uses has none
            userinfo, _, hostport = parts.netloc.rpartition("@")
            user, _, password = userinfo.partition(":")
            if not any(k.lower() == "authorization" for k in self._headers):
                pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()
                self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
            url = urllib.parse.urlunsplit(parts._replace(netloc=hostport))
        self._url = url
        _REDACTING.servers.add(self)

    @property
    def url(self) -> str:
        """The server's URL, its password and query values masked (``***``)."""
        return self._masked

    def _redact(self, text: str) -> str:
        text = text.replace(self._url, self._masked)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _client(self, stack: contextlib.AsyncExitStack, on_message: Callable[[Any], Awaitable[None]]) -> Client:
        # The SDK's own defaults: 30 s to connect or write, 300 s to read (a server may hold a stream open).
        http = httpx2.AsyncClient(headers=self._headers, timeout=httpx2.Timeout(30.0, read=300.0))
        stack.push_async_callback(http.aclose)
        return Client(streamable_http_client(self._url, http_client=http), **self._client_options(on_message))

    def __repr__(self) -> str:
        return f"MCPServerHTTP({self._masked!r}, tools={len(self._tools)})"


# --- secrets in URLs -----------------------------------------------------------------------------------------

_MIN_SECRET = 4  # shorter query values ("1", "on") are masked in the URL but not hunted for in other text


def mask_url(url: str) -> str:
    """``url`` with its credentials masked: the password (``user:***@``; a user without a password, which is
    often a token, as ``***@``) and the value of every query parameter (``?token=***``)."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:***@{hostport}" if colon else f"***@{hostport}"
    query = "&".join(
        f"{key}=***" if has_value else key
        for key, has_value in ((p.partition("=")[0], "=" in p) for p in parts.query.split("&") if p)
    )
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


def _url_secrets(parts: urllib.parse.SplitResult) -> tuple[str, ...]:
    """The secret strings of a URL, as written and decoded: the password (or a lone user), the query values."""
    found: set[str] = set()
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        user, colon, password = userinfo.partition(":")
        found.add(password if colon else user)
    for pair in parts.query.split("&"):
        found.add(pair.partition("=")[2])
    found |= {urllib.parse.unquote_plus(x) for x in found}
    # Longest first, so that a secret containing another is masked whole.
    return tuple(sorted((x for x in found if len(x) >= _MIN_SECRET), key=len, reverse=True))


class _RedactingFilter(logging.Filter):
    """Masks the URL secrets of every live :class:`MCPServerHTTP` in the records of the loggers that print
    request URLs (the HTTP client's request lines, the SDK's connection messages)."""

    def __init__(self) -> None:
        super().__init__()
        self.servers: weakref.WeakSet[MCPServerHTTP] = weakref.WeakSet()

    def filter(self, record: logging.LogRecord) -> bool:
        servers = list(self.servers)
        if servers:
            text = original = record.getMessage()
            for server in servers:
                text = server._redact(text)
            if text != original:
                record.msg, record.args = text, None
        return True


_REDACTING = _RedactingFilter()
for _name in ("httpx2", "httpx", "mcp.client.streamable_http", "mcp.shared.jsonrpc_dispatcher", "loopctl.mcp"):
    logging.getLogger(_name).addFilter(_REDACTING)
