"""OpenAI Responses request building: one test per rule of the codec (docs/providers/openai_responses.md)."""

from __future__ import annotations

import base64
import re
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
from loopctl.providers import openai_responses as codec
from loopctl.providers.base import ConversionCache, ModelRequest
from loopctl.tool import ForceTool, ToolSchema
from tests.conftest import Recording
from tests.providers.responses_wire import validate_with_sdk

PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
).decode()
PNG_URL = f"data:image/png;base64,{PNG}"


def png() -> ImagePart:
    return ImagePart(source=ImageSource(media_type="image/png", data=PNG))


def build(messages: list[Message], **options: Any) -> dict[str, Any]:
    body = codec.build_request(messages, model="gpt-5", **options)
    validate_with_sdk(body)
    return body


def items(messages: list[Message], **options: Any) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = build(messages, **options)["input"]
    return result


def assistant(*parts: MessagePart) -> Message:
    return Message.new(Role.ASSISTANT, parts)


def user(*parts: MessagePart) -> Message:
    return Message.new(Role.USER, parts)


def system(text: str) -> Message:
    return Message.new(Role.SYSTEM, [TextPart(text=text)])


def call(call_id: str = "call_1", item_id: str | None = "fc_1", **input: Any) -> ToolCallPart:
    return ToolCallPart(id=call_id, name="lookup", input=input or {"q": "x"}, item_id=item_id)


def result(call_id: str = "call_1", output: Any = "ok", is_error: bool | None = None) -> ToolResultPart:
    return ToolResultPart(call_id=call_id, name="lookup", output=output, is_error=is_error)


def thinking(
    text: str = "", item_id: str = "rs_1", signature: str | None = "enc", provider: str | None = "openai"
) -> ThinkingPart:
    return ThinkingPart(text=text, signature=signature, provider=provider, item_id=item_id)


def fc(call_id: str = "call_1", item_id: str | None = "fc_1", arguments: str = '{"q":"x"}') -> dict[str, Any]:
    out = {"type": "function_call", "call_id": call_id, "name": "lookup", "arguments": arguments}
    if item_id is not None:
        out["id"] = item_id
    return out


def msg(item_id: str, *texts: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "id": item_id,
        "status": "completed",
        "content": [{"type": "output_text", "text": t, "annotations": []} for t in texts],
    }


HELLO = Message.user("hello")


# --- system --------------------------------------------------------------------------------------------------


