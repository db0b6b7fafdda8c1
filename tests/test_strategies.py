"""The shared strategies draw what they promise."""

from hypothesis import given, settings

from loopctl.message import Message, check_conversation
from tests.strategies import conversations, messages


@settings(max_examples=200, deadline=None)
@given(conversations())
def test_generated_conversations_pass_the_checks(conversation: list[Message]) -> None:
    assert check_conversation(conversation) == []


@settings(max_examples=100, deadline=None)
@given(messages())
def test_generated_messages_round_trip(message: Message) -> None:
    assert Message.from_json(message.to_json()) == message
