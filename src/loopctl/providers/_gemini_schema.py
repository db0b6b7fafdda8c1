"""Tool input schemas for Gemini ``functionDeclarations``: full JSON Schema, or Gemini's OpenAPI subset.

Gemini takes a function's parameters in one of two fields (``FunctionDeclaration`` in the API reference,
https://ai.google.dev/api/caching#FunctionDeclaration, and google-genai ``types.FunctionDeclaration``):

- ``parametersJsonSchema``: a JSON Schema object, sent as a ``google.protobuf.Value`` (any JSON), so keywords
  the model ignores never fail the request. This is the default (:func:`json_schema_parameters`).
- ``parameters``: a ``Schema`` message, "a select subset of an OpenAPI 3.0 schema object"
  (https://ai.google.dev/api/caching#Schema). Being a protobuf message, an unknown keyword (``$schema``,
  ``additionalProperties``, ``uniqueItems``, ``exclusiveMinimum``...) is a hard 400 "Unknown name ... Cannot
  find field", and ``type`` is one enum value, never a list. :func:`openapi_parameters` converts to it for
  endpoints or models without ``parametersJsonSchema``: local ``$ref`` inlined, ``anyOf``/``oneOf``/type lists
  with ``null`` turned into ``nullable``, ``allOf`` merged, and every keyword outside the subset dropped.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loopctl.errors import UnsupportedContent

__all__ = ["json_schema_parameters", "openapi_parameters"]

# Metadata keywords that say nothing about the arguments; dropped so that no validator trips on a draft URI.
_META = ("$schema", "$id", "$comment")

# The Schema fields of the subset, besides those handled one by one below (type, properties, items, anyOf,
# enum, format, required).
_KEPT = (
    "title",
    "description",
    "nullable",
    "default",
    "example",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minProperties",
    "maxProperties",
    "pattern",
    "propertyOrdering",
)

# Formats the Schema reference lists: NUMBER float/double, INTEGER int32/int64, STRING enum/date-time.
_FORMATS = frozenset({"float", "double", "int32", "int64", "enum", "date-time"})
_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})


def json_schema_parameters(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The value for ``parametersJsonSchema``: ``schema`` itself, without ``$schema``/``$id``/``$comment`` at
    the top and with ``"type": "object"`` when it names no type (the field must describe an object)."""
    out = {k: v for k, v in schema.items() if k not in _META}
    out.setdefault("type", "object")
    return out


def openapi_parameters(schema: Mapping[str, Any], *, tool: str) -> dict[str, Any] | None:
    """The value for ``parameters`` in Gemini's OpenAPI subset, or ``None`` for a function without parameters.

    An object schema with no properties (or an empty schema) gives ``None``: Gemini refuses an OBJECT with
    empty ``properties``, so the declaration goes without ``parameters``. Raises
    :class:`~loopctl.errors.UnsupportedContent` naming ``tool`` for a ``$ref`` that is not local or that refers
    to itself (a recursive type cannot be inlined; use the default ``parametersJsonSchema`` dialect for those).
    """
    converter = _Converter(schema, tool)
    out = converter.convert(schema, ())
    if out.get("type", "OBJECT") == "OBJECT" and not out.get("properties") and "anyOf" not in out:
        return None
    return out


