"""The seventh round's per-turn shortcuts (docs/performance.md, section 11) give exactly what the general paths
give: a one-call batch of a plain function tool run through ``_execute`` directly, the results message fed
whole (``LoopMachine._feed_whole``), the reply and its calls counted as one ``RunUsage`` (``after_turn``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopctl.engine import BareLoop, RunConfig, SessionConfig, UsageLimits
from loopctl.engine.limits import RunUsage, after_turn
from loopctl.engine.machine import LoopMachine
from loopctl.errors import MachineStateError, ProviderError, RateLimited
from loopctl.message import Message, Role, TextPart, ToolCallPart, ToolResultPart
from loopctl.response import ModelResponse, Usage
from loopctl.stream import UsageReported
from loopctl.testing import ScriptedClient
from loopctl.tool import ModelRetry, tool
from tests.engine.test_turn_fast_paths import awaiting_tools
from tests.engine.turns import (
    GeneralBatches,
    defers,
    echo,
    fails,
    guarded,
    numbers,
    turn_records,
    with_context,
)

# --- a run through the direct path against the same run through the batch's coroutines --------------------


@tool
async def retry(text: str) -> str:
    """Asks the model again."""
    raise ModelRetry(f"try again, not {text}")


@tool
async def waits(text: str) -> str:
    """Waits before it answers."""
    await asyncio.sleep(0)
    return text * 2


@tool
async def too_slow(text: str) -> str:
    """Overruns its timeout (drawn only with one)."""
    await asyncio.sleep(10)
    return text


TOOLS = [echo, fails, retry, waits, too_slow, defers, numbers, guarded, with_context]
KINDS = [t.name for t in TOOLS] + ["bad_input", "unknown", "two_calls", "text"]


def _reply(turn: int, kind: str, usage: Usage) -> ModelResponse:
    def call(i: int, name: str, value: Any = "ab") -> ToolCallPart:
        return ToolCallPart(id=f"c{turn}_{i}", name=name, input={"text": value})

    if kind == "bad_input":
        parts: tuple[Any, ...] = (call(0, "echo", 3),)
    elif kind == "unknown":
        parts = (call(0, "nope"),)
    elif kind == "two_calls":
        parts = (call(0, "echo"), call(1, "echo", "cd"))
    elif kind == "text":
        parts = (TextPart(text="thinking aloud"), call(0, "echo"))
    else:
        parts = (call(0, kind),)
    return ModelResponse(Message(role=Role.ASSISTANT, parts=parts), usage)


usages = st.builds(
    Usage,
    st.none() | st.integers(0, 50),
    st.none() | st.integers(0, 50),
    st.none() | st.integers(0, 5),
    st.none() | st.integers(0, 5),
    st.none() | st.integers(0, 5),
)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(KINDS), usages), min_size=1, max_size=5),
    st.sampled_from([None, 0.02]),
    st.sampled_from([None, 8]),
)
def test_a_one_call_batch_run_directly_is_recorded_as_the_general_path_records_it(
    turns: list[tuple[str, Usage]], timeout: float | None, max_chars: int | None
) -> None:
    """Runs drawn turn by turn (each reply one call of a tool that answers, raises, asks again, waits, times
    out, defers its own call, returns JSON, needs approval, reads its context; bad input, an unknown tool, two
    calls, text beside the call; each with its usage): the direct path gives the same messages, records,
    usage, outcome, context size, pending calls and log lines as the general path."""
    script: list[Any] = [
        _reply(i, "waits" if kind == "too_slow" and timeout is None else kind, usage)
        for i, (kind, usage) in enumerate(turns)
    ]
    script.append(ModelResponse(Message.assistant("done"), Usage(1, 1)))
    cfg = RunConfig(loop_detection=None, stream=False, tool_timeout=timeout, max_tool_output_chars=max_chars)
    config = SessionConfig(context_window=100_000)

    async def run(kind: type[BareLoop]) -> tuple[Any, BareLoop, list[str]]:
        loop = kind(ScriptedClient(list(script), price=("1", "2")), TOOLS, config)
        logger = logging.getLogger("loopctl")
        lines: list[str] = []

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                lines.append(record.getMessage())

        handler = Keep()
        logger.addHandler(handler)
        try:
            return await loop.run("go", cfg), loop, lines
        finally:
            logger.removeHandler(handler)

    (a, fast, a_log), (b, general, b_log) = asyncio.run(run(BareLoop)), asyncio.run(run(GeneralBatches))
    assert [m.to_dict() for m in a.messages] == [m.to_dict() for m in b.messages]
    assert turn_records(a) == turn_records(b)
    assert (a.output, a.outcome, a.usage, a.error is None) == (b.output, b.outcome, b.usage, b.error is None)
    assert [p.call for p in a.pending_approvals] == [p.call for p in b.pending_approvals]
    assert [(p.id, p.reason) for p in a.pending_approvals] == [(p.id, p.reason) for p in b.pending_approvals]
    assert fast.machine.context_tokens == general.machine.context_tokens
    assert fast.machine.to_json() == general.machine.to_json()
    assert a_log == b_log
    # The run's usage is every reply's, added in turn.
    total = Usage()
    for t in b.turns:
        total = total + t.usage
    assert a.usage == total


def test_the_direct_path_is_taken_only_where_nothing_else_applies() -> None:
    """The direct path runs a plain tool's one call; an observer, a tool hook, a permission callback, raised tool
    errors, a cancel event, a tool that reads its context or needs approval, and a subclass's batch methods
    each keep the general path (``_run_checked`` is called)."""

    class Hook:
        async def before_tool(self, call: ToolCallPart) -> None:
            return None

    def general(name: str, **options: Any) -> bool:
        """Whether the run's one call went through ``_run_one`` (the general path)."""
        went: list[bool] = []
        original = BareLoop._run_one

        async def spy(self: BareLoop, *args: Any, **kwargs: Any) -> Any:
            went.append(True)
            return await original(self, *args, **kwargs)

        cancel = options.pop("cancel", None)
        raise_errors = options.pop("raise_tool_errors", False)
        cfg = RunConfig(loop_detection=None, stream=False, raise_tool_errors=raise_errors)
        BareLoop._run_one = spy  # type: ignore[method-assign]
        try:
            # The spy is BareLoop's own method now: _plain_batches sees BareLoop's methods.
            loop = BareLoop(ScriptedClient([_reply(0, name, Usage()), "done"]), TOOLS, **options)
            with contextlib.suppress(ValueError):  # raise_tool_errors: the tool's error ends the run, raised
                asyncio.run(loop.run("go", cfg, cancel=cancel))
        finally:
            BareLoop._run_one = original  # type: ignore[method-assign]
        return bool(went)

    assert general("echo") is False
    assert general("fails") is False
    assert general("echo", observers=[lambda e: None]) is True
    assert general("echo", hooks=[Hook()]) is True
    assert general("echo", permission=lambda call: True) is True
    assert general("echo", cancel=asyncio.Event()) is True
    assert general("with_context") is True
    assert general("guarded") is True
    assert general("two_calls") is True
    assert general("fails", raise_tool_errors=True) is True


