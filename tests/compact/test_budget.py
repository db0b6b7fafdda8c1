"""ContextBudget: the policy numbers, the pressure lines, and the verdict on a pass."""

from __future__ import annotations

import pytest

from loopctl.compact import ContextBudget, HeuristicTokenCounter, PassOutcome, Pressure, TruncatingCompactor, prune
from loopctl.errors import CompactionOverflow
from loopctl.message import Message, Role, TextPart
from tests.compact.build import image, tool_turn, user


def test_default_policy_numbers() -> None:
    b = ContextBudget()
    assert (b.window, b.protected_tail) == (200_000, 2_000)
    assert b.prune_tokens == 120_000
    assert b.threshold_tokens == 160_000
    assert b.emergency_tokens == 190_000
    assert b.target_tokens == 112_000  # 70% of the threshold line
    assert isinstance(b.counter, HeuristicTokenCounter)


@pytest.mark.parametrize(
    ("tokens", "pressure"),
    [
        (0, Pressure.NONE),
        (120_000, Pressure.NONE),  # the prune line must be passed
        (120_001, Pressure.PRUNE),
        (160_000, Pressure.PRUNE),  # compaction starts strictly above the threshold
        (160_001, Pressure.COMPACT),
        (189_999, Pressure.COMPACT),
        (190_000, Pressure.EMERGENCY),  # emergency at 95% or more
        (250_000, Pressure.EMERGENCY),
    ],
)
def test_pressure_lines(tokens: int, pressure: Pressure) -> None:
    assert ContextBudget().pressure(tokens) is pressure


def test_room_needed_is_measured_down_to_the_target() -> None:
    b = ContextBudget()
    assert b.room_needed(170_000) == 58_000
    assert b.room_needed(100_000) == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"window": 0}, "window must be a positive"),
        ({"threshold": 0.5, "prune_line": 0.6}, "prune_line <= threshold"),
        ({"emergency": 0.7}, "threshold <= emergency"),
        ({"emergency": 1.2}, "emergency <= 1"),
        ({"target_ratio": 0}, "target_ratio"),
        ({"protected_tail": -1}, "protected_tail"),
    ],
)
def test_inconsistent_budgets_are_refused(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ContextBudget(**options)  # type: ignore[arg-type]


def test_for_provider_uses_the_provider_preset() -> None:
    b = ContextBudget.for_provider("anthropic", window=1_000_000)
    assert isinstance(b.counter, HeuristicTokenCounter)
    assert b.counter.preset.name == "anthropic"
    assert b.window == 1_000_000


def test_an_image_heavy_conversation_does_not_trigger_compaction_by_its_base64_size() -> None:
    """Twenty 1 MB screenshots are 26 million base64 characters, 6.7 million tokens by length; counted as
    images they are 32,000 tokens, well under the prune line."""
    convo = [Message.new(Role.USER, [TextPart(text=f"screenshot {i}"), image()]) for i in range(20)]
    assert sum(len(m.parts[1].source.data) for m in convo) > 26_000_000  # type: ignore[union-attr]
    b = ContextBudget()
    tokens = b.measure(convo)
    assert 32_000 <= tokens < 33_000
    assert b.pressure(tokens) is Pressure.NONE


def test_assess_classifies_a_smaller_result_as_compacted() -> None:
    b = ContextBudget(window=2_000, protected_tail=100)
    convo = [user("task"), *tool_turn("c1", "x" * 4000), *tool_turn("c2", "y" * 400), Message.assistant("ok")]
    before = b.measure(convo)
    after = prune(convo, need=b.room_needed(before), counter=b.counter, protected_tail=b.protected_tail)
    report = b.assess(before, after)
    assert report.outcome is PassOutcome.COMPACTED
    assert report.messages == after
    assert report.tokens_after == b.measure(after) < before
    assert report.fits
    assert report.target == b.target_tokens


def test_assess_classifies_an_unchanged_result_as_no_change() -> None:
    b = ContextBudget()
    convo = [user("task"), Message.assistant("done")]
    report = b.assess(b.measure(convo), list(convo))
    assert report.outcome is PassOutcome.NO_CHANGE
    assert report.messages is None
    assert report.tokens_after == report.tokens_before


def test_assess_classifies_an_overflow_with_its_numbers() -> None:
    b = ContextBudget(window=1_000)
    convo = [user("task"), *tool_turn("c1", "x" * 20_000)]
    before = b.measure(convo)
    with pytest.raises(CompactionOverflow) as info:
        TruncatingCompactor().compact(convo, b)
    report = b.assess(before, info.value)
    assert report.outcome is PassOutcome.OVERFLOW
    assert report.error is info.value
    assert report.tokens_after == info.value.tokens_after > report.target == 560
    assert not report.fits


def test_budget_prune_returns_the_same_list_when_nothing_was_pruned() -> None:
    b = ContextBudget(window=2_000, protected_tail=100)
    convo = [user("task"), *tool_turn("c1", "x" * 4000), *tool_turn("c2", "y" * 400), Message.assistant("ok")]
    assert b.prune(convo, 0) is convo
    pruned = b.prune(convo, 500)
    assert pruned is not convo
    assert len(pruned) == len(convo)
    assert b.measure(pruned) < b.measure(convo)
    assert b.prune(convo) == prune(convo, need=b.room_needed(b.measure(convo)), counter=b.counter, protected_tail=100)


def test_budget_compact_runs_the_truncating_compactor_by_default() -> None:
    b = ContextBudget(window=2_000, protected_tail=100)
    convo = [user("task"), *tool_turn("c1", "x" * 4000), *tool_turn("c2", "y" * 400), Message.assistant("ok")]
    out = b.compact(convo)
    assert out == TruncatingCompactor().compact(convo, b)
    assert b.compact([user("small")]) is None  # nothing saved: feed compaction_noop


def test_budget_compact_refuses_a_compactor_that_needs_a_model_call() -> None:
    from loopctl.compact import SummarizingCompactor

    with pytest.raises(TypeError, match=r"plan\.finish"):
        ContextBudget().compact([user("x")], SummarizingCompactor())  # type: ignore[arg-type]
