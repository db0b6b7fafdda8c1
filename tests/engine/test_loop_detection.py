"""Loop detection: the same tool call ``k`` times in a row gets an error result (the soft stop), once more
ends the run (``LOOP_DETECTED``); configurable, off with ``None``; the output tool's calls never count."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from loopctl.engine import BareLoop, LoopMachine, MachinePolicy, OutcomeKind, RunConfig
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


async def test_repeats_within_one_reply_count_in_order() -> None:
    three = Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"p{i}", "read", {"path": "x"}) for i in range(3)])
    loop = BareLoop(ScriptedClient([three, "ok"]), [read])
    run = await loop.run("read x three times")
    assert run.ok and ran == ["x", "x"]
    assert [r.is_error for r in results(list(loop.history))] == [False, False, True]


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
