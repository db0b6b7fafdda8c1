"""The per-turn shortcuts of the loop (docs/performance.md) give exactly what the general paths gave."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopctl.compact import ContextBudget, HeuristicTokenCounter
from loopctl.engine import Approve, BareLoop, Deny, RunConfig, SessionConfig, UsageLimits
from loopctl.engine.hooks import Hook
from loopctl.engine.loop import _with_calls
from loopctl.engine.machine import LoopMachine
from loopctl.engine.run import ToolCallRecord, Turn
from loopctl.message import Message, Role, TextPart, ToolCallPart, ToolResultPart
from loopctl.providers import ModelRequest
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.testing import ScriptedClient
from loopctl.tool import tool
from tests.engine.turns import GeneralBatches, defers, echo, fails, guarded, numbers, turn_records, with_context

counts = st.none() | st.integers(min_value=-(2**40), max_value=2**40)
usages = st.builds(Usage, counts, counts, counts, counts, counts) | st.just(Usage()) | st.just(Usage(0, 0, 0, 0, 0))


def _plus(x: int | None, y: int | None) -> int | None:
    return y if x is None else x if y is None else x + y


@given(usages, usages)
def test_usage_sum_is_the_sum_of_each_reported_count(a: Usage, b: Usage) -> None:
    total = a + b
    assert type(total) is Usage
    pairs = zip(dataclasses.astuple(a), dataclasses.astuple(b), strict=True)
    assert dataclasses.astuple(total) == tuple(_plus(x, y) for x, y in pairs)


def test_adding_no_usage_gives_the_same_value() -> None:
    u = Usage(3, 4, 1, 0, 2)
    assert u + Usage() is u
    assert (u + Usage(0, 0, 0, 0, 1)) == Usage(3, 4, 1, 0, 3)
    # A reported zero is a count: it is not dropped by the shortcut (the merge of the two changes got this wrong).
    assert Usage() + Usage(0, 0, 0, 0, 0) == Usage(0, 0, 0, 0, 0)


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


# --- every shortcut at once, against every way of turning them off -------------------------------------------


_TOOLS = [echo, fails, defers, numbers, with_context, guarded]


class _Quiet(Hook):
    """Hooks that change nothing: their presence alone turns the direct paths off."""

    def before_model(self, request: ModelRequest) -> None:
        return None

    def before_tool(self, call: ToolCallPart) -> None:
        return None

    def after_tool(self, call: ToolCallPart, result: ToolResultPart) -> None:
        return None


class _BuildsItsOwn(LoopMachine):
    """Never keeps the results message given: the turn's records come from ``settle``."""

    def _commit_one(self, message: Any) -> bool:
        return False


class _OwnCallModel(BareLoop):
    async def _call_model(self, *args: Any, **kwargs: Any) -> Any:
        return await super()._call_model(*args, **kwargs)


class _Counter(HeuristicTokenCounter):
    """Not the heuristic counter itself: the context after a calibration is counted, not added up."""


# Each way the general paths run: an observer, a machine that builds the results message, a driver with its own
# _call_model or batch method, hooks, a cancel event, a counter subclass.
_GENERAL = ["observed", "builds_its_own", "own_call_model", "own_run_one", "hooks", "cancel", "counter"]

_calls = st.tuples(st.sampled_from([t.name for t in _TOOLS] + ["nope"]), st.sampled_from(["a", "bb", 3]), st.booleans())
_replies = st.tuples(
    st.lists(_calls, max_size=3),
    st.booleans(),  # text beside the calls
    st.none() | st.integers(0, 6_000),  # input tokens (None: not reported)
    st.integers(0, 400),  # output tokens
    st.none() | st.integers(0, 9),  # the message of an earlier reply given again (its call ids used again)
)


def _responses(replies: list[tuple[Any, ...]]) -> list[ModelResponse]:
    out: list[ModelResponse] = []
    for i, (calls, text, input_tokens, output_tokens, again) in enumerate(replies):
        usage = Usage(input_tokens, output_tokens)
        if again is not None and out:
            earlier = out[again % len(out)]
            out.append(ModelResponse(earlier.message, usage, earlier.stop_reason))
            continue
        parts: list[Any] = [TextPart(text=f"say {i}")] if text else []
        for j, (name, value, reused_id) in enumerate(calls):
            parts.append(
                ToolCallPart(id="c" if reused_id and j == 0 else f"c{i}_{j}", name=name, input={"text": value})
            )
        stop = StopReason.TOOL_CALL if calls else StopReason.END_TURN
        out.append(ModelResponse(Message(role=Role.ASSISTANT, parts=tuple(parts)), usage, stop))
    return out


