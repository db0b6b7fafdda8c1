"""What ``loopctl run --otel``, ``--mcp "COMMAND ARGS"`` and ``--mcp-url URL`` add to a run: OTLP export of
traces and metrics (``docs/telemetry.md``) and the tools of MCP servers (``docs/mcp.md``).

``--otel`` reads the standard OpenTelemetry variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SERVICE_NAME``,
...) and records message content only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true``;
its tracer provider becomes the global one (the MCP SDK's spans are exported too). At the end the last spans
are flushed within a few seconds; a collector that cannot be reached is one ``warning:`` line.
An MCP server whose tool names are already taken (by the file tools or another server) gets the prefix
``mcpN_`` (N: its position among the ``--mcp`` and ``--mcp-url`` options, from 1). The run's ``--root`` is
advertised to every server as its root (MCP ``roots/list``), a server's sampling requests are answered by
the run's own model (counted in the run's usage and cost), and a server's questions to the user
(elicitation, form and URL modes) are asked on the terminal by :class:`TerminalElicitation`, every word of
the server's shown as inert text; with no terminal they are declined.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from loopctl._lazy import LazyModule
from loopctl.cli.inert import inert

if TYPE_CHECKING:
    import loopctl.mcp
    import loopctl.mcp.elicitation
else:  # the annotations' modules, imported when an annotation is read (loopctl._lazy)
    loopctl = LazyModule("loopctl")

__all__ = ["CAPTURE_CONTENT_VAR", "TerminalElicitation", "open_integrations", "start_otel"]

CAPTURE_CONTENT_VAR = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The OpenTelemetry GenAI instrumentations' switch for recording message content (``true`` to record)."""


def start_otel(*, conversation_id: str | None = None) -> tuple[Callable[[str], Any], Callable[[], None]]:
    """Start the OTLP export of ``--otel`` (``loopctl run``, ``mcp serve``, ``a2a serve``): the providers of
    :func:`~loopctl.telemetry.otlp.configure_otlp`, installed as the global ones (this process is the
    application: the spans libraries make through the global provider, the MCP SDK's with the ``traceparent``
    it sends, are exported too). Returns ``(observer, flush)``: ``observer(agent_name)`` is an
    :class:`~loopctl.telemetry.OTelObserver` on those providers for the runs of the agent of that name
    (``conversation_id`` names the conversation in its spans), and ``flush()`` exports what is left, bounded
    (a collector that is down costs a moment and one ``warning:`` line, not retries). Raises
    ``click.UsageError`` for an OTLP protocol other than http/protobuf and ``ImportError`` naming the missing
    extra."""
    from opentelemetry import trace

    from loopctl.telemetry import OTelObserver
    from loopctl.telemetry.otlp import configure_otlp

    try:
        export = configure_otlp()
    except ValueError as exc:
        raise click.UsageError(f"--otel: {exc}") from None
    trace.set_tracer_provider(export.tracer_provider)
    capture = os.environ.get(CAPTURE_CONTENT_VAR, "").strip().lower() == "true"

    def observer(agent_name: str) -> Any:
        return OTelObserver(
            export.tracer_provider,
            export.meter_provider,
            capture,
            agent_name=agent_name,
            conversation_id=conversation_id,
        )

    def flush() -> None:
        problem = export.shutdown()
        if problem is not None:
            from loopctl.cli.report import warn

            warn(f"--otel: {problem}")

    return observer, flush


async def open_integrations(
    stack: contextlib.AsyncExitStack,
    *,
    otel: bool,
    mcp_commands: Sequence[str],
    mcp_urls: Sequence[str],
    taken: set[str],
    conversation_id: str | None = None,
    roots: Sequence[Path] = (),
    elicitation: TerminalElicitation | None = None,
    sampling: Any = None,
) -> tuple[list[Any], list[Any]]:
    """Start what the options ask for, on ``stack`` (closed when the run ends: the servers stop, the last
    spans are exported). Returns ``(tool providers, observers)``. ``taken`` holds the tool names already in
    use. Raises ``click.UsageError`` for an option that cannot work, ``ImportError`` naming the missing
    extra, and :class:`~loopctl.mcp.MCPConnectionError` for a server that does not start.

    ``otel`` starts the OTLP export (``--otel``); ``mcp_commands`` and ``mcp_urls`` are the ``--mcp`` and ``--mcp-
    url`` servers; ``conversation_id`` names the session in the spans; ``roots`` the folders every server is
    told it may work in (the run's ``--root``); ``elicitation`` asks the user the servers' questions (none:
    they are declined); ``sampling`` the model client that answers the servers' sampling requests (the run's
    own: what they cost counts in the run; none: they are refused).
    """
    observers: list[Any] = []
    if otel:
        observer, flush = start_otel(conversation_id=conversation_id)
        stack.callback(flush)
        observers.append(observer("loopctl"))
    if not (mcp_commands or mcp_urls):
        return [], observers
    try:
        from loopctl.mcp import MCPServerHTTP, MCPServerStdio
    except ImportError as exc:
        raise ImportError(f"--mcp needs the MCP SDK: pip install 'pyloopctl[mcp]' ({exc})") from exc
    servers: list[Any] = []
    for command in mcp_commands:
        try:
            argv = shlex.split(command)
        except ValueError as exc:  # an unclosed quote
            raise click.UsageError(f"--mcp {command!r}: {exc}") from None
        if not argv:
            raise click.UsageError("--mcp needs a command, for example --mcp 'python server.py'")
        servers.append(
            MCPServerStdio(argv[0], argv[1:], roots=list(roots), elicitation=elicitation, sampling=sampling)
        )
    servers += [MCPServerHTTP(url, roots=list(roots), elicitation=elicitation, sampling=sampling) for url in mcp_urls]
    names = set(taken)
    for n, server in enumerate(servers, 1):
        await stack.enter_async_context(server)
        if names & {t.name for t in server.tools}:
            server.prefix = f"mcp{n}"
            await server.refresh_tools()
        names |= {t.name for t in server.tools}
    return servers, observers


