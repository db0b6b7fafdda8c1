"""The loop machine, rule by rule: transitions, the check order, salvage, persistence."""

from __future__ import annotations

import pathlib
from decimal import Decimal

import pytest

from loopctl.engine import (
    MACHINE_FORMAT_VERSION,
    CallLLM,
    CallTools,
    Compact,
    CompactReason,
    Done,
    LoopMachine,
    MachinePolicy,
    MachineState,
    Modify,
    Outcome,
    OutcomeKind,
    OutputCheck,
    Prune,
    UsageLimits,
    coherent_prefix,
)
from loopctl.engine.machine import FINAL_RESULT_TEXT
from loopctl.errors import ConversationFileError, MachineStateError, ProviderProtocolError
from loopctl.message import Message, MessagePart, Role, TextPart, ThinkingPart, ToolResultPart, check_conversation
from loopctl.response import StopReason, Usage

POLICY = MachinePolicy(max_turns=5, context_window=1000, compact_threshold=0.8, auto_compact=True)
TOOLS = {"read", "write"}


def call(id: str, name: str = "read", **input: object) -> MessagePart:
    return MessagePart.tool_call(id, name, input or {"path": "a"})


def assistant(*parts: MessagePart) -> Message:
    return Message.new(Role.ASSISTANT, parts)


def result(id: str, text: str = "ok", name: str = "read") -> Message:
    return Message.new(Role.USER, [MessagePart.tool_result(id, name, text)])


def started(ctx: int = 10) -> LoopMachine:
    m = LoopMachine()
    m.accept_input("hello")
    m.context_tokens = ctx
    return m


# --- states and the check order ------------------------------------------------------------------------------


def test_a_new_machine_starts_idle_and_asks_for_nothing() -> None:
    m = LoopMachine()
    assert m.state is MachineState.START
    assert m.next_step(POLICY) == Done(m.outcome)
    assert m.outcome.kind is OutcomeKind.IDLE


def test_accept_input_starts_a_run_and_the_first_step_calls_the_model() -> None:
    m = started()
    assert m.state is MachineState.AWAITING_MODEL
    assert m.pending == [Message.user("hello")]
    assert m.next_step(POLICY) == CallLLM(1)


def test_asking_twice_without_a_feed_gives_the_same_step_in_every_state() -> None:
    m = started()
    assert m.next_step(POLICY) == m.next_step(POLICY) == CallLLM(1)
    m.model_response(assistant(call("c1")), TOOLS, 20)
    assert m.next_step(POLICY) == m.next_step(POLICY)
    m.tool_results([result("c1")], 960)
    first = m.next_step(POLICY)
    assert first == m.next_step(POLICY) == Prune(960, 460)
    m.cancel()
    assert m.next_step(POLICY) == m.next_step(POLICY) == Done(m.outcome)


def test_terminal_is_checked_first() -> None:
    m = started(ctx=999)
    m.model_response(Message.assistant("bye"), TOOLS, 999)
    assert m.state is MachineState.TERMINAL
    assert m.next_step(POLICY) == Done(m.outcome)
    assert m.outcome.kind is OutcomeKind.COMPLETED


def test_cancelled_is_checked_before_the_turn_limit() -> None:
    m = started()
    m.turn = 99
    m.cancel()
    assert m.next_step(POLICY).outcome.kind is OutcomeKind.CANCELLED  # type: ignore[union-attr]


def test_turn_limit_is_checked_before_compaction() -> None:
    m = started(ctx=990)
    m.turn = POLICY.max_turns
    step = m.next_step(POLICY)
    assert isinstance(step, Done)
    assert step.outcome.kind is OutcomeKind.MAX_TURNS


def test_emergency_compaction_at_95_percent_is_always_on() -> None:
    policy = MachinePolicy(max_turns=5, context_window=1000, auto_compact=False)
    m = started(ctx=950)
    m._pruned_at = 950
    assert m.next_step(policy) == Compact(CompactReason.EMERGENCY, 950)


def test_the_prune_line_is_checked_before_the_compaction_lines() -> None:
    m = started(ctx=960)
    assert m.next_step(POLICY) == Prune(960, 460)
    m.prune_result(list(m.full_history()), 960, 955)  # pruning could not free enough
    assert m.next_step(POLICY) == Compact(CompactReason.EMERGENCY, 955)


def test_just_below_the_emergency_line_is_not_an_emergency() -> None:
    m = started(ctx=949)
    step = m.next_step(POLICY)
    assert not (isinstance(step, Compact) and step.reason is CompactReason.EMERGENCY)


def test_prune_runs_past_the_prune_line_before_threshold_compaction() -> None:
    m = started(ctx=850)
    assert m.next_step(POLICY) == Prune(850, 850 - 500)


def test_threshold_compaction_is_strictly_above_the_threshold() -> None:
    m = started(ctx=800)
    m._pruned_at = 800  # already pruned at this size
    assert m.next_step(POLICY) == CallLLM(1)
    m.context_tokens = 801
    assert m.next_step(POLICY) == Compact(CompactReason.THRESHOLD, 801)


