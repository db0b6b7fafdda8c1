"""OpenAI's strict JSON Schema dialect for function tools (``strict: true``).

Shared by the OpenAI codecs. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["strict_schema"]


class _NotStrict(Exception):
    pass


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """``schema`` rewritten into OpenAI's strict dialect, or ``None`` when it cannot be.

    The rules (OpenAI function-calling guide, "Strict mode", and openai-python ``lib/_pydantic.py``
    ``to_strict_json_schema``): every object has ``additionalProperties: false``; every property is listed in
    ``required``, and a property that was optional becomes nullable (``"type": [t, "null"]`` or an ``anyOf``
    with ``{"type": "null"}``); ``oneOf`` becomes ``anyOf``; ``default`` is not permitted and is dropped.
    A schema with an open-ended object (``additionalProperties`` that is not ``false``, or
    ``patternProperties``), or whose root is not an object, has no strict form: ``None`` is returned and the
    tool is sent non-strict. The input is not changed.
    """
    try:
        out = _strict(schema)
    except _NotStrict:
        return None
    # The root of a function's parameters must be an object.
    return out if isinstance(out, dict) and out.get("type") == "object" else None


def _strict(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict(v) for v in node]
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "default":
            continue
        if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, Mapping):
            out[key] = {k: _strict(v) for k, v in value.items()}
        elif key == "oneOf":
            out["anyOf"] = _strict(value)
        elif key in ("items", "anyOf", "allOf", "prefixItems", "not"):
            out[key] = _strict(value)
        else:
            out[key] = value
    is_object = out.get("type") == "object" or "properties" in out
    if is_object:
        if "patternProperties" in out or out.get("additionalProperties", False) is not False:
            raise _NotStrict
        out["additionalProperties"] = False
        props: dict[str, Any] = out.get("properties", {})
        was_required = set(out.get("required", ()))
        out["properties"] = {k: (v if k in was_required else _nullable(v)) for k, v in props.items()}
        out["required"] = list(props)
    return out


def _nullable(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if isinstance(kind, str):
        return schema if kind == "null" else {**schema, "type": [kind, "null"]}
    if isinstance(kind, list):
        return schema if "null" in kind else {**schema, "type": [*kind, "null"]}
    if "anyOf" in schema and isinstance(schema["anyOf"], list):
        if any(isinstance(v, dict) and v.get("type") == "null" for v in schema["anyOf"]):
            return schema
        return {**schema, "anyOf": [*schema["anyOf"], {"type": "null"}]}
    return {"anyOf": [schema, {"type": "null"}]}
