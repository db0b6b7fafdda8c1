"""Durable runs on Temporal: each run is a Temporal workflow, each model call and each tool call an activity.

**Assume any unit may run twice.** Temporal records an activity's result in the workflow history once the
worker reports it; an activity that was running when its worker died is retried (after its heartbeat timeout)
on a live worker, from its start. A completed activity never runs again: replay reads its result from the
history. Tools with side effects should be idempotent or tolerate a repeat of an interrupted call.

The mapping (``docs/durable.md`` has the whole of it):

- ``TemporalLoop(client, tools, config, name="support")`` makes the activities ``support.model`` (one model
  call, with the run's retry policy inside it and the check of the reply as typed output),
  ``support.tool.<tool name>`` (one tool call, the permission check included), ``support.summarize`` (a
  summarizing compaction's model call) and ``support.instructions`` (callable instructions, evaluated once
  per run). Register
  :attr:`TemporalLoop.activities` and :class:`LoopWorkflow` (workflow type ``loopctl.LoopWorkflow``, one
  run) or :class:`LoopSession` (``loopctl.LoopSession``, a conversation that continues as new when its
  history grows) on a worker. The names are compatibility data: a history records them, so renaming a loop
  or a tool strands its running workflows.
- Workflow code is the :class:`~loopctl.engine.BareLoop` driver, with each effect an activity: the
  :class:`~loopctl.engine.LoopMachine` lives in workflow memory and is rebuilt by replay. The machine, the
  prune and truncation passes and the token counter are pure, so replay takes the same steps.
- ``output_type``, ``output_validator`` and ``deps`` are the loop's, on the worker: the validator runs in the
  model activity, the validated value crosses into the workflow as JSON and is validated again there; deps
  reach the activities from the worker's loop and never enter the history.
- Timeouts and retries: the run's own policy (``RunConfig.max_retries``...) retries a failed model call
  *inside* one activity attempt; a failure it gives up on is the activity's result (the run fails as a plain
  run does), never an activity failure. Temporal's retry policy (``activity_retry``) covers the activity as a
  whole: a worker that died (no heartbeat for ``heartbeat_timeout``) or an attempt past its
  ``start_to_close`` timeout. Each Temporal attempt starts the run's policy afresh.
- Observers see each event once: activities emit their events while they run; workflow code emits none while
  Temporal replays it.
- Cancelling the workflow (``handle.cancel()``) or signalling ``cancel`` ends the run ``CANCELLED`` with the
  coherent prefix kept, as a cancelled ``BareLoop`` run does; the running activity is cancelled (a tool learns
  of it at its next heartbeat).
- Guardrails: limits and loop detection are the machine's (workflow state); the hooks run in the activities
  whose effect they wrap (``before_model``/``after_model`` in the model activity, ``before_tool``/
  ``after_tool`` in the tool activity), as does a :class:`~loopctl.providers.FallbackClient`'s chain; the
  model activity returns which client answered and the reply's cost. A deferred call makes the workflow wait
  for the update ``decide`` (:func:`approve`; or the signal ``approve``); the query ``pending_approvals``
  lists what it waits on. Each decision answers only the wait it was given for (its
  :class:`~loopctl.durable.approvals.ApprovalKey`: run, turn, call); others are refused or dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar, overload

try:
    from temporalio import activity, workflow
    from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
    from temporalio.common import RetryPolicy
    from temporalio.exceptions import ApplicationError, FailureError
    from temporalio.service import RPCError, RPCStatusCode
except ImportError as exc:  # the extra is not installed
    raise ImportError(
        f"loopctl.durable.temporal needs the Temporal SDK: pip install 'pyloopctl[temporal]' ({exc})"
    ) from exc

from loopctl.agent import Agent
from loopctl.agent._tools import AgentTool, _prompt
from loopctl.compact import SummarizingCompactor
from loopctl.durable._common import (
    DurableLoop,
    EffectNames,
    LiveObserver,
    RecordedVerdicts,
    gate_sub_agent_call,
    sub_agent_result,
    sub_agent_tools,
    tighter,
    with_own_budget,
)
from loopctl.durable._payloads import (
    OutputValues,
    approvals_from_dict,
    approvals_to_dict,
    check_to_dict,
    config_from_dict,
    config_to_dict,
    dumps,
    error_to_dict,
    loads,
    loop_error_from_dict,
    pending_from_dict,
    pending_to_dict,
    record_from_dict,
    record_to_dict,
    reply_to_dict,
    run_from_dict,
    run_to_dict,
    usage_from_dict,
)
from loopctl.durable.approvals import (
    ApprovalKey,
    AwaitedCall,
    admit,
    awaited_from_dict,
    awaited_to_dict,
    awaiting,
    bind,
    bound_to_dict,
    read_decisions,
)
from loopctl.engine.config import RunConfig, SessionConfig
from loopctl.engine.events import LoopEvent, Observer, SubAgentEvent, ToolCallFinished
from loopctl.engine.limits import remaining
from loopctl.engine.loop import BareLoop, _race
from loopctl.engine.machine import LoopMachine
from loopctl.engine.permission import Approval, Approve, Modify, PendingApproval, PermissionCallback, input_problem
from loopctl.engine.run import ModelReply, OutputT, Run, ToolCallRecord
from loopctl.errors import ApprovalError, HookFailed, LoopError
from loopctl.message import Message, ToolCallPart
from loopctl.output import OutputSpec, OutputValidator
from loopctl.providers.base import ModelClient, ModelRequest
from loopctl.response import Usage
from loopctl.tool import Tool, ToolInputError, ToolProvider, ToolRegistry

__all__ = [
    "APPROVE_SIGNAL",
    "DECIDE_UPDATE",
    "PASSTHROUGH_MODULES",
    "PENDING_QUERY",
    "WORKFLOW_NAME",
    "ActivityNames",
    "ApprovalInbox",
    "SESSION_WORKFLOW_NAME",
    "LoopSession",
    "LoopSessionInput",
    "LoopWorkflow",
    "LoopWorkflowInput",
    "TemporalLoop",
    "approve",
    "execute",
    "pending_approvals",
]

_T = TypeVar("_T")

WORKFLOW_NAME = "loopctl.LoopWorkflow"
"""The workflow type of :class:`LoopWorkflow` (compatibility data)."""

DECIDE_UPDATE = "decide"
"""The update that carries decisions to a run waiting for approvals (compatibility data; :func:`approve` sends
it): one argument, ``{call_id: {"decision": "approve"} | {"decision": "deny", "reason": ...} | {"decision":
"modify", "input": ...}}`` (``_payloads.approvals_to_dict``), each decision with the ``"run"`` and ``"turn"``
of the wait it answers, or without them to answer the wait the run is in. The worker refuses it (the sender
gets the reason; the run waits on) for decisions of the wrong shape (its validator: nothing is recorded),
while the run awaits no approval, for a call or wait it does not await, and for a decision that does not fit
the tool (the update fails); it returns the keys the decisions were bound to (``[{"run": ..., "turn": ...,
"call": ...}]``)."""

APPROVE_SIGNAL = "approve"
"""The signal that carries decisions to a run waiting for approvals, for senders that cannot wait for a
worker's answer (compatibility data): the argument of :data:`DECIDE_UPDATE`. A signal cannot be refused: a
decision without its wait is bound on arrival to the wait the run is in, and one that answers no wait of the
run is dropped and logged by the worker."""

PENDING_QUERY = "pending_approvals"
"""The query that lists the calls a run waits on (compatibility data): ``[{"call": ..., "reason": ..., "run":
..., "turn": ...}]`` (``approvals.awaited_to_dict``), ``[]`` when it waits for none
(:func:`pending_approvals`)."""

PASSTHROUGH_MODULES = ("loopctl", "orjson", "pydantic", "pydantic_core", "httpx2", "tenacity")
"""Modules a sandboxed workflow of your own that calls :meth:`TemporalLoop.run` should pass through
(``SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)``): loopctl's workflow code is
deterministic by construction and keeps its module state (the loops a worker hosts)."""

_LOOPS: dict[str, TemporalLoop[Any]] = {}
_NOT_SENT: Any = object()  # a model call's input from a history recorded before instructions were sent


class ActivityNames(EffectNames):
    """The stable activity names of a loop (compatibility data: ``docs/durable.md``).

    ``model``: ``<name>.model``; ``summarize``: ``<name>.summarize``; ``instructions``:
    ``<name>.instructions``; :meth:`tool`: ``<name>.tool.<tool>``.
    """

    __slots__ = ()


class TemporalLoop(DurableLoop[OutputT]):
    """A loop whose runs are Temporal workflows (see the module docstring for the mapping and its rules).

    ``client``, ``tools``, ``config``, ``observers`` and ``permission`` are those of
    :class:`~loopctl.engine.BareLoop`; they are used by the activities, on the worker. ``name`` prefixes the
    activity names and is how :class:`LoopWorkflow` finds the loop: build the loop, with the same name, in
    every worker that may run its workflows. ``output_type`` and ``output_validator`` make every run's output
    a validated value (:mod:`loopctl.output`; ``run(..., output_type=T)`` of a plain loop); ``deps`` is
    handed to tools and instructions (``ToolContext.deps``, ``RunContext.deps``) in the activities and never
    enters the workflow history. ``hooks`` are ``BareLoop``'s, run in the activities (model hooks in the
    model activity, tool hooks in the tool activity), so a replay never runs them again.

    A deferred call (a permission callback's ``Defer()``, a tool marked ``requires_approval``) makes the run
    wait in its workflow for the update :data:`DECIDE_UPDATE` or the signal :data:`APPROVE_SIGNAL`
    (:class:`ApprovalInbox`, :func:`approve`); ``approval_timeout``
    (default ``None``: for ever) ends a run that waited that long without a decision with outcome
    ``AWAITING_APPROVAL``, as a plain run pauses (its machine holds the calls; a new workflow continues it
    with ``approvals``).

    Activity options: ``model_timeout`` (one model-call attempt, our retries included; default 10 minutes),
    ``tool_timeout`` (one tool-call attempt when ``RunConfig.tool_timeout`` is ``None``; otherwise that
    timeout plus ``tool_grace``), ``heartbeat_timeout`` (how soon a dead worker's activity is retried
    elsewhere; default 30 s) and ``activity_retry`` (Temporal's retry policy for an activity as a whole;
    default: up to 5 attempts, 1 s initial interval).

    Raises ``TypeError`` for an output type pydantic cannot describe and ``ValueError`` for an output tool
    named like one of the tools.
    """

    @overload
    def __init__(
        self: TemporalLoop[str],
        client: ModelClient,
        tools: ToolRegistry | Iterable[Tool | ToolProvider] = (),
        config: SessionConfig | None = None,
        *,
        name: str,
        observers: Sequence[Observer] = (),
        permission: PermissionCallback | None = None,
        output_type: None = None,
        output_validator: OutputValidator[str] | None = None,
        deps: Any = None,
        hooks: Sequence[object] = (),
        approval_timeout: timedelta | None = None,
        model_timeout: timedelta = ...,
        tool_timeout: timedelta = ...,
        tool_grace: timedelta = ...,
        heartbeat_timeout: timedelta = ...,
        activity_retry: RetryPolicy | None = None,
    ) -> None: ...
    @overload
    def __init__(
        self: TemporalLoop[_T],
        client: ModelClient,
        tools: ToolRegistry | Iterable[Tool | ToolProvider] = (),
        config: SessionConfig | None = None,
        *,
        name: str,
        observers: Sequence[Observer] = (),
        permission: PermissionCallback | None = None,
        output_type: OutputSpec[_T],
        output_validator: OutputValidator[_T] | None = None,
        deps: Any = None,
        hooks: Sequence[object] = (),
        approval_timeout: timedelta | None = None,
        model_timeout: timedelta = ...,
        tool_timeout: timedelta = ...,
        tool_grace: timedelta = ...,
        heartbeat_timeout: timedelta = ...,
        activity_retry: RetryPolicy | None = None,
    ) -> None: ...
    def __init__(
        self,
        client: ModelClient,
        tools: ToolRegistry | Iterable[Tool | ToolProvider] = (),
        config: SessionConfig | None = None,
        *,
        name: str,
        observers: Sequence[Observer] = (),
        permission: PermissionCallback | None = None,
        output_type: Any = None,
        output_validator: OutputValidator[Any] | None = None,
        deps: Any = None,
        hooks: Sequence[object] = (),
        approval_timeout: timedelta | None = None,
        model_timeout: timedelta = timedelta(minutes=10),
        tool_timeout: timedelta = timedelta(hours=1),
        tool_grace: timedelta = timedelta(seconds=30),
        heartbeat_timeout: timedelta = timedelta(seconds=30),
        activity_retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(client, tools, config, observers, permission, output_type, output_validator, deps, hooks)
        self.approval_timeout = approval_timeout
        self.names = ActivityNames(name)
        self.name = name
        self.model_timeout = model_timeout
        self.tool_timeout = tool_timeout
        self.tool_grace = tool_grace
        self.heartbeat_timeout = heartbeat_timeout
        self.activity_retry = activity_retry or RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5)
        self._parent: TemporalLoop[Any] | None = None  # a sub-agent's: the loop whose runs run it
        self.sub_agents: dict[str, TemporalLoop[Any]] = {
            t.name: self._sub_agent(t) for t in sub_agent_tools(self.tools)
        }
        self.activities: list[Callable[..., Any]] = self._make_activities()
        _LOOPS[name] = self

    def _lineage(self) -> tuple[TemporalLoop[Any], tuple[str, ...]]:
        """The outermost loop, and the agent path down to this one (``("support", "researcher")``)."""
        names: list[str] = []
        loop: TemporalLoop[Any] = self
        while True:
            agent = loop._agent
            names.append(agent.name if agent is not None else loop.name)
            if loop._parent is None:
                return loop, tuple(reversed(names))
            loop = loop._parent

    @classmethod
    def from_agent(
        cls,
        agent: Agent[Any, _T],
        *,
        name: str | None = None,
        deps: Any = None,
        approval_timeout: timedelta | None = None,
        model_timeout: timedelta = timedelta(minutes=10),
        tool_timeout: timedelta = timedelta(hours=1),
        heartbeat_timeout: timedelta = timedelta(seconds=30),
        activity_retry: RetryPolicy | None = None,
    ) -> TemporalLoop[_T]:
        """A durable loop running ``agent``: its model, tools, instructions, output type and validator, hooks,
        observers, permission callback and run settings (``run_config``, ``limits``: the defaults of a run's
        config). Each sub-agent among its tools runs inside the loop's runs, its model and tool calls
        activities of the same workflow (``<name>.<tool name>.model``...; :attr:`activities` has them), so a
        call of its tools that needs approval makes the whole run wait (``docs/durable.md``, "Sub-agents").

        ``name`` is the loop's name (default: the agent's name); ``deps`` are handed to the tools and
        instructions in the activities (a sub-agent's mapped by its :class:`~loopctl.agent.AgentTool`);
        ``approval_timeout``, ``model_timeout``, ``tool_timeout``, ``heartbeat_timeout`` and ``activity_retry``
        are as for the constructor. Raises ``ValueError`` for an agent with handoffs (not supported on a
        durable loop) and for a name that cannot prefix activity names."""
        if agent.handoffs:
            raise ValueError(f"agent {agent.name!r} has handoffs, which a durable loop does not run")
        client: Any = agent.model if isinstance(agent.model, ModelClient) else None
        loop: TemporalLoop[Any] = cls(
            client,
            agent.tool_list,
            agent.session_settings(),
            name=name or agent.name,
            observers=agent.observers,
            permission=agent.permission,
            output_type=agent.output_type,
            output_validator=agent.output_validator,
            deps=deps,
            hooks=agent.hooks,
            approval_timeout=approval_timeout,
            model_timeout=model_timeout,
            tool_timeout=tool_timeout,
            heartbeat_timeout=heartbeat_timeout,
            activity_retry=activity_retry,
        )
        loop._agent = agent
        return loop

    def _sub_agent(self, tool: AgentTool[Any]) -> TemporalLoop[Any]:
        """The settings of ``tool``'s sub-agent run inside this loop's runs: its agent's model, tools,
        instructions, output type, hooks and permission, its activities named ``<name>.<tool name>.*`` (in
        :attr:`activities`), this loop's timeouts. Not a loop a workflow can name."""
        sub: TemporalLoop[Any] = self._sub_loop(tool)
        sub.approval_timeout = self.approval_timeout
        sub._parent = self
        sub.names = ActivityNames(f"{self.name}.{tool.name}", check=False)
        sub.name = sub.names.name
        sub.model_timeout = self.model_timeout
        sub.tool_timeout = self.tool_timeout
        sub.tool_grace = self.tool_grace
        sub.heartbeat_timeout = self.heartbeat_timeout
        sub.activity_retry = self.activity_retry
        sub.sub_agents = {t.name: sub._sub_agent(t) for t in sub_agent_tools(sub.tools)}
        sub.activities = sub._make_activities()
        return sub

    # --- workflow side -------------------------------------------------------------------------------------

    async def run(
        self,
        input: str | Message | None = None,  # noqa: A002 - BareLoop's name
        config: RunConfig | None = None,
        *,
        machine: LoopMachine | None = None,
        cancel: asyncio.Event | None = None,
        approvals: Mapping[str, Approval] | None = None,
        inbox: ApprovalInbox | None = None,
    ) -> Run[OutputT]:
        """Run the loop on ``input`` from workflow code and return the :class:`~loopctl.engine.Run`;
        ``machine`` (the workflow's own, updated in place) holds the conversation to continue, a fresh one by
        default. Setting ``cancel``, or cancelling the workflow, ends the run ``CANCELLED`` with salvage.

        ``inbox`` is where the run waits for decisions on deferred calls (feed it from a signal or update
        handler of your workflow: :class:`ApprovalInbox`; one run at a time per inbox); without one a run that
        defers a call ends ``AWAITING_APPROVAL`` at once. ``approvals`` instead of ``input`` continues a
        paused machine, as ``BareLoop.run(approvals=...)`` (raises :class:`~loopctl.errors.ApprovalError`
        when they do not fit).

        ``config`` is the run's :class:`~loopctl.engine.RunConfig`.
        """
        run_key = inbox._begin_run() if inbox is not None else ""
        driver = _WorkflowDriver(self, machine or LoopMachine(), inbox, run_key)
        cancel = cancel or asyncio.Event()
        # deps stay on the worker: the activities take them from this loop, workflow code never sees them
        task = asyncio.ensure_future(
            driver._run(
                input, approvals, self.run_config(config), cancel, self.output_type, self.output_validator, None
            )
        )
        try:
            while True:
                try:
                    run: Run[OutputT] = await asyncio.shield(task)
                    return run
                except asyncio.CancelledError:
                    if task.done():
                        raise
                    cancel.set()  # the workflow was cancelled: end the run as a cancelled run, with its salvage
        finally:
            if inbox is not None:
                inbox._end_run()

    # --- worker side ---------------------------------------------------------------------------------------

    def _host(self, messages: Sequence[Message] = (), instructions: Any = _NOT_SENT, via: Any = None) -> _ActivityHost:
        """A driver on the worker, to run one effect with the loop's client, tools and observers; for a
        sub-agent's effect (``via``: the ids of the calls that run it, sent with the activity's input), the
        outermost loop's observers get its events too, as :class:`~loopctl.engine.SubAgentEvent` s."""
        observers = list(self.observers)
        if self._parent is not None and isinstance(via, list) and via:
            root, agents = self._lineage()
            call_id = str(via[-1])

            def forward(event: LoopEvent) -> None:
                wrapped = SubAgentEvent(agents, call_id, event)
                for observer in root.observers:
                    observer(wrapped)

            observers.append(forward)
        return _ActivityHost(
            self.client,
            self.tools,
            self.config,
            observers=observers,
            permission=self.permission,
            machine=LoopMachine(messages),
            hooks=self.hooks,
            instructions=instructions,
        )

    def _make_activities(self) -> list[Callable[..., Any]]:
        loop = self

        @activity.defn(name=self.names.model)
        async def model(payload: str) -> str:
            data = loads(payload)
            messages = [Message.from_dict(m) for m in data["messages"]]
            host = loop._host(messages, data.get("instructions", _NOT_SENT), data.get("via"))
            emit = host._emit if host.observers else None
            cfg = config_from_dict(data["config"])
            setup = await host._prepare(loop.output_type, loop.output_validator, cfg, loop.deps)
            # the request is built here from the conversation sent (as workflow code builds it): the hooks,
            # the retries, a fallback chain and the pricing all run in this activity
            request = host._request(cfg, setup)
            try:
                reply = await _heartbeating(host._call_model(data["turn"], request, cfg, None, emit))
            except LoopError as exc:  # the run's own retries gave up: the run fails, Temporal does not retry
                return dumps({"error": error_to_dict(exc)})
            out: dict[str, Any] = reply_to_dict(reply)
            if setup.plan is not None:  # the output validator runs here, once: its verdict is recorded
                try:
                    verdict = await host._check_reply(setup.plan, reply.response, setup.validator)
                except Exception as exc:
                    out["output_error"] = error_to_dict(exc)
                else:
                    out["output"] = check_to_dict(*verdict, loop.output_values)
            return dumps(out)

        @activity.defn(name=self.names.summarize)
        async def summarize(payload: str) -> str:
            data = loads(payload)
            compactor = loop.config.compactor
            if not isinstance(compactor, SummarizingCompactor):
                raise ApplicationError("this loop's compactor does not summarize", non_retryable=True)
            messages = [Message.from_dict(m) for m in data["messages"]]
            out = await _heartbeating(loop._host()._summarize(compactor, messages))
            return dumps(None if out is None else [m.to_dict() for m in out])

        @activity.defn(name=self.names.instructions)
        async def instructions(payload: str) -> str:
            text = await _heartbeating(BareLoop._instructions(loop._host(), loop.deps))
            return dumps({"text": text})

        made: list[Callable[..., Any]] = [model, summarize, instructions]
        for t in self.tools:
            sub = self.sub_agents.get(t.name)
            made.append(self._tool_activity(t.name))  # a sub-agent's: the checks before its call
            if sub is not None:
                made.extend(sub.activities)
        return made

    def _tool_activity(self, tool_name: str) -> Callable[..., Any]:
        loop = self

        @activity.defn(name=self.names.tool(tool_name))
        async def run_tool(payload: str) -> str:
            data = loads(payload)
            host = loop._host(via=data.get("via"))
            emit = host._emit if host.observers else None
            call = ToolCallPart.model_validate(data["call"])
            cfg = config_from_dict(data["config"])
            usage = usage_from_dict(data["usage"]) if "usage" in data else Usage()
            approval = _approval(data.get("approval"), call.id)
            tool = loop.tools.get(call.name)
            if call.name in loop.sub_agents and isinstance(tool, AgentTool):  # the sub-agent runs in the workflow
                gate = gate_sub_agent_call(host, data["turn"], call, tool, cfg, emit, loop.deps, usage, approval)
                return dumps(await _heartbeating(gate))
            try:
                done = await _heartbeating(host._run_one(data["turn"], call, cfg, emit, loop.deps, usage, approval))
            except HookFailed as exc:  # the run fails as a plain run does; Temporal does not retry
                return dumps({"error": error_to_dict(exc)})
            if isinstance(done, PendingApproval):
                return dumps({"pending": pending_to_dict(done)})
            return dumps(record_to_dict(done))

        return run_tool


class _ActivityHost(BareLoop):
    """BareLoop on the worker, running one effect of a workflow; its instructions are the workflow's (sent
    with a model call's input), not evaluated again."""

    def __init__(self, *args: Any, instructions: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sent_instructions = instructions

    async def _instructions(self, deps: Any) -> str | None:
        if self._sent_instructions is _NOT_SENT:
            return await super()._instructions(deps)
        text: str | None = self._sent_instructions
        return text


class _WorkflowDriver(RecordedVerdicts):
    """BareLoop's driver in workflow code, each effect an activity; one per run."""

    def __init__(
        self,
        owner: TemporalLoop[Any],
        machine: LoopMachine,
        inbox: ApprovalInbox | None,
        run_key: str,
        path: tuple[tuple[int, str], ...] = (),
        agents: tuple[str, ...] = (),
    ) -> None:
        super().__init__(
            owner.client,
            owner.tools,
            with_own_budget(owner.config),
            observers=[LiveObserver(o, _not_replaying) for o in owner.observers],
            machine=machine,
        )
        self._owner = owner
        self._inbox = inbox
        self._run_key = run_key  # the ``run`` of this run's approval keys
        self._instructions_text: str | None = None
        self._path = path  # a sub-agent's: the calls that run it, each (turn, call id), outermost first
        self._agents = agents  # a sub-agent's: the agent path ("support", "researcher")
        self._sub_lock = asyncio.Lock()  # sub-agents run one at a time: one wait at a time on the inbox

    def _clock(self) -> float:
        # Temporal's workflow time: the same readings when the workflow is replayed.
        return workflow.time()

    def _activity(self, name: str, payload: str, timeout: timedelta, summary: str) -> Awaitable[str]:
        owner = self._owner
        return workflow.execute_activity(
            name,
            payload,
            result_type=str,
            start_to_close_timeout=timeout,
            heartbeat_timeout=owner.heartbeat_timeout,
            retry_policy=owner.activity_retry,
            summary=summary,
        )

    async def _instructions(self, deps: Any) -> str | None:
        instructions = self.config.instructions
        if callable(instructions):
            out = loads(
                await self._activity(self._owner.names.instructions, "{}", self._owner.model_timeout, "instructions")
            )
            instructions = None if out["text"] is None else str(out["text"])
        self._instructions_text = instructions
        return instructions

    async def _call_model(
        self,
        turn: int,
        request: ModelRequest,
        cfg: RunConfig,
        cancel: asyncio.Event | None,
        emit: Any,
    ) -> ModelReply:
        if self._inbox is not None:  # how far the run is: a decision for an earlier wait is stale
            self._inbox._at = (*(t for t, _ in self._path), turn)
        # The activity builds the same request from the conversation, the config and the instructions sent.
        payload = dumps(
            {
                "turn": turn,
                "messages": [m.to_dict() for m in self._machine.full_history()],
                "config": config_to_dict(cfg),
                "instructions": self._instructions_text,
                **self._via(),
            }
        )
        names = self._owner.names
        out = loads(
            await _race(self._activity(names.model, payload, self._owner.model_timeout, f"turn {turn}"), cancel)
        )
        if "error" in out:
            raise loop_error_from_dict(out["error"])
        return self._reply_from(out, self._owner.output_values)

    async def _run_one(
        self,
        turn: int,
        call: ToolCallPart,
        cfg: RunConfig,
        emit: Any,
        deps: Any = None,
        usage: Usage | None = None,
        approval: Approve | Modify | None = None,
    ) -> ToolCallRecord | PendingApproval:
        owner = self._owner
        timeout = (
            owner.tool_timeout if cfg.tool_timeout is None else timedelta(seconds=cfg.tool_timeout) + owner.tool_grace
        )
        doc: dict[str, Any] = {
            "turn": turn,
            "call": call.to_dict(),
            "config": config_to_dict(cfg),
            "usage": (usage or Usage()).to_dict(),
            **self._via(),
        }
        if approval is not None:  # a call approved later: the activity skips the hooks before it and the check
            doc["approval"] = approvals_to_dict({call.id: approval})[call.id]
        out = loads(await self._activity(owner.names.tool(call.name), dumps(doc), timeout, call.name))
        if "error" in out:
            raise loop_error_from_dict(out["error"])
        if "pending" in out:
            return pending_from_dict(out["pending"])
        sub = owner.sub_agents.get(call.name)
        if "proceed" in out and sub is not None:  # the checks before the call let it run: the sub-agent runs here
            return await self._run_sub_agent(sub, turn, call, out["proceed"], cfg, emit)
        return record_from_dict(out)

    def _via(self) -> dict[str, Any]:
        """What a sub-agent's activity input adds: ``{"via": [<the ids of the calls that run it>]}`` (its events
        reach the outermost loop's observers with them); nothing for the loop's own."""
        return {"via": [c for _, c in self._path]} if self._path else {}

    async def _run_sub_agent(
        self, sub: TemporalLoop[Any], turn: int, call: ToolCallPart, given: Any, cfg: RunConfig, emit: Any
    ) -> ToolCallRecord:
        """The call ``call`` runs ``sub``'s agent inside this workflow: a driver of its own over a new
        conversation, its effects activities named ``<name>.<tool name>.*``, its waits for approval this
        workflow's inbox (keyed with the call's path). Replay reads its activities' results from the history,
        so no completed model or tool call of the sub-agent runs again. ``given`` is the input the checks before
        the call (its tool activity) let it run with."""
        tool = self.tools.get(call.name)
        assert isinstance(tool, AgentTool)
        try:
            prompt = _prompt(given)
        except ToolInputError as exc:
            return self._not_run(turn, call, f"Invalid input for tool {call.name!r}: {exc}", emit)
        agent = self._owner._agent
        agents = self._agents or (agent.name if agent is not None else self._owner.name,)
        agents = (*agents, tool.agent.name)
        async with self._sub_lock:
            path = (*self._path, (turn, call.id))
            child = _WorkflowDriver(sub, LoopMachine(), self._inbox, self._run_key, path, agents)
            if emit:

                def forward(event: LoopEvent) -> None:
                    emit(event if isinstance(event, SubAgentEvent) else SubAgentEvent(agents, call.id, event))

                child._run_observers = (forward,)
            settings = sub.run_config(None)
            limits = tighter(settings.limits, remaining(cfg.limits, self._machine.usage))
            if limits is not settings.limits:
                settings = dataclasses.replace(settings, limits=limits)
            run = await child._run(prompt, None, settings, None, sub.output_type, sub.output_validator, None)
        record = sub_agent_result(tool, turn, call, run, child._machine.usage)
        if emit:
            emit(ToolCallFinished(turn, call, record.result, record.duration))
        return record

    async def _await_approvals(self, pending: tuple[PendingApproval, ...]) -> Mapping[str, Approval] | None:
        if self._inbox is None:
            return None
        awaited = awaiting(pending, self._run_key, self._machine.turn, self._path, self._agents)
        decisions = await self._inbox.wait(awaited, self._owner.approval_timeout, self.tools)
        if decisions is None:
            return None
        return {a.call.id: decisions[a.id] for a in awaited if a.id in decisions}  # by the run's own ids

    async def _summarize(self, compactor: SummarizingCompactor, messages: list[Message]) -> list[Message] | None:
        payload = dumps({"messages": [m.to_dict() for m in messages]})
        out = loads(await self._activity(self._owner.names.summarize, payload, self._owner.model_timeout, "summarize"))
        return None if out is None else [Message.from_dict(m) for m in out]


def _not_replaying() -> bool:
    return not workflow.unsafe.is_replaying()


class ApprovalInbox:
    """Where a run in workflow code waits for decisions on its deferred calls (``docs/durable.md``, "Approval
    binding"): an update or signal handler :meth:`put` s the decisions it received, and the run takes those
    that answer the wait it is in. :attr:`pending` is what the run waits on now, each call with its
    :class:`~loopctl.durable.approvals.ApprovalKey` (empty when it waits for none; while the calls decided
    first run, the turn's undecided ones stay listed). An update handler first awaits :meth:`settled`, then
    calls :meth:`check` to refuse what :meth:`put` would not take. Workflow state, rebuilt by replay like
    the rest: the updates and signals are in the history. One loop run at a time per inbox."""

    def __init__(self) -> None:
        self._entries: list[tuple[ApprovalKey, Approval]] = []
        self._runs = 0
        self._run = ""  # the run part of the current (or last) loop run's keys: "<Temporal run id>/<n>"
        self._running = False
        self._at: tuple[int, ...] = ()  # where the current run is: its latest model call (ApprovalKey.position)
        self._waited: tuple[int, ...] = ()  # the position of the current run's latest wait
        self._wait_tools: ToolRegistry | None = None  # the tools of the calls waited on (a sub-agent's)
        self.pending: tuple[AwaitedCall, ...] = ()

    def _begin_run(self) -> str:
        """The ``run`` of the keys of the loop run starting on this inbox: ``<Temporal run id>/<n>``, n
        counting the loop runs of this workflow execution from 1."""
        self._end_run()
        self._runs += 1
        self._run = f"{workflow.info().run_id}/{self._runs}"
        self._running = True
        self._at = self._waited = ()
        return self._run

    def _end_run(self) -> None:
        self._entries.clear()
        self.pending = ()
        self._running = False

    def _reached(self, key: ApprovalKey) -> bool:
        """Whether the run has reached the wait ``key`` names, or gone past it (so a decision for it can be
        taken or refused now). Not yet: its turn has not come, or its calls are still running.
        A worker replaying the history applies an update before the other events of its workflow task, so
        an update may come before the run has caught up with the wait its sender saw. Waits are ordered by
        :attr:`ApprovalKey.position <loopctl.durable.approvals.ApprovalKey.position>`: a turn's wait comes after
        its model call and after the waits of the sub-agents its calls run."""
        if key.run != self._run or not self._running:
            return True  # another loop run (an earlier one, another execution's, one never shown), or over
        at = key.position
        return at < self._at or at <= self._waited

    def settled(self, approvals: Any) -> bool:
        """Whether the run has reached (or gone past) the waits the decisions of ``approvals`` name: an update
        handler awaits this (``workflow.wait_condition``) before :meth:`check`."""
        entries, _ = read_decisions(approvals)
        return all(key is None or self._reached(key) for _, _, key in entries)

    def put(self, approvals: Any) -> tuple[ApprovalKey, ...]:
        """Take a message of decisions (``{call_id: {"decision": ..., ["run": ..., "turn": ...]}}``: the
        argument of :data:`DECIDE_UPDATE` and :data:`APPROVE_SIGNAL`). A decision that names its wait keeps
        it, and is taken or dropped when the run waits; one that does not is bound to the wait the run is in
        now, or dropped if it awaits no such call. Dropped decisions are logged (a signal cannot answer its
        sender). Returns the keys of the decisions kept.

        ``approvals`` is the message as received (any JSON value).
        """
        entries, problems = read_decisions(approvals)
        now = {a.key.call: a.key for a in self.pending}
        kept: list[tuple[ApprovalKey, Approval]] = []
        for call_id, decision, key in entries:
            if key is None:
                key = now.get(call_id)
                if key is None:
                    problems.append(f"a decision for call {call_id!r} was dropped: the run does not await it now")
                    continue
            kept.append((key, decision))
        for problem in problems:
            workflow.logger.warning("approvals: %s", problem)
        self._entries.extend(kept)
        return tuple(key for key, _ in kept)

    def check(self, approvals: Any, tools: ToolRegistry | None = None) -> None:
        """Refuse (:class:`~loopctl.errors.ApprovalError`, naming what the run awaits) a message of decisions
        the run would not take whole: of the wrong shape, while the run awaits no approval, for a call or
        wait it does not await, or a decision that does not fit (with ``tools``: a ``Modify`` that does not
        fit the tool's schema). For an update handler, before :meth:`put`; reads only.

        ``approvals`` is the message as received (any JSON value); ``tools`` the loop's tools, which a ``Modify``
        must fit.
        """
        entries, problems = read_decisions(approvals)
        if problems:
            raise ApprovalError("; ".join(problems))
        if not self.pending:
            raise ApprovalError("the run awaits no approval now")
        given: dict[str | ApprovalKey, Approval] = {}
        for call_id, decision, key in entries:
            given[call_id if key is None else key] = decision
        bind(given, self.pending, self._wait_tools or tools, workflow.info().workflow_id)

    async def wait(
        self, pending: tuple[AwaitedCall, ...], timeout: timedelta | None = None, tools: ToolRegistry | None = None
    ) -> Mapping[str, Approval] | None:
        """The decisions for some of ``pending`` (the calls of one wait, with their keys), or ``None`` after
        ``timeout`` without any. A decision is taken only if it carries that wait's key for an undecided call
        and fits (with ``tools``: a ``Modify`` fits the tool's schema); the others are dropped and logged, and
        the run waits on. The calls left undecided stay in :attr:`pending`."""
        self.pending = pending
        self._waited = max((a.key.position for a in pending), default=self._waited)
        self._wait_tools = tools
        taken = False
        try:
            while True:
                try:
                    await workflow.wait_condition(lambda: bool(self._entries), timeout=timeout)
                except TimeoutError:
                    return None
                entries, self._entries = self._entries, []
                decisions, dropped = admit(entries, pending, tools or ToolRegistry())
                for reason in dropped:
                    workflow.logger.warning("approvals: %s", reason)
                if decisions:
                    self.pending = tuple(a for a in pending if a.id not in decisions)
                    taken = True
                    return decisions
        finally:
            if not taken:
                self.pending = ()


@dataclasses.dataclass
class LoopWorkflowInput:
    """What starts a :class:`LoopWorkflow`: the ``loop`` (a :class:`TemporalLoop` name), the user's
    ``input`` (text, or a message in its wire form), the ``config`` (``RunConfig`` as JSON, or ``None``) and
    the ``machine`` to continue (``LoopMachine.to_json`` text, or ``None`` for a new conversation); or, with
    ``input`` ``None``, the ``approvals`` that continue a paused ``machine`` (``_payloads.approvals_to_dict``
    form)."""

    loop: str
    input: str | dict[str, Any] | None
    config: dict[str, Any] | None = None
    machine: str | None = None
    approvals: dict[str, Any] | None = None


class _Conversation:
    """What both workflows answer: the update ``decide``, the signals ``cancel`` and ``approve``, the queries
    ``machine`` and ``pending_approvals``."""

    def __init__(self) -> None:
        self._cancel = asyncio.Event()
        self._machine: LoopMachine | None = None
        self._inbox = ApprovalInbox()
        self._tools: ToolRegistry | None = None  # the hosted loop's, once the workflow runs

    @workflow.update(name=DECIDE_UPDATE)
    async def decide(self, approvals: dict[str, Any]) -> list[dict[str, Any]]:
        """Decisions on the calls the run waits on (:data:`DECIDE_UPDATE`); the keys they were bound to."""
        # A worker that replays the history applies an update before the other events of its workflow task,
        # which may be the results that make the run wait: check the decisions once the run has reached (or
        # gone past) the waits they name. A condition is checked once every task of the workflow has gone as
        # far as it can, so a decision without a wait meets the run where it is after this workflow task.
        await workflow.wait_condition(lambda: self._inbox.settled(approvals))
        try:
            self._inbox.check(approvals, self._tools)
        except ApprovalError as exc:  # the update fails (its sender gets the reason); the run waits on
            raise ApplicationError(str(exc), type="ApprovalError", non_retryable=True) from None
        return [key.to_dict() for key in self._inbox.put(approvals)]

    @decide.validator
    def _check_shape(self, approvals: dict[str, Any]) -> None:
        # What the run's state cannot change: refused before anything is recorded.
        _, problems = read_decisions(approvals)
        if problems:
            raise ApprovalError("; ".join(problems))

    @workflow.signal(name=APPROVE_SIGNAL)
    def approve(self, approvals: dict[str, Any]) -> None:
        """Decisions on the calls the run waits on (:data:`APPROVE_SIGNAL`)."""
        self._inbox.put(approvals)

    @workflow.query(name=PENDING_QUERY)
    def pending_approvals(self) -> list[dict[str, Any]]:
        """The calls the run waits on (:data:`PENDING_QUERY`)."""
        return [awaited_to_dict(p) for p in self._inbox.pending]

    @workflow.signal(name="cancel")
    def cancel(self) -> None:
        """End the current run ``CANCELLED`` (with salvage) as soon as possible."""
        self._cancel.set()

    @workflow.query(name="machine")
    def machine(self) -> str | None:
        """The conversation so far, as ``LoopMachine.to_json`` text."""
        return None if self._machine is None else self._machine.to_json()


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class LoopWorkflow(_Conversation):
    """One run of a :class:`TemporalLoop` as a workflow. Returns ``{"run": ..., "machine": ...}``: the
    :class:`~loopctl.engine.Run` as JSON (``_payloads.run_to_dict``) and the machine after the run
    (``LoopMachine.to_json``); :func:`execute` starts one and reads both back.

    The signal ``cancel`` (or cancelling the workflow) ends the run ``CANCELLED`` with salvage; the query
    ``machine`` reads the conversation so far. Not sandboxed: all of its code is loopctl's, which reads no
    clock, draws no random number and does no I/O outside activities (``docs/durable.md``, "Determinism").
    """

    @workflow.run
    async def run(self, params: LoopWorkflowInput) -> dict[str, Any]:
        """Run ``params.input`` on the loop named ``params.loop``."""
        loop = _hosted(params.loop)
        self._tools = loop.tools
        self._machine = LoopMachine.from_json(params.machine) if params.machine else LoopMachine()
        text = params.input
        message = text if isinstance(text, str) or text is None else Message.from_dict(text)
        config = None if params.config is None else config_from_dict(params.config)
        decided = None if params.approvals is None else approvals_from_dict(params.approvals)
        run = await loop.run(
            message, config, machine=self._machine, cancel=self._cancel, approvals=decided, inbox=self._inbox
        )
        return {"run": run_to_dict(run, loop.output_values), "machine": self._machine.to_json()}


SESSION_WORKFLOW_NAME = "loopctl.LoopSession"
"""The workflow type of :class:`LoopSession` (compatibility data)."""


@dataclasses.dataclass
class LoopSessionInput:
    """What starts (or continues as new) a :class:`LoopSession`: the ``loop`` (a :class:`TemporalLoop`
    name), the ``machine`` to continue (``LoopMachine.to_json`` text, or ``None``), and
    ``max_history_events``: past this many history events after a run, the session continues as new (Temporal
    also suggests it itself, well before its limits of 51,200 events and 50 MB)."""

    loop: str
    machine: str | None = None
    max_history_events: int = 10_000


@workflow.defn(name=SESSION_WORKFLOW_NAME, sandboxed=False)
class LoopSession(_Conversation):
    """A conversation as one long-lived workflow: each update ``ask`` (input text or a message in its wire
    form, and an optional ``RunConfig`` as JSON) runs one run on the conversation so far and returns the run
    as JSON (``_payloads.run_to_dict``); runs are taken in the order they were asked. After a run, when the
    history has grown past ``max_history_events`` (or Temporal suggests it), the session continues as new with
    its machine as the only state carried over, so the history stays short however long the conversation.
    The signal ``close`` ends the session once the runs asked for are done; the workflow returns the machine
    (``LoopMachine.to_json``). Signal ``cancel`` and query ``machine`` as in :class:`LoopWorkflow`.

    A run that defers a call waits inside its ``ask`` update, which stays open until the run ends: start an
    ``ask`` that may wait with ``handle.start_update(..., wait_for_stage=WorkflowUpdateStage.ACCEPTED)`` and
    decide with :func:`approve` while it waits (``docs/durable.md``, "Approvals that wait").
    """

    def __init__(self) -> None:
        super().__init__()
        self._queue: list[tuple[str | dict[str, Any], dict[str, Any] | None]] = []
        self._results: dict[int, dict[str, Any]] = {}
        self._asked = 0
        self._done = 0
        self._closed = False

    @workflow.run
    async def run(self, params: LoopSessionInput) -> str:
        """Serve ``ask`` updates until ``close``; returns the machine.

        ``params`` (a :class:`LoopSessionInput`) names the loop and carries the conversation to start from.
        """
        loop = _hosted(params.loop)
        self._tools = loop.tools
        self._machine = LoopMachine.from_json(params.machine) if params.machine else LoopMachine()
        while True:
            await workflow.wait_condition(lambda: bool(self._queue) or self._closed)
            if not self._queue:
                await workflow.wait_condition(workflow.all_handlers_finished)
                return self._machine.to_json()
            text, config = self._queue.pop(0)
            message = text if isinstance(text, str) else Message.from_dict(text)
            self._cancel = asyncio.Event()
            run = await loop.run(
                message,
                None if config is None else config_from_dict(config),
                machine=self._machine,
                cancel=self._cancel,
                inbox=self._inbox,
            )
            self._done += 1
            self._results[self._done] = run_to_dict(run, loop.output_values)
            info = workflow.info()
            if not self._queue and (
                info.is_continue_as_new_suggested() or info.get_current_history_length() > params.max_history_events
            ):
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self._queue:
                    workflow.continue_as_new(dataclasses.replace(params, machine=self._machine.to_json()))

    @workflow.update(name="ask")
    async def ask(self, input: str | dict[str, Any], config: dict[str, Any] | None = None) -> dict[str, Any]:  # noqa: A002
        """Run ``input`` after the runs asked before it; the run as JSON.

        ``config`` is a :class:`~loopctl.engine.RunConfig` as JSON (``RunConfig.to_dict``), or none.
        """
        if self._closed:
            raise ApplicationError("the session is closed", non_retryable=True)
        self._asked += 1
        number = self._asked  # runs are numbered from 1 in each workflow run; none is pending at continue-as-new
        self._queue.append((input, config))
        await workflow.wait_condition(lambda: number in self._results)
        return self._results.pop(number)

    @workflow.signal(name="close")
    def close(self) -> None:
        """End the session once the runs asked for are done."""
        self._closed = True


def _hosted(name: str) -> TemporalLoop[Any]:
    loop = _LOOPS.get(name)
    if loop is None:
        hosted = ", ".join(sorted(_LOOPS)) or "none"
        raise ApplicationError(
            f"this worker hosts no TemporalLoop named {name!r} (it has: {hosted})", non_retryable=True
        )
    return loop


async def execute(
    client: Client,
    loop: str,
    input: str | Message,  # noqa: A002 - BareLoop's name
    *,
    id: str,  # noqa: A002 - Temporal's name
    task_queue: str,
    config: RunConfig | None = None,
    machine: LoopMachine | None = None,
    output_type: Any = None,
    approvals: Mapping[str, Approval] | None = None,
) -> tuple[Run[Any], LoopMachine]:
    """Run ``input`` on the loop named ``loop`` as :class:`LoopWorkflow` ``id`` on ``task_queue``, wait for
    it, and return its :class:`~loopctl.engine.Run` and the machine after the run (to continue the
    conversation: pass it as ``machine`` next time). A typed output comes back as JSON and is validated
    again with ``output_type`` (the loop's when this process hosts a :class:`TemporalLoop` of that name);
    without either, ``run.output`` is the JSON value. With ``approvals`` (and ``input`` ``None``), the
    workflow continues the paused ``machine`` of a run that ended ``AWAITING_APPROVAL``.

    The call waits while the run waits for approvals: send them with :func:`approve` from elsewhere.

    ``client`` is a connected ``temporalio.client.Client``; ``config`` the run's :class:`~loopctl.engine.RunConfig`.
    """
    params = LoopWorkflowInput(
        loop=loop,
        input=input if isinstance(input, str) or input is None else input.to_dict(),
        config=None if config is None else config_to_dict(config),
        machine=None if machine is None else machine.to_json(),
        approvals=None if approvals is None else approvals_to_dict(approvals),
    )
    out = await client.execute_workflow(WORKFLOW_NAME, params, id=id, task_queue=task_queue, result_type=dict)
    hosted = _LOOPS.get(loop)
    if output_type is not None:
        values = OutputValues(output_type)
    elif hosted is not None:
        values = hosted.output_values
    else:
        values = OutputValues(None)
    return run_from_dict(out["run"], values), LoopMachine.from_json(out["machine"])


async def approve(
    client: Client,
    workflow_id: str,
    approvals: Mapping[str, Approval] | Mapping[ApprovalKey, Approval] | Mapping[str | ApprovalKey, Approval],
    *,
    idempotency_key: str | None = None,
) -> tuple[ApprovalKey, ...]:
    """Send decisions to the run of :class:`LoopWorkflow` or :class:`LoopSession` ``workflow_id`` waiting for
    approvals (the update :data:`DECIDE_UPDATE`): ``{call_id: Approve() | Deny(reason) | Modify(input)}``, or
    the same keyed by the :class:`~loopctl.durable.approvals.ApprovalKey` s :func:`pending_approvals` listed.
    The run then runs the approved calls once, gives the denied ones their reason as an error result, and goes
    on; calls left out stay pending. Returns the keys the decisions were bound to.

    Each decision is bound to one wait (``docs/durable.md``, "Approval binding"): a call id to the wait the run
    is in when ``approve`` is called (read with :func:`pending_approvals`), a key to the wait it names. The
    run's worker checks them against that wait, so a decision the run would not take is refused here: a
    worker must be running (the call waits for one). ``idempotency_key`` is the update's id: a repeat with the
    same id while the run lasts is answered once.

    Raises :class:`~loopctl.errors.ApprovalError` when there is no such run or it has ended (a run that ended
    ``awaiting_approval`` is continued with ``execute(..., approvals=...)``), when it awaits no approval now,
    for a call id or key it does not await, and for a decision that does not fit: of the wrong type, a
    ``Deny`` reason that is not a string, a ``Modify`` input that is not JSON or does not fit the tool's
    schema.

    ``client`` is a connected ``temporalio.client.Client``.
    """
    if not approvals:
        raise ApprovalError("approvals is empty")
    handle = client.get_workflow_handle(workflow_id)
    try:
        if all(isinstance(given, ApprovalKey) for given in approvals):
            bound: dict[ApprovalKey, Approval] = dict(approvals)  # type: ignore[arg-type]
        else:
            awaited = await pending_approvals(client, workflow_id)
            if not awaited:
                status = (await handle.describe()).status
                if status is not None and status is not WorkflowExecutionStatus.RUNNING:
                    raise ApprovalError(
                        f"the run {workflow_id!r} has ended ({status.name.lower()}): it awaits no approval (a run "
                        "that ended awaiting_approval is continued with execute(..., approvals=...))"
                    )
            bound = bind(approvals, awaited, None, workflow_id)  # the tool's schema is checked on the worker
        for key, decision in bound.items():
            problem = input_problem(decision.input) if isinstance(decision, Modify) else None
            if problem is not None:
                raise ApprovalError(f"the input of Modify for call {key.call!r} is refused: {problem}")
        keys = await handle.execute_update(DECIDE_UPDATE, bound_to_dict(bound), id=idempotency_key, result_type=list)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        reason = cause.message if isinstance(cause, FailureError) else str(cause)
        raise ApprovalError(f"the run {workflow_id!r} refused the decisions: {reason}") from exc
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise ApprovalError(
                f"the run {workflow_id!r} has ended, or there is no such run ({exc.message}): it awaits no approval "
                "(a run that ended awaiting_approval is continued with execute(..., approvals=...))"
            ) from exc
        raise
    return tuple(ApprovalKey.from_dict(k) for k in keys)


async def pending_approvals(client: Client, workflow_id: str) -> tuple[AwaitedCall, ...]:
    """The calls the run ``workflow_id`` waits on, each with the key of its wait (the query
    :data:`PENDING_QUERY`; a worker must be running); empty when it waits for none.

    ``client`` is a connected ``temporalio.client.Client``.
    """
    out = await client.get_workflow_handle(workflow_id).query(PENDING_QUERY, result_type=list)
    return tuple(awaited_from_dict(p) for p in out)


def _approval(data: Any, call_id: str) -> Approve | Modify | None:
    """The later approval of a call sent with a tool activity's input (a denial never reaches one)."""
    if data is None:
        return None
    decision = approvals_from_dict({call_id: data})[call_id]
    if not isinstance(decision, (Approve, Modify)):
        raise ApplicationError(f"a tool activity got the decision {decision!r}", non_retryable=True)
    return decision


async def _heartbeating(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` in an activity, heartbeating at a third of its heartbeat timeout so a dead worker is
    noticed soon; a cancellation of the activity (seen at a heartbeat) cancels ``coro``."""
    info = activity.info()
    timeout = info.heartbeat_timeout
    if timeout is None:
        return await coro
    interval = max(timeout.total_seconds() / 3, 0.05)

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval)

    beater = asyncio.ensure_future(beat())
    try:
        return await coro
    finally:
        beater.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beater