def test_threshold_compaction_is_off_when_auto_compact_is_off() -> None:
    policy = MachinePolicy(max_turns=5, context_window=1000, auto_compact=False)
    m = started(ctx=900)
    m._pruned_at = 900
    assert m.next_step(policy) == CallLLM(1)


def test_below_every_line_the_machine_calls_the_model() -> None:
    m = started(ctx=600)
    assert m.next_step(POLICY) == CallLLM(1)


# --- the model's reply ----------------------------------------------------------------------------------------


def test_a_reply_without_tool_calls_completes_the_run_and_commits_pending() -> None:
    m = started()
    m.model_response(Message.assistant("done"), TOOLS, 30)
    assert m.outcome.kind is OutcomeKind.COMPLETED
    assert list(m.history) == [Message.user("hello"), Message.assistant("done")]
    assert m.pending == []
    assert m.context_tokens == 30


def test_a_refusal_ends_the_run_as_refused() -> None:
    m = started()
    m.model_response(Message.assistant("I can't help with that."), TOOLS, 30, stop_reason=StopReason.REFUSAL)
    assert m.outcome.kind is OutcomeKind.REFUSED
    assert m.history[-1] == Message.assistant("I can't help with that.")


def test_a_final_answer_cut_by_max_tokens_ends_as_max_tokens() -> None:
    m = started()
    m.model_response(Message.assistant("The answer is"), TOOLS, 30, stop_reason=StopReason.MAX_TOKENS)
    assert m.outcome.kind is OutcomeKind.MAX_TOKENS


def test_tool_calls_ask_for_the_tools_in_the_order_the_model_asked() -> None:
    m = started()
    reply = assistant(ThinkingPart(text="hm", signature="s"), call("c1"), call("c2", "write"))
    m.model_response(reply, TOOLS, 40)
    step = m.next_step(POLICY)
    assert isinstance(step, CallTools)
    assert step.turn == 1
    assert [c.id for c in step.calls] == ["c1", "c2"]


def test_an_unknown_tool_is_answered_by_the_machine_naming_the_tools_that_exist() -> None:
    m = started()
    m.model_response(assistant(call("c1", "delete_everything")), TOOLS, 40)
    assert m.state is MachineState.AWAITING_MODEL  # nothing to run
    answer = m.pending[-1].parts[0]
    assert isinstance(answer, ToolResultPart)
    assert answer.call_id == "c1" and answer.name == "delete_everything" and answer.is_error is True
    assert str(answer.output) == "Unknown tool 'delete_everything'. The tools that exist are: read, write."


def test_an_unknown_tool_among_known_ones_is_answered_in_the_call_order() -> None:
    m = started()
    m.model_response(assistant(call("c1"), call("c2", "nope"), call("c3", "write")), TOOLS, 40)
    step = m.next_step(POLICY)
    assert [c.id for c in step.calls] == ["c1", "c3"]  # type: ignore[union-attr]
    m.tool_results([result("c3", "w", "write"), result("c1")])
    parts = m.pending[-1].parts
    assert [p.call_id for p in parts] == ["c1", "c2", "c3"]  # type: ignore[union-attr]
    assert [p.is_error for p in parts] == [False, True, False]  # type: ignore[union-attr]


def test_a_call_cut_off_by_max_tokens_is_answered_not_run() -> None:
    m = started()
    m.model_response(
        assistant(call("c1"), call("c2")),
        TOOLS,
        40,
        stop_reason=StopReason.MAX_TOKENS,
        invalid_calls=[("c2", "arguments are not valid JSON")],
    )
    step = m.next_step(POLICY)
    assert [c.id for c in step.calls] == ["c1"]  # type: ignore[union-attr]
    m.tool_results([result("c1")])
    cut = m.pending[-1].parts[1]
    assert isinstance(cut, ToolResultPart) and cut.is_error
    assert str(cut.output) == "The call was not run: arguments are not valid JSON"


def test_input_that_cannot_be_written_is_refused_and_the_machine_stays_as_it_was() -> None:
    from loopctl.errors import InvalidMessage

    m = LoopMachine()
    with pytest.raises(InvalidMessage, match=r"^input\.parts\[0\]\.text: expected a string that is valid Unicode"):
        m.accept_input("fix caf\udce9")  # undecodable command-line bytes arrive as lone surrogates
    assert m.state is MachineState.START
    assert list(m.full_history()) == []


def test_model_response_takes_only_assistant_messages() -> None:
    m = started()
    with pytest.raises(MachineStateError, match="assistant"):
        m.model_response(Message.user("x"), TOOLS, 1)


