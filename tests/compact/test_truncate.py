"""The truncating compactor: first message and a recent tail, pairs never split, Durable results kept."""

from __future__ import annotations

import pytest

from loopctl.compact import TRUNCATION_NOTICE, ContextBudget, HeuristicTokenCounter, TruncatingCompactor
from loopctl.errors import CompactionOverflow
from loopctl.message import Message, Retention, Role, ThinkingPart, ToolCallPart, ToolResultPart, check_conversation
from tests.compact.build import (
    all_results,
    assistant,
    call,
    calls,
    durable_results,
    result,
    results,
    system,
    thinking,
    tool_turn,
    user,
)

D = Retention.DURABLE
BIG = "x" * 4_000  # about 1,000 tokens


def _budget(target: int, protected_tail: int = 0) -> ContextBudget:
    """A budget whose target is exactly ``target`` tokens."""
    return ContextBudget(
        window=target,
        threshold=1.0,
        emergency=1.0,
        prune_line=1.0,
        target_ratio=1.0,
        protected_tail=protected_tail,
        counter=HeuristicTokenCounter(),
    )


def _long() -> list[Message]:
    convo = [user("Port the app to Python 3.12.")]
    for i in range(10):
        convo += tool_turn(f"c{i}", BIG, path=f"f{i}.py")
    return [*convo, assistant("All files read.")]


def test_keeps_the_first_message_and_a_recent_tail_within_the_target() -> None:
    convo = _long()
    budget = _budget(3_000)
    out = TruncatingCompactor().compact(convo, budget)
    assert out[0] is convo[0]
    assert out[1] == user(TRUNCATION_NOTICE)
    tail = out[2:]
    assert tail == convo[-len(tail) :]
    assert all(a is b for a, b in zip(tail, convo[-len(tail) :], strict=True))
    assert budget.measure(out) <= 3_000 < budget.measure(convo)
    assert len(tail) == 5  # two whole tool turns and the answer: a third turn would not fit
    assert check_conversation(out) == []


def test_leading_system_messages_stay_with_the_first_message() -> None:
    convo = [system("You are terse."), *_long()]
    out = TruncatingCompactor().compact(convo, _budget(3_000))
    assert out[:2] == convo[:2]


def test_a_cut_that_would_land_between_a_call_and_its_result_moves_before_the_call() -> None:
    # The results of the last turn come in two user messages, with a system message in between. The
    # protected tail (the last message) would start between the call and its results: the cut moves back.
    convo = [
        user("go"),
        *tool_turn("old", BIG),
        calls(call("a"), call("b")),
        results(result("a", BIG)),
        system("reminder"),
        results(result("b", "short")),
    ]
    out = TruncatingCompactor(notice=None).compact(convo, _budget(2_000))
    assert out == [convo[0], *convo[3:]]
    assert check_conversation(out) == []


def test_never_keeps_a_result_whose_call_was_dropped() -> None:
    convo = [
        user("go"),
        calls(call("a"), call("b")),
        results(result("a", BIG)),
        results(result("b", BIG)),
        assistant("ok"),
    ]
    out = TruncatingCompactor(notice=None).compact(convo, _budget(300))
    assert out == [convo[0], convo[-1]]
    assert not all_results(out)


def test_durable_results_and_their_calls_are_pulled_into_the_kept_side() -> None:
    convo = [user("go")]
    convo += tool_turn("n1", "note one", name="save_note", retention=D, text="one")
    convo += tool_turn("r1", BIG)
    convo += [
        calls(thinking("both"), call("mix_d", "save_note", text="two"), call("mix_u")),
        results(result("mix_d", "note two", name="save_note", retention=D), result("mix_u", BIG)),
    ]
    convo += tool_turn("r2", BIG)
    convo += [assistant("done")]
    out = TruncatingCompactor().compact(convo, _budget(600))
    assert durable_results(out) == durable_results(convo)
    assert [r.call_id for r in durable_results(out)] == ["n1", "mix_d"]
    assert all(a is b for a, b in zip(durable_results(out), durable_results(convo), strict=True))
    kept_calls = [p.id for m in out for p in m.parts if isinstance(p, ToolCallPart)]
    assert kept_calls == ["n1", "mix_d"]
    assert check_conversation(out) == []


