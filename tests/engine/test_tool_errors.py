"""A tool that raises is visible to the developer (issue 18, item 15): the exception is kept on the
``ToolCallRecord`` and the ``ToolCallFinished`` event, logged with its traceback by ``loopctl.engine.loop``,
and ``RunConfig(raise_tool_errors=True)`` raises it out of ``run()`` (for tests). A forgotten ``deps=`` shows
the same way, with a note saying so."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import pytest

from loopctl.engine import BareLoop, OutcomeKind, RunConfig, ToolCallFinished
from loopctl.message import Message, MessagePart, Role, ToolResultPart, check_conversation
from loopctl.testing import ScriptedClient
from loopctl.tool import ToolContext, tool


def calls(*specs: tuple[str, str, dict[str, Any]]) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(i, n, a) for i, n, a in specs])


class Broken(Exception):
    """A bug in a tool."""


@tool
async def boom(text: str) -> str:
    """Always fails."""
    raise Broken(f"cannot handle {text}")


@tool
async def echo(text: str) -> str:
    """Echo the text back."""
    return text


@dataclass
class Deps:
    user: str


@tool
async def whoami(ctx: ToolContext[Deps]) -> str:
    """The user's name."""
    return ctx.deps.user


async def test_the_exception_is_on_the_record_and_the_event_and_the_model_reads_it() -> None:
    finished: list[ToolCallFinished] = []
    loop = BareLoop(
        ScriptedClient([calls(("c1", "boom", {"text": "x"}), ("c2", "echo", {"text": "y"})), "sorry"]),
        [boom, echo],
        observers=[lambda e: finished.append(e) if isinstance(e, ToolCallFinished) else None],
    )
    run = await loop.run("go")
    assert (run.outcome.kind, run.output) == (OutcomeKind.COMPLETED, "sorry")
    failed, fine = run.turns[0].tool_calls
    assert isinstance(failed.error, Broken) and str(failed.error) == "cannot handle x"
    assert failed.error.__traceback__ is not None  # the traceback is kept with it
    assert fine.error is None
    assert {e.call.id: e.error for e in finished} == {"c1": failed.error, "c2": None}
    assert str(failed.result.output) == "Tool 'boom' failed: Broken: cannot handle x"
    assert failed.result.is_error


async def test_the_exception_is_logged_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    loop = BareLoop(ScriptedClient([calls(("c1", "boom", {"text": "x"})), "sorry"]), [boom])
    with caplog.at_level(logging.WARNING, logger="loopctl.engine.loop"):
        await loop.run("go")
    (record,) = [r for r in caplog.records if r.name == "loopctl.engine.loop"]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "tool 'boom' raised Broken: cannot handle x (call c1, turn 1); the model is told"
    assert record.exc_info is not None and record.exc_info[1] is not None
    assert isinstance(record.exc_info[1], Broken)
    assert "in boom" in caplog.text  # the traceback, down to the tool's own frame


async def test_raise_tool_errors_raises_the_tools_exception_out_of_run() -> None:
    reply = calls(("c1", "echo", {"text": "y"}), ("c2", "boom", {"text": "x"}), ("c3", "echo", {"text": "z"}))
    client = ScriptedClient([reply, "never"])
    loop = BareLoop(client, [boom, echo])
    with pytest.raises(Broken, match="cannot handle x"):
        await loop.run("go", RunConfig(raise_tool_errors=True, tool_dispatch="sequential"))
    assert client.calls == 1
    assert loop.machine.outcome.kind is OutcomeKind.FAILED
    assert loop.machine.outcome.error_type == "Broken"
    # the turn is kept: the call that ran keeps its result
    history = list(loop.history)
    assert check_conversation(history) == []
    answers = [p for p in history[-1].parts if isinstance(p, ToolResultPart)]
    assert [str(p.output) for p in answers] == [
        "y",
        "Tool 'boom' failed: Broken: cannot handle x",
        "Not run: the run failed (Broken) before the call started.",  # a sequential batch stops at the error
    ]


async def test_raise_tool_errors_leaves_the_models_mistakes_to_the_model() -> None:
    # Input that does not fit the schema is the model's to fix, not a bug of the tool: it is not raised.
    loop = BareLoop(ScriptedClient([calls(("c1", "echo", {"txt": "y"})), "fixed"]), [echo])
    run = await loop.run("go", RunConfig(raise_tool_errors=True))
    assert run.output == "fixed"
    assert run.turns[0].tool_calls[0].error is None


async def test_a_forgotten_deps_shows_as_the_tools_exception_with_a_note(caplog: pytest.LogCaptureFixture) -> None:
    loop = BareLoop(ScriptedClient([calls(("c1", "whoami", {})), "hm"]), [whoami])
    with caplog.at_level(logging.WARNING, logger="loopctl.engine.loop"):
        run = await loop.run("who am I?")
    error = run.turns[0].tool_calls[0].error
    assert isinstance(error, AttributeError)
    note = "the run was given no deps= (loop.run(..., deps=...)), so ToolContext.deps is None in tool 'whoami'"
    assert getattr(error, "__notes__", []) == [note]
    assert note in caplog.text
    with pytest.raises(AttributeError) as raised:
        await BareLoop(ScriptedClient([calls(("c1", "whoami", {}))]), [whoami]).run(
            "who am I?", RunConfig(raise_tool_errors=True)
        )
    assert raised.value.__notes__ == [note]
    given = await BareLoop(ScriptedClient([calls(("c1", "whoami", {})), "hi ada"]), [whoami]).run(
        "who am I?", RunConfig(raise_tool_errors=True), deps=Deps("ada")
    )
    assert [(str(r.result.output), r.error) for r in given.turns[0].tool_calls] == [("ada", None)]


async def test_a_tool_given_its_deps_raising_gets_no_deps_note() -> None:
    @tool
    async def lookup(ctx: ToolContext[Deps]) -> str:
        """Fails on an attribute of None while deps were given."""
        missing: Any = None
        return str(missing.name)

    run = await BareLoop(ScriptedClient([calls(("c1", "lookup", {})), "ok"]), [lookup]).run("go", deps=Deps("ada"))
    error = run.turns[0].tool_calls[0].error
    assert isinstance(error, AttributeError) and not getattr(error, "__notes__", [])


async def test_a_tool_whose_own_sub_task_was_cancelled_keeps_that_error() -> None:
    @tool
    async def flaky() -> str:
        """Its own sub-task is cancelled."""
        inner = asyncio.ensure_future(asyncio.sleep(10))
        await asyncio.sleep(0)
        inner.cancel()
        return str(await inner)

    run = await BareLoop(ScriptedClient([calls(("c1", "flaky", {})), "ok"]), [flaky]).run("go")
    assert run.ok
    assert isinstance(run.turns[0].tool_calls[0].error, asyncio.CancelledError)