class TestSystem:
    def test_system_argument_is_the_first_inline_developer_message(self) -> None:
        body = build([HELLO], system="Be brief.")
        assert body["input"] == [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hello"}]
        assert "instructions" not in body

    def test_system_argument_as_top_level_instructions_on_request(self) -> None:
        body = build([HELLO], system="Be brief.", system_as_instructions=True)
        assert body["instructions"] == "Be brief."
        assert body["input"] == [{"role": "user", "content": "hello"}]

    def test_system_role_can_be_system(self) -> None:
        body = build([system("rules"), HELLO], system="Be brief.", system_role="system")
        assert body["input"][:2] == [{"role": "system", "content": "Be brief."}, {"role": "system", "content": "rules"}]

    def test_empty_system_text_sends_nothing(self) -> None:
        assert items([Message.new(Role.SYSTEM, []), system(""), HELLO], system="") == [
            {"role": "user", "content": "hello"}
        ]

    def test_system_image_raises_unsupported_content(self) -> None:
        with pytest.raises(UnsupportedContent, match=r"messages\[0\]\.parts\[1\]"):
            codec.build_request([Message.new(Role.SYSTEM, [TextPart(text="x"), png()])], model="m")


class TestSystemMessageInTheMiddle:
    """A system message in the middle of a conversation stays inline where it stands (project decision for
    OpenAI; Responses input items accept developer/system messages anywhere)."""

    def test_it_stays_where_it_stands_after_the_system_argument(self) -> None:
        conversation = [HELLO, assistant(TextPart(text="hi")), system("Now answer in French."), Message.user("ok")]
        assert items(conversation, system="Be brief.") == [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "hi"},
            {"role": "developer", "content": "Now answer in French."},
            {"role": "user", "content": "ok"},
        ]

    def test_between_a_tool_call_and_its_result_it_does_not_break_pairing(self) -> None:
        conversation = [HELLO, assistant(call(item_id=None)), system("note"), user(result())]
        assert items(conversation) == [
            {"role": "user", "content": "hello"},
            fc(item_id=None),
            {"role": "developer", "content": "note"},
            {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
        ]

    def test_text_parts_of_one_system_message_are_joined_with_no_separator(self) -> None:
        message = Message.new(Role.SYSTEM, [TextPart(text="a"), TextPart(text="b")])
        assert items([HELLO, message]) == [{"role": "user", "content": "hello"}, {"role": "developer", "content": "ab"}]


# --- user side --------------------------------------------------------------------------------------------------


class TestUserContent:
    def test_one_text_part_is_the_easy_string_form(self) -> None:
        assert items([HELLO]) == [{"role": "user", "content": "hello"}]

    def test_images_ride_as_input_image_data_urls_in_order(self) -> None:
        message = user(TextPart(text="look"), png(), TextPart(text="and"))
        assert items([message]) == [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": PNG_URL, "detail": "auto"},
                    {"type": "input_text", "text": "and"},
                ],
            }
        ]

    @pytest.mark.parametrize("media_type", ["image/svg+xml", "image/bmp", "image/tiff", "text/plain"])
    def test_an_image_of_a_type_openai_does_not_read_is_refused_naming_its_path(self, media_type: str) -> None:
        # It was sent as a data URL for OpenAI to refuse with a 400 (only PNG, JPEG, WEBP and GIF are read).
        odd = ImagePart(source=ImageSource(media_type=media_type, data=PNG))
        with pytest.raises(
            UnsupportedContent, match=rf"^messages\[0\]\.parts\[1\]: image media type '{re.escape(media_type)}'"
        ):
            items([user(TextPart(text="look"), odd)])
        result = MessagePart.tool_result("call_1", "shot", [TextPart(text="x"), odd])
        conversation = [HELLO, assistant(call("call_1", "fc_1")), user(result)]
        with pytest.raises(UnsupportedContent, match=r"^messages\[2\]\.parts\[0\]\.output\[1\]: image media type"):
            items(conversation)

    def test_empty_text_parts_are_not_sent(self) -> None:
        assert items([user(TextPart(text=""), TextPart(text="x")), user(TextPart(text=""))]) == [
            {"role": "user", "content": "x"}
        ]