class _Converter:
    __slots__ = ("_defs", "_root", "_tool")

    def __init__(self, root: Mapping[str, Any], tool: str) -> None:
        self._root = root
        self._tool = tool
        defs: dict[str, Any] = {}
        for key in ("definitions", "$defs"):
            value = root.get(key)
            if isinstance(value, Mapping):
                defs.update({f"#/{key}/{name}": sub for name, sub in value.items()})
        self._defs = defs

    def _error(self, what: str) -> UnsupportedContent:
        return UnsupportedContent(f"tool {self._tool!r}: {what} (the 'openapi' schema dialect cannot express it)")

    def convert(self, node: Any, refs: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(node, Mapping):
            return {}  # `true` (anything) and malformed nodes: no constraint
        if "$ref" in node:
            ref = node["$ref"]
            if ref == "#":
                raise self._error("a recursive $ref to the root schema")
            if ref not in self._defs:
                raise self._error(f"a $ref that is not a local definition ({ref!r})")
            if ref in refs:
                raise self._error(f"a recursive $ref ({ref!r})")
            target = self.convert(self._defs[ref], (*refs, ref))
            # Siblings of $ref (a description, say) refine the referenced schema.
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            return {**target, **self.convert(siblings, refs)} if siblings else target
        if "allOf" in node and isinstance(node["allOf"], list):
            merged: dict[str, Any] = {k: v for k, v in node.items() if k != "allOf"}
            for member in node["allOf"]:
                merged = _merge(merged, self._resolve(member, refs))
            return self.convert(merged, refs)

        out: dict[str, Any] = {}
        nullable = False
        variants = node.get("anyOf", node.get("oneOf"))
        type_ = node.get("type")
        if isinstance(type_, list):
            # ["string", "null"] -> STRING + nullable; several real types -> anyOf of each.
            nullable = "null" in type_
            real = [t for t in type_ if t != "null"]
            if len(real) == 1:
                type_ = real[0]
            elif real:
                variants = [{**{k: v for k, v in node.items() if k != "type"}, "type": t} for t in real]
                type_ = None
            else:
                type_ = "null"
        if isinstance(variants, list):
            members = [m for m in variants if not (isinstance(m, Mapping) and m.get("type") == "null")]
            nullable = nullable or len(members) < len(variants)
            converted = [self.convert(m, refs) for m in members]
            if len(converted) == 1:
                out.update(converted[0])
            elif converted:
                out["anyOf"] = converted
        if isinstance(type_, str) and type_ in _TYPES:
            out["type"] = type_.upper()
        elif "type" not in out and "anyOf" not in out:
            if "properties" in node:
                out["type"] = "OBJECT"
            elif "items" in node:
                out["type"] = "ARRAY"

        for key in _KEPT:
            if key in node:
                out[key] = node[key]
        if nullable:
            out["nullable"] = True
        fmt = node.get("format")
        if isinstance(fmt, str) and fmt in _FORMATS:
            out["format"] = fmt
        self._enum(node, out)

        properties = node.get("properties")
        if isinstance(properties, Mapping):
            out["properties"] = {name: self.convert(sub, refs) for name, sub in properties.items()}
            required = node.get("required")
            if isinstance(required, list):
                kept = [r for r in required if r in properties]
                if kept:
                    out["required"] = kept
        items = node.get("items")
        if isinstance(items, Mapping):
            out["items"] = self.convert(items, refs)
        elif isinstance(items, list) and items:  # tuple form: any of the positions
            converted_items = [self.convert(i, refs) for i in items]
            out["items"] = converted_items[0] if len(converted_items) == 1 else {"anyOf": converted_items}
        return out

    def _resolve(self, node: Any, refs: tuple[str, ...]) -> Mapping[str, Any]:
        """A raw JSON Schema node with a top-level local $ref replaced by its target (for allOf merging)."""
        while isinstance(node, Mapping) and "$ref" in node:
            ref = node["$ref"]
            if ref not in self._defs or ref in refs:
                raise self._error(f"a $ref that cannot be inlined ({ref!r})")
            refs = (*refs, ref)
            node = {**self._defs[ref], **{k: v for k, v in node.items() if k != "$ref"}}
        return node if isinstance(node, Mapping) else {}

    @staticmethod
    def _enum(node: Mapping[str, Any], out: dict[str, Any]) -> None:
        # The subset's enum holds strings (STRING with format "enum"); other values are described instead.
        values = node.get("enum")
        if "const" in node:
            values = [node["const"]]
        if not isinstance(values, list):
            return
        if all(isinstance(v, str) for v in values):
            out["enum"] = values
            out.setdefault("type", "STRING")
            if out["type"] == "STRING":
                out["format"] = "enum"
            else:
                del out["enum"]
                _describe(out, values)
        else:
            _describe(out, values)


def _describe(out: dict[str, Any], values: list[Any]) -> None:
    note = "one of: " + ", ".join(repr(v) for v in values)
    out["description"] = f"{out['description']} ({note})" if out.get("description") else note


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """allOf members merged: properties and required united, other keys from the later member."""
    out = dict(a)
    for key, value in b.items():
        if key == "properties" and isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = {**out[key], **value}
        elif key == "required" and isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = [*out[key], *(r for r in value if r not in out[key])]
        else:
            out[key] = value
    return out
