"""``loopctl web``: a local chat with the agent of ``loopctl run``, and a browser of the session store.

    loopctl web --model demo                 serve http://127.0.0.1:8700/ (the first line printed is the URL)
    loopctl web --model anthropic:claude-sonnet-4-5 --root . --port 0     a free port
    loopctl web --host 0.0.0.0 --allow-remote --token SECRET              other machines (token required)

The agent is ``loopctl run``'s: the file tools over ``--root``, ``--mcp`` servers' tools, the model of
``--model`` (``demo``: the scripted demo model, no key), sessions in ``--store``. A file change waits for an
approval in the page (``--yes`` allows them); the page also decides the calls of runs paused in other
processes that share the store, and, with ``--dbos URL``, those of DBOS runs waiting on that system database.
The page and its API are described in :mod:`loopctl.ui.web` and ``docs/web.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from loopctl.cli.options import server_limit_options, server_limits, store_option, store_spec
from loopctl.cli.report import CommandError

__all__ = ["TOKEN_VAR", "WebPermission", "access", "web"]

TOKEN_VAR = "LOOPCTL_WEB_TOKEN"
"""Environment variable: the access token of a server bound to a non-loopback address (``--token``)."""

DEFAULT_PORT = 8700


@dataclass
class WebPermission:
    """The permission callback of ``loopctl web``'s runs: reading tools run; a file change runs at once with
    ``yes``, else waits for a decision in the page (``Defer``: the run pauses, ``awaiting_approval``). A change
    the tool refuses anyway (outside the root, a protected path) is not asked about: the tool refuses it."""

    files: Any
    yes: bool = False

    def __call__(self, call: Any) -> Any:
        from loopctl.cli.approve import refused_anyway
        from loopctl.engine import Defer
        from loopctl.tools.files import WRITE_TOOLS

        if call.name not in WRITE_TOOLS or self.yes:
            return True
        if refused_anyway(self.files, call):  # only that skips the question, not a preview that merely failed
            return True
        preview = self.files.preview(call.name, call.input)
        return Defer(f"{preview.action} {preview.path}" if preview is not None else "a file change")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@click.command()
@click.option("--model", "-m", "model", help='provider:model (as loopctl run) or "demo".')
@click.option("--base-url", help="The API's base URL (as loopctl run).")
@click.option(
    "--root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("."),
    help="The folder the file tools may use (default: the current folder).",
)
@store_option
@click.option("--mcp", "mcp_commands", multiple=True, metavar="'COMMAND ARGS'", help="Add an MCP server's tools.")
@click.option("--mcp-url", "mcp_urls", multiple=True, metavar="URL", help="Add a streamable-HTTP MCP server's tools.")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to serve on.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True, help="0: a free port.")
@click.option("--allow-remote", is_flag=True, help="Allow a --host that is not a loopback address (needs --token).")
@click.option(
    "--token",
    envvar=TOKEN_VAR,
    help=f"An access token every API request needs (required off loopback; or ${TOKEN_VAR}).",
)
@click.option("--yes", "-y", is_flag=True, help="Allow file changes without asking in the page.")
@click.option("--allow-protected-writes", is_flag=True, help="As loopctl run.")
@click.option("--system", "system_prompt", help="A system prompt for new sessions.")
@click.option(
    "--max-turns", type=click.IntRange(1), default=200, show_default=True, help="Model calls per run, at most."
)
@click.option("--context-window", type=click.IntRange(1000), help="The model's context window in tokens (as run).")
@click.option("--dbos", "dbos_url", metavar="URL", help="A DBOS system database: its runs' approvals in the page.")
@server_limit_options()
def web(**opts: Any) -> None:
    """Serve a local chat with the agent, and a browser of the sessions, on http://127.0.0.1:8700/."""
    opts["store_spec"] = store_spec()
    host: str = opts["host"]
    if not is_loopback(host):
        if not opts["allow_remote"]:
            raise CommandError(
                f"--host {host} is reachable from other machines: pass --allow-remote and --token (or "
                f"${TOKEN_VAR}) to serve there; the default, 127.0.0.1, serves this machine only"
            )
        if not opts["token"]:
            raise CommandError(f"--host {host} needs an access token of 16 characters or more: --token or ${TOKEN_VAR}")
    if opts["token"] and len(opts["token"]) < 16:
        raise CommandError(f"the access token (--token or ${TOKEN_VAR}) needs 16 characters or more")
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise CommandError(f"loopctl web needs the [web] extra: pip install 'pyloopctl[web]' ({exc})") from None
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(opts))