class TestToolResults:
    def test_each_result_is_a_function_call_output_item_and_text_keeps_its_place(self) -> None:
        conversation = [
            HELLO,
            assistant(call("call_1", "fc_1"), call("call_2", "fc_2")),
            user(result("call_1", "one"), result("call_2", "two"), TextPart(text="thanks")),
        ]
        assert items(conversation)[3:] == [
            {"type": "function_call_output", "call_id": "call_1", "output": "one"},
            {"type": "function_call_output", "call_id": "call_2", "output": "two"},
            {"role": "user", "content": "thanks"},
        ]

    def test_results_split_over_two_user_messages_stay_in_order(self) -> None:
        conversation = [
            HELLO,
            assistant(call("call_1"), call("call_2", "fc_2")),
            user(result("call_1")),
            user(result("call_2")),
        ]
        assert [i["call_id"] for i in items(conversation)[3:]] == ["call_1", "call_2"]

    def test_a_failed_result_is_marked_in_its_text_as_on_chat(self) -> None:
        # function_call_output has no error flag; the failure did not travel at all, so the model read an
        # error message as the tool's output.
        conversation = [HELLO, assistant(call()), user(result(output="boom", is_error=True))]
        assert items(conversation)[-1] == {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": "[tool error] boom",
        }
        assert items([HELLO, assistant(call()), user(result(output="ok", is_error=False))])[-1]["output"] == "ok"

    def test_a_failed_multipart_result_is_marked_in_its_first_text(self) -> None:
        text_first = result(output=ToolContent.from_multipart([TextPart(text="crashed"), TextPart(text="trace")]))
        text_first = text_first.model_copy(update={"is_error": True})
        output = items([HELLO, assistant(call()), user(text_first)])[-1]["output"]
        assert [c["text"] for c in output] == ["[tool error] crashed", "trace"]
        image_first = result(output=ToolContent.from_multipart([png()])).model_copy(update={"is_error": True})
        output = items([HELLO, assistant(call()), user(image_first)])[-1]["output"]
        assert output[0] == {"type": "input_text", "text": "[tool error]"}
        assert output[1]["type"] == "input_image"

    def test_results_stored_out_of_order_are_sent_in_call_order_text_in_place(self) -> None:
        conversation = [
            HELLO,
            assistant(call("call_1", "fc_1"), call("call_2", "fc_2"), call("call_3", "fc_3")),
            user(result("call_3", "three"), TextPart(text="between")),
            user(result("call_1", "one"), result("call_2", "two")),
        ]
        sent = items(conversation)[4:]
        assert [i.get("call_id", i.get("content")) for i in sent] == ["call_1", "between", "call_2", "call_3"]
        assert [i["output"] for i in sent if "output" in i] == ["one", "two", "three"]

    def test_empty_multipart_output_is_an_empty_string(self) -> None:
        conversation = [HELLO, assistant(call()), user(result(output=ToolContent.from_multipart([])))]
        assert items(conversation)[-1]["output"] == ""


class TestToolResultHoldingAPng:
    """Images in tool results ride inside ``function_call_output.output`` as ``input_image`` items, in place
    (openai-python FunctionCallOutput.output: str | ResponseFunctionCallOutputItemListParam of input_text /
    input_image / input_file)."""

    def test_png_stays_in_the_output_list_in_order(self) -> None:
        output = ToolContent.from_multipart([TextPart(text="before"), png(), TextPart(text="after")])
        conversation = [HELLO, assistant(call()), user(result(output=output))]
        assert items(conversation)[-1] == {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": [
                {"type": "input_text", "text": "before"},
                {"type": "input_image", "image_url": PNG_URL, "detail": "auto"},
                {"type": "input_text", "text": "after"},
            ],
        }

    def test_png_alone_is_not_moved_to_a_user_message(self) -> None:
        conversation = [HELLO, assistant(call()), user(result(output=ToolContent.from_multipart([png()])))]
        built = items(conversation)
        assert len(built) == 3
        assert built[-1]["output"] == [{"type": "input_image", "image_url": PNG_URL, "detail": "auto"}]


# --- assistant side -----------------------------------------------------------------------------------------------


class TestAssistantContent:
    def test_text_with_an_item_id_is_an_output_message_item(self) -> None:
        conversation = [HELLO, assistant(TextPart(text="a", item_id="msg_1"), TextPart(text="b", item_id="msg_1"))]
        assert items(conversation)[1:] == [msg("msg_1", "a", "b")]

    def test_text_without_an_item_id_is_the_easy_form_joined(self) -> None:
        conversation = [HELLO, assistant(TextPart(text="a"), TextPart(text="b"))]
        assert items(conversation)[1:] == [{"role": "assistant", "content": "ab"}]

    def test_empty_easy_assistant_text_is_not_sent(self) -> None:
        assert items([HELLO, assistant(TextPart(text="")), Message.user("again")]) == [
            {"role": "user", "content": "hello"},
            {"role": "user", "content": "again"},
        ]

    def test_tool_call_is_a_function_call_with_compact_json_arguments_and_its_item_id(self) -> None:
        part = ToolCallPart(id="call_9", name="f", input={"a": [1, 2], "é": "漢"}, item_id="fc_9")
        assert items([HELLO, assistant(part)])[1] == {
            "type": "function_call",
            "call_id": "call_9",
            "name": "f",
            "arguments": '{"a":[1,2],"é":"漢"}',
            "id": "fc_9",
        }

    def test_tool_call_without_item_id_has_no_id(self) -> None:
        assert items([HELLO, assistant(call(item_id=None))])[1] == fc(item_id=None)

    def test_image_in_an_assistant_message_raises_unsupported_content(self) -> None:
        with pytest.raises(UnsupportedContent, match=r"messages\[1\]\.parts\[0\].*image in an assistant message"):
            codec.build_request([HELLO, assistant(png())], model="m")

    def test_tool_call_in_a_user_message_raises(self) -> None:
        with pytest.raises(UnsupportedContent, match=r"messages\[0\]\.parts\[0\].*tool call in a user message"):
            codec.build_request([user(call())], model="m")

    def test_tool_result_in_an_assistant_message_raises(self) -> None:
        with pytest.raises(UnsupportedContent, match=r"messages\[1\]\.parts\[0\].*tool result"):
            codec.build_request([HELLO, assistant(result())], model="m")


