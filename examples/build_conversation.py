"""Build, check, print and save a small conversation with loopctl's message model."""

from __future__ import annotations

import sys

from loopctl import Message, MessagePart, Retention, Role
from loopctl.message import check_conversation, load_conversation, save_conversation

conversation = [
    Message.user("What is in notes.txt?"),
    Message.new(Role.ASSISTANT, [MessagePart.tool_call("call_1", "read_file", {"path": "notes.txt"})]),
    Message.new(
        Role.USER,
        [
            MessagePart.tool_result("call_1", "read_file", "meeting notes: buy milk", False).with_retention(
                Retention.REQUERY
            )
        ],
    ),
    Message.assistant("The file says: buy milk."),
]

problems = check_conversation(conversation)
print(f"{len(conversation)} messages, {len(problems)} problems")
for message in conversation:
    print(f"--- {message.role.value}\n{message}")
path = sys.argv[1] if len(sys.argv) > 1 else "conversation.json"
save_conversation(path, conversation)
assert load_conversation(path) == conversation
print(f"saved to {path} and read back unchanged")
