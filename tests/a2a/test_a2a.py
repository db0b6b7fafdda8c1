"""A2A round trips against ``loopctl a2a serve`` in a real process (``tests/a2a/conftest.py``): the
``a2a-sdk``'s own client calling a loopctl agent (streamed and not, a context as a conversation, an approval
through ``input-required``, a task cancelled), and a loopctl agent calling it as a sub-agent
(:class:`loopctl.a2a.A2AAgent`: usage and cost counted, approvals listed and given as for a local sub-agent,
a cancelled call cancelling the remote task)."""

from __future__ import annotations

import asyncio
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import get_artifact_text, get_data_parts, get_text_parts
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from google.protobuf import json_format, struct_pb2

from loopctl import Agent
from loopctl.a2a import A2AAgent
from loopctl.engine import Approve, Deny, RunConfig
from loopctl.engine.machine import OutcomeKind
from loopctl.message import Message as LoopMessage
from loopctl.message import MessagePart
from loopctl.message import Role as LoopRole
from loopctl.response import Usage
from loopctl.store import SQLiteStore
from loopctl.testing import ScriptedClient

COMPLETED, INPUT_REQUIRED, CANCELED = (
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_CANCELED,
)


def message(*parts: Part, context: str, task: str | None = None) -> SendMessageRequest:
    made = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=list(parts), context_id=context)
    if task is not None:
        made.task_id = task
    return SendMessageRequest(message=made)


def data(value: Any) -> Part:
    out = struct_pb2.Value()
    json_format.ParseDict(value, out)
    return Part(data=out)


async def collect(client: Any, request: SendMessageRequest) -> tuple[list[str], list[Any]]:
    """The kinds of the events a send yields, and the events."""
    events = [e async for e in client.send_message(request)]
    return [e.WhichOneof("payload") for e in events], events


def final(events: list[Any]) -> Any:
    """The task's last state in a send's events: its last status update, or the task the send ended with."""
    last = events[-1]
    return last.status_update if last.WhichOneof("payload") == "status_update" else last.task


def usage_of(event: Any) -> dict[str, Any]:
    return json_format.MessageToDict(event.status_update.metadata)["loopctl/usage"]


