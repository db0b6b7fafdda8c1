"""The approval binding both durable engines share (``loopctl.durable.approvals``): the JSON forms of keys,
awaited calls and bound decisions round-trip exactly, and the rules of which decision answers which wait.
Pure: no engine."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopctl.durable._payloads import dumps, loads
from loopctl.durable.approvals import (
    ApprovalKey,
    AwaitedCall,
    admit,
    awaited_from_dict,
    awaited_to_dict,
    awaiting,
    bind,
    bound_to_dict,
    read_decisions,
)
from loopctl.engine import Approve, Deny, Modify, PendingApproval
from loopctl.errors import ApprovalError
from loopctl.message import ToolCallPart
from loopctl.tool import ToolRegistry, tool
from tests.strategies import call_id, json_object, short_text, wide_json_value

keys = st.builds(ApprovalKey, run=short_text, turn=st.integers(1, 2**40), call=call_id)
decisions = st.one_of(st.just(Approve()), st.builds(Deny, short_text), st.builds(Modify, wide_json_value))


@given(key=keys)
def test_a_key_round_trips_through_json(key: ApprovalKey) -> None:
    assert ApprovalKey.from_dict(loads(dumps(key.to_dict()))) == key


@given(key=keys, tool_input=json_object, reason=st.none() | short_text)
def test_an_awaited_call_round_trips_through_json(key: ApprovalKey, tool_input: Any, reason: str | None) -> None:
    awaited = AwaitedCall(ToolCallPart(id=key.call, name="send", input=tool_input), reason, key=key)
    back = awaited_from_dict(loads(dumps(awaited_to_dict(awaited))))
    assert back == awaited
    assert isinstance(back, PendingApproval) and back.key == key


@given(pairs=st.lists(st.tuples(keys, decisions), max_size=5, unique_by=lambda p: p[0].call))
def test_bound_decisions_round_trip_through_json(pairs: list[tuple[ApprovalKey, Any]]) -> None:
    bound = dict(pairs)
    entries, problems = read_decisions(loads(dumps(bound_to_dict(bound))))
    assert problems == []
    assert {key: decision for _, decision, key in entries} == bound
    assert all(key is not None and call == key.call for call, _, key in entries)


def test_a_message_from_anyone_is_read_entry_by_entry() -> None:
    entries, problems = read_decisions(
        {
            "a": {"decision": "approve", "run": "r", "turn": 2},
            "b": {"decision": "deny", "reason": "no"},  # names no wait
            "c": {"decision": "maybe"},
            "d": {"decision": "approve", "run": "r", "turn": "2"},
            "e": {"decision": "approve", "run": "r", "turn": True},
        }
    )
    assert entries == [("a", Approve(), ApprovalKey("r", 2, "a")), ("b", Deny("no"), None)]
    assert len(problems) == 3 and "'c'" in problems[0] and "'d'" in problems[1] and "'e'" in problems[2]
    assert read_decisions(["not", "an", "object"]) == ([], ["approvals must be a JSON object of call ids, got list"])


@tool
def send(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


TOOLS = ToolRegistry([send])
REPEATED = "call_chatcmpl_0"


def _awaited(run: str, turn: int, *ids: str) -> tuple[AwaitedCall, ...]:
    return tuple(
        AwaitedCall(ToolCallPart(id=i, name="send", input={"to": "a@example.com"}), None, key=ApprovalKey(run, turn, i))
        for i in ids
    )


def test_a_call_id_binds_to_the_wait_the_run_is_in_and_a_key_to_the_wait_it_names() -> None:
    now = _awaited("wf-1", 3, REPEATED, "call_chatcmpl_1")
    assert bind({REPEATED: Approve()}, now, TOOLS, "wf-1") == {ApprovalKey("wf-1", 3, REPEATED): Approve()}
    assert bind({now[1].key: Deny("no")}, now, TOOLS, "wf-1") == {now[1].key: Deny("no")}
    with pytest.raises(ApprovalError, match=r"does not await call 'call_chatcmpl_0' of turn 1 of run 'wf-1'"):
        bind({ApprovalKey("wf-1", 1, REPEATED): Approve()}, now, TOOLS, "wf-1")
    with pytest.raises(ApprovalError, match=r"does not await call 'call_chatcmpl_0' of turn 3 of run 'wf-0'"):
        bind({ApprovalKey("wf-0", 3, REPEATED): Approve()}, now, TOOLS, "wf-1")
    with pytest.raises(ApprovalError, match="does not await nope"):
        bind({"nope": Approve()}, now, TOOLS, "wf-1")
    with pytest.raises(ApprovalError, match="awaits no approval now"):
        bind({REPEATED: Approve()}, (), TOOLS, "wf-1")
    with pytest.raises(ApprovalError, match="two decisions for call 'call_chatcmpl_0'"):
        bind({REPEATED: Approve(), now[0].key: Deny("no")}, now, TOOLS, "wf-1")
    with pytest.raises(ApprovalError, match="approvals is empty"):
        bind({}, now, TOOLS, "wf-1")


def test_a_decision_that_does_not_fit_the_call_is_refused_when_bound() -> None:
    now = _awaited("wf-1", 1, REPEATED)
    with pytest.raises(ApprovalError, match="does not fit the schema of 'send'"):
        bind({REPEATED: Modify({"too": "typo"})}, now, TOOLS, "wf-1")
    with pytest.raises(ApprovalError, match="is not a JSON value"):
        bind({REPEATED: Modify({"to": {1, 2}})}, now, TOOLS, "wf-1")
    with pytest.raises(ApprovalError, match="expected Approve"):
        bind({REPEATED: "yes"}, now, TOOLS, "wf-1")  # type: ignore[dict-item]
    # without the tools (a Temporal client), the schema is left to the worker
    assert bind({REPEATED: Modify({"too": "typo"})}, now, None, "wf-1")


def test_a_list_from_before_the_binding_cannot_be_bound_to() -> None:
    legacy = awaited_from_dict({"call": {"id": REPEATED, "name": "send", "input": {}}, "reason": None})
    assert legacy.key == ApprovalKey("", 0, REPEATED)
    with pytest.raises(ApprovalError, match="earlier release"):
        bind({REPEATED: Approve()}, (legacy,), TOOLS, "wf-1")


def test_the_wait_takes_only_its_own_undecided_calls_that_fit() -> None:
    turn1, turn2 = _awaited("wf-1", 1, REPEATED), _awaited("wf-1", 2, REPEATED, "call_chatcmpl_1")
    entries = [
        (turn1[0].key, Approve()),  # a repeat of the turn-1 decision: stale at turn 2
        (ApprovalKey("wf-0", 2, REPEATED), Approve()),  # another run's
        (turn2[0].key, Modify({"too": "typo"})),  # does not fit the tool
        (turn2[0].key, Deny("no")),
        (turn2[0].key, Approve()),  # a second decision for the same call: the first counts
    ]
    taken, dropped = admit(entries, turn2, TOOLS)
    assert taken == {REPEATED: Deny("no")}
    assert len(dropped) == 4
    assert "of turn 1 of run 'wf-1'" in dropped[0] and "a repeat, or a stale one" in dropped[0]
    assert "run 'wf-0'" in dropped[1]
    assert "does not fit the schema of 'send'" in dropped[2]
    assert "a second decision" in dropped[3]


# --- a sub-agent's calls (issue 19, item 4): the key carries the path of the calls that run the sub-agent ---

paths = st.lists(st.tuples(st.integers(0, 2**40), call_id), min_size=1, max_size=3).map(tuple)


@given(key=keys, path=paths)
def test_a_sub_agents_key_round_trips_through_json(key: ApprovalKey, path: tuple[tuple[int, str], ...]) -> None:
    nested = ApprovalKey(key.run, key.turn, key.call, path)
    assert ApprovalKey.from_dict(loads(dumps(nested.to_dict()))) == nested
    assert nested != key  # the same call id and turn in another wait


@given(key=keys, path=paths, agents=st.lists(short_text, min_size=2, max_size=4))
def test_a_sub_agents_awaited_call_round_trips_with_its_agent_path(
    key: ApprovalKey, path: tuple[tuple[int, str], ...], agents: list[str]
) -> None:
    call = ToolCallPart(id=key.call, name="delete", input={"path": "/tmp/x"})
    [awaited] = awaiting([PendingApproval(call)], key.run, key.turn, path, agents)
    assert awaited.id == "/".join([c for _, c in path] + [key.call]) == awaited.key.call
    assert awaited.agent == " > ".join(agents) and awaited.key.path == path
    back = awaited_from_dict(loads(dumps(awaited_to_dict(awaited))))
    assert back == awaited and back.key == awaited.key and back.agent == awaited.agent
    entries, problems = read_decisions(loads(dumps(bound_to_dict({awaited.key: Approve()}))))
    assert problems == [] and [k for _, _, k in entries] == [awaited.key]


def test_a_decision_for_a_sub_agents_call_answers_only_the_wait_it_names() -> None:
    call = ToolCallPart(id="k1", name="delete", input={"path": "/tmp/x"})
    [awaited] = awaiting([PendingApproval(call)], "job-1", 1, ((1, "p1"),), ("boss", "researcher"))
    other_waits = [
        ApprovalKey("job-1", 1, "p1/k1"),  # the parent's own wait of turn 1
        ApprovalKey("job-1", 1, "p1/k1", ((2, "p1"),)),  # the sub-agent run by the parent's call in turn 2
        ApprovalKey("job-1", 1, "k1", ((1, "p1"),)),  # the sub-agent's bare call id
    ]
    for key in other_waits:
        with pytest.raises(ApprovalError, match="does not await"):
            bind({key: Approve()}, [awaited], None, "job-1")
    decisions, dropped = admit([(k, Approve()) for k in other_waits], [awaited], ToolRegistry())
    assert decisions == {} and len(dropped) == 3
    assert bind({"p1/k1": Approve()}, [awaited], None, "job-1") == {awaited.key: Approve()}
    decisions, dropped = admit([(awaited.key, Approve())], [awaited], ToolRegistry())
    assert decisions == {"p1/k1": Approve()} and dropped == []


def test_a_turns_wait_comes_after_its_sub_agents_waits_and_before_the_next_turn() -> None:
    parent_turn_1 = ApprovalKey("r", 1, "c2").position
    child_of_turn_1 = ApprovalKey("r", 3, "p1/k1", ((1, "p1"),)).position
    grandchild = ApprovalKey("r", 1, "p1/g1/x", ((1, "p1"), (2, "g1"))).position
    parent_turn_2 = ApprovalKey("r", 2, "c2").position
    assert (1,) < child_of_turn_1 < parent_turn_1 < (2,) < parent_turn_2  # (n,): the model call of turn n
    assert (1, 2) < grandchild < (1, 3) < child_of_turn_1
