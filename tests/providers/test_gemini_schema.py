"""Tool schemas for Gemini: ``parametersJsonSchema`` pass-through and the OpenAPI-subset converter.

Every converted schema is also validated against google-genai's ``types.Schema`` (extra keys forbidden,
strict), the SDK's model of the ``Schema`` message (https://ai.google.dev/api/caching#Schema).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from google.genai import types
from hypothesis import given
from hypothesis import strategies as st

from loopctl.errors import UnsupportedContent
from loopctl.providers._gemini_schema import json_schema_parameters, openapi_parameters


def openapi(schema: dict[str, Any]) -> dict[str, Any] | None:
    out = openapi_parameters(schema, tool="t")
    if out is not None:
        types.Schema.model_validate_json(orjson.dumps(out), strict=True)
    return out


class TestJsonSchemaParameters:
    def test_passes_the_schema_through_without_its_metadata_keywords(self) -> None:
        schema = {
            "$schema": "x",
            "$id": "y",
            "$comment": "z",
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A"}},
            "$defs": {"A": {"type": "string"}},
        }
        assert json_schema_parameters(schema) == {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A"}},
            "$defs": {"A": {"type": "string"}},
        }

    def test_does_not_change_its_input(self) -> None:
        schema = {"$schema": "x", "properties": {}}
        json_schema_parameters(schema)
        assert schema == {"$schema": "x", "properties": {}}


class TestOpenapiParameters:
    def test_types_are_upper_case_enum_values(self) -> None:
        schema = {
            "type": "object",
            "properties": {"n": {"type": "integer", "format": "int64"}, "ok": {"type": "boolean"}},
        }
        assert openapi(schema) == {
            "type": "OBJECT",
            "properties": {"n": {"type": "INTEGER", "format": "int64"}, "ok": {"type": "BOOLEAN"}},
        }

    def test_local_refs_are_inlined(self) -> None:
        schema = {
            "type": "object",
            "properties": {
                "home": {"$ref": "#/$defs/Address", "description": "Where I live"},
                "work": {"$ref": "#/definitions/Address"},
            },
            "$defs": {"Address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
            "definitions": {"Address": {"type": "object", "properties": {"zip": {"type": "string"}}}},
        }
        assert openapi(schema) == {
            "type": "OBJECT",
            "properties": {
                "home": {
                    "type": "OBJECT",
                    "properties": {"city": {"type": "STRING"}},
                    "required": ["city"],
                    "description": "Where I live",
                },
                "work": {"type": "OBJECT", "properties": {"zip": {"type": "STRING"}}},
            },
        }

    @pytest.mark.parametrize(
        "optional",
        [
            {"anyOf": [{"type": "string"}, {"type": "null"}]},
            {"oneOf": [{"type": "null"}, {"type": "string"}]},
            {"type": ["string", "null"]},
        ],
    )
    def test_null_alternatives_become_nullable(self, optional: dict[str, Any]) -> None:
        out = openapi({"type": "object", "properties": {"x": {**optional, "description": "maybe"}}})
        assert out == {
            "type": "OBJECT",
            "properties": {"x": {"type": "STRING", "nullable": True, "description": "maybe"}},
        }

    def test_several_types_become_any_of(self) -> None:
        out = openapi(
            {
                "type": "object",
                "properties": {
                    "x": {"type": ["string", "integer"]},
                    "y": {"anyOf": [{"type": "string"}, {"type": "number"}]},
                },
            }
        )
        assert out is not None
        assert out["properties"] == {
            "x": {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]},
            "y": {"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}]},
        }

    def test_all_of_members_are_merged(self) -> None:
        schema = {
            "type": "object",
            "properties": {
                "p": {"allOf": [{"$ref": "#/$defs/A"}, {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]}
            },
            "$defs": {"A": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}},
        }
        out = openapi(schema)
        assert out is not None
        assert out["properties"]["p"] == {
            "type": "OBJECT",
            "properties": {"a": {"type": "STRING"}, "b": {"type": "INTEGER"}},
            "required": ["a", "b"],
        }

    def test_keywords_outside_the_subset_are_dropped(self) -> None:
        schema = {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "tags": {
                    "type": "array",
                    "items": {"type": "string", "format": "email"},
                    "uniqueItems": True,
                    "minItems": 1,
                },
                "n": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 2, "maximum": 10, "default": 2},
                "s": {"type": "string", "pattern": "^a", "maxLength": 3, "examples": ["a"], "readOnly": True},
            },
            "required": ["tags", "ghost"],
        }
        assert openapi(schema) == {
            "type": "OBJECT",
            "properties": {
                "tags": {"type": "ARRAY", "items": {"type": "STRING"}, "minItems": 1},
                "n": {"type": "NUMBER", "maximum": 10, "default": 2},
                "s": {"type": "STRING", "pattern": "^a", "maxLength": 3},
            },
            "required": ["tags"],
        }

    def test_non_string_enums_and_const_are_described(self) -> None:
        out = openapi(
            {"type": "object", "properties": {"level": {"type": "integer", "enum": [1, 2]}, "kind": {"const": "fixed"}}}
        )
        assert out is not None
        assert out["properties"] == {
            "level": {"type": "INTEGER", "description": "one of: 1, 2"},
            "kind": {"type": "STRING", "enum": ["fixed"], "format": "enum"},
        }

    def test_a_function_without_parameters_has_none(self) -> None:
        assert openapi({"type": "object", "properties": {}}) is None
        assert openapi({}) is None

    def test_tuple_items_become_any_of(self) -> None:
        out = openapi(
            {
                "type": "object",
                "properties": {"pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}},
            }
        )
        assert out is not None
        assert out["properties"]["pair"] == {
            "type": "ARRAY",
            "items": {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]},
        }

    @pytest.mark.parametrize(
        "schema",
        [
            {"type": "object", "properties": {"child": {"$ref": "#"}}},
            {
                "type": "object",
                "properties": {"n": {"$ref": "#/$defs/Node"}},
                "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
            },
            {"type": "object", "properties": {"x": {"$ref": "https://example.com/x.json"}}},
        ],
    )
    def test_recursive_and_remote_refs_are_refused_naming_the_tool(self, schema: dict[str, Any]) -> None:
        with pytest.raises(UnsupportedContent, match="tool 't'"):
            openapi_parameters(schema, tool="t")


_json_schemas = st.recursive(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["string", "integer", "number", "boolean"])},
        optional={
            "description": st.text(max_size=5),
            "enum": st.lists(st.text(max_size=3), min_size=1, max_size=3),
            "minimum": st.integers(-1000, 1000),
        },
    ),
    lambda inner: st.one_of(
        st.builds(
            lambda p: {"type": "object", "properties": p},
            st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), inner, min_size=1, max_size=3),
        ),
        st.builds(lambda i: {"type": "array", "items": i}, inner),
        st.builds(lambda a, b: {"anyOf": [a, b]}, inner, inner),
        st.builds(lambda a: {"anyOf": [a, {"type": "null"}]}, inner),
        st.builds(lambda a: {**a, "uniqueItems": True, "exclusiveMinimum": 1, "additionalProperties": False}, inner),
    ),
    max_leaves=8,
)


@given(st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), _json_schemas, min_size=1, max_size=4))
def test_every_converted_schema_is_a_valid_sdk_schema(properties: dict[str, Any]) -> None:
    out = openapi({"type": "object", "properties": properties, "$defs": {"Unused": {"type": "string"}}})
    assert out is not None
    assert set(out["properties"]) == set(properties)
