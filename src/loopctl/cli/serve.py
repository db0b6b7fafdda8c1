"""``loopctl mcp serve`` and ``loopctl a2a serve``: loopctl's tools and agents served to other programs.

``loopctl mcp serve --tools files --root DIR`` serves the file tools over stdio (what Claude Desktop and other
MCP hosts start); ``--agent MODULE:ATTR`` serves an :class:`~loopctl.agent.Agent` as one tool; ``--http``
serves streamable HTTP on ``--host``/``--port`` instead. ``loopctl a2a serve --agent MODULE:ATTR`` serves an
agent over the Agent2Agent protocol (``docs/a2a.md``). Conversations are kept in the store ``--store`` (or
``$LOOPCTL_STORE``) names, else in memory.

Nothing but the protocol goes to standard output (stdio is the MCP channel); messages go to standard error.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import click

from loopctl.cli.options import serve_store_option, server_limit_options, server_limits
from loopctl.cli.report import CommandError
from loopctl.cli.sessions import open_store, store_spec

__all__ = ["a2a", "load_object", "mcp"]

_otel_option = click.option(
    "--otel",
    is_flag=True,
    help="Export the served agents' traces and metrics over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT); a caller's "
    "traceparent makes its spans their parent.",
)
"""``mcp serve`` and ``a2a serve``'s ``--otel``."""


def load_object(spec: str, what: str, *, form: str = "MODULE:ATTR (for example myapp.agents:support)") -> Any:
    """The object ``spec`` (``MODULE:ATTR``; ``ATTR`` may be dotted) names, imported with the current folder on
    the path, as ``uvicorn`` does. ``what`` names the option in errors (``--agent``), ``form`` what it takes.
    Raises a one-line :class:`~loopctl.cli.report.CommandError`."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CommandError(f"{what} {spec!r} must be {form}")
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise CommandError(f"{what} {spec!r}: cannot import {module_name!r}: {exc}") from None
    for name in attr.split("."):
        try:
            value = getattr(value, name)
        except AttributeError:
            raise CommandError(f"{what} {spec!r}: {module_name!r} has no attribute {attr!r}") from None
    return value


def _store() -> Any:
    spec = store_spec()
    return open_store(spec) if spec else None


@click.group()
def mcp() -> None:
    """Serve loopctl's tools and agents over the Model Context Protocol."""


