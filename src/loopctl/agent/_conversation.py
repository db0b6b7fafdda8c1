"""A conversation with an agent: where its messages live, one run at a time, and what runs inside a run.

:class:`Conversation` is what :meth:`Agent.session <loopctl.agent.Agent.session>` returns (and what
``agent.run`` makes for one run). Each run builds a :class:`~loopctl.engine.BareLoop` on the conversation's
machine (loaded from the session store, or held in memory), runs it, and then does what only an agent knows:
a handoff's handover to the next agent, a sub-agent's pending approvals listed with their agent path, one
:class:`~loopctl.engine.Run` for the whole run. Inside a run a context variable (:class:`_Scope`) tells the
sub-agent tools which conversation, event stream and limits they run under.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Generic, Literal, overload

from loopctl._frozen import dataclass
from loopctl.agent._tools import AgentTool, Handoff
from loopctl.agent._types import AgentDepsT, AgentOutputT
from loopctl.engine.config import RunConfig
from loopctl.engine.events import (
    AgentHandoff,
    LoopEvent,
    Observer,
    RunFinished,
    RunStarted,
    SubAgentEvent,
    ToolCallDeferred,
)
from loopctl.engine.limits import RunUsage, UsageLimits, remaining
from loopctl.engine.loop import BareLoop
from loopctl.engine.machine import LoopMachine, MachineState, coherent_prefix
from loopctl.engine.permission import Approval, Approve, PendingApproval
from loopctl.engine.run import Run, Turn, count_new
from loopctl.engine.streaming import RunStream
from loopctl.errors import ApprovalError, SessionBusy, SessionNotFound
from loopctl.message import Message, Role, ToolCallPart, ToolResultPart
from loopctl.response import Usage
from loopctl.tool import ToolContext

if TYPE_CHECKING:
    from loopctl.agent._agent import Agent
    from loopctl.store import SessionBinding, SessionStore

__all__ = ["PARENT_KEY", "Conversation", "run_sub_agent"]

PARENT_KEY = "loopctl.parent"
"""The session metadata key of a sub-agent's session: ``{"session": <the parent's session id>, "call": <the
parent's call id>, "agent": "support > researcher"}``."""

AGENT_KEY = "loopctl.agent"
"""The session metadata key naming the agent that answered last (after a handoff, the conversation goes on
with it)."""

_BUSY: dict[tuple[object, ...], list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]] = {}
"""The conversations running now, in this process: (store identity, session id) or (conversation identity,),
with the runs waiting for each (their event loop and the future each waits on). Runs of one session may come
from several threads (``run_sync`` in a threaded web server), each on an event loop of its own: the registry
is guarded by :data:`_BUSY_LOCK` and a waiter is woken through its own loop (``call_soon_threadsafe``)."""

_BUSY_LOCK = threading.Lock()


async def _enter(key: tuple[object, ...], conversation: Conversation[Any, Any]) -> None:
    """Mark conversation ``key`` running, once no other run holds it. Raises
    :class:`~loopctl.errors.SessionBusy` when one does and ``conversation.on_busy`` is ``"refuse"``; with
    ``"wait"``, waits for it (the runs woken at its end try again, the first one through goes)."""
    while True:
        with _BUSY_LOCK:
            waiters = _BUSY.get(key)
            if waiters is None:
                _BUSY[key] = []
                return
            if conversation.on_busy == "refuse":
                raise SessionBusy(
                    f"conversation {conversation.session_id or '(in memory)'!r} is running a run already: wait for "
                    "it, or run on another session (agent.session(..., on_busy='wait') waits its turn)",
                    session_id=conversation.session_id,
                )
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[None] = loop.create_future()
            waiters.append((loop, waiter))
        await waiter


