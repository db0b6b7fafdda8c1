"""``loopctl.output``: each type's schema and validation, the three modes' plans, OpenAI strict mode's
fallback."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

from loopctl.output import (
    NativeOutput,
    OutputSchema,
    OutputTool,
    PromptedOutput,
    StrictSchemaWarning,
    json_text,
    plan,
    resolve,
    strict_problem,
)


class Cat(BaseModel):
    """A cat."""

    kind: Literal["cat"]
    meows: int


class Dog(BaseModel):
    kind: Literal["dog"]
    barks: int


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


class Loose(BaseModel):
    name: str
    extra: dict[str, int]


class Anything(BaseModel):
    name: str
    data: Any


@pytest.mark.parametrize(
    ("type_", "wrapped", "good", "value"),
    [
        (Cat, False, {"kind": "cat", "meows": 3}, Cat(kind="cat", meows=3)),
        (Point, False, {"x": 1, "y": 2}, Point(1, 2)),
        (Movie, False, {"title": "Up", "year": 2009}, {"title": "Up", "year": 2009}),
        (int, True, {"response": 7}, 7),
        (list[int], True, {"response": [1, 2]}, [1, 2]),
        (Cat | Dog, True, {"response": {"kind": "dog", "barks": 2}}, Dog(kind="dog", barks=2)),
    ],
)
def test_each_kind_of_type_validates_from_a_tool_input_and_from_text(
    type_: Any, wrapped: bool, good: dict[str, Any], value: Any
) -> None:
    import json

    schema: OutputSchema[Any] = OutputSchema(type_)
    assert schema.wrapped is wrapped
    assert schema.json_schema["type"] == "object"
    if wrapped:
        assert schema.json_schema["required"] == ["response"]
    assert schema.validate_object(good) == value
    assert schema.validate_text(json.dumps(good)) == value


def test_a_union_keeps_its_definitions_at_the_root_of_the_wrapped_schema() -> None:
    schema: OutputSchema[Any] = OutputSchema(Cat | Dog)
    assert set(schema.json_schema["$defs"]) == {"Cat", "Dog"}
    refs = [option["$ref"] for option in schema.json_schema["properties"]["response"]["anyOf"]]
    assert refs == ["#/$defs/Cat", "#/$defs/Dog"]


def test_a_wrapped_type_is_also_read_bare() -> None:
    assert OutputSchema(list[int]).validate_text("[3, 4]") == [3, 4]
    assert OutputSchema(Cat | Dog).validate_object({"kind": "cat", "meows": 1}) == Cat(kind="cat", meows=1)


def test_validation_problems_name_the_field_for_the_model() -> None:
    with pytest.raises(ValueError) as info:
        OutputSchema(Cat).validate_object({"kind": "cat", "meows": "lots"})
    assert info.value.args[0] == ["meows: Input should be a valid integer, unable to parse string as an integer"]
    with pytest.raises(ValueError) as info:
        OutputSchema(Cat).validate_text("not json at all")
    assert info.value.args[0][0].startswith("input: Invalid JSON")


@pytest.mark.parametrize(
    ("text", "json"),
    [
        ('{"a": 1}', '{"a": 1}'),
        ('  \n{"a": 1}\n', '{"a": 1}'),
        ('Here it is:\n```json\n{"a": 1}\n```\nDone.', '{"a": 1}'),
        ("```\n[1, 2]\n```", "[1, 2]"),
        ('The answer is {"a": {"b": 2}} as asked.', '{"a": {"b": 2}}'),
        ("Sure: [1, 2]", "[1, 2]"),
    ],
)
def test_json_is_found_in_a_reply_with_prose_or_a_fence(text: str, json: str) -> None:
    assert json_text(text) == json


def test_str_is_plain_text_and_other_types_default_to_the_output_tool() -> None:
    assert resolve(str) is None
    assert resolve(None) is None
    mode = resolve(Cat)
    assert isinstance(mode, OutputTool)
    assert (mode.type, mode.name) == (Cat, "final_result")
    native = NativeOutput(Cat)
    assert resolve(native) is native


def test_the_output_tool_plan_carries_the_types_schema_and_docstring() -> None:
    p = plan(OutputTool(Cat, name="answer"))
    assert p.kind == "tool"
    assert p.tool is not None
    assert (p.tool.name, p.tool_name) == ("answer", "answer")
    assert p.tool.input_schema == Cat.model_json_schema()
    assert p.tool.description.endswith("A cat.")


def test_the_prompted_plan_puts_the_schema_in_the_instructions() -> None:
    p = plan(PromptedOutput(Movie, template="Reply as JSON: {schema}"))
    assert p.instructions is not None
    assert p.instructions.startswith('Reply as JSON: {"properties":{"title":')
    assert p.tool is None and p.output_format is None


def test_native_output_is_strict_when_strict_mode_can_express_the_type() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = plan(NativeOutput(Cat), "openai")
    assert p.output_format is not None
    assert (p.output_format.name, p.output_format.strict) == ("Cat", True)


@pytest.mark.parametrize(
    ("type_", "field"),
    [
        (Loose, "schema.properties.extra: strict mode cannot express an object with additionalProperties"),
        (Anything, "schema.properties.data: a value of any type cannot be expressed in strict mode"),
        (dict[str, int], "schema: strict mode cannot express an object with additionalProperties"),
    ],
)
def test_a_type_strict_mode_cannot_express_is_sent_non_strict_with_a_warning_naming_the_field(
    type_: Any, field: str
) -> None:
    # Sent strict, OpenAI answers 400 ("additionalProperties should not be set", "schema must have a 'type'
    # key"): the peers' most reported structured-output failure.
    with pytest.warns(StrictSchemaWarning, match="is sent with strict: false: ") as caught:
        p = plan(NativeOutput(type_), "openai")
    assert field in str(caught[0].message)
    assert p.output_format is not None and p.output_format.strict is False


def test_no_warning_for_providers_without_a_strict_switch() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = plan(NativeOutput(Anything), "gemini")
    assert p.output_format is not None


def test_strict_problem_is_none_for_a_plain_model() -> None:
    assert strict_problem(Cat.model_json_schema()) is None


def test_bad_names_and_templates_are_refused() -> None:
    with pytest.raises(ValueError, match="output tool's name"):
        OutputTool(Cat, name="final result")
    with pytest.raises(ValueError, match="needs '\\{schema\\}'"):
        PromptedOutput(Cat, template="no placeholder")


def test_a_type_without_a_schema_is_a_type_error() -> None:
    class Opaque:
        pass

    with pytest.raises(TypeError, match="has no JSON Schema"):
        OutputSchema(Opaque)
