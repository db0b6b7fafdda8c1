"""Calibration's test for the reply in the lists it keeps is by identity, as the walk it replaced was."""

from __future__ import annotations

from loopctl.compact.counting import HeuristicTokenCounter, _holds
from loopctl.message import ImagePart, ImageSource, Message, Role, TextPart


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
