"""A run cancelled mid-batch keeps the results of the tools that ran (issue 18, item 7): the cancel event,
leaving ``stream``, cancelling the task (Ctrl-C) all commit the turn with the finished calls' results and the
others answered, so the next run does not run them again."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest

from loopctl.engine import BareLoop, OutcomeKind, RunConfig, ToolCallFinished
from loopctl.message import Message, MessagePart, Role, ToolResultPart, check_conversation
from loopctl.providers.base import ModelRequest
from loopctl.testing import ScriptedClient
from loopctl.tool import tool

NOT_KNOWN = "Not known whether it ran: the run was cancelled before its result was recorded."


def calls(*specs: tuple[str, str, dict[str, Any]]) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(i, n, a) for i, n, a in specs])


class Mailbox:
    """A ``send_email`` tool that records each email it sends, and a ``lookup`` that never returns (it sets
    ``looking`` once the email went out, so the test cancels with the email sent and the lookup in flight)."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.email_sent = asyncio.Event()
        self.looking = asyncio.Event()

        @tool
        async def send_email(to: str) -> str:
            """Send an email."""
            self.sent.append(to)
            self.email_sent.set()
            return f"sent to {to}"

        @tool
        async def lookup(q: str) -> str:
            """A slow lookup."""
            await self.email_sent.wait()
            self.looking.set()
            await asyncio.sleep(60)
            return "never"

        @tool
        async def archive(box: str) -> str:
            """Archive a box."""
            return f"archived {box}"

        self.tools = [send_email, lookup, archive]


REPLY = calls(("e1", "send_email", {"to": "ada@example.com"}), ("l1", "lookup", {"q": "weather"}))


def answer(request: ModelRequest) -> Message | str:
    """The model: the email and the lookup, then (seeing their results) a text answer."""
    if not any(m.role is Role.ASSISTANT for m in request.messages):
        return REPLY
    return "done"


def results(loop: BareLoop) -> dict[str, ToolResultPart]:
    return {p.call_id: p for m in loop.history for p in m.parts if isinstance(p, ToolResultPart)}


def assert_batch_kept(loop: BareLoop, box: Mailbox) -> None:
    history = list(loop.history)
    assert check_conversation(history) == []
    assert [m.role for m in history] == [Role.USER, Role.ASSISTANT, Role.USER]
    got = results(loop)
    assert (str(got["e1"].output), got["e1"].is_error) == ("sent to ada@example.com", False)
    assert (str(got["l1"].output), got["l1"].is_error) == (NOT_KNOWN, True)
    assert box.sent == ["ada@example.com"]


async def assert_next_run_does_not_send_again(loop: BareLoop, client: ScriptedClient, box: Mailbox) -> None:
    run = await loop.run("and now?")
    assert (run.outcome.kind, run.output) == (OutcomeKind.COMPLETED, "done")
    assert box.sent == ["ada@example.com"]  # the model saw the email's result: it is not sent again
    sent = client.requests[-1].messages
    assert [m.role for m in sent] == [Role.USER, Role.ASSISTANT, Role.USER, Role.USER]


async def test_the_cancel_event_keeps_the_results_of_the_calls_that_finished() -> None:
    box = Mailbox()
    client = ScriptedClient(answer)
    loop = BareLoop(client, box.tools)
    cancel = asyncio.Event()

    async def cancel_once_looking() -> None:
        await box.looking.wait()
        cancel.set()

    canceller = asyncio.ensure_future(cancel_once_looking())
    run = await asyncio.wait_for(loop.run("mail ada", cancel=cancel), 10)
    await canceller
    assert run.outcome.kind is OutcomeKind.CANCELLED
    assert_batch_kept(loop, box)
    # the run's record has the turn's calls, as the history does
    assert [(r.call.id, r.ran, r.result.is_error) for r in run.turns[-1].tool_calls] == [
        ("e1", True, False),
        ("l1", False, True),
    ]
    await assert_next_run_does_not_send_again(loop, client, box)