class TestToolCallIds:
    def test_openai_call_ids_pass_unchanged(self) -> None:
        built = items(
            [HELLO, assistant(call("call_gL7JE6GDeGGsFubqO2XGytyO")), user(result("call_gL7JE6GDeGGsFubqO2XGytyO"))]
        )
        assert built[1]["call_id"] == built[2]["call_id"] == "call_gL7JE6GDeGGsFubqO2XGytyO"

    @pytest.mark.parametrize("foreign", ["toolu_01" + "A" * 70, "call:with spaces/and.dots", "函数_1"])
    def test_ids_another_provider_minted_are_rewritten_identically_on_call_and_result(self, foreign: str) -> None:
        built = items([HELLO, assistant(call(foreign, item_id=None)), user(result(foreign))])
        rewritten = built[1]["call_id"]
        assert rewritten == built[2]["call_id"]
        assert rewritten != foreign
        assert len(rewritten) <= 64
        assert all(c.isascii() and (c.isalnum() or c in "_-") for c in rewritten)


# --- reasoning ---------------------------------------------------------------------------------------------------


class TestReasoningReplay:
    def test_reasoning_item_rebuilt_exactly_from_consecutive_parts(self) -> None:
        parts = [
            thinking("first", signature="ENC"),
            thinking("second", signature=None),
            thinking("third", signature=None),
            call(),
        ]
        assert items([HELLO, assistant(*parts)])[1:] == [
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [
                    {"type": "summary_text", "text": "first"},
                    {"type": "summary_text", "text": "second"},
                    {"type": "summary_text", "text": "third"},
                ],
                "encrypted_content": "ENC",
            },
            fc(),
        ]

    def test_reasoning_item_without_summary_rebuilds_with_an_empty_summary(self) -> None:
        built = items([HELLO, assistant(thinking("", signature="ENC"), TextPart(text="hi", item_id="msg_1"))])
        assert built[1:] == [
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "ENC"},
            msg("msg_1", "hi"),
        ]

    def test_reasoning_without_encrypted_content_is_replayed_by_id_while_items_are_stored(self) -> None:
        built = items([HELLO, assistant(thinking("t", signature=None), TextPart(text="hi", item_id="msg_1"))])
        assert built[1] == {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "t"}]}

    def test_two_reasoning_items_in_one_reply_each_keep_their_following_item(self) -> None:
        parts = [
            thinking("a", "rs_1"),
            call("call_1", "fc_1"),
            thinking("b", "rs_2"),
            TextPart(text="done", item_id="msg_2"),
        ]
        built = items([HELLO, assistant(*parts), user(result("call_1"))])
        assert [i.get("type") or i.get("role") for i in built] == [
            "user",
            "reasoning",
            "function_call",
            "reasoning",
            "message",
            "function_call_output",
        ]
        assert [built[1]["id"], built[2]["id"], built[3]["id"], built[4]["id"]] == ["rs_1", "fc_1", "rs_2", "msg_2"]

    def test_a_reasoning_id_seen_twice_in_one_message_is_sent_once(self) -> None:
        parts = [thinking("a"), call("call_1", "fc_1"), thinking("a"), call("call_2", "fc_2")]
        built = items([HELLO, assistant(*parts), user(result("call_1"), result("call_2"))])
        assert [i.get("type") for i in built[1:4]] == ["reasoning", "function_call", "function_call"]
        assert built[3] == fc("call_2", item_id=None, arguments='{"q":"x"}')


