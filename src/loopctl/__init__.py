"""loopctl: one provider-neutral conversation model, and the agent loop on top of it.

``from loopctl import Message, MessagePart, Role, ToolContent, ImageSource, Retention`` gives the message
model (:mod:`loopctl.message`). Providers, the engine and the CLI live in their own subpackages and are
imported only when used, so ``import loopctl`` stays cheap and imports no provider SDK.
"""

from loopctl.errors import LoopError
from loopctl.message import (
    ImagePart,
    ImageSource,
    Message,
    MessagePart,
    Retention,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
)

__version__ = "0.1.0"
"""This release's version (the distribution ``pyloopctl``)."""

__all__ = [
    "ImagePart",
    "ImageSource",
    "LoopError",
    "Message",
    "MessagePart",
    "Retention",
    "Role",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolContent",
    "ToolResultPart",
    "__version__",
]