@pytest.mark.parametrize(
    ("reply", "tools", "error"),
    [
        (assistant(call("c1")), None, TypeError),  # appended the reply, then failed on the tools
        ("not a message", TOOLS, MachineStateError),
        (assistant(call("c1"), call("c2"), call("c1")), TOOLS, ProviderProtocolError),
        (assistant(call("c1", "")), TOOLS, ProviderProtocolError),  # was answered "Unknown tool ''" and kept
    ],
)
def test_a_feed_that_raises_leaves_the_machine_as_it_was(reply: object, tools: object, error: type) -> None:
    m = started()
    before = m.to_json()
    with pytest.raises(error):
        m.model_response(reply, tools, 99)  # type: ignore[arg-type]
    assert m.to_json() == before
    assert m.next_step(POLICY) == CallLLM(1)


def test_a_reply_that_uses_one_call_id_twice_is_the_providers_protocol_error() -> None:
    m = started()
    with pytest.raises(ProviderProtocolError, match="same id twice \\('c1'\\)"):
        m.model_response(assistant(call("c1"), call("c1", path="b")), TOOLS, 20)
    m.fail(ProviderProtocolError("x"))
    assert list(m.history) == [Message.user("hello")]


# --- tool results --------------------------------------------------------------------------------------------


def test_all_results_of_a_turn_go_into_one_user_message_in_call_order_with_names_filled() -> None:
    m = started()
    m.model_response(assistant(call("c1"), call("c2", "write")), TOOLS, 40)
    unnamed = Message.new(Role.USER, [MessagePart.tool_result("c2", "", "w")])
    m.tool_results([unnamed, result("c1")], 60)
    last = m.pending[-1]
    assert last.role is Role.USER
    assert [(p.call_id, p.name) for p in last.parts] == [("c1", "read"), ("c2", "write")]  # type: ignore[union-attr]
    assert m.context_tokens == 60
    assert m.next_step(POLICY) == CallLLM(2)


def test_a_result_for_no_call_of_the_step_is_refused() -> None:
    m = started()
    m.model_response(assistant(call("c1")), TOOLS, 40)
    with pytest.raises(MachineStateError, match="answers no call"):
        m.tool_results([result("c1"), result("zz")])


def test_a_call_answered_twice_is_refused() -> None:
    m = started()
    m.model_response(assistant(call("c1")), TOOLS, 40)
    with pytest.raises(MachineStateError, match="answered twice"):
        m.tool_results([result("c1"), result("c1")])


def test_a_call_left_unanswered_is_refused() -> None:
    m = started()
    m.model_response(assistant(call("c1"), call("c2", path="b")), TOOLS, 40)  # two calls (identical ones run once)
    with pytest.raises(MachineStateError, match="without a result: c2"):
        m.tool_results([result("c1")])


def test_feeds_the_state_does_not_accept_are_refused() -> None:
    m = LoopMachine()
    with pytest.raises(MachineStateError, match="model_response"):
        m.model_response(Message.assistant("x"), TOOLS, 1)
    m.accept_input("hi")
    with pytest.raises(MachineStateError, match="accept_input"):
        m.accept_input("again")
    with pytest.raises(MachineStateError, match="tool_results"):
        m.tool_results([])
    with pytest.raises(MachineStateError, match="compaction_result"):
        m.compaction_result([], 1, 0)


# --- compaction and pruning ---------------------------------------------------------------------------------


def _awaiting_compaction(ctx: int = 960) -> LoopMachine:
    m = LoopMachine([Message.user("old"), Message.assistant("old answer")])
    m.accept_input("new")
    m.context_tokens = ctx
    m._pruned_at = ctx  # pruned already at this size: the compaction lines come next
    assert isinstance(m.next_step(POLICY), Compact)
    return m


def test_compaction_result_replaces_history_and_clears_pending() -> None:
    m = _awaiting_compaction()
    summary = [Message.user("summary of everything")]
    m.compaction_result(summary, 960, 100)
    assert list(m.history) == summary
    assert m.pending == []
    assert m.context_tokens == 100
    assert m.next_step(POLICY) == CallLLM(1)


def test_a_compaction_that_saved_nothing_ends_the_run_instead_of_looping() -> None:
    m = _awaiting_compaction()
    m.compaction_result([Message.user("x")], 960, 960)
    assert m.outcome.kind is OutcomeKind.FAILED
    assert m.outcome.error == "compaction made no progress (960 tokens before, 960 after)"
    assert list(m.history) == [Message.user("old"), Message.assistant("old answer"), Message.user("new")]


def test_compaction_noop_leaves_both_buffers_untouched_and_ends_with_no_progress() -> None:
    m = _awaiting_compaction()
    before = list(m.full_history())
    m.compaction_noop(960, 960)
    assert m.outcome.kind is OutcomeKind.FAILED
    assert "no progress" in (m.outcome.error or "")
    assert list(m.full_history()) == before