def _leave(key: tuple[object, ...]) -> None:
    """Mark conversation ``key`` no longer running and wake the runs waiting for it, on their own loops."""
    with _BUSY_LOCK:
        waiters = _BUSY.pop(key, [])
    for loop, waiter in waiters:
        with contextlib.suppress(RuntimeError):  # a loop closed meanwhile: nothing waits there any more
            loop.call_soon_threadsafe(_wake, waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():  # a waiter cancelled meanwhile is done
        waiter.set_result(None)


@dataclass(frozen=True, slots=True)
class _Parent:
    """A sub-agent's link to the run that called it: where its events go and which call runs it."""

    emit: Callable[[LoopEvent], None]
    call_id: str
    session_id: str | None


@dataclass(slots=True)
class _Scope:
    """What the tools of a running agent run under (the context variable :data:`_SCOPE`)."""

    conversation: Conversation[Any, Any]
    path: tuple[str, ...]
    emit: Callable[[LoopEvent], None]
    nested: Mapping[str, Mapping[str, Approval]]  # decisions for sub-agents' calls, by the parent's call id
    loop: BareLoop
    limits: UsageLimits | None


_SCOPE: ContextVar[_Scope | None] = ContextVar("loopctl_agent_scope", default=None)

_ZERO = RunUsage()


class _Dispatcher:
    """The observer of an agent's loops: hands each event to the agent's observers, the run's stream and, for
    a sub-agent, the parent's run (as a :class:`~loopctl.engine.SubAgentEvent`). The loops' own
    ``RunFinished`` (and a later segment's ``RunStarted``, after a handoff) are replaced by one for the whole
    run; a handoff's deferred ``transfer_to_...`` call becomes an :class:`~loopctl.engine.AgentHandoff`."""

    __slots__ = ("agent", "observer", "parent", "path", "started")

    def __init__(
        self, agent: Agent[Any, Any], path: tuple[str, ...], observer: Observer | None, parent: _Parent | None
    ) -> None:
        self.agent = agent
        self.path = path
        self.observer = observer
        self.parent = parent
        self.started = False

    @property
    def listening(self) -> bool:
        """Whether anyone follows the run's events (else the loop makes none: a run without observers pays
        for no event)."""
        return bool(self.agent.observers) or self.observer is not None or self.parent is not None

    def __call__(self, event: LoopEvent) -> None:
        if isinstance(event, RunFinished):
            return
        if isinstance(event, RunStarted):
            if self.started:
                return
            self.started = True
            event = replace(event, agent=self.agent.name)
        elif isinstance(event, ToolCallDeferred) and self.agent.handoff_for(event.call.name) is not None:
            return
        self.emit(event)

    def emit(self, event: LoopEvent) -> None:
        """``event`` to everyone who follows this run."""
        for observer in self.agent.observers:
            observer(event)
        if self.observer is not None:
            self.observer(event)
        parent = self.parent
        if parent is not None:
            parent.emit(event if isinstance(event, SubAgentEvent) else SubAgentEvent(self.path, parent.call_id, event))


class Conversation(Generic[AgentDepsT, AgentOutputT]):
    """One conversation with an :class:`~loopctl.agent.Agent` (:meth:`Agent.session
    <loopctl.agent.Agent.session>`): the session ``session_id`` of ``store``, or, without a store, messages
    held by this object. Its runs are the agent's (``run``, ``run_sync``, ``stream``, with ``approvals=`` to
    continue a paused run), one at a time: a second run while one is running is refused with
    :class:`~loopctl.errors.SessionBusy` (``on_busy="wait"``: it waits its turn). Runs of different
    conversations never see each other's messages.

    After a handoff the conversation goes on with the agent that answered (:attr:`agent`; kept in the
    session's metadata, so a later process goes on with it too).

    ``history`` starts a conversation without a store from these messages; ``parent`` links a sub-agent's
    conversation to its parent's (kept in the session's metadata; set by the engine).
    """

    def __init__(
        self,
        agent: Agent[AgentDepsT, AgentOutputT],
        session_id: str | None = None,
        *,
        store: SessionStore | None = None,
        history: Sequence[Message] | None = None,
        on_busy: Literal["refuse", "wait"] = "refuse",
        parent: Mapping[str, str] | None = None,
    ) -> None:
        if on_busy not in ("refuse", "wait"):
            raise ValueError(f"on_busy must be 'refuse' or 'wait', got {on_busy!r}")
        if store is not None and history is not None:
            raise ValueError("a stored session has its own history: pass history= only without a store")
        self.root = agent
        self.store = store
        if store is not None:
            from loopctl.store.base import check_session_id, check_store, new_session_id

            check_store(store)
            session_id = check_session_id(session_id) if session_id is not None else new_session_id()
        self.session_id = session_id
        self.on_busy = on_busy
        self._link = dict(parent) if parent is not None else None
        self._current: Agent[Any, Any] = agent
        self._machine: LoopMachine | None = None
        if history is not None:
            messages = list(history)
            for i, m in enumerate(messages):
                if not isinstance(m, Message):
                    raise TypeError(f"history[{i}] is a {type(m).__name__}, not a Message")
            if coherent_prefix(messages) != len(messages):
                raise ValueError(
                    "the history ends with tool calls that have no results (a run that paused for approval is "
                    "continued on its conversation, agent.session(...), not from its messages)"
                )
            self._machine = LoopMachine(messages)
        self._children: dict[str, Conversation[Any, Any]] = {}

    def __repr__(self) -> str:
        where = f"store={type(self.store).__name__}" if self.store is not None else "in memory"
        return f"Conversation({self.session_id!r}, agent={self._current.name!r}, {where})"

    @property
    def agent(self) -> Agent[Any, Any]:
        """The agent the next run starts with (the one that answered last, after a handoff)."""
        return self._current

    @property
    def history(self) -> Sequence[Message]:
        """The conversation's messages (read from the store for a stored session)."""
        if self.store is not None and self.session_id is not None:
            try:
                return self.store.load(self.session_id).messages
            except SessionNotFound:
                return ()
        return self._machine.full_history() if self._machine is not None else ()

    # --- running --------------------------------------------------------------------------------------------

    @overload
    async def run(
        self: Conversation[None, Any],
        prompt: str | Message | None = None,
        *,
        deps: None = None,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
        cancel: asyncio.Event | None = None,
    ) -> Run[AgentOutputT]: ...
    @overload
    async def run(
        self,
        prompt: str | Message | None = None,
        *,
        deps: AgentDepsT,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
        cancel: asyncio.Event | None = None,
    ) -> Run[AgentOutputT]: ...
    async def run(
        self,
        prompt: str | Message | None = None,
        *,
        deps: Any = None,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
        cancel: asyncio.Event | None = None,
    ) -> Run[Any]:
        """Run the agent on ``prompt`` in this conversation (or continue its paused run with ``approvals``,
        keyed by :attr:`PendingApproval.id <loopctl.engine.PendingApproval.id>`: a sub-agent's call is
        ``"<parent call>/<call>"``). See :meth:`Agent.run <loopctl.agent.Agent.run>`. Raises
        :class:`~loopctl.errors.SessionBusy` while another run of this conversation runs, and
        :class:`~loopctl.errors.ApprovalError` for approvals that do not fit, before anything runs.

        ``deps`` go to tools and instructions; ``config`` replaces the agent's run settings for this run; ``cancel``
        stops it when set.
        """
        run, _ = await self._run(prompt, approvals, deps, config, cancel, None, None, None)
        return run

    @overload
    def run_sync(
        self: Conversation[None, Any],
        prompt: str | Message | None = None,
        *,
        deps: None = None,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
    ) -> Run[AgentOutputT]: ...
    @overload
    def run_sync(
        self,
        prompt: str | Message | None = None,
        *,
        deps: AgentDepsT,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
    ) -> Run[AgentOutputT]: ...
    def run_sync(
        self,
        prompt: str | Message | None = None,
        *,
        deps: Any = None,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
    ) -> Run[Any]:
        """:meth:`run` on a fresh event loop. Raises ``RuntimeError`` inside a running event loop.

        ``deps`` and ``config`` are as for :meth:`run`.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("run_sync() cannot be called inside a running event loop; await run() instead")

        async def go() -> Run[Any]:
            try:
                run, _ = await self._run(prompt, approvals, deps, config, None, None, None, None)
                return run
            finally:
                await self.root.aclose_reachable()
                await self._current.aclose()  # reachable from the root, but for a conversation moved to it

        return asyncio.run(go())

    @overload
    def stream(
        self: Conversation[None, Any],
        prompt: str | Message | None = None,
        *,
        deps: None = None,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
    ) -> RunStream[AgentOutputT]: ...
    @overload
    def stream(
        self,
        prompt: str | Message | None = None,
        *,
        deps: AgentDepsT,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
    ) -> RunStream[AgentOutputT]: ...
    def stream(
        self,
        prompt: str | Message | None = None,
        *,
        deps: Any = None,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
    ) -> RunStream[Any]:
        """:meth:`run` as a stream of its events (:meth:`Agent.stream <loopctl.agent.Agent.stream>`).

        ``deps`` and ``config`` are as for :meth:`run`.
        """

        async def start(observer: Observer, cancel: asyncio.Event) -> Run[Any]:
            run, _ = await self._run(prompt, approvals, deps, config, cancel, observer, None, None)
            return run

        return RunStream(start)

    async def pending_approvals(self) -> tuple[PendingApproval, ...]:
        """The calls a paused run of this conversation waits on (a sub-agent's included, with its agent path),
        as ``run.pending_approvals`` listed them; ``()`` when it is not paused."""
        binding, machine = await self._load()
        agent = self._current_for(binding)
        return await self._pending(machine, agent, (agent.name,))

    # --- one run --------------------------------------------------------------------------------------------

    async def _run(
        self,
        prompt: str | Message | None,
        approvals: Mapping[str, Approval] | None,
        deps: Any,
        config: RunConfig | None,
        cancel: asyncio.Event | None,
        observer: Observer | None,
        parent: _Parent | None,
        cap: UsageLimits | None,
        path: tuple[str, ...] = (),
    ) -> tuple[Run[Any], RunUsage]:
        """The run, and what its machines counted of it (for a sub-agent's parent; zero for a run without one).
        One at a time per conversation."""
        key = (id(self.store), self.session_id) if self.store is not None else (id(self),)
        await _enter(key, self)
        try:
            if self.store is None:
                binding, machine = None, self._machine if self._machine is not None else LoopMachine()
            else:
                binding, machine = await self._load()
            agent = self._current_for(binding) if binding is not None else self._current
            if approvals is None and machine.state is MachineState.AWAITING_APPROVAL and _only_handoffs(agent, machine):
                # A handover that a process left half done (it stopped between the two agents): finish it.
                agent, machine, _ = _hand_over(agent, machine, committed=True)
            base = path or (agent.name,)
            before = machine.usage if machine.state is MachineState.AWAITING_APPROVAL else _ZERO
            paused_on = machine.pending_approvals if machine.state is MachineState.AWAITING_APPROVAL else ()
            waited = (agent, [p.call for p in paused_on])  # the calls the paused run waited on
            own: Mapping[str, Approval] | None = None
            nested: dict[str, dict[str, Approval]] = {}
            if approvals is not None:
                own, nested = await self._split(approvals, agent, machine, base)
            dispatcher = _Dispatcher(agent, base, observer, parent)
            listening = dispatcher.listening
            history = machine.full_history()
            anchor = (len(history) - 1, history[-1]) if history else None
            runs: list[Run[Any]] = []
            spent = _ZERO
            segment_input: str | Message | None = prompt
            segment_approvals = own
            while True:
                if binding is not None:
                    binding.metadata = {**(binding.metadata or {}), AGENT_KEY: agent.name}
                loop = BareLoop(
                    agent.client(),
                    agent.tool_list,
                    agent.session_settings(),
                    observers=[dispatcher] if listening else (),
                    permission=agent.permission,
                    hooks=agent.hooks,
                    machine=machine,
                    binding=binding,
                )
                cfg = agent.run_settings(config)
                if cap is not None or runs:
                    limits = _tighter(cfg.limits, remaining(cap, spent) if cap is not None else None)
                    if runs:  # a handoff's next agent: what the run spent before it counts
                        limits = _tighter(limits, remaining(cfg.limits, spent))
                    if limits is not cfg.limits:
                        cfg = replace(cfg, limits=limits)
                scoped = agent.has_sub_agents
                token = _SCOPE.set(_Scope(self, base, dispatcher.emit, nested, loop, cfg.limits)) if scoped else None
                try:
                    run = await loop.run(
                        segment_input,
                        cfg,
                        approvals=segment_approvals,
                        cancel=cancel,
                        output_type=agent.output_type,
                        output_validator=agent.output_validator,
                        deps=agent.deps_for(deps),
                    )
                finally:
                    if token is not None:
                        _SCOPE.reset(token)
                runs.append(run)
                machine = loop.machine
                if machine.state is not MachineState.AWAITING_APPROVAL or not _has_handoff(agent, machine):
                    if parent is not None or len(runs) > 1:
                        spent = spent.plus(_minus(machine.usage, before))
                    break
                spent = spent.plus(_minus(machine.usage, before))
                before = _ZERO
                target, machine, results = _hand_over(agent, machine, committed=False)
                call = next(c for c in results.parts if isinstance(c, ToolResultPart) and agent.handoff_for(c.name))
                reply = machine.full_history()[-1]
                turn = run.turns[-1].index if run.turns else 0
                transfer = next(c for c in reply.tool_calls() if c.id == call.call_id)
                dispatcher.emit(AgentHandoff(turn, transfer, agent.name, target.name))
                agent = target
                dispatcher.agent = target
                base = (*base[:-1], target.name)
                dispatcher.path = base
                segment_input, segment_approvals = results, None
            self._current = agent
            if self.store is None:
                self._machine = machine
                if self._children:  # only a paused sub-agent is ever continued: the others' messages go
                    waiting = {p.call.id for p in machine.pending_approvals}
                    self._children = {k: c for k, c in self._children.items() if k in waiting}
            if waited[1]:
                await _release_abandoned(self, *waited, runs[0], machine)
            pending = await self._pending(machine, agent, base) if machine.pending_approvals else ()
            if len(runs) == 1:
                # One loop's run: it is the agent's, once it names the agent and its pending calls as an agent's.
                final = runs[0]
                object.__setattr__(final, "agent", agent.name)
                object.__setattr__(final, "pending_approvals", pending)
            else:
                final = _combine(runs, agent.name, machine, anchor, pending)
            if listening:
                dispatcher.emit(RunFinished(final))
            return final, spent
        finally:
            _leave(key)

    async def _load(self) -> tuple[SessionBinding | None, LoopMachine]:
        """The conversation's binding to its session (``None`` in memory) and machine."""
        if self.store is None:
            return None, self._machine if self._machine is not None else LoopMachine()
        from loopctl.store import SessionBinding

        assert self.session_id is not None
        binding = SessionBinding(
            self.store,
            self.session_id,
            system_prompt=self.root.system_prompt,
            metadata={PARENT_KEY: self._link} if self._link is not None else None,
        )
        machine = await binding.aload()
        return binding, machine if machine is not None else LoopMachine()

    def _current_for(self, binding: SessionBinding | None) -> Agent[Any, Any]:
        """The agent that answered last: named in the session's metadata for a stored session."""
        if binding is None or not binding.metadata:
            return self._current
        name = binding.metadata.get(AGENT_KEY)
        if not isinstance(name, str):
            return self._current
        seen: list[Agent[Any, Any]] = [self.root]
        for agent in seen:  # the agents reachable by handoffs, breadth first
            if agent.name == name:
                return agent
            seen.extend(a for a in agent.handoff_targets() if all(a is not b for b in seen))
        return self.root

    # --- approvals of sub-agents ----------------------------------------------------------------------------

    async def _split(
        self, approvals: Mapping[str, Approval], agent: Agent[Any, Any], machine: LoopMachine, path: tuple[str, ...]
    ) -> tuple[dict[str, Approval], dict[str, dict[str, Approval]]]:
        """Decisions for this run's own calls, and those for sub-agents' calls by the call that runs each
        sub-agent (its own decision becomes ``Approve()``: run the sub-agent again). Raises
        :class:`~loopctl.errors.ApprovalError` for a sub-agent's call that awaits none."""
        own: dict[str, Approval] = {}
        nested: dict[str, dict[str, Approval]] = {}
        for key, decision in approvals.items():
            head, sep, rest = key.partition("/")
            if sep:
                nested.setdefault(head, {})[rest] = decision
            else:
                own[key] = decision
        if not nested:
            return own, nested
        waiting = {p.id: p for p in machine.pending_approvals}
        for head, decisions in nested.items():
            if head in own:
                raise ApprovalError(f"call {head!r} is decided twice: for itself and for the sub-agent it runs")
            p = waiting.get(head)
            tool = _tool_named(agent, p.call.name) if p is not None else None
            remote = getattr(tool, "nested_pending", None) if p is not None else None
            if remote is not None:  # a remote sub-agent (loopctl.a2a.A2AAgent): its task waits on these
                expected = {q.id for q in await remote(self, head)}
                for rest in decisions:
                    if rest not in expected:
                        raise ApprovalError(
                            f"call {head}/{rest} does not await approval (the remote agent awaits "
                            f"{', '.join(f'{head}/{e}' for e in sorted(expected)) or 'none'})"
                        )
                own[head] = Approve()
                continue
            if p is None or not isinstance(tool, AgentTool):
                raise ApprovalError(f"call {head!r} runs no sub-agent that awaits approval")
            child = await self._child(tool, head, resume=True)
            if child is None:
                raise ApprovalError(f"the sub-agent of call {head!r} has no paused run to continue")
            child_binding, child_machine = await child._load()
            child_agent = child._current_for(child_binding)
            expected = {q.id for q in await child._pending(child_machine, child_agent, (*path, child_agent.name))}
            for rest in decisions:
                if rest not in expected:
                    raise ApprovalError(
                        f"call {head}/{rest} does not await approval (the sub-agent awaits "
                        f"{', '.join(f'{head}/{e}' for e in sorted(expected)) or 'none'})"
                    )
            own[head] = Approve()
        return own, nested

    async def _pending(
        self, machine: LoopMachine, agent: Agent[Any, Any], path: tuple[str, ...]
    ) -> tuple[PendingApproval, ...]:
        """The calls a paused run waits on, a sub-agent's own pending calls in place of the call that runs it."""
        out: list[PendingApproval] = []
        for p in machine.pending_approvals:
            tool = _tool_named(agent, p.call.name)
            remote = getattr(tool, "nested_pending", None)
            if remote is not None:  # a remote sub-agent: the calls its task waits on, under its name
                inner = await remote(self, p.call.id)
                if inner:
                    where = " > ".join((*path, tool.name))
                    out.extend(replace(q, via=(p.call.id, *q.via), agent=where) for q in inner)
                    continue
            child = await self._child(tool, p.call.id, resume=True) if isinstance(tool, AgentTool) else None
            if child is not None and isinstance(tool, AgentTool):
                child_binding, child_machine = await child._load()
                child_agent = child._current_for(child_binding)
                inner = await child._pending(child_machine, child_agent, (*path, child_agent.name))
                if inner:
                    out.extend(replace(q, via=(p.call.id, *q.via)) for q in inner)
                    continue
            out.append(PendingApproval(p.call, p.reason, agent=" > ".join(path)))
        return tuple(out)

    async def _child(self, tool: AgentTool[Any], call_id: str, *, resume: bool) -> Conversation[Any, Any] | None:
        """The conversation of the sub-agent run by call ``call_id``: the paused one (``resume``; ``None`` when
        there is none), or a new one. A stored conversation's sub-agent has a session of its own in the same
        store, ``<session id>/<call id>`` (``.2``, ``.3``... when a call id came back; :func:`_usable_id` when
        that is no session id), linked to this one in its metadata (:data:`PARENT_KEY`)."""
        if self.store is None:
            found = self._children.get(call_id)
            if resume:
                return found
            child: Conversation[Any, Any] = Conversation(tool.agent, None)
            self._children[call_id] = child
            return child
        assert self.session_id is not None
        base = f"{self.session_id}/{call_id}"
        ids = [_usable_id(base)]
        latest: str | None = None
        for n in range(2, 10_000):
            try:
                await self.store.ainfo(ids[-1])
            except SessionNotFound:
                break
            latest = ids[-1]
            ids.append(_usable_id(f"{base}.{n}"))
        if resume:
            if latest is None:
                return None
            sid = latest
        else:
            sid = ids[-1]
        link = {"session": self.session_id, "call": call_id, "agent": tool.agent.name}
        return Conversation(tool.agent, sid, store=self.store, parent=link)


def _usable_id(text: str) -> str:
    """``text`` when it is a usable session id; else (a parent's long id with the model's call id after it,
    sub-agents nested deep, a call id with a control character) an id made of it that is one, the same each
    time: its printable start, ``~`` and a digest of the whole text."""
    from loopctl.store.base import _MAX_ID, check_session_id

    try:
        return check_session_id(text)
    except ValueError:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        head = "".join(c if c.isprintable() else "_" for c in text)[: _MAX_ID - len(digest) - 1].strip()
        return f"{head}~{digest}" if head else digest


# --- sub-agents -------------------------------------------------------------------------------------------


async def run_sub_agent(tool: AgentTool[Any], prompt: str, context: ToolContext[Any]) -> tuple[Run[Any], str | None]:
    """Run (or continue) ``tool``'s sub-agent for the call of ``context``; its spend is recorded on the
    context. Returns its run and, when it paused, what it waits on."""
    scope = scope_of(context)
    deps = tool.sub_deps(context.deps)
    if scope is None:  # called by a plain BareLoop: a fresh conversation each time, events not forwarded
        child: Conversation[Any, Any] = Conversation(tool.agent, None)
        run, spent = await child._run(prompt, None, deps, None, None, None, None, None)
    else:
        decisions = scope.nested.get(context.call_id)
        found = await scope.conversation._child(tool, context.call_id, resume=decisions is not None)
        if found is None:
            raise ApprovalError(f"the sub-agent of call {context.call_id!r} has no paused run to continue")
        path = (*scope.path, tool.agent.name)
        parent = _Parent(scope.emit, context.call_id, scope.conversation.session_id)
        cap = remaining(scope.limits, scope.loop.machine.usage)
        run, spent = await found._run(
            None if decisions is not None else prompt, decisions, deps, None, None, None, parent, cap, path
        )
    context.record_usage(run.usage, cost=run.cost, requests=spent.requests, tool_calls=spent.tool_calls)
    waiting = None
    if run.pending_approvals and scope is not None:
        names = ", ".join(f"{p.call.name} ({p.id})" for p in run.pending_approvals)
        waiting = f"the agent {tool.agent.name} awaits approval of {names}"
    return run, waiting


def scope_of(context: ToolContext[Any]) -> _Scope | None:
    """The scope of the agent's run whose loop runs ``context``'s call (one of the calls of its last reply), or
    ``None``. A tool of the agent inherits the agent's scope, and a loop it runs of its own (a plain
    :class:`~loopctl.engine.BareLoop`) must not take the agent's conversation for its sub-agents' (their
    sessions, events, limits)."""
    scope = _SCOPE.get()
    if scope is None:
        return None
    reply = scope.loop.machine.last_message()
    if reply is None or reply.role is not Role.ASSISTANT:
        return None
    if any(c.id == context.call_id and c.name == context.name for c in reply.tool_calls()):
        return scope
    return None


# --- handoffs ---------------------------------------------------------------------------------------------


def _has_handoff(agent: Agent[Any, Any], machine: LoopMachine) -> bool:
    return any(agent.handoff_for(p.call.name) is not None for p in machine.pending_approvals)


def _only_handoffs(agent: Agent[Any, Any], machine: LoopMachine) -> bool:
    pending = machine.pending_approvals
    return bool(pending) and all(agent.handoff_for(p.call.name) is not None for p in pending)


def _hand_over(
    agent: Agent[Any, Any], machine: LoopMachine, *, committed: bool
) -> tuple[Agent[Any, Any], LoopMachine, Message]:
    """A run paused on a ``transfer_to_...`` call: the agent handed to, the machine it goes on with (the
    conversation up to the reply, through the handoff's input filter), and the results of the reply's calls
    (the transfer's, those that ran, and the others answered as not run), which is the next run's input
    (``committed``: already in the machine's history, for a handover finished later)."""
    history = list(machine.full_history())
    reply = history[-1]
    pending = {p.call.id for p in machine.pending_approvals}
    held = machine.held_results
    chosen: Handoff[Any, Any] | None = None
    parts: list[ToolResultPart] = []
    for call in reply.tool_calls():
        handoff = agent.handoff_for(call.name)
        if call.id in held:
            parts.append(held[call.id])
        elif handoff is not None and chosen is None and call.id in pending:
            chosen = handoff
            text = f"Transferred to {handoff.agent.name}: it answers from here on."
            parts.append(ToolResultPart(call_id=call.id, name=call.name, output=text))
        elif handoff is not None:
            text = "Not used: the conversation was handed over by an earlier call of this reply."
            parts.append(ToolResultPart(call_id=call.id, name=call.name, output=text, is_error=True))
        else:
            target = chosen.agent.name if chosen is not None else "another agent"
            text = f"Not run: the conversation was handed to {target} before the call was decided."
            parts.append(ToolResultPart(call_id=call.id, name=call.name, output=text, is_error=True))
    assert chosen is not None
    results = Message(role=Role.USER, parts=tuple(parts))
    seen = history
    if chosen.input_filter is not None:
        seen = list(chosen.input_filter(history))
        if not seen or seen[-1] is not reply:
            raise ValueError(
                f"the input filter of the handoff to {chosen.agent.name!r} must keep the reply that hands over last"
            )
        if coherent_prefix(seen[:-1]) != len(seen) - 1:
            raise ValueError(f"the input filter of the handoff to {chosen.agent.name!r} left tool calls unanswered")
    next_machine = LoopMachine([*seen, results] if committed else seen)
    return chosen.agent, next_machine, results


# --- helpers ----------------------------------------------------------------------------------------------


async def _release_abandoned(
    conversation: Conversation[Any, Any],
    agent: Agent[Any, Any],
    waited: list[ToolCallPart],
    run: Run[Any],
    machine: LoopMachine,
) -> None:
    """A call the paused run waited on that this run answered without running its tool (the run was cancelled
    or failed first, or the call was denied) is given up: a remote sub-agent's tool
    (:class:`~loopctl.a2a.A2AAgent`, its ``cancel_paused``) cancels the remote task that waited on it."""
    ran = {r.call.id for r in run.resumed_calls if r.ran}
    still = {p.call.id for p in machine.pending_approvals}
    for call in waited:
        if call.id in ran or call.id in still:
            continue
        release = getattr(_tool_named(agent, call.name), "cancel_paused", None)
        if release is not None:
            await release(conversation, call.id)


def _tool_named(agent: Agent[Any, Any], name: str) -> Any:
    for t in agent.tool_list:
        if getattr(t, "name", None) == name:
            return t
    return None


def _minus(after: RunUsage, before: RunUsage) -> RunUsage:
    cost = None if after.cost is None or before.cost is None else max(after.cost - before.cost, Decimal(0))
    return RunUsage(
        max(after.requests - before.requests, 0),
        max(after.tool_calls - before.tool_calls, 0),
        max(after.input_tokens - before.input_tokens, 0),
        max(after.output_tokens - before.output_tokens, 0),
        cost,
    )


def _tighter(a: UsageLimits | None, b: UsageLimits | None) -> UsageLimits | None:
    """The stricter of two limits, dimension by dimension (``None``: none)."""
    if a is None or b is None:
        return a if b is None else b

    def low(x: Any, y: Any) -> Any:
        return y if x is None else x if y is None else min(x, y)

    return UsageLimits(
        low(a.requests, b.requests),
        low(a.tool_calls, b.tool_calls),
        low(a.input_tokens, b.input_tokens),
        low(a.output_tokens, b.output_tokens),
        low(a.total_tokens, b.total_tokens),
        low(a.cost, b.cost),
    )


def _combine(
    runs: Sequence[Run[Any]],
    agent: str,
    machine: LoopMachine,
    anchor: tuple[int, Message] | None,
    pending: tuple[PendingApproval, ...],
) -> Run[Any]:
    """One :class:`~loopctl.engine.Run` of an agent's run: its loops' runs (several after handoffs) put
    together, answered by ``agent``, with ``pending`` as its pending approvals."""
    last = runs[-1]
    usage = Usage()
    tool_cost: Decimal | None = Decimal(0)
    turns: list[Turn] = []
    for r in runs:
        usage = usage + r.usage
        extra = r._tool_cost
        tool_cost = None if extra is None or tool_cost is None else tool_cost + extra
        turns.extend(r.turns)
    messages = machine.full_history()
    return Run(
        last.outcome,
        last._output,
        tuple(turns),
        usage,
        sum(r.duration for r in runs),
        last.error,
        text=last.text,
        pending_approvals=pending,
        resumed_calls=runs[0].resumed_calls,
        messages=messages,
        new_messages=count_new(messages, anchor),
        agent=agent,
        tool_cost=tool_cost,
    )
