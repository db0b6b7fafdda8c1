"""The conversation model (``docs/wire-format.md``).

``Message{role, parts}`` with text, image, tool-call, thinking and tool-result parts; the JSON wire form;
conversation files; and the conversation checks. Pure: only :func:`save_conversation` and
:func:`load_conversation` touch the file system.
"""

from loopctl.message.check import ConversationProblem, ConversationRule, check_conversation
from loopctl.message.files import (
    FORMAT_VERSION,
    dumps_conversation,
    dumps_conversation_bytes,
    load_conversation,
    loads_conversation,
    save_conversation,
)
from loopctl.message.model import (
    PART_TYPES,
    ImagePart,
    ImageSource,
    Message,
    MessagePart,
    Part,
    Retention,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolContentPart,
    ToolResultPart,
)

__all__ = [
    "FORMAT_VERSION",
    "PART_TYPES",
    "ConversationProblem",
    "ConversationRule",
    "ImagePart",
    "ImageSource",
    "Message",
    "MessagePart",
    "Part",
    "Retention",
    "Role",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolContent",
    "ToolContentPart",
    "ToolResultPart",
    "check_conversation",
    "dumps_conversation",
    "dumps_conversation_bytes",
    "load_conversation",
    "loads_conversation",
    "save_conversation",
]
