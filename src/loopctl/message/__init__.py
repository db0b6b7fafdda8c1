"""The conversation model (``docs/wire-format.md``).

``Message{role, parts}`` with text, image, tool-call, thinking and tool-result parts, and the provider-native
parts (a tool the provider ran, its result, a provider's compaction); the JSON wire form; the read-only view
of a conversation that only grows (:class:`MessageView`); conversation files; and the conversation checks.
Pure: only :func:`save_conversation` and :func:`load_conversation` touch the file system.
"""

from loopctl.message.check import ConversationProblem, ConversationRule, check_conversation
from loopctl.message.files import (
    FORMAT_VERSION,
    NATIVE_FORMAT_VERSION,
    dumps_conversation,
    dumps_conversation_bytes,
    load_conversation,
    loads_conversation,
    save_conversation,
)
from loopctl.message.model import (
    NATIVE_PART_TYPES,
    PART_TYPES,
    CompactionPart,
    ImagePart,
    ImageSource,
    Message,
    MessagePart,
    Part,
    Retention,
    Role,
    ServerToolCallPart,
    ServerToolResultPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolContentPart,
    ToolResultPart,
)
from loopctl.message.view import MessageView

__all__ = [
    "FORMAT_VERSION",
    "NATIVE_FORMAT_VERSION",
    "NATIVE_PART_TYPES",
    "PART_TYPES",
    "CompactionPart",
    "ConversationProblem",
    "ConversationRule",
    "ImagePart",
    "ImageSource",
    "Message",
    "MessagePart",
    "MessageView",
    "Part",
    "Retention",
    "Role",
    "ServerToolCallPart",
    "ServerToolResultPart",
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
