"""Each codec encodes ``NativeOutput``'s schema (:class:`~loopctl.providers.base.OutputFormat`) in its API's
own field, and the body validates against the official SDK's request types."""

from __future__ import annotations

from typing import Any

import pytest

from loopctl.errors import UnsupportedContent
from loopctl.message import Message
from loopctl.providers import anthropic, gemini, openai_chat, openai_responses
from loopctl.providers.base import ModelRequest, OutputFormat
from tests.providers.responses_wire import validate_with_sdk as validate_responses
from tests.providers.test_anthropic_properties import validate_with_sdk as validate_anthropic
from tests.providers.test_gemini_properties import validate_with_the_sdk as validate_gemini
from tests.providers.test_openai_chat_properties import validate as validate_chat

CITY: dict[str, Any] = {
    "type": "object",
    "title": "City",
    "description": "A city.",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "population": {"type": "integer", "minimum": 0},
        "nickname": {"type": "string", "default": ""},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
    },
    "required": ["name", "population"],
}
FORMAT = OutputFormat("City", CITY, "A city.")
HELLO = [Message.user("Name a city.")]


def body(codec: Any, output_format: OutputFormat, **options: Any) -> dict[str, Any]:
    request = ModelRequest(messages=HELLO, output_format=output_format)
    result: dict[str, Any] = codec.build_request_from(request, model="m", **options)
    return result


def test_chat_sends_a_strict_json_schema_response_format() -> None:
    sent = body(openai_chat, FORMAT)
    validate_chat(sent)
    spec = sent["response_format"]["json_schema"]
    assert sent["response_format"]["type"] == "json_schema"
    assert (spec["name"], spec["description"], spec["strict"]) == ("City", "A city.", True)
    schema = spec["schema"]
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["name", "population", "nickname", "tags"]  # strict: every key listed
    assert schema["properties"]["nickname"] == {"type": ["string", "null"]}  # optional: nullable, no default


def test_chat_sends_a_non_strict_schema_as_given() -> None:
    sent = body(openai_chat, OutputFormat("City", CITY, strict=False))
    validate_chat(sent)
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "City", "schema": CITY, "strict": False},
    }


def test_responses_sends_text_format() -> None:
    sent = body(openai_responses, FORMAT)
    validate_responses(sent)
    text_format = sent["text"]["format"]
    assert (text_format["type"], text_format["name"], text_format["strict"]) == ("json_schema", "City", True)
    assert text_format["schema"]["additionalProperties"] is False


def test_anthropic_sends_output_config_within_the_documented_limits() -> None:
    sent = body(anthropic, FORMAT)
    validate_anthropic(sent)
    schema = sent["output_config"]["format"]["schema"]
    assert sent["output_config"]["format"]["type"] == "json_schema"
    assert schema["additionalProperties"] is False
    # Constraints structured outputs refuse move into the description (as the SDK's transform_schema does).
    assert schema["properties"]["name"] == {"type": "string", "description": "{minLength: 1}"}
    assert schema["properties"]["population"] == {"type": "integer", "description": "{minimum: 0}"}
    assert schema["properties"]["tags"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "{minItems: 2}",
    }


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        (
            {"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "integer"}}}},
            r"^output_format\.schema\.properties\.m: Anthropic's structured outputs cannot express a free-form map",
        ),
        (
            {"type": "object", "properties": {"x": {}}},
            r"^output_format\.schema\.properties\.x: Anthropic's structured outputs cannot express a value of any type",
        ),
        (
            {
                "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
                "$ref": "#/$defs/Node",
            },
            r"^output_format\.schema\.\$defs\.Node: Anthropic's structured outputs cannot express a recursive schema",
        ),
    ],
)
def test_anthropic_refuses_before_sending_what_structured_outputs_cannot_express(
    schema: dict[str, Any], problem: str
) -> None:
    with pytest.raises(UnsupportedContent, match=problem):
        body(anthropic, OutputFormat("X", schema))


def test_gemini_sends_response_json_schema() -> None:
    sent = body(gemini, FORMAT)
    validate_gemini(sent)
    config = sent["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == CITY
    assert "strict" not in config


def test_gemini_with_the_openapi_dialect_sends_response_schema() -> None:
    sent = body(gemini, FORMAT, schema_dialect="openapi")
    validate_gemini(sent)
    config = sent["generationConfig"]
    assert "responseJsonSchema" not in config
    assert config["responseSchema"]["type"] == "OBJECT"
    assert set(config["responseSchema"]["properties"]) == {"name", "population", "nickname", "tags"}


def test_gemini_keeps_the_other_generation_settings() -> None:
    request = ModelRequest(messages=HELLO, max_tokens=100, temperature=0.5, output_format=FORMAT)
    config = gemini.build_request_from(request, model="gemini-2.5-flash")["generationConfig"]
    assert (config["maxOutputTokens"], config["temperature"], config["responseMimeType"]) == (
        100,
        0.5,
        "application/json",
    )


def test_no_output_format_sends_none_of_these_fields() -> None:
    request = ModelRequest(messages=HELLO)
    assert "output_format" not in request.options()
    assert "response_format" not in openai_chat.build_request_from(request, model="m")
    assert "text" not in openai_responses.build_request_from(request, model="m")
    assert "output_config" not in anthropic.build_request_from(request, model="m")
    assert "generationConfig" not in gemini.build_request_from(request, model="m")
