"""Elicitation: an MCP server asks the user for information (``elicitation/create``, MCP 2025-11-25,
"Elicitation"), in loopctl's terms. Pure: no I/O.

Two modes. **Form**: the server sends a message and a flat JSON Schema of primitive fields (strings, numbers,
integers, booleans, single- and multi-select enums); the user fills it in. **URL**: the server sends a message
and a URL the user should open (an OAuth flow, a payment page); nothing sensitive passes through the client,
and accepting means the user agreed to open it.

The application answers through an :data:`ElicitationHandler`: :class:`Accept` (with the form's values),
:class:`Decline` (the user said no) or :class:`Cancel` (the user dismissed it). Accepted values are checked
against the server's schema before they are sent (:func:`check_content`, the spec: "clients SHOULD validate
the content against the schema"), and :func:`fields` lays the schema out for a form or a terminal prompt.
Everything in an :class:`Elicitation` comes from the server: show it as inert text, never as markup.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import field
from typing import Any, Literal, TypeAlias

import jsonschema  # type: ignore[import-untyped]  # a dependency of the mcp SDK; no type stubs
import referencing
from jsonschema_specifications import REGISTRY as _SPECIFICATIONS  # type: ignore[import-untyped]

from loopctl._frozen import dataclass

# The registry forms are checked with: the JSON Schema specifications' own schemas and nothing else. jsonschema's
# default fetches a ``$ref`` to a remote URL, so a server's form could make the host send requests to any
# address it can reach (cloud metadata, internal services); here such a reference is unresolvable.
_REGISTRY: referencing.Registry[Any] = _SPECIFICATIONS

__all__ = [
    "Accept",
    "Cancel",
    "Decline",
    "Elicitation",
    "ElicitationAnswer",
    "ElicitationHandler",
    "Field",
    "check_content",
    "fields",
    "schema_problem",
]


@dataclass(frozen=True, slots=True)
class Elicitation:
    """A server's request for the user's input.

    ``server``: the server's name. ``mode``: ``"form"`` or ``"url"``. ``message``: what the server says it needs.
    ``schema``: the form's JSON Schema (form mode; ``{}`` in URL mode). ``url`` and ``elicitation_id``: the
    page to open and the server's id for it (URL mode). ``tool_call_id``: the id of the model's tool call
    during which the server asked (``None`` when none of that server was running)."""

    server: str
    mode: Literal["form", "url"]
    message: str
    schema: Mapping[str, Any] = field(default_factory=dict)
    url: str | None = None
    elicitation_id: str | None = None
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class Accept:
    """The user answered: ``content`` holds the form's values by field name (empty in URL mode: the user agreed
    to open the URL)."""

    content: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Decline:
    """The user explicitly refused."""


@dataclass(frozen=True, slots=True)
class Cancel:
    """The user dismissed the request without choosing."""


ElicitationAnswer: TypeAlias = Accept | Decline | Cancel
"""What the user answered an :class:`Elicitation`: :class:`Accept` (with the form's content), :class:`Decline`
or :class:`Cancel` (MCP 2025-11-25, ``elicitation/create``'s ``action``)."""
ElicitationHandler: TypeAlias = Callable[[Elicitation], Awaitable[ElicitationAnswer]]
"""Asks the user and returns :class:`Accept`, :class:`Decline` or :class:`Cancel`. A handler that raises
declines (the server is told the user declined; the error is logged)."""


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a form, as a UI shows it: ``name`` (the key of the answer), ``title``, ``description``,
    ``kind`` (``"string"``, ``"number"``, ``"integer"``, ``"boolean"``, ``"choice"``, ``"choices"``),
    ``required``, ``default``, ``options`` (``(value, label)`` pairs of a choice), ``format`` (``email``,
    ``uri``, ``date``, ``date-time``), ``minimum`` / ``maximum`` (numbers, or lengths of a string or of a
    multiple choice)."""

    name: str
    title: str
    description: str
    kind: Literal["string", "number", "integer", "boolean", "choice", "choices"]
    required: bool
    default: Any = None
    options: tuple[tuple[str, str], ...] = ()
    format: str | None = None
    minimum: float | None = None
    maximum: float | None = None


def _options(schema: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """``(value, label)`` of an enum schema: ``enum`` (with the legacy ``enumNames``), or ``oneOf`` /
    ``anyOf`` of ``{"const", "title"}``."""
    if isinstance(schema.get("enum"), list):
        values = [str(v) for v in schema["enum"]]
        names = schema.get("enumNames")
        labels = [str(n) for n in names] if isinstance(names, list) and len(names) == len(values) else values
        return tuple(zip(values, labels, strict=True))
    for key in ("oneOf", "anyOf"):
        if isinstance(schema.get(key), list):
            return tuple(
                (str(o["const"]), str(o.get("title") or o["const"]))
                for o in schema[key]
                if isinstance(o, Mapping) and "const" in o
            )
    return ()


def fields(schema: Mapping[str, Any]) -> list[Field]:
    """The fields of a form-mode schema, in the order the server listed them."""
    required = set(schema.get("required") or ())
    out: list[Field] = []
    for name, prop in (schema.get("properties") or {}).items():
        if not isinstance(prop, Mapping):
            continue
        kind: Any = prop.get("type", "string")
        options: tuple[tuple[str, str], ...] = ()
        low, high = prop.get("minimum"), prop.get("maximum")
        if kind == "array":
            kind = "choices"
            items = prop.get("items")
            options = _options(items) if isinstance(items, Mapping) else ()
            low, high = prop.get("minItems"), prop.get("maxItems")
        elif (options := _options(prop)) != ():
            kind = "choice"
        elif kind == "string":
            low, high = prop.get("minLength"), prop.get("maxLength")
        if kind not in ("string", "number", "integer", "boolean", "choice", "choices"):
            kind = "string"
        out.append(
            Field(
                name=str(name),
                title=str(prop.get("title") or name),
                description=str(prop.get("description") or ""),
                kind=kind,
                required=name in required,
                default=prop.get("default"),
                options=options,
                format=prop.get("format") if isinstance(prop.get("format"), str) else None,
                minimum=low if isinstance(low, (int, float)) else None,
                maximum=high if isinstance(high, (int, float)) else None,
            )
        )
    return out


def _outside_ref(node: Any, depth: int = 0) -> str | None:
    """The first ``$ref`` / ``$dynamicRef`` of ``node`` that is not within the schema (not ``#...``)."""
    if depth > 64:
        return "a schema nested deeper than 64 levels"
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in ("$ref", "$dynamicRef") and not (isinstance(value, str) and value.startswith("#")):
                return str(value)
            found = _outside_ref(value, depth + 1)
            if found is not None:
                return found
    elif isinstance(node, list):
        for value in node:
            found = _outside_ref(value, depth + 1)
            if found is not None:
                return found
    return None


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """What makes a form-mode ``schema`` unusable (``None``: nothing): not a valid JSON Schema (an unknown
    type, a ``pattern`` that is not a regular expression...), or ``properties`` not an object. A form with such
    a schema is refused before the user is asked."""
    properties = schema.get("properties")
    if properties is not None and not isinstance(properties, Mapping):
        return "its properties are not an object"
    outside = _outside_ref(schema)
    if outside is not None:
        return f"it refers to another document ({outside[:200]}), which is not fetched"
    try:
        jsonschema.Draft202012Validator.check_schema(dict(schema))
    except jsonschema.SchemaError as exc:
        where = ".".join(str(p) for p in exc.path) or "schema"
        return f"{where}: {exc.message}"
    return None


def check_content(schema: Mapping[str, Any], content: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``content`` as an answer to a form of ``schema`` (empty: nothing). Each problem names
    the field: ``"age: 'x' is not of type 'integer'"``. Values may be strings, numbers, booleans or lists of
    strings (the spec's primitive fields)."""
    problems = []
    for key, value in content.items():
        ok = value is None or isinstance(value, (str, int, float, bool))
        ok = ok or (isinstance(value, list) and all(isinstance(v, str) for v in value))
        if not ok:
            problems.append(f"{key}: {type(value).__name__} is not a string, number, boolean or list of strings")
    validator = jsonschema.Draft202012Validator(
        dict(schema), format_checker=jsonschema.FormatChecker(), registry=_REGISTRY
    )
    try:
        errors = sorted(validator.iter_errors(dict(content)), key=lambda e: [str(p) for p in e.path])
    except Exception as exc:  # a schema jsonschema cannot apply (an unresolvable $ref, an unknown type...)
        return [*problems, f"answer: the form's schema cannot be checked ({type(exc).__name__}: {exc})"[:500]]
    for error in errors:
        where = ".".join(str(p) for p in error.path) or "answer"
        problems.append(f"{where}: {error.message}")
    return problems


def wire_content(content: Mapping[str, Any]) -> dict[str, str | int | float | bool | list[str] | None]:
    """The answer as the protocol's ``ElicitResult.content`` (values already checked by :func:`check_content`)."""
    return {str(k): (list(v) if isinstance(v, Sequence) and not isinstance(v, str) else v) for k, v in content.items()}
