"""The driver: the hands of an agent run.

:class:`BareLoop` asks the :class:`~loopctl.engine.LoopMachine` what to do, does it (calls the model, runs
tools, runs compaction passes), feeds the outcome back, and repeats until the machine says ``Done``. It
decides nothing the machine decides; it is the only part of the engine that touches the network, the clock
and tools.

Effect boundaries (a protected seam for durable execution: ``docs/guardrails.md``, "Effect boundaries").
Everything the driver does that is not deterministic goes through one of these methods, which a subclass
may wrap (run each as a recorded step or activity, replay its recorded result) without changing what the
run decides:

- :meth:`BareLoop._call_model` ``(turn, request, cfg, cancel, emit) -> ModelReply``: one model call, its
  ``before_model``/``after_model`` hooks, retries and fallbacks and pricing included. Raises a
  :class:`~loopctl.errors.LoopError` (the call's final error, ``FallbackFailed``, ``HookFailed``) or
  ``_Cancelled``.
- :meth:`BareLoop._check_reply` ``(plan, response, validator) -> (check, value, problems)``: a reply checked
  as the run's typed output (the output validator, which may do I/O).
- :meth:`BareLoop._instructions` ``(deps) -> str | None``: the session's instructions, once per run (a
  callable may do I/O).
- :meth:`BareLoop._run_tools` ``(step, cfg, cancel, emit, deps, usage) -> list[ToolCallRecord |
  PendingApproval]``: a turn's batch; it calls :meth:`BareLoop._run_one` ``(turn, call, cfg, emit, deps,
  usage, approval) -> ToolCallRecord | PendingApproval`` once per call: the ``before_tool`` hooks, the
  approval marker and the permission check (all skipped for a call approved later: ``approval`` is then
  its ``Approve``/``Modify``), the tool, the ``after_tool`` hooks. A deferred call comes back as a
  :class:`~loopctl.engine.PendingApproval`.
- :meth:`BareLoop._await_approvals` ``(pending) -> Mapping[str, Approval] | None``: where a run paused for
  approvals waits; ``None`` (the default) ends the run with ``AWAITING_APPROVAL``, decisions continue it at
  once (a durable workflow waits for its signal here).
- :meth:`BareLoop._summarize` (a summarizing compaction's model call), :meth:`BareLoop._emit` (every
  event to every observer) and :meth:`BareLoop._clock` (the durations' clock).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable, Mapping, Sequence
from decimal import Decimal
from types import CoroutineType
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

from loopctl._aio import retrieve
from loopctl._frozen import dataclass
from loopctl._lazy import LazyModule
from loopctl.compact import Compactor, ContextBudget, SummarizingCompactor, clip_middle, message_tokens
from loopctl.compact.counting import HeuristicTokenCounter
from loopctl.compact.provider import (
    AnthropicClearToolUses,
    AnthropicCompaction,
    OpenAICompactEndpoint,
    ProviderCompaction,
    RequestCompaction,
    WindowCounter,
    durable_after,
    durable_tool_names,
    is_request_side,
    provider_window,
    resolve,
)
from loopctl.engine.config import RunConfig, SessionConfig
from loopctl.engine.events import (
    CompactionFinished,
    CompactionStarted,
    LoopEvent,
    ModelCallFailed,
    ModelCallRetry,
    ModelFallback,
    ModelStreamEvent,
    Observer,
    OutputRetry,
    PromptCacheBust,
    ReplyDiscarded,
    RunAborted,
    RunFinished,
    RunStarted,
    ToolCallDeferred,
    ToolCallFinished,
    ToolCallStarted,
    ToolProgress,
    TurnFinished,
    TurnStarted,
)
from loopctl.engine.fallback import FallbackClient, client_label
from loopctl.engine.hooks import Hooks
from loopctl.engine.images import image_problem, rules_for
from loopctl.engine.limits import RunUsage, UsageLimits, remaining
from loopctl.engine.machine import (
    CallLLM,
    CallTools,
    Compact,
    CompactReason,
    Done,
    LoopMachine,
    MachinePolicy,
    MachineState,
    Outcome,
    OutcomeKind,
    OutputCheck,
    Prune,
    exception_text,
)
from loopctl.engine.permission import (
    DEFAULT_DENY_REASON,
    Approval,
    Approve,
    Defer,
    Deny,
    Modify,
    PendingApproval,
    PermissionCallback,
    deny_reason,
    input_problem,
)
from loopctl.engine.run import NO_OUTPUT, ModelReply, Run, ToolCallRecord, Turn, count_new
from loopctl.engine.streaming import RunStream, text_of
from loopctl.errors import (
    ApprovalError,
    CompactionNoProgress,
    CompactionOverflow,
    ContextOverflow,
    CostUnknown,
    FallbackFailed,
    HookFailed,
    LoopError,
    OutputValidationError,
    SessionBusy,
    StoreError,
    UnsupportedContent,
)
from loopctl.message import (
    CompactionPart,
    ImagePart,
    Message,
    Retention,
    Role,
    TextPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
)
from loopctl.message.model import assemble
from loopctl.output import OutputPlan, OutputSpec, OutputValidator, RejectOutput, text_plan
from loopctl.output import plan as plan_output
from loopctl.output import resolve as resolve_output
from loopctl.pricing import price
from loopctl.providers.base import ModelClient, ModelRequest, OutputFormat
from loopctl.providers.cache import PrefixWatch
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.stream import StreamEvent, UsageReported
from loopctl.tool import (
    ApprovalRequired,
    ForceTool,
    FunctionTool,
    ModelRetry,
    RunContext,
    Tool,
    ToolChoice,
    ToolContext,
    ToolInputError,
    ToolProvider,
    ToolRegistry,
    ToolSchema,
    ToolSpend,
    to_tool_output,
    valid_unicode,
)

if TYPE_CHECKING:
    import loopctl.store
else:  # the annotations' modules, imported when an annotation is read (loopctl._lazy)
    loopctl = LazyModule("loopctl")

__all__ = ["BareLoop"]

_OpenTurn = tuple[int, list[Message], ModelReply, Usage, float]
"""A reply's turn before its records are known: its index, input, reply, the reply's usage, duration."""

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

CALIBRATION_DRIFT = 0.05
"""How far (a fraction of the reported input tokens) the running estimate may drift from what the provider
reports before the counter is calibrated again."""


_NO_USAGE = Usage()
"""Nothing reported (a value: ``Usage`` is immutable)."""

_ZERO = Decimal(0)


class _Cancelled(Exception):
    """The cancel signal fired during an await."""


class BareLoop:
    """Runs agent loops over one conversation: a model client, tools, and a session's settings.

    ``client`` is any :class:`~loopctl.providers.ModelClient` (the real clients, or
    :class:`~loopctl.testing.ScriptedClient`). ``tools`` are :class:`~loopctl.tool.Tool` values and
    :class:`~loopctl.tool.ToolProvider` values such as MCP servers (or a :class:`~loopctl.tool.ToolRegistry`).
    ``observers`` receive typed events. ``permission`` decides each tool call before it runs (approve,
    deny, modify, or defer it: the run then pauses with outcome ``AWAITING_APPROVAL``, and
    ``run(approvals=...)`` continues it, here or in another process). ``hooks`` run around each model call
    and tool call, in order (:mod:`loopctl.engine.hooks`). The conversation lives in a
    :class:`~loopctl.engine.LoopMachine`; successive runs continue it. One run at a time per loop.

    With a ``store`` (:mod:`loopctl.store`), the conversation is the stored session ``session_id`` (a new
    id when ``None``): loaded here when it exists (or given already loaded: a
    :class:`~loopctl.store.SessionBinding` as ``binding``, with the ``machine`` it loaded, as
    :class:`~loopctl.agent.Agent` does off the event loop), and saved before every model call and when each run ends,
    so a crash loses at most the turn in flight. A save refused because another writer moved the session's
    head (:class:`~loopctl.errors.ConcurrentUpdate`) writes nothing and ends the run failed with it; a refusal
    of the save at the end of a run is raised by :meth:`run`.

    ``config`` is the session's settings (:class:`~loopctl.engine.SessionConfig`: system prompt, instructions,
    compaction, context window), the default when ``None``. ``machine`` continues a saved conversation
    (:class:`~loopctl.engine.LoopMachine`; or use :meth:`from_machine`); a new one is started when ``None``.
    """

    def __init__(
        self,
        client: ModelClient,
        tools: ToolRegistry | Iterable[Tool | ToolProvider] = (),
        config: SessionConfig | None = None,
        *,
        observers: Sequence[Observer] = (),
        permission: PermissionCallback | None = None,
        hooks: Sequence[object] = (),
        machine: LoopMachine | None = None,
        store: loopctl.store.SessionStore | None = None,
        session_id: str | None = None,
        binding: loopctl.store.SessionBinding | None = None,
    ) -> None:
        self.client = client
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.config = config or SessionConfig()
        self.observers = list(observers)
        self.permission = permission
        self.hooks = list(hooks)
        self._hooks = Hooks(self.hooks)
        self._run_observers: tuple[Observer, ...] = ()  # a streamed run's own observer, while it runs
        self._binding: loopctl.store.SessionBinding | None = binding  # already loaded: ``machine`` is what it holds
        if store is not None and binding is not None:
            raise ValueError("pass a store (and session_id) or a binding, not both")
        if store is not None:
            from loopctl.store.base import check_store
            from loopctl.store.binding import bind

            check_store(store)
            self._binding, machine = bind(store, session_id, machine, system_prompt=self.config.system_prompt)
        self._machine = machine or LoopMachine()
        self._budget = _make_budget(self.config, client)
        self._counter = self._budget.counter
        self._compactor: Compactor | SummarizingCompactor | None = None
        # A provider-side strategy (loopctl.compact.provider): one that rides on each request makes the
        # counter count what the provider reads (from its last compaction on); local passes truncate.
        self._provider_compaction: ProviderCompaction | None = None
        self._durable_memo: tuple[Message, int, Message, dict[str, None]] | None = None
        compactor = self.config.compactor
        if isinstance(compactor, PROVIDER_COMPACTIONS):
            self._provider_compaction = _check_provider_compaction(cast(ProviderCompaction, compactor), client)
            if is_request_side(self._provider_compaction):
                self._counter = WindowCounter(self._counter, self._provider_compaction.provider)
        else:
            self._compactor = cast("Compactor | SummarizingCompactor | None", compactor)
        self._calibrated_at = -1  # history length at the last calibration (-1: never)
        # The system text and tool schemas are sent with every request: the counter counts them once per change.
        self._request_key: tuple[str | None, tuple[ToolSchema, ...]] | None = None
        self._count_request(_Setup(self.config.system_prompt))
        self._image_rules = rules_for(getattr(client, "provider", ""))
        self._overflow_scale: float | None = None  # how low the estimate was when the provider overflowed
        self._running = False
        self._batch: dict[str, ToolCallRecord | PendingApproval] = {}  # the batch in flight (_run_tools)
        self._prefix_watch = PrefixWatch()  # does each request extend the one before? (PromptCacheBust)
        self._raised_at: str | None = None
        self._now: Callable[[], float] = self._clock  # the durations' clock of the run in flight (_run)

    # --- sessions ------------------------------------------------------------------------------------------

    @property
    def machine(self) -> LoopMachine:
        """The machine holding the conversation (do not feed it while a run is active)."""
        return self._machine

    @property
    def session_id(self) -> str | None:
        """The id of the stored session this loop keeps its conversation in (``None`` without a store)."""
        return self._binding.session_id if self._binding is not None else None

    @property
    def history(self) -> Sequence[Message]:
        """The committed conversation."""
        return self._machine.history

    def into_machine(self) -> LoopMachine:
        """A copy of the machine, to save (``to_json``) and resume elsewhere with :meth:`from_machine`."""
        return LoopMachine.from_json(self._machine.to_json())

    @classmethod
    def from_machine(
        cls,
        machine: LoopMachine,
        client: ModelClient,
        tools: ToolRegistry | Iterable[Tool | ToolProvider] = (),
        config: SessionConfig | None = None,
        *,
        observers: Sequence[Observer] = (),
        permission: PermissionCallback | None = None,
        hooks: Sequence[object] = (),
    ) -> BareLoop:
        """A loop that continues ``machine``'s conversation.

        ``client``, ``tools`` and ``config`` are as for the constructor (``config`` defaults to the settings the
        machine was saved with); ``observers``, ``permission`` and ``hooks`` are the constructor's too.
        """
        return cls(client, tools, config, observers=observers, permission=permission, hooks=hooks, machine=machine)

    # --- running -------------------------------------------------------------------------------------------

    @overload
    def run_sync(
        self,
        input: str | Message | None = None,
        config: RunConfig | None = None,
        *,
        approvals: Mapping[str, Approval] | None = None,
        output_type: None = None,
        output_validator: OutputValidator[str] | None = None,
        deps: Any = None,
    ) -> Run[str]: ...
    @overload
    def run_sync(
        self,
        input: str | Message | None = None,
        config: RunConfig | None = None,
        *,
        approvals: Mapping[str, Approval] | None = None,
        output_type: OutputSpec[_T],
        output_validator: OutputValidator[_T] | None = None,
        deps: Any = None,
    ) -> Run[_T]: ...
    @overload
    def run_sync(
        self,
        input: str | Message | None = None,
        config: RunConfig | None = None,
        *,
        approvals: Mapping[str, Approval] | None = None,
        output_type: object,
        output_validator: OutputValidator[Any] | None = None,
        deps: Any = None,
    ) -> Run[Any]: ...
    def run_sync(
        self,
        input: str | Message | None = None,  # noqa: A002
        config: RunConfig | None = None,
        *,
        approvals: Mapping[str, Approval] | None = None,
        output_type: Any = None,
        output_validator: OutputValidator[Any] | None = None,
        deps: Any = None,
    ) -> Run[Any]:
        """:meth:`run` on a fresh event loop. Raises ``RuntimeError`` inside a running event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(
                self.run(
                    input,
                    config,
                    approvals=approvals,
                    output_type=output_type,
                    output_validator=output_validator,
                    deps=deps,
                )
            )
        raise RuntimeError("run_sync() cannot be called inside a running event loop; await run() instead")

    @overload
    async def run(
        self,
        input: str | Message | None = None,
        config: RunConfig | None = None,
        *,
        approvals: Mapping[str, Approval] | None = None,
        cancel: asyncio.Event | None = None,
        output_type: None = None,
        output_validator: OutputValidator[str] | None = None,
        deps: Any = None,
    ) -> Run[str]: ...
    @overload
    async def run(
        self,
        input: str | Message | None = None,
        config: RunConfig | None = None,
        *,
        approvals: Mapping[str, Approval] | None = None,
        cancel: asyncio.Event | None = None,
        output_type: OutputSpec[_T],
        output_validator: OutputValidator[_T] | None = None,
        deps: Any = None,
    ) -> Run[_T]: ...
    @overload
    async def run(
        self,
        input: str | Message | None = None,
        config: RunConfig | None = None,
        *,
        approvals: Mapping[str, Approval] | None = None,
        cancel: asyncio.Event | None = None,
        output_type: object,
        output_validator: OutputValidator[Any] | None = None,
        deps: Any = None,
    ) -> Run[Any]: ...
    async def run(
        self,
        input: str | Message | None = None,  # noqa: A002 - the documented name
        config: RunConfig | None = None,
        *,
        approvals: Mapping[str, Approval] | None = None,
        cancel: asyncio.Event | None = None,
        output_type: Any = None,
        output_validator: OutputValidator[Any] | None = None,
        deps: Any = None,
    ) -> Run[Any]:
        """Run the loop on ``input`` until the model answers without tool calls, a limit is reached, the run
        fails, or ``cancel`` is set. Returns the :class:`~loopctl.engine.Run` record; errors end the run
        (see ``run.outcome``) rather than raise, except ``asyncio.CancelledError``, which is re-raised after
        the machine has salvaged the conversation.

        ``output_type`` makes ``run.output`` a validated value of that type (:mod:`loopctl.output`: a type,
        or ``OutputTool(T)`` / ``NativeOutput(T)`` / ``PromptedOutput(T)``); ``output_validator`` may check
        a valid value and reject it with :class:`~loopctl.output.RejectOutput`. ``deps`` is handed to tools
        (``ToolContext.deps``) and instructions (``RunContext.deps``); it is not saved with the machine.
        Raises ``TypeError`` for an output type pydantic cannot describe and ``ValueError`` for an output
        tool named like one of the loop's tools, before the run starts.

        ``approvals`` continues a paused run (outcome ``AWAITING_APPROVAL``: ``run.pending_approvals``), on this
        loop or one restored from the machine or the session store: ``{call_id: Approve() | Deny(reason) |
        Modify(input)}``; the approved calls run (once, without another permission check), the denied ones
        get their reason as an error result, and the run goes on. ``input`` is not given then; pass the
        ``output_type`` (and ``deps``) the run started with. Calls left out stay pending (the run pauses again
        once the decided ones ran). Raises :class:`~loopctl.errors.ApprovalError`, before anything runs, for
        approvals that do not fit (no paused run, a call that awaits none) and for input given to a paused
        run.

        ``config`` is the run's settings (:class:`~loopctl.engine.RunConfig`: turn limit, usage limits, streaming,
        tool dispatch); the default when ``None``.
        """
        if self._running:
            raise SessionBusy(
                "this loop is already running a run; a BareLoop is one conversation: start another BareLoop (or "
                "use an Agent, which makes one per conversation) for concurrent runs",
                session_id=self.session_id,
            )
        self._running = True
        try:
            cfg = config or RunConfig()
            return await self._run_saved(input, approvals, cfg, cancel, output_type, output_validator, deps, ())
        finally:
            self._running = False

    @overload
    def stream(
        self,
        input: str | Message | None = None,
        config: RunConfig | None = None,
        *,
        approvals: Mapping[str, Approval] | None = None,
        output_type: None = None,
        output_validator: OutputValidator[str] | None = None,
        deps: Any = None,
    ) -> RunStream[str]: ...
    @overload
    def stream(
        self,
        input: str | Message | None = None,
        config: RunConfig | None = None,
        *,
        approvals: Mapping[str, Approval] | None = None,
        output_type: OutputSpec[_T],
        output_validator: OutputValidator[_T] | None = None,
        deps: Any = None,
    ) -> RunStream[_T]: ...
    @overload
    def stream(
        self,
        input: str | Message | None = None,
        config: RunConfig | None = None,
        *,
        approvals: Mapping[str, Approval] | None = None,
        output_type: object,
        output_validator: OutputValidator[Any] | None = None,
        deps: Any = None,
    ) -> RunStream[Any]: ...
    def stream(
        self,
        input: str | Message | None = None,  # noqa: A002
        config: RunConfig | None = None,
        *,
        approvals: Mapping[str, Approval] | None = None,
        output_type: Any = None,
        output_validator: OutputValidator[Any] | None = None,
        deps: Any = None,
    ) -> RunStream[Any]:
        """A run as an async context manager that streams its events (:class:`~loopctl.engine.RunStream`)::

            async with loop.stream("task") as stream:
                async for event in stream:      # the typed events observers get, RunFinished last
                    ...
            run = await stream.result()

        ``stream.text()`` yields only the text deltas of the model's replies. The run starts when the block
        is entered; leaving the block before the run finished cancels it cleanly (the machine keeps the
        coherent prefix, as for ``cancel``). The arguments are :meth:`run`'s."""

        def start(observer: Observer, cancel: asyncio.Event) -> Awaitable[Run[Any]]:
            return self._start_streamed(input, approvals, config, output_type, output_validator, deps, observer, cancel)

        return RunStream(start)

    async def _start_streamed(
        self,
        input: str | Message | None,  # noqa: A002
        approvals: Mapping[str, Approval] | None,
        config: RunConfig | None,
        output_type: Any,
        output_validator: OutputValidator[Any] | None,
        deps: Any,
        observer: Observer,
        cancel: asyncio.Event,
    ) -> Run[Any]:
        if self._running:
            raise SessionBusy(
                "this loop is already running a run; a BareLoop is one conversation: start another BareLoop (or "
                "use an Agent, which makes one per conversation) for concurrent runs",
                session_id=self.session_id,
            )
        self._running = True
        try:
            cfg = config or RunConfig()
            observers = (observer,)
            return await self._run_saved(input, approvals, cfg, cancel, output_type, output_validator, deps, observers)
        finally:
            self._running = False

    async def _run_saved(
        self,
        input: str | Message | None,  # noqa: A002
        approvals: Mapping[str, Approval] | None,
        cfg: RunConfig,
        cancel: asyncio.Event | None,
        output_type: Any,
        output_validator: OutputValidator[Any] | None,
        deps: Any,
        observers: tuple[Observer, ...],
    ) -> Run[Any]:
        """:meth:`_run`, then the end-of-run save to the session store (when the loop has one), also when the
        run raised: the salvaged conversation is kept before the error goes on."""
        # Decisions or input that do not fit are refused before anything runs, or is saved (a refused approval
        # must not write the session it was refused for).
        self._check_start(input, approvals)
        self._run_observers = observers
        try:
            run = await self._run(input, approvals, cfg, cancel, output_type, output_validator, deps)
        except BaseException:
            if self._binding is not None:
                await self._binding.save_end(self._machine, failing=True)
            raise
        finally:
            self._run_observers = ()
        if self._binding is not None:
            await self._binding.save_end(self._machine, failing=False)
        return run

    async def _prepare(
        self, output_type: Any, output_validator: OutputValidator[Any] | None, cfg: RunConfig, deps: Any
    ) -> _Setup:
        """What every request of a run carries: the system text (the instructions evaluated once), the tools
        (the output tool included), ``tool_choice`` and the output format."""
        mode = resolve_output(output_type)
        output_plan = plan_output(mode, getattr(self.client, "provider", "")) if mode is not None else None
        if output_plan is None and output_validator is not None:
            output_plan = text_plan()  # str output that the validator checks
        extra_tools: tuple[ToolSchema, ...] = ()
        tool_choice = cfg.tool_choice
        if output_plan is not None and output_plan.tool is not None:
            if output_plan.tool.name in self.tools:
                raise ValueError(f"the output tool {output_plan.tool.name!r} has the name of one of the loop's tools")
            extra_tools = (output_plan.tool,)
            if tool_choice is None and cfg.reasoning_effort is None:
                # The answer must be the output tool's call: force it (any tool, when there are others).
                tool_choice = ForceTool(output_plan.tool.name) if not self.tools.names else "required"
        texts = [self.config.system_prompt, await self._instructions(deps)]
        if output_plan is not None:
            texts.append(output_plan.instructions)
        system = "\n\n".join(t for t in texts if t) or None
        output_format = output_plan.output_format if output_plan is not None else None
        return _Setup(system, extra_tools, tool_choice, output_format, output_plan, output_validator, deps)

    async def _instructions(self, deps: Any) -> str | None:
        """The session's instructions for one run (called once per run, by :meth:`_prepare`):
        ``SessionConfig.instructions`` itself, or what the callable returns for ``RunContext(deps)``. Raises
        ``TypeError`` when the callable returns something other than a str. An effect boundary (module
        docstring): the callable may do I/O."""
        instructions = self.config.instructions
        if not callable(instructions):
            return instructions
        made = instructions(RunContext(deps))
        if inspect.isawaitable(made):
            made = await made
        if not isinstance(made, str):
            raise TypeError(f"instructions returned {type(made).__name__}, not a str")
        return made

    async def _run(
        self,
        input: str | Message | None,  # noqa: A002
        approvals: Mapping[str, Approval] | None,
        cfg: RunConfig,
        cancel: asyncio.Event | None,
        output_type: Any,
        output_validator: OutputValidator[Any] | None,
        deps: Any,
    ) -> Run[Any]:
        m = self._machine
        policy = MachinePolicy(
            max_turns=cfg.max_turns,
            context_window=self._budget.window,
            compact_threshold=self._budget.threshold,
            # A strategy riding on each request compacts at the provider's trigger: no local threshold pass.
            auto_compact=self.config.auto_compact and not is_request_side(self._provider_compaction),
            emergency=self._budget.emergency,
            prune_threshold=self._budget.prune_line,
            prune_target=self._budget.target_tokens / self._budget.window,
            output_retries=cfg.output_retries,
        )
        started = self._clock()
        # The durations' clock: time.perf_counter itself unless a subclass reads another (_clock, an effect).
        self._now = time.perf_counter if type(self)._clock is BareLoop._clock else self._clock
        now = self._now
        resuming = approvals is not None
        self._check_start(input, approvals)
        if isinstance(input, Message):
            self._check_input_images(input)
        setup = await self._prepare(output_type, output_validator, cfg, deps)
        output_plan = setup.plan
        output_tool = output_plan.tool_name if output_plan is not None else None
        self._hooks = Hooks(self.hooks)
        before = m.full_history()
        anchor = (len(before) - 1, before[-1]) if before else None  # new messages are those after it
        if approvals is not None:
            if m.output_tool != output_tool:
                raise ApprovalError(
                    "the paused run was started with another output type "
                    f"(output tool {m.output_tool!r}, not {output_tool!r}): pass the output_type it was started with"
                )
            m = await self._decide(approvals, cfg.limits)
            first = m.pending[0]
        else:
            assert input is not None  # _check_start
            m.accept_input(input, output_tool=output_tool, limits=cfg.limits, loop_detection=cfg.loop_detection)
            first = m.pending[-1]
        self._count_request(setup)
        count = self._counter.count
        emit = self._emit if self.observers or self._run_observers else None
        # A one-call batch of a plain function tool may skip the batch's three coroutines (``_run_tools``,
        # ``_run_one``, ``_run_checked``) when nothing they add applies to this run: they are this class's own
        # (a durable engine records its calls in them), nothing observes the run, no hook runs around a tool,
        # and a tool's error is the model's to read. ``_direct_tool`` decides for each batch.
        direct = (
            emit is None
            and cancel is None
            and not cfg.raise_tool_errors
            and "before_tool" not in self._hooks.active
            and "after_tool" not in self._hooks.active
            and _plain_batches(type(self))
        )
        # Likewise a model call when ``_call_model`` is this class's own, nothing observes the run and no hook
        # runs before it: ``_call_one_client`` directly, for a client that is not a fallback chain.
        direct_model = (
            emit is None and type(self)._call_model is BareLoop._call_model and "before_model" not in self._hooks.active
        )
        turns: list[Turn] = []
        # The last reply's turn, made once its records are known (``settle``), or without any when none come
        # (``flush``): (index, input, reply, the reply's usage, duration).
        open_turn: _OpenTurn | None = None
        usage = Usage()
        tool_spend = ToolSpend()  # what tools spent on model calls of their own (sub-agents)
        turn_input: list[Message] = [] if resuming else [first]
        # The turn whose calls are being decided and run: what ran of it in this run, and the calls decided here.
        ran: dict[str, ToolCallRecord] = {}
        decided: set[str] = set(approvals or ())
        resumed: list[ToolCallRecord] = []
        last_duration = 0.0
        error: BaseException | None = None  # the last error met: what ended the run, if it failed
        value: Any = NO_OUTPUT  # the typed output, once valid
        problems: list[str] = []  # what was wrong with the last invalid typed output

        in_batch: tuple[CallTools, Message] | None = None  # the batch running, and the reply that asked for it

        def keep_batch(why: str) -> None:
            """The batch running was cut short (``why``: the run was cancelled, or failed): its turn is
            committed with the results that came back and the other calls answered (``_salvage_batch``), so
            the next run knows what ran and does not run it again."""
            if in_batch is None or m.state is not MachineState.AWAITING_TOOLS:
                return
            batch_step, reply = in_batch
            salvaged = self._salvage_batch(batch_step, cfg, why=why)
            ran.update((r.call.id, r) for r in salvaged)
            before = m.context_tokens
            m.tool_results([Message(role=Role.USER, parts=tuple(r.result for r in salvaged))])
            settle(reply, before)

        def settle(reply: Message, before: int | None) -> None:
            """After results or decisions for ``reply``'s calls were fed: the turn's records, and, once the
            machine committed them, the results message as the next turn's input (``before``: the context's
            size before it, to add it to)."""
            nonlocal turn_input, ran, decided, open_turn
            committed = m.results_of(reply)
            if committed is not None:
                results = {p.call_id: p for p in committed.parts if isinstance(p, ToolResultPart)}
            else:
                results = dict(m.held_results) if m.state is MachineState.AWAITING_APPROVAL else {}
            records = self._records(reply, ran, results)
            if open_turn is not None and open_turn[2].response.message is reply:
                turns.append(self._turn(open_turn, records))
                open_turn = None
            elif turns and turns[-1].output is reply:
                turns[-1] = _with_calls(turns[-1], records)
            else:  # the turn of a paused run that this run continues
                have = {r.call.id for r in resumed}
                resumed.extend(r for r in records if r.call.id in decided and r.call.id not in have)
            if committed is not None:
                if before is not None:
                    m.context_tokens = before + message_tokens(self._counter, committed)
                turn_input = [committed]
                ran, decided = {}, set()

        try:  # from here on, whatever escapes ends the run in the machine first
            m.context_tokens = count(m.full_history())
            if emit:
                emit(RunStarted(first, self.client.provider, self.client.model, resumed=resuming))
            if resuming and m.state is not MachineState.AWAITING_TOOLS:  # only denials were decided
                paused_reply = m.pending[-1] if m.state is MachineState.AWAITING_APPROVAL else m.pending[-2]
                settle(paused_reply, None)
            while True:
                if cancel is not None and cancel.is_set():
                    m.cancel()
                step = m.next_step(policy)
                if isinstance(step, CallLLM):
                    if self._binding is not None and await self._binding.save_turn(m):
                        continue  # the save was refused: the machine ended the run
                    if open_turn is not None:  # the last reply's turn, which got no records
                        turns.append(self._turn(open_turn, ()))
                        open_turn = None
                    t0 = now()
                    request = self._request(cfg, setup)
                    try:
                        client = self.client
                        if direct_model and not isinstance(client, FallbackClient):
                            reply = await self._call_one_client(client, request, cfg, cancel)
                        else:
                            reply = await self._call_model(step.turn, request, cfg, cancel, emit)
                    except _Cancelled:
                        if emit:
                            emit(ModelCallFailed(step.turn, None, now() - t0))
                        m.cancel()
                        continue
                    except ContextOverflow as exc:
                        if emit:
                            emit(ModelCallFailed(step.turn, exc, now() - t0))
                        # The estimate was low: correct it, and let the machine compact and try once more.
                        error = exc
                        m.context_overflow(exc, self._after_overflow(exc))
                        continue
                    except LoopError as exc:
                        if emit:
                            emit(ModelCallFailed(step.turn, exc, now() - t0))
                        error = exc
                        m.fail(exc)
                        continue
                    last_duration = now() - t0
                    response = reply.response
                    # The failed attempts' too: they were billed (``reply.usage``; the reply's own when none failed).
                    reply_usage = response.usage if reply.failed_usage is _NO_USAGE else reply.usage
                    usage = usage + reply_usage
                    msg = response.message
                    check: OutputCheck | None = None
                    if output_plan is not None:
                        try:
                            check, checked, found = await self._check_reply(output_plan, response, setup.validator)
                        except _Cancelled:
                            if emit:
                                emit(ModelCallFailed(step.turn, None, last_duration))
                            m.cancel()
                            continue
                        except Exception as exc:  # the output validator failed (not a RejectOutput)
                            if emit:
                                emit(ModelCallFailed(step.turn, exc, last_duration))
                            error = exc
                            m.fail(exc)
                            continue
                        if check is not None and check.ok:
                            value = checked
                        elif check is not None:
                            problems = found
                    try:
                        m.model_response(
                            msg,
                            self.tools.names,  # read per reply: an MCP server's tool list may change mid-run
                            # The request's messages are the machine's history until the reply joins it.
                            self._context_after_reply(request.messages, m.context_tokens, msg, response.usage),
                            stop_reason=response.stop_reason,
                            invalid_calls=[(c.id, c.error) for c in response.invalid_tool_calls]
                            if response.invalid_tool_calls
                            else (),
                            output_check=check,
                            usage=reply_usage,
                            cost=reply.cost,
                            # Only loop detection reads it (a machine resumed from a file keeps its own setting).
                            repeatable=self._repeatable(msg) if m.loop_detection is not None else (),
                        )
                    except LoopError as exc:  # a reply the machine cannot take (one call id used twice)
                        if emit:
                            emit(ModelCallFailed(step.turn, exc, last_duration))
                        error = exc
                        m.fail(exc)
                        continue
                    if emit:
                        emit(
                            TurnFinished(
                                step.turn, msg, response.usage, response.stop_reason, last_duration, response=response
                            )
                        )
                        if check is not None and not check.ok:
                            emit(OutputRetry(step.turn, m.output_failures, check.error or ""))
                    open_turn = (step.turn, turn_input, reply, reply_usage, last_duration)
                    turn_input = []
                    if ran:
                        ran = {}
                    if decided:
                        decided = set()
                    if m.state is not MachineState.AWAITING_TOOLS and msg.tool_calls():
                        # The machine answered every call itself (unknown tools, cut-off calls, repeats, the output
                        # tool), or a limit or a loop ended the run.
                        settle(msg, None)
                elif isinstance(step, CallTools):
                    reply_message = m.last_message()  # O(1): pending would copy the run's messages
                    assert reply_message is not None
                    in_batch = (step, reply_message)
                    try:
                        plain = self._direct_tool(step) if direct else None
                        if plain is not None:
                            direct_one = await self._run_direct(plain, step, cfg, deps, usage)
                            if type(direct_one) is not ToolCallRecord:
                                plain = None  # the tool deferred its own call: the general pass below
                            done: list[ToolCallRecord | PendingApproval] = [direct_one]
                        else:
                            done = await self._run_tools(step, cfg, cancel, emit, deps, usage)
                    except _Cancelled:
                        keep_batch("the run was cancelled")
                        m.cancel()
                        continue
                    except HookFailed as exc:
                        # The tools that ran keep their results (the model must learn they ran); the run fails.
                        error = exc
                        salvaged = self._salvage_batch(step, cfg, exc)
                        ran.update((r.call.id, r) for r in salvaged)
                        before_results = m.context_tokens
                        m.tool_results([Message(role=Role.USER, parts=tuple(r.result for r in salvaged))])
                        settle(reply_message, before_results)
                        m.fail(exc)
                        continue
                    in_batch = None  # it came back whole (an error escaping it leaves it set, for its salvage)
                    records: list[ToolCallRecord] = []
                    batch_spend: ToolSpend | None = None
                    results_message: Message | None
                    if plain is not None:
                        # The direct path's one record, of the step's own call, nothing deferred or spent: what
                        # the pass below makes of it, fed as ``tool_results`` feeds it when the machine keeps the
                        # message given (``_feed_whole``; anything else: ``tool_results`` itself).
                        record = done[0]
                        assert type(record) is ToolCallRecord  # plain: the direct call ran
                        records.append(record)
                        ran[record.call.id] = record
                        own_calls = True
                        before_results = m.context_tokens
                        results_message = _results_message(records)
                        if not m._feed_whole(results_message):
                            m.tool_results([results_message])
                    else:
                        deferred: dict[str, str | None] = {}
                        step_calls = step.calls
                        # Whether each record holds the step's own call object, in its order (a durable engine's
                        # records, read back from JSON, hold equal copies): the shortcut below needs it.
                        own_calls = len(done) == len(step_calls)
                        for i, one in enumerate(done):  # one pass: the records, the deferred calls, what they spent
                            if isinstance(one, ToolCallRecord):
                                records.append(one)
                                one_call = one.call
                                ran[one_call.id] = one
                                if own_calls and one_call is not step_calls[i]:
                                    own_calls = False
                            else:
                                deferred[one.id] = one.reason
                            if one.spent is not None:
                                batch_spend = one.spent if batch_spend is None else batch_spend.plus(one.spent)
                        before_results = m.context_tokens
                        results_message = _results_message(records) if records else None
                        m.tool_results(
                            [results_message] if results_message is not None else [],
                            deferred=deferred,
                            spent=_run_usage(batch_spend) if batch_spend is not None else None,
                        )
                    if batch_spend is not None:
                        tool_spend = tool_spend.plus(batch_spend)
                        usage = usage + batch_spend.usage
                    if (
                        results_message is not None
                        and own_calls
                        and open_turn is not None
                        and open_turn[2].response.message is reply_message
                        and m.results_of(reply_message) is results_message
                    ):
                        # The machine kept the message given (``_commit_whole``): one result for each call of the
                        # reply, in its order, each the result of the record made for it here, which holds that
                        # call itself. ``settle``'s records would be these records, as they are (``_records``);
                        # the turn is made at once.
                        turns.append(self._turn(open_turn, records))
                        open_turn = None
                        m.context_tokens = before_results + message_tokens(self._counter, results_message)
                        turn_input = [results_message]
                        # ``ran`` and ``decided`` are read again only after the next reply, which starts them afresh.
                    else:
                        settle(reply_message, before_results)
                    if m.state is MachineState.AWAITING_APPROVAL:
                        try:
                            decisions = await _race(self._await_approvals(m.pending_approvals), cancel)
                        except _Cancelled:  # cancelled while it waited (a durable workflow's wait)
                            m.cancel()
                            continue
                        if decisions:
                            self._check_decisions(decisions)
                            before_results = m.context_tokens
                            try:
                                m = await self._decide(decisions, None)
                            except StoreError as exc:  # not recorded: the machine is paused as it was
                                m = self._machine
                                error = exc
                                m.fail(exc)
                                continue
                            decided.update(decisions)
                            settle(reply_message, before_results)
                elif isinstance(step, Prune):
                    self._prune(step, emit)
                elif isinstance(step, Compact):
                    error = await self._compact(step, emit) or error
                elif isinstance(step, Done):
                    break
        except asyncio.CancelledError as exc:
            if _cancelling():  # our own cancel: the caller cancelled the task running the run
                keep_batch("the run was cancelled")
                m.cancel()
                if emit:
                    emit(RunAborted(exc))
                raise
            # A cancellation from inside (a client or callback whose own task was cancelled) is a failure of
            # the run, not a cancel of it.
            error = LoopError("an operation of the run was cancelled from inside it (asyncio.CancelledError)")
            keep_batch(f"the run failed ({error})")
            m.fail(error)
        except BaseException as exc:
            keep_batch(f"the run failed ({type(exc).__name__})")
            if m.state not in (MachineState.TERMINAL, MachineState.START):
                m.fail(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            if emit:
                emit(RunAborted(exc))
            raise
        if open_turn is not None:
            turns.append(self._turn(open_turn, ()))
        outcome = m.outcome
        text = _answer_text(turns)
        if output_plan is None:
            output: Any = text
        elif output_plan.kind == "text":  # str output: the validator's value once valid, else the text
            output = value if outcome.kind is OutcomeKind.COMPLETED and value is not NO_OUTPUT else text
        else:
            output = value if outcome.kind is OutcomeKind.COMPLETED else NO_OUTPUT
        if outcome.kind is OutcomeKind.OUTPUT_INVALID:
            error = OutputValidationError(problems or [outcome.error or "the output is not valid"])
        messages = m.full_history()
        run: Run[Any] = Run(
            outcome,
            output,
            tuple(turns),
            usage,
            self._clock() - started,
            error if outcome.kind is OutcomeKind.OUTPUT_INVALID else _run_error(outcome, error),
            text=text,
            pending_approvals=m.pending_approvals,
            resumed_calls=tuple(resumed),
            messages=messages,
            new_messages=count_new(messages, anchor),
            tool_cost=tool_spend.cost,
        )
        if emit:
            emit(RunFinished(run))
        return run

    async def _decide(self, decisions: Mapping[str, Approval], limits: UsageLimits | None) -> LoopMachine:
        """Feed ``decisions`` to the paused machine and, on a loop with a session store, save it before any
        approved call runs: the save is a compare-and-swap on the head this loop loaded, so of two processes
        deciding the same paused run only the first is recorded, and the other is refused here, before
        anything ran; and a process that dies while an approved call runs leaves the decision recorded (a
        later load answers the call "Not known whether it ran", never offers it again). A refused save
        (:class:`~loopctl.errors.ConcurrentUpdate`, another ``StoreError``) puts the machine back as it was,
        paused, and is raised. Returns the loop's machine."""
        m = self._machine
        binding = self._binding
        before = m.to_json(messages=False) if binding is not None else None
        m.approve(decisions, limits=limits)
        if binding is None or before is None:
            return m
        try:
            await binding.asave(m)
        except StoreError:
            # The messages are the same objects (approve() changes none): the binding's chain still fits.
            self._machine = LoopMachine.from_json(before, messages=m.full_history())
            raise
        return m

    def _check_start(self, input: str | Message | None, approvals: Mapping[str, Approval] | None) -> None:  # noqa: A002
        """Refuse, before anything runs, a start that does not fit the machine (:class:`ApprovalError`)."""
        m = self._machine
        paused = m.state is MachineState.AWAITING_APPROVAL
        if approvals is None:
            if paused:
                pending = ", ".join(f"{p.id} ({p.name})" for p in m.pending_approvals)
                raise ApprovalError(
                    f"the run is paused, awaiting approval of {pending}: continue it with "
                    "run(approvals={call_id: Approve() | Deny(reason) | Modify(input)}) (Deny every call to drop "
                    "them; the model then answers without their results), or, on a BareLoop, end it with "
                    "loop.machine.cancel() before giving new input"
                )
            if input is None:
                raise ApprovalError("run() needs an input (or approvals=, to continue a paused run)")
            return
        if input is not None:
            raise ApprovalError("run(approvals=...) continues a paused run: it takes no new input")
        if not paused:
            raise ApprovalError(
                f"approvals were given, but the loop's run is not paused (state {m.state.value}, last outcome "
                f"{m.outcome.kind.value}): its calls were decided already, or the run ended"
            )
        self._check_decisions(approvals)

    def _check_decisions(self, approvals: Mapping[str, Approval]) -> None:
        """Refuse decisions that do not fit the paused run (:func:`check_decisions`)."""
        check_decisions(approvals, self._machine.pending_approvals, self.tools)

    @staticmethod
    def _records(
        reply: Message, ran: Mapping[str, ToolCallRecord], results: Mapping[str, ToolResultPart]
    ) -> tuple[ToolCallRecord, ...]:
        """Records of ``reply``'s calls that have a result, in call order: those run in this run (``ran``),
        with the result the machine kept, and those answered otherwise (``results``: by the machine, a
        denial, a run before this one); calls still deferred are left out."""
        out = []
        for call in reply.tool_calls():
            rec = ran.get(call.id)
            result = results.get(call.id)
            if rec is not None:
                if rec.call is call and (result is None or result is rec.result):
                    out.append(rec)  # the record as it ran: the same values (records are immutable)
                    continue
                out.append(ToolCallRecord(call, result or rec.result, rec.duration, rec.ran, rec.spent, rec.error))
            elif result is not None:
                out.append(ToolCallRecord(call, result, 0.0, ran=False))
        return tuple(out)

    def _request_tools(self, setup: _Setup) -> tuple[ToolSchema, ...]:
        """The tools of the next request: the loop's (read per call: an MCP server's list may change), then
        the run's output tool."""
        tools = self.tools.schemas
        return (*tools, *setup.extra_tools) if setup.extra_tools else tools

    def _count_request(self, setup: _Setup, tools: tuple[ToolSchema, ...] | None = None) -> None:
        """Tell the counter what every request carries besides its messages (the system text and the tool
        schemas), when that changed."""
        tools = self._request_tools(setup) if tools is None else tools
        known = self._request_key
        if known is not None and known[0] is setup.system and known[1] is tools:
            return  # the same objects as the last request's (compared by value only when they are not)
        key = (setup.system, tools)
        if key != known:
            self._request_key = key
            set_request = getattr(self._counter, "set_request", None)
            if set_request is not None:
                set_request(system=setup.system, tools=tools)

    def _check_input_images(self, message: Message) -> None:
        """Refuse, before it enters the conversation, an input image the provider cannot read (its type,
        bytes or size: :mod:`loopctl.engine.images`); such an image would fail this run and every later one.
        Raises ``UnsupportedContent`` naming the part (``input.parts[1]``, ``input.parts[0].output[2]``)."""
        for i, part in enumerate(message.parts):
            found: list[tuple[str, TextPart | ImagePart]] = []
            if isinstance(part, ImagePart):
                found = [(f"input.parts[{i}]", part)]
            elif isinstance(part, ToolResultPart):
                found = [(f"input.parts[{i}].output[{j}]", p) for j, p in enumerate(part.output.parts)]
            for path, image in found:
                if not isinstance(image, ImagePart):
                    continue
                problem = image_problem(image, self._image_rules)
                if problem is not None:
                    provider = getattr(self.client, "provider", "") or "the provider"
                    raise UnsupportedContent(f"{path}: the image cannot be sent to {provider}: {problem}")

    def _request(self, cfg: RunConfig, setup: _Setup) -> ModelRequest:
        """The next model call's request: the whole conversation, the run's system text and tools, the
        generation settings."""
        tools = self.tools.schemas  # _request_tools and _count_request's shortcut, written out
        if setup.extra_tools:
            tools = (*tools, *setup.extra_tools)
        known = self._request_key
        if known is None or known[0] is not setup.system or known[1] is not tools:
            self._count_request(setup, tools)
        return ModelRequest(  # in the order of its fields (positional: cheaper to bind than keywords)
            self._machine.full_history(),
            setup.system,
            tools,
            cfg.max_tokens,
            cfg.temperature,
            cfg.stop,
            setup.tool_choice,
            cfg.reasoning_effort,
            cfg.extra,
            setup.output_format,
            (),
            self._context_management() if self._provider_compaction is not None else None,
        )

    def _context_management(self) -> RequestCompaction | None:
        """The session's request-side compaction strategy as sent: an unset trigger at the threshold line,
        the tools of ``Durable`` results kept from clearing (:func:`loopctl.compact.provider.resolve`)."""
        strategy = self._provider_compaction
        if strategy is None or not is_request_side(strategy):
            return None
        clears = isinstance(strategy, AnthropicClearToolUses) or (
            isinstance(strategy, AnthropicCompaction) and strategy.clear_tool_uses is not None
        )
        return resolve(
            cast(RequestCompaction, strategy),
            threshold_tokens=int(self._budget.threshold * self._budget.window),
            durable_tools=self._durable_tools() if clears else (),
        )

    def _durable_tools(self) -> list[str]:
        """The tools whose results in the conversation are ``Durable``; a conversation that grew by appending
        is read only from where the last call stopped (this runs before every request)."""
        history = self._machine.full_history()
        if not history:
            return []
        start, names = 0, {}
        memo = self._durable_memo
        if memo is not None and memo[1] <= len(history) and history[0] is memo[0] and history[memo[1] - 1] is memo[2]:
            start, names = memo[1], dict(memo[3])
        names.update(dict.fromkeys(durable_tool_names(history[start:])))
        self._durable_memo = (history[0], len(history), history[-1], names)
        return list(names)

    # --- the effects: the protected seam of the module docstring -------------------------------------------

    def _clock(self) -> float:
        """Seconds on a monotonic clock, for the durations of a run's record (``time.perf_counter``)."""
        return time.perf_counter()

    def _emit(self, event: LoopEvent) -> None:
        """Hand ``event`` to every observer: the loop's, then a streamed run's own. One that raises does not
        keep the event from the others (a tracing observer still ends the run's span); the first error is
        raised once every observer had the event."""
        error: BaseException | None = None
        for observer in (*self.observers, *self._run_observers):
            try:
                observer(event)
            except BaseException as exc:  # raised below, once the others had the event
                if error is None:
                    error = exc
        if error is not None:
            raise error

    async def _await_approvals(self, pending: tuple[PendingApproval, ...]) -> Mapping[str, Approval] | None:
        """The run paused on ``pending`` calls: decisions to continue it at once, or ``None`` to end the run
        with outcome ``AWAITING_APPROVAL`` (the default; ``run(approvals=...)`` continues it later). A durable
        adapter waits for its workflow's signal here."""
        return None

    async def _call_model(
        self,
        turn: int,
        request: ModelRequest,
        cfg: RunConfig,
        cancel: asyncio.Event | None,
        emit: Callable[[LoopEvent], None] | None,
    ) -> ModelReply:
        """One model call: the ``before_model`` hooks, the request sent (retried by ``cfg``'s policy, and moved
        along a :class:`~loopctl.providers.FallbackClient`'s chain as its rules say), the ``after_model``
        hooks, and the reply priced. Raises the call's final :class:`~loopctl.errors.LoopError`
        (:class:`~loopctl.errors.FallbackFailed` when every client of a chain failed,
        :class:`~loopctl.errors.HookFailed`), or ``_Cancelled``."""
        hooks = self._hooks
        if "before_model" in hooks.active:
            request = await _race(hooks.before_model(request), cancel)
        client = self.client
        if emit is None and not isinstance(client, FallbackClient):  # the common call
            return await self._call_one_client(client, request, cfg, cancel)
        chain = client if isinstance(client, FallbackClient) else None
        clients = chain.clients if chain is not None else (client,)
        streamed: list[str] = []  # the text the attempt in flight streamed
        events = 0
        reported: Usage | None = None  # the usage the attempt in flight reported last (a running total)
        no_usage = _NO_USAGE
        failed_usage = no_usage  # what the attempts that failed had reported: billed, and counted for limits
        failed_cost: Decimal | None = _ZERO

        def on_event(event: StreamEvent) -> None:
            nonlocal events, reported
            events += 1
            if isinstance(event, UsageReported):
                reported = event.usage
            text = text_of(event)
            if text:
                streamed.append(text)
            if emit is not None:
                emit(ModelStreamEvent(turn, event))

        if emit is not None:
            emit(
                TurnStarted(
                    turn,
                    len(request.messages),
                    request=request,
                    provider=client.provider,
                    model=client.model,
                    stream=cfg.stream,
                    api_url=getattr(clients[0], "api_url", None),
                )
            )
        native = request.native_tools
        bust = self._prefix_watch.check(
            request.messages, request.system, (*request.tools, *native) if native else request.tools
        )
        if bust is not None and emit is not None:
            emit(PromptCacheBust(turn, bust.what, bust.index, bust.reason))
        tracking = on_event  # always: a failed attempt's usage is known only from its events
        tried: list[tuple[str, LoopError]] = []
        response: ModelResponse | None = None
        answered: ModelClient = client
        for index, current in enumerate(clients):
            attempt = 0
            while response is None:
                events = 0
                reported = None
                streamed.clear()
                try:
                    coro = current.generate(request, stream=cfg.stream, on_event=tracking)
                    response = await (_race(coro, cancel) if cancel is not None else coro)
                    answered = current
                except LoopError as exc:
                    if reported is not None:  # what the failed attempt had reported: billed, counted for limits
                        failed_usage = failed_usage + reported
                        spent = _price(current, reported, current.model)
                        failed_cost = None if spent is None or failed_cost is None else failed_cost + spent
                    began = events > 0
                    if exc.retryable and attempt < cfg.max_retries:
                        attempt += 1
                        delay = _retry_delay(exc, attempt, cfg)
                        if emit is not None:
                            if began:
                                emit(ReplyDiscarded(turn, "retry", "".join(streamed)))
                            emit(ModelCallRetry(turn, attempt, exc, delay))
                        await _race(asyncio.sleep(delay), cancel)
                        continue
                    if chain is None or not chain.falls_back(exc, streamed=began):
                        raise
                    tried.append((client_label(current), exc))
                    if index + 1 == len(clients):
                        raise FallbackFailed(tried) from exc
                    if emit is not None:
                        if began:
                            emit(ReplyDiscarded(turn, "fallback", "".join(streamed)))
                        to = clients[index + 1]
                        emit(
                            ModelFallback(
                                turn,
                                exc,
                                current.provider,
                                current.model,
                                to.provider,
                                to.model,
                                getattr(to, "api_url", None),
                            )
                        )
                    break
            if response is not None:
                break
        assert response is not None
        if "after_model" in hooks.active:
            await _race(hooks.after_model(response), cancel)
        model = response.model or answered.model
        cost = _price(answered, response.usage, model)
        if failed_usage is not no_usage and failed_usage != no_usage:
            cost = None if cost is None or failed_cost is None else cost + failed_cost
        return ModelReply(response, answered.provider, model, cost, failed_usage)

    async def _call_one_client(
        self, client: ModelClient, request: ModelRequest, cfg: RunConfig, cancel: asyncio.Event | None
    ) -> ModelReply:
        """:meth:`_call_model` after its ``before_model`` hooks, for one client (not a fallback chain) and no
        observer: what it does then, without what only an observer or a chain reads (the events and the text
        an attempt streamed, the clients tried). The same retries, the same failed attempts' usage and cost."""
        native = request.native_tools
        tools = (*request.tools, *native) if native else request.tools
        self._prefix_watch.check(request.messages, request.system, tools)  # a bust is told only to observers
        reported: Usage | None = None  # the usage the attempt in flight reported last (a running total)

        def on_event(event: StreamEvent) -> None:  # always: a failed attempt's usage is known only from its events
            nonlocal reported
            if isinstance(event, UsageReported):
                reported = event.usage

        failed_usage = _NO_USAGE  # what the attempts that failed had reported: billed, and counted for limits
        failed_cost: Decimal | None = _ZERO
        attempt = 0
        while True:
            reported = None
            try:
                coro = client.generate(request, stream=cfg.stream, on_event=on_event)
                response = await (_race(coro, cancel) if cancel is not None else coro)
                break
            except LoopError as exc:
                if reported is not None:  # what the failed attempt had reported: billed, counted for limits
                    failed_usage = failed_usage + reported
                    spent = _price(client, reported, client.model)
                    failed_cost = None if spent is None or failed_cost is None else failed_cost + spent
                if exc.retryable and attempt < cfg.max_retries:
                    attempt += 1
                    await _race(asyncio.sleep(_retry_delay(exc, attempt, cfg)), cancel)
                    continue
                raise
        if "after_model" in self._hooks.active:
            await _race(self._hooks.after_model(response), cancel)
        model = response.model or client.model
        cost = _price(client, response.usage, model)
        if failed_usage is not _NO_USAGE and failed_usage != _NO_USAGE:
            cost = None if cost is None or failed_cost is None else cost + failed_cost
        return ModelReply(response, client.provider, model, cost, failed_usage)

    async def _check_reply(
        self, plan: OutputPlan, response: ModelResponse, validator: OutputValidator[Any] | None
    ) -> tuple[OutputCheck | None, Any, list[str]]:
        """The verdict on ``response`` as the run's typed output, ``(check, value, problems)``
        (:func:`_check_output`). An effect boundary (module docstring): the ``validator`` may do I/O."""
        return await _check_output(plan, response, validator)

    # --- tools ---------------------------------------------------------------------------------------------

    async def _run_tools(
        self,
        step: CallTools,
        cfg: RunConfig,
        cancel: asyncio.Event | None,
        emit: Callable[[LoopEvent], None] | None,
        deps: Any = None,
        usage: Usage | None = None,
    ) -> list[ToolCallRecord | PendingApproval]:
        """A turn's batch of calls, each through :meth:`_run_one` (in parallel, at most
        ``cfg.max_concurrency`` at once, or one after the other), in call order."""
        calls = step.calls
        spent = usage or Usage()
        approved = step.approved
        batch = self._batch = {}  # what each call came to, as it comes: kept if a hook fails the batch
        self._raised_at = None  # the call whose tool's error is raised (RunConfig.raise_tool_errors)
        if len(calls) == 1 or cfg.tool_dispatch == "sequential":
            out: list[ToolCallRecord | PendingApproval] = []
            for call in calls:
                one = self._run_one(step.turn, call, cfg, emit, deps, spent, approved.get(call.id))
                out.append(await (_race(one, cancel) if cancel is not None else one))
                batch[call.id] = out[-1]
            return out
        sem = asyncio.Semaphore(max(1, cfg.max_concurrency))

        async def limited(call: ToolCallPart) -> ToolCallRecord | PendingApproval:
            async with sem:
                done = await self._run_one(step.turn, call, cfg, emit, deps, spent, approved.get(call.id))
                batch[call.id] = done
                return done

        tasks = [asyncio.ensure_future(limited(c)) for c in calls]
        try:
            return list(await _race(asyncio.gather(*tasks), cancel))
        except BaseException:
            # gather does not stop the other calls when one raises: stop them, so no tool is still running
            # (and acting) after the run has ended.
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _run_one(
        self,
        turn: int,
        call: ToolCallPart,
        cfg: RunConfig,
        emit: Callable[[LoopEvent], None] | None,
        deps: Any = None,
        usage: Usage | None = None,
        approval: Approve | Modify | None = None,
    ) -> ToolCallRecord | PendingApproval:
        """One tool call: the ``before_tool`` hooks (a :class:`~loopctl.engine.Block` answers the call), the
        approval marker and the permission check (``Defer``: the call comes back as a
        :class:`~loopctl.engine.PendingApproval`), the tool, the ``after_tool`` hooks. A call approved later
        (``approval``) skips the hooks before it and the permission check, and runs with a ``Modify``'s
        input. Raises :class:`~loopctl.errors.HookFailed`."""
        tool = self.tools.get(call.name)
        if tool is None:  # a call approved after the tool went away (another process, an MCP list change)
            known = ", ".join(sorted(self.tools.names)) or "(none)"
            result = _error_result(call, f"Unknown tool {call.name!r}. The tools that exist are: {known}.")
            if emit:
                emit(ToolCallFinished(turn, call, result, 0.0))
            return ToolCallRecord(call, result, 0.0, ran=False)
        try:
            return await self._run_checked(turn, call, tool, cfg, emit, deps, usage, approval)
        except HookFailed as exc:
            exc.call_id = call.id  # the batch's salvage says which call it failed
            raise

    async def _run_checked(
        self,
        turn: int,
        call: ToolCallPart,
        tool: Tool,
        cfg: RunConfig,
        emit: Callable[[LoopEvent], None] | None,
        deps: Any,
        usage: Usage | None,
        approval: Approve | Modify | None,
    ) -> ToolCallRecord | PendingApproval:
        args = call.input
        if approval is None:
            block = await self._hooks.before_tool(call) if "before_tool" in self._hooks.active else None
            if block is not None:
                return self._not_run(turn, call, block.message, emit)
            if getattr(tool, "requires_approval", False) is True:
                if emit:
                    emit(ToolCallDeferred(turn, call, None))
                return PendingApproval(call)
            if self.permission is not None:
                decision = self.permission(call)
                if inspect.isawaitable(decision):
                    decision = await decision
                if decision is False or isinstance(decision, Deny):
                    reason = deny_reason(decision) if isinstance(decision, Deny) else DEFAULT_DENY_REASON
                    return self._not_run(turn, call, reason, emit)
                if isinstance(decision, Defer):
                    if emit:
                        emit(ToolCallDeferred(turn, call, decision.reason))
                    return PendingApproval(call, decision.reason)
                if isinstance(decision, Modify):
                    args = decision.input
                elif not (decision is True or isinstance(decision, Approve)):
                    raise TypeError(
                        f"a permission callback returned {decision!r}; expected Approve, Deny, Modify or Defer"
                    )
        elif isinstance(approval, Modify):
            args = approval.input
        if emit:
            modified = args is not call.input
            emit(ToolCallStarted(turn, call, modified=modified, modified_input=args if modified else None))
        t0 = self._now()
        left = remaining(cfg.limits, self._machine.usage) if cfg.limits is not None else None
        context: ToolContext[Any] | None = None
        if emit or type(tool) is not FunctionTool or tool._context_param is not None:
            # A function tool without a ToolContext parameter never sees its context, and with no observer no
            # progress can be reported: nothing would read one (its stop flag and spend included).
            progress = None
            if emit:

                def progress(done: float, total: float | None, message: str | None) -> None:
                    emit(ToolProgress(turn, call, done, total, message))

            context = ToolContext(call.id, call.name, deps, usage or Usage(), turn, left, _progress=progress)
        try:
            result, error = await self._execute(tool, call, args, cfg, context)
        except ApprovalRequired as exc:  # the tool deferred its own call (a sub-agent paused for approval)
            if emit:
                emit(ToolCallDeferred(turn, call, exc.reason))
            return PendingApproval(call, exc.reason, spent=context.spent if context is not None else None)
        spent = context.spent if context is not None else None
        if error is not None:
            if context is None:  # for the log (the tool never saw one)
                context = ToolContext(call.id, call.name, deps, usage or Usage(), turn, left)
            _log_tool_error(tool, call, error, context)
            if cfg.raise_tool_errors and isinstance(error, Exception):  # not a sub-task's CancelledError
                # The run fails with it; the batch's salvage keeps what the model would have read.
                duration = self._now() - t0
                self._batch[call.id] = ToolCallRecord(call, result, duration, spent=spent, error=error)
                self._raised_at = call.id
                raise error
        if "after_tool" in self._hooks.active:
            result = await self._hooks.after_tool(call, result)
        duration = self._now() - t0
        if emit:
            emit(ToolCallFinished(turn, call, result, duration, error))
        return ToolCallRecord(call, result, duration, True, spent, error)

    def _direct_tool(self, step: CallTools) -> FunctionTool[Any] | None:
        """The tool of ``step``'s one call when ``_run`` may run it directly (``_execute``, without the batch's
        coroutines): a :class:`~loopctl.tool.FunctionTool` whose function takes no ``ToolContext`` and that
        does not require approval, the call not approved earlier, and no permission callback. ``None``
        otherwise (the general path). The run's own conditions (no observer, no tool hooks, no cancel event,
        tool errors not raised, this class's methods) are checked once by ``_run``."""
        calls = step.calls
        if len(calls) != 1 or step.approved or self.permission is not None:
            return None
        tool = self.tools.get(calls[0].name)
        if type(tool) is not FunctionTool or tool._context_param is not None or tool.requires_approval is True:
            return None
        return tool

    async def _run_direct(
        self, tool: FunctionTool[Any], step: CallTools, cfg: RunConfig, deps: Any, usage: Usage
    ) -> ToolCallRecord | PendingApproval:
        """What :meth:`_run_tools` → :meth:`_run_one` → :meth:`_run_checked` make of ``step``'s one call when
        :meth:`_direct_tool` chose ``tool`` for it and ``_run`` found nothing they add applies (no hook,
        permission check, observer or context): ``_execute``'s result as the call's record, a tool's error
        logged with the context it never saw (``usage``: the run's so far), or the call deferred by the tool
        itself (``ApprovalRequired``)."""
        call = step.calls[0]
        batch = self._batch = {}
        self._raised_at = None
        t0 = self._now()
        try:
            result, error = await self._execute(tool, call, call.input, cfg, None)
        except ApprovalRequired as exc:
            pending = batch[call.id] = PendingApproval(call, exc.reason)
            return pending
        if error is not None:
            left = remaining(cfg.limits, self._machine.usage) if cfg.limits is not None else None
            _log_tool_error(tool, call, error, ToolContext(call.id, call.name, deps, usage, step.turn, left))
        record = batch[call.id] = ToolCallRecord(call, result, self._now() - t0, True, None, error)
        return record

    def _repeatable(self, reply: Message) -> frozenset[str]:
        """The tools called in ``reply`` whose ``repeatable`` attribute is ``True`` (loop detection leaves
        their calls out)."""
        names = {c.name for c in reply.tool_calls()}
        return frozenset(n for n in names if getattr(self.tools.get(n), "repeatable", False) is True)

    def _salvage_batch(
        self, step: CallTools, cfg: RunConfig, error: HookFailed | None = None, why: str = "the run was cancelled"
    ) -> list[ToolCallRecord]:
        """The batch of ``step`` was cut short: a record for each of its calls, so that the turn can be kept
        with a result for every call (the results of tools that ran are never lost, and the next run does not
        run them again). A call that came back keeps its result.

        A hook failed the batch (``error``): the call whose ``after_tool`` hook failed ran, and says so (its
        result is withheld: the failed hook may have been the one to redact it); the call whose
        ``before_tool`` hook failed, a deferred call, and the calls of a sequential batch after the failure
        did not run; a call of a parallel batch that had not come back may have run ("Not known whether it
        ran").

        Otherwise ``why`` says what cut it (the run was cancelled, or failed): the call of a sequential batch
        in flight, and every call of a parallel batch that had not come back, may have run ("Not known whether
        it ran"); the calls of a sequential batch after it, and deferred calls, did not. The texts depend only
        on which calls came back, so a durable run replayed from its records writes the same ones."""
        done = self._batch
        sequential = len(step.calls) == 1 or cfg.tool_dispatch == "sequential"
        failed_at = error.call_id if error is not None else self._raised_at  # a tool's error raised (tests)
        named = failed_at is not None
        if failed_at is None and sequential:  # not named (a recorded error, a cancel): the call in flight
            failed_at = next((c.id for c in step.calls if c.id not in done), None)
        out = []
        passed = False  # a sequential batch's calls after the failed one never started
        for call in step.calls:
            got = done.get(call.id)
            if isinstance(got, ToolCallRecord):
                out.append(got)
                passed = passed or call.id == failed_at
                continue
            ran = False
            if error is not None and named and call.id == failed_at and error.method == "after_tool":
                text, ran = f"The tool ran, but the run failed after it ({error}); its result is withheld.", True
            elif error is not None and named and call.id == failed_at:
                text = f"Not run: {error}."
            elif error is not None and (isinstance(got, PendingApproval) or (sequential and passed)):
                text = f"Not run: the run failed before the call ran ({error})."
            elif error is not None:
                text = f"Not known whether it ran: the run failed ({error}) before its result was recorded."
            elif isinstance(got, PendingApproval):
                text = f"Not run: {why} while the call awaited approval."
            elif sequential and passed:
                text = f"Not run: {why} before the call started."
            else:
                text = f"Not known whether it ran: {why} before its result was recorded."
            passed = passed or call.id == failed_at
            out.append(ToolCallRecord(call, _error_result(call, text), 0.0, ran=ran))
        return out

    @staticmethod
    def _not_run(turn: int, call: ToolCallPart, text: str, emit: Callable[[LoopEvent], None] | None) -> ToolCallRecord:
        """A call answered without running (blocked by a hook, denied): ``text`` is its error result."""
        result = ToolResultPart(call_id=call.id, name=call.name, output=text, is_error=True)
        if emit:
            emit(ToolCallFinished(turn, call, result, 0.0))
        return ToolCallRecord(call, result, 0.0, ran=False)

    async def _execute(
        self, tool: Tool, call: ToolCallPart, args: Any, cfg: RunConfig, context: ToolContext[Any] | None
    ) -> tuple[ToolResultPart, BaseException | None]:
        """Run ``tool`` on ``args`` (``context``: the call's, ``None`` for a tool that never sees one, a
        :class:`~loopctl.tool.FunctionTool` whose function takes none): its result for the model, and the
        exception the tool raised (or that made its output unsendable), ``None`` when it raised none. Input
        that does not fit the schema and a timeout are results without an exception (the model's to fix, the
        engine's limit)."""
        timeout, max_chars = cfg.tool_timeout, cfg.max_tool_output_chars
        try:
            called = tool.call(args, context)  # type: ignore[arg-type]  # None only for a tool that never reads it
            if timeout is None:
                value = await called
            elif type(called) is CoroutineType:
                # Stepped once by hand, in this task (as an await would): a call that finishes without waiting
                # on anything cannot be timed out (a timeout fires only while the call waits), so it needs no
                # timer. One that waits goes on under its timeout, from the deadline it had when it started.
                deadline = asyncio.get_running_loop().time() + timeout
                try:
                    waits_on = called.send(None)
                except StopIteration as finished:
                    value = finished.value
                else:
                    async with asyncio.timeout_at(deadline):
                        value = await _resume(called, waits_on)
            else:
                async with asyncio.timeout(timeout):
                    value = await called
        except ToolInputError as exc:
            return _error_result(call, f"Invalid input for tool {call.name!r}: {exc}"), None
        except ModelRetry as exc:  # the tool's own words for the model, as they are
            return _error_result(call, exc.message), None
        except ApprovalRequired:
            raise
        except TimeoutError:
            if context is not None:
                context.request_stop()
            return _error_result(call, _timeout_text(tool, call.name, timeout)), None
        except asyncio.CancelledError as exc:
            if context is not None:
                context.request_stop()
            if _cancelling():  # the run is being cancelled (by the caller, or its cancel event)
                raise
            # The tool's own sub-task was cancelled: the tool failed; the run goes on.
            text = f"Tool {call.name!r} failed: a task of its own was cancelled (CancelledError)."
            return _error_result(call, text), exc
        except Exception as exc:  # a tool's failure is the model's to read, not the loop's to die of
            return _error_result(call, f"Tool {call.name!r} failed: {type(exc).__name__}: {exception_text(exc)}"), exc
        if type(value) is str:
            # The common case, made as the general path below makes it: the text with U+FFFD for a lone
            # surrogate, clipped, validated as a ToolContent by pydantic-core (a str has no image to check).
            text = value if value.isascii() else valid_unicode(value)
            if max_chars is not None and len(text) > max_chars:
                text = clip_middle(text, max_chars)
            made = assemble(
                ToolResultPart,
                type="tool_result",
                call_id=call.id,
                name=call.name,
                output=ToolContent.__pydantic_validator__.validate_python(text)
                if ToolContent.__pydantic_complete__
                else ToolContent.from_string(text),  # the first one builds the model (defer_build)
                is_error=False,
                retention=None,
            )
            return made, None
        try:
            out = to_tool_output(value)
            content = out.tool_content()  # text with a lone surrogate comes back with U+FFFD in its place
            if max_chars is not None:
                content = _clipped(content, max_chars)
            for image in content.images():
                problem = image_problem(image, self._image_rules)
                if problem is not None:
                    text = f"Tool {call.name!r} returned an image that cannot be sent: {problem}"
                    return _error_result(call, text), None
            if type(out.is_error) is bool and (out.retention is None or type(out.retention) is Retention):
                # Made of the call's own id and name and a content checked when it was made: no check again.
                made = assemble(
                    ToolResultPart,
                    type="tool_result",
                    call_id=call.id,
                    name=call.name,
                    output=content,
                    is_error=out.is_error,
                    retention=out.retention,
                )
                return made, None
            part = ToolResultPart(
                call_id=call.id,
                name=call.name,
                output=content,
                is_error=out.is_error,
                retention=out.retention,
            )
            return part, None
        except LoopError as exc:
            return _error_result(call, f"Tool {call.name!r} returned output that cannot be sent: {exc}"), exc
        except Exception as exc:  # str() of a value that is not JSON raised
            text = (
                f"Tool {call.name!r} returned output that cannot be sent: a {type(value).__name__} value that is "
                "neither JSON nor printable"
            )
            return _error_result(call, text), exc

    # --- compaction ----------------------------------------------------------------------------------------

    def _prune(self, step: Prune, emit: Callable[[LoopEvent], None] | None) -> None:
        m = self._machine
        before = m.context_tokens
        if emit:
            emit(CompactionStarted("prune_line", before))
        messages = list(m.full_history())
        pruned = self._budget.prune(messages, step.needed)
        after = self._counter.count(pruned) if pruned is not messages else before
        m.prune_result(pruned, before, after)
        if emit:
            emit(CompactionFinished("prune", "prune_line", before, after))

    async def _compact(self, step: Compact, emit: Callable[[LoopEvent], None] | None) -> LoopError | None:
        """Run the session's compactor; a summarizing one gets its model call here (the emergency line
        truncates at once, and so does a summary that failed or saved nothing). Returns the error that ended
        the run, if one did."""
        m = self._machine
        before = m.context_tokens
        if emit:
            emit(CompactionStarted(step.reason.value, before))
        messages = list(m.full_history())
        kind = "truncate"
        compacted: list[Message] | None = None
        budget = self._budget
        scale, self._overflow_scale = self._overflow_scale, None
        if scale is not None and scale > 1:
            # Answering a provider's overflow: the estimate was ``scale`` times too low, so aim that much lower.
            budget = dataclasses.replace(budget, window=max(1, int(budget.window / scale)))
        try:
            compactor = self._compactor
            strategy = self._provider_compaction
            if strategy is not None and is_request_side(strategy):
                # The provider reads nothing before its last compaction (and the counter counts only what it
                # reads): what it dropped goes locally too, before the pass cuts what is left.
                messages = list(provider_window(messages, strategy.provider, lead=True))
            elif isinstance(strategy, OpenAICompactEndpoint) and step.reason is CompactReason.THRESHOLD:
                compacted = await self._compact_at_provider(strategy, messages)
                if compacted is not None:
                    kind = "provider"
            if isinstance(compactor, SummarizingCompactor):
                if compacted is None and step.reason is CompactReason.THRESHOLD:
                    compacted = await self._summarize(compactor, messages)
                    kind = "summarize"
                compactor = None  # the fallback: truncation, which needs no model call
            if compacted is None:
                kind = "truncate"
                compacted = budget.compact(messages, compactor)
        except CompactionOverflow as exc:
            m.fail(exc, overflow=True)
            if emit:
                emit(CompactionFinished(kind, step.reason.value, before, exc.tokens_after or before))
            return exc
        if compacted is None:
            m.compaction_noop(before, before)
            after = before
        else:
            after = self._counter.count(compacted)
            m.compaction_result(compacted, before, after)
        if emit:
            emit(CompactionFinished(kind, step.reason.value, before, after))
        return None

    async def _compact_at_provider(
        self, strategy: OpenAICompactEndpoint, messages: list[Message]
    ) -> list[Message] | None:
        """A compaction by the provider's endpoint (``POST /v1/responses/compact``): the window it returns,
        then the ``Durable`` results with their calls. ``None`` (the fallback: truncation) when the call
        failed or saved nothing."""
        compact = getattr(self.client, "compact_conversation", None)
        if compact is None:
            return None
        request = ModelRequest(messages=messages, system=self._request_key[0] if self._request_key else None)
        try:
            window, _usage = await compact(request, instructions=strategy.instructions)
        except LoopError:
            return None
        out = [*window, *durable_after(messages)]
        return out if self._counter.count(out) < self._counter.count(messages) else None

    async def _summarize(self, compactor: SummarizingCompactor, messages: list[Message]) -> list[Message] | None:
        """A summary pass: the compactor plans the request, the client sends it, the compactor builds the new
        conversation from the reply. ``None`` when there was nothing to summarize or the call failed."""
        plan = compactor.start(messages, self._budget)
        if plan is None:
            return None
        try:
            reply: Any = await self.client.generate(plan.request, stream=False)
        except LoopError as exc:
            reply = exc
        out: list[Message] = plan.finish(reply)
        before = self._counter.count(messages)
        return out if self._counter.count(out) < before else None

    def _after_overflow(self, error: ContextOverflow) -> int:
        """The conversation's size, in tokens, once the provider said it is longer than the window: what the
        provider reported (scaled to our window when the provider's is smaller), else just past our window.
        The ratio of that size to the estimate is kept for the emergency compaction that follows, so it cuts
        enough: the estimate was that much too low."""
        sent = self._machine.full_history()
        size = _overflow_size(error, self._budget.window)
        estimate = self._counter.count(sent)
        self._overflow_scale = size / estimate if estimate > 0 else None
        return max(size, estimate)

    def _context_after_reply(self, sent: Sequence[Message], estimate: int, reply: Message, usage: Usage) -> int:
        """The conversation's size, in tokens, once ``reply`` joins ``sent`` (estimated at ``estimate``).

        The counter is calibrated on the provider's reported input tokens after the first reply, and again
        when the estimate has drifted more than :data:`CALIBRATION_DRIFT` from the report and the history has
        grown by a quarter since the last calibration (a calibration is a pass over the history; spacing them
        geometrically keeps the cost amortized O(1) per turn). Otherwise the reply's tokens are added.
        """
        counter = self._counter
        if isinstance(counter, WindowCounter) and any(isinstance(p, CompactionPart) for p in reply.parts):
            return counter.count([*sent, reply])  # the provider compacted: it reads from the reply on
        reported = usage.input_tokens  # None when the provider did not report it: nothing to calibrate on
        calibrate = getattr(counter, "calibrate", None)
        if reported is not None and reported > 0 and calibrate is not None:
            drifted = abs(reported - estimate) > CALIBRATION_DRIFT * reported
            if self._calibrated_at < 0 or (drifted and len(sent) >= 1.25 * self._calibrated_at):
                calibrate(sent, reported, reply=reply, output_tokens=usage.output_tokens)
                self._calibrated_at = len(sent)
                if type(counter) is HeuristicTokenCounter:
                    # Calibrated, its count of ``sent`` is ``reported`` (> 0), and its count is additive:
                    # ``count([*sent, reply])`` without the pass over the history.
                    return reported + counter.message_tokens(reply)
                return counter.count([*sent, reply])
        return estimate + message_tokens(counter, reply)

    # --- helpers -------------------------------------------------------------------------------------------

    @staticmethod
    def _turn(opened: _OpenTurn, records: Sequence[ToolCallRecord]) -> Turn:
        """The record of the turn ``opened`` holds (its index, input, reply, the reply's usage, duration), with
        the records of its calls."""
        index, turn_input, reply, usage, duration = opened
        response = reply.response
        return Turn(  # positional, in the order of its fields
            index,
            tuple(turn_input),
            response.message,
            records if type(records) is tuple else tuple(records),
            usage,
            response.stop_reason,
            duration,
            reply.model,
            reply.provider,
            reply.cost,
        )


def _with_calls(turn: Turn, records: tuple[ToolCallRecord, ...]) -> Turn:
    """``turn`` with its ``tool_calls`` set to ``records`` (what ``dataclasses.replace`` makes, without its
    generic walk over the fields)."""
    return Turn(
        turn.index,
        turn.input,
        turn.output,
        records,
        turn.usage,
        turn.stop_reason,
        turn.duration,
        turn.model,
        turn.provider,
        turn.cost,
    )


@dataclass(frozen=True, slots=True)
class _Setup:
    """What every request of one run carries besides the messages (made once per run by ``_prepare``)."""

    system: str | None
    extra_tools: tuple[ToolSchema, ...] = ()
    tool_choice: ToolChoice | None = None
    output_format: OutputFormat | None = None
    plan: OutputPlan | None = None
    validator: OutputValidator[Any] | None = None
    deps: Any = None


def check_decisions(approvals: Mapping[str, Approval], pending: Sequence[PendingApproval], tools: ToolRegistry) -> None:
    """Refuse decisions that do not fit the calls ``pending`` (:class:`ApprovalError`, before anything runs): a
    call that awaits none, a decision of another type, a ``Deny`` whose reason is not a string, a
    ``Modify`` whose input is not JSON or does not fit the tool's schema (checked by the tool's
    ``check_input`` when ``tools`` has one for it: :class:`~loopctl.tool.FunctionTool`)."""
    awaiting = {p.id: p for p in pending}
    awaited = ", ".join(sorted(awaiting)) or "none"
    if not approvals:
        raise ApprovalError(f"approvals is empty; the run awaits {awaited}")
    for call_id, decision in approvals.items():
        if call_id not in awaiting:
            raise ApprovalError(f"call {call_id!r} does not await approval (the run awaits {awaited})")
        if not isinstance(decision, (Approve, Deny, Modify)):
            raise ApprovalError(
                f"the decision for call {call_id!r} is {decision!r}; expected Approve(), Deny(reason) or Modify(input)"
            )
        if isinstance(decision, Deny) and not isinstance(decision.reason, str):
            raise ApprovalError(
                f"the reason of Deny for call {call_id!r} must be a string (the text the model reads), got "
                f"{type(decision.reason).__name__}"
            )
        if isinstance(decision, Modify):
            problem = input_problem(decision.input)
            call = awaiting[call_id].call
            tool = tools.get(call.name)
            check = getattr(tool, "check_input", None)
            if problem is None and callable(check):
                try:
                    check(decision.input)
                except ToolInputError as exc:
                    problem = f"it does not fit the schema of {call.name!r}: {exc}"
            if problem is not None:
                raise ApprovalError(f"the input of Modify for call {call_id!r} ({call.name}) is refused: {problem}")


def _plain_batches(cls: type[BareLoop]) -> bool:
    """Whether ``cls`` runs a batch of tool calls with :class:`BareLoop`'s own methods (a durable engine
    overrides some, to record each call): only then may ``_run`` take its direct path for one call."""
    return (
        cls._run_tools is BareLoop._run_tools
        and cls._run_one is BareLoop._run_one
        and cls._run_checked is BareLoop._run_checked
        and cls._execute is BareLoop._execute
    )


def _results_message(records: Sequence[ToolCallRecord]) -> Message:
    """The user message of the records' results; results the loop made (or a hook handed back as
    :class:`~loopctl.message.ToolResultPart`) were checked when they were made and are not checked again."""
    parts = tuple([r.result for r in records])
    for p in parts:
        if type(p) is not ToolResultPart:
            return Message(role=Role.USER, parts=parts)
    return assemble(Message, role=Role.USER, parts=parts)


async def _check_output(
    plan: OutputPlan, response: ModelResponse, validator: OutputValidator[Any] | None
) -> tuple[OutputCheck | None, Any, list[str]]:
    """The verdict on ``response`` as the run's typed output: ``(check, value, problems)``. ``check`` is
    ``None`` for a reply that is not an answer yet (it calls other tools), or one that ended for another
    reason (cut off by the output limit, refused); ``value`` is the valid output; ``problems`` what was
    wrong. Raises what the ``validator`` raises, but :class:`~loopctl.output.RejectOutput`; ``TypeError`` for
    a ``RejectOutput`` whose message is not a str."""
    msg = response.message
    calls = msg.tool_calls()
    if not calls and response.stop_reason in (StopReason.MAX_TOKENS, StopReason.REFUSAL):
        return None, NO_OUTPUT, []
    call_id: str | None = None
    try:
        if plan.kind == "tool":
            invalid = {c.id for c in response.invalid_tool_calls}
            mine = [c for c in calls if c.name == plan.tool_name and c.id not in invalid]
            if not mine:
                if calls:
                    return None, NO_OUTPUT, []
                missing = f"the answer is text, not a call of {plan.tool_name}"
                return OutputCheck(None, plan.missing_call(), missing), NO_OUTPUT, [missing]
            call_id = mine[0].id
            value = plan.schema.validate_object(mine[0].input)
        else:
            if calls:
                return None, NO_OUTPUT, []
            text = "".join(p.text for p in msg.parts if isinstance(p, TextPart))
            value = text if plan.kind == "text" else plan.schema.validate_text(text)
    except ValueError as exc:
        found: list[str] = list(exc.args[0]) if exc.args and isinstance(exc.args[0], list) else [str(exc)]
        return OutputCheck(call_id, plan.invalid(found), "; ".join(found)), NO_OUTPUT, found
    if validator is not None:
        try:
            checked = validator(value)
            if inspect.isawaitable(checked):
                checked = await checked
        except RejectOutput as rejected:
            message: object = rejected.message
            if not isinstance(message, str):
                # The validator's bug: the model cannot read it, and a text mode would make it a message that
                # cannot be written. The run fails with it, in every mode (the driver's output-validator failure).
                raise TypeError(
                    "the output validator raised RejectOutput with a message of type "
                    f"{type(message).__name__}; its message is the text the model reads, a str"
                ) from rejected
            message = valid_unicode(message)  # a lone surrogate (text cut inside a pair) becomes U+FFFD, as in tools
            return OutputCheck(call_id, message), NO_OUTPUT, [message]
        if checked is not None:
            value = checked
    return OutputCheck(call_id), value, []


async def _race(aw: Awaitable[_T], cancel: asyncio.Event | None) -> _T:
    """Await ``aw``, or raise :class:`_Cancelled` (cancelling ``aw``) as soon as ``cancel`` is set."""
    if cancel is None:
        return await aw
    if cancel.is_set():
        if inspect.iscoroutine(aw):
            aw.close()
        raise _Cancelled
    task = asyncio.ensure_future(aw)
    waiter = asyncio.ensure_future(cancel.wait())
    try:
        done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        waiter.cancel()
        task.add_done_callback(retrieve)  # its CancelledError is ours; asyncio must not log it as lost
        raise
    if task in done:
        waiter.cancel()
        return task.result()
    task.cancel()
    # Wait for the cancelled task to unwind (its outcome no longer matters) without swallowing a
    # cancellation of our own.
    await asyncio.wait({task})
    retrieve(task)
    raise _Cancelled


@types.coroutine
def _resume(coro: Coroutine[Any, Any, _T], waits_on: Any) -> Generator[Any, Any, _T]:
    """Await ``coro`` from where it stopped: it was stepped once by hand and yielded ``waits_on`` (what the
    task must wait on). What ``await coro`` would do from there (``yield from``): each resumption is sent on,
    each exception thrown in (a cancellation, a timeout's), and its value or error is this one's. The exception
    is thrown in outside this frame's ``except`` clause, as ``yield from`` throws it: the coroutine does not
    see it as being handled (``sys.exc_info()``, the ``__context__`` of what it raises after catching it)."""
    while True:
        thrown: BaseException | None = None
        try:
            sent = yield waits_on
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            thrown = exc
        try:
            waits_on = coro.send(sent) if thrown is None else coro.throw(thrown)
        except StopIteration as finished:
            return cast(_T, finished.value)
        finally:
            thrown = None  # no reference cycle through the frame


def _cancelling() -> bool:
    """Whether the current task is being cancelled (``Task.cancelling()``): a ``CancelledError`` is ours to
    propagate only then; otherwise it came from inside an operation that was cancelled on its own."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _retry_delay(exc: LoopError, attempt: int, cfg: RunConfig) -> float:
    """Seconds to wait before retry ``attempt`` (from 1): the provider's ``retry_after`` when it gave one
    (capped at ``cfg.retry_max_delay``), else exponential backoff with full jitter (tenacity's)."""
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, (int, float)) and retry_after >= 0:
        return float(min(retry_after, cfg.retry_max_delay))
    from tenacity import RetryCallState, wait_random_exponential  # only when a call is retried: a cold start skips it

    wait = wait_random_exponential(multiplier=cfg.retry_initial_delay, max=cfg.retry_max_delay)
    state = RetryCallState(None, None, (), {})  # type: ignore[arg-type]
    state.attempt_number = attempt
    return float(wait(state))


def _overflow_size(error: ContextOverflow, window: int) -> int:
    """The size, in tokens of our ``window``, of a prompt the provider refused as too long: its count scaled by
    ``window / maximum`` (a provider window smaller than ours makes the prompt count for more), or
    ``window + 1`` when the error gives no numbers (``ContextOverflow.prompt_tokens`` and ``context_window``,
    read from each provider's wording by :func:`loopctl.errors.overflow_counts`)."""
    n, most = error.prompt_tokens, error.context_window
    if n is not None and most is not None and most > 0:
        return max(window + 1, n * window // most + 1)
    return window + 1


def _clipped(content: ToolContent, limit: int) -> ToolContent:
    """``content`` with each text longer than ``limit`` characters cut in the middle, with a note saying how
    much was cut (``compact.clip_middle``: never inside a character). One huge tool output would otherwise
    fill the window before the model has seen it, and the run could not be compacted."""
    root = content.root
    if isinstance(root, str):
        return content if len(root) <= limit else ToolContent.from_string(clip_middle(root, limit))
    if all(not isinstance(p, TextPart) or len(p.text) <= limit for p in root):
        return content
    return ToolContent.from_multipart(
        [TextPart(text=clip_middle(p.text, limit)) if isinstance(p, TextPart) else p for p in root]
    )


def _timeout_text(tool: Tool, name: str, timeout: float | None) -> str:
    """What the model reads when a tool ran past its timeout: true for both kinds of tool. A coroutine is
    cancelled; a plain function running in a worker thread cannot be stopped (Python has no way to end a
    thread), so it may still be running and its effects may still happen; it is asked to stop through
    :attr:`~loopctl.tool.ToolContext.stop_requested`, which it may poll."""
    seconds = f"{timeout:g} s" if timeout is not None else "its time limit"
    if getattr(tool, "runs_in_thread", False):
        return (
            f"Tool {name!r} timed out after {seconds}. It runs in a worker thread, which cannot be stopped: it may "
            "still be running, and what it does may still take effect."
        )
    return f"Tool {name!r} timed out after {seconds} and was stopped."


def _log_tool_error(tool: Tool, call: ToolCallPart, error: BaseException, context: ToolContext[Any]) -> None:
    """Log a tool's exception with its traceback (the model reads it as the call's error result; the
    developer reads it here). An ``AttributeError`` on ``None`` in a tool that takes a :class:`ToolContext`,
    in a run given no ``deps=``, gets a note saying so (it shows in the traceback, and on the exception)."""
    if (
        isinstance(error, AttributeError)
        and getattr(error, "obj", False) is None
        and context.deps is None
        and getattr(tool, "_context_param", None) is not None
    ):
        note = (
            f"the run was given no deps= (loop.run(..., deps=...)), so ToolContext.deps is None in tool {call.name!r}"
        )
        if note not in getattr(error, "__notes__", ()):
            error.add_note(note)
    logger.warning(
        "tool %r raised %s: %s (call %s, turn %d); the model is told",
        call.name,
        type(error).__name__,
        exception_text(error),
        call.id,
        context.turn,
        exc_info=error,
    )


def _error_result(call: ToolCallPart, text: str) -> ToolResultPart:
    return ToolResultPart(call_id=call.id, name=call.name, output=text, is_error=True)


def _answer_text(turns: Sequence[Turn]) -> str:
    """The text of this run's last reply without tool calls (``""`` when it has none): never an earlier run's."""
    if turns and not turns[-1].output.tool_calls():
        return "".join(p.text for p in turns[-1].output.parts if isinstance(p, TextPart))
    return ""


def _price(client: ModelClient, usage: Usage, model: str | None) -> Decimal | None:
    """What ``usage`` on ``client`` cost, in USD: the client's own ``price_usage(usage, model)`` when it has
    one that knows (a test double given prices), else :func:`loopctl.pricing.price` for its provider and API
    URL."""
    own = getattr(client, "price_usage", None)
    if callable(own):
        cost: Decimal | None = own(usage, model)
        if cost is not None:
            return cost
    return price(usage, model, provider=client.provider, api_url=getattr(client, "api_url", None))


def _run_usage(spend: ToolSpend) -> RunUsage:
    """A tool's spend as the machine counts it for the run's limits."""
    return RunUsage(
        spend.requests, spend.tool_calls, spend.usage.input_tokens or 0, spend.usage.output_tokens or 0, spend.cost
    )


def _run_error(outcome: Outcome, error: BaseException | None) -> BaseException | None:
    """The exception that ended a run with ``outcome``: the one met (``error``) when the outcome names its
    type, else one made from the outcome (a failure the machine decided, such as a compaction that saved
    nothing); ``None`` unless the run failed."""
    if outcome.kind not in (OutcomeKind.FAILED, OutcomeKind.CONTEXT_OVERFLOW, OutcomeKind.FALLBACK_EXHAUSTED):
        return None
    if error is not None and type(error).__name__ == outcome.error_type:
        return error
    text = outcome.error or outcome.kind.value
    if outcome.error_type == CompactionNoProgress.__name__:
        return CompactionNoProgress(text)
    if outcome.error_type == CostUnknown.__name__:
        return CostUnknown(text)
    return LoopError(text)


PROVIDER_COMPACTIONS = tuple(getattr(ProviderCompaction, "__args__", ()))
"""The provider-side strategy classes (:data:`loopctl.compact.provider.ProviderCompaction`)."""


def _check_provider_compaction(strategy: ProviderCompaction, client: ModelClient) -> ProviderCompaction:
    """``strategy``, once the client is known to be its provider's; raises ``ValueError`` otherwise (a
    strategy the provider has none of, or the compact endpoint without a client that can call it)."""
    provider = getattr(client, "provider", "")
    if provider != strategy.provider:
        raise ValueError(
            f"{type(strategy).__name__} is compaction by {strategy.provider}; this loop's client is {provider!r} "
            "(use a local compactor, or that provider's client)"
        )
    if isinstance(strategy, OpenAICompactEndpoint) and getattr(client, "compact_conversation", None) is None:
        raise ValueError("OpenAICompactEndpoint needs an OpenAIResponsesClient (POST /v1/responses/compact)")
    return strategy


def _make_budget(config: SessionConfig, client: ModelClient) -> ContextBudget:
    """The session's budget: ``config.budget``, else one of ``config.context_window`` tokens, else of the window
    the client's model is published with (:func:`loopctl.model_limits.published`), else of 200,000."""
    if config.budget is not None:
        budget: ContextBudget = config.budget
        return budget
    window = config.context_window
    if window is None:
        from loopctl.model_limits import DEFAULT_CONTEXT_WINDOW, published

        limits = published(str(getattr(client, "provider", "")), str(getattr(client, "model", "")))
        window = limits.context_window if limits is not None and limits.context_window else DEFAULT_CONTEXT_WINDOW
    return ContextBudget(window=window, threshold=config.compact_threshold)
