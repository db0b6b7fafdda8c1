"""Calibration's test for the reply in the lists it keeps is by identity, as the walk it replaced was."""

from __future__ import annotations

from loopctl.compact.counting import HeuristicTokenCounter, _holds
from loopctl.message import Message


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