def test_a_run_cancelled_while_a_direct_call_waits_keeps_its_turn() -> None:
    """The caller cancels the run while the call waits: the call is answered as the general path answers it
    ("Not known whether it ran"), and the turn is kept."""

    async def main(kind: type[BareLoop]) -> list[Any]:
        loop = kind(ScriptedClient([_reply(0, "too_slow", Usage()), "done"]), TOOLS)
        task = asyncio.ensure_future(loop.run("go", RunConfig(loop_detection=None, stream=False)))
        for _ in range(5):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return [m.to_dict() for m in loop.history]

    fast, general = asyncio.run(main(BareLoop)), asyncio.run(main(GeneralBatches))
    assert fast == general
    assert fast[-1]["parts"][0]["output"].startswith("Not known whether it ran")


# --- the machine's fused feeds ---------------------------------------------------------------------------

ids = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True)


@settings(max_examples=200)
@given(ids, st.data())
def test_a_message_fed_whole_is_what_tool_results_makes_of_it(calls: list[str], data: st.DataObject) -> None:
    """``_feed_whole(message)`` either changes the machine as ``tool_results([message])`` does, or (False)
    changes nothing; drawn messages answer some, all, or other calls, named or not, with other parts."""
    answered = data.draw(st.lists(st.sampled_from([*calls, "x"]), max_size=4))
    named = data.draw(st.booleans())
    text = data.draw(st.booleans())
    role = data.draw(st.sampled_from([Role.USER, Role.ASSISTANT]))
    parts: list[Any] = [ToolResultPart(call_id=c, name="t" if named else "", output=f"r{c}") for c in answered]
    if text:
        parts.append(TextPart(text="and"))
    message = Message(role=role, parts=tuple(parts)) if parts else Message(role=role, parts=(TextPart(text="-"),))


    fused, fed = awaiting_tools(calls), awaiting_tools(calls)
    before = fused.to_json()
    if fused._feed_whole(message):
        fed.tool_results([message])
        assert fused.to_json() == fed.to_json()
        assert fused.last_message() is message
    else:
        assert fused.to_json() == before
        try:
            fed.tool_results([message])
        except MachineStateError:
            return
        assert fed.last_message() is not message or not named  # built again, or refused above


