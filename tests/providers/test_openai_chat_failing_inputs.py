"""The small failing inputs of issue 3 that concern OpenAI Chat Completions, one class of tests each: an
assistant turn with only tool calls; a tool result holding a PNG; a streamed tool call whose arguments are
``""``; a stream that ends with a usage-only chunk; ``data:[DONE]`` with no space; a system message in the
middle of a conversation; a part type from a newer release; the thinking (reasoning replay) policy."""

from __future__ import annotations

import json
from typing import Literal

import pytest

from loopctl.errors import StreamTruncated, UnsupportedContent
from loopctl.message import (
    Message,
    MessagePart,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
)
from loopctl.providers import openai_chat
from loopctl.response import StopReason, Usage
from tests.providers.test_openai_chat_properties import validate
from tests.providers.test_openai_chat_request import (
    PNG_URL,
    assistant,
    call,
    chat,
    png,
    result,
    system,
    tool_call,
    user,
)
from tests.providers.test_openai_chat_stream import TEXT_STREAM, chunk, decode, sse, tool_delta, usage_chunk


class TestAssistantTurnWithOnlyToolCalls:
    def test_content_is_null_for_one_call(self) -> None:
        out = chat([user("go"), assistant(call("c1"))])
        assert out[1] == {"role": "assistant", "content": None, "tool_calls": [tool_call("c1")]}

    def test_content_is_null_for_several_calls(self) -> None:
        out = chat([user("go"), assistant(call("c1"), call("c2", "list", {}))])
        assert out[1] == {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("c1"), tool_call("c2", "list", "{}")],
        }

    @pytest.mark.parametrize(
        "extra",
        [
            TextPart(text=""),
            ThinkingPart(text="plan", signature="s", provider="anthropic"),
            ThinkingPart(text="", redacted="r", provider="anthropic"),
        ],
    )
    def test_content_is_null_beside_an_empty_text_or_thinking(self, extra: MessagePart) -> None:
        out = chat([user("go"), assistant(extra, call("c1"))])
        assert out[1]["content"] is None

    def test_the_body_passes_the_sdk_check(self) -> None:
        body = openai_chat.build_request([user("go"), assistant(call("c1")), user(result("c1"))], model="gpt-4o")
        validate(body)

    def test_a_reply_with_only_tool_calls_goes_back_with_content_null(self) -> None:
        reply = openai_chat.parse_response(
            {
                "id": "chatcmpl-1",
                "model": "gpt-4o",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": None, "tool_calls": [tool_call("call_1")]},
                        "finish_reason": "tool_calls",
                    }
                ],
            }
        )
        out = chat([user("go"), reply.message, user(result("call_1"))])
        assert out[1] == {"role": "assistant", "content": None, "tool_calls": [tool_call("call_1")]}


class TestToolResultHoldingAPng:
    def test_the_image_moves_to_a_user_message_after_the_tool_messages(self) -> None:
        shot = ToolContent.from_multipart([TextPart(text="the screen:"), png()])
        messages = [
            user("look"),
            assistant(call("c1", "screenshot", {}), call("c2")),
            user(result("c1", shot), result("c2")),
        ]
        assert chat(messages)[2:] == [
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": "the screen:\n[the image of this result follows in the next user message]",
            },
            {"role": "tool", "tool_call_id": "c2", "content": "ok"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "[images returned by tool call c1]"},
                    {"type": "image_url", "image_url": {"url": PNG_URL}},
                ],
            },
        ]

    def test_a_png_only_result_sends_the_note_as_its_text(self) -> None:
        out = chat([user("look"), assistant(call("c1")), user(result("c1", ToolContent.from_multipart([png()])))])
        assert out[2]["content"] == "[the image of this result follows in the next user message]"
        assert out[3]["content"][1] == {"type": "image_url", "image_url": {"url": PNG_URL}}

    def test_the_images_of_several_results_move_in_the_order_of_the_calls(self) -> None:
        messages = [
            user("look"),
            assistant(call("c1"), call("c2")),
            user(
                result("c2", ToolContent.from_multipart([png()])),
                result("c1", ToolContent.from_multipart([png(), png()])),
            ),
        ]
        out = chat(messages)
        assert out[2]["content"] == "[the 2 images of this result follow in the next user message]"
        assert out[3]["content"] == "[the image of this result follows in the next user message]"
        labels = [p["text"] for p in out[4]["content"] if p["type"] == "text"]
        assert labels == ["[images returned by tool call c1]", "[images returned by tool call c2]"]
        assert sum(p["type"] == "image_url" for p in out[4]["content"]) == 3

    def test_the_moved_images_come_before_the_users_own_words(self) -> None:
        messages = [
            user("look"),
            assistant(call("c1")),
            user(result("c1", ToolContent.from_multipart([png()])), "what is it?"),
        ]
        assert [m["role"] for m in chat(messages)] == ["user", "assistant", "tool", "user", "user"]
        assert chat(messages)[4] == {"role": "user", "content": "what is it?"}

    def test_a_failed_result_with_a_png_keeps_marker_and_note(self) -> None:
        output = ToolContent.from_multipart([TextPart(text="partial render"), png()])
        out = chat([user("look"), assistant(call("c1")), user(result("c1", output, is_error=True))])
        assert (
            out[2]["content"]
            == "[tool error] partial render\n[the image of this result follows in the next user message]"
        )

    def test_the_body_passes_the_sdk_check(self) -> None:
        messages = [user("look"), assistant(call("c1")), user(result("c1", ToolContent.from_multipart([png()])))]
        validate(openai_chat.build_request(messages, model="gpt-4o"))


