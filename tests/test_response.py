"""``Usage``: a count the provider did not report is ``None``, told apart from 0 (issue 18: telemetry recorded
unreported usage as 0); sums add the reported counts; the JSON form round-trips and older forms load."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopctl.response import Usage

counts = st.one_of(st.none(), st.integers(min_value=0, max_value=10**12))
usages = st.builds(Usage, counts, counts, counts, counts, counts, counts)  # the sixth: cache_write_1h_tokens


def test_nothing_reported_is_not_zero() -> None:
    unknown, zero = Usage(), Usage(0, 0, 0, 0, 0)
    assert unknown != zero
    assert (unknown.input_tokens, unknown.total_tokens, unknown.reported) == (None, None, False)
    assert (zero.input_tokens, zero.total_tokens, zero.reported) == (0, 0, True)


def test_a_sum_adds_what_was_reported() -> None:
    # None + 5 == 5: a run's total is the reported tokens; it is unknown only when no reply reported it.
    assert Usage(5, None) + Usage(None, None) == Usage(5, None)
    assert Usage(5, 2, cache_read_tokens=1) + Usage(3, None) == Usage(8, 2, cache_read_tokens=1)
    assert Usage(None, 4).total_tokens == 4 and Usage(3, 4).total_tokens == 7


@given(usages, usages, usages)
def test_the_sum_is_commutative_associative_and_starts_at_nothing_reported(a: Usage, b: Usage, c: Usage) -> None:
    assert a + b == b + a
    assert (a + b) + c == a + (b + c)
    assert Usage() + a == a


@given(usages)
def test_the_json_form_round_trips(usage: Usage) -> None:
    assert Usage.from_dict(usage.to_dict()) == usage


def test_earlier_payloads_and_missing_counts_load() -> None:
    # Versions before this one wrote every count as a number (0 for what was not reported: it is read as 0).
    old = {"input_tokens": 10, "output_tokens": 2, "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0}
    assert Usage.from_dict(old) == Usage(10, 2, 0, 0, 0)
    assert Usage.from_dict({"input_tokens": 4}) == Usage(4)
    assert Usage.from_dict({"input_tokens": 4, "later_field": 1}) == Usage(4)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_a_count_that_is_not_a_whole_number_is_refused_by_name(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"^usage\.output_tokens must be a whole number >= 0 or null, got "):
        Usage.from_dict({"output_tokens": bad})


def test_the_hour_long_cache_writes_are_kept_only_when_there_were_some() -> None:
    # Merged from two branches: a reported 0 of hour-long writes made every Anthropic reply's usage differ from
    # the same usage built by hand, and wrote a new key into every stored usage.
    from loopctl.providers import anthropic

    def usage(creation: dict[str, int]) -> Usage:
        raw = {"input_tokens": 3, "output_tokens": 1, "cache_creation_input_tokens": 10, "cache_creation": creation}
        return anthropic._usage(raw)

    none, some = usage({"ephemeral_5m_input_tokens": 10, "ephemeral_1h_input_tokens": 0}), usage(
        {"ephemeral_5m_input_tokens": 4, "ephemeral_1h_input_tokens": 6}
    )
    assert none == Usage(13, 1, None, 10) and "cache_write_1h_tokens" not in none.to_dict()
    assert some == Usage(13, 1, None, 10, cache_write_1h_tokens=6)
    assert Usage.from_dict(some.to_dict()) == some
