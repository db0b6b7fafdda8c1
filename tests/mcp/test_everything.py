"""loopctl's MCP client against the protocol's reference "everything" server (``@modelcontextprotocol/
server-everything``, run with Node.js over stdio and streamable HTTP: ``tests/mcp/reference.py``), its tools
driven by a scripted model through a real OpenAI client and the fake provider server."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopctl.engine import BareLoop, SessionConfig, ToolProgress
from loopctl.mcp import (
    Accept,
    Cancel,
    Decline,
    Elicitation,
    ElicitationAnswer,
    MCPRequestError,
    MCPResourceTool,
    MCPServerHTTP,
    MCPServerStdio,
    Root,
    mcp_instructions,
)
from loopctl.mcp.resources import resource_output
from loopctl.message import ImagePart, Message, Role, ToolResultPart
from loopctl.testing import FakeProviderServer
from tests.fake_clients import make_client
from tests.mcp.conftest import Model, calls, stdio_server
from tests.mcp.reference import EVERYTHING, EverythingHTTP, everything_stdio, node


@pytest.fixture(scope="module")
def everything_http() -> Iterator[EverythingHTTP]:
    """One HTTP server process for the module (each test opens sessions of its own on it)."""
    with EverythingHTTP() as process:
        yield process


@pytest.fixture(params=["stdio", "http"])
def everything(request: pytest.FixtureRequest) -> Any:
    if request.param == "stdio":
        return everything_stdio
    process: EverythingHTTP = request.getfixturevalue("everything_http")
    return process.client


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


# --- every tool, in an agent loop ------------------------------------------------------------------------------

PLAIN = base64.b64encode(b"hello, gzip").decode()
EVERY_TOOL: list[tuple[str, dict[str, Any]]] = [
    ("echo", {"message": "hello"}),
    ("get-annotated-message", {"messageType": "success", "includeImage": True}),
    ("get-env", {}),
    ("get-resource-links", {"count": 2}),
    ("get-resource-reference", {"resourceType": "Text", "resourceId": 2}),
    ("get-structured-content", {"location": "New York"}),
    ("get-sum", {"a": 2, "b": 3}),
    ("get-tiny-image", {}),
    ("gzip-file-as-resource", {"name": "hello.gz", "data": f"data:text/plain;base64,{PLAIN}", "outputType": "resource"}),
    ("toggle-simulated-logging", {}),
    ("toggle-subscriber-updates", {}),
    ("trigger-long-running-operation", {"duration": 1, "steps": 2}),
    ("get-roots-list", {}),
    ("trigger-elicitation-request", {}),
    ("trigger-url-elicitation", {"url": "https://example.com/consent"}),
    ("trigger-sampling-request", {"prompt": "ping", "maxTokens": 20}),
    ("simulate-research-query", {"topic": "bees"}),
]


async def test_every_tool_of_the_everything_server_runs_in_a_model_loop(
    everything: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sampling answered by the host's model (a real client against a second fake provider server), elicitation
    # answered by the application, the run's root advertised; every tool the server offers such a client, one
    # call per model turn.
    monkeypatch.setenv("LOOPCTL_TEST_SECRET", "must-not-leak")
    asked: list[Elicitation] = []

    async def elicit(request: Elicitation) -> Accept:
        asked.append(request)
        return Accept({"name": "Ada", "check": True, "integer": 7} if request.mode == "form" else {})

    events: list[Any] = []
    with FakeProviderServer(["pong"]) as host:
        sampler = make_client("openai", host)
        server = everything(sampling=sampler, elicitation=elicit, roots=[tmp_path], timeout=30)
        script = [calls((f"c{i}", name, args)) for i, (name, args) in enumerate(EVERY_TOOL)] + ["all done"]
        async with server:
            offered = {t.mcp_name for t in server.tools}
            with Model(script, [server]) as model:
                run = await model.run(observers=[events.append])
        await sampler.aclose()
    # The client features made the server offer the tools that need them (the two "-async" tools need the
    # client to run sampling and elicitation as tasks, which the SDK's client does not do).
    assert offered == {name for name, _ in EVERY_TOOL}
    assert run.ok and run.output == "all done"
    assert model.loop is not None
    out: dict[str, ToolResultPart] = {}
    for message in model.loop.history:
        for result in message.tool_results():
            out[result.name] = result
    assert [n for n, r in out.items() if r.is_error] == []
    text = {name: str(r.output) for name, r in out.items()}
    assert text["echo"] == "Echo: hello"
    assert text["get-sum"] == "The sum of 2 and 3 is 5."
    assert "Operation completed successfully" in text["get-annotated-message"]
    assert any(isinstance(p, ImagePart) for p in out["get-annotated-message"].output.parts)
    assert any(isinstance(p, ImagePart) for p in out["get-tiny-image"].output.parts)
    env = json.loads(text["get-env"])
    assert "PATH" in env and "LOOPCTL_TEST_SECRET" not in env  # the SDK's safe environment only
    assert text["get-resource-links"].count("[resource link: ") == 2
    assert "[resource demo://resource/dynamic/text/2]\nResource 2: This is a plaintext resource" in text["get-resource-reference"]
    assert set(json.loads(text["get-structured-content"])) == {"temperature", "conditions", "humidity"}
    assert "of type application/gzip was left out: binary data" in text["gzip-file-as-resource"]
    assert text["trigger-long-running-operation"] == "Long running operation completed. Duration: 1 seconds, Steps: 2."
    assert f"URI: {tmp_path.as_uri()}" in text["get-roots-list"]
    assert "- Name: Ada" in text["trigger-elicitation-request"] and "- Favorite Integer: 7" in text["trigger-elicitation-request"]
    assert "User completed the URL elicitation flow" in text["trigger-url-elicitation"]
    assert '"text": "pong"' in text["trigger-sampling-request"]
    assert text["simulate-research-query"].startswith("# Research Report: bees")
    # The two elicitations reached the application with the server's words; the sampling call counted in the run.
    assert [(a.mode, a.url) for a in asked] == [("form", None), ("url", "https://example.com/consent")]
    assert asked[0].message == "Please provide inputs for the following fields:"
    assert asked[0].tool_call_id == "c13"
    (sampled,) = host.requests
    assert sampled.body["messages"][0] == {"role": "system", "content": "You are a helpful test server."}
    spent = run.usage.input_tokens or 0
    assert spent > sum(t.usage.input_tokens or 0 for t in run.turns)
    # Progress: the long operation's notifications and the research task's status messages, as events.
    progress = [(e.call.name, e.progress, e.total) for e in events if isinstance(e, ToolProgress)]
    assert ("trigger-long-running-operation", 1.0, 2.0) in progress and ("trigger-long-running-operation", 2.0, 2.0) in progress
    research = [e.message for e in events if isinstance(e, ToolProgress) and e.call.name == "simulate-research-query"]
    # Task status is polled (tasks/get): a slow poll may miss a stage, never reorder them.
    stages = ["Gathering sources...", "Analyzing content...", "Synthesizing findings...", "Generating report..."]
    assert research and set(research) <= set(stages) and research == sorted(research, key=stages.index)


# --- elicitation -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "shown"),
    [
        (Decline(), "❌ User declined to provide the requested information."),
        (Cancel(), "⚠️ User cancelled the elicitation dialog."),
        # An answer that does not fit the form (name is required) is not sent: declined.
        (Accept({"check": True}), "❌ User declined to provide the requested information."),
        (Accept({"name": "Ada", "integer": 500}), "❌ User declined to provide the requested information."),
    ],
)
async def test_a_form_can_be_declined_or_cancelled_and_a_bad_answer_is_not_sent(
    answer: ElicitationAnswer, shown: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def elicit(request: Elicitation) -> ElicitationAnswer:
        return answer

    with caplog.at_level(logging.WARNING, logger="loopctl.mcp"):
        async with everything_stdio(elicitation=elicit) as server:
            out = await server.call_tool("trigger-elicitation-request", {})
    assert str(out.content).splitlines()[0] == shown
    if isinstance(answer, Accept):
        (warning,) = [r.getMessage() for r in caplog.records if "does not fit the form" in r.getMessage()]
        assert ("name" in warning) if "name" not in answer.content else ("integer: 500 is greater than the maximum of 100" in warning)


async def test_a_url_elicitation_the_server_requires_first_is_asked_then_the_call_sent_again() -> None:
    # The -32042 error path: the server answers the call with the URL elicitations to complete first.
    asked: list[Elicitation] = []

    async def elicit(request: Elicitation) -> ElicitationAnswer:
        asked.append(request)
        return Accept()

    async with everything_stdio(elicitation=elicit) as server:
        out = await server.call_tool("trigger-url-elicitation", {"url": "https://example.com/pay", "errorPath": True})
    assert not out.is_error and "User completed the URL elicitation flow" in str(out.content)
    assert [(a.mode, a.url) for a in asked] == [("url", "https://modelcontextprotocol.io"), ("url", "https://example.com/pay")]
    assert asked[0].message == "Open this link to satisfy the prerequisite, then retry the request."

    async def refuse(request: Elicitation) -> ElicitationAnswer:
        return Decline()

    async with everything_stdio(elicitation=refuse) as server:
        refused = await server.call_tool("trigger-url-elicitation", {"url": "https://example.com/pay", "errorPath": True})
    assert refused.is_error
    assert str(refused.content) == (
        "MCP server 'everything' needs the user to complete a step in the browser first "
        "(MCP error -32042: This request requires browser-based authorization.); the user did not accept."
    )


# --- roots, logs, progress ----------------------------------------------------------------------------------------


async def test_roots_are_advertised_and_a_change_is_announced(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    async with everything_stdio(roots=[first]) as server:
        before = str((await server.call_tool("get-roots-list", {})).content)
        await server.set_roots([first, Root("file:///srv/data", "data")])
        for _ in range(100):  # the server lists the roots again when told they changed
            after = str((await server.call_tool("get-roots-list", {})).content)
            if "(2 total)" in after:
                break
            await asyncio.sleep(0.05)
    assert "Current MCP Roots (1 total)" in before and f"1. a\n   URI: {first.as_uri()}" in before
    assert f"1. a\n   URI: {first.as_uri()}" in after and "2. data\n   URI: file:///srv/data" in after
    assert second.as_uri() not in after


async def test_server_logs_go_to_python_logging_at_their_level(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="loopctl.mcp.server"):
        async with everything_stdio(roots=["/tmp"], log_level="debug") as server:
            for _ in range(100):
                if any("Roots updated" in r.getMessage() for r in caplog.records):
                    break
                await asyncio.sleep(0.05)
            await server.call_tool("toggle-simulated-logging", {})
    (roots,) = [r for r in caplog.records if "Roots updated" in r.getMessage()]
    assert (roots.name, roots.levelname, roots.getMessage()) == (
        "loopctl.mcp.server.everything",
        "INFO",
        "[everything-server] Roots updated: 1 root(s) received from client",
    )
    simulated = [r for r in caplog.records if r.getMessage().endswith(("-level message", "level-message"))]
    assert simulated, "the first simulated log line is sent at once"
    levels = {"Debug": "DEBUG", "Info": "INFO", "Notice": "NOTICE", "Warning": "WARNING", "Error": "ERROR",
              "Critical": "CRITICAL", "Alert": "ALERT", "Emergency": "EMERGENCY"}  # fmt: skip
    for record in simulated:
        assert record.levelname == levels[record.getMessage().split("-")[0].split(" ")[0]]


async def test_the_log_level_asks_the_server_for_fewer_logs(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="loopctl.mcp.server"):
        async with everything_stdio(roots=["/tmp"], log_level="error") as server:
            await asyncio.sleep(1.0)  # the roots are synced 350 ms after the handshake, logged at info
            await server.call_tool("get-roots-list", {})
    assert not [r for r in caplog.records if r.levelno < logging.ERROR]


async def test_progress_can_restart_a_calls_timeout() -> None:
    # Four steps of 0.5 s: the call takes 2 s, more than the 1.2 s timeout, but a notification comes every 0.5 s.
    args = {"duration": 2, "steps": 4}
    async with everything_stdio(timeout=1.2) as server:
        cut = await server.call_tool("trigger-long-running-operation", args)
    async with everything_stdio(timeout=1.2, progress_resets_timeout=True) as server:
        kept = await server.call_tool("trigger-long-running-operation", args)
    assert cut.is_error and "timed out after 1.2 s" in str(cut.content)
    assert (kept.content, kept.is_error) == ("Long running operation completed. Duration: 2 seconds, Steps: 4.", False)


# --- resources, prompts, instructions ----------------------------------------------------------------------------


async def test_resources_templates_reading_and_subscriptions(everything: Any) -> None:
    async with everything() as server:
        listed = await server.list_resources()
        templates = await server.list_resource_templates()
        text = await server.read_resource("demo://resource/dynamic/text/4")
        blob = await server.read_resource("demo://resource/dynamic/blob/4")
        document = await server.read_resource("demo://resource/static/document/features.md")
        with pytest.raises(MCPRequestError, match=r"^MCP server 'everything': reading 'demo://nope' failed: ") as bad:
            await server.read_resource("demo://nope")
        updates: list[str] = []
        updated = asyncio.Event()

        def on_update(uri: str) -> None:
            updates.append(uri)
            updated.set()

        await server.subscribe_resource("demo://resource/dynamic/text/1", on_update)
        await server.call_tool("toggle-subscriber-updates", {})
        await asyncio.wait_for(updated.wait(), 10)  # the server sends updates every 5 s, the first at once
        await server.unsubscribe_resource("demo://resource/dynamic/text/1")
    assert "demo://resource/static/document/features.md" in [str(r.uri) for r in listed]
    assert [t.uri_template for t in templates] == ["demo://resource/dynamic/text/{resourceId}", "demo://resource/dynamic/blob/{resourceId}"]
    assert str(resource_output(text).content).startswith("[resource demo://resource/dynamic/text/4]\nResource 4: This is a plaintext")
    assert str(resource_output(blob).content).startswith("[resource demo://resource/dynamic/blob/4]\nResource 4: This is a base64 blob")
    assert "# Everything Server - Features" in str(resource_output(document).content)
    assert bad.value.code is not None
    assert updates[:1] == ["demo://resource/dynamic/text/1"]


async def test_the_model_reads_resources_through_the_opt_in_tool() -> None:
    allowed = "demo://resource/static/document/"
    script = [
        calls(("r1", "read_resource", {"uri": f"{allowed}instructions.md"}), ("r2", "read_resource", {"uri": "demo://resource/dynamic/text/1"})),
        "read",
    ]
    async with everything_stdio(resource_tool=lambda uri: uri.startswith(allowed)) as server:
        (tool,) = [t for t in server.tools if isinstance(t, MCPResourceTool)]
        with Model(script, [server]) as model:
            run = await model.run()
    assert run.ok
    assert tool.name == "read_resource" and f"- {allowed}features.md" in tool.description
    ok, refused = results(model, 2)
    assert not ok.is_error and "Server Instructions" in str(ok.output)
    assert (str(refused.output), refused.is_error) == ("reading 'demo://resource/dynamic/text/1' is not allowed", True)
    offered = [t["function"]["name"] for t in model.server.requests[0].body["tools"]]
    assert offered[-1] == "read_resource"


async def test_prompts_become_loopctl_messages() -> None:
    async with everything_stdio() as server:
        names = [p.name for p in await server.list_prompts()]
        simple = await server.get_prompt("simple-prompt")
        args = await server.get_prompt("args-prompt", {"city": "Paris", "state": "Texas"})
        embedded = await server.get_prompt("resource-prompt", {"resourceType": "Text", "resourceId": "3"})
        with pytest.raises(MCPRequestError):
            await server.get_prompt("no-such-prompt")
    assert names == ["simple-prompt", "args-prompt", "completable-prompt", "resource-prompt"]
    assert simple.messages == (Message.user("This is a simple prompt without arguments."),)
    assert args.messages == (Message.user("What's weather in Paris, Texas?"),)
    roles = [m.role for m in embedded.messages]
    assert roles == [Role.USER, Role.USER]
    assert embedded.messages[1].text_content().startswith("[resource demo://resource/dynamic/text/3]\nResource 3:")


async def test_server_instructions_join_the_system_prompt_only_when_asked() -> None:
    async with everything_stdio(include_instructions=True) as kept, everything_stdio(name="other") as left:
        text = mcp_instructions(kept, left)
        assert left.instructions is not None  # it has some too, but was not asked to share them
    assert text.startswith('Instructions from the MCP server "everything":\n# Everything Server')
    assert 'MCP server "other"' not in text
    async with everything_stdio(include_instructions=True) as server:
        with Model(["hi"], [server]) as model:
            model.loop = BareLoop(
                make_client("openai", model.server), [server], SessionConfig(instructions=lambda ctx: mcp_instructions(server))
            )
            await model.loop.run("hello")
            await model.loop.client.aclose()
    system = model.server.requests[0].body["messages"][0]
    assert system["role"] == "system" and "# Everything Server" in system["content"]


# --- the CLI: --root as the servers' root, their questions asked on the terminal ---------------------------------


class Terminal:
    """A user at the terminal: answers a field whose title is a key of ``answers`` (or a choice prompt that
    starts with a ``[`` key); an unmatched prompt gets its default, as pressing Enter does. Keeps what was
    shown."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.shown: list[str] = []

    def prompt(self, text: str, type: Any = None, default: Any = None, show_default: bool = True) -> Any:
        self.shown.append(text)
        label = re.sub(r" \[[^\]]*\]$", "", text.strip()).removesuffix(" (optional)")  # the shown default
        for key, value in self.answers.items():
            if label == key or (key.startswith("[") and label.startswith(key)):
                return value
        return default

    def echo(self, text: str) -> None:
        self.shown.append(text)


async def test_the_cli_advertises_its_root_and_asks_the_servers_questions_on_the_terminal(tmp_path: Path) -> None:
    from contextlib import AsyncExitStack

    from loopctl.cli.integrations import TerminalElicitation, open_integrations

    user = Terminal({"[a]nswer": "a", "[a]ccept": "a", "String": "Ada", "Boolean": True, "Integer": "7"})
    asking = TerminalElicitation(interactive=True, prompt=user.prompt, echo=user.echo)
    command = f"{node()} {EVERYTHING} stdio"
    with FakeProviderServer(["pong"]) as host:
        model = make_client("openai", host)  # the run's own model client
        async with AsyncExitStack() as stack:
            (server,), _ = await open_integrations(
                stack, otel=False, mcp_commands=[command], mcp_urls=[], taken=set(), roots=[tmp_path],
                elicitation=asking, sampling=model,
            )  # fmt: skip
            roots = await server.call_tool("get-roots-list", {})
            form = await server.call_tool("trigger-elicitation-request", {})
            page = await server.call_tool("trigger-url-elicitation", {"url": "https://example.com/consent"})
            sampled = await server.call_tool("trigger-sampling-request", {"prompt": "ping", "maxTokens": 20})
        await model.aclose()
    assert '"text": "pong"' in str(sampled.content) and len(host.requests) == 1
    assert tmp_path.as_uri() in str(roots.content)
    assert not form.is_error and "- Name: Ada\n- Agreed to terms: true" in str(form.content)
    assert "- Favorite Integer: 7\n- Favorite Number: 3.14" in str(form.content)  # a default, as typed
    assert '"untitledMultipleSelectEnum": [\n      "Guitar"\n    ]' in str(form.content)
    assert not page.is_error
    assert "  page to open: https://example.com/consent" in user.shown
    assert "  one of: Monica (Monica), Rachel (Rachel), Joey (Joey), Chandler (Chandler), Ross (Ross), Phoebe (Phoebe)" in user.shown


async def test_the_terminal_shows_the_servers_words_inert_asks_again_and_declines_without_a_terminal() -> None:
    from loopctl.cli.integrations import TerminalElicitation

    schema = {"type": "object", "properties": {"age": {"type": "integer", "title": "Age\x1b[2J"}}, "required": ["age"]}
    asked = Elicitation("evil\x1b]0;x\x07", "form", "Hi\x1b[31m red\nsecond line", schema)
    answers = iter(["a", "old", "a", "41"])
    shown: list[str] = []
    asking = TerminalElicitation(interactive=True, prompt=lambda *a, **k: next(answers), echo=shown.append)
    assert await asking(asked) == Accept({"age": 41})
    assert shown[:3] == ["? MCP server evil\\x1b]0;x\\x07 asks:", "  Hi\\x1b[31m red", "  second line"]
    assert "  not accepted: age: 'old' is not of type 'integer'" in shown
    assert all("\x1b" not in line for line in shown)
    declines = iter(["d"])
    assert await TerminalElicitation(interactive=True, prompt=lambda *a, **k: next(declines), echo=shown.append)(asked) == Decline()
    cancels = iter(["c"])
    assert await TerminalElicitation(interactive=True, prompt=lambda *a, **k: next(cancels), echo=shown.append)(asked) == Cancel()
    quiet: list[str] = []
    assert await TerminalElicitation(interactive=False, echo=quiet.append)(asked) == Decline()
    assert quiet == ["MCP server evil\\x1b]0;x\\x07 asked the user something; declined (stdin is not a terminal)"]


async def test_a_call_waits_for_the_user_without_its_timeout() -> None:
    # Before: a user who took longer than the call's timeout to answer lost the call ("timed out after 2 s").
    async def slow_user(request: Elicitation) -> Accept:
        await asyncio.sleep(2.5)  # a person reading the form
        return Accept({"name": "Ada"})

    async with everything_stdio(elicitation=slow_user, timeout=2) as server:
        result = await server.call_tool("trigger-elicitation-request", {})
    assert not result.is_error and "- Name: Ada" in str(result.content)