class TerminalElicitation:
    """An MCP server's question to the user (elicitation), asked on the terminal: the server's name and message,
    then, in URL mode, the page to open (the user opens it, nothing is opened for them) and accept / decline /
    cancel; in form mode answer / decline / cancel, then each field (its title, description and choices). An
    answer that does not fit the form is shown with what is wrong and asked again. Everything the server sent
    is shown as inert text (:func:`~loopctl.cli.inert.inert`). Questions are asked one at a time, on a worker
    thread (the servers' sessions keep running); with no terminal (``interactive`` false; default: whether stdin
    is a terminal) each is declined.

    ``prompt`` has :func:`click.prompt`'s signature and ``echo`` :func:`click.echo`'s (tests pass their own);
    ``before_prompt`` runs before a question is shown (the transcript stops its spinner).
    """

    def __init__(
        self,
        *,
        interactive: bool | None = None,
        prompt: Callable[..., Any] = click.prompt,
        echo: Callable[[str], Any] = click.echo,
        before_prompt: Callable[[], None] | None = None,
    ) -> None:
        self.interactive = interactive
        self.prompt = prompt
        self.echo = echo
        self.before_prompt = before_prompt
        self._lock = asyncio.Lock()

    async def __call__(self, request: loopctl.mcp.Elicitation) -> loopctl.mcp.ElicitationAnswer:
        """Ask ``request`` (see the class); returns the user's :class:`~loopctl.mcp.Accept`,
        :class:`~loopctl.mcp.Decline` or :class:`~loopctl.mcp.Cancel`."""
        from loopctl.mcp import Decline

        interactive = sys.stdin.isatty() if self.interactive is None else self.interactive
        server = inert(request.server, one_line=True)
        if not interactive:
            self.echo(f"MCP server {server} asked the user something; declined (stdin is not a terminal)")
            return Decline()
        async with self._lock:
            if self.before_prompt is not None:
                self.before_prompt()
            return await asyncio.to_thread(self.ask, request)

    def ask(self, request: loopctl.mcp.Elicitation) -> loopctl.mcp.ElicitationAnswer:
        """Ask ``request`` now, blocking (what :meth:`__call__` runs on its worker thread)."""
        from loopctl.mcp import Accept, Cancel, Decline
        from loopctl.mcp.elicitation import check_content, fields

        self.echo(f"? MCP server {inert(request.server, one_line=True)} asks:")
        for line in inert(request.message).splitlines() or [""]:
            self.echo(f"  {line}")
        if request.mode == "url":
            self.echo(f"  page to open: {inert(request.url or '', one_line=True)}")
            choice = self._choose("  [a]ccept (you open the page), [d]ecline, [c]ancel")
            return Accept() if choice == "a" else Decline() if choice == "d" else Cancel()
        form = fields(request.schema)
        while True:
            choice = self._choose("  [a]nswer, [d]ecline, [c]ancel")
            if choice != "a":
                return Decline() if choice == "d" else Cancel()
            content = {}
            for f in form:
                value = self._field(f)
                if value is not None:
                    content[f.name] = value
            problems = check_content(request.schema, content)
            if not problems:
                return Accept(content)
            for problem in problems:
                self.echo(f"  not accepted: {inert(problem, one_line=True)}")

    def _choose(self, text: str) -> str:
        choice: str = self.prompt(text, type=click.Choice(["a", "d", "c"]), default="d")
        return choice

    def _field(self, f: loopctl.mcp.elicitation.Field) -> Any:
        """One field's value (``None``: left empty)."""
        label = "  " + inert(f.title, one_line=True) + ("" if f.required else " (optional)")
        if f.description:
            self.echo(f"  {inert(f.description, one_line=True)}")
        if f.options:
            shown = ", ".join(f"{inert(v, one_line=True)} ({inert(lab, one_line=True)})" for v, lab in f.options)
            self.echo(f"  one of: {shown}" if f.kind == "choice" else f"  any of, separated by commas: {shown}")
        if f.kind == "boolean":
            answer = self.prompt(label, type=click.BOOL, default=f.default if isinstance(f.default, bool) else None)
            return bool(answer)
        default = f.default
        if isinstance(default, list):  # a multiple choice's default, as the user would type it
            default = ", ".join(str(v) for v in default)
        if default is not None:
            # The server's default is shown here, escaped (click would print it as it is), and taken when the
            # user enters nothing.
            label += f" [{inert(str(default), one_line=True)}]"
        raw = self.prompt(label, default="" if default is not None or not f.required else None, show_default=False)
        text = str(raw).strip()
        if text == "" and default is not None:
            text = str(default)
        if text == "" and not f.required:
            return None
        if f.kind == "choices":
            return [v.strip() for v in text.split(",") if v.strip()]
        if f.kind in ("integer", "number"):
            try:
                return int(text) if f.kind == "integer" else float(text)
            except ValueError:
                return text  # check_content names the field and the problem
        return text
