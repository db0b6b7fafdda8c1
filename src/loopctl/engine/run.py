"""The record of a run: what went in, what came out, per turn, with usage and timing.

Pure data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from decimal import Decimal
from typing import Any, Generic

from typing_extensions import TypeVar

from loopctl._frozen import dataclass, hot
from loopctl.engine.machine import Outcome, OutcomeKind
from loopctl.engine.permission import PendingApproval
from loopctl.errors import (
    AwaitingApproval,
    FallbackExhausted,
    FallbackFailed,
    LoopDetected,
    MaxTokensReached,
    OutputInvalid,
    OutputValidationError,
    RunCancelled,
    RunError,
    RunFailed,
    RunRefused,
    TurnLimitReached,
    UsageLimitReached,
)
from loopctl.message import Message, ToolCallPart, ToolResultPart
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.tool import ToolSpend

__all__ = ["NO_OUTPUT", "ModelReply", "OutputT", "Run", "ToolCallRecord", "Turn", "count_new"]


@dataclass(frozen=True, slots=True)
@hot  # made every turn: the cheaper __init__ (loopctl._frozen.hot)
class ToolCallRecord:
    """One tool call of a turn: the ``call``, its ``result``, and how long it ran (``duration``, seconds).
    ``ran`` is False when the machine or the permission callback answered it without running the tool.
    ``error`` is the exception the tool raised (its traceback attached; the model read it as the error
    result), or the one that made its output unsendable; ``None`` otherwise, and for a call recorded by a
    durable engine (the record crosses a step or activity boundary as JSON)."""

    call: ToolCallPart
    result: ToolResultPart
    duration: float = 0.0
    ran: bool = True
    spent: ToolSpend | None = None
    """What the call spent on model calls of its own (a sub-agent's run: ``ToolContext.record_usage``);
    ``None`` for a tool that made none. Counted in :attr:`Run.usage`, :attr:`Run.cost` and the run's limits."""
    error: BaseException | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
@hot  # made every turn: the cheaper __init__ (loopctl._frozen.hot)
class ModelReply:
    """What one model call gave (the result of the driver's ``_call_model`` effect): the ``response``, the
    ``provider`` and ``model`` that answered (a fallback chain's client), and its ``cost`` in USD (``None``:
    unknown). ``failed_usage`` is what the call's attempts that failed (retries, fallbacks) had reported
    before they failed (a cut stream's input tokens: the provider bills them); ``cost`` includes their price.
    Plain data, so a durable adapter can record it and replay it as is."""

    response: ModelResponse
    provider: str = ""
    model: str = ""
    cost: Decimal | None = None
    failed_usage: Usage = field(default_factory=Usage)

    @property
    def usage(self) -> Usage:
        """The whole call's usage: the reply's and its failed attempts'."""
        return self.response.usage + self.failed_usage


@dataclass(frozen=True, slots=True)
@hot  # made every turn: the cheaper __init__ (loopctl._frozen.hot)
class Turn:
    """One model call: the messages added since the previous call (``input``: the user's input or the
    previous turn's tool results), the model's ``output``, the ``tool_calls`` it made with their results
    (calls deferred for approval are the run's ``pending_approvals`` instead), ``usage`` (tokens: the reply's,
    plus what attempts of the call that failed had reported, a cut stream's input tokens for one), the
    ``stop_reason`` and the ``duration`` of the model call in seconds.

    ``provider`` and ``model`` name what answered (the model the provider reported, else the client's; with a
    :class:`~loopctl.providers.FallbackClient`, whichever client of the chain answered). ``cost`` is the
    call's price in USD (:mod:`loopctl.pricing`) for that usage, ``None`` when it is not known."""

    index: int
    input: tuple[Message, ...]
    output: Message
    tool_calls: tuple[ToolCallRecord, ...] = ()
    usage: Usage = field(default_factory=Usage)
    stop_reason: StopReason = StopReason.END_TURN
    duration: float = 0.0
    model: str = ""
    provider: str = ""
    cost: Decimal | None = None


_RAISES: dict[OutcomeKind, type[RunError]] = {
    OutcomeKind.FAILED: RunFailed,
    OutcomeKind.CONTEXT_OVERFLOW: RunFailed,
    OutcomeKind.CANCELLED: RunCancelled,
    OutcomeKind.MAX_TURNS: TurnLimitReached,
    OutcomeKind.MAX_TOKENS: MaxTokensReached,
    OutcomeKind.REFUSED: RunRefused,
    OutcomeKind.LOOP_DETECTED: LoopDetected,
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

    A run paused for approvals (outcome ``AWAITING_APPROVAL``) lists the calls it waits on in
    :attr:`pending_approvals`; the run that continues it (``loop.run(approvals=...)``) records the decided
    calls it ran before its first model call in :attr:`resumed_calls`. :attr:`cost` is the sum of the turns'
    costs in USD (``None`` when any is unknown), and of what tools spent on model calls of their own (a
    sub-agent's run); :attr:`usage` counts those tokens too.

    :attr:`messages` is the whole conversation once the run ended (the history it continued, then what it
    added: :meth:`new_messages`), so ``agent.run(task, history=run.messages)`` continues it. :attr:`agent`
    names the :class:`~loopctl.agent.Agent` whose answer this is (after a handoff, the agent handed to; ``""``
    for a run of a bare loop).

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
    pending_approvals: tuple[PendingApproval, ...]
    resumed_calls: tuple[ToolCallRecord, ...]
    messages: Sequence[Message]
    agent: str
    _new: int = field(repr=False)
    _tool_cost: Decimal | None = field(repr=False)
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
        pending_approvals: tuple[PendingApproval, ...] = (),
        resumed_calls: tuple[ToolCallRecord, ...] = (),
        messages: Sequence[Message] = (),
        new_messages: int = 0,
        agent: str = "",
        tool_cost: Decimal | None = Decimal(0),
    ) -> None:
        object.__setattr__(self, "outcome", outcome)
        object.__setattr__(self, "turns", turns)
        object.__setattr__(self, "usage", usage)
        object.__setattr__(self, "duration", duration)
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "text", text if text is not None else output if isinstance(output, str) else "")
        object.__setattr__(self, "pending_approvals", pending_approvals)
        object.__setattr__(self, "resumed_calls", resumed_calls)
        object.__setattr__(self, "messages", messages)
        object.__setattr__(self, "agent", agent)
        object.__setattr__(self, "_new", max(0, min(new_messages, len(messages))))
        object.__setattr__(self, "_tool_cost", tool_cost)
        object.__setattr__(self, "_output", output)

    def new_messages(self) -> Sequence[Message]:
        """The messages this run added to the conversation (its input, the replies, the tool results), the
        tail of :attr:`messages`. After a compaction pass rewrote the conversation, every message the pass
        made counts as new (the summary included)."""
        return self.messages[len(self.messages) - self._new :]

    @property
    def cost(self) -> Decimal | None:
        """What the run's model calls cost, in USD: the sum of :attr:`Turn.cost` and of the tool calls' own
        :attr:`ToolCallRecord.cost` (a sub-agent's), ``None`` when the price of any of them is unknown (never a
        guess); ``Decimal(0)`` for a run without model calls."""
        total = Decimal(0)
        for turn in self.turns:
            if turn.cost is None:
                return None
            total += turn.cost
        if self._tool_cost is None:
            return None
        return total + self._tool_cost

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
        ``RunRefused``, ``OutputInvalid``, ``UsageLimitReached``, ``LoopDetected``, ``FallbackExhausted``,
        ``AwaitingApproval``), chained from :attr:`error`. So ``run =
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
        if kind is OutcomeKind.LIMIT_REACHED:
            raise UsageLimitReached(text, self, self.outcome.limit) from self.error
        if kind is OutcomeKind.FALLBACK_EXHAUSTED:
            failed = self.error.errors if isinstance(self.error, FallbackFailed) else ()
            raise FallbackExhausted(text, self, failed) from self.error
        if kind is OutcomeKind.AWAITING_APPROVAL:
            ids = ", ".join(p.id for p in self.pending_approvals)
            text += f" (calls {ids}; continue with loop.run(approvals={{...}}))"
            raise AwaitingApproval(text, self, self.pending_approvals) from self.error
        raise _RAISES.get(kind, RunFailed)(text, self) from self.error


def count_new(messages: Sequence[Message], anchor: tuple[int, Message] | None) -> int:
    """How many of ``messages`` (a conversation after a run) the run added: those after ``anchor`` (the index
    and object of the last message before the run; ``None`` for a conversation that was empty), found by
    identity; all of them when a compaction pass rewrote it away."""
    if anchor is None:
        return len(messages)
    index, last = anchor
    if index < len(messages) and messages[index] is last:
        return len(messages) - index - 1
    for i in range(len(messages) - 1, -1, -1):
        if messages[i] is last:
            return len(messages) - i - 1
    return len(messages)
