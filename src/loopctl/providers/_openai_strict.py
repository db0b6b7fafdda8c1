"""OpenAI's strict JSON Schema dialect for function tools (``strict: true``), shared by the OpenAI codecs.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from loopctl.errors import UnsupportedContent

__all__ = ["plain_schema", "strict_schema"]


def plain_schema(value: Any) -> Any:
    """A deep copy made of dicts and lists only (schemas may be any Mapping / Sequence)."""
    if isinstance(value, Mapping):
        return {str(k): plain_schema(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_schema(v) for v in value]
    return value


_NULL: Final = {"type": "null"}


def strict_schema(schema: Mapping[str, Any], *, path: str = "schema") -> dict[str, Any]:
    """``schema`` converted to the dialect of OpenAI's strict mode (Structured Outputs, "Supported schemas").

    The documented rules applied: every object gets ``additionalProperties: false``; every property is listed
    in ``required``; a property that was optional becomes nullable (``"type": [T, "null"]``, ``null`` added to
    an ``enum``, or ``{"anyOf": [..., {"type": "null"}]}``), so the model sends ``null`` where it would have
    left the key out; a one-entry ``allOf`` is inlined (as the openai SDK's ``to_strict_json_schema`` does),
    ``default`` is dropped (the API answers "'default' is not permitted") and ``oneOf`` becomes ``anyOf``.
    Recurses into ``properties``, ``items``, ``anyOf``, ``$defs`` and ``definitions``. Other keywords pass
    unchanged; OpenAI answers an unsupported one with a 400.

    Raises :class:`~loopctl.errors.UnsupportedContent` (naming the path) for what strict mode cannot express: a
    root that is not an object, and an object that allows extra keys (``additionalProperties`` true or a
    schema, or ``patternProperties``: a free-form map).
    """
    root = plain_schema(schema)
    if not isinstance(root, dict) or not _is_object(root):
        raise UnsupportedContent(f"{path}: strict mode needs an object schema at the root")
    return _strict(root, path)


def _is_object(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in schema


def _strict(schema: dict[str, Any], path: str) -> dict[str, Any]:
    out = dict(schema)
    for defs in ("$defs", "definitions"):
        if isinstance(out.get(defs), dict):
            out[defs] = {
                k: _strict(v, f"{path}.{defs}.{k}") if isinstance(v, dict) else v for k, v in out[defs].items()
            }
    all_of = out.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
        del out["allOf"]
        out = {**all_of[0], **out}
    # The API refuses defaults in strict mode ("'default' is not permitted", its 400 for such a schema).
    out.pop("default", None)
    # oneOf is not supported in strict mode; anyOf says the same for disjoint branches (openai-agents'
    # ensure_strict_json_schema converts it the same way).
    one_of = out.pop("oneOf", None)
    if isinstance(one_of, list):
        out["anyOf"] = [*(out.get("anyOf") or []), *one_of]
    if _is_object(out):
        if "patternProperties" in out:
            raise UnsupportedContent(f"{path}: strict mode cannot express patternProperties (a free-form map)")
        extra = out.get("additionalProperties", False)
        if extra is not False:
            raise UnsupportedContent(
                f"{path}: strict mode cannot express an object with additionalProperties {extra!r} (a free-form map)"
            )
        out["additionalProperties"] = False
        properties = out.get("properties")
        if isinstance(properties, dict):
            required = set(out.get("required") or ())
            converted: dict[str, Any] = {}
            for key, sub in properties.items():
                value = _strict(sub, f"{path}.properties.{key}") if isinstance(sub, dict) else sub
                converted[key] = value if key in required or not isinstance(value, dict) else _nullable(value)
            out["properties"] = converted
            out["required"] = list(properties)
        else:
            out["properties"] = {}
            out["required"] = []
    if isinstance(out.get("items"), dict):
        out["items"] = _strict(out["items"], f"{path}.items")
    if isinstance(out.get("anyOf"), list):
        out["anyOf"] = [
            _strict(v, f"{path}.anyOf[{i}]") if isinstance(v, dict) else v for i, v in enumerate(out["anyOf"])
        ]
    return out


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` that also accepts ``null``."""
    if "anyOf" in schema and isinstance(schema["anyOf"], list):
        if any(isinstance(v, dict) and v.get("type") == "null" for v in schema["anyOf"]):
            return schema
        return {**schema, "anyOf": [*schema["anyOf"], dict(_NULL)]}
    kind = schema.get("type")
    if isinstance(kind, str) and "$ref" not in schema:
        out = {**schema, "type": [kind, "null"] if kind != "null" else "null"}
    elif isinstance(kind, list):
        out = {**schema, "type": kind if "null" in kind else [*kind, "null"]}
    else:  # a bare $ref, or a schema with no type: wrap it
        return {"anyOf": [schema, dict(_NULL)]}
    if isinstance(out.get("enum"), list) and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    return out
