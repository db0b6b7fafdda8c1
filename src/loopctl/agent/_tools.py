"""The tools an agent makes of other agents: a sub-agent as a tool, and a handoff's ``transfer_to_...`` tool.

:class:`AgentTool` runs another :class:`~loopctl.agent.Agent` in a conversation of its own when the model
calls it (``researcher.as_tool(...)``, or a plain agent among another's tools); :class:`Handoff` describes a
target the model may hand the whole conversation to (``Agent(handoffs=[...])``) and :class:`HandoffTool` is the
tool the model calls for it. Both do their work through the conversation that runs them
(:mod:`loopctl.agent._conversation`); nothing here does I/O by itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic

import orjson
from pydantic import BaseModel, TypeAdapter
from typing_extensions import TypeVar

from loopctl.engine.machine import OutcomeKind
from loopctl.message import Message
from loopctl.tool import ApprovalRequired, ToolContext, ToolDepsT_contra, ToolInputError, ToolOutput

if TYPE_CHECKING:
    from loopctl.agent._agent import Agent
    from loopctl.engine.run import Run

__all__ = ["AgentTool", "Handoff", "HandoffTool", "InputFilter"]

_TargetDepsT_contra = TypeVar("_TargetDepsT_contra", default=Any, contravariant=True)
_TargetOutputT_co = TypeVar("_TargetOutputT_co", default=Any, covariant=True)

InputFilter = Callable[[Sequence[Message]], Sequence[Message]]
"""What a handoff's target sees: a function of the conversation so far (ending with the reply that calls the
``transfer_to_...`` tool) that returns the messages to keep (it must keep that reply last)."""

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_INPUT_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The task or question for the agent, in full."}},
    "required": ["input"],
    "additionalProperties": False,
}


def safe_tool_name(text: str) -> str:
    """``text`` as a tool name providers take (letters, digits, ``_`` and ``-``, at most 64)."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_") or "agent"
    return name[:64]


class AgentTool(Generic[ToolDepsT_contra]):
    """A :class:`~loopctl.tool.Tool` that runs ``agent`` (a sub-agent) on the model's ``input`` text, in a
    conversation of its own, and answers with its output (typed output as JSON).

    Made by :meth:`Agent.as_tool <loopctl.agent.Agent.as_tool>`; a plain ``Agent`` among another agent's tools
    becomes one with the agent's ``name`` and ``description``. ``deps`` maps the calling run's deps to the
    sub-agent's (default: the same deps for a sub-agent that takes deps, ``None`` for one that takes none).

    Inside an agent's run the sub-agent's conversation is kept with the parent's (its own session in the
    parent's store, linked to it), its events reach the parent's stream with their agent path, its usage and
    cost count in the parent's run and limits, and a call of its tools that needs approval pauses the parent
    (``docs/agent.md``, "Sub-agents"). Called from a plain :class:`~loopctl.engine.BareLoop`, it runs the
    sub-agent in a fresh in-memory conversation each time.
    """

    __slots__ = ("_deps", "agent", "description", "input_schema", "name", "repeatable", "requires_approval")

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        name: str | None = None,
        description: str | None = None,
        deps: Callable[[Any], Any] | None = None,
    ) -> None:
        self.agent = agent
        self.name = name or safe_tool_name(agent.name)
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"a tool's name must be 1-64 letters, digits, '_' or '-', got {self.name!r}")
        self.description = (
            description or agent.description or f"Ask the agent {agent.name} to do a task and give its answer."
        )
        self.input_schema = _INPUT_SCHEMA
        self.requires_approval = False
        self.repeatable = False
        self._deps = deps

    def check_input(self, input: Any) -> None:  # noqa: A002 - the wire name
        """Refuse input that is not ``{"input": "<text>"}`` (:class:`~loopctl.tool.ToolInputError`)."""
        _prompt(input)

    def sub_deps(self, deps: Any) -> Any:
        """The deps the sub-agent runs with, for the calling run's ``deps``."""
        if self._deps is not None:
            return self._deps(deps)
        return None if self.agent.deps_type is type(None) else deps

    async def call(self, input: Any, context: ToolContext[ToolDepsT_contra]) -> Any:  # noqa: A002
        """Run the sub-agent (or continue its paused run) and give its answer. Raises
        :class:`~loopctl.tool.ApprovalRequired` when the sub-agent's run paused for approval.

        ``input`` is the model's arguments (``{"input": "<task>"}``) and ``context`` the call's
        :class:`~loopctl.tool.ToolContext` (the calling run's deps, mapped by ``deps``).
        """
        from loopctl.agent._conversation import run_sub_agent

        prompt = _prompt(input)
        run, pending = await run_sub_agent(self, prompt, context)
        return answer_of(self.agent.name, run, pending)

    def __repr__(self) -> str:
        return f"AgentTool(name={self.name!r}, agent={self.agent.name!r})"