class TestReasoningItemWhoseFollowingItemWasRemoved:
    """The API refuses a reasoning item without the item that followed it (recorded 400
    ``responses-error-400-reasoning-without-following-item``): such an item is left out, and what came after
    it loses its item ids (an id would make the API ask for the missing reasoning item)."""

    def test_reasoning_at_the_end_of_the_message_is_left_out(self) -> None:
        built = items([HELLO, assistant(TextPart(text="hi", item_id="msg_1"), thinking("t")), Message.user("more")])
        assert built == [
            {"role": "user", "content": "hello"},
            msg("msg_1", "hi"),
            {"role": "user", "content": "more"},
        ]

    def test_a_message_left_with_only_its_reasoning_sends_nothing_for_it(self) -> None:
        assert items([HELLO, assistant(thinking("t")), Message.user("more")]) == [
            {"role": "user", "content": "hello"},
            {"role": "user", "content": "more"},
        ]

    def test_following_text_that_lost_its_item_id_makes_the_reasoning_item_left_out(self) -> None:
        built = items([HELLO, assistant(thinking("t"), TextPart(text="edited")), Message.user("more")])
        assert built[1] == {"role": "assistant", "content": "edited"}
        assert all(i.get("type") != "reasoning" for i in built)

    def test_items_after_a_left_out_reasoning_item_lose_their_ids(self) -> None:
        parts = [thinking("t"), TextPart(text="x"), call("call_1", "fc_1"), TextPart(text="y", item_id="msg_1")]
        built = items([HELLO, assistant(*parts), user(result("call_1"))])
        assert built[1:4] == [
            {"role": "assistant", "content": "x"},
            fc(item_id=None),
            {"role": "assistant", "content": "y"},
        ]

    def test_ids_come_back_after_the_next_replayed_reasoning_item(self) -> None:
        parts = [thinking("t", "rs_1"), TextPart(text="x"), thinking("u", "rs_2"), call("call_1", "fc_1")]
        built = items([HELLO, assistant(*parts), user(result("call_1"))])
        assert built[1] == {"role": "assistant", "content": "x"}
        assert built[2]["id"] == "rs_2"
        assert built[3] == fc()

    def test_reasoning_followed_by_a_foreign_thinking_part_is_left_out(self) -> None:
        parts = [thinking("t"), thinking("x", "", signature="sig", provider="anthropic"), call()]
        built = items([HELLO, assistant(*parts), user(result())])
        assert built[1] == fc(item_id=None)


