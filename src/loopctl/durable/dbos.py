"""Durable runs on DBOS: each run is a DBOS workflow, each model call and each tool call a DBOS step.

**Assume any unit may run twice.** DBOS records a step's output once the step returns; a step that was
running when the process died (a tool halfway through, a model call in flight) runs again, from its start,
when the workflow is recovered. A step that completed never runs again: its recorded output is used. Tools
with side effects should therefore be idempotent or tolerate a repeat of an interrupted call; a completed
call is never repeated.

The mapping (``docs/durable.md`` has the whole of it):

- ``DBOSLoop(client, tools, config, name="support")`` registers the workflow ``support.run`` and runs each
  step under a stable name: ``support.start``, ``support.instructions`` (callable instructions, evaluated
  once per run), ``support.model`` (one model call, with the run's retry policy inside it, and the check of
  the reply as typed output), ``support.tool.<tool name>`` (one tool call, the permission check included),
  ``support.summarize`` (a summarizing compaction's model call). The names are compatibility data: DBOS
  checks them on recovery, so renaming a loop or a tool strands its pending runs.
- What a plain run takes per run and a durable run must find again in the process that recovers it is the
  loop's: ``output_type`` and ``output_validator`` (the validated value is recorded as JSON and validated
  again when read back; the workflow's result, the ``Run``, is pickled by DBOS with that value) and ``deps``
  (kept in the process, never recorded).
- The :class:`~loopctl.engine.LoopMachine` is the workflow's own state. Workflow code is the same driver as
  :class:`~loopctl.engine.BareLoop`'s, so a durable run decides exactly what a plain run decides; the
  machine, the prune and truncation passes and the token counter are pure, so a recovered workflow takes the
  same steps again with the recorded outputs.
- Steps are numbered by DBOS in the order they start. A turn's tool calls reserve their step numbers in call
  order before any of them starts, so parallel calls replay against the right records however they
  finished.
- Observers see each event once: events of a step are emitted while it runs, never when its recorded output
  is replayed during recovery. :meth:`DBOSLoop.stream` streams a run's events in the process that starts
  it.
- The system database is DBOS's choice: SQLite by default (``sqlite:///<name>.sqlite``, embedded), or a
  PostgreSQL URL for several workers sharing one database (:func:`recover` hands a dead worker's runs to a
  live one).

Build the loop after ``DBOS(config=...)`` and before ``DBOS.launch()``: DBOS must know every workflow before
it recovers pending ones at launch.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import pickle
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar, overload

try:
    from dbos import DBOS, SetWorkflowID
except ImportError as exc:  # the extra is not installed
    raise ImportError(f"loopctl.durable.dbos needs DBOS: pip install 'pyloopctl[dbos]' ({exc})") from exc

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
    approvals_from_dict,
    approvals_to_dict,
    check_to_dict,
    dumps,
    error_to_dict,
    loads,
    loop_error_from_dict,
    pending_from_dict,
    pending_to_dict,
    record_from_dict,
    record_to_dict,
    reply_to_dict,
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
from loopctl.engine.loop import BareLoop, _Cancelled, _race
from loopctl.engine.machine import CallTools, LoopMachine
from loopctl.engine.permission import Approval, Approve, Modify, PendingApproval, PermissionCallback
from loopctl.engine.run import ModelReply, OutputT, Run, ToolCallRecord
from loopctl.engine.streaming import RunStream
from loopctl.errors import ApprovalError, HookFailed, LoopError
from loopctl.message import Message, ToolCallPart
from loopctl.output import OutputPlan, OutputSpec, OutputValidator
from loopctl.output import resolve as resolve_output
from loopctl.providers.base import ModelClient, ModelRequest
from loopctl.response import Usage
from loopctl.tool import Tool, ToolInputError, ToolProvider, ToolRegistry

__all__ = [
    "APPROVALS_TOPIC",
    "CANCEL_POLL_INTERVAL",
    "MACHINE_EVENT",
    "PENDING_EVENT",
    "DBOSLoop",
    "StepNames",
    "cancel_marker_id",
    "recover",
]

CANCEL_POLL_INTERVAL = 1.0
"""Seconds between two looks for a cancel request while a model or tool step runs (each is one read of the
system database; a step that finishes sooner costs none, and each model call looks once before it starts)."""

MACHINE_EVENT = "loopctl.machine"
"""The DBOS event a finished run sets to its machine (``LoopMachine.to_json`` text): the conversation after
the run, for whoever continues it."""

PENDING_EVENT = "loopctl.pending"
"""The DBOS event a run sets while it waits for approvals: a JSON array of the calls it awaits, each with its
wait (``[{"call": <tool call>, "reason": ..., "run": <workflow id>, "turn": ...}]``,
``approvals.awaited_to_dict``); once some are decided, the turn's calls still undecided; ``[]`` once all are
(:meth:`DBOSLoop.pending`)."""

APPROVALS_TOPIC = "loopctl.approvals"
"""The DBOS message topic a paused run receives its decisions on (:meth:`DBOSLoop.approve`): JSON text
``{"approvals": {call_id: {"decision": ..., "run": <workflow id>, "turn": ...}}}`` (each decision bound to
its wait: ``approvals.bound_to_dict``; one that answers no wait of the run is dropped and logged), or
``{"cancel": true}`` (:meth:`DBOSLoop.cancel` wakes a waiting run with it)."""

_LIVE_STATUSES = frozenset({"PENDING", "ENQUEUED"})  # a workflow that has not ended

_log = logging.getLogger(__name__)

_WAIT_CHUNK = 24 * 3600.0  # seconds of one DBOS.recv while a run waits for approvals without a timeout

_T = TypeVar("_T")

# Set while a step's body runs in this execution (not replayed): events emitted there reach observers.
_LIVE_STEP: contextvars.ContextVar[bool] = contextvars.ContextVar("loopctl_dbos_live_step", default=False)


class StepNames(EffectNames):
    """The stable names of a loop's DBOS workflow and steps (compatibility data: ``docs/durable.md``).

    ``workflow``: ``<name>.run``; ``start``: ``<name>.start``; ``instructions``: ``<name>.instructions``;
    ``model``: ``<name>.model``; ``summarize``: ``<name>.summarize``; :meth:`tool`:
    ``<name>.tool.<tool name>``; ``cancel``: ``<name>.cancel`` (the workflow a cancel request is).
    """

    __slots__ = ("cancel", "start", "workflow")

    def __init__(self, name: str, *, check: bool = True) -> None:
        super().__init__(name, check=check)
        self.workflow = f"{name}.run"
        self.start = f"{name}.start"
        self.cancel = f"{name}.cancel"


class DBOSLoop(DurableLoop[OutputT]):
    """A loop whose runs are DBOS workflows (see the module docstring for the mapping and its rules).

    ``client``, ``tools``, ``config``, ``observers`` and ``permission`` are those of
    :class:`~loopctl.engine.BareLoop`. ``name`` prefixes the workflow and step names; it must be the same in
    every process that may recover the loop's runs. ``output_type`` and ``output_validator`` make every
    run's output a validated value (:mod:`loopctl.output`; ``run(..., output_type=T)`` of a plain loop);
    ``deps`` is handed to tools and instructions (``ToolContext.deps``, ``RunContext.deps``) in this
    process and never recorded: every process that may recover a run builds its own. ``hooks`` are
    ``BareLoop``'s: the model hooks run inside the model step, the tool hooks inside the tool step, so a
    recovered run never runs a completed step's hooks again.

    A call deferred for approval (a permission callback's ``Defer()``, a tool marked ``requires_approval``)
    makes the run *wait* inside its workflow: the event :data:`PENDING_EVENT` lists the calls
    (:meth:`pending`), and :meth:`approve`, from any process on the same system database, sends the
    decisions, each bound to the wait it answers (:class:`~loopctl.durable.approvals.ApprovalKey`); a crash
    while it waits loses nothing. ``approval_timeout`` (seconds, default ``None``: wait
    for ever) ends a run that waited that long without a decision with outcome ``AWAITING_APPROVAL``, as a
    plain run pauses; ``run(approvals=...)`` continues it as a new workflow. The conversation lives
    in :attr:`machine`; successive :meth:`run` calls continue it, as with ``BareLoop``. Build it after
    ``DBOS(config=...)`` and before ``DBOS.launch()``.

    Raises ``TypeError`` for an output type pydantic cannot describe or pickle cannot store by reference
    (DBOS pickles the workflow's result, the ``Run`` and its output: define the type at module level), and
    ``ValueError`` for an output tool named like one of the tools.
    """

    @overload
    def __init__(
        self: DBOSLoop[str],
        client: ModelClient,
        tools: ToolRegistry | Iterable[Tool | ToolProvider] = (),
        config: SessionConfig | None = None,
        *,
        name: str,
        observers: Sequence[Observer] = (),
        permission: PermissionCallback | None = None,
        machine: LoopMachine | None = None,
        output_type: None = None,
        output_validator: OutputValidator[str] | None = None,
        deps: Any = None,
        hooks: Sequence[object] = (),
        approval_timeout: float | None = None,
    ) -> None: ...
    @overload
    def __init__(
        self: DBOSLoop[_T],
        client: ModelClient,
        tools: ToolRegistry | Iterable[Tool | ToolProvider] = (),
        config: SessionConfig | None = None,
        *,
        name: str,
        observers: Sequence[Observer] = (),
        permission: PermissionCallback | None = None,
        machine: LoopMachine | None = None,
        output_type: OutputSpec[_T],
        output_validator: OutputValidator[_T] | None = None,
        deps: Any = None,
        hooks: Sequence[object] = (),
        approval_timeout: float | None = None,
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
        machine: LoopMachine | None = None,
        output_type: Any = None,
        output_validator: OutputValidator[Any] | None = None,
        deps: Any = None,
        hooks: Sequence[object] = (),
        approval_timeout: float | None = None,
    ) -> None:
        super().__init__(client, tools, config, observers, permission, output_type, output_validator, deps, hooks)
        _check_picklable(output_type)
        if approval_timeout is not None and not approval_timeout > 0:
            raise ValueError(f"approval_timeout must be a number of seconds > 0 or None, got {approval_timeout!r}")
        self.approval_timeout = approval_timeout
        self.names = StepNames(name)
        self.name = name
        self._machine = machine or LoopMachine()
        self._streams: dict[str, Observer] = {}  # workflow id -> the observer of a stream() started here
        self._running = False
        self.sub_agents: dict[str, DBOSLoop[Any]] = {t.name: self._sub_agent(t) for t in sub_agent_tools(self.tools)}
        self._workflow = DBOS.workflow(name=self.names.workflow)(self._make_workflow())
        self._cancel_workflow = DBOS.workflow(name=self.names.cancel)(_cancel_request)

    @classmethod
    def from_agent(
        cls,
        agent: Agent[Any, _T],
        *,
        name: str | None = None,
        deps: Any = None,
        approval_timeout: float | None = None,
    ) -> DBOSLoop[_T]:
        """A durable loop running ``agent``: its model, tools, instructions, output type and validator, hooks,
        observers, permission callback and run settings (``run_config``, ``limits``: the defaults of
        :meth:`run`'s ``config``). Each sub-agent among its tools runs inside the loop's runs, its model and
        tool calls steps of the same workflow (``<name>.<tool name>.model``...), so a call of its tools that
        needs approval makes the whole run wait (``docs/durable.md``, "Sub-agents").

        ``name`` prefixes the workflow and step names (default: the agent's name); ``deps`` are handed to the
        tools and instructions in this process (a sub-agent's mapped by its :class:`~loopctl.agent.AgentTool`);
        ``approval_timeout`` is as for the constructor. Raises ``ValueError`` for an agent with handoffs (not
        supported on a durable loop) and for a name that cannot prefix step names."""
        if agent.handoffs:
            raise ValueError(f"agent {agent.name!r} has handoffs, which a durable loop does not run")
        client: Any = agent.model if isinstance(agent.model, ModelClient) else None
        loop: DBOSLoop[Any] = cls.__new__(cls)
        DBOSLoop.__init__(
            loop,
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
        )
        loop._agent = agent
        return loop

    def _sub_agent(self, tool: AgentTool[Any]) -> DBOSLoop[Any]:
        """The settings of ``tool``'s sub-agent run inside this loop's runs: its agent's model, tools,
        instructions, output type, hooks and permission, the steps named ``<name>.<tool name>.*``. Registers
        no workflow."""
        sub: DBOSLoop[Any] = self._sub_loop(tool)
        sub.approval_timeout = self.approval_timeout
        sub.names = StepNames(f"{self.name}.{tool.name}", check=False)
        sub.name = sub.names.name
        sub.sub_agents = {t.name: sub._sub_agent(t) for t in sub_agent_tools(sub.tools)}
        return sub

    # --- sessions ------------------------------------------------------------------------------------------

    @property
    def machine(self) -> LoopMachine:
        """The machine holding the conversation (as of the last finished :meth:`run`)."""
        return self._machine

    @property
    def history(self) -> Sequence[Message]:
        """The committed conversation."""
        return self._machine.history

    # --- running -------------------------------------------------------------------------------------------

    async def run(
        self,
        input: str | Message | None = None,  # noqa: A002 - BareLoop's name
        config: RunConfig | None = None,
        *,
        workflow_id: str | None = None,
        approvals: Mapping[str, Approval] | None = None,
    ) -> Run[OutputT]:
        """Run the loop on ``input`` as one DBOS workflow (id ``workflow_id``, or one DBOS makes up) and
        return its :class:`~loopctl.engine.Run`; the loop's :attr:`machine` then holds the conversation after
        the run. Starting a ``workflow_id`` that already ended returns its recorded run and leaves
        :attr:`machine` as it is (a retried request must not rewind the conversation to that run's end); one
        that is still running (recovered here or elsewhere) is waited for, and its machine kept. Errors end the run
        (``run.outcome``) as with ``BareLoop``, and what ``BareLoop.run`` raises (an input image the provider
        cannot read, instructions that return no str, approvals that do not fit) is raised here. A cancelled
        run (:meth:`cancel`) ends ``CANCELLED`` with the coherent prefix of its conversation kept. One run at
        a time per loop: a second concurrent call raises ``RuntimeError``.

        A run that defers a call waits for :meth:`approve` (this call returns when the run ends). With
        ``approvals`` instead of ``input``, the workflow continues a run that ended ``AWAITING_APPROVAL`` (it
        waited past ``approval_timeout``), as ``BareLoop.run(approvals=...)`` does; raises
        :class:`~loopctl.errors.ApprovalError` when they do not fit the loop's machine.

        ``config`` is the run's :class:`~loopctl.engine.RunConfig` (recorded with the workflow).
        """
        if approvals is not None:  # BareLoop's checks, before a workflow starts
            BareLoop(self.client, self.tools, machine=self._machine)._check_start(input, approvals)
        elif input is None:
            raise ApprovalError("run() needs an input (or approvals=, to continue a paused run)")
        return await self._start(input, config, workflow_id, approvals=approvals)

    def stream(
        self,
        input: str | Message,  # noqa: A002 - BareLoop's name
        config: RunConfig | None = None,
        *,
        workflow_id: str | None = None,
    ) -> RunStream[OutputT]:
        """:meth:`run` as a stream of its events (:class:`~loopctl.engine.RunStream`, as
        ``BareLoop.stream``)::

            async with loop.stream("task", workflow_id="ticket-7") as stream:
                async for event in stream:
                    ...
            run = await stream.result()

        The events are those of the steps that run in this process: a workflow id that already finished
        streams nothing but gives its recorded run, and a run recovered elsewhere streams there to the loop's
        observers only. Leaving the block before the run finished cancels the run (:meth:`cancel`).

        ``config`` is the run's :class:`~loopctl.engine.RunConfig`.
        """
        wid = workflow_id or str(uuid.uuid4())

        async def start(observer: Observer, cancel: asyncio.Event) -> Run[OutputT]:
            async def cancel_when_set() -> None:
                await cancel.wait()
                await self.cancel(wid)

            watcher = asyncio.ensure_future(cancel_when_set())
            try:
                return await self._start(input, config, wid, observer=observer)
            finally:
                watcher.cancel()

        return RunStream(start)

    async def _start(
        self,
        input: str | Message | None,  # noqa: A002
        config: RunConfig | None,
        workflow_id: str | None,
        *,
        observer: Observer | None = None,
        approvals: Mapping[str, Approval] | None = None,
    ) -> Run[OutputT]:
        if self._running:
            raise RuntimeError("this loop is already running; build another DBOSLoop for concurrent conversations")
        self._running = True
        wid = workflow_id or str(uuid.uuid4())
        if observer is not None:
            self._streams[wid] = observer
        try:
            status = await DBOS.get_workflow_status_async(wid)
            if status is not None and status.status not in _LIVE_STATUSES:
                # A run that ended before this call: its recorded run. The loop's conversation stays as it is
                # (it may have gone on since that run: the run's machine would rewind it).
                recorded: Run[OutputT] = await (await DBOS.retrieve_workflow_async(wid)).get_result()
                return recorded
            doc = input if isinstance(input, str) or input is None else input.to_dict()
            decided = None if approvals is None else approvals_to_dict(approvals)
            if self._agent is not None:  # the agent's run settings, recorded with the workflow
                config = self.run_config(config)
            with SetWorkflowID(wid):
                handle = await DBOS.start_workflow_async(self._workflow, self._machine.to_json(), doc, config, decided)
            run: Run[OutputT] = await handle.get_result()
            machine = await DBOS.get_event_async(wid, MACHINE_EVENT, timeout_seconds=5)
            if isinstance(machine, str):
                self._machine = LoopMachine.from_json(machine)
            return run
        finally:
            self._streams.pop(wid, None)
            self._running = False

    async def cancel(self, workflow_id: str) -> None:
        """Ask the run ``workflow_id`` to stop, from any process sharing the system database. The run ends
        ``CANCELLED`` as a cancelled ``BareLoop`` run does, keeping the coherent prefix of its conversation:
        at once if a model call or a tool call is running (it is stopped within
        :data:`CANCEL_POLL_INTERVAL` seconds), else before its next model call. The request is itself a tiny
        workflow (id :func:`cancel_marker_id`), so it is durable and asking twice is harmless."""
        with SetWorkflowID(cancel_marker_id(workflow_id)):
            handle = await DBOS.start_workflow_async(self._cancel_workflow)
        await handle.get_result()
        # a run waiting for approvals reads no marker: wake it
        await DBOS.send_async(
            workflow_id, dumps({"cancel": True}), APPROVALS_TOPIC, idempotency_key=cancel_marker_id(workflow_id)
        )

    async def approve(
        self,
        workflow_id: str,
        approvals: Mapping[str, Approval] | Mapping[ApprovalKey, Approval] | Mapping[str | ApprovalKey, Approval],
        *,
        idempotency_key: str | None = None,
    ) -> tuple[ApprovalKey, ...]:
        """Send decisions to the run ``workflow_id`` waiting for approvals, from any process sharing the system
        database (``DBOS.launch()`` done): ``{call_id: Approve() | Deny(reason) | Modify(input)}``, or the same
        keyed by the :class:`~loopctl.durable.approvals.ApprovalKey` s that :meth:`pending` listed
        (``{p.key: Approve() for p in await loop.pending(wid)}``). The run then runs the approved calls (once,
        without asking the permission callback again), gives the denied ones their reason as an error result,
        and goes on; calls left out stay pending (it waits again). Returns the keys the decisions were bound
        to.

        Each decision is bound to one wait (``docs/durable.md``, "Approval binding"): a call id to the wait the
        run is in now, a key to the wait it names; the run takes it only in that wait and drops it otherwise
        (a repeated send is never taken by a later wait whose call has the same id). The message is durable:
        sent while no worker runs the waiting run, it is read when the run is recovered.
        ``idempotency_key`` makes a repeated send a no-op (DBOS's own key).

        Raises :class:`~loopctl.errors.ApprovalError`, and sends nothing, when ``workflow_id`` is no run of
        this loop or has ended (a run that ended ``awaiting_approval`` is continued with
        ``run(approvals=...)``), when it waits for no approval now, for a call id or key it does not await,
        and for a decision that does not fit: of the wrong type, a ``Deny`` reason that is not a string, a
        ``Modify`` input that is not JSON or does not fit the tool's schema."""
        status = await DBOS.get_workflow_status_async(workflow_id)
        if status is None or status.name != self.names.workflow:
            raise ApprovalError(f"there is no run {workflow_id!r} of the loop {self.name!r}")
        if status.status not in _LIVE_STATUSES:
            raise ApprovalError(
                f"the run {workflow_id!r} has ended (DBOS status {status.status}): it awaits no approval (a run "
                "that ended awaiting_approval is continued with run(approvals=...))"
            )
        awaited = await self._awaited(workflow_id)
        # The calls of one wait are one agent's: a sub-agent's are checked against its own tools.
        tools = self._tools_of(awaited[0].agent) if awaited and awaited[0].key.path else self.tools
        bound = bind(approvals, awaited, tools, workflow_id)
        message = dumps({"approvals": bound_to_dict(bound)})
        await DBOS.send_async(workflow_id, message, APPROVALS_TOPIC, idempotency_key=idempotency_key)
        return tuple(bound)

    def _tools_of(self, agent_path: str) -> ToolRegistry | None:
        """The tools of the sub-agent at ``agent_path`` (``"boss > researcher"``), or ``None`` when no
        sub-agent of this loop has that path (the workflow still checks a decision against them)."""
        loop: DBOSLoop[Any] | None = self
        for name in agent_path.split(" > ")[1:]:
            assert loop is not None
            loop = next((s for s in loop.sub_agents.values() if s._agent is not None and s._agent.name == name), None)
            if loop is None:
                return None
        return None if loop is None else loop.tools

    async def pending(self, workflow_id: str, *, timeout: float = 0.0) -> tuple[AwaitedCall, ...]:
        """The calls the run ``workflow_id`` waits on, each with the key of its wait (empty when it waits for
        none, or has ended), from the event :data:`PENDING_EVENT`; ``timeout`` seconds to wait for the event
        to exist at all."""
        awaited = await self._awaited(workflow_id, timeout)
        if awaited:
            status = await DBOS.get_workflow_status_async(workflow_id)
            if status is None or status.status not in _LIVE_STATUSES:
                return ()
        return awaited

    async def _awaited(self, workflow_id: str, timeout: float = 0.0) -> tuple[AwaitedCall, ...]:
        text = await DBOS.get_event_async(workflow_id, PENDING_EVENT, timeout_seconds=timeout)
        if not isinstance(text, str):
            return ()
        return tuple(awaited_from_dict(p) for p in loads(text))

    # --- the workflow --------------------------------------------------------------------------------------

    def _make_workflow(self) -> Any:
        loop = self

        async def run_workflow(
            machine: str,
            input: str | dict[str, Any] | None,  # noqa: A002
            config: RunConfig | None,
            approvals: dict[str, Any] | None = None,
        ) -> Run[Any]:
            return await loop._execute(machine, input, config, approvals)

        run_workflow.__name__ = run_workflow.__qualname__ = f"run_{self.name.replace('-', '_')}"
        return run_workflow

    async def _execute(
        self,
        machine: str,
        input: str | dict[str, Any] | None,  # noqa: A002
        config: RunConfig | None,
        approvals: dict[str, Any] | None,
    ) -> Run[Any]:
        """The workflow body: a fresh driver over the recorded machine, run to the end."""
        fresh = False

        async def start() -> None:
            nonlocal fresh
            fresh = True

        await DBOS.run_step_async({"name": self.names.start}, start)
        driver = _Driver(self, LoopMachine.from_json(machine), live=fresh)
        message = input if isinstance(input, str) or input is None else Message.from_dict(input)
        decided = None if approvals is None else approvals_from_dict(approvals)
        stream = self._streams.get(DBOS.workflow_id or "")
        driver._run_observers = (LiveObserver(stream, driver.is_live),) if stream is not None else ()
        try:
            run = await driver._run(
                message, decided, config or RunConfig(), None, self.output_type, self.output_validator, self.deps
            )
        finally:
            driver._run_observers = ()
        await DBOS.set_event_async(MACHINE_EVENT, driver.machine.to_json())
        return run


class _Driver(RecordedVerdicts):
    """BareLoop's driver with each effect a DBOS step; one per workflow execution."""

    def __init__(
        self,
        owner: DBOSLoop[Any],
        machine: LoopMachine,
        *,
        live: bool,
        parent: _Driver | None = None,
        path: tuple[tuple[int, str], ...] = (),
        agents: tuple[str, ...] = (),
    ) -> None:
        self._root: _Driver = self if parent is None else parent._root
        super().__init__(
            owner.client,
            owner.tools,
            with_own_budget(owner.config),
            observers=[LiveObserver(o, self.is_live) for o in owner.observers],
            permission=owner.permission,
            machine=machine,
            hooks=owner.hooks,
        )
        self._owner = owner
        self._names = owner.names
        self._live = live  # False while the steps so far were replayed from their records (the root's counts)
        self._path = path  # a sub-agent's: the calls that run it, each (turn, call id), outermost first
        self._agents = agents  # a sub-agent's: the agent path ("support", "researcher")
        self._sub_lock = asyncio.Lock()  # sub-agents run one at a time: their steps are numbered as they start
        self._reserved: dict[str, Any] = {}
        self._setup_plan: OutputPlan | None = None  # the run's typed output, for the model steps
        self._setup_validator: OutputValidator[Any] | None = None
        self._cancel_id = cancel_marker_id(DBOS.workflow_id or "")
        self._elapsed = 0.0  # the run's clock: the recorded durations of its steps so far

    def is_live(self) -> bool:
        """Whether an event emitted now happens in this execution (not a replay of a record)."""
        return self._root._live or _LIVE_STEP.get()

    def _clock(self) -> float:
        # Inside a step's body: real time (the step records what it measured). In workflow code: the sum of
        # the recorded durations, so a run replayed from its records reads the same durations.
        return time.perf_counter() if _LIVE_STEP.get() else self._elapsed

    async def _step(self, name: str, body: Callable[[], Awaitable[str]], reservation: Any = None) -> Any:
        """Run ``body`` (a coroutine function returning JSON text) as the step ``name``; its decoded output.
        Once a step's body runs here, the rest of the run is live."""

        async def step() -> str:
            self._root._live = True
            token = _LIVE_STEP.set(True)
            try:
                out: str = await body()
                return out
            finally:
                _LIVE_STEP.reset(token)

        if reservation is not None:
            text = await reservation.run_async({"name": name}, step)
        else:
            text = await DBOS.run_step_async({"name": name}, step)
        return loads(text)

    async def _cancel_requested(self) -> bool:
        return await DBOS.get_workflow_status_async(self._cancel_id) is not None

    async def _watch_cancel(self, event: asyncio.Event) -> None:
        while not await self._cancel_requested():
            await asyncio.sleep(CANCEL_POLL_INTERVAL)
        event.set()

    async def _cancellable(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """``coro``'s result, or :class:`_Cancelled` once a cancel request is seen (checked every
        :data:`CANCEL_POLL_INTERVAL` seconds while it runs)."""
        event = asyncio.Event()
        watcher = asyncio.ensure_future(self._watch_cancel(event))
        try:
            return await _race(coro, event)
        finally:
            watcher.cancel()

    async def _prepare(
        self, output_type: Any, output_validator: OutputValidator[Any] | None, cfg: RunConfig, deps: Any
    ) -> Any:
        setup = await super()._prepare(output_type, output_validator, cfg, deps)
        self._setup_plan, self._setup_validator = setup.plan, setup.validator
        return setup

    async def _instructions(self, deps: Any) -> str | None:
        if not callable(self.config.instructions):
            return self.config.instructions

        async def instructions_step() -> str:
            return dumps({"text": await BareLoop._instructions(self, deps)})

        text = (await self._step(self._names.instructions, instructions_step))["text"]
        return None if text is None else str(text)

    async def _call_model(
        self,
        turn: int,
        request: ModelRequest,
        cfg: RunConfig,
        cancel: asyncio.Event | None,
        emit: Any,
    ) -> ModelReply:
        # The step runs BareLoop's model call whole: the before_model/after_model hooks, the retries, a
        # FallbackClient's chain and the pricing; it records the reply, which client answered and its cost.
        plan: OutputPlan | None = self._setup_plan
        validator = self._setup_validator

        async def model_step() -> str:
            if await self._cancel_requested():
                return dumps({"cancelled": True})
            t0 = time.perf_counter()
            try:
                reply = await self._cancellable(BareLoop._call_model(self, turn, request, cfg, None, emit))
            except _Cancelled:
                return dumps({"cancelled": True})
            except LoopError as exc:  # recorded as the step's output, so a replay fails the run the same way
                return dumps({"error": error_to_dict(exc)})
            out: dict[str, Any] = {**reply_to_dict(reply), "duration": time.perf_counter() - t0}
            if plan is not None:  # the output validator runs here, once: its verdict is recorded
                try:
                    verdict = await BareLoop._check_reply(self, plan, reply.response, validator)
                except Exception as exc:
                    out["output_error"] = error_to_dict(exc)
                else:
                    out["output"] = check_to_dict(*verdict, self._owner.output_values)
            return dumps(out)

        out = await self._step(self._names.model, model_step)
        if "cancelled" in out:
            raise _Cancelled
        if "error" in out:
            raise loop_error_from_dict(out["error"])
        self._elapsed += float(out.get("duration", 0.0))
        return self._reply_from(out, self._owner.output_values)

    async def _run_tools(
        self,
        step: CallTools,
        cfg: RunConfig,
        cancel: asyncio.Event | None,
        emit: Any,
        deps: Any = None,
        usage: Usage | None = None,
    ) -> list[ToolCallRecord | PendingApproval]:
        # Step numbers in call order, before any call starts: DBOS numbers steps as they start, and parallel
        # calls would otherwise start in whatever order the concurrency limit lets them.
        self._reserved = {call.id: DBOS.reserve_step() for call in step.calls}
        done = await super()._run_tools(step, cfg, None, emit, deps, usage)
        self._elapsed += max((r.duration for r in done if isinstance(r, ToolCallRecord)), default=0.0)
        return done

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
        # The step runs BareLoop's call whole: the before_tool hooks, the permission check (or a later
        # approval), the tool and the after_tool hooks. A deferred call's step records the deferral. A call that
        # runs a sub-agent: the step runs the checks before it, and the sub-agent runs in workflow code after it.
        reservation = self._reserved.pop(call.id)
        sub = self._owner.sub_agents.get(call.name)
        tool = self.tools.get(call.name)

        async def tool_step() -> str:
            try:
                if sub is not None and isinstance(tool, AgentTool):
                    gate = gate_sub_agent_call(self, turn, call, tool, cfg, emit, deps, usage, approval)
                    return dumps(await self._cancellable(gate))
                done = await self._cancellable(BareLoop._run_one(self, turn, call, cfg, emit, deps, usage, approval))
            except _Cancelled:
                return dumps({"cancelled": True})
            except HookFailed as exc:
                return dumps({"error": error_to_dict(exc)})
            if isinstance(done, PendingApproval):
                return dumps({"pending": pending_to_dict(done)})
            return dumps(record_to_dict(done))

        out = await self._step(self._names.tool(call.name), tool_step, reservation)
        if "cancelled" in out:
            raise _Cancelled
        if "error" in out:
            raise loop_error_from_dict(out["error"])
        if "pending" in out:
            return pending_from_dict(out["pending"])
        if "proceed" in out and sub is not None:
            return await self._run_sub_agent(sub, turn, call, out["proceed"], cfg, emit)
        return record_from_dict(out)

    async def _run_sub_agent(
        self, sub: DBOSLoop[Any], turn: int, call: ToolCallPart, given: Any, cfg: RunConfig, emit: Any
    ) -> ToolCallRecord:
        """The call ``call`` runs ``sub``'s agent inside this workflow: a driver of its own over a new
        conversation, its effects steps named ``<name>.<tool name>.*``, its waits for approval this workflow's
        (keyed with the call's path). Workflow code: a recovered run replays its steps, so no completed model or
        tool call of the sub-agent runs again. ``given`` is the input the checks before the call let it run
        with."""
        tool = self.tools.get(call.name)
        assert isinstance(tool, AgentTool)
        try:
            prompt = _prompt(given)
        except ToolInputError as exc:
            return self._not_run(turn, call, f"Invalid input for tool {call.name!r}: {exc}", emit)
        agents = self._agents or (self._agent_name(),)
        agents = (*agents, tool.agent.name)
        async with self._sub_lock:
            child = _Driver(
                sub,
                LoopMachine(),
                live=self._root._live,
                parent=self,
                path=(*self._path, (turn, call.id)),
                agents=agents,
            )
            if emit:

                def forward(event: LoopEvent) -> None:
                    emit(event if isinstance(event, SubAgentEvent) else SubAgentEvent(agents, call.id, event))

                child._run_observers = (forward,)
            settings = sub.run_config(None)
            limits = tighter(settings.limits, remaining(cfg.limits, self._machine.usage))
            if limits is not settings.limits:
                settings = dataclasses.replace(settings, limits=limits)
            run = await child._run(prompt, None, settings, None, sub.output_type, sub.output_validator, sub.deps)
        record = sub_agent_result(tool, turn, call, run, child._machine.usage)
        if emit:
            emit(ToolCallFinished(turn, call, record.result, record.duration))
        return record

    def _agent_name(self) -> str:
        agent = self._owner._agent
        return agent.name if agent is not None else self._owner.name

    async def _await_approvals(self, pending: tuple[PendingApproval, ...]) -> Mapping[str, Approval] | None:
        # The workflow waits (DBOS.recv: durable, so a recovered run waits again, or reads the decisions
        # that came meanwhile) for a message of DBOSLoop.approve; the calls it awaits, each with its wait's key
        # (this workflow, this turn, the call), are the event PENDING_EVENT while it waits. A decision for
        # another wait (a repeat, a stale one) or one that does not fit the tool is dropped, logged, and the
        # run keeps waiting: nothing a sender puts in the topic can fail the run.
        run = DBOS.workflow_id or ""
        turn = self._machine.turn
        awaited = awaiting(pending, run, turn, self._path, self._agents)
        await DBOS.set_event_async(PENDING_EVENT, dumps([awaited_to_dict(a) for a in awaited]))
        timeout = self._owner.approval_timeout
        while True:
            text = await DBOS.recv_async(APPROVALS_TOPIC, timeout_seconds=timeout or _WAIT_CHUNK)
            if text is None:  # the wait timed out
                if timeout is None:
                    continue
                await DBOS.set_event_async(PENDING_EVENT, "[]")
                return None
            try:
                data = loads(text) if isinstance(text, (str, bytes)) else None
            except ValueError:
                data = None
            if isinstance(data, dict) and data.get("cancel"):
                await DBOS.set_event_async(PENDING_EVENT, "[]")
                raise _Cancelled
            entries, dropped = read_decisions(data.get("approvals") if isinstance(data, dict) else data)
            bound = []
            for call_id, decision, key in entries:
                if key is None:
                    dropped.append(f"a decision for call {call_id!r} was dropped: it names no run and turn")
                else:
                    bound.append((key, decision))
            decisions, refused = admit(bound, awaited, self.tools)
            for reason in [*dropped, *refused]:  # a recovered run logs again what it replays (it cannot tell)
                _log.warning("run %s, turn %d: %s", run, turn, reason)
            if decisions:
                left = [awaited_to_dict(a) for a in awaited if a.id not in decisions]
                await DBOS.set_event_async(PENDING_EVENT, dumps(left))
                return {a.call.id: decisions[a.id] for a in awaited if a.id in decisions}  # by the run's own ids

    async def _summarize(self, compactor: SummarizingCompactor, messages: list[Message]) -> list[Message] | None:
        async def summarize_step() -> str:
            out = await BareLoop._summarize(self, compactor, messages)
            return dumps(None if out is None else [m.to_dict() for m in out])

        data = await self._step(self._names.summarize, summarize_step)
        return None if data is None else [Message.from_dict(m) for m in data]


async def recover(executor_ids: Sequence[str]) -> list[str]:
    """Hand the pending runs of the DBOS executors ``executor_ids`` (workers that died; their
    ``executor_id`` in ``DBOSConfig``) to this process's executor, which resumes each from its last recorded
    step. Returns the workflow ids resumed. For several workers sharing a PostgreSQL system database, where
    no DBOS Conductor watches them (DBOS docs, "Workflow Recovery": each executor recovers only its own
    workflows when it restarts)."""
    pending = await DBOS.list_workflows_async(
        status="PENDING", executor_id=list(executor_ids), load_input=False, load_output=False
    )
    ids = [w.workflow_id for w in pending]
    for workflow_id in ids:
        await DBOS.resume_workflow_async(workflow_id)
    return ids


def cancel_marker_id(workflow_id: str) -> str:
    """The id of the cancel request of the run ``workflow_id``: ``<workflow_id>.cancel``."""
    return f"{workflow_id}.cancel"


async def _cancel_request() -> None:
    """A cancel request: its existence is the request."""


def _check_picklable(output_type: Any) -> None:
    mode = resolve_output(output_type)
    if mode is None:
        return
    try:
        pickle.loads(pickle.dumps(mode.type))
    except Exception as exc:
        raise TypeError(
            f"DBOS records a run's result with pickle, and the output type {mode.type!r} cannot be pickled by "
            f"reference (define it at a module's top level): {exc}"
        ) from exc
