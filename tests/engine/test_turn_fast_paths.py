"""The second round of per-turn shortcuts (docs/performance.md, section 7) give exactly what the general
paths give: the prefix watch over a machine's view, a tool call stepped by hand instead of awaited under a
timer, the results message the machine keeps as given, a run without observers (no ToolContext for a tool
that takes none)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopctl.engine import BareLoop, RunConfig, SessionConfig, ToolCallRecord
from loopctl.engine.machine import LoopMachine
from loopctl.errors import MachineStateError
from loopctl.message import Message, MessageView, Role, TextPart, ToolCallPart, ToolResultPart
from loopctl.providers.cache import PrefixWatch
from loopctl.testing import ScriptedClient
from loopctl.tool import FunctionTool, ModelRetry, ToolContext, tool
from tests.engine.turns import turn_records

# --- the prefix watch ------------------------------------------------------------------------------------

MESSAGES = [Message.user(f"m{i}") for i in range(6)]


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from(["grow", "new_list", "cut", "change"]), st.integers(0, 5)), max_size=12))
def test_a_view_of_the_same_list_is_judged_as_the_list_it_shows(ops: list[tuple[str, int]]) -> None:
    """One watch is fed machine views (the O(1) test), another the same messages as plain lists: the same
    bust, or none, every time."""
    by_view, by_list = PrefixWatch(), PrefixWatch()
    items: list[Message] = [MESSAGES[0]]
    for op, k in ops:
        if op == "grow":
            items.append(MESSAGES[k])  # an append: views handed out before stay snapshots
        elif op == "new_list":
            items = list(items)  # what a prune pass does: another list, the same messages
        elif op == "cut" and items:
            items = items[: k % len(items)]  # what a salvage does: a new, shorter list
        elif op == "change" and items:
            items = [*items[:-1], Message.user(f"changed {k}")]
        view = MessageView(items, len(items))
        assert by_view.check(view, "s", ()) == by_list.check(list(view), "s", ())


def test_the_same_tools_object_is_not_compared_again() -> None:
    watch = PrefixWatch()
    tools = ("a", "b")
    assert watch.check([], None, tools) is None
    assert watch.check([], None, tools) is None
    bust = watch.check([], None, ("a",))
    assert bust is not None and bust.what == "tools"


# --- a tool call stepped by hand -------------------------------------------------------------------------


class _NotACoroutine:
    """An awaitable that is not a coroutine: the driver awaits it under asyncio.timeout (the general path)."""

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro

    def __await__(self) -> Generator[Any, Any, Any]:
        return self._coro.__await__()


class _General:
    """A tool whose call returns a _NotACoroutine around the wrapped tool's call."""

    def __init__(self, inner: FunctionTool[Any]) -> None:
        self.inner = inner
        self.name, self.description, self.input_schema = inner.name, inner.description, inner.input_schema

    def call(self, input: Any, context: ToolContext[Any]) -> Awaitable[Any]:
        return _NotACoroutine(self.inner.call(input, context))


async def _quick() -> str:
    """A tool body."""
    return "done at once"


async def _after_a_step() -> str:
    """A tool body."""
    await asyncio.sleep(0)
    return "done after a step"


async def _too_slow() -> str:
    """A tool body."""
    await asyncio.sleep(10)
    return "never"


async def _raises() -> str:
    """A tool body."""
    raise ValueError("broken")


async def _retry_after_a_step() -> str:
    """A tool body."""
    await asyncio.sleep(0)
    raise ModelRetry("try again")


async def _swallows_the_timeout() -> str:
    """A tool body."""
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        return "caught"
    return "never"


async def _waits_on_a_future() -> str:
    """A tool body."""
    future = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(future.set_result, "from a future")
    return str(await future)


async def _many_steps() -> str:
    """A tool body."""
    for _ in range(5):
        await asyncio.sleep(0)
    return "five steps"


async def _timeout_of_its_own() -> str:
    """A tool body."""
    raise TimeoutError("its own")