def test_a_message_is_fed_whole_only_while_the_machine_awaits_tools() -> None:
    m = LoopMachine()
    m.accept_input("go")
    results = Message(role=Role.USER, parts=(ToolResultPart(call_id="a", name="t", output="ok"),))
    assert m._feed_whole(results) is False
    assert m.full_history()[-1].text_content() == "go"


reply_calls = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["t", "u", "nope"]), st.integers(0, 1)),
    min_size=1,
    max_size=4,
    unique_by=lambda c: c[0],
)


@settings(max_examples=200)
@given(
    st.lists(reply_calls, min_size=1, max_size=5),
    st.sampled_from([None, 2, 3]),
    usages,
    st.none() | st.decimals(0, 5, places=2),
    st.sampled_from([None, ["t"]]),
)
def test_a_reply_counted_as_one_value_leaves_the_machine_as_the_two_steps_do(
    replies: list[list[tuple[str, str, int]]],
    loop_k: int | None,
    usage: Usage,
    cost: Decimal | None,
    repeatable: list[str] | None,
) -> None:
    """``model_response`` without limits (the reply and its calls counted as one ``RunUsage``) against the same
    replies with limits that never bind (``UsageLimits()``: the general path, ``with_reply`` then
    ``with_tool_calls``): the same machine but for its limits, turn by turn, loop detection on and off,
    unknown tools, invalid calls and repeated calls included."""

    def fed(limits: UsageLimits | None) -> list[Any]:
        m = LoopMachine()
        m.accept_input("go", limits=limits, loop_detection=loop_k)
        states = []
        for turn, calls in enumerate(replies):
            if m.state.value != "awaiting_model":
                break
            reply = Message(
                role=Role.ASSISTANT,
                parts=tuple(ToolCallPart(id=f"{turn}{i}", name=n, input={"v": v}) for i, n, v in calls),
            )
            invalid = [(f"{turn}{calls[0][0]}", "cut off")] if turn % 3 == 2 else []
            m.model_response(
                reply, ["t", "u"], 10 * turn, usage=usage, cost=cost, invalid_calls=invalid, repeatable=repeatable or ()
            )
            if m.state.value == "awaiting_tools":
                todo = [c for c in reply.tool_calls() if c.id not in m.held_results]
                m.tool_results(
                    [
                        Message(
                            role=Role.USER,
                            parts=tuple(ToolResultPart(call_id=c.id, name=c.name, output="r") for c in todo),
                        )
                    ]
                )
            doc = json.loads(m.to_json())
            doc.pop("limits")
            states.append((doc, m.usage, m.state, m.outcome))
        return states

    assert fed(None) == fed(UsageLimits())


