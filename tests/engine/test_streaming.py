"""``BareLoop.stream``: the events of a run in order, its text, its result, and leaving early (issue 10,
item 2)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from loopctl.engine import (
    BareLoop,
    LoopMachine,
    ModelStreamEvent,
    OutcomeKind,
    RunConfig,
    RunFinished,
    RunStarted,
    SessionConfig,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
)
from loopctl.message import Message, MessagePart, Role, ToolResultPart, check_conversation
from loopctl.stream import TextDelta
from loopctl.testing import FakeProviderServer, ScriptedClient
from loopctl.tool import tool
from tests.fake_clients import KINDS, make_client


def calls(*specs: tuple[str, str, dict[str, Any]], text: str | None = None) -> Message:
    parts: list[MessagePart] = [MessagePart.text(text)] if text else []
    return Message.new(Role.ASSISTANT, [*parts, *(MessagePart.tool_call(i, n, a) for i, n, a in specs)])


@tool
async def wait(name: str, seconds: float) -> str:
    """Waits, then says its name."""
    await asyncio.sleep(seconds)
    return f"{name} done"


def shape(event: Any) -> tuple[Any, ...]:
    """An event reduced to what its order is about."""
    if isinstance(event, RunStarted):
        return ("run started",)
    if isinstance(event, TurnStarted):
        return ("turn", event.turn)
    if isinstance(event, TurnFinished):
        return ("turn finished", event.turn)
    if isinstance(event, ToolCallStarted):
        return ("tool started", event.call.input["name"])
    if isinstance(event, ToolCallFinished):
        return ("tool finished", event.call.input["name"], str(event.result.output))
    if isinstance(event, RunFinished):
        return ("run finished", event.run.outcome.kind.value)
    if isinstance(event, ModelStreamEvent):
        return ("stream", event.turn)
    return (type(event).__name__,)


def squeeze(shapes: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Runs of the same model-stream shape as one (how many deltas a wire sends is its own business)."""
    out: list[tuple[Any, ...]] = []
    for s in shapes:
        if not (out and s[0] == "stream" and out[-1] == s):
            out.append(s)
    return out


@pytest.mark.parametrize("kind", KINDS)
async def test_events_come_in_order_for_a_run_with_parallel_tools(kind: str) -> None:
    script = [
        calls(("a", "wait", {"name": "slow", "seconds": 0.2}), ("b", "wait", {"name": "fast", "seconds": 0.0})),
        "both done",
    ]
    observed: list[Any] = []
    with FakeProviderServer(script) as server:
        client = make_client(kind, server)
        loop = BareLoop(client, [wait], observers=[observed.append])
        try:
            async with loop.stream("go", RunConfig(retry_initial_delay=0.001)) as stream:
                events = [event async for event in stream]
                run = await stream.result()
        finally:
            await client.aclose()
    assert squeeze([shape(e) for e in events]) == [
        ("run started",),
        ("turn", 1),
        ("stream", 1),
        ("turn finished", 1),
        ("tool started", "slow"),
        ("tool started", "fast"),
        ("tool finished", "fast", "fast done"),
        ("tool finished", "slow", "slow done"),
        ("turn", 2),
        ("stream", 2),
        ("turn finished", 2),
        ("run finished", "completed"),
    ]
    assert events[-1].run is run  # RunFinished carries the Run, typed
    assert observed == events  # observers still see every event
    assert run.output == "both done"


async def test_text_yields_only_the_text_deltas_of_the_replies() -> None:
    script = [calls(("a", "wait", {"name": "x", "seconds": 0}), text="Let me wait. "), "Done waiting."]
    loop = BareLoop(ScriptedClient(script), [wait])
    async with loop.stream("go") as stream:
        pieces = [piece async for piece in stream.text()]
        run = await stream.result()
    assert pieces == ["Let me wait. ", "Done waiting."]
    assert run.output == "Done waiting."


async def test_typed_output_streams_too() -> None:
    class Answer(BaseModel):
        value: int

    loop = BareLoop(ScriptedClient([calls(("f", "final_result", {"value": 42}))]))
    async with loop.stream("go", output_type=Answer) as stream:
        kinds = [type(e).__name__ async for e in stream]
        run = await stream.result()
    assert run.output == Answer(value=42)
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunFinished"