def test_prune_result_keeps_every_message_and_is_not_asked_again_until_the_context_grows() -> None:
    m = started(ctx=700)
    step = m.next_step(POLICY)
    assert step == Prune(700, 200)
    pruned = [Message.user("hello (pruned)")]
    m.prune_result(pruned, 700, 650)
    assert list(m.full_history()) == pruned
    assert m.next_step(POLICY) == CallLLM(1)
    m.context_tokens = 699  # grew by less than prune_step (5% of 1000)
    assert m.next_step(POLICY) == CallLLM(1)
    m.context_tokens = 700
    assert isinstance(m.next_step(POLICY), Prune)


def test_a_prune_result_of_another_length_is_refused() -> None:
    m = started(ctx=700)
    m.next_step(POLICY)
    with pytest.raises(MachineStateError, match="keeps every message"):
        m.prune_result([], 700, 0)


def test_a_run_that_cannot_fit_the_window_keeps_the_results_of_tools_that_ran() -> None:
    # It used to be discarded whole (history back to the previous runs): a tool that ran was forgotten.
    m = LoopMachine([Message.user("old"), Message.assistant("kept")])
    m.accept_input("new")
    m.model_response(assistant(call("c1")), TOOLS, 40)
    m.tool_results([result("c1")])
    m.model_response(assistant(call("c2")), TOOLS, 50)
    m.fail("prompt is too long", overflow=True)
    assert m.outcome.kind is OutcomeKind.CONTEXT_OVERFLOW
    assert list(m.history) == [
        Message.user("old"),
        Message.assistant("kept"),
        Message.user("new"),
        assistant(call("c1")),
        result("c1"),
    ]


def _overflowed() -> LoopMachine:
    """A run whose second model call the provider refused as too long (one tool exchange done)."""
    m = started()
    m.model_response(assistant(call("c1")), TOOLS, 40)
    m.tool_results([result("c1")])
    m.context_overflow("prompt is too long: 1200 tokens > 1000 maximum", 1200)
    return m


def test_a_provider_overflow_asks_for_the_emergency_compaction_then_the_same_call_again() -> None:
    # A "prompt is too long" mid-run used to discard the run whole (history []), Durable results included.
    m = _overflowed()
    assert m.next_step(POLICY) == Compact(CompactReason.EMERGENCY, 1200)
    compacted = [Message.user("hello"), assistant(call("c1")), result("c1")]
    m.compaction_result(compacted, 1200, 300)
    assert m.next_step(POLICY) == CallLLM(2)
    m.model_response(Message.assistant("done"), TOOLS, 320)
    assert m.outcome.kind is OutcomeKind.COMPLETED
    assert list(m.history) == [*compacted, Message.assistant("done")]


def test_a_second_overflow_of_the_call_ends_the_run_keeping_the_results_of_tools_that_ran() -> None:
    m = _overflowed()
    m.next_step(POLICY)
    m.compaction_result([Message.user("hello"), assistant(call("c1")), result("c1")], 1200, 900)
    m.context_overflow("prompt is too long: 1100 tokens > 1000 maximum")
    assert m.outcome.kind is OutcomeKind.CONTEXT_OVERFLOW
    assert m.outcome.error == "prompt is too long: 1100 tokens > 1000 maximum"
    assert list(m.history) == [Message.user("hello"), assistant(call("c1")), result("c1")]


def test_an_overflow_the_compaction_cannot_help_ends_with_the_providers_error_not_no_progress() -> None:
    m = _overflowed()
    m.next_step(POLICY)
    m.compaction_noop(1200, 1200)
    assert (m.outcome.kind, m.outcome.error) == (
        OutcomeKind.CONTEXT_OVERFLOW,
        "prompt is too long: 1200 tokens > 1000 maximum",
    )
    assert list(m.history) == [Message.user("hello"), assistant(call("c1")), result("c1")]


def test_each_model_call_gets_its_own_overflow_retry() -> None:
    m = _overflowed()
    m.next_step(POLICY)
    m.compaction_result([Message.user("hello"), assistant(call("c1")), result("c1")], 1200, 300)
    m.model_response(assistant(call("c2")), TOOLS, 400)  # the retry answered: the next call starts afresh
    m.tool_results([result("c2")])
    m.context_overflow(RuntimeError("too long"), 1100)
    assert m.next_step(POLICY) == Compact(CompactReason.EMERGENCY, 1100)


def test_context_overflow_is_a_feed_of_a_run_waiting_for_the_model() -> None:
    m = started()
    m.model_response(assistant(call("c1")), TOOLS, 40)
    with pytest.raises(MachineStateError, match="context_overflow"):
        m.context_overflow("too long")


# --- typed output ---------------------------------------------------------------------------------------------


def typed(ctx: int = 10) -> LoopMachine:
    m = LoopMachine()
    m.accept_input("hello", output_tool="final_result")
    m.context_tokens = ctx
    return m


