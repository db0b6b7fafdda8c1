"""The per-turn shortcuts of the loop (docs/performance.md) give exactly what the general paths gave."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from loopctl.engine import BareLoop, RunConfig, SessionConfig
from loopctl.engine.loop import _with_calls
from loopctl.engine.run import ToolCallRecord, Turn
from loopctl.message import Message, Role, ToolCallPart, ToolResultPart
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.testing import ScriptedClient
from loopctl.tool import tool

counts = st.integers(min_value=-(2**40), max_value=2**40)
usages = st.builds(Usage, counts, counts, counts, counts, counts) | st.just(Usage())


@given(usages, usages)
def test_usage_sum_is_the_sum_of_each_count(a: Usage, b: Usage) -> None:
    total = a + b
    assert type(total) is Usage
    pairs = zip(dataclasses.astuple(a), dataclasses.astuple(b), strict=True)
    assert dataclasses.astuple(total) == tuple(x + y for x, y in pairs)


def test_adding_no_usage_gives_the_same_value() -> None:
    u = Usage(3, 4, 1, 0, 2)
    assert u + Usage() is u
    assert (u + Usage(0, 0, 0, 0, 1)) == Usage(3, 4, 1, 0, 3)


def test_with_calls_is_dataclasses_replace() -> None:
    """Every field of Turn is carried (a field added to Turn and not to _with_calls fails here)."""
    reply = Message(role=Role.ASSISTANT, parts=(ToolCallPart(id="c1", name="t", input={"a": 1}),))
    result = ToolResultPart(call_id="c1", name="t", output="ok")
    turn = Turn(
        index=7,
        input=(Message.user("hi"),),
        output=reply,
        tool_calls=(),
        usage=Usage(1, 2, 3, 4, 5),
        stop_reason=StopReason.TOOL_CALL,
        duration=0.25,
        model="m",
        provider="p",
        cost=Decimal("0.5"),
    )
    records = (ToolCallRecord(reply.parts[0], result, 0.1),)  # type: ignore[arg-type]
    made = _with_calls(turn, records)
    assert made == dataclasses.replace(turn, tool_calls=records)
    for f in dataclasses.fields(Turn):
        want = records if f.name == "tool_calls" else getattr(turn, f.name)
        assert getattr(made, f.name) is want, f.name


async def test_a_run_records_each_call_with_its_result_and_usage() -> None:
    """The records a run keeps for its turns are those of the calls that ran (the record of a call is kept
    as it ran), and the run's usage is the sum of its replies'."""
    usage = Usage(input_tokens=100, output_tokens=20)

    def reply(request: object) -> ModelResponse:
        n = (len(request.messages) - 1) // 2  # type: ignore[attr-defined]
        if n < 3:
            call = ToolCallPart(id=f"call_{n}", name="echo", input={"text": f"t{n}"})
            return ModelResponse(Message(role=Role.ASSISTANT, parts=(call,)), usage, StopReason.TOOL_CALL)
        return ModelResponse(Message.assistant("done"), usage, StopReason.END_TURN)

    @tool
    async def echo(text: str) -> str:
        """Echo."""
        return text.upper()

    loop = BareLoop(ScriptedClient(reply), [echo], SessionConfig(context_window=100_000))
    run = await loop.run("go", RunConfig(loop_detection=None))
    assert run.output == "done"
    assert run.usage == Usage(input_tokens=400, output_tokens=80)
    assert [t.usage for t in run.turns] == [usage] * 4
    calls = [rec for t in run.turns for rec in t.tool_calls]
    assert [(r.call.id, str(r.result.output), r.ran) for r in calls] == [
        ("call_0", "T0", True),
        ("call_1", "T1", True),
        ("call_2", "T2", True),
    ]
    history = loop.history
    for t in run.turns[:3]:
        (rec,) = t.tool_calls
        assert rec.call is t.output.parts[0]
        at = next(i for i, m in enumerate(history) if m is t.output)
        assert history[at + 1].parts == (rec.result,)
