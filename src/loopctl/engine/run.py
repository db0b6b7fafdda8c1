"""The record of a run: what went in, what came out, per turn, with usage and timing.

Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loopctl.engine.machine import Outcome, OutcomeKind
from loopctl.errors import (
    MaxTokensReached,
    RunCancelled,
    RunError,
    RunFailed,
    RunRefused,
    TurnLimitReached,
)
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


_RAISES: dict[OutcomeKind, type[RunError]] = {
    OutcomeKind.FAILED: RunFailed,
    OutcomeKind.CONTEXT_OVERFLOW: RunFailed,
    OutcomeKind.CANCELLED: RunCancelled,
    OutcomeKind.MAX_TURNS: TurnLimitReached,
    OutcomeKind.MAX_TOKENS: MaxTokensReached,
    OutcomeKind.REFUSED: RunRefused,
}


@dataclass(frozen=True, slots=True)
class Run:
    """The record of one run: its :class:`~loopctl.engine.Outcome`, the answer (``output``), each
    :class:`Turn`, the total ``usage`` (tokens), the wall-clock ``duration`` in seconds, and the ``error``
    that ended the run (an exception object; ``None`` unless an error did).

    ``output`` is the text of this run's last reply without tool calls: the answer of a completed run, the
    cut-off text of a ``MAX_TOKENS`` run, ``""`` when the run gave none (it never holds an earlier run's
    answer). Check :attr:`ok` or call :meth:`raise_for_outcome` before trusting it.
    """

    outcome: Outcome
    output: str
    turns: tuple[Turn, ...]
    usage: Usage
    duration: float
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        """True when the run completed."""
        return self.outcome.kind is OutcomeKind.COMPLETED

    def raise_for_outcome(self) -> Run:
        """Return this run when it completed; otherwise raise the :class:`~loopctl.errors.RunError` subclass
        of its outcome (``RunFailed``, ``RunCancelled``, ``TurnLimitReached``, ``MaxTokensReached``,
        ``RunRefused``), chained from :attr:`error`. So ``run =
        (await loop.run(task)).raise_for_outcome()`` reads as httpx's ``response.raise_for_status()``."""
        kind = self.outcome.kind
        if kind is OutcomeKind.COMPLETED:
            return self
        text = f"the run ended with outcome {kind.value}"
        if self.outcome.error:
            text += f": {self.outcome.error}"
        raise _RAISES.get(kind, RunFailed)(text, self) from self.error