def access(host: str, port: int, token: str | None) -> tuple[set[str] | None, str | None, str]:
    """How a server on ``host``:``port`` is reached: the ``Host`` values it answers (``None``: any, for a
    non-loopback bind, which its token guards), the access token every API request needs (``token``, on any
    bind: on a loopback one it keeps out the other users of a shared machine), and the URL to print (carrying
    the token in its fragment)."""
    from loopctl.ui.web import loopback_hosts

    shown = f"[{host.strip('[]')}]" if ":" in host.strip("[]") else host
    url = f"http://{shown}:{port}/"
    if token:
        url += f"#token={token}"
    allowed = loopback_hosts(port) | {f"{shown}:{port}"} if is_loopback(host) else None
    return allowed, token or None, url


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise CommandError(f"cannot serve on {host}:{port} ({exc.strerror})") from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def web_client(model: str, base_url: str | None) -> AsyncIterator[Any]:
    """The model client: ``loopctl run``'s; ``demo`` plays the scripted demo model over the Anthropic Messages
    wire (its replies carry the thinking the page shows)."""
    if model != "demo":
        from loopctl.cli.run import build_client

        async with build_client(model, base_url) as client:
            yield client
        return
    from loopctl.cli.run import _demo_delay
    from loopctl.providers import from_string
    from loopctl.testing.demo import DemoScript
    from loopctl.testing.server import FakeProviderServer

    with FakeProviderServer(DemoScript(), event_delay=_demo_delay()) as server:
        demo = from_string(
            "anthropic:demo-model", base_url=server.base_url, api_key="demo-key", codec_options={"prompt_cache": False}
        )
        try:
            yield demo
        finally:
            await demo.aclose()


async def _serve(o: dict[str, Any]) -> None:
    import uvicorn

    from loopctl import Agent, __version__
    from loopctl.cli.integrations import open_integrations
    from loopctl.cli.run import _DEFAULT_SYSTEM, _model_spec, _readable, _session_config, model_sizes
    from loopctl.cli.sessions import open_store
    from loopctl.engine import RunConfig
    from loopctl.server_limits import uvicorn_config
    from loopctl.tools.files import PROTECTED_NAMES, FileTools
    from loopctl.ui.web import WebSettings, create_app

    model = _model_spec(o["model"])
    if model == "demo" and o["base_url"]:
        raise CommandError("--base-url does not apply to --model demo (it starts its own server)")
    root: Path = o["root"].resolve()
    limits = server_limits(o)
    try:
        files = FileTools(root, protected=() if o["allow_protected_writes"] else PROTECTED_NAMES)
    except OSError as exc:
        raise CommandError(f"the root folder {root} cannot be used ({exc.strerror})") from None
    sock = _bind(o["host"], o["port"])
    port = sock.getsockname()[1]
    allowed, token, url = access(o["host"], port, o["token"])
    store = open_store(o["store_spec"])
    try:
        async with web_client(model, o["base_url"]) as client, contextlib.AsyncExitStack() as stack:
            servers, _ = await open_integrations(
                stack, otel=False, mcp_commands=o["mcp_commands"], mcp_urls=o["mcp_urls"], taken={t.name for t in files}
            )
            spans, observers = _telemetry()
            system = o["system_prompt"] or _DEFAULT_SYSTEM.format(root=_readable(str(root)))
            window, max_tokens = await model_sizes(client, model, o["context_window"], None)
            session_config = _session_config(model, root, system, window)
            agent = Agent(
                client,
                tools=[*files, *servers],
                name="loopctl",
                session_config=session_config,
                observers=observers,
                permission=WebPermission(files, yes=o["yes"]),
            )
            dbos = _dbos_client(o["dbos_url"]) if o["dbos_url"] else None
            settings = WebSettings(
                # A remote bind is reached by names this process cannot know: its access token guards the API.
                allowed_hosts=allowed,
                access_token=token,
                session_defaults={"model": model, "root": str(root), "system_prompt": system, "metadata": {}},
                files=files,
                config=RunConfig(max_turns=o["max_turns"], max_tokens=max_tokens),
                spans=spans,
                dbos=dbos,
                asks_writes=not o["yes"],
                max_body_bytes=limits.max_body_bytes,
                info={
                    "model": model,
                    "root": str(root),
                    "store": o["store_spec"] or ".loopctl/sessions.db",
                    "version": __version__,
                    "tools": [t.name for t in files] + [t.name for s in servers for t in s.tools],
                },
            )
            app = create_app(agent, store, settings)
            print(url, flush=True)
            print(f"loopctl web {__version__}: {model} over {root}; Ctrl-C stops", file=sys.stderr, flush=True)
            config = uvicorn_config(app, limits, log_level="warning", lifespan="off", access_log=False)
            server = uvicorn.Server(config)
            await server.serve(sockets=[sock])
    finally:
        store.close()
        sock.close()


def _telemetry() -> tuple[Any, list[Any]]:
    """The span collector of the page's waterfall and the observer feeding it (none without the SDK)."""
    try:
        from loopctl.telemetry import OTelObserver
        from loopctl.ui._spans import SpanCollector, make_tracer_provider
    except ImportError:
        return None, []
    try:
        collector = SpanCollector()
        provider = make_tracer_provider(collector)
    except ImportError:
        return None, []
    return collector, [OTelObserver(provider, agent_name="loopctl")]


def _dbos_client(url: str) -> Any:
    try:
        from dbos import DBOSClient
    except ImportError as exc:
        raise CommandError(f"--dbos needs DBOS: pip install 'pyloopctl[dbos]' ({exc})") from None
    return DBOSClient(system_database_url=url)
