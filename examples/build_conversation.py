"""Build, check, print and save a small conversation with loopctl's message model.

    python examples/build_conversation.py [PATH]

saves to PATH, or to a temporary folder that is removed afterwards (nothing is left behind).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

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
with tempfile.TemporaryDirectory() as scratch:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(scratch) / "conversation.json"
    save_conversation(path, conversation)
    assert load_conversation(path) == conversation
    print(f"saved to {path} and read back unchanged")