async def _runs(way: str, responses: list[ModelResponse], cfg: RunConfig, window: int) -> list[Any]:
    """The runs of one conversation (input, then decisions for calls that wait, then more input), each as what
    can be observed of it, and the context the loop kept at each model call."""
    contexts: list[int] = []
    loops: list[BareLoop] = []
    script = iter(responses)

    def answer(request: ModelRequest) -> ModelResponse:
        contexts.append(loops[0].machine.context_tokens)
        return next(script, ModelResponse(Message.assistant("end"), Usage(1, 1)))

    counter = _Counter() if way == "counter" else HeuristicTokenCounter()
    kind = {"own_call_model": _OwnCallModel, "own_run_one": GeneralBatches}.get(way, BareLoop)
    loop = kind(
        ScriptedClient(answer, price=("1", "2")),
        _TOOLS,
        SessionConfig(budget=ContextBudget(window=window, counter=counter)),
        observers=[lambda event: None] if way == "observed" else [],
        machine=_BuildsItsOwn() if way == "builds_its_own" else None,
        hooks=[_Quiet()] if way == "hooks" else [],
    )
    loops.append(loop)
    cancel = asyncio.Event() if way == "cancel" else None
    seen: list[Any] = []
    for given_input in ("go", "more"):
        while loop.machine.pending_approvals:
            decisions = {p.id: Approve() if i % 2 else Deny("no") for i, p in enumerate(loop.machine.pending_approvals)}
            seen.append(_observed(await loop.run(approvals=decisions, config=cfg, cancel=cancel), loop, contexts))
        seen.append(_observed(await loop.run(given_input, cfg, cancel=cancel), loop, contexts))
    return seen


def _observed(run: Any, loop: BareLoop, contexts: list[int]) -> dict[str, Any]:
    return {
        "messages": [m.to_dict() for m in run.messages],
        "new": [m.to_dict() for m in run.new_messages()],
        "turns": turn_records(run),
        "resumed": [(r.call.to_dict(), r.result.to_dict(), r.ran) for r in run.resumed_calls],
        "usage": (run.usage, run.cost),
        "outcome": (run.outcome, type(run.error), str(run.error), [(p.id, p.reason) for p in run.pending_approvals]),
        "history": [m.to_dict() for m in loop.history],
        "machine": loop.machine.to_json(),
        "contexts": [*contexts, loop.machine.context_tokens],
    }


@settings(max_examples=25, deadline=None)
@given(
    replies=st.lists(_replies, min_size=1, max_size=5),
    loop_detection=st.sampled_from([None, 2]),
    max_turns=st.sampled_from([200, 3]),
    limits=st.sampled_from([None, UsageLimits(tool_calls=3), UsageLimits(cost=Decimal("0.005"))]),
    window=st.sampled_from([100_000, 1_500]),
    dispatch=st.sampled_from(["parallel", "sequential"]),
)
def test_a_run_through_the_shortcuts_is_the_run_through_each_general_path(
    replies: list[tuple[Any, ...]],
    loop_detection: int | None,
    max_turns: int,
    limits: UsageLimits | None,
    window: int,
    dispatch: Any,
) -> None:
    """Conversations drawn reply by reply (calls of a plain tool, of one that raises, defers its own call, returns
    JSON, reads its context or needs approval, of an unknown tool, with bad input, a call id used again, an
    earlier reply's message given again, text beside the calls; reported input tokens or none), under loop
    detection, a turn limit, usage limits, a window small enough to compact, both dispatches, with decisions for
    calls that wait and more input after: the run with every shortcut on is the run with each way of turning
    them off (messages, new messages, turns and their records, resumed calls, usage and cost, outcome, pending
    calls, history, the machine's state, the context kept at each model call)."""
    responses = _responses(replies)
    cfg = RunConfig(
        loop_detection=loop_detection, max_turns=max_turns, limits=limits, stream=False, tool_dispatch=dispatch
    )
    logging.getLogger("loopctl").disabled = True  # the tools' errors, logged alike on every path
    try:
        fast = asyncio.run(_runs("fast", responses, cfg, window))
        for way in _GENERAL:
            assert asyncio.run(_runs(way, responses, cfg, window)) == fast, way
    finally:
        logging.getLogger("loopctl").disabled = False