async def _reads_the_handled_exception_after_swallowing() -> str:
    """A tool body."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(10)
    return repr(sys.exc_info()[0])  # nothing is being handled here: None, as under an await


async def _raises_after_swallowing() -> str:
    """A tool body."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(10)
    raise ValueError("after")  # raised outside any handler: no __context__, as under an await


BODIES = [
    _reads_the_handled_exception_after_swallowing,
    _raises_after_swallowing,
    _quick,
    _after_a_step,
    _too_slow,
    _raises,
    _retry_after_a_step,
    _swallows_the_timeout,
    _waits_on_a_future,
    _many_steps,
    _timeout_of_its_own,
]


async def _execute(t: Any, timeout: float | None) -> tuple[str, bool | None, str | None, str | None]:
    """The call's result text, its is_error, the type of the error it raised and of that error's
    ``__context__`` (what a traceback prints as "During handling of the above exception...")."""
    loop = BareLoop(ScriptedClient([]), [])
    call = ToolCallPart(id="c1", name=t.name, input={})
    context: ToolContext[Any] = ToolContext("c1", t.name)
    result, error = await loop._execute(t, call, {}, RunConfig(tool_timeout=timeout), context)
    if error is None:
        return str(result.output), result.is_error, None, None
    during = type(error.__context__).__name__ if error.__context__ is not None else None
    return str(result.output), result.is_error, type(error).__name__, during


# Without a timeout these would only sleep 10 s (twice): they are compared with one.
WAITS_FOR_ITS_TIMEOUT = (
    _too_slow,
    _swallows_the_timeout,
    _reads_the_handled_exception_after_swallowing,
    _raises_after_swallowing,
)


@pytest.mark.parametrize(
    ("body", "timeout"),
    [(b, t) for t in (0.05, None) for b in BODIES if t is not None or b not in WAITS_FOR_ITS_TIMEOUT],
    ids=lambda v: v.__name__ if callable(v) else str(v),
)
def test_a_call_stepped_by_hand_ends_as_an_awaited_one(body: Callable[[], Any], timeout: float | None) -> None:
    t = FunctionTool(body, name="t")
    assert asyncio.run(_execute(t, timeout)) == asyncio.run(_execute(_General(t), timeout))


def test_a_quick_call_needs_no_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[float] = []
    real = asyncio.timeout_at

    def counting(when: float | None) -> Any:
        made.append(0.0)
        return real(when)

    monkeypatch.setattr(asyncio, "timeout_at", counting)
    assert asyncio.run(_execute(FunctionTool(_quick, name="t"), 5.0))[0] == "done at once"
    assert made == []
    assert asyncio.run(_execute(FunctionTool(_after_a_step, name="t"), 5.0))[0] == "done after a step"
    assert len(made) == 1


def test_a_cancelled_run_cancels_a_call_that_waits() -> None:
    seen: list[str] = []

    @tool
    async def wait() -> str:
        """Waits."""
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "never"

    async def main() -> str:
        cancel = asyncio.Event()
        script = [Message(role=Role.ASSISTANT, parts=(ToolCallPart(id="c1", name="wait", input={}),))]
        loop = BareLoop(ScriptedClient(script), [wait])
        asyncio.get_running_loop().call_later(0.05, cancel.set)
        run = await loop.run("go", RunConfig(tool_timeout=5.0), cancel=cancel)
        return run.outcome.kind.value

    assert asyncio.run(main()) == "cancelled"
    assert seen == ["cancelled"]


# --- the results message kept as given -------------------------------------------------------------------

ids = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True)


def awaiting_tools(calls: list[str]) -> LoopMachine:
    """A machine whose reply called the tool ``t`` under each of ``calls``' ids, awaiting their results."""
    m = LoopMachine()
    m.accept_input("go", loop_detection=None)
    reply = Message(role=Role.ASSISTANT, parts=tuple(ToolCallPart(id=c, name="t", input={}) for c in calls))
    m.model_response(reply, ["t"], 10)
    return m