def test_valid_output_completes_the_run_and_the_other_calls_of_the_reply_are_answered_not_run() -> None:
    m = typed()
    reply = assistant(call("c1"), call("out", "final_result", city="Paris"), call("out2", "final_result"))
    m.model_response(reply, TOOLS, 40, output_check=OutputCheck("out"))
    assert m.outcome.kind is OutcomeKind.COMPLETED
    (results,) = [msg for msg in m.history if msg.role is Role.USER and msg.tool_results()]
    assert [(r.call_id, str(r.output), r.is_error) for r in results.tool_results()] == [
        ("c1", "Not run: the final result was already given by final_result.", True),
        ("out", FINAL_RESULT_TEXT, False),
        ("out2", "Not used: only one call of final_result is read per reply.", True),
    ]


def test_invalid_output_goes_back_as_the_calls_error_then_ends_output_invalid() -> None:
    policy = MachinePolicy(context_window=1000, output_retries=1)
    m = typed()
    m.model_response(assistant(call("o1", "final_result")), TOOLS, 40, output_check=OutputCheck("o1", "bad: x", "x"))
    assert m.output_failures == 1
    assert m.next_step(policy) == CallLLM(2)
    assert [str(r.output) for r in m.pending[-1].tool_results()] == ["bad: x"]
    m.model_response(assistant(call("o2", "final_result")), TOOLS, 60, output_check=OutputCheck("o2", "bad: y", "y"))
    assert m.next_step(policy) == Done(m.outcome)
    assert (m.outcome.kind, m.outcome.error) == (OutcomeKind.OUTPUT_INVALID, "y")
    assert coherent_prefix(list(m.history)) == len(m.history)  # both calls answered, nothing dropped


def test_an_invalid_text_answer_is_told_in_a_user_message_before_the_next_call() -> None:
    m = started()
    m.model_response(Message.assistant("{}"), TOOLS, 40, output_check=OutputCheck(None, "say more"))
    assert m.state is MachineState.AWAITING_MODEL
    assert m.next_step(POLICY) == CallLLM(2)
    assert m.next_step(POLICY) == CallLLM(2)  # asked twice: the message is sent once
    assert list(m.pending)[-2:] == [Message.assistant("{}"), Message.user("say more")]
    m.model_response(Message.assistant('{"a": 1}'), TOOLS, 60, output_check=OutputCheck())
    assert m.outcome.kind is OutcomeKind.COMPLETED


def test_an_answer_cut_off_by_max_tokens_ends_max_tokens_not_as_invalid_output() -> None:
    m = started()
    m.model_response(Message.assistant('{"a": '), TOOLS, 40, stop_reason=StopReason.MAX_TOKENS)
    assert m.outcome.kind is OutcomeKind.MAX_TOKENS


def test_output_retries_zero_ends_at_the_first_invalid_answer() -> None:
    m = started()
    m.model_response(Message.assistant("no"), TOOLS, 40, output_check=OutputCheck(None, "wrong"))
    assert m.next_step(MachinePolicy(output_retries=0)) == Done(m.outcome)
    assert m.outcome.kind is OutcomeKind.OUTPUT_INVALID
    assert list(m.history)[-1] == Message.assistant("no")  # the retry message was never sent


@pytest.mark.parametrize(
    ("reply", "check", "problem"),
    [
        (assistant(call("o1", "final_result")), None, "needs the output_check of one of those calls"),
        (assistant(call("c1")), OutputCheck("c1"), "names call 'c1', which is no call of the output tool"),
    ],
)
def test_an_output_check_that_does_not_fit_the_reply_is_refused_leaving_the_machine_as_it_was(
    reply: Message, check: OutputCheck | None, problem: str
) -> None:
    m = typed()
    before = m.to_json()
    with pytest.raises(MachineStateError, match=problem):
        m.model_response(reply, TOOLS, 40, output_check=check)
    assert m.to_json() == before


# --- run exit and salvage -------------------------------------------------------------------------------


def test_cancel_keeps_a_completed_tool_exchange_and_drops_an_unanswered_one() -> None:
    m = started()
    m.model_response(assistant(call("c1")), TOOLS, 40)
    m.tool_results([result("c1")])
    m.model_response(assistant(TextPart(text="now writing"), call("c2", "write")), TOOLS, 50)
    m.cancel()
    assert m.outcome.kind is OutcomeKind.CANCELLED
    assert list(m.history) == [Message.user("hello"), assistant(call("c1")), result("c1")]


def test_an_ordinary_failure_salvages_the_same_coherent_prefix() -> None:
    m = started()
    m.model_response(assistant(call("c1")), TOOLS, 40)
    m.fail(RuntimeError("network down"))
    assert m.outcome.kind is OutcomeKind.FAILED
    assert m.outcome.error == "network down" and m.outcome.error_type == "RuntimeError"
    assert list(m.history) == [Message.user("hello")]


def test_fail_with_an_error_whose_text_cannot_be_read_still_ends_the_run() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    m = started()
    m.model_response(assistant(call("c1")), TOOLS, 20)
    m.fail(Unprintable())  # raised RuntimeError and left the run in awaiting_tools
    assert m.state is MachineState.TERMINAL
    assert (m.outcome.error, m.outcome.error_type) == ("<its text cannot be read>", "Unprintable")


