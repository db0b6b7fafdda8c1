"""Calibration's test for the reply in the lists it keeps is by identity, as the walk it replaced was; a count
after a calibration adds the reply to the report; the scale's refit."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopctl.compact.counting import HeuristicTokenCounter, _holds
from loopctl.message import ImagePart, ImageSource, Message, MessageView, Role, TextPart, ToolCallPart
from tests.compact.strategies import long_conversations


def test_holds_tests_identity_not_equality() -> None:
    a, b = Message.user("same"), Message.user("same")
    assert a == b and a is not b
    assert _holds([Message.user("x"), a], a)
    assert not _holds([Message.user("x"), a], b)
    assert not _holds([], a)


def test_a_reply_calibrated_while_in_the_last_count_is_counted_at_its_measured_size() -> None:
    counter = HeuristicTokenCounter()
    history = [Message.user("hello there " * 50)]
    reply = Message.assistant("an answer " * 40)
    counter.count([*history, reply])  # the reply is in the last list counted
    counter.calibrate(history, 1000, reply=reply, output_tokens=77)
    assert counter.count([*history, reply]) == 1000 + 77
    assert counter.message_tokens(reply) == 77
    # An equal reply that is another object is not the one measured.
    twin = Message.assistant("an answer " * 40)
    assert counter.message_tokens(twin) != 77


def test_the_counts_of_a_whole_pass_are_each_message_s_own() -> None:
    """``tokens_each`` (the pass calibration makes over the history, ``_tokens`` written out) gives each
    message's ``message_tokens``, for a scale other than 1, images, and a reply at its measured
    size."""
    counter = HeuristicTokenCounter(system="sys")
    image = Message(
        role=Role.USER,
        parts=(TextPart(text="look"), ImagePart(source=ImageSource(media_type="image/png", data="aGk="))),
    )
    history = [Message.user("word " * (20 * i + 1)) for i in range(6)]
    history.insert(3, image)
    reply = Message.assistant("an answer " * 9)
    counter.calibrate(history[:5], 900, reply=reply, output_tokens=31)
    counter.scale = 1.37  # as a refit leaves it (the arithmetic is not the identity), and forgets the last count
    counter._forget_last()
    conversation = [*history, reply]
    assert counter.tokens_each(conversation) == [counter.message_tokens(m) for m in conversation]
    assert counter.tokens_each(conversation)[-1] == 31
    assert counter._tokens(counter._units(image)) == counter.tokens_each([image])[0] > 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    conversation=long_conversations(min_turns=1, max_turns=12),
    cut=st.integers(1, 40),
    reported=st.integers(1, 200_000),
    output_tokens=st.none() | st.integers(0, 5_000),
    rounds=st.integers(1, 4),
    system=st.none() | st.text(min_size=1, max_size=40),
)
def test_after_calibration_a_count_with_the_reply_is_the_report_plus_the_reply(
    conversation: list[Message], cut: int, reported: int, output_tokens: int | None, rounds: int, system: str | None
) -> None:
    """The engine's shortcut after a calibration (``BareLoop._context_after_reply``): for the heuristic counter,
    ``count([*sent, reply])`` is ``reported + message_tokens(reply)``, so it adds the reply instead of counting
    the history again. Drawn over conversations, reports (scale refits included: several rounds, growing),
    replies measured or not, and system prompts."""
    counter = HeuristicTokenCounter(system=system)
    reply = Message.assistant("the reply " * (cut % 7 + 1))
    for i in range(rounds):
        sent = conversation[: max(1, len(conversation) * (i + 1) // rounds)][: cut + 10 * i]
        counter.calibrate(sent, reported * (i + 1), reply=reply, output_tokens=output_tokens)
        assert counter.count([*sent, reply]) == reported * (i + 1) + counter.message_tokens(reply)


def _refit_before(obs: list[tuple[float, int]], scale: float) -> float:
    """``_refit_scale`` as it was written before it summed lists (generators): the scale it set."""
    hs = [h for h, _ in obs]
    if len(obs) < 2 or max(hs) - min(hs) < HeuristicTokenCounter.MIN_SPAN:
        return scale
    mean_h = sum(hs) / len(obs)
    mean_r = sum(r for _, r in obs) / len(obs)
    var = sum((h - mean_h) ** 2 for h in hs)
    slope = sum((h - mean_h) * (r - mean_r) for h, r in obs) / var
    low, high = HeuristicTokenCounter.SCALE_BOUNDS
    return min(high, max(low, slope))


@given(
    st.lists(st.tuples(st.floats(0, 1e7, allow_nan=False), st.integers(-10_000, 10_000_000)), min_size=0, max_size=8)
)
def test_the_scale_refit_is_the_one_of_before(obs: list[tuple[float, int]]) -> None:
    counter = HeuristicTokenCounter()
    counter.scale = 1.1
    counter._observations = list(obs)
    counter._refit_scale()
    assert counter.scale == _refit_before(obs, 1.1)


def test_calibrations_of_a_growing_history_count_as_reported_through_refits() -> None:
    """Calibrations one after another on a history that grows (what the engine does), with reports that make
    the scale refit and then hold: after each, the history counts as reported, and the counts kept for it are
    each message's own, whether calibration reused the last counts (nothing counted between) or not."""
    counter = HeuristicTokenCounter(system="sys")
    history = [Message.user("start " * 40)]
    for i in range(30):
        history.append(Message.assistant(f"answer {i} " * (30 + 17 * i)))
        history.append(Message.user(f"more {i} " * (25 + 13 * i)))
        reported = 500 + 900 * i if i < 20 else 500 + 1400 * i  # a change of slope: the scale moves
        if i == 12:
            counter.count(history[:3])  # something else counted between two calibrations
        counter.calibrate(history, reported)
        # Checked on a shallow copy: counting on the counter itself would be "something counted between".
        probe = copy.copy(counter)
        assert probe.count(history) == reported, i
        assert probe.tokens_each(history) == [probe.message_tokens(m) for m in history], i
    assert counter.scale != 1.0  # the refits ran


