"""What the DBOS and Temporal adapters share: the rule for a loop's name, the stable names of its effects,
and the settings a durable loop holds for its effects.

Pure: no I/O.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic

from loopctl.agent._conversation import _tighter as tighter
from loopctl.agent._tools import AgentTool, answer_of
from loopctl.durable._payloads import (
    OutputValues,
    check_from_dict,
    error_from_dict,
    error_to_dict,
    pending_to_dict,
    record_to_dict,
    reply_from_dict,
)
from loopctl.engine.config import RunConfig, SessionConfig
from loopctl.engine.events import LoopEvent, Observer
from loopctl.engine.limits import RunUsage
from loopctl.engine.loop import BareLoop
from loopctl.engine.machine import OutcomeKind, OutputCheck
from loopctl.engine.permission import Approve, Modify, PendingApproval, PermissionCallback
from loopctl.engine.run import ModelReply, OutputT, Run, ToolCallRecord
from loopctl.errors import HookFailed
from loopctl.message import ToolCallPart, ToolResultPart
from loopctl.output import OutputPlan, OutputValidator
from loopctl.output import plan as plan_output
from loopctl.output import resolve as resolve_output
from loopctl.providers.base import ModelClient
from loopctl.response import ModelResponse, Usage
from loopctl.tool import Tool, ToolOutput, ToolProvider, ToolRegistry, ToolSpend, to_tool_output

if TYPE_CHECKING:
    from loopctl.agent import Agent

__all__ = [
    "NAME_RULE",
    "DurableLoop",
    "EffectNames",
    "LiveObserver",
    "RecordedVerdicts",
    "gate_sub_agent_call",
    "sub_agent_result",
    "sub_agent_tools",
    "tighter",
    "with_own_budget",
]

NAME_RULE = re.compile(r"[A-Za-z0-9_-]{1,200}")
"""A durable loop's name: 1-200 letters, digits, ``_`` or ``-`` (no ``.``: it separates the parts of the
names derived from it)."""


class EffectNames:
    """The stable names of a loop's effects (compatibility data: ``docs/durable.md``): ``model``
    (``<name>.model``), ``summarize`` (``<name>.summarize``), ``instructions`` (``<name>.instructions``)
    and :meth:`tool` (``<name>.tool.<tool>``). Raises ``ValueError`` for a name that breaks
    :data:`NAME_RULE` (unless ``check`` is false: a sub-agent's names, ``<loop name>.<tool name>``, are made
    of two checked names)."""

    __slots__ = ("instructions", "model", "name", "summarize")

    def __init__(self, name: str, *, check: bool = True) -> None:
        if check and not NAME_RULE.fullmatch(name):
            raise ValueError(
                "a durable loop's name must be 1-200 letters, digits, '_' or '-' (it prefixes the stable names "
                f"of its steps and activities), got {name!r}"
            )
        self.name = name
        self.model = f"{name}.model"
        self.summarize = f"{name}.summarize"
        self.instructions = f"{name}.instructions"

    def tool(self, tool_name: str) -> str:
        """The name of a call to the tool ``tool_name``."""
        return f"{self.name}.tool.{tool_name}"


class DurableLoop(Generic[OutputT]):
    """The settings of a durable loop: the model ``client``, the ``tools``, the session ``config``, the
    ``observers``, the ``permission`` callback and the ``hooks`` as :class:`~loopctl.engine.BareLoop` takes
    them; and what
    a plain loop takes per run but a durable loop holds for all its runs, because it is code that every
    worker recovering a run must have (``docs/durable.md``, "What a durable run takes"): the ``output_type``
    and ``output_validator`` of its runs (:mod:`loopctl.output`) and the ``deps`` handed to tools and
    instructions (kept in the worker, never in a record).

    Raises ``TypeError`` for an output type pydantic cannot describe and ``ValueError`` for an output tool
    named like one of the tools, here rather than when a run starts."""

    def __init__(
        self,
        client: ModelClient,
        tools: ToolRegistry | Iterable[Tool | ToolProvider],
        config: SessionConfig | None,
        observers: Sequence[Observer],
        permission: PermissionCallback | None,
        output_type: Any = None,
        output_validator: OutputValidator[Any] | None = None,
        deps: Any = None,
        hooks: Sequence[object] = (),
    ) -> None:
        self._client = client
        self._agent: Agent[Any, Any] | None = None  # a loop made from an agent takes its client from it
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.config = config or SessionConfig()
        self.observers = list(observers)
        self.permission = permission
        self.hooks = list(hooks)
        self.output_type: Any = output_type
        self.output_validator = output_validator
        self.deps: Any = deps
        mode = resolve_output(output_type)
        if mode is not None:
            made = plan_output(mode)  # raises TypeError for a type without a JSON Schema
            if made.tool is not None and made.tool.name in self.tools:
                raise ValueError(f"the output tool {made.tool.name!r} has the name of one of the loop's tools")
        self.output_values = OutputValues(output_type)

    @property
    def client(self) -> ModelClient:
        """The model client its effects call (a loop made from an :class:`~loopctl.agent.Agent`: the agent's,
        made from its model string on first use)."""
        return self._agent.client() if self._agent is not None else self._client

    def _sub_loop(self, tool: AgentTool[Any]) -> Any:
        """A loop of this loop's class with the settings of ``tool``'s sub-agent (its model, tools,
        instructions, output type, hooks, observers and permission; deps from ``tool.sub_deps``): the part
        ``_sub_agent`` of each engine shares. Raises ``ValueError`` for a sub-agent with handoffs (a
        durable loop does not run them)."""
        agent = tool.agent
        if agent.handoffs:
            raise ValueError(f"the sub-agent {agent.name!r} has handoffs, which a durable loop does not run")
        sub = type(self).__new__(type(self))
        client: Any = agent.model if isinstance(agent.model, ModelClient) else None
        DurableLoop.__init__(
            sub,
            client,
            agent.tool_list,
            agent.session_settings(),
            agent.observers,
            agent.permission,
            agent.output_type,
            agent.output_validator,
            tool.sub_deps(self.deps),
            agent.hooks,
        )
        sub._agent = agent
        return sub

    def run_config(self, config: RunConfig | None) -> RunConfig:
        """The :class:`~loopctl.engine.RunConfig` of a run given ``config``: the agent's run settings for a loop
        made from an agent (``config`` with the agent's limits when it sets none), else ``config`` or the
        default."""
        if self._agent is not None:
            return self._agent.run_settings(config)
        return config or RunConfig()


class _Proceed(BaseException):
    """What a :class:`_Gate`'s call raises: the checks before the call let it run, with ``input``. A
    ``BaseException``, so the tool runner's handling of a tool's failure lets it through."""

    def __init__(self, input: Any) -> None:  # noqa: A002 - the tool's name for it
        super().__init__("proceed")
        self.input = input


class _Gate:
    """Stands in for an :class:`~loopctl.agent.AgentTool` while the checks before its call run (the
    ``before_tool`` hooks, its ``requires_approval``, the permission callback): its call raises
    :class:`_Proceed`, as the sub-agent itself runs in workflow code."""

    __slots__ = ("description", "input_schema", "name", "repeatable", "requires_approval")

    def __init__(self, tool: AgentTool[Any]) -> None:
        self.name = tool.name
        self.description = tool.description
        self.input_schema = tool.input_schema
        self.requires_approval = tool.requires_approval
        self.repeatable = tool.repeatable

    async def call(self, input: Any, context: Any) -> Any:  # noqa: A002
        raise _Proceed(input)


async def gate_sub_agent_call(
    driver: BareLoop,
    turn: int,
    call: ToolCallPart,
    tool: AgentTool[Any],
    cfg: RunConfig,
    emit: Any,
    deps: Any,
    usage: Usage | None,
    approval: Approve | Modify | None,
) -> dict[str, Any]:
    """The checks before a call that runs a sub-agent, as for any tool call (``BareLoop._run_checked``: the
    ``before_tool`` hooks, the permission callback, or a later ``approval``), run by ``driver`` inside the
    step or activity named after the call's tool. Its JSON record: ``{"proceed": <input>}`` (run the sub-agent
    on it, a ``Modify``'s when one was given), ``{"pending": ...}`` (deferred), ``{"error": ...}`` (a hook
    failed), or the record of a call answered without running (blocked, denied)."""
    try:
        done = await BareLoop._run_checked(driver, turn, call, _Gate(tool), cfg, emit, deps, usage, approval)
    except _Proceed as go:
        return {"proceed": go.input}
    except HookFailed as exc:
        exc.call_id = call.id
        return {"error": error_to_dict(exc)}
    if isinstance(done, PendingApproval):
        return {"pending": pending_to_dict(done)}
    return record_to_dict(done)


def sub_agent_tools(tools: ToolRegistry) -> list[AgentTool[Any]]:
    """The tools of ``tools`` that run a sub-agent, which a durable loop runs inside its own run."""
    return [t for t in tools if isinstance(t, AgentTool)]


def sub_agent_result(
    tool: AgentTool[Any], turn: int, call: ToolCallPart, run: Run[Any], spent: RunUsage
) -> ToolCallRecord:
    """The record of the call ``call`` (of turn ``turn``) that ran ``tool``'s sub-agent inside a durable run: its
    answer (:func:`~loopctl.agent._tools.answer_of`; a run that waited past its approval timeout says so), what
    its run ``spent`` (counted by the calling run), and the run's duration."""
    if run.outcome.kind is OutcomeKind.AWAITING_APPROVAL:
        names = ", ".join(p.name for p in run.pending_approvals)
        value: Any = ToolOutput(
            f"The agent {tool.agent.name} waited for approval of {names} past its approval timeout; it did not "
            "finish its task.",
            is_error=True,
        )
    else:
        value = answer_of(tool.agent.name, run, None)
    out = to_tool_output(value)
    result = ToolResultPart(call_id=call.id, name=call.name, output=out.tool_content(), is_error=out.is_error)
    spend = ToolSpend(run.usage, run.cost, spent.requests, spent.tool_calls)
    return ToolCallRecord(call, result, run.duration, spent=spend)