async def test_the_sdk_client_streams_a_task_and_a_context_is_a_conversation(a2a_url: str) -> None:
    import httpx
    from a2a.client import A2ACardResolver

    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, a2a_url).get_agent_card()
    assert (card.name, card.skills[0].id, card.capabilities.streaming) == ("helper", "helper", True)
    assert card.supported_interfaces[0].url == a2a_url
    client = await create_client(a2a_url)
    try:
        context = uuid.uuid4().hex
        kinds, events = await collect(client, message(Part(text="hello"), context=context))
        assert kinds == ["task", "status_update", "artifact_update", "status_update"]
        assert events[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
        assert events[1].status_update.status.state == TaskState.TASK_STATE_WORKING
        answer = events[2].artifact_update.artifact
        assert (answer.name, get_artifact_text(answer)) == ("answer", "seen 1: hello")
        assert events[3].status_update.status.state == COMPLETED
        usage = usage_of(events[3])
        assert (usage["input_tokens"], usage["output_tokens"], usage["requests"]) == (10, 5, 1)
        assert Decimal(usage["cost"]) == Decimal("0.00002")
        # The same context is the same conversation: the agent has seen two user messages.
        _, again = await collect(client, message(Part(text="and again"), context=context))
        assert get_artifact_text(again[2].artifact_update.artifact) == "seen 2: and again"
        task = await client.get_task(GetTaskRequest(id=again[0].task.id))
        assert task.status.state == COMPLETED and get_artifact_text(task.artifacts[0]) == "seen 2: and again"
    finally:
        await client.close()
    unstreamed = await create_client(a2a_url, client_config=ClientConfig(streaming=False))
    try:
        kinds, events = await collect(unstreamed, message(Part(text="once"), context=uuid.uuid4().hex))
        assert kinds == ["task"]
        assert events[0].task.status.state == COMPLETED
        assert get_artifact_text(events[0].task.artifacts[0]) == "seen 1: once"
    finally:
        await unstreamed.close()


async def test_an_approval_goes_through_input_required(a2a_url: str) -> None:
    client = await create_client(a2a_url)
    try:
        context = uuid.uuid4().hex
        _, events = await collect(client, message(Part(text="delete report.txt"), context=context))
        paused = events[-1].status_update
        assert paused.status.state == INPUT_REQUIRED
        [asked] = get_data_parts(list(paused.status.message.parts))
        [item] = asked["approvals"]
        assert (item["id"], item["tool"], item["input"]) == ("d1", "delete", {"path": "report.txt"})
        assert "delete" in get_text_parts(list(paused.status.message.parts))[0]
        task = paused.task_id
        # An answer that is no decision is asked again; the task stays input-required.
        _, unclear = await collect(client, message(Part(text="hmm?"), context=context, task=task))
        assert unclear[-1].status_update.status.state == INPUT_REQUIRED
        assert "approve or deny" in get_text_parts(list(unclear[-1].status_update.status.message.parts))[0]
        _, done = await collect(client, message(data({"approvals": {"d1": "approve"}}), context=context, task=task))
        assert done[-1].status_update.status.state == COMPLETED
        assert get_artifact_text(done[-2].artifact_update.artifact) == "done: deleted report.txt"
        # Denied in plain text: the agent reads the denial and answers.
        _, second = await collect(client, message(Part(text="delete other.txt"), context=context))
        _, denied = await collect(client, message(Part(text="deny"), context=context, task=second[-1].status_update.task_id))
        assert get_artifact_text(denied[-2].artifact_update.artifact) == "done: The user denied this tool call."
    finally:
        await client.close()


async def test_a_task_is_cancelled(a2a_url: str) -> None:
    client = await create_client(a2a_url)
    try:
        started = time.monotonic()
        task_id = ""
        async for event in client.send_message(message(Part(text="wait 30"), context=uuid.uuid4().hex)):
            if event.WhichOneof("payload") == "status_update" and event.status_update.status.state == TaskState.TASK_STATE_WORKING:
                task_id = event.status_update.task_id
                break
            if event.WhichOneof("payload") == "task":
                task_id = event.task.id
        assert task_id
        cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
        assert cancelled.status.state == CANCELED
        task = await client.get_task(GetTaskRequest(id=task_id))
        assert task.status.state == CANCELED
        assert time.monotonic() - started < 20  # the 30-second tool call did not run to its end
    finally:
        await client.close()


def call(call_id: str, name: str, args: dict[str, Any]) -> LoopMessage:
    return LoopMessage.new(LoopRole.ASSISTANT, [MessagePart.tool_call(call_id, name, args)])


async def test_a_loopctl_agent_calls_a_loopctl_agent_with_usage_cost_and_approvals(
    a2a_url: str, tmp_path: Path
) -> None:
    remote = await A2AAgent.connect(a2a_url)
    assert (remote.name, remote.description) == ("helper", "Answers, deletes files (with approval) and waits.")
    script = [call("p1", "helper", {"input": "delete old.log"}), "Cleaned up."]
    boss = Agent(
        ScriptedClient(script, usage=Usage(input_tokens=100, output_tokens=50), price=("1", "2")),
        tools=[remote],
        name="boss",
    )
    with SQLiteStore(tmp_path / "boss.db") as store:
        conv = boss.session("job-1", store=store)
        paused = await conv.run("Clean up.")
        assert paused.outcome.kind is OutcomeKind.AWAITING_APPROVAL
        [pending] = paused.pending_approvals
        assert (pending.id, pending.agent, pending.name, pending.input) == (
            "p1/d1", "boss > helper", "delete", {"path": "old.log"}
        )
        await remote.aclose()
        # Another process: a new tool for the same remote agent finds the paused task by its context.
        again = await A2AAgent.connect(a2a_url)
        boss2 = Agent(boss.model, tools=[again], name="boss")
        run = await boss2.session("job-1", store=store).run(approvals={"p1/d1": Approve()})
        await again.aclose()
    assert run.outcome.kind is OutcomeKind.COMPLETED and run.output == "Cleaned up."
    assert [str(c.result.output) for c in run.resumed_calls] == ["done: deleted old.log"]
    # The remote run's second segment (10 + 5 tokens) counts in the continued run, beside the boss's own call.
    assert (run.usage.input_tokens, run.usage.output_tokens) == (110, 55)
    assert run.cost == Decimal("0.0002") + Decimal("0.00002")
    first_cost = paused.cost
    assert first_cost == Decimal("0.0002") + Decimal("0.00002")  # the boss's first call and the remote's first


async def test_a_denied_remote_call_and_a_cancelled_call_cancel_the_remote_task(a2a_url: str) -> None:
    remote = await A2AAgent.connect(a2a_url, name="worker")
    try:
        boss = Agent(
            ScriptedClient([call("p1", "worker", {"input": "delete keep.txt"}), "Kept it."]), tools=[remote], name="boss"
        )
        conv = boss.session("job-2")
        paused = await conv.run("Tidy.")
        [pending] = paused.pending_approvals
        assert pending.id == "p1/d1" and pending.agent == "boss > worker"
        run = await conv.run(approvals={"p1/d1": Deny("Keep that file.")})
        assert run.output == "Kept it."
        outputs = [str(c.result.output) for c in run.resumed_calls]
        assert outputs == ["done: Keep that file."]

        slow = Agent(
            ScriptedClient([call("s1", "worker", {"input": "wait 30"}), "Gave up."]),
            tools=[remote],
            name="boss",
            run_config=RunConfig(tool_timeout=1.0),
        )
        started = time.monotonic()
        timed_out = await slow.run("Wait.")
        assert time.monotonic() - started < 20 and timed_out.output == "Gave up."
        [tool_call] = timed_out.turns[0].tool_calls
        assert tool_call.result.is_error
    finally:
        await remote.aclose()
    # The remote task of the timed-out call was cancelled, not left running.
    client = await create_client(a2a_url)
    try:
        found = None
        for _ in range(50):
            from a2a.types import ListTasksRequest

            listed = await client.list_tasks(ListTasksRequest(status=CANCELED))
            found = [t for t in listed.tasks if t.history and "wait 30" in get_text_parts(list(t.history[0].parts))]
            if found:
                break
            await asyncio.sleep(0.1)
        assert found, "the remote task was not cancelled"
    finally:
        await client.close()


@pytest.mark.parametrize("bad", [{"input": 3}, {"task": "x"}, "text"])
async def test_a_remote_agent_tool_refuses_bad_input(bad: Any) -> None:
    from loopctl.tool import ToolInputError

    tool = A2AAgent("http://127.0.0.1:9/", name="remote")
    with pytest.raises(ToolInputError, match="expected"):
        tool.check_input(bad)
    await tool.aclose()


def test_a_remote_run_with_unknown_token_counts_counts_them_as_unknown() -> None:
    # Before: int(None) raised TypeError when a remote agent's model reported no usage (its counts are null).
    from loopctl.a2a.client import _record
    from loopctl.tool import ToolContext

    context: ToolContext[None] = ToolContext("c1", "helper")
    metadata = struct_pb2.Struct()
    metadata.update({"input_tokens": None, "output_tokens": None, "requests": 1, "tool_calls": 0, "cost": None})
    _record(context, json_format.MessageToDict(metadata))
    assert context.spent is not None
    assert (context.spent.usage, context.spent.requests, context.spent.cost) == (Usage(), 1, None)


async def test_a_loop_run_inside_a_tool_of_the_agent_keeps_its_remote_context_to_itself(
    a2a_url: str, tmp_path: Path
) -> None:
    # A tool of an agent inherits the agent's scope: a plain BareLoop it ran took the agent's conversation as the
    # owner of its remote call, so its call p1 went on the remote context "<session>/p1" of the agent's own call
    # p1 (the remote saw the agent's earlier task there: "seen 2").
    from loopctl.engine import BareLoop
    from loopctl.tool import tool

    remote = await A2AAgent.connect(a2a_url)

    @tool
    async def delegate(text: str) -> str:
        """Hand the text on, with a loop of its own."""
        inner = BareLoop(ScriptedClient([call("p1", "helper", {"input": text}), "relayed"]), [remote])
        run = await inner.run("relay")
        return str(run.turns[0].tool_calls[0].result.output)

    boss = Agent(
        ScriptedClient([call("p1", "helper", {"input": "first"}), "Asked.", call("p1", "delegate", {"text": "second"}),
                        "Delegated."]),
        tools=[remote, delegate],
        name="boss",
    )  # fmt: skip
    with SQLiteStore(tmp_path / "scope.db") as store:
        conv = boss.session(f"scope-{uuid.uuid4().hex[:8]}", store=store)
        first = await conv.run("Ask.")
        second = await conv.run("Delegate.")
    await remote.aclose()
    assert str(first.turns[0].tool_calls[0].result.output) == "seen 1: first"
    assert str(second.turns[0].tool_calls[0].result.output) == "seen 1: second"