@mcp.command("serve")
@click.option(
    "--tools",
    "tool_specs",
    multiple=True,
    metavar="files|MODULE:ATTR",
    help="Tools to serve: 'files' (the file tools over --root), or MODULE:ATTR naming a tool, a list of tools "
    "or a tool provider. Repeatable.",
)
@click.option("--agent", "agent_specs", multiple=True, metavar="MODULE:ATTR", help="An Agent to serve as one tool.")
@click.option(
    "--root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="The folder the file tools are confined to.",
)
@click.option("--read-only", is_flag=True, help="Only the reading file tools (list_files, read_file, search).")
@click.option("--yes", "-y", is_flag=True, help="Run file writes without asking the client (default: ask).")
@click.option("--http", is_flag=True, help="Serve streamable HTTP instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on (with --http).")
@click.option("--port", type=int, default=8000, show_default=True, help="The port to listen on (with --http).")
@click.option("--path", "http_path", default="/mcp", show_default=True, help="The endpoint's path (with --http).")
@click.option("--name", default="loopctl", show_default=True, help="The server's name, as clients show it.")
@server_limit_options(max_body_bytes=4 * 1024 * 1024)  # the MCP SDK's own default
@_otel_option
@serve_store_option
def mcp_serve(
    tool_specs: tuple[str, ...],
    agent_specs: tuple[str, ...],
    root: Path,
    read_only: bool,
    yes: bool,
    http: bool,
    host: str,
    port: int,
    http_path: str,
    name: str,
    otel: bool,
    **limit_options: Any,
) -> None:
    """Serve tools and agents over MCP (stdio, or streamable HTTP with --http).

    File writes (write_file, edit_file) and tools that require approval are put to the client as an MCP
    elicitation; a client that declines, cancels or cannot be asked gets an error result instead. Agents'
    conversations are kept in --store (or $LOOPCTL_STORE) when given, else in memory.
    """
    from mcp_types import ToolAnnotations

    from loopctl.agent import Agent
    from loopctl.mcp.server import ToolServer
    from loopctl.tools.files import READ_TOOLS, WRITE_TOOLS, FileTools

    if not tool_specs and not agent_specs:
        raise click.UsageError("nothing to serve: give --tools files, --tools MODULE:ATTR or --agent MODULE:ATTR")
    served: list[Any] = []
    annotations: dict[str, ToolAnnotations] = {}
    asks: set[str] = set()
    for spec in tool_specs:
        if spec == "files":
            served.extend(FileTools(root, read_only=read_only))
            annotations |= {n: ToolAnnotations(read_only_hint=True, open_world_hint=False) for n in READ_TOOLS}
            if not read_only:
                annotations |= {n: ToolAnnotations(destructive_hint=True, open_world_hint=False) for n in WRITE_TOOLS}
                if not yes:
                    asks |= WRITE_TOOLS
        else:
            served.append(load_object(spec, "--tools", form="'files' or MODULE:ATTR (for example myapp.tools:search)"))
    for spec in agent_specs:
        agent = load_object(spec, "--agent")
        if not isinstance(agent, Agent):
            raise CommandError(f"--agent {spec!r} is a {type(agent).__name__}, not a loopctl Agent")
        served.append(agent)

    flush = _otel(served) if otel else None
    try:
        server = ToolServer(served, name=name, require_approval=asks, annotations=annotations, store=_store())
    except (TypeError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    try:
        if http:
            import uvicorn

            from loopctl.server_limits import uvicorn_config

            limits = server_limits(limit_options)
            app = server.streamable_http_app(
                streamable_http_path=http_path, max_request_body_size=limits.max_body_bytes, host=host
            )
            click.echo(f"loopctl: serving MCP on http://{host}:{port}{http_path}", err=True)
            level = server.settings.log_level.lower()
            uvicorn.Server(uvicorn_config(app, limits, host=host, port=port, log_level=level)).run()
        else:
            server.run()
    finally:
        if flush is not None:
            flush()


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def _otel(served: list[Any]) -> Any:
    """``--otel``: start the export and give every served agent an observer of its own (in place in
    ``served``). Returns the flush to call when serving ends."""
    from loopctl.agent import Agent
    from loopctl.cli.integrations import start_otel

    observer, flush = start_otel()
    for i, item in enumerate(served):
        if isinstance(item, Agent):
            served[i] = item.replace(observers=[*item.observers, observer(item.name)])
    return flush


@click.group()
def a2a() -> None:
    """Serve loopctl agents over the Agent2Agent (A2A) protocol."""


@a2a.command("serve")
@click.option("--agent", "agent_spec", required=True, metavar="MODULE:ATTR", help="The Agent to serve.")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", type=int, default=8000, show_default=True, help="The port to listen on.")
@click.option(
    "--url",
    default=None,
    metavar="URL",
    help="The URL clients reach the agent at, for its card (default: http://HOST:PORT/).",
)
@server_limit_options()
@_otel_option
@serve_store_option
def a2a_serve(agent_spec: str, host: str, port: int, url: str | None, otel: bool, **limit_options: Any) -> None:
    """Serve an agent over A2A: its card at /.well-known/agent-card.json and JSON-RPC at /.

    Each A2A context is a conversation (a session of --store, or $LOOPCTL_STORE, when given; else in memory);
    each task one run. A run that needs approval goes to input-required until the client answers.
    """
    import uvicorn

    from loopctl.a2a.server import a2a_app
    from loopctl.agent import Agent
    from loopctl.server_limits import uvicorn_config

    agent = load_object(agent_spec, "--agent")
    if not isinstance(agent, Agent):
        raise CommandError(f"--agent {agent_spec!r} is a {type(agent).__name__}, not a loopctl Agent")
    served: list[Any] = [agent]
    flush = _otel(served) if otel else None
    if flush is not None:
        # uvicorn stops gracefully on SIGTERM, then raises the signal again once its own handler is gone: this
        # handler makes that an exit through the ``finally`` below, so the last spans are exported.
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    limits = server_limits(limit_options)
    # The body limit is the server's (uvicorn_config), not the app's too.
    app = a2a_app(served[0], url or f"http://{host}:{port}/", store=_store(), max_body_bytes=None)
    click.echo(f"loopctl: serving the agent {agent.name} over A2A on http://{host}:{port}/", err=True)
    try:
        uvicorn.Server(uvicorn_config(app, limits, host=host, port=port, log_level="warning")).run()
    finally:
        if flush is not None:
            flush()