class TestStreamedArgumentsEmpty:
    def test_a_call_whose_arguments_are_empty_reads_as_an_empty_object(self) -> None:
        chunks = [
            chunk({"role": "assistant", "content": None}),
            chunk(tool_delta(0, "call_1", "get_time", "")),
            chunk({}, "tool_calls"),
            usage_chunk(),
            "[DONE]",
        ]
        reply = decode(sse(*chunks))
        assert reply.message == Message.new(Role.ASSISTANT, [ToolCallPart(id="call_1", name="get_time", input={})])
        assert reply.invalid_tool_calls == ()
        assert reply.stop_reason is StopReason.TOOL_CALL

    def test_an_empty_call_beside_a_call_with_arguments(self) -> None:
        chunks = [
            chunk(tool_delta(0, "call_1", "now", "")),
            chunk(tool_delta(1, "call_2", "read", "")),
            chunk(tool_delta(1, args='{"p": "a"}')),
            chunk({}, "tool_calls"),
            "[DONE]",
        ]
        assert [p.input for p in decode(sse(*chunks)).message.parts] == [{}, {"p": "a"}]  # type: ignore[union-attr]

    def test_a_call_with_no_arguments_key_at_all(self) -> None:
        chunks = [chunk(tool_delta(0, "call_1", "now")), chunk({}, "tool_calls"), "[DONE]"]
        assert decode(sse(*chunks)).message.parts == (ToolCallPart(id="call_1", name="now", input={}),)

    def test_whitespace_arguments_read_as_an_empty_object_too(self) -> None:
        chunks = [chunk(tool_delta(0, "call_1", "now", " ")), chunk({}, "tool_calls"), "[DONE]"]
        reply = decode(sse(*chunks))
        assert reply.message.parts == (ToolCallPart(id="call_1", name="now", input={}),)
        assert reply.invalid_tool_calls == ()

    def test_a_non_streamed_call_with_empty_arguments(self) -> None:
        message = {"role": "assistant", "content": None, "tool_calls": [tool_call("c1", "now", "")]}
        reply = openai_chat.parse_response(
            {"id": "x", "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
        )
        assert reply.message.parts == (ToolCallPart(id="c1", name="now", input={}),)

    def test_the_empty_call_goes_back_as_empty_object_arguments(self) -> None:
        chunks = [chunk(tool_delta(0, "call_1", "now", "")), chunk({}, "tool_calls"), "[DONE]"]
        out = chat([user("time?"), decode(sse(*chunks)).message, user(result("call_1", "noon"))])
        assert out[1]["tool_calls"] == [tool_call("call_1", "now", "{}")]


class TestStreamEndingWithAUsageOnlyChunk:
    def test_the_usage_only_chunk_gives_the_usage(self) -> None:
        reply = decode(sse(*TEXT_STREAM))
        assert reply.usage == Usage(input_tokens=10, output_tokens=5, cache_read_tokens=0, reasoning_tokens=0)
        assert reply.message == Message.assistant("Hello")
        assert (reply.stop_reason, reply.raw_stop_reason) == (StopReason.END_TURN, "stop")

    def test_the_finish_reason_before_it_is_kept(self) -> None:
        chunks = [chunk(tool_delta(0, "c1", "f", "{}")), chunk({}, "tool_calls"), usage_chunk(7, 3), "[DONE]"]
        reply = decode(sse(*chunks))
        assert (reply.stop_reason, reply.usage) == (StopReason.TOOL_CALL, Usage(7, 3, cache_read_tokens=0, reasoning_tokens=0))

    def test_split_byte_by_byte(self) -> None:
        data = sse(*TEXT_STREAM)
        assert openai_chat.parse_stream([data[i : i + 1] for i in range(len(data))]) == decode(data)

    def test_cut_after_the_usage_only_chunk_is_truncated(self) -> None:
        with pytest.raises(StreamTruncated):
            decode(sse(*TEXT_STREAM[:-1]))

    def test_usage_only_chunk_with_null_details(self) -> None:
        bare = chunk(
            None,
            usage={
                "prompt_tokens": 4,
                "completion_tokens": 2,
                "prompt_tokens_details": None,
                "completion_tokens_details": None,
            },
        )
        assert decode(sse(chunk({"content": "x"}), chunk({}, "stop"), bare, "[DONE]")).usage == Usage(4, 2)


class TestDoneWithoutASpace:
    def test_data_done_with_no_space_ends_the_stream(self) -> None:
        reply = decode(sse(*TEXT_STREAM, space=""))
        assert reply.message == Message.assistant("Hello")
        assert reply.stop_reason is StopReason.END_TURN

    def test_with_and_without_space_decode_the_same(self) -> None:
        assert decode(sse(*TEXT_STREAM, space="")) == decode(sse(*TEXT_STREAM))

    @pytest.mark.parametrize("eol", ["\r\n", "\r"])
    def test_with_other_line_ends(self, eol: str) -> None:
        assert decode(sse(*TEXT_STREAM, space="", eol=eol)) == decode(sse(*TEXT_STREAM))

    def test_only_the_done_line_without_space(self) -> None:
        data = sse(*TEXT_STREAM[:-1]) + b"data:[DONE]\n\n"
        assert decode(data) == decode(sse(*TEXT_STREAM))

    def test_done_with_surrounding_spaces(self) -> None:
        data = sse(*TEXT_STREAM[:-1]) + b"data:  [DONE] \n\n"
        assert decode(data) == decode(sse(*TEXT_STREAM))


class TestSystemMessageInTheMiddle:
    def test_it_stays_where_it_stands(self) -> None:
        messages = [user("hi"), assistant("hello"), system("Now answer in French."), user("and now?")]
        assert chat(messages, system="Be brief.") == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "system", "content": "Now answer in French."},
            {"role": "user", "content": "and now?"},
        ]

    def test_with_the_developer_role(self) -> None:
        out = chat([user("hi"), system("mid"), user("more")], system_role="developer")
        assert out[1] == {"role": "developer", "content": "mid"}

    def test_between_a_call_and_its_result_it_moves_after_the_tool_messages(self) -> None:
        messages = [user("go"), assistant(call("c1")), system("Hurry."), user(result("c1", "done"))]
        assert chat(messages) == [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [tool_call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "done"},
            {"role": "system", "content": "Hurry."},
        ]

    def test_several_keep_their_order(self) -> None:
        messages = [system("a"), user("hi"), system("b"), system("c"), assistant("yes")]
        assert [m["content"] for m in chat(messages, system="s")] == ["s", "a", "hi", "b", "c", "yes"]

    def test_the_body_passes_the_sdk_check(self) -> None:
        validate(openai_chat.build_request([user("hi"), assistant("yes"), system("mid"), user("more")], model="m"))


