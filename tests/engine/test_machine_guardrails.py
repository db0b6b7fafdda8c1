"""The machine's guardrail feeds and state: approve() misuse, machine files whose guardrail fields disagree,
and (hypothesis) any run of repeats, deferrals and decisions saved and restored at any point takes the same
next step."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopctl.engine import (
    Approve,
    CallTools,
    Deny,
    LimitHit,
    LoopMachine,
    MachinePolicy,
    MachineState,
    Modify,
    OutcomeKind,
    RunUsage,
    UsageLimits,
)
from loopctl.errors import ConversationFileError, MachineStateError
from loopctl.message import Message, MessagePart, Role, check_conversation
from loopctl.response import Usage

POLICY = MachinePolicy()
TOOLS = {"read", "write"}


def reply(*calls: tuple[str, str, dict[str, Any]]) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(i, n, a) for i, n, a in calls])


def results(*ids: str) -> list[Message]:
    return [Message.new(Role.USER, [MessagePart.tool_result(i, "read", f"{i} ok") for i in ids])] if ids else []


def paused() -> LoopMachine:
    m = LoopMachine()
    m.accept_input("go")
    m.model_response(reply(("a", "read", {"p": 1}), ("b", "write", {"p": 2}), ("c", "write", {"p": 3})), TOOLS, 10)
    m.tool_results(results("a"), deferred={"b": "writes", "c": None})
    return m


def test_a_paused_machine_waits_only_for_decisions() -> None:
    m = paused()
    assert m.state is MachineState.AWAITING_APPROVAL and m.outcome.kind is OutcomeKind.AWAITING_APPROVAL
    assert [(p.id, p.reason) for p in m.pending_approvals] == [("b", "writes"), ("c", None)]
    assert m.next_step(POLICY).outcome.kind is OutcomeKind.AWAITING_APPROVAL  # type: ignore[union-attr]
    with pytest.raises(MachineStateError, match="accept_input"):
        m.accept_input("something else")
    with pytest.raises(MachineStateError, match="model_response"):
        m.model_response(Message.assistant("x"), TOOLS, 10)
    before = m.to_json()
    with pytest.raises(MachineStateError, match="call 'a' does not await approval"):
        m.approve({"a": Approve()})
    with pytest.raises(MachineStateError, match="at least one"):
        m.approve({})
    with pytest.raises(MachineStateError, match="expected Approve"):
        m.approve({"b": "yes"})  # type: ignore[dict-item]
    assert m.to_json() == before  # refused feeds change nothing


def test_decisions_run_what_was_approved_then_pause_or_commit() -> None:
    m = paused()
    m.approve({"b": Modify({"p": 20})})
    assert m.next_step(POLICY) == CallTools(
        1, (reply(("b", "write", {"p": 2})).tool_calls()[0],), {"b": Modify({"p": 20})}
    )
    m.tool_results(results("b"))
    assert m.state is MachineState.AWAITING_APPROVAL and [p.id for p in m.pending_approvals] == ["c"]
    m.approve({"c": Deny("no")})  # nothing to run: the turn is committed at once
    assert m.state is MachineState.AWAITING_MODEL
    committed = m.pending[-1]
    assert [p.call_id for p in committed.parts] == ["a", "b", "c"]  # type: ignore[union-attr]
    assert check_conversation(list(m.full_history())) == []


def test_deferring_a_call_that_is_not_in_the_step_is_refused() -> None:
    m = LoopMachine()
    m.accept_input("go")
    m.model_response(reply(("a", "read", {})), TOOLS, 10)
    with pytest.raises(MachineStateError, match="deferred call 'zz' is no call of this step"):
        m.tool_results([], deferred=["zz"])
    with pytest.raises(MachineStateError, match="both answered and deferred"):
        m.tool_results(results("a"), deferred=["a"])
    assert m.state is MachineState.AWAITING_TOOLS


def _doc(m: LoopMachine, **changes: Any) -> str:
    doc = orjson.loads(m.to_json())
    doc.update(changes)
    return orjson.dumps(doc).decode()


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"deferred": []}, "awaiting_approval needs deferred calls"),
        ({"deferred": [{"id": "zz", "reason": None}]}, "awaiting_approval needs deferred calls"),
        ({"approved": [{"id": "b", "decision": "approve"}]}, "has approved calls; only awaiting_tools"),
        ({"approved": [{"id": "b", "decision": "maybe"}]}, "approved[0].decision must be approve"),
        ({"outcome": {"kind": "idle"}}, "the outcome awaiting_approval belongs to the state awaiting_approval"),
        ({"limits": {"requests": -1}}, "requests must be a whole number"),
        ({"usage": {"requests": "3"}}, "usage.requests must be a whole number"),
        ({"loop": {"k": 1}}, "loop.k must be a whole number >= 2"),
        ({"state": "terminal"}, "has tool calls"),
    ],
)
def test_a_machine_file_whose_guardrail_fields_disagree_is_refused(changes: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConversationFileError, match=re.escape(problem)):
        LoopMachine.from_json(_doc(paused(), **changes))


def test_the_records_of_limits_round_trip() -> None:
    limits = UsageLimits(
        requests=3, tool_calls=None, input_tokens=10, output_tokens=0, total_tokens=5, cost=Decimal("1.25")
    )
    assert UsageLimits.from_dict(orjson.loads(orjson.dumps(limits.to_dict()))) == limits
    spent = RunUsage(2, 1, 100, 20, None)
    assert RunUsage.from_dict(spent.to_dict()) == spent and spent.total_tokens == 120
    for hit in (LimitHit("cost", Decimal("0.5"), Decimal("0.4")), LimitHit("tool_calls", 2, 3, needed=2)):
        assert LimitHit.from_dict(orjson.loads(orjson.dumps(hit.to_dict()))) == hit


# --- any run, saved and restored anywhere ----------------------------------------------------------------------

CALL = st.tuples(st.sampled_from(["read", "write"]), st.integers(0, 1))  # few distinct calls: repeats happen
TURN = st.tuples(
    st.lists(CALL, min_size=0, max_size=3),  # the reply's calls (none: an answer)
    st.lists(st.booleans(), min_size=3, max_size=3),  # which calls the driver defers
    st.lists(st.sampled_from(["approve", "deny", "modify", "skip"]), min_size=3, max_size=3),
)
LIMITS = st.one_of(
    st.none(),
    st.builds(
        UsageLimits,
        requests=st.one_of(st.none(), st.integers(1, 5)),
        tool_calls=st.one_of(st.none(), st.integers(0, 6)),
        output_tokens=st.one_of(st.none(), st.integers(0, 40)),
    ),
)


def _same_after_restore(m: LoopMachine) -> LoopMachine:
    text = m.to_json()
    restored = LoopMachine.from_json(text)
    assert restored.to_json() == text
    assert restored.next_step(POLICY) == m.next_step(POLICY)
    assert restored.to_json() == m.to_json()  # deciding Done (a limit) changes both alike
    return restored


@settings(max_examples=150, deadline=None)
@given(limits=LIMITS, k=st.one_of(st.none(), st.integers(2, 3)), turns=st.lists(TURN, min_size=1, max_size=6))
def test_any_run_restored_at_any_point_decides_the_same(
    limits: UsageLimits | None, k: int | None, turns: list[Any]
) -> None:
    m = LoopMachine()
    m.accept_input("go", limits=limits, loop_detection=k)
    n = 0
    for calls, defer, decide in turns:
        m = _same_after_restore(m)
        if m.state is not MachineState.AWAITING_MODEL or m.next_step(POLICY).__class__.__name__ != "CallLLM":
            break
        parts = []
        for name, arg in calls:
            n += 1
            parts.append((f"c{n}", name, {"arg": arg}))
        m.model_response(reply(*parts) if parts else Message.assistant("done"), TOOLS, 10, usage=Usage(5, 10))
        m = _same_after_restore(m)
        while m.state is MachineState.AWAITING_TOOLS:
            step = m.next_step(POLICY)
            assert isinstance(step, CallTools) and step.calls
            deferred = [c.id for i, c in enumerate(step.calls) if defer[i % 3] and c.id not in step.approved]
            ran = [c.id for c in step.calls if c.id not in deferred]
            m.tool_results(results(*ran), deferred=deferred)
            m = _same_after_restore(m)
            if m.state is MachineState.AWAITING_APPROVAL:
                decisions: dict[str, Any] = {}
                for i, p in enumerate(m.pending_approvals):
                    choice = decide[i % 3]
                    if choice != "skip":
                        decisions[p.id] = {"approve": Approve(), "deny": Deny("no"), "modify": Modify({"arg": 9})}[
                            choice
                        ]
                if not decisions:
                    decisions = {m.pending_approvals[0].id: Deny("no")}
                defer = [False, False, False]  # approved calls are not deferred again
                m.approve(decisions)
                m = _same_after_restore(m)
        if m.state in (MachineState.TERMINAL, MachineState.START):
            break
    m = _same_after_restore(m)
    if m.state is MachineState.TERMINAL:
        assert check_conversation(list(m.history)) == []
        hit = m.outcome.limit
        if hit is not None:
            assert m.outcome.kind is OutcomeKind.LIMIT_REACHED and limits is not None
            assert getattr(limits, hit.dimension) == hit.limit