def test_a_thinking_block_stays_with_the_tool_call_it_belongs_to() -> None:
    # Gemini style: each signature part sits right before the call it came on.
    sig_a = ThinkingPart(text="", signature="SIG_A", provider="gemini")
    sig_b = ThinkingPart(text="", signature="SIG_B", provider="gemini")
    convo = [
        user("go"),
        calls(sig_a, call("a"), sig_b, call("b", "save_note", text="keep")),
        results(result("a", BIG), result("b", "kept", name="save_note", retention=D)),
        *tool_turn("later", BIG),
        assistant("done"),
    ]
    out = TruncatingCompactor(notice=None).compact(convo, _budget(400))
    kept_call_msg = next(m for m in out if m.role is Role.ASSISTANT and m.tool_calls())
    assert kept_call_msg.parts == (sig_b, convo[1].parts[3])


def test_a_conversation_whose_only_old_results_are_durable_keeps_them_all() -> None:
    convo = [user("Record the decisions.")]
    for i in range(6):
        convo += [assistant(f"Thinking about decision {i}. " * 20)]
        convo += tool_turn(f"d{i}", f"decision {i}: use plan {i}", name="save_note", retention=D, text=str(i))
    convo += [assistant("Recorded.")]
    budget = _budget(600)
    out = TruncatingCompactor().compact(convo, budget)
    assert durable_results(out) == durable_results(convo)
    assert not any("Thinking about decision 0" in m.text_content() for m in out)
    assert budget.measure(out) <= 600
    with pytest.raises(CompactionOverflow) as info:
        TruncatingCompactor().compact(convo, _budget(180))
    err = info.value
    # first message 9 + six Durable pairs of 31 + protected tail ("Recorded.") 6 = 201 tokens
    assert (err.target, err.tokens_after) == (180, 201)
    assert err.tokens_before == budget.measure(convo)
    assert "Durable results with their calls" in str(err)


def test_a_huge_single_tool_output_the_model_has_not_seen_overflows_with_the_numbers() -> None:
    convo = [user("Dump the table."), *tool_turn("dump", "row\n" * 150_000, name="sql")]
    budget = ContextBudget()
    with pytest.raises(CompactionOverflow) as info:
        TruncatingCompactor().compact(convo, budget)
    assert info.value.target == 112_000
    assert info.value.tokens_after == info.value.tokens_before == budget.measure(convo) > 150_000
    assert "protected tail" in str(info.value)


def test_the_pass_never_creates_an_empty_message_and_drops_the_ones_it_empties() -> None:
    convo = [user("go"), *tool_turn("a", BIG), Message.new(Role.USER, []), *tool_turn("b", BIG), assistant("done")]
    out = TruncatingCompactor(notice=None).compact(convo, _budget(300))
    assert all(m.parts for m in out)
    assert out == [convo[0], convo[-1]]


def test_kept_empty_messages_stay_as_they_were() -> None:
    convo = [user("go"), *tool_turn("a", BIG), assistant("done"), Message.new(Role.USER, [])]
    out = TruncatingCompactor(notice=None).compact(convo, _budget(300, protected_tail=50))
    assert out == [convo[0], convo[-2], convo[-1]]


def test_never_returns_an_empty_conversation() -> None:
    assert TruncatingCompactor().compact([], ContextBudget()) == []
    single = [user("x" * 100_000)]
    with pytest.raises(CompactionOverflow):
        TruncatingCompactor().compact(single, _budget(100))
    assert TruncatingCompactor().compact(single, ContextBudget()) == single


def test_a_conversation_that_fits_is_returned_unchanged() -> None:
    convo = _long()
    assert TruncatingCompactor().compact(convo, ContextBudget()) == convo


def test_the_notice_is_left_out_when_it_alone_would_not_fit() -> None:
    convo = [user("go"), *tool_turn("a", BIG), assistant("y" * 400)]
    counter = HeuristicTokenCounter()
    must_keep = counter.count([convo[0], convo[-1]])
    out = TruncatingCompactor().compact(convo, _budget(must_keep))
    assert out == [convo[0], convo[-1]]
    out = TruncatingCompactor().compact(convo, _budget(must_keep + 60))
    assert out == [convo[0], user(TRUNCATION_NOTICE), convo[-1]]


def test_results_keep_their_retention_through_truncation() -> None:
    convo = [user("go"), *tool_turn("d", "n", retention=D), *tool_turn("a", BIG), assistant("done")]
    out = TruncatingCompactor().compact(convo, _budget(400))
    kept = [p for m in out for p in m.parts if isinstance(p, ToolResultPart)]
    assert [(p.call_id, p.retention) for p in kept] == [("d", D)]
