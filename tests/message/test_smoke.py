"""First checks of the message model; the full rule-by-rule suite lives beside this file."""

from loopctl import Message, MessagePart, Role
from loopctl.message import dumps_conversation, loads_conversation


def test_mini_conversation_round_trips_through_a_conversation_file() -> None:
    conversation = [
        Message.user("What is in notes.txt?"),
        Message.new(Role.ASSISTANT, [MessagePart.tool_call("call_1", "read_file", {"path": "notes.txt"})]),
        Message.new(Role.USER, [MessagePart.tool_result("call_1", "read_file", "meeting notes: buy milk", False)]),
        Message.assistant("The file says: buy milk."),
    ]
    text = dumps_conversation(conversation)
    assert text.startswith('{"format_version":1,"messages":[{"role":"user","parts":[{"type":"text","text":"What')
    assert loads_conversation(text) == conversation