def _prompt(input: Any) -> str:  # noqa: A002
    if not isinstance(input, dict) or not isinstance(input.get("input"), str) or set(input) - {"input"}:
        raise ToolInputError('invalid input: expected {"input": "<the task, as text>"}')
    text: str = input["input"]
    return text


def answer_of(name: str, run: Run[Any], pending: str | None) -> Any:
    """What a sub-agent's run gives the model: its output (typed output as JSON text), or an error result
    saying how it ended. Raises :class:`~loopctl.tool.ApprovalRequired` (``pending`` says what waits) for a
    run that paused inside an agent's run (``pending`` is ``None`` outside one: the pause is an error result
    then, as nothing could carry the paused sub-agent over to the approval)."""
    kind = run.outcome.kind
    if kind is OutcomeKind.AWAITING_APPROVAL and pending is None:
        # Run by a plain loop (no agent's conversation to keep the sub-agent's paused run in): approving the
        # call would run the sub-agent again from its start, and ask again. Say so instead.
        names = ", ".join(p.name for p in run.pending_approvals)
        return ToolOutput(
            f"The agent {name} needs approval of {names}, which cannot be given here: it runs as a plain loop's "
            "tool, not inside an agent's run.",
            is_error=True,
        )
    if kind is OutcomeKind.AWAITING_APPROVAL:
        raise ApprovalRequired(pending)
    if kind is OutcomeKind.COMPLETED:
        value = run.output
        if isinstance(value, str):
            return value
        if isinstance(value, BaseModel):
            return value.model_dump_json()
        return orjson.dumps(TypeAdapter(type(value)).dump_python(value, mode="json")).decode()
    why = run.outcome.error or kind.value
    return ToolOutput(f"The agent {name} did not finish its task ({kind.value}): {why}", is_error=True)


class Handoff(Generic[_TargetDepsT_contra, _TargetOutputT_co]):
    """A handoff target: the model may hand the conversation to ``agent`` by calling ``tool_name`` (default
    ``transfer_to_<agent name>``), described to it by ``description`` (default: the agent's description).
    ``input_filter`` decides what history the target sees (default: all of it; ``docs/agent.md``,
    "Handoffs"). A plain :class:`~loopctl.agent.Agent` in ``handoffs=`` is ``Handoff(agent)``."""

    __slots__ = ("agent", "description", "input_filter", "tool_name")

    def __init__(
        self,
        agent: Agent[_TargetDepsT_contra, _TargetOutputT_co],
        *,
        tool_name: str | None = None,
        description: str | None = None,
        input_filter: InputFilter | None = None,
    ) -> None:
        self.agent = agent
        self.tool_name = tool_name or safe_tool_name(f"transfer_to_{agent.name}")
        if not _NAME.fullmatch(self.tool_name):
            raise ValueError(f"a tool's name must be 1-64 letters, digits, '_' or '-', got {self.tool_name!r}")
        self.description = description or (
            f"Hand the conversation to the agent {agent.name}"
            + (f": {agent.description}" if agent.description else ".")
            + " It answers the user from here on."
        )
        self.input_filter = input_filter

    def __repr__(self) -> str:
        return f"Handoff({self.agent.name!r}, tool_name={self.tool_name!r})"


class HandoffTool:
    """The ``transfer_to_...`` tool of a :class:`Handoff`. Its calls never run as tools: the tool requires
    approval, so the driver defers each call, and the agent's conversation hands over when it sees one
    (``requires_approval`` keeps the engine unchanged: the pause is the handover point).

    ``handoff`` is the :class:`Handoff` the tool stands for (its agent, tool name and description).
    """

    __slots__ = ("description", "handoff", "input_schema", "name", "repeatable", "requires_approval")

    def __init__(self, handoff: Handoff[Any, Any]) -> None:
        self.handoff = handoff
        self.name = handoff.tool_name
        self.description = handoff.description
        self.input_schema: Mapping[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
        self.requires_approval = True
        self.repeatable = False

    async def call(self, input: Any, context: ToolContext[Any]) -> Any:  # noqa: A002
        """Not called by an agent's run (the handover happens instead); anywhere else, it says so.

        ``input`` and ``context`` are the :class:`~loopctl.tool.Tool` protocol's; neither is used.
        """
        return ToolOutput(
            f"The conversation cannot be handed to {self.handoff.agent.name} here (not inside an agent's run).",
            is_error=True,
        )

    def __repr__(self) -> str:
        return f"HandoffTool(name={self.name!r})"
