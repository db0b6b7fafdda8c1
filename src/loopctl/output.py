"""Typed output: what a run's answer must be, how the model is asked for it, and how it is checked.

``loop.run(task, output_type=T)`` makes ``run.output`` a validated ``T``: a pydantic model, a dataclass, a
``TypedDict``, a union of them, a ``list[...]`` or a scalar type (anything pydantic's ``TypeAdapter`` takes).
Three modes ask the model for it (``docs/output.md`` says what each sends to each provider):

- :class:`OutputTool` (the default for any type but ``str``): the answer is a call of a final-result tool
  whose input schema is ``T``'s; the call is forced (``tool_choice``) unless the run sets its own
  ``tool_choice`` or a ``reasoning_effort`` (Anthropic refuses thinking with a forced tool).
- :class:`NativeOutput`: the provider's own schema-constrained output (OpenAI Chat ``response_format``,
  Responses ``text.format``, Anthropic ``output_config.format``, Gemini ``responseJsonSchema``); the answer is
  the reply's text, as JSON.
- :class:`PromptedOutput`: the schema is put in the instructions and the answer parsed from the reply's text
  (for servers with neither tools nor schemas).

A type whose JSON Schema is not an object (a scalar, a list, a union) is wrapped as ``{"response": <the
type>}`` wherever an object is needed (a tool's input, OpenAI's and Anthropic's schemas), and unwrapped on
reading. Invalid output (JSON that fails validation, a missing final-result call, a value the
``output_validator`` rejects with :class:`RejectOutput`) goes back to the model as an error it can fix, at
most ``RunConfig.output_retries`` times; then the run ends with ``OUTPUT_INVALID``.

Pure: building schemas and validating values does no I/O.
"""

from __future__ import annotations

import builtins
import json
import re
import warnings
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, Literal, TypeAlias, TypeVar, Union, overload

from pydantic import BaseModel, TypeAdapter, ValidationError, create_model

from loopctl._frozen import dataclass
from loopctl.errors import UnsupportedContent
from loopctl.providers._openai_strict import strict_schema
from loopctl.providers.base import OutputFormat
from loopctl.tool import ToolSchema

__all__ = [
    "DEFAULT_TOOL_NAME",
    "NativeOutput",
    "OutputSchema",
    "OutputSpec",
    "OutputTool",
    "OutputValidator",
    "PromptedOutput",
    "RejectOutput",
    "StrictSchemaWarning",
]

T = TypeVar("T")

DEFAULT_TOOL_NAME = "final_result"
"""The name of :class:`OutputTool`'s tool unless given."""

WRAPPER_KEY = "response"
"""The key a type that is not an object is wrapped under."""

DEFAULT_PROMPT = (
    "Give your final answer as a JSON value that follows this JSON Schema, and nothing else: no prose, no "
    "code fence.\n{schema}"
)
""":class:`PromptedOutput`'s instructions; ``{schema}`` is replaced by the schema's JSON text."""


class RejectOutput(Exception):
    """Raised by an ``output_validator`` to reject a value that validated: ``message`` goes back to the
    model, which answers again (counted against ``output_retries``)."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class StrictSchemaWarning(UserWarning):
    """A :class:`NativeOutput` type that OpenAI's strict mode cannot express (a free-form ``dict``, ``Any``)
    is sent with ``strict: false``; the warning names the field. OpenAI would answer the strict request with a
    400."""


@dataclass(frozen=True, slots=True, init=False)
class OutputTool(Generic[T]):
    """Ask for the answer as a call of a final-result tool (``name``, default ``final_result``) whose input
    schema is ``type``'s; ``description`` tells the model what the tool is for."""

    type: Any
    name: str
    description: str | None

    @overload
    def __init__(
        self: OutputTool[T], type: builtins.type[T], *, name: str = ..., description: str | None = ...
    ) -> None: ...
    @overload
    def __init__(self: OutputTool[Any], type: object, *, name: str = ..., description: str | None = ...) -> None: ...
    def __init__(self, type: Any, *, name: str = DEFAULT_TOOL_NAME, description: str | None = None) -> None:  # noqa: A002
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise ValueError(f"an output tool's name must be 1-64 letters, digits, '_' or '-', got {name!r}")
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "description", description)


