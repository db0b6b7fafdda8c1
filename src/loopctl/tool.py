"""Tools: what the model may call, and how a call becomes a result.

- :class:`ToolSchema` is the provider-neutral description the request builders convert to each provider's
  dialect.
- :class:`Tool` is the protocol the engine runs: a name, a description, an input schema, and an async
  ``call``. :func:`tool` builds one from a plain function, its type hints and its docstring (pydantic makes
  the schema and validates the model's input against it before the call).
- :class:`ToolOutput` is what a tool may return to say more than text: images, ``is_error``, and a
  ``retention`` class (``docs/compaction.md``, "Retention classes": ``Requery`` for re-derivable results
  such as a file read, ``Durable`` for results that are not).
- :class:`ToolRegistry` holds the tools of a loop, with their schemas computed once. A
  :class:`ToolProvider` (an MCP server, :mod:`loopctl.mcp`) stands for several tools whose list may change.

Nothing here touches the network; a tool's own body may do anything.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import field
from decimal import Decimal
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    Protocol,
    TypeAlias,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    overload,
    runtime_checkable,
)

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from typing_extensions import TypeVar

from loopctl._frozen import dataclass
from loopctl._lazy import LazyModule
from loopctl.message import ImagePart, Retention, TextPart, ToolContent
from loopctl.response import Usage

if TYPE_CHECKING:
    import docstring_parser

    import loopctl.engine.limits
else:  # the annotations' modules, imported when an annotation is read (loopctl._lazy)
    loopctl = LazyModule("loopctl")

__all__ = [
    "ApprovalRequired",
    "DepsT",
    "ForceTool",
    "FunctionTool",
    "RunContext",
    "Tool",
    "ToolChoice",
    "ModelRetry",
    "ToolContext",
    "ToolInputError",
    "ToolOutput",
    "ToolProvider",
    "ToolRegistry",
    "ToolSchema",
    "ToolSpend",
    "check_tool_choice",
    "tool",
]

_log = logging.getLogger("loopctl.tool")


@dataclass(frozen=True, slots=True)
class ToolSchema:
    """A tool as the model sees it: ``name``, a ``description`` and a JSON Schema for its input.

    ``input_schema`` is a JSON Schema object (``{"type": "object", "properties": {...}, "required": [...]}``)
    in full JSON Schema; each request builder converts it to its provider's dialect.
    """

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(frozen=True, slots=True)
class ForceTool:
    """A ``tool_choice`` that makes the model call the tool ``name``."""

    name: str


ToolChoice: TypeAlias = Union[Literal["auto", "none", "required"], ForceTool]
"""``"auto"`` (the model decides), ``"none"`` (no tool calls), ``"required"`` (at least one call, any tool),
or :class:`ForceTool` (that tool)."""


def check_tool_choice(choice: object) -> None:
    """Refuse a ``tool_choice`` that is not a :data:`ToolChoice` (``None`` is fine: the provider's default).
    Raises ``ValueError``; every request and run checks its own, so no codec meets one (they disagreed on
    what to do with it).

    ``choice`` is the value to check.
    """
    if choice is None or choice in ("auto", "none", "required"):
        return
    if isinstance(choice, ForceTool) and isinstance(choice.name, str) and choice.name:
        return
    raise ValueError(f"tool_choice must be 'auto', 'none', 'required' or ForceTool(name), not {choice!r}")


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool returns when plain text is not enough.

    ``content`` is text, or a sequence of :class:`~loopctl.message.TextPart` / :class:`~loopctl.message.ImagePart`
    (a multipart result: the standard way to hand the model a picture). ``is_error=True`` makes the result an
    error result: the model reads ``content`` as the tool's failure (each provider's own flag: Anthropic's
    ``is_error``, the text of a failed call elsewhere), exactly as written, with no prefix; the run goes on.
    Return it for a failure the tool expected (a file that is not there, a query that found nothing it can
    use); raise :class:`ModelRetry` from deep inside a tool for the same effect. ``retention`` tags how
    compaction may treat the result (``None`` untagged, ``Retention.REQUERY``, ``Retention.DURABLE``).

    A tool that *raises* anything else fails: the model reads ``Tool 'name' failed: TypeError: ...``.
    """

    content: str | Sequence[TextPart | ImagePart] | ToolContent = ""
    is_error: bool = False
    retention: Retention | None = None

    def tool_content(self) -> ToolContent:
        """The content as a :class:`~loopctl.message.ToolContent`. A lone surrogate in text content (a file
        name decoded with ``surrogateescape``, text cut inside a pair) becomes U+FFFD: the message model
        refuses such a string, and no provider could be sent it."""
        c = self.content
        if isinstance(c, ToolContent):
            return c
        if isinstance(c, str):
            return ToolContent.from_string(valid_unicode(c))
        return ToolContent.from_multipart(c)


DepsT = TypeVar("DepsT", default=Any)
"""The type of a run's ``deps`` (``loop.run(..., deps=obj)``)."""

DepsT_co = TypeVar("DepsT_co", default=Any, covariant=True)
"""The deps type of a :class:`ToolContext` (covariant: a context holding a ``Deps`` is a context of
``object``)."""

ToolDepsT_contra = TypeVar("ToolDepsT_contra", default=Any, contravariant=True)
"""The deps type a tool runs with (contravariant: a tool that needs no deps, ``Tool[object]``, runs with any)."""

_D = TypeVar("_D")
_P = ParamSpec("_P")


class ModelRetry(Exception):
    """Raised by a tool to ask the model to try again: the exception's message is the call's (error) result,
    exactly as given, without the ``Tool 'x' failed: TypeError:`` prefix that any other exception gets. Use
    it for what the model can fix: ``raise ModelRetry("No user 'bob'; the users are alice and carol.")``.
    The run goes on (loop detection still stops a model that repeats the same call)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ApprovalRequired(Exception):
    """Raised by a tool to defer its own call until someone approves it: the call gets no result, and the run
    pauses once the turn's other calls are done (outcome ``AWAITING_APPROVAL``), as for a ``Defer`` decision
    of the permission callback. ``reason`` is shown to whoever decides. A call that was approved runs its
    tool again (a tool that raises again pauses the run again); a sub-agent's tool raises it when its own run
    paused for approval (:meth:`loopctl.agent.Agent.as_tool`)."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason or "the call needs approval")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ToolSpend:
    """What a tool call spent on model calls of its own (a sub-agent's run): ``usage`` in tokens, its ``cost``
    in USD (``None``: unknown), the model ``requests`` made and the ``tool_calls`` run. The run that called
    the tool counts it in :attr:`~loopctl.engine.Run.usage`, :attr:`~loopctl.engine.Run.cost` and its usage
    limits."""

    usage: Usage = field(default_factory=Usage)
    cost: Decimal | None = Decimal(0)
    requests: int = 0
    tool_calls: int = 0

    def plus(self, other: ToolSpend) -> ToolSpend:
        """Both spends together (a cost unknown in either is unknown).

        ``other`` is the spend to add.
        """
        cost = None if self.cost is None or other.cost is None else self.cost + other.cost
        return ToolSpend(
            self.usage + other.usage, cost, self.requests + other.requests, self.tool_calls + other.tool_calls
        )


def valid_unicode(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (``text`` itself when it has none)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


@dataclass(frozen=True, slots=True)
class RunContext(Generic[DepsT]):
    """What instructions (``SessionConfig(instructions=callable)``) know about the run they are made for: the
    run's ``deps`` (``loop.run(..., deps=obj)``; ``None`` when none were given), its ``usage`` so far
    (tokens) and its ``turn`` (model calls made, 0 before the first)."""

    deps: DepsT
    usage: Usage = field(default_factory=Usage)
    turn: int = 0


class _StopFlag:
    """A flag set once, read from any thread: a bool attribute (a store and a load of one reference are atomic),
    cheaper to make than a ``threading.Event`` on every call and enough, as nothing waits on it."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


@dataclass(frozen=True, slots=True)
class ToolContext(Generic[DepsT_co]):
    """What a running tool may know about its call: the provider's ``call_id``, the tool ``name``, the run's
    ``deps`` (``loop.run(..., deps=obj)``; ``None`` when none were given), its ``usage`` so far (tokens, the
    replies before this call) and the ``turn`` (the model call, from 1) that made the call. ``limits``: what was
    left of the run's usage limits when the call started (``None``: no limits), for a tool that makes model calls
    of its own (:meth:`next_model_call_limit`).

    A tool gets it by annotating a parameter ``ToolContext[D]`` (``D`` the deps' type, checked by mypy in the
    tool's body); that parameter is not part of the schema the model sees.

    :attr:`stop_requested` turns true when the engine gave up on the call (its timeout passed, or the run was
    cancelled). A coroutine is cancelled then anyway; a plain function running in a worker thread cannot be
    stopped from outside, so a long one should poll it and return early.
    """

    call_id: str
    name: str
    deps: DepsT_co = None  # type: ignore[assignment]
    usage: Usage = field(default_factory=Usage)
    turn: int = 0
    limits: loopctl.engine.limits.UsageLimits | None = None
    _stop: _StopFlag = field(default_factory=_StopFlag, repr=False, compare=False)
    _spend: list[ToolSpend] = field(default_factory=list, repr=False, compare=False)
    _progress: Callable[[float, float | None, str | None], None] | None = field(
        default=None, repr=False, compare=False
    )

    def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Tell the run how far the call has got: ``progress`` (growing as work is done), ``total`` when known,
        and a ``message``. The run's observers and stream get a :class:`~loopctl.engine.ToolProgress` event
        (nothing happens when nobody listens). Call it from the tool's own task."""
        if self._progress is not None:
            self._progress(progress, total, message)

    def record_usage(
        self, usage: Usage, *, cost: Decimal | None, requests: int = 0, tool_calls: int = 0
    ) -> None:
        """Count model calls the tool made itself (a sub-agent's run, a summary it asked for) in the run that
        called it: ``usage`` in tokens, ``cost`` in USD (``None``: unknown), ``requests`` and ``tool_calls``.
        They join :attr:`~loopctl.engine.Run.usage` and :attr:`~loopctl.engine.Run.cost`, and count against
        the run's usage limits once the call's result is in."""
        self._spend.append(ToolSpend(usage, cost, requests, tool_calls))

    def next_model_call_limit(self) -> loopctl.engine.limits.LimitDimension | None:
        """The run's usage limit that one more model call of the tool's own would pass, counting what the call
        recorded so far (:meth:`record_usage`), or ``None`` when it may make one. A ``requests`` limit leaves no
        room once the call's requests reach what was left of it; a token or cost limit once what the call spent
        reaches what was left (the next call's size is not known before it is made; a tool that can should also
        cap its ``max_tokens`` at the output tokens left). An unknown cost under a cost limit leaves no room."""
        left = self.limits
        if left is None:
            return None
        spent = self.spent or ToolSpend()
        if left.requests is not None and spent.requests + 1 > left.requests:
            return "requests"
        counts = {
            "input_tokens": spent.usage.input_tokens or 0,
            "output_tokens": spent.usage.output_tokens or 0,
            "total_tokens": (spent.usage.input_tokens or 0) + (spent.usage.output_tokens or 0),
        }
        tokens: tuple[loopctl.engine.limits.LimitDimension, ...] = ("input_tokens", "output_tokens", "total_tokens")
        for dimension in tokens:
            limit = getattr(left, dimension)
            if limit is not None and counts[dimension] >= limit:
                return dimension
        if left.cost is not None and (spent.cost is None or spent.cost >= left.cost):
            return "cost"
        return None

    @property
    def spent(self) -> ToolSpend | None:
        """What :meth:`record_usage` recorded, together (``None``: nothing)."""
        if not self._spend:
            return None
        total = self._spend[0]
        for more in self._spend[1:]:
            total = total.plus(more)
        return total

    @property
    def stop_requested(self) -> bool:
        """True once the engine no longer waits for this call (thread-safe)."""
        return self._stop.is_set()

    def request_stop(self) -> None:
        """Ask the tool to stop (the engine calls this when it gives up on the call)."""
        self._stop.set()


class ToolInputError(ValueError):
    """The model's input does not fit the tool's schema; the text names the field. The engine sends it back
    to the model as an error result."""


@runtime_checkable
class Tool(Protocol[ToolDepsT_contra]):
    """Anything the engine can run: ``name``, ``description``, ``input_schema`` (a JSON Schema object), and
    ``async call(input, context)`` returning a ``str``, a :class:`ToolOutput`, or any JSON value (sent as
    JSON text). Raising :class:`ToolInputError` reports bad input, :class:`ModelRetry` gives the model its
    message as the error result, :class:`ApprovalRequired` defers the call; any other exception becomes an
    error result the model can read (``Tool 'x' failed: TypeError: ...``). ``Tool[D]`` is a tool that runs
    with deps of type ``D`` (``context.deps``): an :class:`~loopctl.agent.Agent` with ``deps_type=D`` takes it.

    A tool with a ``requires_approval`` attribute that is ``True`` has every call deferred until it is
    approved (``loop.run(approvals=...)``: ``docs/guardrails.md``, "Approvals that wait"). A tool with a
    ``check_input(input)`` method (raising :class:`ToolInputError`) has a ``Modify`` approval's input checked
    by it when the approval is given. A tool with a ``repeatable`` attribute that is ``True`` has its calls left
    out of loop detection (the same call is expected to give new results: polling)."""

    @property
    def name(self) -> str:
        """The name the model calls the tool by."""
        ...

    @property
    def description(self) -> str:
        """What the tool does, for the model."""
        ...

    @property
    def input_schema(self) -> Mapping[str, Any]:
        """JSON Schema of the input object."""
        ...

    def call(self, input: Any, context: ToolContext[ToolDepsT_contra]) -> Awaitable[Any]:  # noqa: A002 - the wire name
        """Run the tool on the model's ``input``.

        ``context`` is the call's :class:`ToolContext` (deps, the run's usage, the call id, a way to stop the run).
        """
        ...


def schema_of(t: Tool) -> ToolSchema:
    """The :class:`ToolSchema` of a tool: for a :class:`FunctionTool`, the same object each time while its
    ``name``, ``description`` and ``input_schema`` are the same objects and the schema's contents are what they
    were (a schema edited in place, a new ``enum`` for one, makes a new object), so that what a client converts
    once per tool schema (the request's tools array) is converted once per tool, not once per loop or agent
    run."""
    if type(t) is FunctionTool:
        input_schema = t.input_schema
        try:
            # Its JSON, exactly (True, 1 and 1.0 differ; key order counts): a client's conversion of the
            # tools is kept while the schema object is the same, so an edit in place must make a new one.
            written = orjson.dumps(input_schema)
        except TypeError:  # not what orjson writes (a Mapping that is no dict, a big integer): made anew
            return ToolSchema(name=t.name, description=t.description, input_schema=input_schema)
        kept = t._schema
        if kept is not None:
            held, held_written = kept
            if (
                held.name is t.name
                and held.description is t.description
                and held.input_schema is input_schema
                and held_written == written
            ):
                return held
        held = ToolSchema(name=t.name, description=t.description, input_schema=input_schema)
        t._schema = (held, written)
        return held
    return ToolSchema(name=t.name, description=t.description, input_schema=t.input_schema)


class FunctionTool(Generic[ToolDepsT_contra]):
    """A :class:`Tool` made from a Python function by :func:`tool`.

    The input model is built once from the function's signature; each call validates the model's input
    against it (raising :class:`ToolInputError` naming the field) before the function runs. A plain ``def``
    runs in a worker thread (so blocking I/O does not stall the loop) unless ``inline=True``; an
    ``async def`` runs on the loop. A parameter annotated :class:`ToolContext` (or ``ToolContext[D]``)
    receives the call's context, the run's ``deps`` included, and is not part of the schema.
    ``requires_approval=True`` defers every call of the tool until it is approved (``loop.run(approvals=...)``).
    ``repeatable=True`` exempts its calls from loop detection (a polling tool: the same call, new results).

    ``fn`` is the function (sync or async); ``name`` and ``description`` override the function's name and its
    docstring's first paragraph.

    ``FunctionTool[D]`` is the tool of a function whose first parameter is a ``ToolContext[D]`` (mypy infers
    ``D``); a function without one makes a ``FunctionTool[object]``, which runs with any deps. (Put the
    context first: one in another position is typed ``object`` too, and mypy cannot check its deps.)
    """

    __slots__ = (
        "_context_param",
        "_fn",
        "_inline",
        "_is_async",
        "_model",
        "_plain",
        "_positional",
        "_schema",
        "deps_type",
        "description",
        "input_schema",
        "name",
        "repeatable",
        "requires_approval",
    )

    @overload
    def __init__(
        self: FunctionTool[_D],
        fn: Callable[Concatenate[ToolContext[_D], _P], Any],
        *,
        name: str | None = None,
        description: str | None = None,
        inline: bool = False,
        requires_approval: bool = False,
        repeatable: bool = False,
    ) -> None: ...
    @overload
    def __init__(
        self: FunctionTool[object],
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        inline: bool = False,
        requires_approval: bool = False,
        repeatable: bool = False,
    ) -> None: ...
    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        inline: bool = False,
        requires_approval: bool = False,
        repeatable: bool = False,
    ) -> None:
        self._fn = fn
        # schema_of's, and its input schema's JSON, kept while the fields it was made of are unchanged
        self._schema: tuple[ToolSchema, bytes] | None = None
        self._is_async = inspect.iscoroutinefunction(fn)
        self._inline = inline
        self.requires_approval = requires_approval
        self.repeatable = repeatable
        self.name = name or fn.__name__
        summary, param_docs = _parse_docstring(inspect.getdoc(fn) or "")
        self.description = description if description is not None else summary
        if description is None and not summary:
            # The model sees only the name and the schema: it guesses when to call the tool, or never does.
            _log.warning("tool %r has no description: give its function a docstring, or description=...", self.name)
        self._model, self._context_param, deps = _input_model(fn, self.name, param_docs)
        self._plain = _plain_fields(self._model)
        params = inspect.signature(fn).parameters.values()
        self._positional = tuple(p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_ONLY)
        """The function's positional-only parameters, in order: passed by position (they cannot be by name)."""
        self.deps_type: Any = deps
        """The ``D`` of the function's ``ToolContext[D]`` parameter (``None``: it has none, or names no type)."""
        schema = self._model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            if isinstance(prop, dict):
                prop.pop("title", None)
        self.input_schema: Mapping[str, Any] = schema

    def check_input(self, input: Any) -> None:  # noqa: A002 - the wire name
        """Validate ``input`` against the tool's schema without running it (the engine checks a ``Modify``
        approval's input so). Raises :class:`ToolInputError` naming the field."""
        self._parse(input)

    def _parse(self, input: Any) -> BaseModel:  # noqa: A002
        if not isinstance(input, dict):
            raise ToolInputError(f"expected a JSON object as input, got {type(input).__name__}")
        try:
            return self._model.model_validate(input)
        except ValidationError as exc:
            raise ToolInputError(_describe_validation(exc)) from None

    def _plain_kwargs(self, input: Any) -> dict[str, Any] | None:  # noqa: A002
        """The function's keyword arguments for ``input`` without the input model, when the model would give
        them unchanged: every field a plain type (``str``, ``int``, ``float``, ``bool``, or unannotated /
        ``Any``) without constraints, ``input`` a ``dict`` of exactly those types (a ``float`` field given an
        ``int`` is converted by the model: not here), no key that is no field, a missing one's default an
        immutable scalar. ``None`` otherwise: the input model decides (and names what is wrong). The input of a
        tool call was checked as JSON when its reply entered; this keeps the model's result, value and type
        (``docs/performance.md``, section 7)."""
        plain = self._plain
        if plain is None or type(input) is not dict:
            return None
        kwargs: dict[str, Any] = {}
        found = 0
        for name, kind, default in plain:
            if name in input:
                value = input[name]
                if kind is not None and type(value) is not kind:
                    return None
                kwargs[name] = value
                found += 1
            elif default is _REQUIRED:
                return None
            else:
                kwargs[name] = default
        return kwargs if found == len(input) else None

    async def call(self, input: Any, context: ToolContext[ToolDepsT_contra]) -> Any:  # noqa: A002 - the wire name
        """Validate ``input`` and run the function. Raises :class:`ToolInputError` for bad input.

        ``context`` is the call's :class:`ToolContext`, handed to a function that takes one.
        """
        kwargs = self._plain_kwargs(input)
        if kwargs is None:
            parsed = self._parse(input)
            kwargs = {k: getattr(parsed, k) for k in type(parsed).model_fields}
        if self._context_param is not None:
            kwargs[self._context_param] = context
        args = self._positional_args(kwargs) if self._positional else ()
        if self._is_async:
            return await self._fn(*args, **kwargs)
        if self._inline:
            return self._fn(*args, **kwargs)
        return await asyncio.to_thread(self._fn, *args, **kwargs)

    def _positional_args(self, kwargs: dict[str, Any]) -> list[Any]:
        """The function's positional-only arguments, taken out of ``kwargs`` in order (they cannot be passed by
        name); a missing one, which has a default, ends them: the ones after it have defaults too."""
        args = []
        for name in self._positional:
            if name not in kwargs:
                break
            args.append(kwargs.pop(name))
        return args

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (no validation)."""
        return self._fn(*args, **kwargs)

    @property
    def runs_in_thread(self) -> bool:
        """True for a plain ``def`` without ``inline=True``: it runs in a worker thread, which cannot be
        stopped from outside (a timeout gives up waiting for it; it may go on running)."""
        return not self._is_async and not self._inline

    def __repr__(self) -> str:
        return f"FunctionTool(name={self.name!r})"


class ToolDecorator(Protocol):
    """What ``@tool(...)`` with options returns: called on a function, the :class:`FunctionTool` made from it
    (typed by its ``ToolContext[D]`` parameter, as :func:`tool` is)."""

    @overload
    def __call__(self, fn: Callable[Concatenate[ToolContext[_D], _P], Any], /) -> FunctionTool[_D]: ...
    @overload
    def __call__(self, fn: Callable[..., Any], /) -> FunctionTool[object]: ...


@overload
def tool(fn: Callable[Concatenate[ToolContext[_D], _P], Any], /) -> FunctionTool[_D]:
    """``@tool`` on a function whose first parameter is its ``ToolContext[D]``: a tool that runs with deps
    ``D``."""


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool[object]:
    """``@tool`` on a function without a leading ``ToolContext[D]``: a tool that runs with any deps."""


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    inline: bool = False,
    requires_approval: bool = False,
    repeatable: bool = False,
) -> ToolDecorator:
    """``@tool(...)`` with options: a decorator that makes the :class:`FunctionTool`."""


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    inline: bool = False,
    requires_approval: bool = False,
    repeatable: bool = False,
) -> FunctionTool[Any] | ToolDecorator:
    """Make a :class:`Tool` from a function: ``@tool`` or ``@tool(name=..., description=..., inline=...,
    requires_approval=..., repeatable=...)``.

    The schema comes from the type hints (pydantic); the description from the docstring's summary and long
    description; each parameter's description from the docstring's parameter section, in any of the three
    styles Python uses (Google ``Args:``, NumPy ``Parameters``, Sphinx ``:param x:``; read by
    ``docstring_parser``), or from ``Annotated[T, Field(description=...)]``, which wins over the docstring.
    Defaults make a parameter optional.
    ``requires_approval=True`` defers every call until it is approved; ``repeatable=True`` exempts the tool's
    calls from loop detection, for a tool called the same way for new results (polling a job's status, a
    growing log): ``docs/guardrails.md``.

    ``fn`` is the function, when used bare (``@tool``); ``inline=True`` runs a sync function on the event
    loop rather than in a worker thread (for a quick function that must not leave the loop's thread).
    """
    if fn is not None:
        return FunctionTool(
            fn,
            name=name,
            description=description,
            inline=inline,
            requires_approval=requires_approval,
            repeatable=repeatable,
        )

    def wrap(f: Callable[..., Any]) -> FunctionTool[Any]:
        return FunctionTool(
            f,
            name=name,
            description=description,
            inline=inline,
            requires_approval=requires_approval,
            repeatable=repeatable,
        )

    return wrap


@runtime_checkable
class ToolProvider(Protocol):
    """A source of several tools whose list may change while it is used (an MCP server: its
    ``tools/list_changed`` notification). ``tools`` is the current list; a provider hands out a new sequence
    object when the list changes, and the same object while it does not."""

    @property
    def tools(self) -> Sequence[Tool]:
        """The tools as they are now."""
        ...


class ToolRegistry:
    """The tools of a loop, by name, with their schemas computed once.

    Takes tools and :class:`ToolProvider` values (their tools join in place, in order). A provider's list is
    re-read on every lookup and the registry rebuilt when it changed, so a changed MCP tool list takes effect
    at the next model call. Raises ``ValueError`` for two tools with the same name when it is made.

    A name, once held, keeps its holder: when a provider's new list brings a name another entry already holds
    (an MCP server announcing a tool named like a local one, or like another server's), the new tool is left
    out and a warning is logged (logger ``loopctl.tool``), so a server can never take over a call meant for
    another tool. A name whose holder no longer offers it goes to the first entry, in registration order, that
    does; an entry's own new version of a tool it holds replaces the old one.
    """

    __slots__ = ("_entries", "_holders", "_names", "_provided", "_providers", "_reported", "_schemas", "_tools")

    def __init__(self, tools: Iterable[Tool | ToolProvider] = ()) -> None:
        # Each entry is a tool, or a provider (anything with a ``tools`` list that is not itself a tool).
        self._entries: list[Tool | ToolProvider] = list(tools)
        self._providers: list[ToolProvider] = [t for t in self._entries if _is_provider(t)]  # type: ignore[misc]
        self._provided: list[Sequence[Tool]] = []
        self._holders: dict[str, int] = {}  # name -> the index of the entry holding it
        self._reported: set[tuple[int, str]] = set()  # (entry, name) left out, already logged
        self._build(strict=True)

    def _build(self, strict: bool) -> None:
        offered: list[tuple[int, Tool]] = []
        provided: list[Sequence[Tool]] = []
        for index, entry in enumerate(self._entries):
            group: Sequence[Tool]
            if _is_provider(entry):
                group = entry.tools  # type: ignore[union-attr]
                provided.append(group)
            else:
                group = (entry,)  # type: ignore[assignment]
            offered += ((index, t) for t in group)
        # Who holds each name: its holder so far if that entry still offers it, else the first entry that does.
        by_entry = {(index, t.name) for index, t in offered}
        holders: dict[str, int] = {}
        for index, t in offered:
            if t.name in holders:
                if strict:
                    raise ValueError(f"two tools are named {t.name!r}")
                continue
            previous = self._holders.get(t.name)
            holders[t.name] = previous if previous is not None and (previous, t.name) in by_entry else index
        tools: dict[str, Tool] = {}
        for index, t in offered:
            if holders[t.name] != index:
                if (index, t.name) not in self._reported:
                    self._reported.add((index, t.name))
                    _log.warning(
                        "tool %r of %r is left out: the name is already held by %r",
                        t.name,
                        self._entries[index],
                        self._entries[holders[t.name]],
                    )
                continue
            tools.setdefault(t.name, t)
        self._tools = tools  # in registration order: a tool's place is its entry's place
        self._holders = holders
        self._provided = provided
        self._schemas = tuple(schema_of(t) for t in self._tools.values())
        self._names = frozenset(self._tools)

    def _current(self) -> None:
        providers = self._providers
        if providers and any(p.tools is not seen for p, seen in zip(providers, self._provided, strict=True)):
            self._build(strict=False)

    @property
    def schemas(self) -> tuple[ToolSchema, ...]:
        """The schemas, in registration order."""
        self._current()
        return self._schemas

    @property
    def names(self) -> frozenset[str]:
        """The tool names."""
        self._current()
        return self._names

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or ``None``."""
        self._current()
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        self._current()
        return name in self._tools

    def __len__(self) -> int:
        self._current()
        return len(self._tools)

    def __iter__(self) -> Any:
        self._current()
        return iter(self._tools.values())


def _is_provider(entry: object) -> bool:
    if type(entry) is FunctionTool:  # the common case, without two runtime protocol checks (slow: every loop made)
        return False
    return isinstance(entry, ToolProvider) and not isinstance(entry, Tool)


def to_tool_output(value: Any) -> ToolOutput:
    """Normalize what a tool returned: ``str`` as text, :class:`ToolOutput` as is, ``None`` as ``""``, a
    :class:`~loopctl.message.ToolContent` or a list of text/image parts as content, anything else as
    compact JSON text."""
    if isinstance(value, ToolOutput):
        return value
    if isinstance(value, str):
        return ToolOutput(value)
    if value is None:
        return ToolOutput("")
    if isinstance(value, ToolContent):
        return ToolOutput(value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(p, (TextPart, ImagePart)) for p in value):
        return ToolOutput(tuple(value))
    if isinstance(value, BaseModel):
        return ToolOutput(value.model_dump_json())
    try:
        return ToolOutput(orjson.dumps(value).decode())
    except TypeError:
        return ToolOutput(str(value))


# --- building the input model -------------------------------------------------------------------------------

def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The description (the summary and the long description, without the sections) and each parameter's
    description, from a docstring in Google, NumPy or Sphinx (reST) style (``docstring_parser``, style found
    by itself)."""
    if not doc.strip():
        return "", {}
    import docstring_parser

    try:
        parsed = _parsed(doc)
    except docstring_parser.ParseError:
        return doc.strip(), {}
    texts = [t.strip() for t in (parsed.short_description, parsed.long_description) if t and t.strip()]
    params = {p.arg_name.lstrip("*"): " ".join(p.description.split()) for p in parsed.params if p.description}
    return "\n\n".join(texts), params


def _parsed(doc: str) -> docstring_parser.Docstring:
    """``docstring_parser.parse(doc)``: the docstring as read by the style whose parser finds the most sections
    in it (parameters, returns...), the first of reST, Google, NumPy and epydoc on a tie, leaving out the parsers
    that raise ``ParseError``. Without running the three that cannot find one: reST's needs a line starting
    with ``:``, epydoc's with ``@``, NumPy's a heading underlined with ``-`` or a ``.. deprecated::`` line. With
    none of these, the answer is Google's when it finds a section, else reST's (the first of the tie at none).
    About 18 M instructions of a CLI run's start for the five file tools (docs/performance.md, section 12);
    ``tests/test_tool.py`` checks the two agree."""
    from docstring_parser import google, parse, rest
    from docstring_parser.common import ParseError

    if any(line.startswith((":", "@", "-", "..")) for line in inspect.cleandoc(doc).split("\n")):
        return parse(doc)
    try:
        found = google.parse(doc)
    except ParseError:
        return rest.parse(doc)
    return found if found.meta else rest.parse(doc)


def _input_model(
    fn: Callable[..., Any], name: str, param_docs: Mapping[str, str]
) -> tuple[type[BaseModel], str | None, Any]:
    sig = inspect.signature(fn)
    try:
        hints = get_type_hints(fn, include_extras=True)
    except NameError:
        hints = _hints_one_by_one(fn, name)
    fields: dict[str, Any] = {}
    context_param: str | None = None
    deps_type: Any = None
    for pname, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {name!r}: *args and **kwargs cannot be described to a model")
        annotation = hints.get(pname, Any)
        if annotation is ToolContext or get_origin(annotation) is ToolContext:
            context_param = pname
            args = get_args(annotation)
            deps_type = args[0] if args and isinstance(args[0], type) else None
            continue
        default = ... if param.default is param.empty else param.default
        described = get_origin(annotation) is Annotated and any(
            isinstance(m, FieldInfo) and m.description for m in get_args(annotation)[1:]
        )
        doc = None if described else param_docs.get(pname)  # Field(description=...) wins over the docstring
        fields[pname] = (annotation, Field(default, description=doc) if doc else default)
    model = create_model(f"{name}_input", __config__=ConfigDict(extra="forbid", strict=False), **fields)
    return model, context_param, deps_type


_REQUIRED = object()
"""The default of a required field in :func:`_plain_fields`."""

_PLAIN_TYPES: tuple[type, ...] = (str, int, float, bool)
_PLAIN_DEFAULTS: tuple[type, ...] = (type(None), str, int, float, bool)


def _plain_fields(model: type[BaseModel]) -> tuple[tuple[str, type | None, Any], ...] | None:
    """``(name, type, default)`` of each field of a tool's input model whose validation (lax, as the model
    is) gives back a value of exactly its type unchanged: a field typed ``str``, ``int``, ``float`` or
    ``bool`` (``None`` for ``Any``: any value, as it is) with no constraint, alias, default factory, validated
    default (``validate_default``) or deprecation (the model warns when it is read), and a default
    (``_REQUIRED`` when there is none) that pydantic hands out as it is (an immutable scalar; it copies
    others). ``None`` when a field is anything else, or the model has validators."""
    decorators = model.__pydantic_decorators__
    if decorators.validators or decorators.field_validators or decorators.model_validators:
        return None
    out: list[tuple[str, type | None, Any]] = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if info.metadata or info.default_factory is not None or info.alias is not None:
            return None
        if info.validation_alias is not None or info.validate_default or info.deprecated is not None:
            return None  # a default the model validates (converts, refuses); a field it warns about when read
        if annotation is Any:
            kind: type | None = None
        elif annotation in _PLAIN_TYPES:
            kind = annotation
        else:
            return None
        default = info.default
        if default is PydanticUndefined:
            default = _REQUIRED
        elif type(default) not in _PLAIN_DEFAULTS:
            return None
        out.append((name, kind, default))
    return tuple(out)


_CONTEXT_ANNOTATION = r"^\s*(?:[\w.]+\.)?ToolContext\s*(?:\[.*\])?\s*$"  # compiled when first used (re's cache)


def _hints_one_by_one(fn: Callable[..., Any], name: str) -> dict[str, Any]:
    """The type hints of ``fn`` when one of them names something its module cannot see (a class defined
    inside a function, as ``ToolContext[Deps]`` with a local ``Deps`` under ``from __future__ import
    annotations``): a ``ToolContext[...]`` annotation is read from its text; any other that cannot be
    resolved is a ``TypeError`` naming the parameter."""
    hints: dict[str, Any] = {}
    namespace = getattr(fn, "__globals__", {})
    for pname, raw in getattr(fn, "__annotations__", {}).items():
        if not isinstance(raw, str):
            hints[pname] = raw
            continue
        try:
            hints[pname] = eval(raw, namespace)  # the programmer's annotation, as typing.get_type_hints reads it
        except NameError as exc:
            if re.match(_CONTEXT_ANNOTATION, raw, re.S):
                hints[pname] = ToolContext
            elif pname != "return":
                problem = f"the annotation of {pname!r} ({raw}) cannot be resolved: {exc}"
                raise TypeError(f"tool {name!r}: {problem}") from None
    return hints


def _describe_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False, include_input=False)[:5]:
        loc = ".".join(str(x) for x in err["loc"]) or "input"
        parts.append(f"{loc}: {err['msg']}")
    return "invalid input: " + "; ".join(parts)
