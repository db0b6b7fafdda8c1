"""The summarizing compactor: sans-IO request and reply, what the transcript shows per retention class."""

from __future__ import annotations

import pytest

from loopctl.compact import (
    REQUERY_OMITTED,
    SUMMARY_HEADER,
    SUMMARY_SYSTEM_PROMPT,
    ContextBudget,
    HeuristicTokenCounter,
    SummarizingCompactor,
)
from loopctl.errors import CompactionOverflow, Overloaded
from loopctl.message import Message, Retention, Role, ThinkingPart, ToolCallPart, check_conversation
from loopctl.providers import ModelRequest
from loopctl.response import ModelResponse
from tests.compact.build import (
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

R, D = Retention.REQUERY, Retention.DURABLE
BIG = "x" * 4_000


def _budget(target: int, protected_tail: int = 0) -> ContextBudget:
    return ContextBudget(
        window=target,
        threshold=1.0,
        emergency=1.0,
        prune_line=1.0,
        target_ratio=1.0,
        protected_tail=protected_tail,
        counter=HeuristicTokenCounter(),
    )


def _convo() -> list[Message]:
    return [
        system("You are a careful refactoring agent."),
        user("Rename Config to Settings everywhere."),
        calls(call("n1", "save_note", text="plan")),
        results(
            result(
                "n1", "Plan: rename in a.py, then b.py. Owner approved on 2024-05-01.", name="save_note", retention=D
            )
        ),
        calls(thinking("I should grep first."), call("g1", "grep", pattern="Config")),
        results(result("g1", "src/a.py:3: class Config:\n" + BIG, name="grep")),
        calls(call("r1", "read_file", path="src/a.py")),
        results(result("r1", "SECRET FILE BODY " * 200, name="read_file", retention=R)),
        assistant("Renaming now."),
        *tool_turn("w1", "written", name="write_file", path="src/a.py"),
        assistant("Done with a.py."),
    ]


def _plan(target: int = 900, **options: int):  # type: ignore[no-untyped-def]
    plan = SummarizingCompactor(max_summary_tokens=300, **options).start(_convo(), _budget(target))
    assert plan is not None
    return plan


def _transcript(plan) -> str:  # type: ignore[no-untyped-def]
    return plan.request.messages[0].text_content()


def test_start_returns_the_model_request_to_send() -> None:
    plan = _plan()
    assert isinstance(plan.request, ModelRequest)
    assert plan.request.system == SUMMARY_SYSTEM_PROMPT
    assert plan.request.max_tokens == plan.room == 300
    [msg] = plan.request.messages
    assert msg.role is Role.USER
    assert "<transcript>" in msg.text_content()


def test_untagged_results_appear_in_the_transcript() -> None:
    assert "src/a.py:3: class Config:" in _transcript(_plan())


def test_a_requery_result_appears_only_as_a_marker_naming_the_call_and_its_input() -> None:
    text = _transcript(_plan())
    assert "SECRET FILE BODY" not in text
    marker = REQUERY_OMITTED.format(call='read_file({"path":"src/a.py"})')
    assert f'Result of read_file({{"path":"src/a.py"}}): {marker}' in text


def test_durable_results_appear_in_full_and_are_also_kept_verbatim() -> None:
    convo = _convo()
    plan = SummarizingCompactor(max_summary_tokens=300).start(convo, _budget(900))
    assert plan is not None
    assert "Plan: rename in a.py, then b.py. Owner approved on 2024-05-01." in _transcript(plan)
    out = plan.finish("Renamed Config in a.py; b.py remains.")
    assert durable_results(out) == durable_results(convo)
    assert durable_results(out)[0] is durable_results(convo)[0]
    kept_call = next(m for m in out if any(isinstance(p, ToolCallPart) and p.id == "n1" for p in m.parts))
    assert kept_call.parts == (call("n1", "save_note", text="plan"),)


def test_a_leading_system_message_is_kept_and_never_summarized() -> None:
    plan = _plan()
    assert "careful refactoring agent" not in _transcript(plan)
    out = plan.finish("summary")
    assert out[0] is _convo()[0] or out[0] == _convo()[0]


def test_thinking_ages_out() -> None:
    plan = _plan()
    assert "I should grep first" not in _transcript(plan)
    out = plan.finish("summary")
    old = [p for m in out[:-4] for p in m.parts if isinstance(p, ThinkingPart)]
    assert old == []


def test_the_new_conversation_is_system_summary_durable_pairs_then_the_tail() -> None:
    convo = _convo()
    budget = _budget(900)
    plan = SummarizingCompactor(max_summary_tokens=300).start(convo, budget)
    assert plan is not None
    out = plan.finish("Renamed Config in a.py; b.py remains.")
    assert out[0] == convo[0]
    assert out[1] == Message.user(SUMMARY_HEADER + "Renamed Config in a.py; b.py remains.")
    assert out[2].tool_calls()[0].id == "n1"
    assert out[3].tool_results()[0].call_id == "n1"
    tail = out[4:]
    assert tail == convo[-len(tail) :]
    assert check_conversation(out) == []
    assert budget.measure(out) <= 900 < budget.measure(convo)


def test_a_failed_model_call_leaves_the_conversation_untouched() -> None:
    plan = _plan()
    for failure in (None, Overloaded("busy", provider="anthropic"), "", "   "):
        assert plan.finish(failure) == _convo()


def test_a_model_response_is_accepted_as_the_reply() -> None:
    plan = _plan()
    out = plan.finish(ModelResponse(message=Message.assistant("From the model.")))
    assert out[1].text_content() == SUMMARY_HEADER + "From the model."


def test_a_summary_longer_than_its_room_is_cut_without_splitting_a_character() -> None:
    plan = _plan()
    family = "👩\u200d👩\u200d👧"
    out = plan.finish(family * 2_000)
    summary = out[1].text_content()
    assert summary.endswith("…")
    body = summary[len(SUMMARY_HEADER) : -1]
    assert body
    assert len(body) % len(family) == 0
    assert HeuristicTokenCounter().message_tokens(out[1]) <= plan.room


def test_transcript_text_is_cut_without_splitting_a_character() -> None:
    family = "👩\u200d👩\u200d👧"
    convo = [user("go"), *tool_turn("big", family * 3_000), *tool_turn("later", BIG), assistant("ok")]
    plan = SummarizingCompactor(item_chars=1_000, max_summary_tokens=200).start(convo, _budget(1_200))
    assert plan is not None
    line = next(x for x in _transcript(plan).splitlines() if x.startswith("Result of read_file"))
    out = line.split(": ", 1)[1]
    head, tail = out.split("…")[0], out.split("…")[-1]
    assert "characters cut]" in out
    assert len(head) % len(family) == 0
    assert len(tail) % len(family) == 0


def test_nothing_to_summarize_gives_no_request() -> None:
    convo = [user("hi"), assistant("hello")]
    assert SummarizingCompactor().start(convo, ContextBudget()) is None
    only_kept = [system("s"), user("x" * 400)]
    assert SummarizingCompactor(max_summary_tokens=10, min_summary_tokens=10).start(only_kept, _budget(120)) is None


def test_overflow_when_the_kept_parts_and_the_smallest_summary_do_not_fit() -> None:
    convo = [user("go"), *tool_turn("d", "y" * 2_000, retention=D), *tool_turn("u", BIG), assistant("done")]
    with pytest.raises(CompactionOverflow) as info:
        SummarizingCompactor(min_summary_tokens=256).start(convo, _budget(700))
    assert info.value.tokens_after is not None
    assert info.value.tokens_after > 700
    assert "room for its own insert 256" in str(info.value)


def test_the_summary_room_shrinks_to_what_is_left() -> None:
    plan = SummarizingCompactor(max_summary_tokens=4_000).start(_convo(), _budget(900))
    assert plan is not None
    assert 256 <= plan.room < 900


def test_inconsistent_summary_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="min_summary_tokens <= max_summary_tokens"):
        SummarizingCompactor(max_summary_tokens=100, min_summary_tokens=200)
