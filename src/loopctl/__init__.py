"""loopctl: one provider-neutral conversation model, and the agent loop on top of it.

``from loopctl import Agent`` gives the agent (:mod:`loopctl.agent`, imported on first use);
``from loopctl import Message, MessagePart, Role, ToolContent, ImageSource, Retention`` gives the message
model (:mod:`loopctl.message`). Providers, the engine and the CLI live in their own subpackages and are
imported only when used, so ``import loopctl`` stays cheap and imports no provider SDK: the names below are
loaded on first access (PEP 562), so ``import loopctl`` alone (``loopctl --help``, ``loopctl.__version__``)
imports neither pydantic nor the message model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
"""This release's version (the distribution ``pyloopctl``)."""

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


def __getattr__(name: str) -> Any:
    """Load an exported name on first access (``loopctl.Message``, ``from loopctl import Message``)."""
    if name == "Agent":
        from loopctl.agent import Agent

        globals()[name] = Agent
        return Agent
    if name == "LoopError":
        from loopctl import errors

        return errors.LoopError
    if name in __all__:
        from loopctl import message

        value = getattr(message, name)
        globals()[name] = value  # the next access is a plain attribute
        return value
    raise AttributeError(f"module 'loopctl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
