"""Permission decisions: a callback may approve, deny, modify or defer each tool call before it runs.

The callback takes the :class:`~loopctl.message.ToolCallPart` and returns (or, if async, resolves to) one of
:class:`Approve`, :class:`Deny`, :class:`Modify` or :class:`Defer`; ``True``/``False`` are read as
approve/deny. :class:`Defer` pauses the run: it ends with outcome ``AWAITING_APPROVAL`` holding the call, and
``loop.run(approvals={call_id: Approve() | Deny(reason) | Modify(input)})`` decides it later, in this process
or another (``docs/guardrails.md``, "Approvals that wait").
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import field
from typing import Any, TypeAlias, Union

from loopctl._frozen import dataclass
from loopctl.message import ToolCallPart
from loopctl.tool import ToolSpend

__all__ = [
    "DEFAULT_DENY_REASON",
    "Approval",
    "Approve",
    "Decision",
    "Defer",
    "Deny",
    "Modify",
    "PendingApproval",
    "PermissionCallback",
    "deny_reason",
    "input_problem",
    "json_problem",
]

DEFAULT_DENY_REASON = "The user denied this tool call."
"""What the model reads for a denied call when no reason (or an empty one) is given."""


@dataclass(frozen=True, slots=True)
class Approve:
    """Run the call as the model asked."""


@dataclass(frozen=True, slots=True)
class Deny:
    """Do not run the call; the model reads ``reason`` as an error result (a string; an empty one reads as
    :data:`DEFAULT_DENY_REASON`)."""

    reason: str = DEFAULT_DENY_REASON


@dataclass(frozen=True, slots=True)
class Modify:
    """Run the call with ``input`` instead of the model's input (the history keeps the model's call). ``input``
    is a JSON value (objects with string keys, arrays, strings, finite numbers, booleans, ``null``); given as an
    approval, one that is not JSON, or does not fit the tool's schema, is refused before anything runs."""

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
    agent: str = ""
    """The path of the agent whose call it is, for a sub-agent's call that pauses its parent's run
    (``"support > researcher"``); ``""`` for the run's own calls."""
    via: tuple[str, ...] = ()
    """For a sub-agent's call: the ids of the calls that run the sub-agents, outermost first."""
    spent: ToolSpend | None = field(default=None, compare=False)
    """What the call spent before it paused (a sub-agent's model calls), counted by the run that pauses."""

    @property
    def id(self) -> str:
        """The key of its decision in ``approvals=``: the call's id, or, for a sub-agent's call, the ids of the
        calls that lead to it joined by ``/`` (``"call_3/call_7"``)."""
        return "/".join((*self.via, self.call.id)) if self.via else self.call.id

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


def deny_reason(decision: Deny) -> str:
    """The text the model reads for ``decision``: its reason, or :data:`DEFAULT_DENY_REASON` when it is empty
    (the model must learn why the call did not run)."""
    reason = decision.reason
    return reason if isinstance(reason, str) and reason.strip() else DEFAULT_DENY_REASON


def input_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a tool call's input (``None`` when it can): it must be plain JSON, as the
    machine file keeps it (``docs/wire-format.md``): ``dict`` with ``str`` keys, ``list``, ``str`` (valid
    Unicode), ``int``, finite ``float``, ``bool``, ``None``. The path of the first bad value is named."""
    return json_problem(value, "input")


def json_problem(value: Any, path: str, depth: int = 0) -> str | None:
    """Why ``value`` (found at ``path``, for the message) is not plain JSON, or ``None`` (see
    :func:`input_problem`; a ``tuple`` counts as an array).

    ``depth`` is the nesting depth of ``value`` (0 at the top); past 200 levels a value is refused.
    """
    if depth > 200:
        return f"{path} is nested too deeply"
    if value is None or isinstance(value, (bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} is {value!r}, which JSON cannot hold"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{path} is a string that is not valid Unicode (a lone surrogate)"
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = json_problem(item, f"{path}[{i}]", depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} has a key that is not a string ({key!r})"
            found = json_problem(key, f"{path} key", depth + 1) or json_problem(item, f"{path}.{key}", depth + 1)
            if found is not None:
                return found
        return None
    return f"{path} is not a JSON value (its type is {type(value).__name__})"