@settings(max_examples=200)
@given(ids, st.data())
def test_the_results_message_kept_as_given_is_the_one_built(calls: list[str], data: st.DataObject) -> None:
    answered = data.draw(st.lists(st.sampled_from([*calls, "x"]), max_size=4))
    named = data.draw(st.booleans())
    text = data.draw(st.booleans())
    parts: list[Any] = [ToolResultPart(call_id=c, name="t" if named else "", output=f"r{c}") for c in answered]
    if text:
        parts.append(TextPart(text="and"))
    message = Message(role=Role.USER, parts=tuple(parts))

    fast, general = awaiting_tools(calls), awaiting_tools(calls)
    outcomes = []
    for m, given_as in ((fast, [message]), (general, (message,))):  # a tuple never takes the shortcut
        try:
            m.tool_results(given_as, 20)
            outcomes.append(m.to_json())
        except MachineStateError as exc:
            outcomes.append(f"refused: {exc}")
            assert m.to_json() == awaiting_tools(calls).to_json()  # left as it was
    assert outcomes[0] == outcomes[1]


def test_the_message_given_is_the_one_kept() -> None:
    m = LoopMachine()
    m.accept_input("go")
    m.model_response(Message(role=Role.ASSISTANT, parts=(ToolCallPart(id="a", name="t", input={}),)), ["t"], 1)
    results = Message(role=Role.USER, parts=(ToolResultPart(call_id="a", name="t", output="ok"),))
    m.tool_results([results])
    assert m.last_message() is results
    assert m.results_of(m.full_history()[-2]) is results


# --- a run without observers -----------------------------------------------------------------------------


def _script() -> list[Message]:
    def calls(*parts: ToolCallPart) -> Message:
        return Message(role=Role.ASSISTANT, parts=parts)

    return [
        calls(ToolCallPart(id="c1", name="plain", input={"text": "one"})),
        calls(
            ToolCallPart(id="c2", name="plain", input={"text": "two"}),
            ToolCallPart(id="c3", name="with_context", input={"n": 2}),
            ToolCallPart(id="c4", name="plain", input={"text": 3}),  # not a str: the input model refuses it
        ),
        calls(ToolCallPart(id="c5", name="plain", input={"text": "x" * 50})),
        Message.assistant("done"),
    ]


@tool
async def plain(text: str) -> str:
    """Echo."""
    return text.upper()


@tool
async def with_context(ctx: ToolContext[Any], n: int) -> str:
    """Reads its context."""
    ctx.report_progress(1, 2, "half")
    return f"{ctx.call_id} turn {ctx.turn} n {n}"


@pytest.mark.parametrize("dispatch", ["parallel", "sequential"])
async def test_a_run_without_observers_records_what_a_run_with_them_records(dispatch: Any) -> None:
    events: list[Any] = []
    cfg = RunConfig(tool_dispatch=dispatch, max_tool_output_chars=20, loop_detection=None)
    config = SessionConfig(context_window=100_000)
    quiet = BareLoop(ScriptedClient(_script()), [plain, with_context], config)
    watched = BareLoop(ScriptedClient(_script()), [plain, with_context], config, observers=[events.append])
    a, b = await quiet.run("go", cfg), await watched.run("go", cfg)
    assert [m.to_dict() for m in a.messages] == [m.to_dict() for m in b.messages]
    assert turn_records(a) == turn_records(b)
    assert (a.output, a.outcome, a.usage) == (b.output, b.outcome, b.usage)
    assert any(type(e).__name__ == "ToolProgress" for e in events)
    assert quiet.machine.context_tokens == watched.machine.context_tokens