@dataclass(frozen=True, slots=True, init=False)
class NativeOutput(Generic[T]):
    """Ask the provider to constrain the reply's text to ``type``'s JSON Schema. ``name`` and
    ``description`` name the schema for the providers that take them (OpenAI); ``strict`` (default
    ``None``: strict where OpenAI's strict mode can express the type, with a :class:`StrictSchemaWarning`
    otherwise) sets OpenAI's ``strict``."""

    type: Any
    name: str | None
    description: str | None
    strict: bool | None

    @overload
    def __init__(
        self: NativeOutput[T],
        type: builtins.type[T],
        *,
        name: str | None = ...,
        description: str | None = ...,
        strict: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: NativeOutput[Any],
        type: object,
        *,
        name: str | None = ...,
        description: str | None = ...,
        strict: bool | None = ...,
    ) -> None: ...
    def __init__(
        self,
        type: Any,  # noqa: A002
        *,
        name: str | None = None,
        description: str | None = None,
        strict: bool | None = None,
    ) -> None:
        if name is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise ValueError(f"a schema name must be 1-64 letters, digits, '_' or '-', got {name!r}")
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "strict", strict)


@dataclass(frozen=True, slots=True, init=False)
class PromptedOutput(Generic[T]):
    """Put ``type``'s JSON Schema in the instructions (``template``, with ``{schema}`` where it goes; default
    :data:`DEFAULT_PROMPT`) and parse the answer from the reply's text (a JSON code fence is read too)."""

    type: Any
    template: str

    @overload
    def __init__(self: PromptedOutput[T], type: builtins.type[T], *, template: str = ...) -> None: ...
    @overload
    def __init__(self: PromptedOutput[Any], type: object, *, template: str = ...) -> None: ...
    def __init__(self, type: Any, *, template: str = DEFAULT_PROMPT) -> None:  # noqa: A002
        if "{schema}" not in template:
            raise ValueError("a PromptedOutput template needs '{schema}' where the schema goes")
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "template", template)


OutputMode: TypeAlias = Union["OutputTool[Any]", "NativeOutput[Any]", "PromptedOutput[Any]"]
"""One of the three modes."""

OutputSpec: TypeAlias = Union[type[T], OutputTool[T], NativeOutput[T], PromptedOutput[T]]
"""What ``output_type`` takes: a type (its mode is :class:`OutputTool`, or plain text for ``str``), or a mode."""

OutputValidator: TypeAlias = Callable[[T], Union[T, Awaitable[Union[T, None]], None]]
"""A check of a valid output (sync or async): return the value (or a replacement), or ``None`` to keep it;
raise :class:`RejectOutput` to send the model a message instead."""