def test_coherent_prefix_counts_only_prefixes_with_every_call_answered() -> None:
    msgs = [Message.user("a"), assistant(call("x"), call("y")), result("x"), result("y"), assistant(call("z"))]
    assert coherent_prefix(msgs) == 4
    assert coherent_prefix(msgs[:3]) == 1


def test_a_new_run_continues_the_committed_history() -> None:
    m = started()
    m.model_response(Message.assistant("one"), TOOLS, 10)
    m.accept_input("second")
    assert m.turn == 0
    assert list(m.full_history()) == [Message.user("hello"), Message.assistant("one"), Message.user("second")]


def test_full_history_is_a_snapshot_that_later_appends_do_not_change() -> None:
    m = started()
    snap = m.full_history()
    m.model_response(Message.assistant("x"), TOOLS, 10)
    assert len(snap) == 1 and list(snap) == [Message.user("hello")]


# --- persistence --------------------------------------------------------------------------------------------


def _machines_in_every_state() -> dict[str, LoopMachine]:
    out: dict[str, LoopMachine] = {"start": LoopMachine()}
    m = started()
    out["awaiting_model"] = m
    m2 = started()
    m2.model_response(assistant(ThinkingPart(text="t", signature="sig"), call("c1"), call("c2", "nope")), TOOLS, 40)
    out["awaiting_tools"] = m2
    out["awaiting_compaction"] = _awaiting_compaction()
    m4 = started(ctx=700)
    m4.next_step(POLICY)
    out["awaiting_prune"] = m4
    m5 = started()
    m5.model_response(Message.assistant("bye"), TOOLS, 10)
    out["terminal"] = m5
    m6 = started()
    m6.fail(RuntimeError("boom"))
    out["failed"] = m6
    m7 = _awaiting_compaction()
    m7.compaction_result([Message.user("summary")], 960, 100)
    out["compacted"] = m7  # awaiting_model with every message in history, none pending
    out["overflowed"] = _overflowed()
    m8 = _overflowed()
    m8.next_step(POLICY)
    m8.compaction_result([Message.user("hello"), assistant(call("c1")), result("c1")], 1200, 300)
    out["retrying_after_overflow"] = m8  # a second overflow must end the run, after a restore too
    m9 = typed()
    m9.model_response(Message.assistant("{}"), TOOLS, 40, output_check=OutputCheck(None, "say more"))
    out["output_retry_to_send"] = m9
    m10 = typed()
    m10.model_response(assistant(call("o1", "final_result")), TOOLS, 40, output_check=OutputCheck("o1", "bad", "x"))
    out["output_failed_once"] = m10
    out["paused"] = _paused()
    m11 = _paused()
    m11.approve({"c2": Modify({"path": "b"})})
    out["approved_to_run"] = m11  # awaiting_tools with a decision to run, another call's result held
    m12 = LoopMachine()
    m12.accept_input("hello", limits=UsageLimits(requests=1, cost=Decimal("0.01")))
    m12.model_response(assistant(call("c1")), TOOLS, 40, usage=Usage(10, 5), cost=Decimal("0.002"))
    m12.tool_results([result("c1")])
    out["at_the_request_limit"] = m12  # its next step ends the run, after a restore too
    m13 = started()
    m13.model_response(assistant(call("c1")), TOOLS, 40)
    m13.tool_results([result("c1")])
    m13.model_response(assistant(call("c2")), TOOLS, 40)
    out["repeating"] = m13  # a second call in a row of read(a)
    return out


def _paused() -> LoopMachine:
    """A run paused on c2 (deferred, with a reason), holding c1's result."""
    m = started()
    m.model_response(assistant(call("c1"), call("c2", "write")), TOOLS, 40)
    m.tool_results([result("c1")], deferred={"c2": "it writes"})
    return m


@pytest.mark.parametrize("name", list(_machines_in_every_state()))
def test_a_restored_machine_takes_exactly_the_same_next_step(name: str) -> None:
    m = _machines_in_every_state()[name]
    text = m.to_json()
    restored = LoopMachine.from_json(text)
    assert restored.to_json() == text
    assert restored.next_step(POLICY) == m.next_step(POLICY)
    assert list(restored.full_history()) == list(m.full_history())
    assert restored.state is m.state


def test_a_machine_restored_while_retrying_after_an_overflow_still_retries_only_once() -> None:
    restored = LoopMachine.from_json(_machines_in_every_state()["retrying_after_overflow"].to_json())
    restored.context_overflow("still too long")
    assert restored.outcome.kind is OutcomeKind.CONTEXT_OVERFLOW


