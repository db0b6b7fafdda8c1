"""What observers of a run see: small, frozen, typed events.

An observer is any callable taking one :data:`LoopEvent`; the CLI is one. Observers are called on the event
loop, in order, and must not block; an exception in an observer propagates (it is a bug in the observer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any, TypeAlias, Union

from loopctl._frozen import dataclass
from loopctl.engine.run import Run
from loopctl.message import Message, ToolCallPart, ToolResultPart
from loopctl.providers.base import ModelRequest
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.stream import StreamEvent

__all__ = [
    "AgentHandoff",
    "CompactionFinished",
    "CompactionStarted",
    "LoopEvent",
    "ModelCallFailed",
    "ModelFallback",
    "ModelCallRetry",
    "ModelStreamEvent",
    "Observer",
    "OutputRetry",
    "PromptCacheBust",
    "ReplyDiscarded",
    "RunAborted",
    "RunFinished",
    "RunStarted",
    "SubAgentEvent",
    "ToolCallDeferred",
    "ToolCallFinished",
    "ToolProgress",
    "ToolCallStarted",
    "TurnFinished",
    "TurnStarted",
]


@dataclass(frozen=True, slots=True)
class RunStarted:
    """A run began with ``input``, on the loop's client: its ``provider`` (``"openai"``, ``"anthropic"``,
    ``"gemini"``...: :attr:`ModelClient.provider <loopctl.providers.ModelClient>`) and ``model``.
    ``resumed`` is true for a paused run continued with approvals (``input`` is then the run's first input)."""

    input: Message
    provider: str = ""
    model: str = ""
    resumed: bool = False
    agent: str = ""
    """The name of the :class:`~loopctl.agent.Agent` that runs (``""`` for a bare loop's run)."""


@dataclass(frozen=True, slots=True)
class TurnStarted:
    """Model call number ``turn`` (from 1) is about to be sent with ``messages`` messages.

    ``request`` is the whole :class:`~loopctl.providers.ModelRequest` (conversation, system prompt, tools and
    settings); ``provider`` and ``model`` name the client it goes to, ``api_url`` the URL it sends to (when the
    client has one: its ``api_url``); ``stream`` tells whether the reply is streamed. Retries of the call
    (:class:`ModelCallRetry`) send the same request again."""

    turn: int
    messages: int
    request: ModelRequest | None = None
    provider: str = ""
    model: str = ""
    stream: bool = False
    api_url: str | None = None


@dataclass(frozen=True, slots=True)
class PromptCacheBust:
    """Model call ``turn`` does not extend the request before it, so the provider's prompt cache cannot serve
    what came after the change (``docs/providers.md``, "Prompt caching"): ``what`` changed (``"tools"``,
    ``"system"`` or ``"messages"``), from message ``index`` on (``None`` for tools and system), and a readable
    ``reason`` (``"messages[2] (user) changed"``). Emitted after :class:`TurnStarted`, with the request the
    ``before_model`` hooks gave (a hook that edits an early message busts the cache); a compaction busts it
    too, by design."""

    turn: int
    what: str
    index: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class ModelStreamEvent:
    """A stream event of turn ``turn``'s reply (text and thinking deltas, tool-call starts...)."""

    turn: int
    event: StreamEvent


@dataclass(frozen=True, slots=True)
class ModelCallRetry:
    """Model call ``turn`` failed with a retryable ``error`` and will be retried (attempt ``attempt``, from
    1) after ``delay`` seconds. Anything streamed for this turn so far is void: the retry starts afresh.

    Named ``ModelRetry`` before 0.2; that name is a deprecated alias here (it now names the exception a tool
    raises to ask the model to try again: :class:`loopctl.tool.ModelRetry`)."""

    turn: int
    attempt: int
    error: Exception
    delay: float


@dataclass(frozen=True, slots=True)
class ReplyDiscarded:
    """The partial reply streamed so far for model call ``turn`` is void: the attempt failed and the call is
    sent again (``reason``: ``"retry"``, the same client; ``"fallback"``, the next client of a
    :class:`~loopctl.providers.FallbackClient`). ``text`` is the text it had streamed (to erase what was
    shown of it). Emitted only when something had streamed; a :class:`ModelCallRetry` or :class:`ModelFallback`
    follows. The turn's final reply (:class:`TurnFinished`) holds none of the discarded text."""

    turn: int
    reason: str
    text: str = ""


@dataclass(frozen=True, slots=True)
class ModelFallback:
    """Model call ``turn`` failed on ``from_provider``/``from_model`` with ``error`` and goes to the next
    client of the fallback chain, ``to_provider``/``to_model`` (at ``to_api_url``, when the client has one).
    Anything streamed for it so far is void."""

    turn: int
    error: Exception
    from_provider: str
    from_model: str
    to_provider: str
    to_model: str
    to_api_url: str | None = None


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """The model answered turn ``turn`` with ``message``; ``usage`` in tokens; ``duration`` in seconds."""

    turn: int
    message: Message
    usage: Usage
    stop_reason: StopReason
    duration: float
    response: ModelResponse | None = None
    """The whole reply (its ``id``, the ``model`` that answered, the provider's raw stop reason)."""


@dataclass(frozen=True, slots=True)
class ModelCallFailed:
    """Model call ``turn`` ended without a reply the conversation keeps, after ``duration`` seconds (retries
    included): ``error`` is the final error (a :class:`~loopctl.errors.LoopError` once retries are spent, or
    the reply the machine refused), or ``None`` when the run was cancelled during the call. No
    :class:`TurnFinished` follows."""

    turn: int
    error: Exception | None
    duration: float


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """A tool call is about to run (after the permission check). ``modified`` says it runs with
    ``modified_input`` (a :class:`~loopctl.engine.Modify` decision's) instead of the model's ``call.input``;
    :attr:`input` is the input it runs with, either way."""

    turn: int
    call: ToolCallPart
    modified: bool = False
    modified_input: Any = None

    @property
    def input(self) -> Any:
        """The input the tool runs with: the ``Modify``'s when ``modified``, else the model's."""
        return self.modified_input if self.modified else self.call.input


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """The running tool call ``call`` (of turn ``turn``) reported how far it has got
    (:meth:`ToolContext.report_progress <loopctl.tool.ToolContext.report_progress>`; an MCP server's
    ``notifications/progress``): ``progress`` grows as work is done, ``total`` when known, and ``message``, the
    tool's own words (untrusted text: show it inert). Comes between the call's :class:`ToolCallStarted` and
    :class:`ToolCallFinished`."""

    turn: int
    call: ToolCallPart
    progress: float
    total: float | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    """A tool call finished with ``result`` after ``duration`` seconds. ``error`` is the exception the tool
    raised (the result tells the model it failed), or the one that made its output unsendable; ``None``
    otherwise."""

    turn: int
    call: ToolCallPart
    result: ToolResultPart
    duration: float
    error: BaseException | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class ToolCallDeferred:
    """A tool call was deferred (a permission callback answered ``Defer``, or the tool requires approval):
    it does not run now; the run pauses once the turn's other calls are done (``AWAITING_APPROVAL``)."""

    turn: int
    call: ToolCallPart
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class CompactionStarted:
    """A prune (``reason``: ``"prune_line"``) or compaction pass (``"threshold"``, ``"emergency"``) begins,
    with the conversation estimated at ``tokens_before`` tokens. A :class:`CompactionFinished` follows."""

    reason: str
    tokens_before: int


@dataclass(frozen=True, slots=True)
class CompactionFinished:
    """A prune or compaction pass (``kind``: ``"prune"``, ``"truncate"``, ``"summarize"``...) ran; token
    estimates before and after."""

    kind: str
    reason: str
    tokens_before: int
    tokens_after: int


@dataclass(frozen=True, slots=True)
class OutputRetry:
    """Turn ``turn``'s answer was not valid typed output (``problems``: what the model is told); the model
    answers again (``attempt``: the retries so far, from 1), unless that was more than ``output_retries``
    allow, in which case the run ends with ``OUTPUT_INVALID``."""

    turn: int
    attempt: int
    problems: str


@dataclass(frozen=True, slots=True)
class RunFinished:
    """The run ended; ``run`` is the :class:`~loopctl.engine.Run` record."""

    run: Run[Any]


@dataclass(frozen=True, slots=True)
class SubAgentEvent:
    """An event of a sub-agent's run, in the stream and observers of the run that called it
    (:meth:`loopctl.agent.Agent.as_tool`): ``event`` is the sub-agent's own event, as its observers see it;
    ``path`` names the agents from the outermost run down to the one that emitted it (``("support",
    "researcher")``, :attr:`agent` ``"support > researcher"``); ``call_id`` is the id of the tool call, in the
    run one level up, that runs the sub-agent. A sub-agent's sub-agent's events arrive once, with the longer
    path (never wrapped twice)."""

    path: tuple[str, ...]
    call_id: str
    event: LoopEvent

    @property
    def agent(self) -> str:
        """The agent path as text: ``"support > researcher"``."""
        return " > ".join(self.path)


@dataclass(frozen=True, slots=True)
class AgentHandoff:
    """The model of agent ``from_agent`` handed the conversation to ``to_agent`` with ``call`` (its
    ``transfer_to_...`` tool, ``docs/agent.md``, "Handoffs"), in model call ``turn``: ``to_agent`` goes on with
    the conversation, with its own instructions, tools and output type. The events that follow are its run's;
    one :class:`RunFinished` ends them all."""

    turn: int
    call: ToolCallPart
    from_agent: str
    to_agent: str


@dataclass(frozen=True, slots=True)
class RunAborted:
    """The run raised ``error`` instead of returning a :class:`~loopctl.engine.Run` (``asyncio.CancelledError``
    from a cancelled task, or a bug); no :class:`RunFinished` follows. The conversation was salvaged first."""

    error: BaseException


LoopEvent: TypeAlias = Union[
    RunStarted,
    TurnStarted,
    PromptCacheBust,
    ModelStreamEvent,
    ModelCallRetry,
    ReplyDiscarded,
    ModelFallback,
    TurnFinished,
    ModelCallFailed,
    ToolCallStarted,
    ToolProgress,
    ToolCallFinished,
    ToolCallDeferred,
    CompactionStarted,
    CompactionFinished,
    OutputRetry,
    RunFinished,
    RunAborted,
    SubAgentEvent,
    AgentHandoff,
]
"""Any event an observer may see."""

Observer: TypeAlias = Callable[[LoopEvent], None]
"""A callable that takes each :data:`LoopEvent`."""


def _deprecated_alias(qualname: str) -> type[ModelCallRetry]:
    """:class:`ModelCallRetry`, after a ``DeprecationWarning`` that ``qualname`` (the old name the caller
    read: ``"loopctl.engine.ModelRetry"``...) is now ``ModelCallRetry``.

    The warning is attributed to the line of the caller's code that read the name (this package's
    ``__getattr__`` frames skipped), so Python's default filters, which show a ``DeprecationWarning`` only
    when ``__main__`` triggers it, show it to a script that uses the old name. The import system's own look
    (``hasattr`` in ``from loopctl.engine import ModelRetry``, before the statement reads the name) does not
    warn: the read that follows does, once.
    """
    import sys
    import warnings

    level, frame = 2, sys._getframe(1)  # level 1 is this function, 2 the __getattr__ that called it
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("loopctl.engine"):
        frame, level = frame.f_back, level + 1
    if "importlib" in frame.f_code.co_filename and "_bootstrap" in frame.f_code.co_filename:
        return ModelCallRetry
    warnings.warn(
        f"{qualname} is now ModelCallRetry (ModelRetry names the exception a tool raises: loopctl.tool.ModelRetry)",
        DeprecationWarning,
        stacklevel=level,
    )
    return ModelCallRetry


def __getattr__(name: str) -> Any:
    if name == "ModelRetry":  # the event's name before 0.2
        return _deprecated_alias(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