class OutputSchema(Generic[T]):
    """The JSON Schema of an output type and its validation, as every mode uses them.

    :attr:`json_schema` is the type's schema (pydantic's), wrapped as ``{"response": ...}`` when it is not an
    object (:attr:`wrapped`). :meth:`validate_object` reads a tool call's input, :meth:`validate_text` a
    reply's text; both return the ``T`` value or raise ``ValueError`` whose ``args[0]`` is the list of
    problems, one sentence each (``location: message``), the text the model is sent. Raises ``TypeError`` for
    a type pydantic cannot describe.

    ``type_`` is the output type (a pydantic model, a dataclass, a ``TypedDict``, a union, a ``list[...]`` or a
    scalar).
    """

    __slots__ = ("_adapter", "_wrapper", "json_schema", "type", "wrapped")

    def __init__(self, type_: Any) -> None:
        self.type = type_
        try:
            self._adapter: TypeAdapter[T] = TypeAdapter(type_)
            inner = self._adapter.json_schema()
        except Exception as exc:  # pydantic's schema errors have several classes
            raise TypeError(f"the output type {type_!r} has no JSON Schema: {exc}") from exc
        self.wrapped = not _is_object_schema(inner)
        self._wrapper: type[BaseModel] | None = None
        if self.wrapped:
            defs = inner.pop("$defs", None)
            schema: dict[str, Any] = {
                "type": "object",
                "properties": {WRAPPER_KEY: inner},
                "required": [WRAPPER_KEY],
            }
            if defs:
                schema["$defs"] = defs
            self._wrapper = create_model("OutputWrapper", **{WRAPPER_KEY: (type_, ...)})  # type: ignore[call-overload]
            self.json_schema = schema
        else:
            self.json_schema = inner

    @property
    def title(self) -> str:
        """A name for the schema: the type's name (``Weather``), or ``"output"``."""
        name = getattr(self.type, "__name__", None)
        return name if isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) else "output"

    def validate_object(self, value: Any) -> T:
        """The ``T`` in a decoded JSON value (a tool call's input). A wrapped type is also read bare (the
        value itself, not ``{"response": value}``), as models sometimes send it."""
        try:
            if self._wrapper is None:
                return self._adapter.validate_python(value)
            return getattr(self._wrapper.model_validate(value), WRAPPER_KEY)  # type: ignore[no-any-return]
        except ValidationError as exc:
            if self._wrapper is not None and not (isinstance(value, dict) and WRAPPER_KEY in value):
                try:
                    return self._adapter.validate_python(value)
                except ValidationError:
                    pass
            raise ValueError(_problems(exc)) from None

    def validate_text(self, text: str) -> T:
        """The ``T`` in a reply's text: JSON, alone or in a code fence (see :func:`json_text`)."""
        body = json_text(text)
        try:
            decoded = json.loads(body)
        except ValueError:
            # Not JSON: pydantic's own parser says where, in the words the model is sent.
            try:
                self._adapter.validate_json(body)
            except ValidationError as exc:
                raise ValueError(_problems(exc)) from None
            raise ValueError(["input: Invalid JSON"]) from None  # pragma: no cover - json and pydantic disagree
        try:
            if self._wrapper is None:
                return self._adapter.validate_json(body)
        except ValidationError as exc:
            raise ValueError(_problems(exc)) from None
        return self.validate_object(decoded)

    def schema_text(self) -> str:
        """The schema as compact JSON text (for instructions)."""
        return json.dumps(self.json_schema, separators=(",", ":"), ensure_ascii=False)


def _is_object_schema(schema: Mapping[str, Any]) -> bool:
    return schema.get("type") == "object" and "anyOf" not in schema and "oneOf" not in schema


