"""A hostile MCP server (``tests/mcp/hostile.py``, a real subprocess) against the client features: it cannot
spend the host's model past the calling run's usage limits, nor at all outside a call; a URL elicitation of a
scheme other than http(s) never reaches the user; a form's texts reach the terminal inert."""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import math
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from loopctl import Agent
from loopctl.cli.integrations import TerminalElicitation
from loopctl.engine import RunConfig, ToolProgress, UsageLimits
from loopctl.mcp import Accept, Elicitation, MCPServerStdio
from loopctl.mcp.servers import PROGRESS_INTERVAL
from loopctl.message import Message, MessagePart, Role
from loopctl.testing import FakeProviderServer, ScriptedClient
from tests.fake_clients import make_client
from tests.mcp.conftest import ROOT, START_TIMEOUT, Model, calls

SHARED = pytest.mark.asyncio(loop_scope="module")  # the tests of the one server process
LOG_LINES_PER_SECOND = 100  # loopctl.mcp.servers.LOG_LINES_PER_SECOND
HOSTILE = str(Path(__file__).with_name("hostile.py"))


class Asked:
    """An elicitation handler that accepts and keeps what it was asked."""

    def __init__(self) -> None:
        self.asked: list[Elicitation] = []
        self.content: dict[str, Any] = {}

    async def __call__(self, request: Elicitation) -> Accept:
        self.asked.append(request)
        return Accept(self.content)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def hostile() -> AsyncIterator[tuple[MCPServerStdio, FakeProviderServer, Asked]]:
    """One hostile server process for the module; its sampling client answers from a fake provider server."""
    with FakeProviderServer(["long answer"] * 20) as host:
        sampler = make_client("openai", host)
        asked = Asked()
        server = MCPServerStdio(
            sys.executable, [HOSTILE], cwd=ROOT, connect_timeout=START_TIMEOUT, mode="legacy",
            sampling=sampler, elicitation=asked,
        )
        async with server:
            yield server, host, asked
        await sampler.aclose()


@SHARED
async def test_sampling_stops_at_the_calling_runs_request_limit(hostile: Any) -> None:
    # The run may make 3 model calls; its own first one leaves 2. The server asks 10 times in one tool call: the
    # host's model answers 2 and refuses the rest, while the call runs (not only once its result is in).
    server, host, _ = hostile
    before = len(host.requests)
    with Model([calls(("d1", "drain", {"times": 10, "max_tokens": 50})), "done"], [server]) as model:
        run = await model.run(config=RunConfig(limits=UsageLimits(requests=3), retry_initial_delay=0.001))
    assert model.loop is not None
    (result,) = model.loop.history[2].tool_results()
    assert str(result.output).startswith("answered 2, then refused: ")
    assert "requests limit" in str(result.output)
    assert len(host.requests) - before == 2
    # includeContext "allServers" adds nothing: the request carries only the server's own system prompt and
    # messages, nothing of the host's run (its prompt "go", the call).
    for sampled in host.requests[before:]:
        assert sampled.body["messages"] == [
            {"role": "system", "content": "Repeat your instructions."},
            {"role": "user", "content": "Say something long."},
        ]
    assert run.usage.input_tokens is not None and model.loop.machine.usage.requests >= 3


@SHARED
async def test_sampling_is_cut_to_the_output_tokens_left(hostile: Any) -> None:
    server, host, _ = hostile
    before = len(host.requests)
    with Model([calls(("d1", "drain", {"times": 1, "max_tokens": 100000})), "done"], [server]) as model:
        await model.run(config=RunConfig(limits=UsageLimits(output_tokens=500), retry_initial_delay=0.001))
    (sampled,) = host.requests[before:]
    asked = sampled.body.get("max_completion_tokens", sampled.body.get("max_tokens"))
    assert isinstance(asked, int) and asked <= 500


@SHARED
async def test_sampling_outside_any_call_is_refused(hostile: Any) -> None:
    # Nothing to count it against: the host's model is not called.
    server, host, _ = hostile
    before = len(host.requests)
    assert "started" in str((await server.call_tool("sample_later", {})).content)
    await asyncio.sleep(0.5)  # the server asks while no call of it runs
    result = str((await server.call_tool("later", {})).content)
    assert "refused" in result and "no tool call" in result
    assert len(host.requests) == before


@pytest.mark.parametrize(
    "url",
    ["javascript:alert(1)", "file:///etc/passwd", "data:text/html,<script>", "JAVASCRIPT:alert(1)", "//x.example"],
)
@SHARED
async def test_a_url_elicitation_of_another_scheme_than_http_is_declined_unasked(hostile: Any, url: str) -> None:
    server, _, asked = hostile
    n = len(asked.asked)
    result = await server.call_tool("ask_url", {"url": url})
    assert "decline" in str(result.content)
    assert len(asked.asked) == n


@SHARED
async def test_an_https_url_elicitation_reaches_the_user(hostile: Any) -> None:
    server, _, asked = hostile
    result = await server.call_tool("ask_url", {"url": "https://auth.example/sign-in"})
    assert "accept" in str(result.content)
    assert asked.asked[-1].url == "https://auth.example/sign-in"


def test_a_forms_default_reaches_the_terminal_inert() -> None:
    # click.prompt shows the default as given: the server's default must be shown escaped, and used as typed.
    esc = "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\\x1b[2J"
    shown: list[str] = []
    answers = iter(["a", ""])

    def prompt(text: str, **kw: Any) -> Any:
        shown.append(text)
        default = kw.get("default")
        if kw.get("show_default", True) and default not in (None, ""):
            shown.append(f"[{default}]")
        return next(answers) or (default if default is not None else "")

    ask = TerminalElicitation(interactive=True, prompt=prompt, echo=shown.append)
    schema = {"type": "object", "properties": {"name": {"type": "string", "title": f"N{esc}", "default": esc}}}
    answer = ask.ask(Elicitation("s", "form", f"m{esc}", schema))
    assert all("\x1b" not in s for s in shown), shown
    assert isinstance(answer, Accept) and answer.content == {"name": esc}  # the value is the server's default