@settings(max_examples=300)
@given(
    st.builds(
        RunUsage,
        st.integers(0, 9),
        st.integers(0, 9),
        st.integers(0, 99),
        st.integers(0, 99),
        st.none() | st.decimals(0, 9, places=3),
    ),
    usages,
    st.none() | st.decimals(0, 9, places=3),
    st.integers(0, 5),
)
def test_after_turn_is_with_reply_then_with_tool_calls(
    spent: RunUsage, usage: Usage, cost: Decimal | None, calls: int
) -> None:
    assert after_turn(spent, usage, cost, calls) == spent.with_reply(usage, cost).with_tool_calls(calls)


# --- a model call of one client without observers ---------------------------------------------------------


class _Flaky:
    """A client whose attempts fail as drawn (each reporting some usage before it fails, or none), then answer;
    priced per token."""

    provider = "flaky"
    model = "m"

    def __init__(self, plan: list[tuple[str, int | None]]) -> None:
        self.plan = list(plan)

    def price_usage(self, usage: Usage, model: str | None) -> Decimal | None:
        return None if usage.input_tokens == 13 else Decimal(usage.input_tokens or 0) / 100

    async def generate(self, request: Any, *, stream: bool = True, on_event: Any = None) -> ModelResponse:
        kind, tokens = self.plan.pop(0) if self.plan else ("ok", 3)
        if tokens is not None and on_event is not None:
            on_event(UsageReported(Usage(tokens, 1)))
        if kind == "retryable":
            raise RateLimited("slow down", retry_after=0)
        if kind == "fatal":
            raise ProviderError("broken")
        calls = len(request.messages) < 3
        message = (
            Message(role=Role.ASSISTANT, parts=(ToolCallPart(id="c", name="echo", input={"text": "x"}),))
            if calls
            else Message.assistant("done")
        )
        return ModelResponse(message, Usage(tokens, 2), model=None if tokens == 3 else "other")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["retryable", "fatal", "ok"]), st.none() | st.sampled_from([0, 5, 13])),
        max_size=6,
    ),
    st.integers(0, 3),
)
def test_a_model_call_of_one_client_is_what_the_general_call_makes(
    plan: list[tuple[str, int | None]], retries: int
) -> None:
    """Attempts drawn (retryable or fatal failures, each reporting usage before it fails or not, a usage of
    unknown price): the call without observers (``_call_one_client``) gives the same turns, usage, cost,
    outcome and error as the general ``_call_model`` (the same run watched by an observer)."""
    cfg = RunConfig(loop_detection=None, stream=False, max_retries=retries, retry_initial_delay=0, retry_max_delay=0)

    async def run(observers: list[Any]) -> Any:
        return await BareLoop(_Flaky(plan), [echo], observers=observers).run("go", cfg)  # type: ignore[arg-type]

    a, b = asyncio.run(run([])), asyncio.run(run([lambda event: None]))
    assert turn_records(a) == turn_records(b)
    assert (a.outcome, a.usage, a.output, type(a.error), str(a.error)) == (
        b.outcome,
        b.usage,
        b.output,
        type(b.error),
        str(b.error),
    )
    assert [(t.cost, t.usage) for t in a.turns] == [(t.cost, t.usage) for t in b.turns]


@pytest.mark.parametrize("names", [[""], ["t", ""], ["", "t"], ["t", "t"]], ids=["alone", "second", "first", "same_id"])
def test_a_reply_with_a_nameless_call_or_one_id_twice_is_refused_however_many_calls_it_has(names: list[str]) -> None:
    """One call is checked without the loop over ids (no id to see twice): a nameless call is refused alone as
    among others, and the machine is left as it was."""
    from loopctl.errors import ProviderProtocolError

    m = LoopMachine()
    m.accept_input("go")
    before = m.to_json()
    same = names == ["t", "t"]
    reply = Message(
        role=Role.ASSISTANT,
        parts=tuple(ToolCallPart(id="a" if same else f"c{i}", name=n, input={}) for i, n in enumerate(names)),
    )
    with pytest.raises(ProviderProtocolError, match="same id twice" if same else "no name"):
        m.model_response(reply, ["t"], 10)
    assert m.to_json() == before
