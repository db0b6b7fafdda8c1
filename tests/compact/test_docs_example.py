"""The worked example of docs/compaction.md: every number and the transcript in the document are checked
here, so the document cannot drift from the code."""

from __future__ import annotations

from pathlib import Path

from loopctl.compact import (
    PRUNE_MARKER,
    SUMMARY_HEADER,
    TRUNCATION_NOTICE,
    PassOutcome,
    Pressure,
    SummarizingCompactor,
    TruncatingCompactor,
    prune,
)
from loopctl.message import Message, check_conversation
from tests.compact.worked_example import SUMMARY, budget, conversation

DOC = (Path(__file__).parents[2] / "docs" / "compaction.md").read_text()


def test_policy_numbers_and_the_starting_conversation() -> None:
    b, convo = budget(), conversation()
    assert (b.prune_tokens, b.threshold_tokens, b.emergency_tokens, b.target_tokens) == (1_500, 2_000, 2_375, 1_400)
    assert [b.counter.message_tokens(m) for m in convo] == [17, 16, 671, 17, 29, 18, 509, 23, 446, 24, 326, 22]
    assert b.measure(convo) == 2_118
    assert b.pressure(2_118) is Pressure.COMPACT
    assert b.room_needed(2_118) == 718


def test_prune_step() -> None:
    b, convo = budget(), conversation()
    out = prune(convo, need=718, counter=b.counter, protected_tail=b.protected_tail)
    changed = [i for i, (x, y) in enumerate(zip(convo, out, strict=True)) if x is not y]
    assert changed == [2, 8]
    assert [b.counter.message_tokens(out[i]) for i in changed] == [38, 39]
    assert str(out[2].parts[0].output) == PRUNE_MARKER.format(call='read_file({"path":"export.py"})')
    assert b.measure(out) == 1_078
    assert b.assess(2_118, out).outcome is PassOutcome.COMPACTED
    assert b.measure(prune(convo, need=10**9, counter=b.counter, protected_tail=b.protected_tail)) == 325
    for line in ("**1,078 tokens**", "(671 → 38)", "(446 → 39)", "325 tokens"):
        assert line in DOC


def test_truncate_step() -> None:
    b, convo = budget(), conversation()
    out = TruncatingCompactor().compact(convo, b)
    assert out[0] is convo[0]
    assert out[1] == Message.user(TRUNCATION_NOTICE)
    assert out[2:4] == convo[3:5]
    assert out[4:] == convo[7:]
    assert b.counter.message_tokens(out[1]) == 51
    assert b.measure(out) == 955
    assert check_conversation(out) == []
    assert "Result: **955 tokens**" in DOC


def test_summarize_step() -> None:
    b, convo = budget(), conversation()
    plan = SummarizingCompactor(max_summary_tokens=200, item_chars=300).start(convo, b)
    assert plan is not None
    assert plan.request.max_tokens == 200
    assert list(plan.summarized) == convo[:7]
    text = plan.request.messages[0].text_content()
    transcript = text[text.index("<transcript>") :]
    assert f"```text\n{transcript}\n```" in DOC
    assert f"{len(SUMMARY)} characters" in DOC
    out = plan.finish(SUMMARY)
    assert out[0] == Message.user(SUMMARY_HEADER + SUMMARY)
    assert b.counter.message_tokens(out[0]) == 81
    assert out[1:3] == convo[3:5]
    assert out[3:] == convo[7:]
    assert b.measure(out) == 968
    assert plan.finish(RuntimeError("timeout")) == convo
    assert "Result: **968 tokens**" in DOC
