"""Permission decisions: a callback may approve, deny, modify or defer each tool call before it runs.

The callback takes the :class:`~loopctl.message.ToolCallPart` and returns (or, if async, resolves to) one of
:class:`Approve`, :class:`Deny`, :class:`Modify` or :class:`Defer`; ``True``/``False`` are read as
approve/deny. :class:`Defer` pauses the run: it ends with outcome ``AWAITING_APPROVAL`` holding the call, and
``loop.run(approvals={call_id: Approve() | Deny(reason) | Modify(input)})`` decides it later, in this process
or another (``docs/guardrails.md``, "Approvals that wait").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias, Union

from loopctl.message import ToolCallPart

__all__ = ["Approval", "Approve", "Decision", "Defer", "Deny", "Modify", "PendingApproval", "PermissionCallback"]


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


@dataclass(frozen=True, slots=True)
class Defer:
    """Decide later: the run pauses with the call pending (outcome ``AWAITING_APPROVAL``); ``reason``, when
    given, is shown to whoever decides (``loopctl approve``)."""

    reason: str | None = None


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A tool call a paused run holds until it is decided (``Run.pending_approvals``): the model's ``call``
    and the ``reason`` it was deferred with (``None`` when none was given)."""

    call: ToolCallPart
    reason: str | None = None

    @property
    def id(self) -> str:
        """The call's id: the key of its decision in ``approvals=``."""
        return self.call.id

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.call.name

    @property
    def input(self) -> Any:
        """The model's input for the call."""
        return self.call.input


Decision: TypeAlias = Union[Approve, Deny, Modify, Defer, bool]
"""What a permission callback returns."""

Approval: TypeAlias = Union[Approve, Deny, Modify]
"""A decision on a deferred call, given later with ``approvals=``."""

PermissionCallback: TypeAlias = Callable[[ToolCallPart], Union[Decision, Awaitable[Decision]]]
"""Decides each tool call before it runs."""