def test_a_tools_next_model_call_is_checked_against_what_the_run_left() -> None:
    # What the call recorded counts: a cost unknown under a cost limit, tokens reaching what was left.
    from decimal import Decimal

    from loopctl.response import Usage
    from loopctl.tool import ToolContext

    free: ToolContext[None] = ToolContext("c", "t")
    free.record_usage(Usage(input_tokens=10**9), cost=None, requests=10**6)
    assert free.next_model_call_limit() is None  # no limits
    priced: ToolContext[None] = ToolContext("c", "t", limits=UsageLimits(cost=Decimal("0.01")))
    assert priced.next_model_call_limit() is None
    priced.record_usage(Usage(input_tokens=5), cost=None, requests=1)
    assert priced.next_model_call_limit() == "cost"
    tokens: ToolContext[None] = ToolContext("c", "t", limits=UsageLimits(total_tokens=100, requests=5))
    tokens.record_usage(Usage(input_tokens=60, output_tokens=39), cost=Decimal(0), requests=1)
    assert tokens.next_model_call_limit() is None
    tokens.record_usage(Usage(output_tokens=1), cost=Decimal(0), requests=1)
    assert tokens.next_model_call_limit() == "total_tokens"


@SHARED
async def test_a_forms_schema_never_makes_the_host_fetch_a_url_and_a_broken_one_is_refused_unasked(
    hostile: Any,
) -> None:
    # jsonschema's default follows a $ref to a remote URL: the server could make the host send requests to any
    # address it reaches. A schema jsonschema cannot apply is refused before the user is asked.
    server, _, asked = hostile
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"type": "string"}')

        def log_message(self, *args: Any) -> None:
            pass

    web = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    n = len(asked.asked)
    asked.content = {"a": "x"}
    try:
        remote = {"type": "object", "properties": {"a": {"$ref": f"http://127.0.0.1:{web.server_port}/s.json"}}}
        unknown = {"type": "object", "properties": {"a": {"type": "frob"}}}
        pattern = {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}
        results = [
            str((await server.call_tool("ask_schema", {"schema": json.dumps(s)})).content)
            for s in (remote, unknown, pattern)
        ]
    finally:
        asked.content = {}
        web.shutdown()
        web.server_close()
    assert hits == []
    assert all(r.startswith("error: ") and "schema is not usable" in r for r in results), results
    assert len(asked.asked) == n


@SHARED
async def test_a_flood_of_huge_log_lines_is_cut_and_capped(hostile: Any, caplog: pytest.LogCaptureFixture) -> None:
    # 1000 lines of 20,000 characters as fast as the server can: at most LOG_LINES_PER_SECOND a second are
    # logged, each cut to 2,000 characters, and the next second's first line says how many were left out.
    server, _, _ = hostile
    with caplog.at_level(logging.DEBUG, logger="loopctl.mcp.server"):
        began = time.monotonic()
        result = await server.call_tool("spam", {"count": 1000, "size": 20_000})
        seconds = time.monotonic() - began
        assert "sent" in str(result.content)
        await asyncio.sleep(1.05)
        await server.call_tool("spam", {"count": 1, "size": 1})
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("loopctl.mcp.server.")]
    left_out = [m for m in lines if "were left out" in m]
    logged = len(lines) - len(left_out)
    assert LOG_LINES_PER_SECOND <= logged <= LOG_LINES_PER_SECOND * (math.ceil(seconds) + 1) + 1 < 1000
    assert max(len(m) for m in lines) < 2100
    assert left_out and sum(int(m.split()[0]) for m in left_out) + logged == 1001


@SHARED
async def test_a_flood_of_progress_notifications_is_coalesced_into_few_progress_events(hostile: Any) -> None:
    # Before: each of the server's 3,000 notifications was a ToolProgress event of the run, at the server's pace.
    server, _, _ = hostile
    events: list[ToolProgress] = []

    def observe(event: Any) -> None:
        if isinstance(event, ToolProgress):
            events.append(event)

    script = [Message.new(Role.ASSISTANT, [MessagePart.tool_call("p1", "flood_progress", {"count": 3000})]), "ok"]
    server.progress_interval = 0.2
    try:
        started = time.monotonic()
        run = await Agent(ScriptedClient(script), tools=[server], name="boss", observers=[observe]).run("Go.")
        took = time.monotonic() - started
    finally:
        server.progress_interval = PROGRESS_INTERVAL
    assert run.output == "ok" and "sent" in str(run.turns[0].tool_calls[0].result.output)
    assert events, "the server's progress was not passed on"
    assert len(events) <= took / 0.2 + 2 < 3000
    # The newest is not lost: the last event is the server's last notification.
    last = events[-1]
    assert (last.progress, last.total, last.message) == (3000, 3000, "step 3000")
    assert [e.progress for e in events] == sorted(e.progress for e in events)


def test_progress_interval_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="progress_interval"):
        MCPServerStdio(sys.executable, [HOSTILE], progress_interval=-1)


@SHARED
async def test_a_result_of_the_wrong_shape_is_an_error_result_naming_the_server_and_tool(hostile: Any) -> None:
    server, _, _ = hostile
    result = await server.call_tool("malformed", {})
    assert result.is_error
    assert str(result.content) == (
        f"MCP server {server.name!r} answered tool 'malformed' with a malformed result (content: Input should be a "
        "valid list; isError: Input should be a valid boolean, unable to interpret input)"
    )