async def test_leaving_the_stream_keeps_the_results_of_the_calls_that_finished() -> None:
    box = Mailbox()
    client = ScriptedClient(answer)
    loop = BareLoop(client, box.tools)
    async with loop.stream("mail ada") as stream:
        async for event in stream:
            if isinstance(event, ToolCallFinished) and event.call.name == "send_email":
                await box.looking.wait()
                break
    run = await asyncio.wait_for(stream.result(), 10)
    assert run.outcome.kind is OutcomeKind.CANCELLED
    assert_batch_kept(loop, box)
    await assert_next_run_does_not_send_again(loop, client, box)


async def test_cancelling_the_task_keeps_the_results_of_the_calls_that_finished() -> None:
    box = Mailbox()
    client = ScriptedClient(answer)
    loop = BareLoop(client, box.tools)
    task = asyncio.ensure_future(loop.run("mail ada"))
    await asyncio.wait_for(box.looking.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert loop.machine.outcome.kind is OutcomeKind.CANCELLED
    assert_batch_kept(loop, box)
    await assert_next_run_does_not_send_again(loop, client, box)


def test_ctrl_c_in_run_sync_keeps_the_results_of_the_calls_that_finished() -> None:
    # asyncio.run turns SIGINT into a cancel of the run's task, then raises KeyboardInterrupt.
    sent: list[str] = []

    @tool
    async def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"sent to {to}"

    @tool
    async def lookup(q: str) -> str:
        """A slow lookup: Ctrl-C arrives while it runs."""
        while not sent:
            await asyncio.sleep(0)
        asyncio.get_running_loop().call_soon(signal.raise_signal, signal.SIGINT)
        await asyncio.sleep(60)
        return "never"

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is handled by something else here")
    loop = BareLoop(ScriptedClient([REPLY]), [send_email, lookup])
    with pytest.raises(KeyboardInterrupt):
        loop.run_sync("mail ada")
    assert loop.machine.outcome.kind is OutcomeKind.CANCELLED
    got = results(loop)
    assert str(got["e1"].output) == "sent to ada@example.com"
    assert str(got["l1"].output) == NOT_KNOWN
    assert sent == ["ada@example.com"]


async def test_a_sequential_batch_answers_the_calls_after_the_one_in_flight_as_not_run() -> None:
    box = Mailbox()
    reply = calls(
        ("e1", "send_email", {"to": "ada@example.com"}),
        ("l1", "lookup", {"q": "weather"}),
        ("a1", "archive", {"box": "inbox"}),
    )
    loop = BareLoop(ScriptedClient([reply]), box.tools)
    cancel = asyncio.Event()

    async def cancel_once_looking() -> None:
        await box.looking.wait()
        cancel.set()

    canceller = asyncio.ensure_future(cancel_once_looking())
    run = await asyncio.wait_for(loop.run("mail ada", RunConfig(tool_dispatch="sequential"), cancel=cancel), 10)
    await canceller
    assert run.outcome.kind is OutcomeKind.CANCELLED
    got = results(loop)
    assert [str(got[c].output) for c in ("e1", "l1", "a1")] == [
        "sent to ada@example.com",
        NOT_KNOWN,
        "Not run: the run was cancelled before the call started.",
    ]
    assert check_conversation(list(loop.history)) == []


async def test_a_cancel_before_the_batch_starts_drops_the_reply_as_before() -> None:
    # Nothing ran: the reply whose calls never started is dropped with them (the coherent prefix).
    box = Mailbox()
    cancel = asyncio.Event()

    def reply_then_cancel(request: ModelRequest) -> Message:
        cancel.set()
        return REPLY

    loop = BareLoop(ScriptedClient(reply_then_cancel), box.tools)
    run = await loop.run("mail ada", cancel=cancel)
    assert run.outcome.kind is OutcomeKind.CANCELLED
    assert list(loop.history) == [Message.user("mail ada")]
    assert box.sent == []