def test_the_first_text_result_of_a_process_builds_its_model() -> None:
    """A text result is validated straight through pydantic-core once ToolContent is built (defer_build); the
    first of a fresh process builds it through the constructor, from any stack depth."""
    import subprocess
    import sys

    code = (
        "import asyncio\n"
        "from loopctl.message.model import ToolContent\n"
        "from loopctl.engine import BareLoop, RunConfig\n"
        "from loopctl.message import Message, Role, ToolCallPart\n"
        "from loopctl.testing import ScriptedClient\n"
        "from loopctl.tool import tool\n"
        "@tool\n"
        "async def echo(text: str) -> str:\n"
        "    '''Echo.'''\n"
        "    return text\n"
        "script = [Message(role=Role.ASSISTANT, parts=(ToolCallPart(id='c', name='echo', input={'text': 'hi'}),)), 'ok']\n"
        "assert not ToolContent.__pydantic_complete__\n"
        "run = asyncio.run(BareLoop(ScriptedClient(script), [echo]).run('go', RunConfig(stream=False)))\n"
        "print(run.turns[0].tool_calls[0].result.output.root, ToolContent.__pydantic_complete__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["hi", "True"]


# --- the turn's records when the machine kept the results message given ------------------------------------


class _BuildsItsOwn(LoopMachine):
    """A machine that never keeps the results message given: it builds its own (``_commit_results``), so the
    driver's general path (``settle``: the records made from the message the machine committed) runs."""

    def _commit_one(self, message: Any) -> bool:  # what _commit_whole and _feed_whole keep a message by
        return False


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from(["plain", "with_context", "bad", "unknown"]), min_size=1, max_size=3), max_size=4
    ),
    st.sampled_from(["parallel", "sequential"]),
)
def test_the_records_of_a_turn_kept_whole_are_those_settle_makes(replies: list[list[str]], dispatch: Any) -> None:
    """A turn whose results message the machine kept as given gets its records at once (the records made for
    its calls, as they are): the same turns, records, messages and context size as the general path, which
    reads them back from the message the machine committed. Replies drawn: each call a plain tool, one that
    reads its context, bad input (the input model refuses it) or an unknown tool (the machine answers it)."""
    inputs = {"plain": {"text": "a"}, "with_context": {"n": 1}, "bad": {"text": 3}, "unknown": {}}
    script: list[Any] = []
    for r, kinds in enumerate(replies):
        parts = tuple(
            ToolCallPart(
                id=f"c{r}_{i}", name="nope" if k == "unknown" else "plain" if k == "bad" else k, input=inputs[k]
            )
            for i, k in enumerate(kinds)
        )
        script.append(Message(role=Role.ASSISTANT, parts=parts))
    script.append(Message.assistant("done"))
    cfg = RunConfig(tool_dispatch=dispatch, loop_detection=None, stream=False)
    config = SessionConfig(context_window=100_000)

    async def both() -> tuple[Any, Any, BareLoop, BareLoop]:
        fast = BareLoop(ScriptedClient(list(script)), [plain, with_context], config)
        general = BareLoop.from_machine(_BuildsItsOwn(), ScriptedClient(list(script)), [plain, with_context], config)
        return await fast.run("go", cfg), await general.run("go", cfg), fast, general

    a, b, fast, general = asyncio.run(both())
    assert [m.to_dict() for m in a.messages] == [m.to_dict() for m in b.messages]
    assert turn_records(a) == turn_records(b)
    assert (a.output, a.outcome, a.usage) == (b.output, b.outcome, b.usage)
    assert fast.machine.context_tokens == general.machine.context_tokens
    for turn, nxt in zip(a.turns, a.turns[1:], strict=False):  # each turn's records answer its calls, in order
        assert [r.call for r in turn.tool_calls] == list(turn.output.tool_calls())
        assert nxt.input[0].parts == tuple(r.result for r in turn.tool_calls)


class _Replayed(BareLoop):
    """A driver whose batches come back as a durable engine replays them: records read back from JSON, each
    holding an equal copy of its call."""

    async def _run_tools(self, step: Any, *args: Any, **kwargs: Any) -> Any:
        done = await super()._run_tools(step, *args, **kwargs)
        return [ToolCallRecord(r.call.model_copy(), r.result, r.duration, r.ran, r.spent, r.error) for r in done]


@pytest.mark.parametrize("machine", [LoopMachine, _BuildsItsOwn])
async def test_records_holding_copies_of_their_calls_take_the_general_path(machine: type[LoopMachine]) -> None:
    """A record whose call is a copy (equal, another object) is recorded with the reply's own call, as
    ``settle`` records it: the turn's records hold the reply's call objects whichever path made them."""
    script = [
        Message(
            role=Role.ASSISTANT,
            parts=(
                ToolCallPart(id="a", name="plain", input={"text": "one"}),
                ToolCallPart(id="b", name="plain", input={"text": "two"}),
            ),
        ),
        Message.assistant("done"),
    ]
    loop = _Replayed.from_machine(machine(), ScriptedClient(script), [plain])
    run = await loop.run("go", RunConfig(loop_detection=None, stream=False))
    (turn, _) = run.turns
    assert [r.result.output.root for r in turn.tool_calls] == ["ONE", "TWO"]
    assert all(r.call is c for r, c in zip(turn.tool_calls, turn.output.tool_calls(), strict=True))


