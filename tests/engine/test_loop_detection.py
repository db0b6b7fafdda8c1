"""Loop detection: the same tool call ``k`` times in a row gets an error result (the soft stop), once more
ends the run (``LOOP_DETECTED``); configurable, off with ``None``; the output tool's calls never count."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from loopctl.engine import BareLoop, LoopMachine, MachinePolicy, OutcomeKind, RunConfig, UsageLimits
from loopctl.errors import LoopDetected
from loopctl.message import Message, MessagePart, Role, ToolResultPart, check_conversation
from loopctl.testing import ScriptedClient
from loopctl.tool import tool

ran: list[str] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


@tool
async def read(path: str, lines: int = 10) -> str:
    """Read a file."""
    ran.append(path)
    return f"contents of {path}"


def call(i: int, path: str = "a.txt", **extra: Any) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"c{i}", "read", {"path": path, **extra})])


def results(history: list[Message]) -> list[ToolResultPart]:
    return [p for m in history for p in m.parts if isinstance(p, ToolResultPart)]


async def test_the_third_repeat_gets_an_error_and_the_fourth_ends_the_run() -> None:
    client = ScriptedClient([call(i) for i in range(1, 10)])
    loop = BareLoop(client, [read])
    run = await loop.run("read a.txt")
    assert ran == ["a.txt", "a.txt"]  # the third identical call did not run
    assert client.calls == 4
    assert run.outcome.kind is OutcomeKind.LOOP_DETECTED
    assert run.outcome.error == (
        "the model called 'read' with the same input 4 times in a row (loop detection allows 2, then answers the 3rd "
        "with an error)"
    )
    # What the model read after the third call (the soft stop):
    third = results(list(loop.history))[2]
    assert third.is_error and str(third.output).startswith("Not run: this is the 3rd call in a row of 'read'")
    # The fourth reply, which would have repeated it, is dropped; the history is coherent.
    assert check_conversation(list(loop.history)) == []
    assert len(results(list(loop.history))) == 3
    assert [r.ran for t in run.turns for r in t.tool_calls] == [True, True, False]
    with pytest.raises(LoopDetected):
        run.raise_for_outcome()


async def test_a_model_that_changes_course_after_the_soft_stop_goes_on() -> None:
    client = ScriptedClient([call(1), call(2), call(3), call(4, "b.txt"), call(5), "done"])
    run = await BareLoop(client, [read]).run("read")
    assert run.ok
    assert ran == ["a.txt", "a.txt", "b.txt", "a.txt"]  # a different call starts the count again


async def test_the_same_input_in_another_key_order_is_the_same_call() -> None:
    a = Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "read", {"path": "a.txt", "lines": 5})])
    b = Message.new(Role.ASSISTANT, [MessagePart.tool_call("c2", "read", {"lines": 5, "path": "a.txt"})])
    c = Message.new(Role.ASSISTANT, [MessagePart.tool_call("c3", "read", {"path": "a.txt", "lines": 5})])
    run = await BareLoop(ScriptedClient([a, b, c, "ok"]), [read]).run("read")
    assert run.ok and ran == ["a.txt", "a.txt"]


def same_call_times(n: int, turn: int = 0, path: str = "x") -> Message:
    """One reply making the same call ``n`` times (ids ``p<turn>_<i>``), as small models do."""
    return Message.new(
        Role.ASSISTANT, [MessagePart.tool_call(f"p{turn}_{i}", "read", {"path": path}) for i in range(n)]
    )


async def test_the_same_call_four_times_in_one_reply_runs_once_and_the_run_goes_on() -> None:
    # Issue 18, item 26: the calls of one reply counted "in a row", so a small model that put the same call
    # four times in its first reply got loop_detected at once, and no tool ever ran.
    loop = BareLoop(ScriptedClient([same_call_times(4), "ok"]), [read])
    run = await loop.run("read x")
    assert (run.outcome.kind, run.output) == (OutcomeKind.COMPLETED, "ok")
    assert ran == ["x"]  # run once
    answers = results(list(loop.history))
    assert [(str(r.output), r.is_error) for r in answers] == [("contents of x", False)] + [
        (
            "Not run: this reply already calls 'read' with the same input (call p0_0); a reply's identical calls "
            "run once, and that call's result answers this one too.",
            True,
        )
    ] * 3
    assert [r.ran for r in run.turns[0].tool_calls] == [True, False, False, False]
    assert check_conversation(list(loop.history)) == []


async def test_a_reply_of_duplicates_counts_as_one_attempt_so_loops_are_caught_across_turns() -> None:
    client = ScriptedClient([same_call_times(4, turn) for turn in range(6)])
    loop = BareLoop(client, [read])
    run = await loop.run("read x")
    # turns 1 and 2 run the call once each, turn 3 gets the soft stop, turn 4 ends the run: as single calls do
    assert ran == ["x", "x"]
    assert client.calls == 4
    assert run.outcome.kind is OutcomeKind.LOOP_DETECTED
    assert run.outcome.error == (
        "the model called 'read' with the same input 4 times in a row (loop detection allows 2, then answers the 3rd "
        "with an error)"
    )


async def test_different_calls_in_one_reply_each_run_and_count_in_order() -> None:
    mixed = Message.new(
        Role.ASSISTANT,
        [
            MessagePart.tool_call("a", "read", {"path": "x"}),
            MessagePart.tool_call("b", "read", {"path": "y"}),
            MessagePart.tool_call("c", "read", {"path": "x"}),
        ],
    )
    run = await BareLoop(ScriptedClient([mixed, "ok"]), [read]).run("read")
    assert run.ok
    assert ran == ["x", "y"]  # c repeats a within the reply: answered, not run
    assert [r.ran for r in run.turns[0].tool_calls] == [True, True, False]


async def test_a_repeatable_tools_identical_calls_in_one_reply_each_run() -> None:
    rolled: list[int] = []

    @tool(repeatable=True)
    async def roll() -> int:
        """Roll a die."""
        rolled.append(len(rolled) + 1)
        return len(rolled)

    twice = Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"r{i}", "roll", {}) for i in range(2)])
    run = await BareLoop(ScriptedClient([twice, "ok"]), [roll]).run("roll two dice")
    assert run.ok and rolled == [1, 2]


async def test_with_loop_detection_off_every_call_of_a_reply_runs() -> None:
    run = await BareLoop(ScriptedClient([same_call_times(3), "ok"]), [read]).run(
        "read", RunConfig(loop_detection=None)
    )
    assert run.ok and ran == ["x", "x", "x"]


async def test_duplicates_in_one_reply_do_not_count_against_the_tool_call_limit() -> None:
    run = await BareLoop(ScriptedClient([same_call_times(4), "ok"]), [read]).run(
        "read", RunConfig(limits=UsageLimits(tool_calls=1))
    )
    assert run.ok and ran == ["x"]
    assert run.turns[-1].output.text_content() == "ok"


async def test_k_is_configurable_and_none_turns_it_off() -> None:
    run = await BareLoop(ScriptedClient([call(i) for i in range(1, 5)]), [read]).run(
        "read", RunConfig(loop_detection=2)
    )
    assert run.outcome.kind is OutcomeKind.LOOP_DETECTED and ran == ["a.txt"]  # 1 runs, 2 soft, 3 ends
    ran.clear()
    script = [call(i) for i in range(1, 11)] + ["done"]
    run = await BareLoop(ScriptedClient(script), [read]).run("read", RunConfig(loop_detection=None))
    assert run.ok and ran == ["a.txt"] * 10
    with pytest.raises(ValueError, match="loop_detection must be at least 2"):
        await BareLoop(ScriptedClient(["x"]), [read]).run("read", RunConfig(loop_detection=1))


class City(BaseModel):
    name: str


async def test_the_output_tools_calls_never_count_as_a_loop() -> None:
    bad = [Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"f{i}", "final_result", {"name": 3})]) for i in range(5)]
    good = Message.new(Role.ASSISTANT, [MessagePart.tool_call("f9", "final_result", {"name": "Oslo"})])
    run = await BareLoop(ScriptedClient([*bad, good])).run("a city", RunConfig(output_retries=5), output_type=City)
    assert run.ok and run.output == City(name="Oslo")


def test_a_restored_machine_keeps_its_count() -> None:
    m = LoopMachine()
    m.accept_input("read")
    policy = MachinePolicy()
    for i in (1, 2):
        m.next_step(policy)
        m.model_response(call(i), {"read"}, 10)
        m.next_step(policy)
        m.tool_results([Message(role=Role.USER, parts=(MessagePart.tool_result(f"c{i}", "read", "ok"),))])
    restored = LoopMachine.from_json(m.to_json())
    restored.next_step(policy)
    restored.model_response(call(3), {"read"}, 10)
    # The third in a row, counted across the restore: answered by the machine, nothing to run.
    assert restored.pending[-1].role is Role.USER and restored.pending[-1].parts[0].is_error  # type: ignore[union-attr]
    restored.next_step(policy)
    restored.model_response(call(4), {"read"}, 10)
    assert restored.outcome.kind is OutcomeKind.LOOP_DETECTED


def test_an_older_machine_file_resumes_without_loop_detection() -> None:
    from pathlib import Path

    text = (Path(__file__).parent.parent / "fixtures" / "machines" / "v2-awaiting-tools.json").read_text()
    m = LoopMachine.from_json(text)
    assert m.to_json().count('"loop":{"k":null') == 1  # the run started before loop detection existed


@pytest.mark.parametrize("k", [3.0, 2.5, True, "3"])
def test_a_k_that_is_not_a_whole_number_is_refused_where_it_is_given(k: Any) -> None:
    with pytest.raises(ValueError, match="loop_detection must be a whole number"):
        RunConfig(loop_detection=k)
    m = LoopMachine()
    with pytest.raises(ValueError, match="loop_detection must be a whole number"):
        m.accept_input("read", loop_detection=k)
    assert m.state.value == "start" and list(m.pending) == []  # as it was


_ints = st.integers(min_value=0, max_value=2**70)  # UsageLimits refuses negative counts itself
_settings = st.one_of(st.none(), st.integers(-3, 2**70), st.floats(), st.booleans(), st.text(max_size=3))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    k=_settings,
    limits=st.one_of(
        st.none(),
        st.builds(
            UsageLimits,
            requests=st.one_of(st.none(), _ints),
            tool_calls=st.one_of(st.none(), _ints),
            input_tokens=st.one_of(st.none(), _ints),
            cost=st.one_of(st.none(), st.decimals(min_value=0, allow_nan=False, allow_infinity=False, places=6)),
        ),
        st.just({"requests": 3}),
    ),
)
def test_whatever_a_run_accepts_its_machine_file_loads(k: Any, limits: Any) -> None:
    # A run paused for approval is saved and loaded by another process: the file its run wrote must load.
    try:
        cfg = RunConfig(loop_detection=k, limits=limits)
    except ValueError:
        return  # refused where it was given: nothing was saved
    m = LoopMachine()
    m.accept_input("read", limits=cfg.limits, loop_detection=cfg.loop_detection)
    m.model_response(call(1), ["read"], 10)
    again = LoopMachine.from_json(m.to_json())
    assert again.to_json() == m.to_json()


async def test_the_soft_stop_says_only_what_was_compared() -> None:
    loop = BareLoop(ScriptedClient([call(i) for i in range(1, 4)] + ["done"]), [read])
    await loop.run("read")
    soft = results(list(loop.history))[2]
    assert soft.is_error and str(soft.output) == (
        "Not run: this is the 3rd call in a row of 'read' with the same input (loop detection compares the "
        "calls, not their results). Do something different; calling it again this way ends the run."
    )
    assert "did not change" not in str(soft.output)


progress = ["queued", "running 40%", "running 80%", "passed", "passed"]


@tool(repeatable=True)
async def build_status(build_id: str) -> str:
    """The CI build's status."""
    ran.append(build_id)
    return progress[len(ran) - 1]


def poll(i: int) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"p{i}", "build_status", {"build_id": "42"})])


async def test_a_repeatable_tool_is_polled_as_often_as_the_model_likes() -> None:
    loop = BareLoop(ScriptedClient([poll(i) for i in range(5)] + ["The build passed."]), [build_status])
    run = await loop.run("Wait for build 42.")
    assert run.ok and run.output == "The build passed." and ran == ["42"] * 5
    assert [str(r.output) for r in results(list(loop.history))] == progress


async def test_a_repeatable_call_between_two_others_starts_their_count_again() -> None:
    script = [call(1), call(2), poll(1), call(3), call(4), "done"]
    loop = BareLoop(ScriptedClient(script), [read, build_status])
    run = await loop.run("read while polling")
    assert run.ok and not any(r.is_error for r in results(list(loop.history)))
