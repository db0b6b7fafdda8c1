"""The :class:`Agent`: a frozen definition of an agent, serving any number of conversations at once."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, Literal, overload

from typing_extensions import TypeVar

from loopctl._frozen import dataclass
from loopctl.agent._tools import AgentTool, Handoff, HandoffTool, safe_tool_name
from loopctl.agent._types import AgentDepsT, AgentOutputT
from loopctl.engine.config import Instructions, RunConfig, SessionConfig
from loopctl.engine.events import Observer
from loopctl.engine.limits import UsageLimits
from loopctl.engine.permission import Approval, PermissionCallback
from loopctl.engine.run import Run
from loopctl.engine.streaming import RunStream
from loopctl.message import Message
from loopctl.output import OutputSpec, OutputValidator
from loopctl.providers.base import ModelClient
from loopctl.tool import Tool, ToolProvider

if TYPE_CHECKING:
    from loopctl.agent._conversation import Conversation
    from loopctl.store import SessionStore
    from loopctl.ui.ag_ui import AGUIApp
    from loopctl.ui.ai_sdk import AISDKApp

__all__ = ["Agent", "AgentDepsT", "AgentOutputT"]

_O = TypeVar("_O")


@dataclass(frozen=True, slots=True)
class _Override:
    model: ModelClient | str | None
    deps: Any
    has_deps: bool


_OVERRIDES: ContextVar[Mapping[int, _Override] | None] = ContextVar("loopctl_agent_overrides", default=None)


class Agent(Generic[AgentDepsT, AgentOutputT]):
    """An agent: a model, tools, instructions and an output type, with the run settings that go with them.

    It holds no conversation: ``await agent.run(prompt)`` runs one on a fresh conversation (``history=`` to
    continue messages you kept, such as an earlier ``run.messages``), and ``agent.session(id, store=...)``
    gives a conversation kept in a session store. One instance, made once at module level, serves any
    number of concurrent runs; each runs on its own :class:`~loopctl.engine.BareLoop`. Two runs on one
    conversation at once are refused with :class:`~loopctl.errors.SessionBusy`. Setting an attribute raises
    ``AttributeError``: copy it with :meth:`replace`.

    ``model``: a :class:`~loopctl.providers.ModelClient` (a real client, a
    :class:`~loopctl.testing.ScriptedClient`, a :class:`~loopctl.providers.FallbackClient`) or a model string
    (``"anthropic:claude-sonnet-4-5"``: :func:`~loopctl.providers.from_string`, made on first use, one per
    event loop). ``tools``: :class:`~loopctl.tool.Tool` values (``@tool`` functions), tool providers (MCP
    servers), and other agents (each becomes a sub-agent tool: :meth:`as_tool`). ``instructions`` (a string
    or a callable of the run's :class:`~loopctl.tool.RunContext`) and ``system_prompt`` make the system text.
    ``output_type`` makes ``run.output`` a validated value (``docs/output.md``), checked again by
    ``output_validator``. ``deps_type`` names the type of ``deps=`` (for mypy: tools whose
    ``ToolContext[D]`` does not fit it are an error, and so is a run given no or other deps). ``name`` and
    ``description`` name the agent in events, spans and to a parent model; ``handoffs`` are agents (or
    :class:`Handoff` values) the model may hand the conversation to. The rest are defaults of every run:
    ``run_config`` (a :class:`~loopctl.engine.RunConfig`: retries, timeouts, generation settings),
    ``limits`` (its :class:`~loopctl.engine.UsageLimits`, over the whole run, sub-agents included),
    ``session_config`` (context window and compaction), ``hooks``, ``observers``, ``permission``.

    Raises :class:`~loopctl.errors.InvalidModelSpec` for a model string that names no known provider or no
    model, ``ValueError`` for two tools of one name, a name that is no tool name, a handoff to the agent
    itself, and ``TypeError`` for a tool that is none.
    """

    __slots__ = (
        "__weakref__",
        "_clients",
        "_frozen",
        "_handoffs",
        "_run_settings",
        "_session_settings",
        "_sub_agents",
        "_tools",
        "deps_type",
        "description",
        "handoffs",
        "hooks",
        "instructions",
        "limits",
        "model",
        "name",
        "observers",
        "output_type",
        "output_validator",
        "permission",
        "run_config",
        "session_config",
        "system_prompt",
        "tools",
    )

    def __init__(
        self,
        model: ModelClient | str,
        *,
        tools: Sequence[Tool[AgentDepsT] | ToolProvider | Agent[AgentDepsT, Any] | Agent[None, Any]] = (),
        instructions: Instructions | None = None,
        system_prompt: str | None = None,
        output_type: OutputSpec[AgentOutputT] | None = None,
        output_validator: OutputValidator[Any] | None = None,
        deps_type: type[AgentDepsT] | None = None,
        name: str | None = None,
        description: str | None = None,
        handoffs: Sequence[
            Agent[AgentDepsT, AgentOutputT]
            | Agent[None, AgentOutputT]
            | Handoff[AgentDepsT, AgentOutputT]
            | Handoff[None, AgentOutputT]
        ] = (),
        run_config: RunConfig | None = None,
        limits: UsageLimits | None = None,
        session_config: SessionConfig | None = None,
        hooks: Sequence[object] = (),
        observers: Sequence[Observer] = (),
        permission: PermissionCallback | None = None,
    ) -> None:
        if not isinstance(model, (str, ModelClient)):
            raise TypeError(f"model must be a ModelClient or a model string, got {type(model).__name__}")
        if isinstance(model, str):
            from loopctl.providers._spec import parse_model_spec

            parse_model_spec(model)  # a typo is refused here, not at the first run
        set_ = object.__setattr__
        set_(self, "_frozen", False)
        self.model = model
        self.name = name or "agent"
        self.description = description
        self.instructions = instructions
        self.system_prompt = system_prompt
        self.output_type: Any = output_type
        self.output_validator = output_validator
        self.deps_type: Any = deps_type if deps_type is not None else type(None)
        self.run_config = run_config
        self.limits = limits
        self.session_config = session_config
        self.hooks = tuple(hooks)
        self.observers = tuple(observers)
        self.permission = permission
        self.tools = tuple(tools)
        self.handoffs = tuple(handoffs)
        made: list[Any] = []
        for t in self.tools:
            if isinstance(t, Agent):
                made.append(t.as_tool())
            elif isinstance(t, (Tool, ToolProvider)):
                _check_deps(self.deps_type, t)
                made.append(t)
            else:
                raise TypeError(f"{t!r} is not a tool, a tool provider or an agent")
        targets: list[Handoff[Any, Any]] = []
        for h in self.handoffs:
            target = h if isinstance(h, Handoff) else Handoff(h)
            if target.agent is self:
                raise ValueError(f"agent {self.name!r} cannot hand off to itself")
            targets.append(target)
        made.extend(HandoffTool(h) for h in targets)
        self._handoffs = {h.tool_name: h for h in targets}
        self._tools = tuple(made)
        # A tool marked ``runs_sub_agent`` (a remote agent: loopctl.a2a.A2AAgent) runs in the run's scope too.
        self._sub_agents = any(isinstance(t, AgentTool) or getattr(t, "runs_sub_agent", False) for t in made)
        from loopctl.tool import ToolRegistry

        ToolRegistry(self._tools)  # two tools of one name: refused here, not at the first run
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, ModelClient]] = (
            weakref.WeakKeyDictionary()
        )
        base = session_config or SessionConfig()
        self._session_settings = replace(
            base,
            system_prompt=system_prompt if system_prompt is not None else base.system_prompt,
            instructions=instructions if instructions is not None else base.instructions,
        )
        self._run_settings = self._with_limits(run_config or RunConfig())
        set_(self, "_frozen", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise AttributeError(f"an Agent is frozen ({name!r}); make a changed copy with agent.replace(...)")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        model = self.model if isinstance(self.model, str) else f"{self.model.provider}:{self.model.model}"
        return f"Agent(name={self.name!r}, model={model!r})"

    def replace(
        self,
        *,
        model: ModelClient | str | None = None,
        instructions: Instructions | None = None,
        name: str | None = None,
        description: str | None = None,
        run_config: RunConfig | None = None,
        limits: UsageLimits | None = None,
        tools: Sequence[Tool[Any] | ToolProvider | Agent[Any, Any]] | None = None,
        observers: Sequence[Observer] | None = None,
    ) -> Agent[AgentDepsT, AgentOutputT]:
        """A copy with the given settings changed (the others are this agent's).

        ``model``, ``instructions``, ``name``, ``description``, ``run_config`` and ``limits`` are as for the
        constructor; ``None`` keeps this agent's. ``tools`` replaces its tools (``[*agent.tools, extra]`` adds
        one); ``observers`` its observers (``[*agent.observers, extra]`` adds one).
        """
        return Agent(
            model if model is not None else self.model,
            tools=list(tools) if tools is not None else self.tools,
            instructions=instructions if instructions is not None else self.instructions,
            system_prompt=self.system_prompt,
            output_type=self.output_type,
            output_validator=self.output_validator,
            deps_type=self.deps_type,
            name=name if name is not None else self.name,
            description=description if description is not None else self.description,
            handoffs=self.handoffs,
            run_config=run_config if run_config is not None else self.run_config,
            limits=limits if limits is not None else self.limits,
            session_config=self.session_config,
            hooks=self.hooks,
            observers=self.observers if observers is None else observers,
            permission=self.permission,
        )

    # --- what a run is made of ------------------------------------------------------------------------------

    @property
    def tool_list(self) -> tuple[Any, ...]:
        """The tools its runs offer, as the engine takes them (agents as :class:`AgentTool`, a
        ``transfer_to_...`` tool per handoff)."""
        return self._tools

    @property
    def has_sub_agents(self) -> bool:
        """Whether any of its tools runs a sub-agent (:class:`AgentTool`)."""
        return self._sub_agents

    def handoff_for(self, tool: str) -> Handoff[Any, Any] | None:
        """The handoff whose tool is named ``tool``, or ``None``."""
        return self._handoffs.get(tool)

    def handoff_targets(self) -> tuple[Agent[Any, Any], ...]:
        """The agents this one may hand off to."""
        return tuple(h.agent for h in self._handoffs.values())

    def client(self) -> ModelClient:
        """The model client of a run started now: the :meth:`override`'s, else the agent's (a model string
        is made into a client once per event loop)."""
        override = (_OVERRIDES.get() or {}).get(id(self))
        model = override.model if override is not None and override.model is not None else self.model
        if not isinstance(model, str):
            return model
        made = self._clients.setdefault(asyncio.get_running_loop(), {})
        client = made.get(model)
        if client is None:
            from loopctl.transport import from_string

            client = made[model] = from_string(model)
        return client

    def deps_for(self, deps: Any) -> Any:
        """The deps a run started now runs with: the :meth:`override`'s, else ``deps``."""
        override = (_OVERRIDES.get() or {}).get(id(self))
        return override.deps if override is not None and override.has_deps else deps

    def session_settings(self) -> SessionConfig:
        """The :class:`~loopctl.engine.SessionConfig` of this agent's loops (``session_config`` with the
        agent's ``system_prompt`` and ``instructions``)."""
        return self._session_settings

    def run_settings(self, config: RunConfig | None) -> RunConfig:
        """The :class:`~loopctl.engine.RunConfig` of a run: ``config``, else the agent's, with the agent's
        limits when the config sets none."""
        return self._run_settings if config is None else self._with_limits(config)

    def _with_limits(self, cfg: RunConfig) -> RunConfig:
        if cfg.limits is None and self.limits is not None:
            return replace(cfg, limits=self.limits)
        return cfg

    async def aclose(self) -> None:
        """Close the clients this agent made from model strings (its own, an override's) on the running event
        loop."""
        with contextlib.suppress(RuntimeError):
            made = self._clients.pop(asyncio.get_running_loop(), {})
            for client in made.values():
                close = getattr(client, "aclose", None)
                if close is not None:
                    await close()

    def reachable(self) -> tuple[Agent[Any, Any], ...]:
        """This agent and every agent a run of it may run: its sub-agents and handoff targets, theirs, and so
        on (each once)."""
        seen: list[Agent[Any, Any]] = [self]
        for agent in seen:  # grows as it is read: breadth first
            for tool in agent.tool_list:
                sub = getattr(tool, "agent", None)
                if isinstance(sub, Agent) and all(sub is not a for a in seen):
                    seen.append(sub)
            seen.extend(a for a in agent.handoff_targets() if all(a is not b for b in seen))
        return tuple(seen)

    async def aclose_reachable(self) -> None:
        """:meth:`aclose` on every agent of :meth:`reachable`: what ``run_sync`` does as its event loop ends,
        so a sub-agent's or a handoff target's client made from a model string is closed too."""
        for agent in self.reachable():
            await agent.aclose()

    # --- conversations --------------------------------------------------------------------------------------

    def session(
        self,
        session_id: str | None = None,
        *,
        store: SessionStore | None = None,
        on_busy: Literal["refuse", "wait"] = "refuse",
    ) -> Conversation[AgentDepsT, AgentOutputT]:
        """A conversation with this agent: the session ``session_id`` of ``store`` (loaded at each run, saved
        before each model call and when each run ends; a new id when ``None``), or, without a store, one
        held in memory by the returned object. ``on_busy``: a run started while another runs on the same
        conversation (the same store and session id, in this process) is refused with
        :class:`~loopctl.errors.SessionBusy` (``"refuse"``), or waits for it (``"wait"``)."""
        from loopctl.agent._conversation import Conversation

        return Conversation(self, session_id, store=store, on_busy=on_busy)

    def as_tool(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> AgentTool[AgentDepsT]:
        """This agent as a tool of another (a sub-agent): the model calls ``name`` (default: the agent's
        name) with ``{"input": "<task>"}`` and reads the agent's answer. It runs with the calling run's deps
        (``None`` when this agent takes none; :class:`AgentTool` maps them otherwise). See :class:`AgentTool`
        and ``docs/agent.md``, "Sub-agents".

        ``description`` is what the calling model reads about the tool (default: this agent's ``description``).
        """
        return AgentTool(self, name=name or safe_tool_name(self.name), description=description)

    def to_ag_ui(
        self,
        *,
        store: SessionStore | None = None,
        deps: Any = None,
        config: RunConfig | None = None,
        max_body_bytes: int = 32 * 1024 * 1024,
        body_timeout: float = 20.0,
    ) -> AGUIApp:
        """This agent as an ASGI app speaking AG-UI (``docs/web.md``): a POST of a ``RunAgentInput`` at its
        root path answers with the run's AG-UI events over SSE; the thread id is the session id of ``store``
        (conversations kept in memory without one); approvals are interrupts, answered by ``resume``.
        ``deps``: the runs' deps, or a callable of the Starlette ``Request`` (and the parsed input) that returns
        them, called before the thread is loaded or created (where an app authorizes the client's thread id:
        raising ``HTTPException(403)`` refuses it with nothing stored); ``config``: the runs'
        :class:`~loopctl.engine.RunConfig` (default: the agent's); ``max_body_bytes``: the largest request body
        read (a larger one is answered ``413``); ``body_timeout``: seconds a request body may take, plus one per
        500 bytes received (a slower one is answered ``408``); each must be above 0 (``ValueError``). Needs the
        ``[web]`` extra."""
        from loopctl.ui.ag_ui import AGUIApp

        return AGUIApp(
            self, store=store, deps=deps, config=config, max_body_bytes=max_body_bytes, body_timeout=body_timeout
        )

    def to_ai_sdk(
        self,
        *,
        store: SessionStore | None = None,
        deps: Any = None,
        config: RunConfig | None = None,
        max_body_bytes: int = 32 * 1024 * 1024,
        body_timeout: float = 20.0,
    ) -> AISDKApp:
        """This agent as an ASGI app speaking the Vercel AI SDK's UI message stream protocol, for ``useChat``
        (``docs/web.md``): a POST of a chat request (``{"id", "messages", "trigger"}``) at its root path answers
        with the run as a UI message stream; the chat id is the session id of ``store`` (conversations kept in
        memory without one); approvals are the protocol's tool approvals. ``deps``, ``config``,
        ``max_body_bytes`` and ``body_timeout`` as for :meth:`to_ag_ui`. Needs the ``[web]`` extra."""
        from loopctl.ui.ai_sdk import AISDKApp

        return AISDKApp(
            self, store=store, deps=deps, config=config, max_body_bytes=max_body_bytes, body_timeout=body_timeout
        )

    @contextlib.contextmanager
    def override(self, *, model: ModelClient | str | None = None, deps: Any = ...) -> Iterator[None]:
        """Within the block (in this task and the tasks it starts), runs of this agent use ``model`` and,
        when given, ``deps`` instead of their own: for tests of code that holds a module-level agent::

            with support_agent.override(model=ScriptedClient(["Hello!"])):
                assert handle_request("hi") == "Hello!"

        The agent itself is unchanged; runs elsewhere (other tasks, other threads) are not affected."""
        current = dict(_OVERRIDES.get() or {})
        current[id(self)] = _Override(model, None if deps is ... else deps, deps is not ...)
        token = _OVERRIDES.set(current)
        try:
            yield
        finally:
            _OVERRIDES.reset(token)

    # --- running --------------------------------------------------------------------------------------------

    @overload
    async def run(
        self: Agent[None, _O],
        prompt: str | Message | None = None,
        *,
        history: Sequence[Message] | None = None,
        session: Conversation[None, _O] | None = None,
        deps: None = None,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
        cancel: asyncio.Event | None = None,
    ) -> Run[_O]: ...
    @overload
    async def run(
        self,
        prompt: str | Message | None = None,
        *,
        history: Sequence[Message] | None = None,
        session: Conversation[AgentDepsT, AgentOutputT] | None = None,
        deps: AgentDepsT,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
        cancel: asyncio.Event | None = None,
    ) -> Run[AgentOutputT]: ...
    async def run(
        self,
        prompt: str | Message | None = None,
        *,
        history: Sequence[Message] | None = None,
        session: Conversation[Any, Any] | None = None,
        deps: Any = None,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
        cancel: asyncio.Event | None = None,
    ) -> Run[Any]:
        """Run the agent on ``prompt`` and return the :class:`~loopctl.engine.Run` (errors end the run rather
        than raise, as for :meth:`BareLoop.run <loopctl.engine.BareLoop.run>`; ``run.raise_for_outcome()``
        raises them). ``history`` continues a conversation from its messages (``run.messages`` of an earlier
        run); ``session`` runs on a conversation of :meth:`session` instead (so does ``session.run(...)``).
        ``deps`` go to tools and instructions; ``approvals`` continues a paused run of ``session``;
        ``config`` replaces the agent's run settings for this run; ``cancel`` stops it.

        Raises :class:`~loopctl.errors.SessionBusy` when ``session`` is running already, ``ValueError`` for
        both ``history`` and ``session``, a ``session`` of another agent, or a ``history`` whose last tool calls
        have no results, and
        :class:`~loopctl.errors.ApprovalError` for ``approvals`` without a session that is paused."""
        conv = self._conversation(history, session)
        run, _ = await conv._run(prompt, approvals, deps, config, cancel, None, None, None)
        return run

    @overload
    def run_sync(
        self: Agent[None, _O],
        prompt: str | Message | None = None,
        *,
        history: Sequence[Message] | None = None,
        session: Conversation[None, _O] | None = None,
        deps: None = None,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
    ) -> Run[_O]: ...
    @overload
    def run_sync(
        self,
        prompt: str | Message | None = None,
        *,
        history: Sequence[Message] | None = None,
        session: Conversation[AgentDepsT, AgentOutputT] | None = None,
        deps: AgentDepsT,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
    ) -> Run[AgentOutputT]: ...
    def run_sync(
        self,
        prompt: str | Message | None = None,
        *,
        history: Sequence[Message] | None = None,
        session: Conversation[Any, Any] | None = None,
        deps: Any = None,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
    ) -> Run[Any]:
        """:meth:`run` on a fresh event loop (the clients made from model strings, the sub-agents' and handoff
        targets' included, are closed at the end). Raises
        ``RuntimeError`` inside a running event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("run_sync() cannot be called inside a running event loop; await run() instead")

        async def go() -> Run[Any]:
            try:
                return await self.run(
                    prompt, history=history, session=session, deps=deps, approvals=approvals, config=config
                )
            finally:
                await self.aclose_reachable()  # a session= is this agent's (run refuses another's)

        return asyncio.run(go())

    @overload
    def stream(
        self: Agent[None, _O],
        prompt: str | Message | None = None,
        *,
        history: Sequence[Message] | None = None,
        session: Conversation[None, _O] | None = None,
        deps: None = None,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
    ) -> RunStream[_O]: ...
    @overload
    def stream(
        self,
        prompt: str | Message | None = None,
        *,
        history: Sequence[Message] | None = None,
        session: Conversation[AgentDepsT, AgentOutputT] | None = None,
        deps: AgentDepsT,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
    ) -> RunStream[AgentOutputT]: ...
    def stream(
        self,
        prompt: str | Message | None = None,
        *,
        history: Sequence[Message] | None = None,
        session: Conversation[Any, Any] | None = None,
        deps: Any = None,
        approvals: Mapping[str, Approval] | None = None,
        config: RunConfig | None = None,
    ) -> RunStream[Any]:
        """A run as an async context manager streaming its events, as :meth:`BareLoop.stream
        <loopctl.engine.BareLoop.stream>`::

            async with agent.stream("task") as stream:
                async for event in stream:      # RunStarted ... RunFinished; a sub-agent's as SubAgentEvent
                    ...
            run = await stream.result()

        The arguments are :meth:`run`'s. Leaving the block early cancels the run (sub-agents included)."""
        return self._conversation(history, session).stream(prompt, deps=deps, approvals=approvals, config=config)

    def _conversation(
        self, history: Sequence[Message] | None, session: Conversation[Any, Any] | None
    ) -> Conversation[Any, Any]:
        """The conversation a run of :meth:`run` or :meth:`stream` goes on: ``session``, or one made of
        ``history``. Raises ``ValueError`` for both, and for a ``session`` of another agent (it would run that
        agent, not this one)."""
        from loopctl.agent._conversation import Conversation

        if session is not None and history is not None:
            raise ValueError("pass history= or session=, not both")
        if session is None:
            return Conversation(self, None, history=history)
        if session.root is not self:
            raise ValueError(
                f"session= is a conversation of the agent {session.root.name!r}, not of {self.name!r} (a run "
                "would be that agent's): run it with session.run(...), or make one of this agent's with "
                "agent.session(...)"
            )
        return session


def _check_deps(deps_type: Any, tool: object) -> None:
    """Refuse a tool whose ``ToolContext[D]`` names a type that the agent's deps are not (what mypy reports
    for typed code, checked once more when the agent is made). Raises ``TypeError`` naming the tool."""
    wanted = getattr(tool, "deps_type", None)
    if not isinstance(wanted, type) or wanted in (object, type(None)) or not isinstance(deps_type, type):
        return
    if not issubclass(deps_type, wanted):
        given = "no deps_type" if deps_type is type(None) else f"deps_type={deps_type.__qualname__}"
        raise TypeError(
            f"tool {getattr(tool, 'name', tool)!r} takes ToolContext[{wanted.__qualname__}], but the agent has "
            f"{given}: its runs could not give the tool what it reads from ctx.deps"
        )