@settings(max_examples=25, deadline=None)
@given(
    reports=st.lists(st.integers(1, 50_000), min_size=2, max_size=14),
    outputs=st.lists(st.none() | st.integers(0, 3_000), min_size=14, max_size=14),
    system=st.none() | st.text(min_size=1, max_size=30),
)
def test_the_context_after_each_reply_is_the_count_of_the_history(
    reports: list[int], outputs: list[int | None], system: str | None
) -> None:
    """After every reply, calibrating or not (the reports drift: each one calibrates when the history grew by a
    quarter), the run's context size is what its counter counts of the whole history: the size the engine
    keeps after a calibration is the report plus the reply, without a second count of the history."""
    from loopctl.response import ModelResponse, StopReason, Usage

    seen: list[tuple[int, int]] = []
    holder: list[BareLoop] = []

    def reply(request: Any) -> ModelResponse:
        loop = holder[0]
        if len(request.messages) > 1:  # the context after the previous reply, against a fresh count of it
            seen.append((loop._machine.context_tokens, loop._counter.count(loop._machine.full_history())))
        i = (len(request.messages) - 1) // 2
        usage = Usage(input_tokens=reports[i], output_tokens=outputs[i])
        if i + 1 < len(reports):
            msg = Message(role=Role.ASSISTANT, parts=(ToolCallPart(id=f"c{i}", name="plain", input={"text": "t" * i}),))
            return ModelResponse(msg, usage, StopReason.TOOL_CALL)
        return ModelResponse(Message.assistant("done"), usage, StopReason.END_TURN)

    loop = BareLoop(ScriptedClient(reply), [plain], SessionConfig(system_prompt=system))
    holder.append(loop)
    run = asyncio.run(loop.run("go", RunConfig(loop_detection=None)))
    assert run.output == "done"
    assert len(seen) == len(reports) - 1
    assert all(kept == counted for kept, counted in seen), seen


@settings(max_examples=20, deadline=None)
@given(outputs=st.lists(st.integers(0, 3_000), min_size=4, max_size=4), growth=st.integers(2, 6))
def test_the_context_after_a_reply_given_twice_is_the_count_of_the_history(outputs: list[int], growth: int) -> None:
    """A script that gives one reply object again and again (its call answered each time: the id may be used
    again in a later turn): each calibration measures the reply while it is also one of the messages sent. The
    context the run keeps after each reply (the report plus the reply, without a count) is what the counter
    counts of the whole history, as when each reply is another object."""
    from loopctl.response import ModelResponse, StopReason, Usage

    again = Message(role=Role.ASSISTANT, parts=(ToolCallPart(id="c1", name="plain", input={"text": "t" * 300}),))
    seen: list[tuple[int, int]] = []
    holder: list[BareLoop] = []

    def reply(request: Any) -> ModelResponse:
        loop = holder[0]
        if len(request.messages) > 1:
            seen.append((loop._machine.context_tokens, loop._counter.count(loop._machine.full_history())))
        i = len(seen)
        usage = Usage(input_tokens=100 * growth**i, output_tokens=outputs[i])  # drifts: each one calibrates
        if i < 3:
            return ModelResponse(again, usage, StopReason.TOOL_CALL)
        return ModelResponse(Message.assistant("done"), usage, StopReason.END_TURN)

    loop = BareLoop(ScriptedClient(reply), [plain])
    holder.append(loop)
    run = asyncio.run(loop.run("go", RunConfig(loop_detection=None)))
    assert run.output == "done"
    assert len(seen) == 3
    assert all(kept == counted for kept, counted in seen), seen
