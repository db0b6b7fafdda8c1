"""loopctl: one provider-neutral conversation model, and the agent loop on top of it.

``from loopctl import Agent`` gives the agent (:mod:`loopctl.agent`, imported on first use);
``from loopctl import Message, MessagePart, Role, ToolContent, ImageSource, Retention`` gives the message
model (:mod:`loopctl.message`). Providers, the engine and the CLI live in their own subpackages and are
imported only when used, so ``import loopctl`` stays cheap and imports no provider SDK.
"""

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:  # imported on first use: the agent pulls in the engine
    from loopctl.agent import Agent

__version__ = "0.1.0"

__all__ = [
    "Agent",
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


def __getattr__(name: str) -> object:
    if name == "Agent":
        from loopctl.agent import Agent

        return Agent
    raise AttributeError(f"module 'loopctl' has no attribute {name!r}")