def test_a_restored_machine_keeps_counting_invalid_answers() -> None:
    restored = LoopMachine.from_json(_machines_in_every_state()["output_failed_once"].to_json())
    restored.model_response(
        assistant(call("o2", "final_result")), TOOLS, 50, output_check=OutputCheck("o2", "bad again", "y")
    )
    assert restored.next_step(MachinePolicy(output_retries=1)) == Done(restored.outcome)
    assert restored.outcome.kind is OutcomeKind.OUTPUT_INVALID


FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures" / "machines"


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("v1-awaiting-tools.json", CallTools(1, (call("c1", path="a.txt"),))),
        ("v1-terminal.json", Done(Outcome(OutcomeKind.COMPLETED))),
        ("v1-awaiting-compaction.json", Prune(960, 460)),
        ("v2-awaiting-tools.json", CallTools(2, (call("t1", "temperature", city="Oslo"),))),
        ("v2-terminal.json", Done(Outcome(OutcomeKind.COMPLETED))),
    ],
)
def test_an_older_machine_file_still_loads_and_takes_its_next_step(name: str, step: object) -> None:
    # Written by the releases before typed output (format_version 1, no "output" key) and before the
    # guardrails (format_version 2, no "limits", "usage", "loop", "deferred", "approved").
    text = (FIXTURES / name).read_text()
    version = int(name[1])
    assert text.startswith(f'{{"format_version":{version},') and '"usage":{' not in text
    assert ('"output":{' in text) is (version == 2)
    m = LoopMachine.from_json(text)
    assert m.next_step(POLICY) == step
    saved = m.to_json()
    assert f'"format_version":{MACHINE_FORMAT_VERSION},' in saved
    assert LoopMachine.from_json(saved).to_json() == saved


def test_a_version_2_machine_goes_on_to_finish_its_typed_run_counting_from_zero() -> None:
    m = LoopMachine.from_json((FIXTURES / "v2-awaiting-tools.json").read_text())
    assert m.output_tool == "final_result" and m.output_failures == 1 and m.usage.requests == 0
    m.tool_results([result("t1", "-3.5 °C", "temperature")])
    m.next_step(POLICY)
    m.model_response(
        assistant(call("f2", "final_result", city="Oslo")), {"temperature"}, 120, output_check=OutputCheck("f2")
    )
    assert m.outcome.kind is OutcomeKind.COMPLETED and m.usage.requests == 1


def test_a_version_1_machine_goes_on_to_finish_its_run() -> None:
    m = LoopMachine.from_json((FIXTURES / "v1-awaiting-tools.json").read_text())
    m.tool_results([result("c1", "text of a")])
    m.model_response(Message.assistant("a says hello"), TOOLS, 80)
    assert m.outcome.kind is OutcomeKind.COMPLETED
    assert [msg.role for msg in m.history] == [Role.USER, Role.ASSISTANT] * 3


def test_a_machine_holding_an_integer_past_64_bits_saves_and_restores_it_exactly() -> None:
    # The message model and conversation files keep such integers; to_json raised a bare TypeError
    # ("Integer exceeds 64-bit range"), so a session holding one could not be saved.
    big = MessagePart.tool_call("c1", "read", {"id": 2**70 + 1})
    m = LoopMachine([Message.user("go"), assistant(big), result("c1")])
    restored = LoopMachine.from_json(m.to_json())
    (value,) = restored.history[1].tool_calls()[0].input.values()  # type: ignore[union-attr]
    assert (type(value), value) == (int, 2**70 + 1)  # read back with orjson it became the float 2**70


def test_a_machine_holding_a_lone_surrogate_cannot_be_saved_and_says_where() -> None:
    from loopctl.errors import InvalidMessage

    bad = Message.model_construct(role=Role.USER, parts=(TextPart.model_construct(text="bad \ud800"),))  # unvalidated
    m = LoopMachine([Message.user("ok"), bad])
    with pytest.raises(InvalidMessage, match=r"^history\[1\]\.parts\[0\]\.text: expected a string that is valid"):
        m.to_json()


def test_a_machine_file_from_a_newer_release_is_refused() -> None:
    text = LoopMachine().to_json().replace(f'"format_version":{MACHINE_FORMAT_VERSION}', '"format_version":9')
    with pytest.raises(ConversationFileError, match="format_version 9 is newer"):
        LoopMachine.from_json(text)


def test_a_corrupt_machine_file_is_a_typed_error() -> None:
    with pytest.raises(ConversationFileError, match="not valid JSON"):
        LoopMachine.from_json("{nope")
    with pytest.raises(ConversationFileError, match="not a machine file"):
        LoopMachine.from_json('{"format_version":1}')


