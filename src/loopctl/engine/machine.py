"""The loop machine: the brain of an agent run, as pure, serializable data.

Like ``h11.Connection`` one level up: feeds go in (the user's input, the model's reply, tool results,
compaction results), steps come out (:class:`CallLLM`, :class:`CallTools`, :class:`Prune`,
:class:`Compact`, :class:`Done`). It never calls a model, runs a tool, sleeps or reads a clock; the driver
(:class:`~loopctl.engine.BareLoop`) does, and feeds the outcome back. Save it with :meth:`LoopMachine.to_json`
and resume it anywhere with :meth:`LoopMachine.from_json`: a restored machine takes exactly the same next step.

State table (``state`` -> what :meth:`LoopMachine.next_step` returns, which feed it waits for):

=====================  ===========================================  ====================================
state                  next_step                                    feeds accepted
=====================  ===========================================  ====================================
``START``              ``Done(IDLE)`` (nothing to do yet)            ``accept_input``
``AWAITING_MODEL``     checks, in order: cancelled -> turn limit     ``model_response``, ``cancel``,
                       -> request limit -> prune line (passed, and   ``context_overflow``, ``fail``
                       grown since the
                       last prune) -> emergency compaction (>= 95%
                       of the window, always on) -> threshold
                       compaction (strictly above, when on) ->
                       ``CallLLM``
``AWAITING_TOOLS``     ``CallTools(turn, calls, approved)``         ``tool_results``, ``cancel``, ``fail``
``AWAITING_APPROVAL``  ``Done(AWAITING_APPROVAL)``: the run is       ``approve``, ``cancel``, ``fail``
                       paused, holding calls deferred by the
                       permission check (``pending_approvals``)
``AWAITING_COMPACTION`` the same ``Prune``/``Compact`` again        ``prune_result``,
                                                                    ``compaction_result``,
                                                                    ``compaction_noop``, ``cancel``,
                                                                    ``fail``
``TERMINAL``           ``Done(outcome)``                            ``accept_input`` (a new run)
=====================  ===========================================  ====================================

Asking twice without a feed in between gives the same step.

Guardrails (``docs/guardrails.md``) are the machine's decisions too. A run's :class:`~loopctl.engine.UsageLimits`
and loop-detection setting are given with its input (:meth:`LoopMachine.accept_input`) and kept, with what the
run has spent (:attr:`LoopMachine.usage`), in the machine's state, so a restored run keeps counting: request and
tool-call limits are checked before the step that would pass them, token and cost limits after each reply
(outcome ``LIMIT_REACHED``). The same tool call (name and input) ``k`` times in a row gets an error result
instead of running, and once more ends the run (``LOOP_DETECTED``); the same call made again within one reply is
one attempt, answered as a duplicate instead of running. Calls the driver defers (a permission
check answered ``Defer``) pause the run in ``AWAITING_APPROVAL`` until :meth:`LoopMachine.approve` decides them.

Run exit (``pending`` is this run's messages, ``history`` the committed runs): success commits pending into
history; a cancel, a turn or usage limit, a loop, or any failure (a context overflow included) keeps the
longest prefix of pending in which every tool call has its result and drops the rest, so the results of tools
that ran are never lost (a turn that paused for approval holds results of tools that ran: ending the run then
answers its undecided calls with an error result, so those results are kept). A provider's context overflow
(the estimate was under the lines, the provider said the request is too long) is answered once per model
call by the emergency compaction and a second try of the call (:meth:`LoopMachine.context_overflow`).
Messages are never rewritten except by a prune or compaction pass, so
thinking stays verbatim and each request's message list starts with the previous request's, byte for byte.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from decimal import Decimal
from typing import Any, TypeAlias, Union

import orjson
from pydantic import ValidationError

from loopctl._frozen import dataclass, hot
from loopctl.engine.limits import LimitHit, RunUsage, UsageLimits, after_turn, cost_unknown, passed_after_reply
from loopctl.engine.permission import Approval, Approve, Deny, Modify, PendingApproval, deny_reason, input_problem
from loopctl.errors import (
    ConversationFileError,
    FallbackFailed,
    InvalidMessage,
    MachineStateError,
    ProviderProtocolError,
)
from loopctl.message import Message, MessageView, Role, ToolCallPart, ToolResultPart
from loopctl.message.model import _dumps_bytes, _invalid, assemble
from loopctl.response import StopReason, Usage
from loopctl.stream import loads_exact

__all__ = [
    "MACHINE_FORMAT_VERSION",
    "CallLLM",
    "CallTools",
    "Compact",
    "CompactReason",
    "DEFAULT_LOOP_DETECTION",
    "Done",
    "LoopMachine",
    "MachinePolicy",
    "MachineState",
    "Outcome",
    "OutcomeKind",
    "Prune",
    "Step",
]

MACHINE_FORMAT_VERSION = 3
"""The machine file format this release writes and the newest it reads (policy: ``docs/wire-format.md``):
version 3 added the run's guardrails (``limits``, ``usage``, ``loop``, ``deferred``, ``approved``), the state
``awaiting_approval`` and the outcomes ``limit_reached``, ``loop_detected``, ``fallback_exhausted`` and
``awaiting_approval``; version 2 added the run's typed-output state (``output``) and the outcome
``output_invalid``. Version 1 and 2 files are still read."""

DEFAULT_LOOP_DETECTION = 3
"""The same tool call this many times in a row gets an error result instead of running; once more ends the
run (``RunConfig.loop_detection``)."""


class MachineState(enum.StrEnum):
    """Where the machine is in a run (see the module's state table)."""

    START = "start"
    AWAITING_MODEL = "awaiting_model"
    AWAITING_TOOLS = "awaiting_tools"
    AWAITING_APPROVAL = "awaiting_approval"
    AWAITING_COMPACTION = "awaiting_compaction"
    TERMINAL = "terminal"


class OutcomeKind(enum.StrEnum):
    """How a run ended.

    ``COMPLETED``: the model answered without calling tools. ``REFUSED``: the provider stopped for content
    filtering or safety. ``MAX_TOKENS``: the final answer was cut off by the output limit. ``MAX_TURNS``: the
    turn limit was reached. ``CANCELLED``: the caller cancelled. ``FAILED``: an error ended the run.
    ``CONTEXT_OVERFLOW``: the run could not fit the window, even after the emergency compaction (its coherent
    prefix is kept). ``OUTPUT_INVALID``: the answer did not validate as the run's output type after
    ``output_retries`` retries (the error holds what was wrong). ``LIMIT_REACHED``: a usage limit ended the
    run (:attr:`Outcome.limit` says which). ``LOOP_DETECTED``: the model repeated the same tool call past the
    loop-detection limit. ``FALLBACK_EXHAUSTED``: every client of a fallback chain failed (the error lists
    each one's). ``AWAITING_APPROVAL``: the run is paused until its deferred tool calls are decided (it is
    not over: ``loop.run(approvals=...)`` continues it). ``IDLE``: no run yet.
    """

    COMPLETED = "completed"
    REFUSED = "refused"
    MAX_TOKENS = "max_tokens"
    MAX_TURNS = "max_turns"
    CANCELLED = "cancelled"
    FAILED = "failed"
    CONTEXT_OVERFLOW = "context_overflow"
    OUTPUT_INVALID = "output_invalid"
    LIMIT_REACHED = "limit_reached"
    LOOP_DETECTED = "loop_detected"
    FALLBACK_EXHAUSTED = "fallback_exhausted"
    AWAITING_APPROVAL = "awaiting_approval"
    IDLE = "idle"


@dataclass(frozen=True, slots=True)
class Outcome:
    """The end of a run: its :class:`OutcomeKind` and, for failures, the error's ``error_type`` (the class
    name) and ``error`` text, and whether the error was ``retryable``; for ``LIMIT_REACHED``, the ``limit``
    that ended it (dimension, spent, limit)."""

    kind: OutcomeKind
    error: str | None = None
    error_type: str | None = None
    retryable: bool = False
    limit: LimitHit | None = None

    @property
    def ok(self) -> bool:
        """True for ``COMPLETED``."""
        return self.kind is OutcomeKind.COMPLETED


class CompactReason(enum.StrEnum):
    """Why a compaction was asked for: the emergency line (>= 95% of the window, always on) or the
    threshold (strictly above it, when auto-compaction is on)."""

    EMERGENCY = "emergency"
    THRESHOLD = "threshold"


@dataclass(frozen=True, slots=True)
class CallLLM:
    """Call the model with :meth:`LoopMachine.full_history`; ``turn`` counts model calls in this run from 1."""

    turn: int


@dataclass(frozen=True, slots=True)
@hot  # made every turn: the cheaper __init__ (loopctl._frozen.hot)
class CallTools:
    """Run these tool calls (in this order) and feed :meth:`LoopMachine.tool_results`.

    ``approved`` holds the decisions given for calls that were deferred (:meth:`LoopMachine.approve`), by call
    id: such a call runs without asking the permission check again, with the input of a :class:`Modify`."""

    turn: int
    calls: tuple[ToolCallPart, ...]
    approved: Mapping[str, Approve | Modify] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Prune:
    """Run the prune pass over :meth:`LoopMachine.full_history`: the context (``context_tokens``) passed the
    prune line; the pass should free at least ``needed`` tokens. Feed :meth:`LoopMachine.prune_result`."""

    context_tokens: int
    needed: int


@dataclass(frozen=True, slots=True)
class Compact:
    """Compact :meth:`LoopMachine.full_history`; feed ``compaction_result`` or ``compaction_noop``."""

    reason: CompactReason
    context_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Done:
    """The run is over: see :attr:`outcome`."""

    outcome: Outcome


@dataclass(frozen=True, slots=True)
class OutputCheck:
    """The driver's verdict on a reply read as the run's typed output (fed with ``model_response``).

    ``call_id`` names the call of the output tool that was checked (``OutputTool`` mode), ``None`` when the
    reply's text was (``NativeOutput``, ``PromptedOutput``, or a reply without the output tool's call).
    ``error`` is ``None`` for valid output, else what the model is told so that it can fix it; ``problems``
    says what was wrong, for the outcome of a run that ends on it (default: ``error``).
    """

    call_id: str | None = None
    error: str | None = None
    problems: str | None = None

    @property
    def ok(self) -> bool:
        """True for valid output."""
        return self.error is None


FINAL_RESULT_TEXT = "Final result processed."
"""The result the machine gives the output tool's call that carried valid output."""

Step: TypeAlias = Union[CallLLM, CallTools, Prune, Compact, Done]
"""What the machine asks for next."""


@dataclass(frozen=True, slots=True)
class MachinePolicy:
    """The numbers the machine decides by. Token counts are estimates in tokens.

    ``max_turns``: model calls per run. ``context_window``: the model's window. ``compact_threshold``:
    compaction starts strictly above this fraction of the window (when ``auto_compact``). ``emergency``:
    compaction at or above this fraction, always. ``prune_threshold``: the prune pass runs above this
    fraction, and again only after the context grew by ``prune_step`` (a fraction of the window) since the
    last pass. ``prune_target``: the size (a fraction of the window) a prune pass aims for.
    ``output_retries``: how many invalid answers (typed output) go back to the model before the run ends
    with ``OUTPUT_INVALID``.
    """

    max_turns: int = 200
    context_window: int = 200_000
    compact_threshold: float = 0.80
    auto_compact: bool = True
    emergency: float = 0.95
    prune_threshold: float = 0.60
    prune_step: float = 0.05
    prune_target: float = 0.50
    output_retries: int = 1

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if self.output_retries < 0:
            raise ValueError("output_retries must be at least 0")
        if self.context_window < 1:
            raise ValueError("context_window must be a positive number of tokens")
        if not 0 < self.compact_threshold <= self.emergency <= 1:
            raise ValueError("expected 0 < compact_threshold <= emergency <= 1")


@dataclass
class _Turn:
    calls: list[ToolCallPart] = field(default_factory=list)
    machine_results: dict[str, ToolResultPart] = field(default_factory=dict)


class LoopMachine:
    """The agent loop's state and decisions (see the module docstring for the state table).

    ``history`` holds committed runs; ``pending`` this run's messages; ``turn`` the model calls made in this
    run; ``context_tokens`` the latest estimate of the conversation's size, in tokens, fed by the driver.
    :attr:`usage` is what this run spent, :attr:`limits` what it may, :attr:`pending_approvals` the calls a
    paused run waits on. Misuse (a feed the current state does not accept) raises
    :class:`~loopctl.errors.MachineStateError`.
    """

    __slots__ = (
        "_approved",
        "_calls",
        "_deferred",
        "_held",
        "_limits",
        "_loop_call",
        "_loop_k",
        "_loop_repeats",
        "_machine_results",
        "_messages",
        "_n_history",
        "_outcome",
        "_output_error",
        "_output_failures",
        "_output_prompt",
        "_output_tool",
        "_overflow",
        "_pruned_at",
        "_spent",
        "_step",
        "context_tokens",
        "state",
        "turn",
    )

    def __init__(self, history: Iterable[Message] = ()) -> None:
        # One append-only list holds history then pending; ``_n_history`` splits it. Anything that is not an
        # append builds a new list, so views handed out earlier stay valid snapshots.
        self._messages: list[Message] = list(history)
        self._n_history = len(self._messages)
        self.state = MachineState.START
        self.turn = 0
        self.context_tokens = 0
        self._outcome = Outcome(OutcomeKind.IDLE)
        self._calls: tuple[ToolCallPart, ...] = ()
        self._machine_results: dict[str, ToolResultPart] = {}
        self._step: Prune | Compact | None = None
        self._pruned_at: int | None = None
        # The provider's context overflow being answered by an emergency compaction: the run ends with it if
        # the compaction saves nothing or the call overflows again.
        self._overflow: Outcome | None = None
        # Typed output (see accept_input): the output tool's name, the invalid answers so far, the last one's
        # error, and the retry message still to send (text modes).
        self._output_tool: str | None = None
        self._output_failures = 0
        self._output_error: str | None = None
        self._output_prompt: str | None = None
        # Guardrails of the run (see accept_input): its limits and what it spent; loop detection's setting,
        # the signature of the last call and how many times in a row it came; the calls awaiting approval
        # (id -> reason), the decisions given for those about to run, and whether the turn in flight holds
        # results of tools that ran while other calls waited.
        self._limits: UsageLimits | None = None
        self._spent = RunUsage()
        self._loop_k: int | None = DEFAULT_LOOP_DETECTION
        self._loop_call: str | None = None
        self._loop_repeats = 0
        self._deferred: dict[str, str | None] = {}
        self._approved: dict[str, Approve | Modify] = {}
        self._held = False

    # --- reading -------------------------------------------------------------------------------------------

    @property
    def history(self) -> Sequence[Message]:
        """The committed conversation (previous runs), oldest first."""
        return MessageView(self._messages, self._n_history)

    @property
    def pending(self) -> Sequence[Message]:
        """This run's messages so far (its input, the model's replies, tool results)."""
        return self._messages[self._n_history :]

    def full_history(self) -> Sequence[Message]:
        """History then pending: what the model is sent. An O(1) read-only snapshot."""
        return MessageView(self._messages, len(self._messages))

    def results_of(self, reply: Message) -> Message | None:
        """The message that answers ``reply``'s calls when it was just committed (the last message, a user
        message, right after ``reply``), else ``None``. O(1)."""
        messages = self._messages
        if len(messages) >= 2 and messages[-2] is reply and messages[-1].role is Role.USER:
            return messages[-1]
        return None

    def last_message(self) -> Message | None:
        """The conversation's last message (history then pending), ``None`` when it has none. O(1)."""
        return self._messages[-1] if self._messages else None

    @property
    def loop_detection(self) -> int | None:
        """The run's loop-detection setting, ``k`` (``None``: off), as given to :meth:`accept_input`."""
        return self._loop_k

    @property
    def output_failures(self) -> int:
        """How many answers of this run were invalid typed output so far."""
        return self._output_failures

    @property
    def outcome(self) -> Outcome:
        """How the last run ended (``IDLE`` before the first; ``AWAITING_APPROVAL`` while it is paused)."""
        return self._outcome

    @property
    def usage(self) -> RunUsage:
        """What this run (or the last one) spent: requests, tool calls, tokens and cost, as counted for its
        limits."""
        return self._spent

    @property
    def limits(self) -> UsageLimits | None:
        """The usage limits of the run in progress (``None``: none)."""
        return self._limits

    @property
    def output_tool(self) -> str | None:
        """The name of the run's output tool (typed output in ``OutputTool`` mode), or ``None``."""
        return self._output_tool

    @property
    def held_results(self) -> Mapping[str, ToolResultPart]:
        """The results the turn in flight already has, by call id: those the machine wrote itself, and those
        fed before the turn paused for approval."""
        return dict(self._machine_results)

    @property
    def pending_approvals(self) -> tuple[PendingApproval, ...]:
        """The tool calls a paused run (``AWAITING_APPROVAL``) waits on, in the order the model made them."""
        if not self._deferred:
            return ()
        return tuple(PendingApproval(c, self._deferred[c.id]) for c in self._calls if c.id in self._deferred)

    # --- deciding ------------------------------------------------------------------------------------------

    def next_step(self, policy: MachinePolicy) -> Step:
        """What to do next under ``policy`` (see the module's state table for the checks and their order).

        Deciding ``Done`` also finishes the run (a turn limit salvages the coherent prefix); asking again
        gives the same ``Done``.
        """
        state = self.state
        if state is not MachineState.AWAITING_MODEL:  # the other states first, each step in its own branch
            if state is MachineState.AWAITING_TOOLS:
                answered, deferred = self._machine_results, self._deferred
                if answered or deferred:
                    calls = tuple(c for c in self._calls if c.id not in answered and c.id not in deferred)
                else:
                    calls = self._calls
                approved = self._approved
                return CallTools(self.turn, calls, dict(approved) if approved else {})
            if state is MachineState.AWAITING_COMPACTION:
                assert self._step is not None
                return self._step
            # TERMINAL, START, AWAITING_APPROVAL
            return Done(self._outcome)
        # AWAITING_MODEL
        if self._output_failures > policy.output_retries:
            self._end(Outcome(OutcomeKind.OUTPUT_INVALID, error=self._output_error), salvage=True)
            return Done(self._outcome)
        if self._output_prompt is not None:
            # An invalid text answer: the model is told what was wrong, in a user message, before it is called.
            self._messages.append(Message.user(self._output_prompt))
            self._output_prompt = None
        if self.turn >= policy.max_turns:
            self._end(Outcome(OutcomeKind.MAX_TURNS), salvage=True)
            return Done(self._outcome)
        limits = self._limits
        if limits is not None and limits.requests is not None and self._spent.requests >= limits.requests:
            self._end_at_limit(LimitHit("requests", self._spent.requests, limits.requests, needed=0))
            return Done(self._outcome)
        if limits is not None and self._end_past_limits():  # tools' own spend (sub-agents) passed a limit
            return Done(self._outcome)
        window = policy.context_window
        ctx = self.context_tokens
        # Pruning first (docs/compaction.md, "The budget"): it needs no model call and may make compaction unnecessary.
        prune_line = policy.prune_threshold * window
        if ctx > prune_line and (self._pruned_at is None or ctx >= self._pruned_at + policy.prune_step * window):
            needed = max(0, ctx - int(policy.prune_target * window))
            return self._await(Prune(ctx, needed))
        if ctx >= policy.emergency * window:
            return self._await(Compact(CompactReason.EMERGENCY, ctx))
        if policy.auto_compact and ctx > policy.compact_threshold * window:
            return self._await(Compact(CompactReason.THRESHOLD, ctx))
        return CallLLM(self.turn + 1)

    def _await(self, step: Prune | Compact) -> Prune | Compact:
        self._step = step
        self.state = MachineState.AWAITING_COMPACTION
        return step

    # --- feeds ---------------------------------------------------------------------------------------------

    def accept_input(
        self,
        input: str | Message,  # noqa: A002
        *,
        output_tool: str | None = None,
        limits: UsageLimits | None = None,
        loop_detection: int | None = DEFAULT_LOOP_DETECTION,
    ) -> None:
        """Start a run with the user's ``input`` (text, or a user message with images). Accepted in
        ``START`` and ``TERMINAL`` (a paused run is continued with :meth:`approve`, or ended with
        :meth:`cancel`, first). ``output_tool`` names the run's output tool (typed output in ``OutputTool``
        mode): the machine answers its calls itself and never asks for them to be run.

        ``limits`` are the run's usage limits (``None``: none); ``loop_detection`` is ``k``: the same tool call
        (name and input) ``k`` times in a row gets an error result telling the model so instead of running,
        and once more ends the run with ``LOOP_DETECTED`` (``None``: off; at least 2). Both hold until the run
        ends and are saved with the machine. Raises ``ValueError`` for a ``loop_detection`` that is not a whole
        number of at least 2 (``3.0`` included: the machine file holds a whole number), and for ``limits`` that
        are not a :class:`~loopctl.engine.UsageLimits`.

        Raises ``InvalidMessage`` (path ``input.…``) for input that cannot be written (a lone surrogate, as
        undecodable bytes of a command line become), leaving the machine as it was: such a message would make
        every request and every save of the conversation fail.

        A history that ends with tool calls without results (a session forked, imported or cut right after a
        reply that called tools) is treated as a run cut mid-turn: it is cut back to its coherent prefix
        before the input joins it, since no provider takes new input after calls it never got results for.
        Input made only of the results of exactly those calls (a handoff's next agent continuing the reply
        that handed over) completes the turn instead, and nothing is cut."""
        self._expect(MachineState.START, MachineState.TERMINAL, feed="accept_input")
        check_loop_detection(loop_detection)
        if limits is not None and not isinstance(limits, UsageLimits):
            raise ValueError(f"limits must be a UsageLimits or None, got {type(limits).__name__}")
        try:
            message = Message.user(input) if isinstance(input, str) else input
            _expect_message(message, Role.USER, "accept_input")
            message.to_json()
        except InvalidMessage as exc:
            raise InvalidMessage(f"input.{exc.path}", exc.expected) from None
        keep = coherent_tail(self._messages)
        if keep < len(self._messages) and not _answers_open_calls(self._messages, keep, message):
            self._messages = self._messages[:keep]
            self._n_history = keep
        self._messages.append(message)
        self.turn = 0
        self._outcome = Outcome(OutcomeKind.IDLE)
        self._pruned_at = None
        self._overflow = None
        self._output_tool = output_tool
        self._output_failures = 0
        self._output_error = None
        self._output_prompt = None
        self._limits = limits
        self._spent = RunUsage()
        self._loop_k = loop_detection
        self._loop_call = None
        self._loop_repeats = 0
        self.state = MachineState.AWAITING_MODEL

    def model_response(
        self,
        message: Message,
        available_tools: Iterable[str],
        context_tokens: int,
        *,
        stop_reason: StopReason | None = None,
        invalid_calls: Iterable[tuple[str, str]] = (),
        output_check: OutputCheck | None = None,
        usage: Usage | None = None,
        cost: Decimal | None = None,
        repeatable: Iterable[str] = (),
    ) -> None:
        """Feed the model's reply (``message``, an assistant message).

        ``available_tools`` names the tools that exist; a call naming another tool is answered by the machine
        itself with an error result listing the tools that exist. ``invalid_calls`` are ``(call_id, reason)``
        pairs for calls that must not run (arguments cut off by ``max_tokens``, not JSON); the machine
        answers them with an error result too. ``context_tokens`` is the conversation's size with this reply.
        With no tool calls the run completes (``REFUSED`` or ``MAX_TOKENS`` when ``stop_reason`` says so).

        Typed output: ``output_check`` is the driver's verdict on the reply as the run's output. Valid output
        completes the run: the output tool's call gets :data:`FINAL_RESULT_TEXT`, and the reply's other calls
        are answered, not run. Invalid output goes back to the model (the output tool's call gets the error as
        its result; an invalid text answer gets it in a user message before the next call), until more than
        ``output_retries`` answers were invalid: then the run ends with ``OUTPUT_INVALID``. A reply that calls
        the output tool needs the check of one of those calls; its other calls of the output tool are
        answered as not used.

        Guardrails: ``usage`` (tokens) and ``cost`` (USD; ``None``: unknown) are what the reply spent. When the
        run would go on (the reply calls tools, or its output goes back to be fixed), a token or cost limit
        the run is now past ends it with ``LIMIT_REACHED``, and a cost limit the run cannot check (a reply of
        unknown cost) fails it; then the loop check (a call repeated ``loop_detection`` times in a row gets an
        error result, once more ends the run with ``LOOP_DETECTED``; a call the reply already made, same name
        and input, is one attempt: answered as a duplicate, not run, not counted), then the tool-call limit (a
        batch that would pass it ends the run before it starts). A reply that finishes the run finishes it whatever it
        spent. An ending keeps the coherent prefix, as the turn limit does. ``repeatable`` names tools whose
        calls loop detection leaves out (polling tools); such a call between two others breaks their run.

        Raises ``MachineStateError`` when the state takes no reply, ``message`` is not an assistant message,
        or ``output_check`` does not fit the reply; and :class:`~loopctl.errors.ProviderProtocolError` for a
        reply that calls two tools under one id or a tool with no name (the driver fails the run with it).
        Whatever it raises, the machine is left exactly as it was.
        """
        if self.state is not MachineState.AWAITING_MODEL:
            self._expect(MachineState.AWAITING_MODEL, feed="model_response")
        if type(message) is not Message or message.role is not Role.ASSISTANT:
            _expect_message(message, Role.ASSISTANT, "model_response")
        calls = tuple([p for p in message.parts if isinstance(p, ToolCallPart)])
        # Everything is worked out before anything changes: a bad argument leaves the machine as it was.
        machine_results: dict[str, ToolResultPart] = {}
        to_run: list[ToolCallPart] = []
        invalid = dict(invalid_calls) if invalid_calls != () else {}
        output_tool = self._output_tool
        checked = output_check.call_id if output_check is not None else None
        if len(calls) == 1:  # the loop below for one call: no id to see twice
            if not calls[0].name:
                raise ProviderProtocolError(f"the reply calls a tool with no name (call {calls[0].id!r})")
        elif calls:
            seen: set[str] = set()
            for call in calls:
                if not call.name:
                    # Nothing can run it, and replayed in the conversation it would make every later request
                    # fail (providers refuse a nameless call).
                    raise ProviderProtocolError(f"the reply calls a tool with no name (call {call.id!r})")
                if call.id in seen:
                    # The results could not be told apart, and every provider refuses the pair it would make.
                    raise ProviderProtocolError(
                        f"the reply calls tools under the same id twice ({call.id!r}); the calls cannot be run"
                    )
                seen.add(call.id)
        if calls:
            tools = available_tools if isinstance(available_tools, (set, frozenset)) else frozenset(available_tools)
            for call in calls:
                if call.id in invalid:
                    machine_results[call.id] = _error(call, f"The call was not run: {invalid[call.id]}")
                elif output_tool is not None and call.name == output_tool:
                    if call.id == checked:
                        assert output_check is not None
                        text = FINAL_RESULT_TEXT if output_check.ok else output_check.error
                        machine_results[call.id] = ToolResultPart(
                            call_id=call.id, name=call.name, output=text or "", is_error=not output_check.ok
                        )
                    else:
                        machine_results[call.id] = _error(
                            call, f"Not used: only one call of {output_tool} is read per reply."
                        )
                elif call.name not in tools:
                    known = ", ".join(sorted(tools)) or "(none)"
                    unknown = f"Unknown tool {call.name!r}. The tools that exist are: {known}."
                    machine_results[call.id] = _error(call, unknown)
                else:
                    to_run.append(call)
        if checked is not None and checked not in machine_results:
            raise MachineStateError(f"output_check names call {checked!r}, which is no call of the output tool")
        if checked is None and output_tool is not None:
            unchecked = [c.id for c in calls if c.name == output_tool and c.id not in invalid]
            if unchecked:
                raise MachineStateError(
                    f"the reply calls the output tool {output_tool} ({', '.join(unchecked)}): model_response needs "
                    "the output_check of one of those calls"
                )
        self._messages.append(message)
        self.turn += 1
        self.context_tokens = context_tokens
        self._overflow = None
        spend = usage if usage is not None else _NO_USAGE
        # The common turn (calls to run, no typed output, no limits): nothing reads the spend between the reply
        # and its calls (the loop check does not), so they are counted as one value below, what ``with_reply``
        # then ``with_tool_calls`` give (``after_turn``).
        common = bool(calls) and output_check is None and self._limits is None
        if not common:
            self._spent = self._spent.with_reply(spend, cost)
            if output_check is not None and not output_check.ok:
                self._output_failures += 1
                self._output_error = output_check.problems or output_check.error
            if not calls:
                if stop_reason is StopReason.REFUSAL:
                    self._end(Outcome(OutcomeKind.REFUSED), salvage=False)
                elif stop_reason is StopReason.MAX_TOKENS:
                    self._end(Outcome(OutcomeKind.MAX_TOKENS), salvage=False)
                elif output_check is not None and not output_check.ok:
                    self._output_prompt = output_check.error  # sent before the next call, if there is one
                    self._end_past_limits()
                else:
                    self._end(Outcome(OutcomeKind.COMPLETED), salvage=False)
                return
            if output_check is not None and output_check.ok and checked is not None:
                # The final result is given: the other calls of the reply are answered, not run.
                for call in to_run:
                    text = f"Not run: the final result was already given by {output_tool}."
                    machine_results[call.id] = _error(call, text)
                self._calls = calls
                self._machine_results = machine_results
                self._commit_results([])
                self._end(Outcome(OutcomeKind.COMPLETED), salvage=False)
                return
            if self._limits is not None and self._end_past_limits():
                return
        if self._loop_k is not None and self._check_loops(calls, machine_results, to_run, frozenset(repeatable)):
            if common:
                self._spent = self._spent.with_reply(spend, cost)
            return
        limits = self._limits
        if (
            to_run
            and limits is not None
            and limits.tool_calls is not None
            and self._spent.tool_calls + len(to_run) > limits.tool_calls
        ):
            self._end_at_limit(LimitHit("tool_calls", self._spent.tool_calls, limits.tool_calls, len(to_run)))
            return
        if common:
            self._spent = after_turn(self._spent, spend, cost, len(to_run))
        else:
            self._spent = self._spent.with_tool_calls(len(to_run))
        self._calls = calls
        self._machine_results = machine_results
        if to_run:
            self.state = MachineState.AWAITING_TOOLS
        else:
            self._commit_results([])

    def _end_past_limits(self) -> bool:
        """After a reply the run goes on from: end it when it is past a token or cost limit, or has a cost limit
        it cannot check. True when the run ended."""
        limits = self._limits
        if limits is None:
            return False
        hit = passed_after_reply(limits, self._spent)
        if hit is not None:
            self._end_at_limit(hit)
            return True
        if cost_unknown(limits, self._spent):
            text = (
                f"the run has a cost limit ({limits.cost} USD) but the price of a reply is unknown (a model the price "
                "data does not list, a server that is not the provider's own API, or genai-prices is not installed: "
                "pip install 'pyloopctl[prices]'); the run stops rather than spend unchecked"
            )
            self._end(Outcome(OutcomeKind.FAILED, error=text, error_type="CostUnknown"), salvage=True)
            return True
        return False

    def _end_at_limit(self, hit: LimitHit) -> None:
        self._end(Outcome(OutcomeKind.LIMIT_REACHED, error=hit.describe(), limit=hit), salvage=True)

    def _check_loops(
        self,
        calls: Sequence[ToolCallPart],
        machine_results: dict[str, ToolResultPart],
        to_run: list[ToolCallPart],
        repeatable: frozenset[str],
    ) -> bool:
        """Count the reply's calls (the output tool's aside) against the last one in a row: the ``k``-th repeat
        of one call gets an error result (taken out of ``to_run``), the one after ends the run. A call of a
        ``repeatable`` tool is not counted, and starts the count again. The same call made again in the same
        reply is one attempt: it is answered as a duplicate of the first (taken out of ``to_run``: it does not
        run) and not counted. True when the run ended."""
        k = self._loop_k
        assert k is not None
        output_tool = self._output_tool
        first_of: dict[str, ToolCallPart] = {}  # signature -> the reply's first call with it
        for call in calls:
            if output_tool is not None and call.name == output_tool:
                continue
            if call.name in repeatable:
                self._loop_call, self._loop_repeats = None, 0
                continue
            signature = _signature(call)
            first = first_of.setdefault(signature, call)
            if first is not call:
                if call.id not in machine_results:
                    machine_results[call.id] = _error(
                        call,
                        f"Not run: this reply already calls {call.name!r} with the same input (call {first.id}); a "
                        "reply's identical calls run once, and that call's result answers this one too.",
                    )
                    to_run.remove(call)
                continue
            if signature == self._loop_call:
                self._loop_repeats += 1
            else:
                self._loop_call, self._loop_repeats = signature, 1
            if self._loop_repeats > k:
                text = (
                    f"the model called {call.name!r} with the same input {self._loop_repeats} times in a row "
                    f"(loop detection allows {k - 1}, then answers the {_ordinal(k)} with an error)"
                )
                self._end(Outcome(OutcomeKind.LOOP_DETECTED, error=text), salvage=True)
                return True
            if self._loop_repeats == k and call.id not in machine_results:
                machine_results[call.id] = _error(
                    call,
                    f"Not run: this is the {_ordinal(k)} call in a row of {call.name!r} with the same input (loop "
                    "detection compares the calls, not their results). Do something different; calling it again "
                    "this way ends the run.",
                )
                to_run.remove(call)
        return False

    def tool_results(
        self,
        messages: Iterable[Message],
        context_tokens: int | None = None,
        *,
        deferred: Mapping[str, str | None] | Iterable[str] = (),
        spent: RunUsage | None = None,
    ) -> None:
        """Feed the results of the calls of the last :class:`CallTools` (in one or more user messages).

        ``spent`` is what the calls spent on model calls of their own (a sub-agent's run): it counts in the
        run's :attr:`usage` and limits, and a limit it passed ends the run before the next model call
        (``LIMIT_REACHED``, the results kept).

        The machine puts every result of the turn (its own error results included) into one user message, in
        the order the model asked; other parts of the given messages follow them. Raises
        ``MachineStateError`` for a result that answers no call of the step, a call answered twice, or a call
        left unanswered. ``context_tokens`` is the conversation's size with the results, when known.

        ``deferred`` names the calls of the step that were not run but deferred (a permission check answered
        ``Defer``): call ids, or a mapping of call id to the reason given. With any, the machine holds the
        results given and pauses the run (``AWAITING_APPROVAL``, outcome ``AWAITING_APPROVAL``) until
        :meth:`approve` decides the deferred calls; other parts of the messages are refused then.
        """
        self._expect(MachineState.AWAITING_TOOLS, feed="tool_results")
        if deferred or not self._commit_whole(messages):
            results: list[ToolResultPart] = []
            other: list[Any] = []
            for m in messages:
                _expect_message(m, Role.USER, "tool_results")
                for p in m.parts:
                    if isinstance(p, ToolResultPart):
                        results.append(p)
                    else:
                        other.append(p)
            reasons = dict(deferred) if isinstance(deferred, Mapping) else dict.fromkeys(deferred)
            if reasons:
                self._hold_results(results, reasons, other)
            else:
                self._commit_results(results, other)
        if spent is not None:
            self._spent = self._spent.plus(spent)
        if context_tokens is not None:
            self.context_tokens = context_tokens

    def _commit_whole(self, messages: Iterable[Message]) -> bool:
        """The common case of :meth:`tool_results`, committed as given: one user message made only of a
        result for each call of the step, in the model's order, each naming its tool, and nothing answered or
        deferred before. The message is the one :meth:`_commit_results` would build (the same parts, in the
        same order), so it is kept instead of built again. False (nothing changed) otherwise."""
        if type(messages) is not list or len(messages) != 1:
            return False
        return self._commit_one(messages[0])

    def _feed_whole(self, message: Message) -> bool:
        """``tool_results([message])`` when the machine keeps ``message`` as given (:meth:`_commit_whole`): True
        once fed; False, nothing changed, otherwise (the driver feeds :meth:`tool_results`, which decides).
        ``BareLoop``'s one-call batches feed their results so, without the feed's list and keywords."""
        return self.state is MachineState.AWAITING_TOOLS and self._commit_one(message)

    def _commit_one(self, message: Message) -> bool:
        """:meth:`_commit_whole` of one message."""
        if self._machine_results or self._deferred:
            return False
        if type(message) is not Message or message.role is not Role.USER:
            return False
        parts, calls = message.parts, self._calls
        if len(parts) != len(calls):
            return False
        for part, call in zip(parts, calls, strict=True):
            if type(part) is not ToolResultPart or part.call_id != call.id or not part.name:
                return False
        self._messages.append(message)
        self._calls = ()
        self._approved = {}
        self._held = False
        self.state = MachineState.AWAITING_MODEL
        return True

    def _hold_results(self, results: list[ToolResultPart], reasons: dict[str, str | None], other: list[Any]) -> None:
        """Keep ``results`` with the turn and pause it on the deferred calls (``reasons``: id -> reason)."""
        if other:
            raise MachineStateError("tool_results with deferred calls takes only tool results")
        expected = {c.id for c in self._calls if c.id not in self._machine_results and c.id not in self._deferred}
        given: dict[str, ToolResultPart] = {}
        for r in results:
            if r.call_id not in expected:
                raise MachineStateError(f"tool result for {r.call_id!r} answers no call of this step")
            if r.call_id in given:
                raise MachineStateError(f"tool call {r.call_id!r} is answered twice")
            given[r.call_id] = r
        for call_id, reason in reasons.items():
            if call_id not in expected:
                raise MachineStateError(f"deferred call {call_id!r} is no call of this step")
            if call_id in given:
                raise MachineStateError(f"tool call {call_id!r} is both answered and deferred")
            if reason is not None and not isinstance(reason, str):
                raise MachineStateError(f"the reason call {call_id!r} was deferred for must be a string or None")
        missing = sorted(expected - set(given) - set(reasons))
        if missing:
            raise MachineStateError(f"tool calls without a result: {', '.join(missing)}")
        names = {c.id: c.name for c in self._calls}
        for call_id, r in given.items():
            self._machine_results[call_id] = r if r.name else r.model_copy(update={"name": names[call_id]})
        for call_id in (c.id for c in self._calls):  # the model's order
            if call_id in reasons:
                self._deferred[call_id] = reasons[call_id]
        self._approved = {}
        self._held = True
        self._outcome = Outcome(OutcomeKind.AWAITING_APPROVAL)
        self.state = MachineState.AWAITING_APPROVAL

    def approve(self, decisions: Mapping[str, Approval], *, limits: UsageLimits | None = None) -> None:
        """Decide calls of a paused run (``AWAITING_APPROVAL``), by call id: :class:`~loopctl.engine.Approve`
        and :class:`~loopctl.engine.Modify` calls run next (``CallTools(approved=...)``: without another
        permission check, a ``Modify`` with its input); a :class:`~loopctl.engine.Deny` call gets an error
        result with its reason. Calls left out stay pending: the run pauses again once the decided ones ran.
        When every call is decided and none runs, the turn is committed and the run goes on to the model.
        ``limits``, when given, replace the run's limits (what it spent so far still counts).

        A ``Deny`` with an empty reason gives the model :data:`~loopctl.engine.permission.DEFAULT_DENY_REASON`.

        Raises ``MachineStateError`` in another state, for no decisions, a call id that is not pending, a
        decision of another type, a ``Deny`` reason that is not a string, or a ``Modify`` input that is not
        JSON; the machine is left as it was.
        """
        self._expect(MachineState.AWAITING_APPROVAL, feed="approve")
        if limits is not None and not isinstance(limits, UsageLimits):
            raise MachineStateError(f"limits must be a UsageLimits or None, got {type(limits).__name__}")
        if not decisions:
            raise MachineStateError("approve() needs a decision for at least one pending call")
        for call_id, decision in decisions.items():
            if call_id not in self._deferred:
                pending = ", ".join(self._deferred) or "none"
                raise MachineStateError(f"call {call_id!r} does not await approval (pending: {pending})")
            if not isinstance(decision, (Approve, Deny, Modify)):
                raise MachineStateError(
                    f"the decision for call {call_id!r} is {decision!r}; expected Approve(), Deny(reason) or "
                    "Modify(input)"
                )
            if isinstance(decision, Deny) and not isinstance(decision.reason, str):
                raise MachineStateError(f"the reason of Deny for call {call_id!r} must be a string")
            problem = input_problem(decision.input) if isinstance(decision, Modify) else None
            if problem is not None:
                raise MachineStateError(f"the input of Modify for call {call_id!r} is refused: {problem}")
        calls = {c.id: c for c in self._calls}
        approved: dict[str, Approve | Modify] = {}
        for call_id, decision in decisions.items():
            del self._deferred[call_id]
            if isinstance(decision, Deny):
                self._machine_results[call_id] = _error(calls[call_id], deny_reason(decision))
            else:
                approved[call_id] = decision
        if limits is not None:
            self._limits = limits
        self._approved = approved
        self._outcome = Outcome(OutcomeKind.IDLE)
        self.state = MachineState.AWAITING_TOOLS
        if not approved:
            self._after_decided()

    def _after_decided(self) -> None:
        """Every call of the step was answered or deferred: pause again, or commit the turn."""
        if self._deferred:
            self._approved = {}
            self._outcome = Outcome(OutcomeKind.AWAITING_APPROVAL)
            self.state = MachineState.AWAITING_APPROVAL
        else:
            self._commit_results([])

    def _commit_results(self, results: list[ToolResultPart], other: Sequence[Any] = ()) -> None:
        if self._deferred:  # approved calls ran while others of the turn still wait
            self._hold_results(results, {}, list(other))
            return
        by_id: dict[str, ToolResultPart] = dict(self._machine_results)
        expected = {c.id for c in self._calls if c.id not in self._machine_results}
        for r in results:
            if r.call_id not in expected:
                raise MachineStateError(f"tool result for {r.call_id!r} answers no call of this step")
            if r.call_id in by_id:
                raise MachineStateError(f"tool call {r.call_id!r} is answered twice")
            by_id[r.call_id] = r
        missing = [c.id for c in self._calls if c.id not in by_id]
        if missing:
            raise MachineStateError(f"tool calls without a result: {', '.join(missing)}")
        ordered = []
        for c in self._calls:
            r = by_id[c.id]
            ordered.append(r if r.name else r.model_copy(update={"name": c.name}))
        # The results are parts that were validated when they were made: the message of them needs no check.
        results_message = Message(role=Role.USER, parts=(*ordered, *other)) if other else None
        self._messages.append(results_message or assemble(Message, role=Role.USER, parts=tuple(ordered)))
        self._calls = ()
        self._machine_results = {}
        self._approved = {}
        self._held = False
        self.state = MachineState.AWAITING_MODEL

    def prune_result(self, messages: Sequence[Message], tokens_before: int, tokens_after: int) -> None:
        """Feed the prune pass's output: the full history with old tool results replaced by markers (same
        number of messages, same order). A pass that freed nothing is fine: the machine does not ask again
        until the context grows.

        ``tokens_before`` and ``tokens_after`` are the pass's estimates of the conversation's size, in tokens,
        reported in its :class:`~loopctl.engine.CompactionFinished` event.
        """
        self._expect(MachineState.AWAITING_COMPACTION, feed="prune_result")
        if not isinstance(self._step, Prune):
            raise MachineStateError("prune_result answers a Prune step; the machine asked for a Compact")
        if len(messages) != len(self._messages):
            raise MachineStateError(
                f"a prune pass keeps every message: got {len(messages)}, expected {len(self._messages)}"
            )
        self._messages = list(messages)
        self.context_tokens = tokens_after
        self._pruned_at = tokens_after
        self._step = None
        self.state = MachineState.AWAITING_MODEL

    def compaction_result(self, messages: Sequence[Message], tokens_before: int, tokens_after: int) -> None:
        """Feed a compaction pass's output: ``messages`` replace the whole conversation (history and pending;
        pending is cleared, the run goes on). A pass that saved nothing (``tokens_after >= tokens_before``)
        ends the run with a "compaction made no progress" failure instead of looping; a pass that leaves the
        conversation at or above the emergency line cannot fit the window: the run is discarded."""
        self._expect(MachineState.AWAITING_COMPACTION, feed="compaction_result")
        if not isinstance(self._step, Compact):
            raise MachineStateError("compaction_result answers a Compact step; the machine asked for a Prune")
        if tokens_after >= tokens_before:
            self._step = None
            self._end(self._no_progress(tokens_before, tokens_after), salvage=True)
            return
        self._messages = list(messages)
        self._n_history = len(self._messages)
        self.context_tokens = tokens_after
        self._pruned_at = None
        self._step = None
        self.state = MachineState.AWAITING_MODEL

    def compaction_noop(self, tokens_before: int, tokens_after: int) -> None:
        """The compaction pass changed nothing: both buffers stay as they are and the run ends with the
        no-progress failure (it would otherwise ask for the same pass forever).

        ``tokens_before`` and ``tokens_after`` are the pass's estimates, in tokens (the same number, or close).
        """
        self._expect(MachineState.AWAITING_COMPACTION, feed="compaction_noop")
        self._step = None
        self._end(self._no_progress(tokens_before, tokens_after), salvage=True)

    def context_overflow(self, error: BaseException | str, context_tokens: int | None = None) -> None:
        """The provider refused the model call as longer than the model's window
        (:class:`~loopctl.errors.ContextOverflow`) although the estimate was under the lines: the estimate
        was low. ``context_tokens`` is the corrected size, when the driver knows one.

        The first overflow of a model call makes the machine ask for the emergency compaction
        (``Compact(EMERGENCY)``, which makes no model call) and then the same ``CallLLM`` again. A second
        overflow of that call, or a compaction that saves nothing, ends the run with ``CONTEXT_OVERFLOW`` and
        the error's text, keeping the coherent prefix as every failure does (results of tools that ran are
        never dropped). Accepted in ``AWAITING_MODEL``.
        """
        self._expect(MachineState.AWAITING_MODEL, feed="context_overflow")
        if context_tokens is not None:
            self.context_tokens = context_tokens
        outcome = _failure(error, OutcomeKind.CONTEXT_OVERFLOW)
        if self._overflow is not None:
            self._end(outcome, salvage=True)
            return
        self._overflow = outcome
        self._await(Compact(CompactReason.EMERGENCY, self.context_tokens))

    def cancel(self) -> None:
        """Cancel the run: keep the longest coherent prefix of pending (every tool call answered), drop the
        rest. A paused run's turn is kept whole, its undecided calls answered with an error result (results of
        tools that ran are never dropped). A no-op when no run is active."""
        if self.state in (MachineState.START, MachineState.TERMINAL):
            return
        self._close_held("the run was cancelled")
        self._end(Outcome(OutcomeKind.CANCELLED), salvage=True)

    def fail(self, error: BaseException | str, *, overflow: bool = False) -> None:
        """End the run with an error (outcome ``FAILED``; ``CONTEXT_OVERFLOW`` with ``overflow=True``: the run
        cannot fit the window; ``FALLBACK_EXHAUSTED`` for a :class:`~loopctl.errors.FallbackFailed`). Either
        way the coherent prefix of pending is kept (a paused turn as :meth:`cancel` keeps it)."""
        if self.state in (MachineState.START, MachineState.TERMINAL):
            raise MachineStateError("fail() needs an active run")
        if overflow:
            kind = OutcomeKind.CONTEXT_OVERFLOW
        elif isinstance(error, FallbackFailed):
            kind = OutcomeKind.FALLBACK_EXHAUSTED
        else:
            kind = OutcomeKind.FAILED
        self._close_held("the run failed")
        self._end(_failure(error, kind), salvage=True)

    def _close_held(self, why: str) -> None:
        """A turn holding results of tools that ran (it paused for approval) is committed before the run ends,
        each call without a result answered with an error saying why."""
        if not self._held or self.state not in (MachineState.AWAITING_TOOLS, MachineState.AWAITING_APPROVAL):
            return
        for call in self._calls:
            if call.id in self._machine_results:
                continue
            if call.id in self._deferred:
                text = f"Not run: {why} while the call awaited approval."
            elif call.id in self._approved:  # its decision was recorded; it may have run
                text = f"Not known whether it ran: it was approved, then {why} before its result was recorded."
            else:
                text = f"Not known whether it ran: {why} before its result was recorded."
            self._machine_results[call.id] = _error(call, text)
        self._deferred = {}
        self._commit_results([])

    # --- run exit ------------------------------------------------------------------------------------------

    def _no_progress(self, before: int, after: int) -> Outcome:
        if self._overflow is not None:
            # The compaction answered the provider's overflow: the overflow is why the run ends.
            return self._overflow
        return Outcome(
            OutcomeKind.FAILED,
            error=f"compaction made no progress ({before} tokens before, {after} after)",
            error_type="CompactionNoProgress",
        )

    def _end(self, outcome: Outcome, *, salvage: bool) -> None:
        if salvage:
            keep = coherent_prefix(self._messages, self._n_history)
            if keep < len(self._messages):
                self._messages = self._messages[:keep]
        self._n_history = len(self._messages)
        self._calls = ()
        self._machine_results = {}
        self._deferred = {}
        self._approved = {}
        self._held = False
        self._step = None
        self._overflow = None
        self._output_tool = None
        self._output_failures = 0
        self._output_error = None
        self._output_prompt = None
        self._outcome = outcome
        self.state = MachineState.TERMINAL

    def _expect(self, *states: MachineState, feed: str) -> None:
        if self.state not in states:
            wanted = " or ".join(s.value for s in states)
            raise MachineStateError(f"{feed}() is not accepted in state {self.state.value} (expected {wanted})")

    # --- persistence ---------------------------------------------------------------------------------------

    def to_json(self, *, messages: bool = True) -> str:
        """The whole machine as JSON (``docs/wire-format.md``, "Machine files"); the same machine always gives
        the same text. Raises ``InvalidMessage`` for a string that cannot be written as UTF-8 (a lone
        surrogate); integers of any size are written exactly, as in conversation files.

        ``messages=False`` writes ``history`` and ``pending`` as their lengths instead of message arrays, for
        a store that keeps the messages elsewhere (``loopctl.store``): O(1) in the history's size. Read it
        back with ``from_json(data, messages=...)``."""
        step: dict[str, Any] | None = None
        if isinstance(self._step, Prune):
            step = {"type": "prune", "context_tokens": self._step.context_tokens, "needed": self._step.needed}
        elif isinstance(self._step, Compact):
            step = {"type": "compact", "reason": self._step.reason.value, "context_tokens": self._step.context_tokens}
        o = self._outcome
        doc = {
            "format_version": MACHINE_FORMAT_VERSION,
            "state": self.state.value,
            "turn": self.turn,
            "context_tokens": self.context_tokens,
            "history": [m.to_dict() for m in self._messages[: self._n_history]] if messages else self._n_history,
            "pending": [m.to_dict() for m in self._messages[self._n_history :]]
            if messages
            else len(self._messages) - self._n_history,
            "calls": [c.to_dict() for c in self._calls],
            "machine_results": [r.to_dict() for r in self._machine_results.values()],
            "step": step,
            "pruned_at": self._pruned_at,
            "outcome": _outcome_doc(o),
        }
        if self._overflow is not None:
            doc["overflow"] = _outcome_doc(self._overflow)
        doc["output"] = {
            "tool": self._output_tool,
            "failures": self._output_failures,
            "error": self._output_error,
            "prompt": self._output_prompt,
        }
        doc["limits"] = None if self._limits is None else self._limits.to_dict()
        doc["usage"] = self._spent.to_dict()
        doc["loop"] = {"k": self._loop_k, "call": self._loop_call, "repeats": self._loop_repeats}
        doc["deferred"] = [{"id": call_id, "reason": reason} for call_id, reason in self._deferred.items()]
        doc["approved"] = [
            {"id": call_id, "decision": "modify", "input": d.input}
            if isinstance(d, Modify)
            else {"id": call_id, "decision": "approve"}
            for call_id, d in self._approved.items()
        ]
        doc["held"] = self._held
        return _dumps_bytes(doc).decode()

    @classmethod
    def from_json(cls, data: str | bytes, *, messages: Sequence[Message] | None = None) -> LoopMachine:
        """Restore a machine saved by :meth:`to_json`. Raises
        :class:`~loopctl.errors.ConversationFileError` for text that is not a machine file, a newer
        ``format_version``, a field of the wrong type, or fields that disagree (a state without what it waits
        for, calls that are not the last reply's...), and :class:`~loopctl.errors.InvalidMessage` for a bad
        message inside. A machine that loads takes its next step without error.

        ``messages`` (history then pending) reads a document written with ``to_json(messages=False)``: its
        ``history`` and ``pending`` lengths must add up to ``len(messages)``.

        ``data`` is the JSON text (or UTF-8 bytes) :meth:`to_json` wrote.
        """
        try:
            doc = loads_exact(data)  # a tool input's integers past 64 bits stay exact
        except orjson.JSONDecodeError as exc:
            raise ConversationFileError("<machine>", f"not valid JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise ConversationFileError("<machine>", "expected a JSON object")
        version = doc.get("format_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ConversationFileError("<machine>", "missing or invalid format_version")
        if version > MACHINE_FORMAT_VERSION:
            raise ConversationFileError(
                "<machine>",
                f"format_version {version} is newer than this release of loopctl reads ({MACHINE_FORMAT_VERSION}); "
                "upgrade loopctl to read it",
            )
        try:
            m = _read_machine(cls, doc, messages)
        except (ConversationFileError, InvalidMessage):
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise ConversationFileError("<machine>", f"not a machine file ({type(exc).__name__}: {exc})") from None
        problem = m._inconsistency()
        if problem is not None:
            raise ConversationFileError("<machine>", problem)
        return m

    def _inconsistency(self) -> str | None:
        """What a restored machine's fields disagree on (the invariants the feeds keep), or ``None``."""
        state = self.state
        pending = self._messages[self._n_history :]
        if self._step is not None and state is not MachineState.AWAITING_COMPACTION:
            return f"state {state.value} has a step; only awaiting_compaction waits for one"
        tools_states = (MachineState.AWAITING_TOOLS, MachineState.AWAITING_APPROVAL)
        if (self._calls or self._machine_results) and state not in tools_states:
            return f"state {state.value} has tool calls; only awaiting_tools and awaiting_approval hold them"
        if (self._deferred or self._held) and state not in tools_states:
            return f"state {state.value} has calls awaiting approval; only a paused turn holds them"
        if self._approved and state is not MachineState.AWAITING_TOOLS:
            return f"state {state.value} has approved calls; only awaiting_tools runs them"
        paused = state is MachineState.AWAITING_APPROVAL
        if paused != (self._outcome.kind is OutcomeKind.AWAITING_APPROVAL):
            return "the outcome awaiting_approval belongs to the state awaiting_approval, and only to it"
        if self._overflow is not None and state not in (MachineState.AWAITING_MODEL, MachineState.AWAITING_COMPACTION):
            return f"state {state.value} has a context overflow; only a run retrying a model call holds one"
        if self._output_prompt is not None and state is not MachineState.AWAITING_MODEL:
            return f"state {state.value} has an output retry to send; only awaiting_model sends one"
        output_state = (self._output_tool, self._output_failures, self._output_error)
        if state in (MachineState.START, MachineState.TERMINAL) and output_state != (None, 0, None):
            return f"state {state.value} has typed-output state; a run that is over keeps none"
        if state in (MachineState.START, MachineState.TERMINAL):
            return f"state {state.value} has pending messages; a run that is over keeps none" if pending else None
        if state is MachineState.AWAITING_COMPACTION and self._step is None:
            return "state awaiting_compaction needs the step it waits for"
        if state in tools_states:
            ids = [c.id for c in self._calls]
            to_run = set(ids) - set(self._machine_results) - set(self._deferred)
            if state is MachineState.AWAITING_TOOLS and not to_run:
                return "state awaiting_tools needs the unanswered tool calls of the last reply"
            if paused and (to_run or not self._deferred):
                return "state awaiting_approval needs deferred calls and every other call answered"
            last = pending[-1] if pending else None
            if last is None or last.role is not Role.ASSISTANT or tuple(last.tool_calls()) != self._calls:
                return f"the calls of state {state.value} are not the tool calls of the last pending message"
            if len(set(ids)) != len(ids):
                return f"the calls of state {state.value} repeat an id"
            stray = sorted(set(self._machine_results) - set(ids))
            if stray:
                return f"machine_results answer no call: {', '.join(stray)}"
            stray = sorted(set(self._deferred) - set(ids))
            if stray:
                return f"deferred names no call: {', '.join(stray)}"
            both = sorted(set(self._machine_results) & set(self._deferred))
            if both:
                return f"calls both answered and deferred: {', '.join(both)}"
            if not set(self._approved) <= to_run:
                return "approved calls must be calls of the step still to run"
        return None

    def __repr__(self) -> str:
        return (
            f"LoopMachine(state={self.state.value}, turn={self.turn}, history={self._n_history}, "
            f"pending={len(self._messages) - self._n_history}, context_tokens={self.context_tokens})"
        )


_NO_USAGE = Usage()


def check_loop_detection(k: object) -> None:
    """Refuse a loop-detection setting a machine file cannot hold: ``k`` is ``None`` (off) or an ``int`` (not a
    ``bool``, not a ``float`` such as ``3.0``) of at least 2. Raises ``ValueError``."""
    if k is None:
        return
    if not isinstance(k, int) or isinstance(k, bool):
        raise ValueError(f"loop_detection must be a whole number (an int) of at least 2, or None: off; got {k!r}")
    if k < 2:
        raise ValueError(f"loop_detection must be at least 2 (or None: off), got {k!r}")


def _error(call: ToolCallPart, text: str) -> ToolResultPart:
    """An error result the machine writes for ``call``."""
    return ToolResultPart(call_id=call.id, name=call.name, output=text, is_error=True)


def _signature(call: ToolCallPart) -> str:
    """What makes two calls the same for loop detection: the tool's name and its input (keys in any order),
    as a SHA-256 digest (hex), so the machine file stays small whatever the input's size."""
    try:
        data = orjson.dumps([call.name, call.input], option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # integers past 64 bits
        data = json.dumps([call.name, call.input], sort_keys=True, separators=(",", ":"), default=repr).encode(
            "utf-8", "surrogatepass"
        )
    return hashlib.sha256(data).hexdigest()


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _expect_message(message: object, role: Role, feed: str) -> None:
    if not isinstance(message, Message):
        raise MachineStateError(f"{feed} takes a Message, got {type(message).__name__}")
    if message.role is not role:
        article = "an" if role is Role.ASSISTANT else "a"
        raise MachineStateError(f"{feed} takes {article} {role.value} message, got a {message.role.value} message")


def _read_machine(cls: type[LoopMachine], doc: dict[str, Any], messages: Sequence[Message] | None) -> LoopMachine:
    """The machine of a parsed machine file, each field type-checked (raises ``ConversationFileError``,
    ``InvalidMessage``, or ``KeyError`` for a missing key); ``messages`` fill a document that gives only the
    lengths of ``history`` and ``pending``."""
    if messages is None:
        history = _read_items(Message, doc, "history")
        pending = _read_items(Message, doc, "pending")
    else:
        n_history, n_pending = _whole(doc["history"], "history"), _whole(doc["pending"], "pending")
        if n_history + n_pending != len(messages):
            raise _bad_file(f"history and pending hold {n_history + n_pending} messages, not the {len(messages)} given")
        history, pending = list(messages[:n_history]), list(messages[n_history:])
    calls = tuple(_read_items(ToolCallPart, doc, "calls"))
    results = _read_items(ToolResultPart, doc, "machine_results")
    m = cls(history)
    m._messages.extend(pending)
    m.state = MachineState(doc["state"])
    m.turn = _whole(doc["turn"], "turn")
    m.context_tokens = _whole(doc["context_tokens"], "context_tokens")
    m._calls = calls
    m._machine_results = {r.call_id: r for r in results}
    m._step = _read_step(doc.get("step"))
    pruned_at = doc.get("pruned_at")
    if pruned_at is not None and not _is_whole(pruned_at):
        raise _bad_file(f"pruned_at must be a whole number of tokens or null, got {pruned_at!r}")
    m._pruned_at = pruned_at
    m._outcome = _read_outcome(doc["outcome"], "outcome")
    overflow = doc.get("overflow")
    m._overflow = None if overflow is None else _read_outcome(overflow, "overflow")
    output = doc.get("output")  # version 2; a version 1 file has no typed output
    if output is not None:
        if not isinstance(output, dict):
            raise _bad_file("output must be an object")
        for key in ("tool", "error", "prompt"):
            if output.get(key) is not None and not isinstance(output[key], str):
                raise _bad_file(f"output.{key} must be a string or null, got {output[key]!r}")
        m._output_tool = output.get("tool")
        m._output_failures = _whole(output.get("failures", 0), "output.failures")
        m._output_error = output.get("error")
        m._output_prompt = output.get("prompt")
    if int(doc["format_version"]) >= 3:
        _read_guardrails(m, doc)
    else:  # older files: the run started without loop detection or limits, and counted nothing
        m._loop_k = None
    return m


def _read_guardrails(m: LoopMachine, doc: dict[str, Any]) -> None:
    """The version 3 fields: limits, usage, loop detection, deferred and approved calls."""
    limits = doc.get("limits")
    try:
        m._limits = None if limits is None else UsageLimits.from_dict(limits)
        m._spent = RunUsage.from_dict(doc.get("usage", {}))
    except ValueError as exc:
        raise _bad_file(str(exc)) from None
    loop = doc.get("loop", {})
    if not isinstance(loop, dict):
        raise _bad_file("loop must be an object")
    k = loop.get("k")
    if k is not None and (not _is_whole(k) or k < 2):
        raise _bad_file(f"loop.k must be a whole number >= 2 or null, got {k!r}")
    call = loop.get("call")
    if call is not None and not isinstance(call, str):
        raise _bad_file(f"loop.call must be a string or null, got {call!r}")
    m._loop_k, m._loop_call, m._loop_repeats = k, call, _whole(loop.get("repeats", 0), "loop.repeats")
    deferred = doc.get("deferred", [])
    if not isinstance(deferred, list):
        raise _bad_file("deferred must be an array")
    for i, item in enumerate(deferred):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise _bad_file(f"deferred[{i}] must be an object with a string id")
        reason = item.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise _bad_file(f"deferred[{i}].reason must be a string or null")
        m._deferred[item["id"]] = reason
    approved = doc.get("approved", [])
    if not isinstance(approved, list):
        raise _bad_file("approved must be an array")
    for i, item in enumerate(approved):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise _bad_file(f"approved[{i}] must be an object with a string id")
        if item.get("decision") == "approve":
            m._approved[item["id"]] = Approve()
        elif item.get("decision") == "modify" and "input" in item:
            m._approved[item["id"]] = Modify(item["input"])
        else:
            raise _bad_file(f"approved[{i}].decision must be approve, or modify with an input")
    held = doc.get("held", False)
    if not isinstance(held, bool):
        raise _bad_file("held must be true or false")
    m._held = held


def _outcome_doc(o: Outcome) -> dict[str, Any]:
    doc: dict[str, Any] = {"kind": o.kind.value, "error": o.error, "error_type": o.error_type, "retryable": o.retryable}
    if o.limit is not None:
        doc["limit"] = o.limit.to_dict()
    return doc


def _read_outcome(o: Any, key: str) -> Outcome:
    if not isinstance(o, dict):
        raise _bad_file(f"{key} must be an object")
    for name in ("error", "error_type"):
        if o.get(name) is not None and not isinstance(o[name], str):
            raise _bad_file(f"{key}.{name} must be a string or null, got {o[name]!r}")
    if not isinstance(o.get("retryable", False), bool):
        raise _bad_file(f"{key}.retryable must be true or false, got {o['retryable']!r}")
    limit = o.get("limit")
    try:
        hit = None if limit is None else LimitHit.from_dict(limit)
    except ValueError as exc:
        raise _bad_file(f"{key}.{exc}") from None
    return Outcome(OutcomeKind(o["kind"]), o.get("error"), o.get("error_type"), bool(o.get("retryable")), hit)


def _failure(error: BaseException | str, kind: OutcomeKind) -> Outcome:
    """The outcome of a run ended by ``error`` (an exception, or a text)."""
    if isinstance(error, BaseException):
        return Outcome(
            kind,
            error=exception_text(error),
            error_type=type(error).__name__,
            retryable=bool(getattr(error, "retryable", False)),
        )
    return Outcome(kind, error=error)


def _read_items(kind: Any, doc: dict[str, Any], key: str) -> list[Any]:
    items = doc[key]
    if not isinstance(items, list):
        what = "messages" if kind is Message else "tool calls" if kind is ToolCallPart else "tool results"
        raise _bad_file(f"{key} must be an array of {what}")
    out = []
    for i, item in enumerate(items):
        try:
            out.append(kind.model_validate(item))
        except ValidationError as exc:
            raise _invalid(exc, f"{key}[{i}]") from None
    return out


def _read_step(step: Any) -> Prune | Compact | None:
    if step is None:
        return None
    if not isinstance(step, dict):
        raise _bad_file("step must be an object or null")
    if step.get("type") == "prune":
        return Prune(_whole(step["context_tokens"], "step.context_tokens"), _whole(step["needed"], "step.needed"))
    if step.get("type") == "compact":
        return Compact(CompactReason(step["reason"]), _whole(step["context_tokens"], "step.context_tokens"))
    raise _bad_file(f"step type {step.get('type')!r} is not prune or compact")


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _whole(value: Any, key: str) -> int:
    if not _is_whole(value):
        raise _bad_file(f"{key} must be a whole number >= 0, got {value!r}")
    return int(value)


def _bad_file(problem: str) -> ConversationFileError:
    return ConversationFileError("<machine>", problem)


def exception_text(error: BaseException) -> str:
    """``str(error)``, or ``"<its text cannot be read>"`` when that raises (a broken ``__str__`` must not
    stop a run from ending)."""
    try:
        return str(error)
    except Exception:
        return "<its text cannot be read>"


def _answers_open_calls(messages: Sequence[Message], keep: int, message: Message) -> bool:
    """Whether ``message`` is only tool results answering exactly the calls left open in ``messages[keep:]``
    (the trailing reply that :func:`coherent_tail` would cut), each once."""
    if not message.parts or not all(isinstance(p, ToolResultPart) for p in message.parts):
        return False
    open_calls: set[str] = set()
    for m in messages[keep:]:
        for p in m.parts:
            if isinstance(p, ToolCallPart):
                open_calls.add(p.id)
            elif isinstance(p, ToolResultPart):
                open_calls.discard(p.call_id)
    answered = [p.call_id for p in message.parts if isinstance(p, ToolResultPart)]
    return len(answered) == len(set(answered)) and set(answered) == open_calls


def coherent_tail(messages: Sequence[Message]) -> int:
    """The length of ``messages`` once a trailing reply whose tool calls are not all answered is cut off, with
    what follows it (:func:`coherent_prefix` from the last assistant message; the messages before it are
    taken as answered). O(the messages from the last assistant message on)."""
    i = len(messages) - 1
    while i >= 0 and messages[i].role is not Role.ASSISTANT:
        i -= 1
    if i < 0:
        return len(messages)
    return coherent_prefix(messages, i)


def coherent_prefix(messages: Sequence[Message], start: int = 0) -> int:
    """The length of the longest prefix of ``messages`` (from ``start``) in which every tool call has its
    result: the salvage rule for a run that ends early."""
    open_calls: set[str] = set()
    keep = start
    for i in range(start, len(messages)):
        m = messages[i]
        for p in m.parts:
            if isinstance(p, ToolCallPart):
                open_calls.add(p.id)
            elif isinstance(p, ToolResultPart):
                open_calls.discard(p.call_id)
        if not open_calls:
            keep = i + 1
    return keep
