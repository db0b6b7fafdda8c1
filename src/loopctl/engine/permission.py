"""Permission decisions: a callback may approve, deny or modify each tool call before it runs.

The callback takes the :class:`~loopctl.message.ToolCallPart` and returns (or, if async, resolves to) one of
:class:`Approve`, :class:`Deny` or :class:`Modify`; ``True``/``False`` are read as approve/deny.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias, Union

from loopctl.message import ToolCallPart

__all__ = ["Approve", "Decision", "Deny", "Modify", "PermissionCallback"]


@dataclass(frozen=True, slots=True)
class Approve:
    """Run the call as the model asked."""


@dataclass(frozen=True, slots=True)
class Deny:
    """Do not run the call; the model reads ``reason`` as an error result."""

    reason: str = "The user denied this tool call."


@dataclass(frozen=True, slots=True)
class Modify:
    """Run the call with ``input`` instead of the model's input (the history keeps the model's call)."""

    input: Any


Decision: TypeAlias = Union[Approve, Deny, Modify, bool]
"""What a permission callback returns."""

PermissionCallback: TypeAlias = Callable[[ToolCallPart], Union[Decision, Awaitable[Decision]]]
"""Decides each tool call before it runs."""