class TestForeignOrUnsignedThinking:
    """Replay policy (codec.md): a thinking part goes only to the provider named in ``provider``, in the form
    it minted; any other is left out of the request (it stays in history), never turned into text, and never
    breaks the request."""

    @pytest.mark.parametrize(
        "part",
        [
            ThinkingPart(text="claude thought", signature="anthropic-sig", provider="anthropic"),
            ThinkingPart(text="", redacted="opaque", provider="anthropic"),
            ThinkingPart(text="gemini thought", signature="gemini-sig", provider="gemini"),
            ThinkingPart(text="unsigned, no provider"),
            ThinkingPart(text="openai but no item id", signature="enc", provider="openai"),
            ThinkingPart(text="foreign with an rs id", signature="enc", provider="anthropic", item_id="rs_1"),
        ],
    )
    def test_it_is_left_out_and_the_rest_is_sent(self, part: ThinkingPart) -> None:
        conversation = [HELLO, assistant(part, TextPart(text="answer")), Message.user("next")]
        assert items(conversation) == [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "answer"},
            {"role": "user", "content": "next"},
        ]

    def test_its_text_never_reaches_the_request(self) -> None:
        secret = "a thought only anthropic may see"
        body = build(
            [
                HELLO,
                assistant(ThinkingPart(text=secret, signature="s", provider="anthropic"), call(item_id=None)),
                user(result()),
            ]
        )
        assert secret not in str(body)

    def test_history_is_not_changed(self) -> None:
        message = assistant(ThinkingPart(text="x", signature="s", provider="gemini"), TextPart(text="a"))
        before = message.to_dict()
        build([HELLO, message])
        assert message.to_dict() == before

    def test_thinking_in_a_user_message_is_left_out(self) -> None:
        assert items([user(TextPart(text="hi"), thinking("t"))]) == [{"role": "user", "content": "hi"}]


class TestStore:
    def test_store_false_leaves_out_reasoning_without_encrypted_content(self) -> None:
        parts = [thinking("t", signature=None), TextPart(text="hi", item_id="msg_1")]
        body = build([HELLO, assistant(*parts)], store=False)
        assert body["store"] is False
        assert body["input"][1:] == [{"role": "assistant", "content": "hi"}]

    def test_store_false_keeps_reasoning_with_encrypted_content(self) -> None:
        body = build(
            [HELLO, assistant(thinking("t", signature="ENC"), TextPart(text="hi", item_id="msg_1"))], store=False
        )
        assert body["input"][1]["encrypted_content"] == "ENC"
        assert body["input"][2] == msg("msg_1", "hi")

    def test_store_is_not_sent_unless_set(self) -> None:
        assert "store" not in build([HELLO])
        assert build([HELLO], store=True)["store"] is True


# --- unknown input ------------------------------------------------------------------------------------------------


class AudioPart(MessagePart):
    """A part kind from a newer release (this one knows five)."""

    type: str = "audio"
    data: str = "..."


class TestPartTypeFromANewerRelease:
    @pytest.mark.parametrize("role", [Role.USER, Role.ASSISTANT, Role.SYSTEM])
    def test_raises_unsupported_content_naming_the_type_and_its_path(self, role: Role) -> None:
        message = Message.model_construct(role=role, parts=(TextPart(text="x"), AudioPart()))
        with pytest.raises(UnsupportedContent) as info:
            codec.build_request([HELLO, message], model="m")
        text = str(info.value)
        assert "messages[1].parts[1]" in text
        assert "'audio'" in text
        assert "does not know" in text

    def test_it_is_a_value_error_and_a_loop_error(self) -> None:
        message = Message.model_construct(role=Role.USER, parts=(AudioPart(),))
        with pytest.raises(ValueError, match="audio"):
            codec.build_request([message], model="m")


# --- options --------------------------------------------------------------------------------------------------------