class AudioPart(MessagePart):
    """Stands for a part kind a later release might add."""

    type: Literal["audio"] = "audio"
    data: str = ""


class TestPartTypeFromANewerRelease:
    @pytest.mark.parametrize("role", [Role.USER, Role.ASSISTANT, Role.SYSTEM])
    def test_it_is_unsupported_content_naming_its_path(self, role: Role) -> None:
        newer = Message.model_construct(role=role, parts=(TextPart(text="x"), AudioPart()))
        with pytest.raises(UnsupportedContent) as info:
            chat([user("hi"), assistant("yes"), user("more"), newer])
        assert str(info.value) == "messages[3].parts[1]: unknown part type 'audio'; this release cannot convert it"

    def test_inside_a_tool_result(self) -> None:
        output = ToolContent.model_construct(root=(TextPart(text="x"), AudioPart()))
        bad = result("c1").model_copy(update={"output": output})
        with pytest.raises(
            UnsupportedContent, match=r"^messages\[2\]\.parts\[0\]\.output\[1\]: unknown part type 'audio'"
        ):
            chat([user("go"), assistant(call("c1")), Message.model_construct(role=Role.USER, parts=(bad,))])

    def test_a_cache_does_not_hide_it(self) -> None:
        from loopctl.providers import ConversionCache

        newer = Message.model_construct(role=Role.USER, parts=(AudioPart(),))
        cache = ConversionCache()
        for _ in range(2):
            with pytest.raises(UnsupportedContent):
                openai_chat.build_request([newer], model="m", cache=cache)


