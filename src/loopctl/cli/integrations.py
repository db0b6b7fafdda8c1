"""What ``loopctl run --otel``, ``--mcp "COMMAND ARGS"`` and ``--mcp-url URL`` add to a run: OTLP export of
traces and metrics (``docs/telemetry.md``) and the tools of MCP servers (``docs/mcp.md``).

``--otel`` reads the standard OpenTelemetry variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SERVICE_NAME``,
...) and records message content only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true``.
An MCP server whose tool names are already taken (by the file tools or another server) gets the prefix
``mcpN_`` (N: its position among the ``--mcp`` and ``--mcp-url`` options, from 1).
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Sequence
from typing import Any

import click

__all__ = ["CAPTURE_CONTENT_VAR", "open_integrations"]

CAPTURE_CONTENT_VAR = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The OpenTelemetry GenAI instrumentations' switch for recording message content (``true`` to record)."""


async def open_integrations(
    stack: contextlib.AsyncExitStack,
    *,
    otel: bool,
    mcp_commands: Sequence[str],
    mcp_urls: Sequence[str],
    taken: set[str],
    conversation_id: str | None = None,
) -> tuple[list[Any], list[Any]]:
    """Start what the options ask for, on ``stack`` (closed when the run ends: the servers stop, the last
    spans are exported). Returns ``(tool providers, observers)``. ``taken`` holds the tool names already in
    use. Raises ``click.UsageError`` for an option that cannot work, ``ImportError`` naming the missing
    extra, and :class:`~loopctl.mcp.MCPConnectionError` for a server that does not start.

    ``otel`` starts the OTLP export (``--otel``); ``mcp_commands`` and ``mcp_urls`` are the ``--mcp`` and ``--mcp-
    url`` servers; ``conversation_id`` names the session in the spans.
    """
    observers: list[Any] = []
    if otel:
        from loopctl.telemetry import OTelObserver
        from loopctl.telemetry.otlp import configure_otlp

        try:
            export = configure_otlp()
        except ValueError as exc:
            raise click.UsageError(f"--otel: {exc}") from None
        stack.callback(export.shutdown)
        capture = os.environ.get(CAPTURE_CONTENT_VAR, "").strip().lower() == "true"
        observers.append(
            OTelObserver(
                export.tracer_provider,
                export.meter_provider,
                capture,
                agent_name="loopctl",
                conversation_id=conversation_id,
            )
        )
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
        servers.append(MCPServerStdio(argv[0], argv[1:]))
    servers += [MCPServerHTTP(url) for url in mcp_urls]
    names = set(taken)
    for n, server in enumerate(servers, 1):
        await stack.enter_async_context(server)
        if names & {t.name for t in server.tools}:
            server.prefix = f"mcp{n}"
            await server.refresh_tools()
        names |= {t.name for t in server.tools}
    return servers, observers
