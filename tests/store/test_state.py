"""The state beside the head: a machine without its messages, read back exactly with them."""

from __future__ import annotations

import copy
import json

import orjson
import pytest

from loopctl.engine import LoopMachine, MachineState
from loopctl.errors import ConversationFileError
from loopctl.message import Message, Role, ToolCallPart
from loopctl.store import SessionState


def machines() -> list[LoopMachine]:
    start = LoopMachine([Message.user("old"), Message.assistant("reply")])
    model = LoopMachine([Message.user("old")])
    model.accept_input("new")
    tools = LoopMachine()
    tools.accept_input("go")
    tools.model_response(
        Message.new(
            Role.ASSISTANT, [ToolCallPart(id="a", name="ls", input={}), ToolCallPart(id="b", name="x", input={})]
        ),
        {"ls"},
        42,
    )
    done = LoopMachine()
    done.accept_input("go")
    done.model_response(Message.assistant("ok"), set(), 7)
    return [start, model, tools, done]


@pytest.mark.parametrize("machine", machines(), ids=lambda m: m.state.value)
def test_a_machine_without_its_messages_restores_exactly_with_them(machine: LoopMachine) -> None:
    doc = orjson.loads(machine.to_json(messages=False))
    assert (doc["history"], doc["pending"]) == (len(machine.history), len(machine.pending))
    restored = LoopMachine.from_json(machine.to_json(messages=False), messages=list(machine.full_history()))
    assert restored.to_json() == machine.to_json()
    state = SessionState.of(machine, model="m", root="/r", system_prompt="s", metadata={"a": 1})
    back = SessionState.from_bytes(state.to_bytes())
    assert back == state and back.message_count == len(machine.full_history())
    assert back.restore(list(machine.full_history())).to_json() == machine.to_json()
    assert back.in_flight is (machine.state not in (MachineState.START, MachineState.TERMINAL))


def test_messages_that_do_not_fit_the_lengths_are_refused() -> None:
    m = machines()[0]
    with pytest.raises(ConversationFileError, match="hold 2 messages, not the 1 given"):
        LoopMachine.from_json(m.to_json(messages=False), messages=[Message.user("x")])
    with pytest.raises(ConversationFileError, match="history must be a whole number"):
        LoopMachine.from_json(m.to_json(), messages=list(m.full_history()))


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        (b"[1]", "not a session state"),
        (b'{"kind":"loopctl-session-state","format_version":3,"machine":{}}', "format_version 3 is newer"),
        (b'{"kind":"loopctl-session-state","format_version":1,"machine":{"history":-1,"pending":0}}', "history"),
        (b'{"kind":"loopctl-session-state","format_version":1,"machine":[]}', "machine must be an object"),
    ],
)
def test_a_state_document_of_the_wrong_shape_is_refused(doc: bytes, problem: str) -> None:
    with pytest.raises(ConversationFileError, match=problem):
        SessionState.from_bytes(doc)


def _leaves(doc: object, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in _leaves(v, (*path, i))] or [path]
    return [path]


_JUNK = ["abc", "", "NaN", "-1", -1, 2**70, 1.5, True, None, [], {}, {"kind": "x"}]


def _with_limits() -> LoopMachine:
    from decimal import Decimal

    from loopctl.engine import UsageLimits

    m = LoopMachine()
    m.accept_input("go", limits=UsageLimits(requests=3, cost=Decimal("0.5")))
    m.model_response(Message.new(Role.ASSISTANT, [ToolCallPart(id="a", name="ls", input={})]), {"ls"}, 42)
    return m


def test_any_field_of_a_stored_state_changed_by_hand_is_refused_as_a_bad_file() -> None:
    # Issue 18, item 20: a cost limit that was not a number escaped as decimal.InvalidOperation. Whatever junk
    # any leaf of the machine holds, restoring either works or raises ConversationFileError naming the session.
    from loopctl.store.state import restore_checked

    tried = 0
    for m in [*machines(), _with_limits()]:
        original = orjson.loads(SessionState.of(m).to_bytes())
        for path in _leaves(original["machine"]):
            for junk in _JUNK:
                doc = copy.deepcopy(original)
                target = doc["machine"]
                for key in path[:-1]:
                    target = target[key]
                target[path[-1]] = junk
                source = None
                try:
                    state = SessionState.from_bytes(json.dumps(doc).encode(), source="s")
                    restore_checked(state, list(m.full_history()), source="s")
                except ConversationFileError as exc:
                    source = exc.source
                assert source in (None, "s"), (path, junk)
                tried += 1
    assert tried > 1000