class TestThinkingPolicy:
    @pytest.mark.parametrize("provider", [None, "anthropic", "gemini", "openai", "openai-compatible"])
    def test_thinking_parts_are_never_sent(self, provider: str | None) -> None:
        thinking = ThinkingPart(text="secret reasoning", signature="SIG-xyz", provider=provider)
        with_thinking = [user("go"), assistant(thinking, "answer", call("c1")), user(result("c1"))]
        without = [user("go"), assistant("answer", call("c1")), user(result("c1"))]
        body = openai_chat.build_request(with_thinking, model="gpt-4o")
        assert body == openai_chat.build_request(without, model="gpt-4o")
        text = json.dumps(body)
        assert "secret reasoning" not in text
        assert "SIG-xyz" not in text

    def test_a_redacted_block_and_a_responses_item_are_omitted(self) -> None:
        parts = [
            ThinkingPart(text="", redacted="opaque", provider="anthropic"),
            ThinkingPart(text="summary", signature="gAAAA-encrypted", provider="openai", item_id="rs_1"),
        ]
        assert chat([user("go"), assistant(*parts, "done")])[1] == {"role": "assistant", "content": "done"}

    def test_a_thinking_only_turn_is_an_empty_assistant_message(self) -> None:
        redacted = ThinkingPart(text="", redacted="opaque", provider="anthropic")
        assert chat([user("go"), assistant(redacted), user("again")])[1] == {"role": "assistant", "content": ""}

    def test_thinking_in_a_user_message_is_dropped_too(self) -> None:
        message = Message.new(Role.USER, [TextPart(text="hi"), ThinkingPart(text="x")])
        assert chat([message]) == [{"role": "user", "content": "hi"}]

    def test_compatible_reasoning_is_replayed_only_when_asked(self) -> None:
        messages = [
            user("go"),
            assistant(
                ThinkingPart(text="I should read ", provider="openai-compatible"),
                ThinkingPart(text="the file.", provider="openai-compatible"),
                ThinkingPart(text="not mine", signature="s", provider="anthropic"),
                call("c1"),
            ),
            user(result("c1")),
        ]
        assert chat(messages, replay_reasoning_content=True)[1] == {
            "role": "assistant",
            "content": None,
            "reasoning_content": "I should read the file.",
            "tool_calls": [tool_call("c1")],
        }
        assert "reasoning_content" not in chat(messages)[1]

    def test_decoded_compatible_reasoning_round_trips_with_the_option(self) -> None:
        chunks = [
            chunk({"reasoning_content": "Need the time."}),
            chunk(tool_delta(0, "call_1", "now", "")),
            chunk({}, "tool_calls"),
            "[DONE]",
        ]
        reply = decode(sse(*chunks))
        assert reply.message.parts[0] == ThinkingPart(text="Need the time.", provider="openai-compatible")
        out = chat([user("time?"), reply.message, user(result("call_1", "noon"))], replay_reasoning_content=True)
        assert out[1]["reasoning_content"] == "Need the time."
