"""The record of a run: what went in, what came out, per turn, with usage and timing.

Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic

from typing_extensions import TypeVar

from loopctl.engine.machine import Outcome, OutcomeKind
from loopctl.errors import (
    MaxTokensReached,
    OutputInvalid,
    OutputValidationError,
    RunCancelled,
    RunError,
    RunFailed,
    RunRefused,
    TurnLimitReached,
)
from loopctl.message import Message, ToolCallPart, ToolResultPart
from loopctl.response import StopReason, Usage

__all__ = ["NO_OUTPUT", "OutputT", "Run", "ToolCallRecord", "Turn"]


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

OutputT = TypeVar("OutputT", default=str)
"""The type of a run's output (``loop.run(..., output_type=T)``); ``str`` without typed output."""


class _NoOutput:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<no output>"


NO_OUTPUT: Any = _NoOutput()
"""What a typed run that produced no valid output holds (reading :attr:`Run.output` then raises)."""


@dataclass(frozen=True, slots=True, init=False)
class Run(Generic[OutputT]):
    """The record of one run: its :class:`~loopctl.engine.Outcome`, the answer (:attr:`output`), each
    :class:`Turn`, the total ``usage`` (tokens), the wall-clock ``duration`` in seconds, the ``error`` that
    ended the run (an exception object; ``None`` unless an error did), and ``text``, the text of this run's
    last reply without tool calls (``""`` when it gave none; never an earlier run's).

    Without typed output (``Run[str]``), :attr:`output` is ``text``: the answer of a completed run, the
    cut-off text of a ``MAX_TOKENS`` run. With ``output_type=T`` it is the validated ``T``, and reading it on
    a run that did not complete raises that run's :class:`~loopctl.errors.RunError` (as
    :meth:`raise_for_outcome`). Check :attr:`ok`, or call :meth:`raise_for_outcome`, before trusting it.
    """

    outcome: Outcome
    turns: tuple[Turn, ...]
    usage: Usage
    duration: float
    error: BaseException | None
    text: str
    _output: Any = field(repr=False)

    def __init__(
        self,
        outcome: Outcome,
        output: OutputT,
        turns: tuple[Turn, ...],
        usage: Usage,
        duration: float,
        error: BaseException | None = None,
        *,
        text: str | None = None,
    ) -> None:
        object.__setattr__(self, "outcome", outcome)
        object.__setattr__(self, "turns", turns)
        object.__setattr__(self, "usage", usage)
        object.__setattr__(self, "duration", duration)
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "text", text if text is not None else output if isinstance(output, str) else "")
        object.__setattr__(self, "_output", output)

    @property
    def output(self) -> OutputT:
        """The run's answer: see the class docstring. Raises the run's ``RunError`` for a typed run with no
        valid output."""
        if self._output is NO_OUTPUT:
            self.raise_for_outcome()
            raise RuntimeError("a completed run without output")  # pragma: no cover - the driver never makes one
        return self._output  # type: ignore[no-any-return]

    @property
    def ok(self) -> bool:
        """True when the run completed."""
        return self.outcome.kind is OutcomeKind.COMPLETED

    def raise_for_outcome(self) -> Run[OutputT]:
        """Return this run when it completed; otherwise raise the :class:`~loopctl.errors.RunError` subclass
        of its outcome (``RunFailed``, ``RunCancelled``, ``TurnLimitReached``, ``MaxTokensReached``,
        ``RunRefused``, ``OutputInvalid``), chained from :attr:`error`. So ``run =
        (await loop.run(task)).raise_for_outcome()`` reads as httpx's ``response.raise_for_status()``."""
        kind = self.outcome.kind
        if kind is OutcomeKind.COMPLETED:
            return self
        text = f"the run ended with outcome {kind.value}"
        if self.outcome.error:
            text += f": {self.outcome.error}"
        if kind is OutcomeKind.OUTPUT_INVALID:
            errors = self.error.errors if isinstance(self.error, OutputValidationError) else []
            raise OutputInvalid(text, self, errors) from self.error
        raise _RAISES.get(kind, RunFailed)(text, self) from self.error