def _reply(i: int) -> Message:
    """An assistant message with a call (calibration measures it), the same value for the same ``i``."""
    return Message(
        role=Role.ASSISTANT,
        parts=(TextPart(text=f"step {i} " * (i + 3)), ToolCallPart(id=f"c{i}", name="f", input={"i": i})),
    )


def _pool() -> list[Message]:
    """Messages in fours: a question, a reply, and their equal copies that are other objects (a session read
    back, a compaction's copy): ``pool[i]``'s twin is ``pool[i ^ 2]``."""
    out: list[Message] = []
    for i in range(2):
        for _ in range(2):
            out.append(Message.user(f"question {i} " * (10 * i + 2)))
            out.append(_reply(i))
    return out


def _general(counter: HeuristicTokenCounter) -> None:
    """Make ``counter``'s next count and calibration take the general path: no last list to start from."""
    counter._forget_last()
    counter._calibrated = []
    counter._calibrated_view = None


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 7)),
        st.tuples(st.just("twin"), st.integers(0, 15)),  # a new list, one message replaced by its equal twin
        st.tuples(st.just("count"), st.booleans(), st.integers(0, 12)),  # the view, or a list of its first n
        st.tuples(
            st.just("calibrate"),
            st.booleans(),
            st.integers(1, 60_000),
            st.none() | st.integers(0, 7),  # the reply: pool[i] (appended next, or not)
            st.none() | st.integers(0, 3_000),
        ),
    ),
    max_size=14,
)


@settings(max_examples=150, deadline=None)
@given(_ops)
def test_the_prefix_reuse_counts_as_the_general_path(ops: list[tuple[Any, ...]]) -> None:
    """``tokens_each``'s and ``calibrate``'s reuse of the last list's counts (by identity, in O(1) for views of
    one list) against a counter that always takes the general path: the same counts, scale and offset, for
    drawn histories that grow (views of one list, as the engine's requests), are copied with a message
    replaced by an equal copy of another object (a calibrated reply's copy is not the one measured), counted
    as lists or views, calibrated with replies measured or not."""
    pool = _pool()
    fast, general = HeuristicTokenCounter(system="sys"), HeuristicTokenCounter(system="sys")
    items: list[Message] = [pool[0]]
    for op in ops:
        if op[0] == "append":
            items.append(pool[op[1]])
            continue
        if op[0] == "twin":
            items = list(items)
            at = op[1] % len(items)
            items[at] = pool[next(i for i, m in enumerate(pool) if m is items[at]) ^ 2]
            continue
        view = MessageView(items, len(items))
        given: Sequence[Message] = view if op[1] else list(items[: max(1, len(items) - op[2] % 3)])
        if op[0] == "count":
            _general(general)
            assert fast.tokens_each(given) == general.tokens_each(given), op
        else:
            _, _, reported, reply, output_tokens = op
            _general(general)
            for counter in (fast, general):
                counter.calibrate(
                    given, reported, reply=None if reply is None else pool[reply], output_tokens=output_tokens
                )
            assert (fast.scale, fast.offset) == (general.scale, general.offset), op
            fast_count = fast.count(given)
            _general(general)
            assert fast_count == general.count(given), op


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 400), min_size=2, max_size=8),
    at=st.integers(0, 7),
    reports=st.lists(st.tuples(st.integers(1, 90_000), st.integers(0, 5_000)), min_size=1, max_size=4),
)
def test_a_reply_that_is_also_one_of_the_messages_sent_keeps_the_count_the_report(
    sizes: list[int], at: int, reports: list[tuple[int, int]]
) -> None:
    """A reply given to ``calibrate`` that is one of the messages sent too (the same object: a script that gives
    one reply twice) is measured there as well: ``count(messages)`` is still the report and
    ``count([*messages, reply])`` the report plus the reply (the engine's shortcut after a calibration), through
    calibrations that measure it again at other sizes. Before, the offset was worked out with its size before
    this calibration (the engine's context then differed from a count of the history by the difference)."""
    history = [
        Message(role=Role.ASSISTANT, parts=(ToolCallPart(id=f"c{i}", name="f", input={"n": "x" * n}),))
        if i % 2
        else Message.user("q " * n)
        for i, n in enumerate(sizes)
    ]
    reply = history[at % len(history)]
    counter = HeuristicTokenCounter(system="sys")
    for reported, output_tokens in reports:
        counter.calibrate(history, reported, reply=reply, output_tokens=output_tokens)
        assert counter.count(history) == reported
        assert counter.count([*history, reply]) == reported + counter.message_tokens(reply)