class TestOptions:
    def test_only_model_and_input_by_default(self) -> None:
        assert build([HELLO]) == {"model": "gpt-5", "input": [{"role": "user", "content": "hello"}]}

    def test_max_tokens_is_max_output_tokens(self) -> None:
        assert build([HELLO], max_tokens=300)["max_output_tokens"] == 300

    def test_temperature(self) -> None:
        assert build([HELLO], temperature=0.25)["temperature"] == 0.25

    def test_stop_is_refused_with_a_clear_error(self) -> None:
        with pytest.raises(UnsupportedContent, match="no stop sequences"):
            codec.build_request([HELLO], model="m", stop=["END"])

    def test_empty_stop_is_fine(self) -> None:
        assert "stop" not in build([HELLO], stop=[])

    @pytest.mark.parametrize("choice", ["auto", "none", "required"])
    def test_tool_choice_words_pass_as_is(self, choice: str) -> None:
        assert build([HELLO], tool_choice=choice)["tool_choice"] == choice

    def test_forced_tool_choice(self) -> None:
        assert build([HELLO], tool_choice=ForceTool("lookup"))["tool_choice"] == {"type": "function", "name": "lookup"}

    def test_reasoning_effort_sets_reasoning_and_asks_for_encrypted_content(self) -> None:
        body = build([HELLO], reasoning_effort="high")
        assert body["reasoning"] == {"effort": "high"}
        assert body["include"] == ["reasoning.encrypted_content"]

    def test_reasoning_summary(self) -> None:
        body = build([HELLO], reasoning_effort="low", reasoning_summary="auto")
        assert body["reasoning"] == {"effort": "low", "summary": "auto"}

    def test_no_encrypted_content_without_reasoning_effort(self) -> None:
        # Non-reasoning models refuse it ("Encrypted content is not supported with this model").
        assert "include" not in build([HELLO])

    def test_encrypted_reasoning_option_wins(self) -> None:
        assert build([HELLO], encrypted_reasoning=True)["include"] == ["reasoning.encrypted_content"]
        assert "include" not in build([HELLO], reasoning_effort="low", encrypted_reasoning=False)

    def test_stream_true_sets_stream(self) -> None:
        assert build([HELLO], stream=True)["stream"] is True
        assert "stream" not in build([HELLO])

    def test_extra_is_merged_last(self) -> None:
        body = build([HELLO], max_tokens=10, extra={"max_output_tokens": 20, "parallel_tool_calls": False})
        assert body["max_output_tokens"] == 20
        assert body["parallel_tool_calls"] is False

    def test_build_request_from_carries_every_field(self) -> None:
        request = ModelRequest(
            messages=[HELLO],
            system="sys",
            tools=[ToolSchema("t", "d")],
            max_tokens=5,
            temperature=0.5,
            tool_choice="required",
            reasoning_effort="minimal",
            extra={"user": "u1"},
        )
        body = codec.build_request_from(request, model="gpt-5", stream=True, system_role="system")
        validate_with_sdk(body)
        assert body == {
            "model": "gpt-5",
            "input": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}],
            "tools": [
                {
                    "type": "function",
                    "name": "t",
                    "parameters": {"type": "object", "properties": {}},
                    "strict": False,
                    "description": "d",
                }
            ],
            "tool_choice": "required",
            "max_output_tokens": 5,
            "temperature": 0.5,
            "reasoning": {"effort": "minimal"},
            "include": ["reasoning.encrypted_content"],
            "stream": True,
            "user": "u1",
        }


# --- tools ----------------------------------------------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "where"},
        "days": {"type": "integer", "default": 3},
        "units": {"enum": ["c", "f"]},
        "filters": {
            "type": "object",
            "properties": {
                "tag": {"type": ["string", "null"]},
                "any": {"oneOf": [{"type": "string"}, {"type": "number"}]},
            },
            "required": ["tag"],
        },
        "points": {
            "type": "array",
            "items": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
        },
    },
    "required": ["city"],
}


