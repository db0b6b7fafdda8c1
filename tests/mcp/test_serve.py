"""``loopctl mcp serve`` in real processes, driven by the official SDK's client and by loopctl's own MCP
client: the file tools with their confinement, tools and an agent of a module (``tests/mcp/served.py``),
approvals as MCP elicitation (accepted, refused, declined, cancelled, or impossible), over stdio and
streamable HTTP, on handshake-era (2025-11-25) and 2026-07-28 sessions."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from click.testing import CliRunner
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from loopctl.cli import main
from loopctl.mcp import MCPServerHTTP, MCPServerStdio
from tests.mcp.conftest import ROOT, START_TIMEOUT, Model, calls, free_port

SERVE = [sys.executable, "-m", "loopctl", "mcp", "serve"]
MODULE = ["--agent", "tests.mcp.served:agent", "--tools", "tests.mcp.served:tools"]
FILE_TOOLS = ["list_files", "read_file", "search", "write_file", "edit_file"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\nbeta\n")
    (tmp_path / "secret.txt").write_text("outside the root\n")
    return root


def stdio_params(project: Path, *extra: str) -> StdioServerParameters:
    args = [*SERVE[1:], "--tools", "files", "--root", str(project), *MODULE, *extra]
    return StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT))


class Answers:
    """An elicitation callback that answers from a list, keeping the questions it was asked."""

    def __init__(self, *answers: mcp_types.ElicitResult) -> None:
        self.answers = list(answers)
        self.questions: list[str] = []

    async def __call__(self, context: Any, params: Any) -> mcp_types.ElicitResult:
        self.questions.append(params.message)
        assert params.requested_schema["properties"]["approve"]["type"] == "boolean"
        return self.answers.pop(0)


def accept(approve: bool = True, reason: str | None = None) -> mcp_types.ElicitResult:
    content: dict[str, Any] = {"approve": approve}
    if reason is not None:
        content["reason"] = reason
    return mcp_types.ElicitResult(action="accept", content=content)


def text(result: Any) -> str:
    return "\n".join(b.text for b in result.content if b.type == "text")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_sdk_client_over_stdio_uses_file_tools_module_tools_and_an_agent_with_approvals(
    project: Path, mode: str
) -> None:
    answers = Answers(
        accept(),  # write_file: approved
        accept(approve=False, reason="not that file"),  # write_file: refused with a reason
        mcp_types.ElicitResult(action="decline"),  # edit_file: declined
        mcp_types.ElicitResult(action="cancel"),  # delete: cancelled
        accept(),  # the agent's delete: approved
    )
    transport = stdio_client(stdio_params(project))
    async with Client(transport, mode=mode, elicitation_callback=answers, read_timeout_seconds=START_TIMEOUT) as c:
        assert c.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        listed = {t.name: t for t in (await c.list_tools()).tools}
        assert list(listed) == [*FILE_TOOLS, "shout", "delete", "helper"]
        assert listed["read_file"].annotations is not None and listed["read_file"].annotations.read_only_hint
        assert listed["write_file"].annotations is not None and listed["write_file"].annotations.destructive_hint
        assert listed["helper"].input_schema["required"] == ["input"]

        read = await c.call_tool("read_file", {"path": "notes.txt"})
        assert not read.is_error and "alpha" in text(read) and "beta" in text(read)
        outside = await c.call_tool("read_file", {"path": "../secret.txt"})
        assert outside.is_error and text(outside).startswith("Refused: '../secret.txt' is outside the project root")
        assert "outside the root" not in text(outside)

        written = await c.call_tool("write_file", {"path": "new.txt", "content": "hi\n"})
        assert not written.is_error, text(written)
        assert (project / "new.txt").read_text() == "hi\n"
        assert "write_file" in answers.questions[0] and "new.txt" in answers.questions[0]
        refused = await c.call_tool("write_file", {"path": "other.txt", "content": "no\n"})
        assert refused.is_error and text(refused) == "not that file"
        declined = await c.call_tool("edit_file", {"path": "notes.txt", "old": "alpha", "new": "gamma"})
        assert declined.is_error and text(declined) == "The user declined the call."
        cancelled = await c.call_tool("delete", {"path": "x"})
        assert cancelled.is_error and "cancelled" in text(cancelled)
        assert not (project / "other.txt").exists() and (project / "notes.txt").read_text() == "alpha\nbeta\n"

        shouted = await c.call_tool("shout", {"text": "hey"})
        assert text(shouted) == "HEY"
        bad = await c.call_tool("shout", {"txt": "hey"})
        assert bad.is_error and "text" in text(bad)

        first = await c.call_tool("helper", {"input": "delete old.log"})
        assert not first.is_error, text(first)
        assert text(first) == "done: deleted old.log"
        assert "helper wants to call delete" in answers.questions[4] and "old.log" in answers.questions[4]
        conversation = first.structured_content["conversation"]
        usage = first.meta["loopctl/usage"]
        assert (usage["input_tokens"], usage["output_tokens"]) == (20, 10)  # both model calls of the run
        assert Decimal(usage["cost"]) == Decimal("0.00004")
        again = await c.call_tool("helper", {"input": "still there?", "conversation": conversation})
        assert text(again) == "seen 2: still there?"
        fresh = await c.call_tool("helper", {"input": "hello"})
        assert text(fresh) == "seen 1: hello" and fresh.structured_content["conversation"] != conversation
    assert answers.answers == []


async def test_loopctl_own_client_uses_the_served_tools_and_cannot_approve_without_elicitation(
    project: Path,
) -> None:
    args = ["-m", "loopctl", "mcp", "serve", "--tools", "files", "--root", str(project), *MODULE]
    async with MCPServerStdio(sys.executable, args, cwd=ROOT, connect_timeout=START_TIMEOUT) as server:
        assert [t.name for t in server.tools] == [*FILE_TOOLS, "shout", "delete", "helper"]
        out = await server.call_tool("search", {"pattern": "bet"})
        assert str(out.content) == "notes.txt:2: beta"
        denied = await server.call_tool("write_file", {"path": "new.txt", "content": "x"})
        assert denied.is_error and "cannot be asked" in str(denied.content)
        assert not (project / "new.txt").exists()
        answer = await server.call_tool("helper", {"input": "hello"})
        assert str(answer.content) == "seen 1: hello"
        paused = await server.call_tool("helper", {"input": "delete a"})
        # The agent's call needs approval this client cannot give: denied, and the agent's model reads why.
        assert str(paused.content).startswith("done: The call needs approval, and the client cannot be asked")
        # Inside another agent loop: a model (the fake provider server, a real client) calls the served tools.
        script = [calls(("c1", "shout", {"text": "loud"}), ("c2", "helper", {"input": "hi"})), "All done."]
        with Model(script, [server]) as model:
            run = await model.run()
        assert run.output == "All done."
        results = {r.call.name: str(r.result.output) for r in run.turns[0].tool_calls}
        assert results == {"shout": "LOUD", "helper": "seen 1: hi"}


@pytest.fixture
def http_serve(project: Path) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [*SERVE, "--http", "--port", str(port), "--tools", "files", "--root", str(project), *MODULE],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_listening(process, port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait(10)


def _wait_listening(process: subprocess.Popen[bytes], port: int) -> None:
    import socket

    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {process.stderr.read() if process.stderr else b''!r}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the server did not start listening")


async def test_streamable_http_serves_the_sdk_client_and_loopctl_client(http_serve: str, project: Path) -> None:
    answers = Answers(accept(), mcp_types.ElicitResult(action="decline"))
    async with Client(http_serve, elicitation_callback=answers) as c:
        assert c.protocol_version == "2026-07-28"
        written = await c.call_tool("edit_file", {"path": "notes.txt", "old": "alpha", "new": "gamma"})
        assert not written.is_error, text(written)
        assert (project / "notes.txt").read_text() == "gamma\nbeta\n"
        declined = await c.call_tool("helper", {"input": "delete b"})
        assert not declined.is_error  # the model reads the denial and answers
        assert text(declined) == "done: The user declined the call."
    async with MCPServerHTTP(http_serve, connect_timeout=START_TIMEOUT) as server:
        assert str((await server.call_tool("shout", {"text": "http"})).content) == "HTTP"
        assert str((await server.call_tool("helper", {"input": "hi"})).content) == "seen 1: hi"
        assert (await server.call_tool("write_file", {"path": "z.txt", "content": "z"})).is_error
    assert not (project / "z.txt").exists()


async def test_a_legacy_http_session_asks_during_the_call(http_serve: str, project: Path) -> None:
    answers = Answers(accept())
    async with Client(http_serve, mode="legacy", elicitation_callback=answers) as c:
        written = await c.call_tool("write_file", {"path": "new.txt", "content": "legacy\n"})
        assert not written.is_error, text(written)
    assert (project / "new.txt").read_text() == "legacy\n" and len(answers.questions) == 1


def test_the_command_refuses_nothing_to_serve_and_what_is_no_agent() -> None:
    runner = CliRunner()
    nothing = runner.invoke(main, ["mcp", "serve"])
    assert nothing.exit_code == 2 and "nothing to serve" in nothing.output
    wrong = runner.invoke(main, ["mcp", "serve", "--agent", "tests.mcp.served:tools"])
    assert wrong.exit_code == 2 and "is a list, not a loopctl Agent" in wrong.output
    missing = runner.invoke(main, ["mcp", "serve", "--agent", "tests.mcp.nowhere:agent"])
    assert missing.exit_code == 2 and "cannot import 'tests.mcp.nowhere'" in missing.output
    malformed = runner.invoke(main, ["mcp", "serve", "--tools", "served"])
    assert malformed.exit_code == 2 and "must be 'files' or MODULE:ATTR" in malformed.output
    # A typo of "files" was told to be MODULE:ATTR "for example myapp.agents:support" (an agent, not tools).
    typo = runner.invoke(main, ["mcp", "serve", "--tools", "fils"])
    assert (typo.exit_code, " ".join(typo.output.split())) == (
        2,
        "error: --tools 'fils' must be 'files' or MODULE:ATTR (for example myapp.tools:search)",
    )
    agent = runner.invoke(main, ["mcp", "serve", "--agent", "support"])
    assert "error: --agent 'support' must be MODULE:ATTR (for example myapp.agents:support)" in agent.output


async def test_an_agent_whose_model_reports_no_usage_is_served_with_unknown_token_counts() -> None:
    # Before: _Spent.plus added None to an int (TypeError) once Usage told "unknown" from zero.
    from loopctl import Agent
    from loopctl.mcp.server import _Spent
    from loopctl.response import Usage
    from loopctl.testing import ScriptedClient

    unmetered = await Agent(ScriptedClient(["one"], usage=Usage())).run("hi")
    metered = await Agent(ScriptedClient(["two"], usage=Usage(input_tokens=7, output_tokens=3))).run("hi")
    spent = _Spent().plus(unmetered)
    assert spent.dump()["input_tokens"] is None and spent.dump()["output_tokens"] is None
    assert _Spent.load(spent.dump()) == spent
    both = spent.plus(metered).dump()
    assert (both["input_tokens"], both["output_tokens"], both["requests"]) == (7, 3, 2)