def _saved(name: str, **changes: object) -> str:
    import json

    doc = json.loads(_machines_in_every_state()[name].to_json())
    doc.update(changes)
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("name", "changes", "problem"),
    [
        ("awaiting_compaction", {"step": None}, "state awaiting_compaction needs the step it waits for"),
        ("awaiting_model", {"pruned_at": "x"}, "pruned_at must be a whole number of tokens or null, got 'x'"),
        ("awaiting_model", {"turn": 1.5}, "turn must be a whole number >= 0, got 1.5"),
        ("awaiting_model", {"turn": "3"}, "turn must be a whole number >= 0, got '3'"),
        ("awaiting_model", {"turn": -1}, "turn must be a whole number >= 0, got -1"),
        ("awaiting_model", {"context_tokens": True}, "context_tokens must be a whole number >= 0, got True"),
        ("awaiting_model", {"format_version": True}, "missing or invalid format_version"),
        ("awaiting_model", {"history": "abc"}, "history must be an array of messages"),
        ("awaiting_tools", {"calls": []}, "state awaiting_tools needs the unanswered tool calls of the last reply"),
        ("awaiting_tools", {"calls": [{"type": "tool_call", "id": "zz", "name": "read", "input": {}}]},
         "the calls of state awaiting_tools are not the tool calls of the last pending message"),
        ("awaiting_tools", {"machine_results": [
            {"type": "tool_result", "call_id": "zz", "name": "x", "output": "o", "is_error": True}]},
         "machine_results answer no call: zz"),
        ("terminal", {"state": "awaiting_tools"}, "state awaiting_tools needs the unanswered tool calls"),
        ("terminal", {"pending": [{"role": "user", "parts": []}]}, "state terminal has pending messages"),
        ("start", {"step": {"type": "prune", "context_tokens": 1, "needed": 1}}, "state start has a step"),
        ("awaiting_compaction", {"step": {"type": "squash"}}, "step type 'squash' is not prune or compact"),
        ("failed", {"outcome": {"kind": "failed", "error": 5}}, "outcome.error must be a string or null, got 5"),
        ("failed", {"outcome": [1]}, "outcome must be an object"),
        ("terminal", {"overflow": {"kind": "context_overflow", "error": "x"}}, "state terminal has a context overflow"),
        ("overflowed", {"overflow": {"kind": "context_overflow", "error": 1}}, "overflow.error must be a string"),
        ("terminal", {"output": {"tool": None, "failures": 1}}, "state terminal has typed-output state"),
        ("awaiting_tools", {"output": {"prompt": "retry"}}, "state awaiting_tools has an output retry to send"),
        ("output_failed_once", {"output": {"failures": -1}}, "output.failures must be a whole number >= 0"),
        ("output_failed_once", {"output": [1]}, "output must be an object"),
    ],
)  # fmt: skip
def test_a_machine_file_whose_fields_disagree_is_refused_when_read_not_later(
    name: str, changes: dict[str, object], problem: str
) -> None:
    # Each of these was read without complaint, then failed later (an AssertionError or TypeError from
    # next_step) or drove a run from an impossible state.
    with pytest.raises(ConversationFileError) as info:
        LoopMachine.from_json(_saved(name, **changes))
    assert info.value.source == "<machine>"
    assert problem in info.value.problem


def test_new_input_after_a_reply_whose_calls_have_no_result_cuts_that_reply_off() -> None:
    # Issue 18, item 11: a history at rest that ends with unanswered calls (a fork, an import, a hand-made
    # session) is treated as a run cut mid-turn: the reply is dropped with what follows it, so the request
    # the input makes can be sent.
    history = [Message.user("mail ada"), assistant(call("e1", "send_email", to="ada")), Message.user("go on")]
    m = LoopMachine(history)
    view = m.full_history()
    m.accept_input("hello again")
    assert list(m.full_history()) == [Message.user("mail ada"), Message.user("hello again")]
    assert list(m.history) == [Message.user("mail ada")] and len(view) == 3  # a view handed out stays as it was
    assert check_conversation(list(m.full_history()), at_rest=True) == []


def test_new_input_after_answered_calls_keeps_the_whole_history() -> None:
    history = [Message.user("go"), assistant(call("c1")), result("c1"), Message.assistant("done")]
    m = LoopMachine(history)
    m.accept_input("more")
    assert list(m.full_history()) == [*history, Message.user("more")]


def test_input_answering_exactly_the_open_calls_completes_the_turn_instead_of_cutting_it() -> None:
    # A handoff's next agent continues the reply that handed over with that reply's results as its input:
    # cutting the reply off there (the rule above) left the results answering nothing, and every request of
    # the next agent was refused on pairing.
    history = [Message.user("refund A7"), assistant(call("t1", "transfer_to_billing"), call("t2", "lookup"))]
    answers = Message(role=Role.USER, parts=(result("t1").parts[0], result("t2").parts[0]))
    m = LoopMachine(history)
    m.accept_input(answers)
    assert list(m.full_history()) == [*history, answers]
    assert check_conversation(list(m.full_history())) == []
    # Results of only some of the open calls do not complete the turn: the reply is cut as before.
    partial = LoopMachine(history)
    partial.accept_input(Message(role=Role.USER, parts=(result("t1").parts[0],)))
    assert list(partial.full_history())[:1] == [Message.user("refund A7")]
    assert len(partial.full_history()) == 2
