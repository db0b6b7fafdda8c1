"""loopctl's MCP client against the protocol's reference "everything" server (``@modelcontextprotocol/
server-everything``, run with Node.js over stdio and streamable HTTP: ``tests/mcp/reference.py``), its tools
driven by a scripted model through a real OpenAI client and the fake provider server."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from loopctl.mcp import MCPServerHTTP, MCPServerStdio
from loopctl.message import ToolResultPart
from tests.mcp.conftest import Model, calls, stdio_server
from tests.mcp.reference import EverythingHTTP, everything_stdio


@pytest.fixture(params=["stdio", "http"])
def everything(request: pytest.FixtureRequest) -> Any:
    if request.param == "stdio":
        yield everything_stdio
        return
    with EverythingHTTP() as process:
        yield process.client


def results(model: Model, index: int) -> list[ToolResultPart]:
    assert model.loop is not None
    return list(model.loop.history[index].tool_results())


async def test_a_tool_that_requires_a_task_is_called_as_a_task(everything: Any) -> None:
    # Before: simulate-research-query (execution.taskSupport "required") was offered, and every call came back
    # "MCP error -32601: Tool simulate-research-query requires task augmentation".
    server: MCPServerStdio | MCPServerHTTP = everything(timeout=30)
    script = [calls(("r1", "simulate-research-query", {"topic": "bees"})), "done"]
    async with server:
        (tool,) = [t for t in server.tools if t.mcp_name == "simulate-research-query"]
        assert tool.as_task
        with Model(script, [server]) as model:
            run = await model.run()
    assert run.ok
    (report,) = results(model, 2)
    assert not report.is_error
    text = str(report.output)
    assert text.startswith("# Research Report: bees\n")
    assert "Stage 4: Generating report ✓" in text


async def test_a_text_resource_sent_as_a_blob_is_read_as_text(everything: Any) -> None:
    # Before: "[resource demo://resource/dynamic/blob/3 of type text/plain was left out: binary data]".
    script = [calls(("b1", "get-resource-reference", {"resourceType": "Blob", "resourceId": 3})), "done"]
    async with everything() as server:
        with Model(script, [server]) as model:
            run = await model.run()
    assert run.ok
    (result,) = results(model, 2)
    lines = str(result.output).splitlines()
    assert lines[:2] == ["Returning resource reference for Resource 3:", "[resource demo://resource/dynamic/blob/3]"]
    assert lines[2].startswith("Resource 3: This is a base64 blob created at ")


async def test_a_tool_that_requires_a_task_is_not_offered_by_a_server_without_tasks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The test server lists needs_task with taskSupport "required" but offers no tasks: the tool could never
    # be called, so the model is not offered it.
    with caplog.at_level(logging.WARNING, logger="loopctl.mcp"):
        async with stdio_server(mode="legacy") as server:
            names = [t.mcp_name for t in server.tools]
    assert "needs_task" not in names and "echo" in names
    assert [r.getMessage() for r in caplog.records if "needs_task" in r.getMessage()] == [
        "MCP server 'python server.py': tool 'needs_task' is not offered: it must be called as a task (taskSupport "
        '"required"), which this session cannot do (the server does not offer tasks for tools/call, or the '
        "protocol version has no tasks)"
    ]