@pytest.mark.parametrize("kind", KINDS)
async def test_leaving_the_block_early_cancels_the_run_and_leaves_a_resumable_history(kind: str) -> None:
    script = [
        calls(("a", "wait", {"name": "ok", "seconds": 0})),
        calls(("b", "wait", {"name": "long", "seconds": 30})),
        "resumed fine",
    ]
    with FakeProviderServer(script) as server:
        client = make_client(kind, server)
        loop = BareLoop(client, [wait])
        try:
            async with loop.stream("go") as stream:
                async for event in stream:
                    if isinstance(event, ToolCallStarted) and event.call.input["name"] == "long":
                        break
            run = await stream.result()
            assert run.outcome.kind is OutcomeKind.CANCELLED
            history = list(loop.history)
            # The finished exchange is kept, and the interrupted call's turn, answered: every call has its result.
            assert check_conversation(history) == []
            assert [m.role for m in history] == [Role.USER, Role.ASSISTANT, Role.USER, Role.ASSISTANT, Role.USER]
            interrupted = history[-1].parts[0]
            assert isinstance(interrupted, ToolResultPart)
            assert str(interrupted.output).startswith("Not known whether it ran: the run was cancelled")
            # Resumable: in this loop, and from the saved machine in another.
            restored = BareLoop.from_machine(LoopMachine.from_json(loop.into_machine().to_json()), client, [wait])
            again = await restored.run("go on")
        finally:
            await client.aclose()
    assert (again.outcome.kind, again.output) == (OutcomeKind.COMPLETED, "resumed fine")


async def test_an_error_in_the_block_cancels_the_run_and_propagates() -> None:
    loop = BareLoop(ScriptedClient([calls(("a", "wait", {"name": "long", "seconds": 30})), "never"]), [wait])

    async def read() -> None:
        async with loop.stream("go") as stream:
            async for event in stream:
                if isinstance(event, ToolCallStarted):
                    raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        await read()
    assert loop.machine.outcome.kind is OutcomeKind.CANCELLED
    assert (await loop.run("again", RunConfig())).outcome.kind is OutcomeKind.COMPLETED


async def test_an_error_that_escapes_the_run_is_raised_by_the_iteration() -> None:
    def fragile(event: object) -> None:
        if isinstance(event, TurnFinished):
            raise RuntimeError("observer bug")

    loop = BareLoop(ScriptedClient(["hi"]), observers=[fragile])

    async def read() -> None:
        async with loop.stream("go") as stream:
            async for _ in stream:
                pass

    with pytest.raises(RuntimeError, match="observer bug"):
        await read()


async def test_a_stream_and_a_run_cannot_overlap_on_one_loop() -> None:
    loop = BareLoop(ScriptedClient([calls(("a", "wait", {"name": "long", "seconds": 30}))]), [wait])
    async with loop.stream("go") as stream:
        async for event in stream:
            if isinstance(event, ToolCallStarted):
                with pytest.raises(RuntimeError, match="already running"):
                    await loop.run("other")
                break
    assert (await stream.result()).outcome.kind is OutcomeKind.CANCELLED


async def test_text_deltas_match_the_streamed_events() -> None:
    loop = BareLoop(ScriptedClient(["one answer"]), config=SessionConfig())
    async with loop.stream("go") as stream:
        events = [e async for e in stream]
    deltas = [e.event.text for e in events if isinstance(e, ModelStreamEvent) and isinstance(e.event, TextDelta)]
    assert deltas == ["one answer"]


@pytest.mark.parametrize("kind", KINDS)
async def test_text_yields_the_whole_reply_through_each_real_client(kind: str) -> None:
    # Gemini's first piece of text comes with the part's start (PartStarted), not as a delta: text() lost it.
    answer = "The fallback model answers in full."
    with FakeProviderServer([answer]) as server:
        client = make_client(kind, server)
        try:
            async with BareLoop(client).stream("go") as stream:
                text = "".join([t async for t in stream.text()])
        finally:
            await client.aclose()
    assert text == answer