class TestTools:
    def test_tools_are_sent_non_strict_by_default(self) -> None:
        tool = ToolSchema("weather", "Get the weather.", SCHEMA)
        assert build([HELLO], tools=[tool])["tools"] == [
            {
                "type": "function",
                "name": "weather",
                "description": "Get the weather.",
                "parameters": SCHEMA,
                "strict": False,
            }
        ]

    def test_empty_description_is_left_out(self) -> None:
        assert "description" not in build([HELLO], tools=[ToolSchema("t")])["tools"][0]

    def test_strict_tools_use_openai_strict_dialect(self) -> None:
        sent = build([HELLO], tools=[ToolSchema("weather", "w", SCHEMA)], strict_tools=True)["tools"][0]
        assert sent["strict"] is True
        assert sent["parameters"] == {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "where"},
                "days": {"type": ["integer", "null"]},
                "units": {"anyOf": [{"enum": ["c", "f"]}, {"type": "null"}]},
                "filters": {
                    "type": ["object", "null"],
                    "properties": {
                        "tag": {"type": ["string", "null"]},
                        "any": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}]},
                    },
                    "required": ["tag", "any"],
                    "additionalProperties": False,
                },
                "points": {
                    "type": ["array", "null"],
                    "items": {
                        "type": "object",
                        "properties": {"x": {"type": "number"}},
                        "required": ["x"],
                        "additionalProperties": False,
                    },
                },
            },
            "required": ["city", "days", "units", "filters", "points"],
            "additionalProperties": False,
        }

    def test_strict_conversion_leaves_the_tool_schema_unchanged(self) -> None:
        before = repr(SCHEMA)
        build([HELLO], tools=[ToolSchema("weather", "w", SCHEMA)], strict_tools=True)
        assert repr(SCHEMA) == before

    @pytest.mark.parametrize(
        "schema",
        [
            {"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "string"}}}},
            {"type": "object", "additionalProperties": True},
            {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
            {"anyOf": [{"type": "object"}, {"type": "string"}]},
        ],
    )
    def test_schemas_without_a_strict_form_are_sent_non_strict(self, schema: dict[str, Any]) -> None:
        sent = build([HELLO], tools=[ToolSchema("t", "", schema)], strict_tools=True)["tools"][0]
        assert sent == {"type": "function", "name": "t", "parameters": schema, "strict": False}

    def test_recorded_tools_rebuilt(self) -> None:
        # responses-reasoning-tool: a strict tool (pydantic-ai sent description null; the builder leaves it out).
        recorded = Recording("openai", "responses-reasoning-tool").request["tools"][0]
        tool = ToolSchema(recorded["name"], "", recorded["parameters"])
        sent = build([HELLO], tools=[tool], strict_tools=True)["tools"][0]
        assert sent == {k: v for k, v in recorded.items() if k != "description"}
        # responses-tools-parallel-stream: a non-strict tool, identical.
        recorded = Recording("openai", "responses-tools-parallel-stream").request["tools"][0]
        tool = ToolSchema(recorded["name"], recorded["description"], recorded["parameters"])
        assert build([HELLO], tools=[tool])["tools"][0] == recorded


# --- cache ------------------------------------------------------------------------------------------------------------


CACHE_CONVERSATION = [
    system("rules"),
    HELLO,
    assistant(thinking("t"), call("call_1", "fc_1")),
    user(result("call_1", ToolContent.from_multipart([png()]))),
    assistant(TextPart(text="done", item_id="msg_1")),
]


class TestConversionCache:
    CONVERSATION = CACHE_CONVERSATION

    def test_the_body_is_the_same_with_and_without_a_cache(self) -> None:
        cache = ConversionCache()
        plain = build(self.CONVERSATION, system="s")
        assert codec.build_request(self.CONVERSATION, model="gpt-5", system="s", cache=cache) == plain
        assert codec.build_request(self.CONVERSATION, model="gpt-5", system="s", cache=cache) == plain
        assert len(cache) == len(self.CONVERSATION)

    def test_converted_messages_are_reused(self) -> None:
        cache = ConversionCache()
        first = codec.build_request(self.CONVERSATION, model="m", cache=cache)["input"]
        second = codec.build_request(self.CONVERSATION, model="m", cache=cache)["input"]
        assert all(a is b for a, b in zip(first, second, strict=True))

    def test_options_that_change_a_conversion_are_part_of_the_key(self) -> None:
        cache = ConversionCache()
        conversation = [HELLO, assistant(thinking("t", signature=None), TextPart(text="x", item_id="msg_1"))]
        stored = codec.build_request(conversation, model="m", cache=cache)["input"]
        stateless = codec.build_request(conversation, model="m", cache=cache, store=False)["input"]
        assert stored[1]["type"] == "reasoning"
        assert stateless[1] == {"role": "assistant", "content": "x"}
        assert codec.build_request([system("r")], model="m", cache=cache, system_role="system")["input"] == [
            {"role": "system", "content": "r"}
        ]