def _problems(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = ".".join(str(x) for x in err["loc"]) or "input"
        out.append(f"{loc}: {err['msg']}")
    return out


_FENCE = r"```(?:json|JSON)?[ \t]*\n(.*?)\n?```"  # compiled when first used (the re module's cache)


def json_text(text: str) -> str:
    """The JSON in a reply's ``text``: the whole text, the inside of its first code fence, or the span from
    its first ``{`` or ``[`` to the matching last bracket (prose around it is dropped)."""
    stripped = text.strip()
    fence = re.search(_FENCE, stripped, re.S)
    if fence is not None:
        return fence.group(1).strip()
    if stripped[:1] in ("{", "[", '"') or not stripped:
        return stripped
    for open_, close in (("{", "}"), ("[", "]")):
        start, end = stripped.find(open_), stripped.rfind(close)
        if 0 <= start < end:
            return stripped[start : end + 1]
    return stripped


# --- resolving a run's output -------------------------------------------------------------------------------


def resolve(output_type: Any) -> OutputMode | None:
    """The mode of ``output_type``: ``None`` for ``str`` (plain text, as without typed output), the mode
    itself, or :class:`OutputTool` for any other type."""
    if output_type is None or output_type is str:
        return None
    if isinstance(output_type, (OutputTool, NativeOutput, PromptedOutput)):
        return output_type
    return OutputTool(output_type)


Kind: TypeAlias = Literal["tool", "native", "prompted", "text"]


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """What one run sends and reads for its typed output (built by :func:`plan`).

    ``kind`` is the mode; ``tool`` the final-result tool's schema (``"tool"``); ``output_format`` the
    provider schema (``"native"``); ``instructions`` the text added to the system prompt (``"prompted"``).
    ``"text"`` is plain text checked by an ``output_validator`` only (``str`` output with a validator).
    """

    kind: Kind
    schema: OutputSchema[Any]
    tool: ToolSchema | None = None
    output_format: OutputFormat | None = None
    instructions: str | None = None

    @property
    def tool_name(self) -> str | None:
        """The final-result tool's name (``"tool"`` mode), else ``None``."""
        return self.tool.name if self.tool is not None else None

    def missing_call(self) -> str:
        """What the model is told when it answered with text instead of calling the final-result tool."""
        return f"Give your final answer by calling the tool {self.tool_name} with it; a text reply is not read."

    def invalid(self, problems: list[str]) -> str:
        """What the model is told about an invalid answer."""
        where = f"calling {self.tool_name} again" if self.kind == "tool" else "answering again"
        return f"The answer is not valid: {'; '.join(problems)}. Fix it by {where}."


def text_plan() -> OutputPlan:
    """The plan of plain ``str`` output that an ``output_validator`` checks: nothing is sent, the reply's text
    is the value."""
    return OutputPlan("text", OutputSchema(str))


def plan(mode: OutputMode, provider: str = "") -> OutputPlan:
    """The :class:`OutputPlan` of ``mode`` for a client of ``provider`` (a client's ``provider`` name): the
    schema is built once here. For :class:`NativeOutput` with ``strict`` unset and an OpenAI client, a type
    strict mode cannot express is sent non-strict with a :class:`StrictSchemaWarning` naming the field."""
    schema: OutputSchema[Any] = OutputSchema(mode.type)
    if isinstance(mode, OutputTool):
        description = mode.description or _tool_description(schema)
        tool = ToolSchema(name=mode.name, description=description, input_schema=schema.json_schema)
        return OutputPlan("tool", schema, tool=tool)
    if isinstance(mode, NativeOutput):
        strict = mode.strict
        if strict is None:
            problem = strict_problem(schema.json_schema) if provider == "openai" else None
            if problem is not None:
                warnings.warn(
                    f"NativeOutput({schema.title}) is sent with strict: false: {problem}",
                    StrictSchemaWarning,
                    stacklevel=3,
                )
            strict = problem is None
        about = mode.description or _described(schema.json_schema)
        output_format = OutputFormat(mode.name or schema.title, schema.json_schema, about, strict)
        return OutputPlan("native", schema, output_format=output_format)
    return OutputPlan("prompted", schema, instructions=mode.template.replace("{schema}", schema.schema_text()))


def _described(schema: Mapping[str, Any]) -> str | None:
    description = schema.get("description")
    return description if isinstance(description, str) else None


def _tool_description(schema: OutputSchema[Any]) -> str:
    own = _described(schema.json_schema)
    text = "Give the final answer: call this tool once, with the answer as its input."
    return f"{text} {own}" if own else text


def strict_problem(schema: Mapping[str, Any]) -> str | None:
    """Why OpenAI's strict mode cannot take ``schema`` (naming the field: ``schema.properties.tags``), or
    ``None``: what the strict-schema converter refuses (free-form maps), and values of any type (``Any``, a
    schema with no ``type``), which strict mode refuses as "schema must have a 'type' key"."""
    try:
        converted = strict_schema(schema)
    except UnsupportedContent as exc:
        return str(exc)
    return _typeless(converted, "schema")


_TYPED = ("type", "anyOf", "$ref", "enum", "const", "allOf")


def _typeless(schema: Any, path: str) -> str | None:
    if not isinstance(schema, dict):
        return None
    if not any(key in schema for key in _TYPED):
        return f"{path}: a value of any type cannot be expressed in strict mode"
    for key in ("properties", "$defs", "definitions"):
        sub = schema.get(key)
        if isinstance(sub, dict):
            for name, value in sub.items():
                found = _typeless(value, f"{path}.{key}.{name}")
                if found:
                    return found
    if isinstance(schema.get("items"), dict):
        found = _typeless(schema["items"], f"{path}.items")
        if found:
            return found
    for key in ("anyOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list):
            for i, option in enumerate(options):
                found = _typeless(option, f"{path}.{key}[{i}]")
                if found:
                    return found
    return None
