"""MCP servers end to end: the test server (``tests/mcp/server.py``) run as a real subprocess over stdio and as
a real streamable-HTTP server process on 127.0.0.1, its tools driven by a scripted model through a real
OpenAI client and the fake provider server (``docs/mcp.md``)."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import signal
import time
from typing import Any

import pytest

from loopctl.engine import ToolCallFinished, ToolCallStarted
from loopctl.mcp import MCPConnectionError, MCPServerHTTP, MCPServerStdio
from loopctl.message import ImagePart, Retention, ToolResultPart
from loopctl.tool import tool
from tests.mcp.conftest import HTTPServerProcess, Model, calls, stdio_server

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
MCP_TOOLS = [
    "add", "echo", "picture", "fail", "hang", "crash", "pid", "slow", "header", "grow", "shadow", "burst", "traceparent",
    "forecast",
]  # fmt: skip


@tool
def local(text: str) -> str:
    """A plain loopctl tool next to the MCP ones."""
    return f"local {text}"


@tool
def write_note(note: str) -> str:
    """Keep a note."""
    return f"noted: {note}"


def results(model: Model, turn_message: int) -> list[ToolResultPart]:
    assert model.loop is not None
    return list(model.loop.history[turn_message].tool_results())


def text_of(result: ToolResultPart) -> str:
    return str(result.output)


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make_server(transport: str, http: HTTPServerProcess, **options: Any) -> MCPServerStdio | MCPServerHTTP:
    return stdio_server(**options) if transport == "stdio" else http.client(**options)


# --- list and call ---------------------------------------------------------------------------------------------


async def test_a_model_lists_and_calls_mcp_tools_text_structured_image_and_error(
    transport: str, http_process: HTTPServerProcess
) -> None:
    server = make_server(
        transport,
        http_process,
        prefix="t",
        retention=Retention.REQUERY,
        retention_by_tool={"echo": Retention.DURABLE},
    )
    script = [
        calls(
            ("c1", "t_add", {"a": 2, "b": 3}),
            ("c2", "t_echo", {"text": "hi"}),
            ("c3", "t_picture", {}),
            ("c4", "t_fail", {"reason": "no"}),
            ("c5", "local", {"text": "x"}),
        ),
        "done",
    ]
    async with server:
        assert [t.name for t in server.tools] == [f"t_{n}" for n in MCP_TOOLS]
        assert [t.mcp_name for t in server.tools] == MCP_TOOLS
        with Model(script, [local, server]) as model:
            run = await model.run()
    assert run.ok and run.output == "done"
    # The model was offered the MCP tools (prefixed) after the local one, with their descriptions and schemas.
    assert model.tool_names(0) == ["local", *[f"t_{n}" for n in MCP_TOOLS]]
    offered = {t["function"]["name"]: t["function"] for t in model.server.requests[0].body["tools"]}
    assert offered["t_add"]["description"] == "Add two numbers."
    assert offered["t_add"]["parameters"]["properties"]["a"]["type"] == "integer"

    add, echo, picture, fail, loc = results(model, 2)
    assert (text_of(add), add.is_error, add.retention) == ("5", False, Retention.REQUERY)
    assert (text_of(echo), echo.retention) == ("hi", Retention.DURABLE)
    (image,) = picture.output.parts
    assert isinstance(image, ImagePart)
    assert (image.source.media_type, image.source.data) == ("image/png", PNG_B64)
    assert (text_of(fail), fail.is_error) == ("Error executing tool fail: refused: no", True)
    assert text_of(loc) == "local x"
    # The model read the image back (an image part in the next request).
    assert PNG_B64 in model.server.requests[1].raw.decode()


async def test_bad_arguments_and_an_unknown_tool_are_error_results() -> None:
    async with stdio_server() as server:
        unknown = await server.call_tool("add", {"a": "not a number", "b": 1})
        missing = await server.call_tool("nope")
    assert unknown.is_error
    assert "validation error" in str(unknown.content).lower() and "not a number" in str(unknown.content)
    assert (missing.is_error, missing.content) == (True, "MCP server 'python server.py' has no tool 'nope'")


# --- timeouts --------------------------------------------------------------------------------------------------


async def test_a_hanging_tool_times_out_and_the_session_stays_usable() -> None:
    script = [calls(("h1", "hang", {})), calls(("e1", "echo", {"text": "still here"})), "ok"]
    async with stdio_server(timeout=1.0) as server:
        with Model(script, [server]) as model:
            started = time.perf_counter()
            run = await model.run()
            elapsed = time.perf_counter() - started
        assert server.connections == 1
    assert run.ok
    (hung,) = results(model, 2)
    assert (text_of(hung), hung.is_error) == (
        "MCP tool 'hang' (python server.py) timed out after 1 s and was cancelled",
        True,
    )
    (echo,) = results(model, 4)
    assert (text_of(echo), echo.is_error) == ("still here", False)
    assert elapsed < 20


# --- dropped connections ---------------------------------------------------------------------------------------


async def test_a_server_that_dies_mid_call_is_reinitialised_for_the_next_call() -> None:
    script = [calls(("p1", "pid", {})), calls(("x1", "crash", {})), calls(("p2", "pid", {})), "ok"]
    async with stdio_server() as server:
        with Model(script, [server]) as model:
            run = await model.run()
        assert server.connections == 2
    assert run.ok
    (first,) = results(model, 2)
    (crashed,) = results(model, 4)
    (second,) = results(model, 6)
    assert crashed.is_error
    assert text_of(crashed) == (
        "MCP server 'python server.py' lost the connection during the call (Connection closed); the call may "
        "have run. The session is opened again for the next call."
    )
    assert int(text_of(first)) != int(text_of(second))  # a new server process answered
    assert int(text_of(second)) > 0


async def test_a_server_killed_between_calls_is_restarted_and_the_call_sent_again() -> None:
    async with stdio_server() as server:
        pid = int(str((await server.call_tool("pid")).content))
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):  # until the process is gone
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        # echo is not marked safe to repeat, but the request never reached the dead process: it is sent again.
        echo = await server.call_tool("echo", {"text": "back"})
        assert (echo.content, echo.is_error) == ("back", False)
        assert server.connections == 2
        assert int(str((await server.call_tool("pid")).content)) != pid


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_http_server_restarted_between_calls_is_reinitialised(
    own_http_process: HTTPServerProcess, mode: str
) -> None:
    async with own_http_process.client(mode=mode) as server:
        first = await server.call_tool("pid")
        own_http_process.restart()
        again = await server.call_tool("pid")
        # A handshake-era session lives on the server: the restarted one has expired it (404), so the session
        # is opened again; a 2026-07-28 session is stateless and carries on.
        assert server.connections == (2 if mode == "legacy" else 1)
    assert not first.is_error and not again.is_error
    assert first.content != again.content


async def test_an_http_server_that_is_down_gives_an_error_result_then_works_when_back(
    own_http_process: HTTPServerProcess,
) -> None:
    async with own_http_process.client() as server:
        own_http_process.kill()
        down = await server.call_tool("echo", {"text": "x"})
        own_http_process.start()
        up = await server.call_tool("echo", {"text": "y"})
    assert down.is_error
    assert str(down.content).startswith("MCP server '127.0.0.1' could not be started or reached: ConnectError")
    assert (up.content, up.is_error) == ("y", False)


# --- tool-list changes -----------------------------------------------------------------------------------------


async def test_a_list_changed_notification_refreshes_the_tools_before_the_next_model_call() -> None:
    # A handshake-era session: the server sends notifications/tools/list_changed during the call.
    script = [calls(("g1", "grow", {})), calls(("f1", "fresh", {})), "ok"]
    async with stdio_server(mode="legacy") as server:
        with Model(script, [server]) as model:
            run = await model.run()
        assert "fresh" in [t.name for t in server.tools]
    assert run.ok
    assert "fresh" not in model.tool_names(0)
    assert "fresh" in model.tool_names(1)
    (fresh,) = results(model, 4)
    assert (text_of(fresh), fresh.is_error) == ("fresh!", False)


async def test_a_subscriptions_listen_change_event_refreshes_the_tools(own_http_process: HTTPServerProcess) -> None:
    # A 2026-07-28 session: the change comes on the subscriptions/listen stream.
    script = [calls(("g1", "grow", {})), "grown", calls(("f1", "fresh", {})), "ok"]
    async with own_http_process.client(mode="auto") as server:
        with Model(script, [server]) as model:
            assert (await model.run("grow")).ok
            for _ in range(200):
                if "fresh" in [t.name for t in server.tools]:
                    break
                await asyncio.sleep(0.05)
            run = await model.run("use it")
    assert run.ok
    assert "fresh" not in model.tool_names(0)
    assert "fresh" in model.tool_names(2)
    assert model.loop is not None
    assert [str(r.output) for r in model.loop.history[-2].tool_results()] == ["fresh!"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_burst_of_list_changed_notifications_is_one_refresh_and_blocks_nothing(
    mode: str, own_http_process: HTTPServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: a refresh that saw a newer notification waited for every refresh to end, itself included, until
    # connect_timeout: the call that caused the burst, answered at once, came back only then, or (with a shorter
    # call timeout) was reported timed out although it ran.
    server = stdio_server(mode="legacy", timeout=8.0) if mode == "legacy" else own_http_process.client(timeout=8.0)
    listed = 0
    real = type(server)._list_tools

    async def counted(self: Any, client: Any) -> None:
        nonlocal listed
        listed += 1
        await real(self, client)

    monkeypatch.setattr(type(server), "_list_tools", counted)
    async with server:
        started = time.perf_counter()
        out = await server.call_tool("burst", {"count": 6})
        elapsed = time.perf_counter() - started
        names = [t.name for t in server.tools]
        again = await server.call_tool("extra_6")
    assert (out.content, out.is_error) == ("added 6 tools", False)
    assert elapsed < 5.0  # not the call timeout, nor the connect timeout
    if mode == "legacy":  # the notifications arrive during the call: its result waits for the new list
        assert names[-6:] == [f"extra_{i}" for i in range(1, 7)]
    assert (again.content, again.is_error) == ("extra 6", False)
    assert 2 <= listed <= 3  # the first listing, then the burst coalesced (not one listing per notification)


async def test_a_server_cannot_take_over_a_local_tool_by_announcing_its_name(caplog: pytest.LogCaptureFixture) -> None:
    # The server is listed first; mid-run it announces a tool named like the local one. Before: the model's next
    # write_note call, with its data, ran on the server.
    script = [calls(("s1", "shadow", {"name": "write_note"})), calls(("w1", "write_note", {"note": "secret"})), "ok"]
    async with stdio_server(mode="legacy") as server:
        with caplog.at_level("WARNING", logger="loopctl.tool"), Model(script, [server, write_note]) as model:
            run = await model.run()
        assert "write_note" in [t.name for t in server.tools]  # the server does offer it...
    assert run.ok
    offered = [t["function"] for t in model.server.requests[1].body["tools"]]
    assert [t["description"] for t in offered if t["name"] == "write_note"] == ["Keep a note."]  # ...but not to the model
    (result,) = results(model, 4)
    assert (text_of(result), result.is_error) == ("noted: secret", False)
    assert any("tool 'write_note' of MCPServerStdio" in r.getMessage() for r in caplog.records)


async def test_two_servers_one_announcing_the_others_tool_name_keep_their_own_tools() -> None:
    # The same rule between two servers (as between two --mcp servers of the CLI).
    script = [calls(("s1", "shadow", {"name": "b_echo"})), calls(("e1", "b_echo", {"text": "to b"})), "ok"]
    async with stdio_server(mode="legacy", name="a") as a, stdio_server(prefix="b", name="b") as b:
        with Model(script, [a, b]) as model:
            run = await model.run()
    assert run.ok
    (result,) = results(model, 4)
    assert (text_of(result), result.is_error) == ("to b", False)


# --- tasks -----------------------------------------------------------------------------------------------------


async def test_a_tool_called_from_several_tasks_at_once_opened_and_closed_in_other_tasks() -> None:
    server = stdio_server()
    await asyncio.create_task(server.connect())  # opened from a task that then ends

    async def one(i: int) -> Any:
        return await server.call_tool("slow", {"ms": 2000, "tag": f"t{i}"})

    started = time.perf_counter()
    outs = await asyncio.gather(*(asyncio.create_task(one(i)) for i in range(6)))
    elapsed = time.perf_counter() - started
    assert [(o.content, o.is_error) for o in outs] == [(f"t{i} after 2000 ms", False) for i in range(6)]
    assert elapsed < 8.0  # concurrent: six two-second calls one after the other would take twelve
    await asyncio.create_task(server.aclose())  # closed from yet another task
    after = await server.call_tool("echo", {"text": "x"})
    assert after.is_error and "is not connected" in str(after.content)


async def test_parallel_calls_of_one_turn_run_concurrently_on_one_session() -> None:
    # Timed from the first call's start to the last one's end, not over the run: the run's first import of the
    # OpenAI SDK (the model's client) can take seconds on a loaded machine.
    script = [calls(*((f"s{i}", "slow", {"ms": 1500, "tag": f"s{i}"}) for i in range(4))), "ok"]
    seen: list[tuple[type[Any], float]] = []

    def observe(event: Any) -> None:
        if isinstance(event, (ToolCallStarted, ToolCallFinished)):
            seen.append((type(event), time.perf_counter()))

    async with stdio_server() as server:
        with Model(script, [server]) as model:
            run = await model.run(observers=[observe])
    assert [kind for kind, _ in seen] == [ToolCallStarted] * 4 + [ToolCallFinished] * 4
    elapsed = seen[-1][1] - seen[0][1]
    assert run.ok
    assert [text_of(r) for r in results(model, 2)] == [f"s{i} after 1500 ms" for i in range(4)]
    assert elapsed < 4.5  # one after the other: 6 s


# --- connecting ------------------------------------------------------------------------------------------------


async def test_a_server_that_cannot_start_or_be_reached_raises_a_typed_error() -> None:
    with pytest.raises(MCPConnectionError, match="could not be started or reached"):
        async with MCPServerStdio("/nonexistent/mcp-server", connect_timeout=10):
            pass
    with pytest.raises(MCPConnectionError, match="could not be started or reached: ConnectError"):
        async with MCPServerHTTP("http://127.0.0.1:9/mcp", connect_timeout=10):
            pass


async def test_headers_reach_the_server_and_stay_out_of_repr(http_process: HTTPServerProcess) -> None:
    async with http_process.client(headers={"Authorization": "Bearer s3cret-token"}) as server:
        seen = await server.call_tool("header", {"name": "Authorization"})
        assert "s3cret" not in repr(server)
    assert seen.content == "Bearer s3cret-token"


async def test_credentials_in_an_http_url_stay_out_of_repr_messages_and_logs(
    own_http_process: HTTPServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: the password and the token showed in repr, in the HTTP client's request log lines and in messages.
    password, token = "pa55-word-secret", "tok-secret-0123"
    host = f"127.0.0.1:{own_http_process.port}"
    url = f"http://alice:{password}@{host}/mcp?token={token}&v=2"
    server = MCPServerHTTP(url, connect_timeout=60)
    assert repr(server) == f"MCPServerHTTP('http://alice:***@{host}/mcp?token=***&v=***', tools=0)"
    assert server.url == f"http://alice:***@{host}/mcp?token=***&v=***"
    with caplog.at_level(logging.DEBUG):
        async with server:
            sent = await server.call_tool("header", {"name": "Authorization"})
            own_http_process.kill()
            down = await server.call_tool("echo", {"text": "x"})
        with pytest.raises(MCPConnectionError) as refused:
            async with MCPServerHTTP(f"http://bob:{password}@{host}/mcp?token={token}", connect_timeout=10):
                pass
    # The credentials went to the server as a Basic header, never in the URL.
    assert sent.content == "Basic " + base64.b64encode(f"alice:{password}".encode()).decode()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "HTTP Request: POST" in logged and "token=***" in logged  # the client's request lines, masked
    for text in (repr(server), str(down.content), str(refused.value), logged):
        assert password not in text and token not in text