class LiveObserver:
    """``observer``, called only for the events emitted while ``live()`` is true: outside the replay of
    recorded steps, so a recovered run's observers see each event once."""

    __slots__ = ("live", "observer")

    def __init__(self, observer: Observer, live: Callable[[], bool]) -> None:
        self.observer = observer
        self.live = live

    def __call__(self, event: LoopEvent) -> None:
        """Pass ``event`` on when it is live."""
        if self.live():
            self.observer(event)


def with_own_budget(config: SessionConfig) -> SessionConfig:
    """``config`` with a private copy of its budget. The token counter calibrates itself as replies come in;
    a run that starts from a copy counts (and so prunes and compacts) the same way each time it is run again
    against its records."""
    if config.budget is None:
        return config
    return dataclasses.replace(config, budget=copy.deepcopy(config.budget))


class RecordedVerdicts(BareLoop):
    """The workflow side of a durable run's model call: the output check ran in the recorded model step (or
    activity), beside the reply, so the validator never runs in workflow code; :meth:`_reply_from` reads the
    record and keeps its verdict, which :meth:`_check_reply` then hands back for that same reply."""

    _verdict: tuple[ModelResponse, Any] | None = None

    def _reply_from(self, out: dict[str, Any], values: OutputValues) -> ModelReply:
        """The :class:`ModelReply` of a model step's record ``out``, keeping its output verdict (an error,
        or a check as :func:`check_from_dict` reads it with ``values``) for :meth:`_check_reply`."""
        reply = reply_from_dict(out)
        if "output_error" in out:
            self._verdict = (reply.response, error_from_dict(out["output_error"]))
        elif "output" in out:
            self._verdict = (reply.response, check_from_dict(out["output"], values))
        return reply

    async def _check_reply(
        self, plan: OutputPlan, response: ModelResponse, validator: OutputValidator[Any] | None
    ) -> tuple[OutputCheck | None, Any, list[str]]:
        verdict, self._verdict = self._verdict, None
        assert verdict is not None
        assert verdict[0] is response
        if isinstance(verdict[1], BaseException):
            raise verdict[1]
        checked: tuple[OutputCheck | None, Any, list[str]] = verdict[1]
        return checked
