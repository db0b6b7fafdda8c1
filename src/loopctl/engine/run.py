"""The record of a run: what went in, what came out, per turn, with usage and timing.

Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loopctl.engine.machine import Outcome, OutcomeKind
from loopctl.message import Message, ToolCallPart, ToolResultPart
from loopctl.response import StopReason, Usage

__all__ = ["Run", "ToolCallRecord", "Turn"]


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """One tool call of a turn: the ``call``, its ``result``, and how long it ran (``duration``, seconds).
    ``ran`` is False when the machine or the permission callback answered it without running the tool."""

    call: ToolCallPart
    result: ToolResultPart
    duration: float = 0.0
    ran: bool = True


@dataclass(frozen=True, slots=True)
class Turn:
    """One model call: the messages added since the previous call (``input``: the user's input or the
    previous turn's tool results), the model's ``output``, the ``tool_calls`` it made with their results,
    ``usage`` (tokens), the ``stop_reason`` and the ``duration`` of the model call in seconds."""

    index: int
    input: tuple[Message, ...]
    output: Message
    tool_calls: tuple[ToolCallRecord, ...] = ()
    usage: Usage = field(default_factory=Usage)
    stop_reason: StopReason = StopReason.END_TURN
    duration: float = 0.0


@dataclass(frozen=True, slots=True)
class Run:
    """The record of one run: its :class:`~loopctl.engine.Outcome`, the final answer text (``output``), each
    :class:`Turn`, the total ``usage`` (tokens), and the wall-clock ``duration`` in seconds."""

    outcome: Outcome
    output: str
    turns: tuple[Turn, ...]
    usage: Usage
    duration: float

    @property
    def ok(self) -> bool:
        """True when the run completed."""
        return self.outcome.kind is OutcomeKind.COMPLETED
