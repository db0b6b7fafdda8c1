"""MCP servers end to end: the test server (``tests/mcp/server.py``) run as a real subprocess over stdio and as
a real streamable-HTTP server process on 127.0.0.1, its tools driven by a scripted model through a real
OpenAI client and the fake provider server (``docs/mcp.md``)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from loopctl.mcp import MCPConnectionError, MCPServerHTTP, MCPServerStdio
from loopctl.message import ImagePart, Retention, ToolResultPart
from loopctl.tool import tool
from tests.mcp.conftest import HTTPServerProcess, Model, calls, stdio_server

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
MCP_TOOLS = ["add", "echo", "picture", "fail", "hang", "crash", "pid", "slow", "header", "grow"]


@tool
def local(text: str) -> str:
    """A plain loopctl tool next to the MCP ones."""
    return f"local {text}"


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
    script = [calls(*((f"s{i}", "slow", {"ms": 1500, "tag": f"s{i}"}) for i in range(4))), "ok"]
    async with stdio_server() as server:
        with Model(script, [server]) as model:
            started = time.perf_counter()
            run = await model.run()
            elapsed = time.perf_counter() - started
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
