"""OpenAI Chat request building: one test per wire rule (docs/providers/openai_chat.md), including the small
failing inputs of issue 3 that concern Chat Completions."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from loopctl.errors import UnsupportedContent
from loopctl.message import (
    ImagePart,
    ImageSource,
    Message,
    MessagePart,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
)
from loopctl.providers import ConversionCache, ModelRequest, openai_chat
from loopctl.providers._common import rewrite_tool_id
from loopctl.tool import ForceTool, ToolSchema

PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
).decode()
PNG_URL = f"data:image/png;base64,{PNG}"


def png() -> ImagePart:
    return ImagePart(source=ImageSource(media_type="image/png", data=PNG))


def user(*parts: MessagePart | str) -> Message:
    return Message.new(Role.USER, [TextPart(text=p) if isinstance(p, str) else p for p in parts])


def assistant(*parts: MessagePart | str) -> Message:
    return Message.new(Role.ASSISTANT, [TextPart(text=p) if isinstance(p, str) else p for p in parts])


def system(text: str) -> Message:
    return Message.new(Role.SYSTEM, [TextPart(text=text)])


def call(call_id: str, name: str = "read", args: Any = None) -> ToolCallPart:
    return ToolCallPart(id=call_id, name=name, input={"path": "a.txt"} if args is None else args)


def result(call_id: str, output: Any = "ok", *, name: str = "read", is_error: bool | None = None) -> ToolResultPart:
    return ToolResultPart(call_id=call_id, name=name, output=output, is_error=is_error)


def chat(messages: list[Message], **options: Any) -> list[dict[str, Any]]:
    body = openai_chat.build_request(messages, model="gpt-4o", **options)
    out: list[dict[str, Any]] = body["messages"]
    return out


# --- system messages ------------------------------------------------------------------------------------------


class TestSystem:
    def test_system_argument_becomes_the_first_system_message(self) -> None:
        assert chat([user("hi")], system="Be brief.") == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ]

    def test_system_role_option_sends_developer_messages(self) -> None:
        out = chat([system("rules"), user("hi")], system="first", system_role="developer")
        assert [m["role"] for m in out] == ["developer", "developer", "user"]

    def test_empty_system_prompt_and_empty_system_message_are_left_out(self) -> None:
        empty = Message.new(Role.SYSTEM, [])
        assert chat([empty, user("hi")], system="") == [{"role": "user", "content": "hi"}]

    def test_system_message_text_parts_are_one_string(self) -> None:
        message = Message.new(Role.SYSTEM, [TextPart(text="a"), TextPart(text="b")])
        assert chat([message]) == [{"role": "system", "content": "ab"}]

    def test_image_in_a_system_message_is_unsupported(self) -> None:
        message = Message.model_construct(role=Role.SYSTEM, parts=(png(),))
        with pytest.raises(UnsupportedContent, match=r"messages\[1\]\.parts\[0\]: a 'image' part"):
            chat([user("hi"), message])


def tool_call(call_id: str, name: str = "read", arguments: str = '{"path": "a.txt"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# --- assistant turns ------------------------------------------------------------------------------------------


class TestAssistantTurn:
    def test_text_beside_tool_calls_is_the_content(self) -> None:
        out = chat([user("go"), assistant("Reading it.", call("c1"))])
        assert out[1] == {"role": "assistant", "content": "Reading it.", "tool_calls": [tool_call("c1")]}

    def test_text_parts_are_joined_into_one_string(self) -> None:
        assert chat([user("go"), assistant("a", "b")])[1] == {"role": "assistant", "content": "ab"}

    def test_empty_assistant_turn_is_an_empty_string(self) -> None:
        assert chat([user("go"), Message.new(Role.ASSISTANT, [])])[1] == {"role": "assistant", "content": ""}

    def test_arguments_are_json_text_as_the_model_writes_it(self) -> None:
        args = {"q": "café ☕", "n": [1, 2.5, None, True]}
        out = chat([user("go"), assistant(call("c1", "search", args))])
        arguments = out[1]["tool_calls"][0]["function"]["arguments"]
        assert arguments == '{"q": "café ☕", "n": [1, 2.5, null, true]}'
        assert json.loads(arguments) == args

    def test_arguments_of_any_json_value(self) -> None:
        out = chat([user("go"), assistant(call("c1", "echo", "text")), user(result("c1"))])
        assert out[1]["tool_calls"][0]["function"]["arguments"] == '"text"'

    def test_tool_call_input_that_json_cannot_write_is_unsupported(self) -> None:
        # The model refuses NaN on construction; a codec still refuses what slipped past it (model_construct).
        bad = ToolCallPart.model_construct(id="c1", name="n", input={"x": float("nan")})
        with pytest.raises(UnsupportedContent, match=r"messages\[1\]\.parts\[0\]\.input: tool-call input is not"):
            chat([user("go"), assistant(bad)])

    def test_image_in_an_assistant_message_is_unsupported(self) -> None:
        message = Message.model_construct(role=Role.ASSISTANT, parts=(TextPart(text="x"), png()))
        with pytest.raises(UnsupportedContent, match=r"messages\[1\]\.parts\[1\]: a 'image' part cannot be sent"):
            chat([user("go"), message])

    def test_tool_result_in_an_assistant_message_is_unsupported(self) -> None:
        message = Message.new(Role.ASSISTANT, [result("c1")])
        with pytest.raises(UnsupportedContent, match=r"messages\[0\]\.parts\[0\]: a 'tool_result' part"):
            chat([message])


# --- tool results ---------------------------------------------------------------------------------------------


class TestToolResults:
    def test_one_tool_message_per_result_in_the_order_of_the_calls(self) -> None:
        messages = [user("go"), assistant(call("c1"), call("c2")), user(result("c2", "two"), result("c1", "one"))]
        assert chat(messages)[2:] == [
            {"role": "tool", "tool_call_id": "c1", "content": "one"},
            {"role": "tool", "tool_call_id": "c2", "content": "two"},
        ]

    def test_results_split_over_two_user_messages_follow_the_call_directly(self) -> None:
        messages = [
            user("go"),
            assistant(call("c1"), call("c2")),
            user(result("c1", "one"), "note"),
            user(result("c2")),
        ]
        assert chat(messages)[2:] == [
            {"role": "tool", "tool_call_id": "c1", "content": "one"},
            {"role": "tool", "tool_call_id": "c2", "content": "ok"},
            {"role": "user", "content": "note"},
        ]

    def test_user_content_beside_results_comes_after_the_tool_messages(self) -> None:
        messages = [user("go"), assistant(call("c1")), user("first", result("c1"), png())]
        assert chat(messages)[2:] == [
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "first"}, {"type": "image_url", "image_url": {"url": PNG_URL}}],
            },
        ]

    def test_multipart_text_output_is_joined_with_newlines(self) -> None:
        output = ToolContent.from_multipart([TextPart(text="line 1"), TextPart(text="line 2")])
        out = chat([user("go"), assistant(call("c1")), user(result("c1", output))])
        assert out[2]["content"] == "line 1\nline 2"

    def test_failed_result_is_marked_in_its_text(self) -> None:
        messages = [user("go"), assistant(call("c1"), call("c2"), call("c3"))]
        messages.append(user(result("c1", "no such file", is_error=True), result("c2", is_error=False), result("c3")))
        out = chat(messages)
        assert [m["content"] for m in out[2:]] == ["[tool error] no such file", "ok", "ok"]

    def test_result_without_a_call_is_refused_before_it_is_sent(self) -> None:
        # It was sent as a tool message where it stood, for OpenAI to refuse with a 400.
        with pytest.raises(UnsupportedContent, match=r"^messages\[1\]\.parts\[0\]: the tool result for 'lost'"):
            chat([user("hi"), user(result("lost", "x"))])

    def test_tool_call_in_a_user_message_is_unsupported(self) -> None:
        with pytest.raises(UnsupportedContent, match=r"messages\[0\]\.parts\[0\]: a 'tool_call' part"):
            chat([Message.new(Role.USER, [call("c1")])])


# --- user content ---------------------------------------------------------------------------------------------


class TestUserContent:
    def test_one_text_part_is_a_string(self) -> None:
        assert chat([user("hi")]) == [{"role": "user", "content": "hi"}]

    def test_user_image_is_an_image_url_part_with_a_data_url(self) -> None:
        assert chat([user("what is this?", png())]) == [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": PNG_URL}},
                ],
            }
        ]

    def test_image_detail_option(self) -> None:
        out = chat([user(png())], image_detail="low")
        assert out[0]["content"] == [{"type": "image_url", "image_url": {"url": PNG_URL, "detail": "low"}}]

    def test_empty_text_parts_are_dropped_beside_other_content(self) -> None:
        assert chat([user("", "hi", "")]) == [{"role": "user", "content": "hi"}]
        assert chat([Message.new(Role.USER, [])]) == [{"role": "user", "content": ""}]


# --- tool-call ids --------------------------------------------------------------------------------------------


class TestToolCallIds:
    def test_openai_ids_pass_unchanged(self) -> None:
        out = chat(
            [
                user("go"),
                assistant(call("call_M26z19sncd7b4LBgzKRRbaUE")),
                user(result("call_M26z19sncd7b4LBgzKRRbaUE")),
            ]
        )
        assert out[1]["tool_calls"][0]["id"] == "call_M26z19sncd7b4LBgzKRRbaUE"
        assert out[2]["tool_call_id"] == "call_M26z19sncd7b4LBgzKRRbaUE"

    @pytest.mark.parametrize(
        "foreign",
        ["fc_0f0e50a1476a6c35006912c58dc9f8819192c25864eb16f07f", "toolu_01/abc+def", "call é 1", "x" * 41],
    )
    def test_foreign_ids_are_rewritten_identically_on_call_and_result(self, foreign: str) -> None:
        out = chat([user("go"), assistant(call(foreign)), user(result(foreign))])
        new = out[1]["tool_calls"][0]["id"]
        assert new == rewrite_tool_id(foreign, max_len=40)
        assert new != foreign
        assert len(new) <= 40
        assert out[2]["tool_call_id"] == new

    def test_two_long_ids_sharing_a_prefix_stay_distinct(self) -> None:
        a, b = "p" * 45 + "a", "p" * 45 + "b"
        out = chat([user("go"), assistant(call(a), call(b)), user(result(b, "B"), result(a, "A"))])
        ids = [c["id"] for c in out[1]["tool_calls"]]
        assert len(set(ids)) == 2
        assert [(m["tool_call_id"], m["content"]) for m in out[2:]] == [(ids[0], "A"), (ids[1], "B")]

    def test_max_length_option(self) -> None:
        out = chat([user("go"), assistant(call("call_M26z19sncd7b4LBgzKRRbaUE"))], tool_call_id_max_length=9)
        assert len(out[1]["tool_calls"][0]["id"]) == 9


# --- options --------------------------------------------------------------------------------------------------


def build(**options: Any) -> dict[str, Any]:
    return openai_chat.build_request([user("hi")], model="gpt-4o", **options)


class TestOptions:
    def test_defaults_send_only_model_and_messages(self) -> None:
        assert build() == {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}

    def test_max_tokens_is_sent_as_max_completion_tokens(self) -> None:
        assert build(max_tokens=500)["max_completion_tokens"] == 500
        assert "max_tokens" not in build(max_tokens=500)

    def test_max_tokens_param_option_for_servers_that_know_only_max_tokens(self) -> None:
        body = build(max_tokens=500, max_tokens_param="max_tokens")
        assert body["max_tokens"] == 500
        assert "max_completion_tokens" not in body

    def test_temperature_stop_and_reasoning_effort(self) -> None:
        body = build(temperature=0.2, stop=("END", "STOP"), reasoning_effort="low")
        assert (body["temperature"], body["stop"], body["reasoning_effort"]) == (0.2, ["END", "STOP"], "low")

    @pytest.mark.parametrize(
        ("choice", "wire"),
        [
            ("auto", "auto"),
            ("none", "none"),
            ("required", "required"),
            (ForceTool("read"), {"type": "function", "function": {"name": "read"}}),
        ],
    )
    def test_tool_choice(self, choice: Any, wire: Any) -> None:
        assert build(tool_choice=choice)["tool_choice"] == wire

    def test_stream_sets_stream_and_include_usage(self) -> None:
        body = build(stream=True)
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}

    def test_extra_is_merged_last(self) -> None:
        body = build(temperature=0.2, stream=True, extra={"temperature": 1.0, "seed": 7, "stream_options": {}})
        assert (body["temperature"], body["seed"], body["stream_options"]) == (1.0, 7, {})

    def test_tools_are_function_schemas(self) -> None:
        schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
        body = build(tools=[ToolSchema("read", "Read a file.", schema), ToolSchema("noop")])
        assert body["tools"] == [
            {"type": "function", "function": {"name": "read", "description": "Read a file.", "parameters": schema}},
            {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}},
        ]
        assert body["tools"][0]["function"]["parameters"] is not schema

    def test_strict_tools_set_strict_and_convert_the_schema(self) -> None:
        schema = {
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path"],
        }
        [tool] = build(tools=[ToolSchema("read", "", schema)], strict_tools=True)["tools"]
        assert tool == {
            "type": "function",
            "function": {
                "name": "read",
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "limit": {"type": ["integer", "null"]}},
                    "required": ["path", "limit"],
                    "additionalProperties": False,
                },
                "strict": True,
            },
        }

    @pytest.mark.parametrize(
        "options",
        [{"max_tokens_param": "max_output_tokens"}, {"system_role": "assistant"}, {"tool_choice": "any"}],
    )
    def test_bad_option_values_raise_value_error(self, options: dict[str, Any]) -> None:
        with pytest.raises(ValueError, match="must be"):
            build(**options)

    def test_build_request_from_a_model_request(self) -> None:
        request = ModelRequest(
            messages=[user("hi")],
            system="Be brief.",
            tools=[ToolSchema("noop")],
            max_tokens=10,
            temperature=0.5,
            stop=["x"],
            tool_choice="required",
            reasoning_effort="high",
            extra={"seed": 1},
        )
        body = openai_chat.build_request_from(request, model="m", stream=True, system_role="developer")
        assert body == {
            "model": "m",
            "messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}],
            "tools": [
                {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}}
            ],
            "tool_choice": "required",
            "max_completion_tokens": 10,
            "temperature": 0.5,
            "stop": ["x"],
            "reasoning_effort": "high",
            "stream": True,
            "stream_options": {"include_usage": True},
            "seed": 1,
        }


# --- strict mode schemas --------------------------------------------------------------------------------------


class TestStrictSchema:
    def test_every_object_gets_additional_properties_false_and_all_properties_required(self) -> None:
        schema = {
            "type": "object",
            "properties": {
                "where": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
            },
            "required": ["where", "tags"],
        }
        assert openai_chat.strict_schema(schema) == {
            "type": "object",
            "properties": {
                "where": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
                "tags": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"k": {"type": ["string", "null"]}},
                        "required": ["k"],
                        "additionalProperties": False,
                    },
                },
            },
            "required": ["where", "tags"],
            "additionalProperties": False,
        }

    @pytest.mark.parametrize(
        ("optional", "nullable"),
        [
            ({"type": "string"}, {"type": ["string", "null"]}),
            ({"type": ["string", "integer"]}, {"type": ["string", "integer", "null"]}),
            ({"type": ["string", "null"]}, {"type": ["string", "null"]}),
            ({"type": "string", "enum": ["F", "C"]}, {"type": ["string", "null"], "enum": ["F", "C", None]}),
            (
                {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
            ),
            ({"$ref": "#/$defs/Unit"}, {"anyOf": [{"$ref": "#/$defs/Unit"}, {"type": "null"}]}),
            ({"description": "anything"}, {"anyOf": [{"description": "anything"}, {"type": "null"}]}),
        ],
    )
    def test_optional_properties_become_nullable(self, optional: dict[str, Any], nullable: dict[str, Any]) -> None:
        schema = {"type": "object", "properties": {"x": optional}}
        assert openai_chat.strict_schema(schema)["properties"]["x"] == nullable

    def test_defs_are_converted_and_one_entry_all_of_inlined(self) -> None:
        schema = {
            "type": "object",
            "$defs": {"Unit": {"type": "object", "properties": {"name": {"type": "string"}}}},
            "properties": {
                "unit": {"allOf": [{"$ref": "#/$defs/Unit"}], "description": "u"},
                "n": {"type": "integer", "default": None},
            },
            "required": ["unit"],
        }
        out = openai_chat.strict_schema(schema)
        assert out["$defs"]["Unit"]["additionalProperties"] is False
        assert out["$defs"]["Unit"]["required"] == ["name"]
        assert out["properties"]["unit"] == {"$ref": "#/$defs/Unit", "description": "u"}
        assert out["properties"]["n"] == {"type": ["integer", "null"]}

    def test_an_object_without_properties_gets_empty_properties(self) -> None:
        assert openai_chat.strict_schema({"type": "object"}) == {
            "type": "object",
            "additionalProperties": False,
            "properties": {},
            "required": [],
        }

    @pytest.mark.parametrize("extra", [True, {"type": "string"}])
    def test_free_form_map_cannot_be_strict(self, extra: Any) -> None:
        schema = {"type": "object", "properties": {"env": {"type": "object", "additionalProperties": extra}}}
        with pytest.raises(UnsupportedContent, match=r"tools\[0\]\.input_schema\.properties\.env: strict mode cannot"):
            build(tools=[ToolSchema("run", "", schema)], strict_tools=True)

    def test_root_that_is_not_an_object_cannot_be_strict(self) -> None:
        with pytest.raises(UnsupportedContent, match="object schema at the root"):
            openai_chat.strict_schema({"type": "array", "items": {"type": "string"}})

    def test_the_input_schema_is_not_mutated(self) -> None:
        schema = {"type": "object", "properties": {"a": {"type": "string"}}}
        before = json.dumps(schema)
        openai_chat.strict_schema(schema)
        assert json.dumps(schema) == before


# --- the conversion cache -------------------------------------------------------------------------------------


class TestCache:
    def conversation(self) -> list[Message]:
        shot = ToolContent.from_multipart([TextPart(text="see"), png()])
        return [
            system("rules"),
            user("go", png()),
            assistant(ThinkingPart(text="t", provider="openai-compatible"), "reading", call("toolu_01/x"), call("c2")),
            user(result("c2", shot), result("toolu_01/x", "done", is_error=True)),
            assistant("finished"),
        ]

    def test_the_body_is_the_same_with_and_without_a_cache(self) -> None:
        messages = self.conversation()
        cache = ConversionCache()
        plain = openai_chat.build_request(messages, model="m", system="s")
        assert openai_chat.build_request(messages, model="m", system="s", cache=cache) == plain
        assert openai_chat.build_request(messages, model="m", system="s", cache=cache) == plain
        assert len(cache) == len(messages)

    def test_a_cached_message_is_not_converted_again(self) -> None:
        messages = self.conversation()
        cache = ConversionCache()
        first = openai_chat.build_request(messages, model="m", cache=cache)
        second = openai_chat.build_request([*messages, user("more")], model="m", cache=cache)
        assert second["messages"][0] is first["messages"][0]
        assert second["messages"][-1] == {"role": "user", "content": "more"}

    def test_an_option_that_changes_conversion_is_part_of_the_key(self) -> None:
        messages = self.conversation()
        cache = ConversionCache()
        openai_chat.build_request(messages, model="m", cache=cache)
        replayed = openai_chat.build_request(messages, model="m", cache=cache, replay_reasoning_content=True)
        assert replayed == openai_chat.build_request(messages, model="m", replay_reasoning_content=True)
        assert replayed["messages"][2]["reasoning_content"] == "t"
