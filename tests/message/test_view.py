"""MessageView: a read-only view of a list that only grows, and the O(1) test that one view continues another."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopctl.engine import LoopMachine
from loopctl.message import Message, MessageView
from loopctl.providers.cache import PrefixWatch

MESSAGES = [Message.user(f"m{i}") for i in range(8)]


@given(st.integers(0, 8), st.integers(-10, 10), st.integers(-10, 10), st.sampled_from([None, 1, 2, -1]))
def test_a_view_reads_as_the_list_of_its_messages(n: int, a: int, b: int, step: int | None) -> None:
    items = list(MESSAGES)
    view = MessageView(items, n)
    shown = MESSAGES[:n]
    items.append(Message.user("appended later"))  # not in a view made before
    assert len(view) == n
    assert list(view) == shown
    assert view[a:b:step] == shown[a:b:step]
    assert view == shown and view == MessageView(list(shown), n)
    assert view != [*shown, MESSAGES[0]]
    if -n <= a < n:
        assert view[a] is shown[a]
    else:
        with pytest.raises(IndexError):
            view[a]


def test_extends_is_true_only_for_an_earlier_view_of_the_same_list() -> None:
    items = list(MESSAGES[:3])
    earlier = MessageView(items, 3)
    items.append(MESSAGES[3])
    later = MessageView(items, 4)
    assert later.extends(earlier)
    assert later.extends(later)
    assert not earlier.extends(later)  # longer: not continued
    assert not later.extends(MessageView(list(items), 3))  # another list, even with the same messages
    assert not later.extends(list(items[:3]))  # not a view: compare the messages to know
    assert not later.extends(None)


def test_the_machine_hands_out_views_that_extend_the_ones_before() -> None:
    m = LoopMachine()
    m.accept_input(Message.user("hi"))
    first = m.full_history()
    m.model_response(Message.assistant("hello"), (), 10)
    second = m.full_history()
    assert isinstance(first, MessageView) and isinstance(second, MessageView)
    assert second.extends(first) and not first.extends(second)
    assert [x.role.value for x in second] == ["user", "assistant"]


def test_the_prompt_cache_watch_still_compares_a_view_of_another_list() -> None:
    """A view of a new list (what a compaction makes) is compared message by message: a changed one is named."""
    watch = PrefixWatch()
    items = list(MESSAGES[:4])
    assert watch.check(MessageView(items, 4), None, ()) is None
    items.append(MESSAGES[4])
    assert watch.check(MessageView(items, 5), None, ()) is None
    rewritten = [MESSAGES[0], Message.user("summary"), *MESSAGES[2:5]]
    bust = watch.check(MessageView(rewritten, 5), None, ())
    assert bust is not None and (bust.what, bust.index) == ("messages", 1)
