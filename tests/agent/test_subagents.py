"""Sub-agents: an agent run as another's tool, in a conversation of its own, counted in the parent's usage,
cost and limits, streamed into the parent's events with its agent path, nested in its spans, pausing the parent
for its approvals (across a process restart too), saved as its own session linked to the parent's, and
cancelled with it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopctl import Agent
from loopctl.agent import PARENT_KEY
from loopctl.engine import (
    Approve,
    Deny,
    LoopEvent,
    OutcomeKind,
    RunConfig,
    RunFinished,
    RunStarted,
    SubAgentEvent,
    ToolCallFinished,
    ToolCallStarted,
    UsageLimits,
)
from loopctl.errors import ApprovalError
from loopctl.message import Message, MessagePart, Role, TextPart, ToolResultPart
from loopctl.response import Usage
from loopctl.store import SQLiteStore
from loopctl.telemetry import OTelObserver
from loopctl.testing import Delay, ScriptedClient
from loopctl.tool import tool

ROOT = Path(__file__).resolve().parents[2]


def call(call_id: str, name: str, args: dict[str, Any]) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(call_id, name, args)])


def texts(messages: Any) -> list[str]:
    out = []
    for m in messages:
        for p in m.parts:
            if isinstance(p, TextPart):
                out.append(p.text)
            elif isinstance(p, ToolResultPart):
                out.append(f"result:{p.output}")
    return out


ran: list[str] = []


@tool
def search(query: str) -> str:
    """Search the notes."""
    ran.append(f"search {query}")
    return f"found {query}"


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    ran.append(f"delete {path}")
    return f"deleted {path}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def pair(child_script: list[Any], parent_script: list[Any], **parent_kw: Any) -> tuple[Agent, ScriptedClient, ScriptedClient]:
    child_client = ScriptedClient(child_script, usage=Usage(100, 10), price=("1", "2"))
    parent_client = ScriptedClient(parent_script, usage=Usage(10, 1), price=("1", "2"))
    researcher = Agent(child_client, tools=[search, delete], name="researcher", description="Finds things.")
    boss = Agent(parent_client, tools=[researcher], name="boss", **parent_kw)
    return boss, child_client, parent_client


async def test_a_sub_agent_runs_in_its_own_conversation_and_its_usage_and_cost_count_in_the_parents_run() -> None:
    boss, child, parent = pair(
        [call("k1", "search", {"query": "cats"}), "Cats were found."],
        [call("p1", "researcher", {"input": "look for cats"}), "The researcher found cats."],
    )
    run = await boss.run("Any cats?")
    assert run.ok and run.output == "The researcher found cats."
    # The child's conversation is its own: the task, its tool call and result, no message of the parent's.
    assert texts(child.requests[0].messages) == ["look for cats"]
    assert texts(child.requests[1].messages) == ["look for cats", "result:found cats"]
    assert "Finds things." in [t.description for t in parent.requests[0].tools]
    assert texts(parent.requests[1].messages)[-1] == "result:Cats were found."
    assert run.usage == Usage(2 * 10 + 2 * 100, 2 * 1 + 2 * 10)
    one_child, one_parent = Decimal(100 + 20) / 10**6, Decimal(10 + 2) / 10**6
    assert run.cost == 2 * one_child + 2 * one_parent
    record = run.turns[0].tool_calls[0]
    assert record.spent is not None and record.spent.requests == 2 and record.spent.tool_calls == 1


async def test_a_sub_agent_cannot_spend_past_the_parents_limit() -> None:
    boss, child, parent = pair(
        [call(f"k{i}", "search", {"query": f"q{i}"}) for i in range(10)] + ["never"],
        [call("p1", "researcher", {"input": "search a lot"}), "never"],
    )
    limits = UsageLimits(total_tokens=250)
    run = await boss.run("go", config=RunConfig(limits=limits, loop_detection=None))
    # The parent's first reply spent 11 tokens: the child may spend 239; its third reply (330 in all) is past
    # that, so it stops there; the parent, past its limit with the child's spend, makes no second call.
    assert len(child.requests) == 3
    assert len(parent.requests) == 1
    assert run.outcome.kind is OutcomeKind.LIMIT_REACHED
    assert run.outcome.limit is not None and run.outcome.limit.dimension == "total_tokens"
    assert run.usage.input_tokens + run.usage.output_tokens == 11 + 330
    result = run.turns[0].tool_calls[0].result
    assert result.is_error and "limit_reached" in str(result.output)


async def test_a_sub_agents_events_reach_the_parents_stream_and_observers_with_the_agent_path() -> None:
    seen: list[LoopEvent] = []
    boss, _, _ = pair(
        [call("k1", "search", {"query": "cats"}), "Cats."],
        [call("p1", "researcher", {"input": "cats"}), "Done."],
        observers=[seen.append],
    )
    async with boss.stream("go") as stream:
        streamed = [e async for e in stream]
    assert [type(e).__name__ for e in seen] == [type(e).__name__ for e in streamed]
    kinds = [
        (e.agent, e.call_id, type(e.event).__name__) if isinstance(e, SubAgentEvent) else type(e).__name__
        for e in streamed
        if not type(e).__name__.startswith("Model") and not (isinstance(e, SubAgentEvent) and type(e.event).__name__.startswith("Model"))
    ]
    start = kinds.index("ToolCallStarted")
    assert kinds[start : start + 9] == [
        "ToolCallStarted",
        ("boss > researcher", "p1", "RunStarted"),
        ("boss > researcher", "p1", "TurnStarted"),
        ("boss > researcher", "p1", "TurnFinished"),
        ("boss > researcher", "p1", "ToolCallStarted"),
        ("boss > researcher", "p1", "ToolCallFinished"),
        ("boss > researcher", "p1", "TurnStarted"),
        ("boss > researcher", "p1", "TurnFinished"),
        ("boss > researcher", "p1", "RunFinished"),
    ]
    assert isinstance(streamed[0], RunStarted) and streamed[0].agent == "boss"
    assert isinstance(streamed[-1], RunFinished) and streamed[-1].run.output == "Done."
    assert sum(isinstance(e, RunFinished) for e in streamed) == 1


async def test_a_sub_agents_spans_nest_under_the_parents_execute_tool_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    boss, _, _ = pair(
        [call("k1", "search", {"query": "cats"}), "Cats."],
        [call("p1", "researcher", {"input": "cats"}), "Done."],
        observers=[OTelObserver(tracer_provider=provider)],
    )
    await boss.run("go")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    parent_run, tool_span, child_run = spans["invoke_agent boss"], spans["execute_tool researcher"], spans[
        "invoke_agent researcher"
    ]
    assert tool_span.parent is not None and tool_span.parent.span_id == parent_run.context.span_id
    assert child_run.parent is not None and child_run.parent.span_id == tool_span.context.span_id
    child_tool = spans["execute_tool search"]
    assert child_tool.parent is not None and child_tool.parent.span_id == child_run.context.span_id
    assert child_run.attributes is not None and child_run.attributes["gen_ai.agent.name"] == "researcher"


async def test_a_sub_agents_approval_pauses_the_parent_and_resumes_the_child_where_it_stopped() -> None:
    boss, child, parent = pair(
        [call("k1", "delete", {"path": "/tmp/x"}), "The file is gone."],
        [call("p1", "researcher", {"input": "delete /tmp/x"}), "Cleaned up."],
    )
    conv = boss.session("ticket-1")
    paused = await conv.run("Clean up")
    assert paused.outcome.kind is OutcomeKind.AWAITING_APPROVAL
    assert [(p.id, p.agent, p.name, p.input) for p in paused.pending_approvals] == [
        ("p1/k1", "boss > researcher", "delete", {"path": "/tmp/x"})
    ]
    assert paused.usage == Usage(10 + 100, 1 + 10)  # what both spent before the pause
    assert [p.id for p in await conv.pending_approvals()] == ["p1/k1"]
    with pytest.raises(ApprovalError, match="p1/k2"):
        await conv.run(approvals={"p1/k2": Approve()})
    with pytest.raises(ApprovalError, match="no sub-agent"):
        await conv.run(approvals={"zz/k1": Approve()})
    run = await conv.run(approvals={"p1/k1": Approve()})
    assert run.ok and run.output == "Cleaned up."
    assert ran == ["delete /tmp/x"]  # the child's tool ran once
    assert (len(child.requests), len(parent.requests)) == (2, 2)  # no model call repeated
    assert texts(child.requests[1].messages) == ["delete /tmp/x", "result:deleted /tmp/x"]


async def test_a_denied_sub_agent_call_reaches_the_child_as_a_denial() -> None:
    boss, child, _ = pair(
        [call("k1", "delete", {"path": "/"}), "I may not delete it."],
        [call("p1", "researcher", {"input": "delete /"}), "The researcher was not allowed."],
    )
    conv = boss.session("t2")
    await conv.run("Clean up")
    run = await conv.run(approvals={"p1/k1": Deny("not the root folder")})
    assert run.output == "The researcher was not allowed."
    assert ran == []
    assert texts(child.requests[1].messages)[-1] == "result:not the root folder"


def _worker(*args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.agent.subagent_worker", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_a_sub_agents_approval_survives_a_process_restart_with_sqlite_the_child_tool_running_once(
    tmp_path: Path,
) -> None:
    store, log = tmp_path / "s.db", tmp_path / "log.txt"
    first = _worker("start", str(store), "ticket-9", str(log))
    assert first["outcome"] == "awaiting_approval"
    assert first["pending"] == [["p1/k1", "boss > researcher", "delete"]]
    second = _worker("approve", str(store), "ticket-9", str(log), "p1/k1")
    assert (second["outcome"], second["output"]) == ("completed", "Cleaned up: the file is gone.")
    assert log.read_text().splitlines() == [
        "model boss Clean up /tmp/x",
        "model researcher delete /tmp/x",
        "delete /tmp/x",
        "model researcher deleted /tmp/x",
        "model boss The file is gone.",
    ]
    with SQLiteStore(store) as s:
        child = s.load("ticket-9/p1")
        assert child.state.metadata[PARENT_KEY] == {"session": "ticket-9", "call": "p1", "agent": "researcher"}
        assert texts(child.messages) == ["delete /tmp/x", "result:deleted /tmp/x", "The file is gone."]
    shown = subprocess.run(
        [sys.executable, "-m", "loopctl", "sessions", "--store", str(store), "show", "ticket-9/p1"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "sub-agent researcher of session ticket-9 (call p1)" in shown.stdout
    assert "The file is gone." in shown.stdout


async def test_a_cancelled_parent_cancels_the_child_and_keeps_what_both_finished(tmp_path: Path) -> None:
    started = asyncio.Event()

    @tool
    async def slow(what: str) -> str:
        """Takes long."""
        started.set()
        await asyncio.sleep(30)
        return "never"

    child_client = ScriptedClient(
        [call("k1", "search", {"query": "a"}), call("k2", "slow", {"what": "b"}), "never"], usage=Usage(100, 10)
    )
    researcher = Agent(child_client, tools=[search, slow], name="researcher")
    boss = Agent(ScriptedClient([call("p1", "researcher", {"input": "work"}), "never"]), tools=[researcher], name="boss")
    with SQLiteStore(tmp_path / "c.db") as store:
        conv = boss.session("job", store=store)
        async with conv.stream("go") as stream:
            await started.wait()
            stream.cancel()
            run = await stream.result()
        assert run.outcome.kind is OutcomeKind.CANCELLED
        assert ran == ["search a"]
        child = store.load("job/p1")
        # The child kept its finished turn (the search and its result); the slow call was cut off.
        assert texts(child.messages)[:2] == ["work", "result:found a"]
        assert child.state.outcome == "cancelled"
        assert texts(store.load("job").messages)[0] == "go"


async def test_a_plain_agent_in_tools_and_as_tool_with_a_name() -> None:
    child = Agent(ScriptedClient(["42"]), name="calc helper", description="Does sums.")
    boss = Agent(
        ScriptedClient([call("p1", "sums", {"input": "6*7"}), "It is 42."]),
        tools=[child.as_tool(name="sums", description="Sums, done right.")],
    )
    run = await boss.run("6*7?")
    assert run.output == "It is 42."
    auto = Agent(ScriptedClient([]), tools=[child])
    assert [t.name for t in auto.tool_list] == ["calc_helper"]


async def test_a_sub_agent_called_from_a_bare_loop_runs_in_a_fresh_conversation() -> None:
    from loopctl.engine import BareLoop

    child = Agent(ScriptedClient(["first", "second"]), name="helper")
    loop = BareLoop(
        ScriptedClient([call("a", "helper", {"input": "x"}), call("b", "helper", {"input": "y"}), "done"]),
        [child.as_tool()],
    )
    run = await loop.run("go")
    assert run.ok
    assert [str(r.result.output) for t in run.turns for r in t.tool_calls] == ["first", "second"]


async def test_a_sub_agents_typed_output_reaches_the_parent_as_json() -> None:
    from pydantic import BaseModel

    class Found(BaseModel):
        count: int

    child = Agent(ScriptedClient([call("o", "final_result", {"count": 3})]), name="counter", output_type=Found)
    boss = Agent(ScriptedClient([call("p1", "counter", {"input": "count"}), "Three."]), tools=[child])
    run = await boss.run("how many?")
    assert str(run.turns[0].tool_calls[0].result.output) == '{"count":3}'


async def test_parallel_sub_agents_each_keep_their_own_conversation() -> None:
    a = Agent(ScriptedClient([Delay(0.05, "from a")]), name="a")
    b = Agent(ScriptedClient(["from b"]), name="b")
    reply = Message.new(
        Role.ASSISTANT,
        [MessagePart.tool_call("x1", "a", {"input": "task a"}), MessagePart.tool_call("x2", "b", {"input": "task b"})],
    )
    seen: list[LoopEvent] = []
    boss = Agent(ScriptedClient([reply, "both"]), tools=[a, b], name="boss", observers=[seen.append])
    run = await boss.run("go")
    assert [str(r.result.output) for r in run.turns[0].tool_calls] == ["from a", "from b"]
    starts = [(e.agent, e.call_id) for e in seen if isinstance(e, SubAgentEvent) and isinstance(e.event, RunStarted)]
    assert sorted(starts) == [("boss > a", "x1"), ("boss > b", "x2")]
    finished = [e for e in seen if isinstance(e, ToolCallFinished)]
    assert [e.call.id for e in finished] == ["x2", "x1"]  # b answered first; each result its own
    assert not any(isinstance(e, ToolCallStarted) and e.call.name not in ("a", "b") for e in seen)


async def test_a_sub_agent_run_by_a_plain_loop_that_needs_approval_says_so_instead_of_pausing() -> None:
    from loopctl.engine import BareLoop

    child = Agent(ScriptedClient([call("k1", "delete", {"path": "/x"})]), tools=[delete], name="cleaner")
    loop = BareLoop(ScriptedClient([call("p1", "cleaner", {"input": "delete /x"}), "I could not."]), [child.as_tool()])
    run = await loop.run("clean")
    assert run.ok and ran == []
    result = run.turns[0].tool_calls[0].result
    assert result.is_error and "needs approval of delete" in str(result.output)


async def test_a_sub_agents_session_has_a_usable_id_under_a_long_session_id_or_an_odd_call_id(tmp_path: Path) -> None:
    # <session id>/<call id> past 200 characters (a long session id with Anthropic's call id after it, sub-agents
    # nested deep), or holding a control character, was no session id: every call of the sub-agent failed with
    # "Tool 'researcher' failed: ValueError: invalid session id ...".
    long_id, long_call = "u" * 180, "toolu_01A09q90qw90lq917835lq9"
    boss, _, _ = pair(
        [call("k1", "delete", {"path": "/tmp/x"}), "Deleted.", "Found."],
        [call(long_call, "researcher", {"input": "delete /tmp/x"}), "Cleaned up.", call("c\n1", "researcher", {"input": "find"}), "Done."],
    )  # fmt: skip
    with SQLiteStore(tmp_path / "ids.db") as store:
        conv = boss.session(long_id, store=store)
        paused = await conv.run("Clean up")
        assert [p.id for p in paused.pending_approvals] == [f"{long_call}/k1"]
        run = await conv.run(approvals={f"{long_call}/k1": Approve()})  # the paused child found again
        assert (run.output, ran) == ("Cleaned up.", ["delete /tmp/x"])
        again = await conv.run("Find")
        assert again.output == "Done." and not again.turns[0].tool_calls[0].result.is_error
        children = [(i.id, store.load(i.id)) for i in store.sessions() if i.id != long_id]
        children.sort(key=lambda child: str(child[1].state.metadata[PARENT_KEY]["call"]))
        assert [(len(sid), c.state.metadata[PARENT_KEY]["call"], texts(c.messages)) for sid, c in children] == [
            (200, "c\n1", ["find", "Found."]),
            (200, long_call, ["delete /tmp/x", "result:deleted /tmp/x", "Deleted."]),
        ]
        assert all(sid.startswith(long_id[:160]) and "~" in sid for sid, _ in children)  # readable, then a digest


async def test_an_in_memory_conversation_keeps_only_its_paused_sub_agents() -> None:
    # Each call of a sub-agent made a conversation the parent's in-memory conversation kept for good (with all
    # its messages): a long chat leaked one per call. Only a paused one can be continued, so only those stay.
    script = [call(f"p{i}", "researcher", {"input": f"look {i}"}) for i in range(3)]
    boss, _, _ = pair(
        ["Found 0.", "Found 1.", "Found 2.", call("k1", "delete", {"path": "/tmp/x"}), "Deleted."],
        [script[0], "ok 0", script[1], "ok 1", script[2], "ok 2", call("p3", "researcher", {"input": "rm"}), "Gone."],
    )
    conv = boss.session("chat")
    for i in range(3):
        assert (await conv.run(f"q{i}")).output == f"ok {i}"
    assert conv._children == {}
    paused = await conv.run("Delete /tmp/x")
    assert [p.id for p in paused.pending_approvals] == ["p3/k1"] and list(conv._children) == ["p3"]
    done = await conv.run(approvals={"p3/k1": Approve()})
    assert (done.output, ran, conv._children) == ("Gone.", ["delete /tmp/x"], {})


async def test_a_loop_run_inside_a_tool_of_the_agent_keeps_its_sub_agents_to_itself(tmp_path: Path) -> None:
    # A tool of an agent with sub-agents inherits the agent's scope: a plain BareLoop it ran took the agent's
    # conversation for its own sub-agent's (a session "<session>/p1" linked to the agent's call p1, which ran
    # the tool; its events in the agent's stream as "boss > helper" of call p1).
    from loopctl.engine import BareLoop

    helper_client = ScriptedClient(["helper answer"])
    helper = Agent(helper_client, name="helper", description="Helps.")

    @tool
    async def summarize(text: str) -> str:
        """Summarize, with a loop of its own."""
        inner = BareLoop(ScriptedClient([call("p1", "helper", {"input": text}), "summary"]), [helper.as_tool()])
        return (await inner.run("summarize")).output

    researcher = Agent(ScriptedClient([]), name="researcher", description="Finds things.")
    boss = Agent(
        ScriptedClient([call("p1", "summarize", {"text": "notes"}), "Done."]), tools=[summarize, researcher], name="boss"
    )
    with SQLiteStore(tmp_path / "scope.db") as store:
        conv = boss.session("s", store=store)
        async with conv.stream("go") as stream:
            events = [e async for e in stream]
            run = await stream.result()
        assert (run.output, str(run.turns[0].tool_calls[0].result.output)) == ("Done.", "summary")
        assert [e for e in events if isinstance(e, SubAgentEvent)] == []
        assert [i.id for i in store.sessions()] == ["s"]
        assert texts(helper_client.requests[0].messages) == ["notes"]
