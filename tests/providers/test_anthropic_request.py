"""Anthropic Messages request builder: the recorded follow-ups rebuilt, and one test per wire rule.

Sources for the rules are in ``loopctl.providers.anthropic`` and ``docs/providers/anthropic.md``.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest

from loopctl.compact.provider import COMPACTED_PLACEHOLDER
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
from loopctl.providers import anthropic
from loopctl.providers.anthropic import build_request, build_request_from, parse_response, parse_stream
from loopctl.providers.base import ConversionCache, ModelRequest
from loopctl.tool import ForceTool, ToolSchema
from tests.conftest import Recording, recordings
from tests.providers.anthropic_reader import normalized, read_messages, read_system

MODEL = "claude-sonnet-4-5"
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
).decode()
SIG = "EoQDCm0IDhgCKkCDzGs2kL2PgnDCZU/nM2wG2P1VIXCRHVnhDDzBQxNF1fl4QBXEKLxRItNJ2Mw=="
TOOLS = [ToolSchema("read_file", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}})]


def user(*parts: MessagePart) -> Message:
    return Message.new(Role.USER, parts)


def assistant(*parts: MessagePart) -> Message:
    return Message.new(Role.ASSISTANT, parts)


def system_msg(text: str) -> Message:
    return Message.new(Role.SYSTEM, [TextPart(text=text)])


def signed(text: str = "Let me think.", signature: str = SIG) -> ThinkingPart:
    return ThinkingPart(text=text, signature=signature, provider="anthropic")


def call(id: str = "toolu_01", name: str = "read_file", input: Any = None) -> ToolCallPart:
    return ToolCallPart(id=id, name=name, input={"path": "a.txt"} if input is None else input)


def result(call_id: str = "toolu_01", output: Any = "contents", is_error: bool | None = None) -> ToolResultPart:
    return ToolResultPart(call_id=call_id, name="read_file", output=output, is_error=is_error)


def msgs(body: dict[str, Any]) -> list[dict[str, Any]]:
    return body["messages"]


def build(messages: list[Message], **kw: Any) -> dict[str, Any]:
    kw.setdefault("prompt_cache", False)
    return build_request(messages, model=MODEL, **kw)


# --- recorded follow-ups ------------------------------------------------------------------------------------

FOLLOWUP_PAIRS = [
    ("thinking-stream", "thinking-stream-followup", {"reasoning_effort": "minimal"}),
    ("thinking-tool-use-stream", "thinking-tool-use-stream-followup", {"reasoning_effort": "minimal"}),
    ("tools-parallel-stream", "tools-parallel-stream-followup", {}),
]


def _tools_of(body: dict[str, Any]) -> list[ToolSchema]:
    """The recorded function tools (built-in tools, which have a versioned ``type``, are the native tests')."""
    return [
        ToolSchema(t["name"], t.get("description", ""), t["input_schema"])
        for t in body.get("tools", [])
        if t.get("type", "custom") == "custom"
    ]


def _reply_of(recording: Recording) -> Message:
    if recording.has("response.sse"):
        return parse_stream([recording.response_sse]).message
    return parse_response(recording.response_json).message


@pytest.mark.parametrize(("first", "followup", "options"), FOLLOWUP_PAIRS, ids=[p[0] for p in FOLLOWUP_PAIRS])
def test_followup_rebuilt_from_messages_matches_recording(first: str, followup: str, options: dict[str, Any]) -> None:
    """X.request's conversation + X's parsed reply + the follow-up's new turn -> the recorded follow-up.

    Signatures, thinking text and tool-use ids must come out exactly as recorded; the only normalizations
    are listed in ``anthropic_reader.normalized`` (recorder-set ``cache_control``, null ``citations``,
    string content shorthand).
    """
    x, nxt = Recording("anthropic", first), Recording("anthropic", followup)
    history = read_messages(x.request)
    reply = _reply_of(x)
    recorded = nxt.request
    new_turns = read_messages(recorded)[len(history) + 1 :]
    body = build_request(
        [*history, reply, *new_turns],
        model=recorded["model"],
        system=read_system(recorded),
        tools=_tools_of(recorded),
        max_tokens=recorded["max_tokens"],
        stream=recorded.get("stream", False),
        **options,
    )
    assert normalized(body["messages"]) == normalized(recorded["messages"])
    assert normalized(body.get("system")) == normalized(recorded.get("system"))
    assert normalized(body.get("tools")) == normalized(recorded.get("tools"))
    assert body["max_tokens"] == recorded["max_tokens"]
    if "thinking" in recorded:
        assert body["thinking"]["budget_tokens"] == recorded["thinking"]["budget_tokens"]


def test_thinking_tool_use_followup_replays_the_streamed_signature_byte_for_byte() -> None:
    reply = parse_stream([Recording("anthropic", "thinking-tool-use-stream").response_sse]).message
    recorded = Recording("anthropic", "thinking-tool-use-stream-followup").request["messages"][1]["content"]
    body = build([Message.user("go"), reply, user(result("toolu_01825dXWLSoJwCst1qTsiWdb", "0.32a0"))])
    sent = msgs(body)[1]["content"]
    assert sent[0] == recorded[0]  # the thinking block, signature included, exactly
    assert sent[0]["signature"].startswith("EoQDCm0IDhgCKkCDzGs2kL2Pgn")
    assert len(sent[0]["signature"]) == 524
    assert sent[1] == {"type": "tool_use", "id": "toolu_01825dXWLSoJwCst1qTsiWdb", "name": "fixed_version", "input": {}}


def test_redacted_thinking_followup_round_trips_through_messages() -> None:
    """The redacted-thinking pair's first reply is not recorded (the follow-up comes from a non-streamed
    run, the stream from another), so the follow-up is checked by reading its messages back and rebuilding
    them: the ``redacted_thinking`` ``data`` must come out verbatim, ahead of the text."""
    recorded = Recording("anthropic", "redacted-thinking-followup").request
    body = build_request(
        read_messages(recorded), model=recorded["model"], max_tokens=recorded["max_tokens"], reasoning_effort="minimal"
    )
    assert normalized(body["messages"]) == normalized(recorded["messages"])
    assert body["thinking"] == recorded["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert "stream" not in body


def test_streamed_redacted_thinking_blocks_are_replayed_in_order() -> None:
    reply = parse_stream([Recording("anthropic", "redacted-thinking-stream").response_sse]).message
    sent = msgs(build([Message.user("hi"), reply, Message.user("What was that?")]))[1]["content"]
    assert [b["type"] for b in sent] == ["redacted_thinking", "redacted_thinking", "text"]
    assert sent[0]["data"].startswith("EqkECkYIBxgCKkA8AZ4noDfV5VcOJe")
    assert len(sent[0]["data"]) == 744
    assert sent[1]["data"].startswith("EtgBCkYIBxgCKkDQfGkwzflEJP5asG3")
    assert len(sent[1]["data"]) == 296


@pytest.mark.parametrize("name", recordings("anthropic"))
def test_every_recorded_conversation_round_trips(name: str) -> None:
    """Every recorded request's conversation, read into messages and built again, is what was sent (from its
    compaction block on, when it holds one: the API reads nothing before it, so that goes as a placeholder)."""
    recorded = Recording("anthropic", name).request
    body = build_request(
        read_messages(recorded), model=recorded["model"], system=read_system(recorded), tools=_tools_of(recorded)
    )
    expected = recorded["messages"]
    compacted = [
        i
        for i, m in enumerate(expected)
        if any(isinstance(b, dict) and b.get("type") == "compaction" for b in m["content"])
    ]
    if compacted:
        placeholder = {"role": "user", "content": [{"type": "text", "text": COMPACTED_PLACEHOLDER.text_content()}]}
        expected = [placeholder, *expected[compacted[-1] :]]
    assert normalized(body["messages"]) == normalized(expected)
    system = recorded.get("system")  # a string is shorthand for one text block (SDK MessageCreateParams.system)
    system = [{"type": "text", "text": system}] if isinstance(system, str) else system
    assert normalized(body.get("system")) == normalized(system)
    # The function tools (their "type": "custom" and tool search's "defer_loading" are the recorder's own).
    functions = [
        {k: v for k, v in t.items() if k in ("name", "description", "input_schema")}
        for t in recorded.get("tools", [])
        if t.get("type", "custom") == "custom"
    ]
    assert normalized(body.get("tools")) == (normalized(functions) or None)


# --- small failing inputs (issue 3) -------------------------------------------------------------------------


class TestPriorReplyEndingWithEmptyText:
    """A prior reply that ends with an empty text part, replayed: no empty or blank text block is sent."""

    def test_trailing_empty_text_block_is_dropped(self) -> None:
        reply = assistant(signed(), TextPart(text="Done."), TextPart(text=""))
        sent = msgs(build([Message.user("hi"), reply, Message.user("ok")]))[1]["content"]
        assert sent == [
            {"type": "thinking", "thinking": "Let me think.", "signature": SIG},
            {"type": "text", "text": "Done."},
        ]

    def test_whitespace_only_text_blocks_are_dropped_everywhere(self) -> None:
        body = build(
            [
                user(TextPart(text=" \n\t"), TextPart(text="real")),
                assistant(TextPart(text="\n\n"), call()),
                user(result(output=ToolContent.from_multipart([TextPart(text="  "), TextPart(text="x")]))),
            ]
        )
        assert msgs(body)[0]["content"] == [{"type": "text", "text": "real"}]
        assert msgs(body)[1]["content"] == [
            {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {"path": "a.txt"}}
        ]
        assert msgs(body)[2]["content"][0]["content"] == [{"type": "text", "text": "x"}]

    def test_reply_of_only_empty_text_is_not_sent_as_an_empty_content_list(self) -> None:
        body = build([Message.user("a"), assistant(TextPart(text="")), Message.user("b")])
        assert msgs(body) == [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
        ]

    def test_empty_tool_output_omits_content(self) -> None:
        body = build([Message.user("a"), assistant(call()), user(result(output="   "))])
        assert msgs(body)[2]["content"] == [{"type": "tool_result", "tool_use_id": "toolu_01"}]

    def test_leading_blank_text_before_thinking_is_dropped_so_thinking_opens_the_message(self) -> None:
        reply = parse_stream([Recording("anthropic", "adaptive-thinking-stream").response_sse]).message
        assert reply.parts[0] == TextPart(text="\n\n")
        sent = msgs(build([Message.user("names?"), reply, Message.user("more")]))[1]["content"]
        assert [b["type"] for b in sent] == ["thinking", "text"]
        assert sent[1]["text"] == "1. **Captain Scoop**\n2. **Gullet**"


class TestSignedThinkingBeforeToolCall:
    """A thinking block with a signature followed by a tool call, replayed: verbatim, in place, first."""

    def test_thinking_then_tool_use_in_that_order_with_the_signature_verbatim(self) -> None:
        body = build(
            [Message.user("read a.txt"), assistant(signed(), call()), user(result())],
            tools=TOOLS,
            reasoning_effort="low",
        )
        assert msgs(body)[1] == {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Let me think.", "signature": SIG},
                {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {"path": "a.txt"}},
            ],
        }
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}

    def test_several_thinking_blocks_keep_their_order(self) -> None:
        reply = assistant(
            signed("first", "sig1"), ThinkingPart(text="", redacted="opaque", provider="anthropic"), call()
        )
        sent = msgs(build([Message.user("go"), reply, user(result())]))[1]["content"]
        assert sent[:2] == [
            {"type": "thinking", "thinking": "first", "signature": "sig1"},
            {"type": "redacted_thinking", "data": "opaque"},
        ]

    def test_thinking_with_empty_text_but_a_signature_is_replayed(self) -> None:
        # display: "omitted" returns no thinking text but a signature for continuity (SDK ThinkingConfig).
        sent = msgs(build([Message.user("go"), assistant(signed(""), call()), user(result())]))[1]["content"]
        assert sent[0] == {"type": "thinking", "thinking": "", "signature": SIG}

    def test_thinking_after_text_in_the_same_message_is_omitted(self) -> None:
        # "If an assistant message contains any thinking blocks, the first block must be thinking".
        reply = assistant(TextPart(text="Sure."), signed(), call())
        sent = msgs(build([Message.user("go"), reply, user(result())]))[1]["content"]
        assert [b["type"] for b in sent] == ["text", "tool_use"]


class TestToolResultHoldingPng:
    """A tool result holding a PNG goes inside the ``tool_result`` as an image block."""

    def test_text_and_png_in_a_tool_result(self) -> None:
        output = ToolContent.from_multipart(
            [TextPart(text="screenshot:"), ImagePart(source=ImageSource.new_base64("image/png", PNG))]
        )
        body = build([Message.user("look"), assistant(call()), user(result(output=output))])
        assert msgs(body)[2]["content"] == [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01",
                "content": [
                    {"type": "text", "text": "screenshot:"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                ],
            }
        ]

    def test_image_only_result(self) -> None:
        output = ToolContent.from_multipart([ImagePart(source=ImageSource.new_base64("image/png", PNG))])
        sent = msgs(build([Message.user("look"), assistant(call()), user(result(output=output))]))[2]["content"][0]
        assert sent["content"] == [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
        ]

    def test_image_media_type_anthropic_does_not_take_raises_with_its_path(self) -> None:
        output = ToolContent.from_multipart(
            [TextPart(text="x"), ImagePart(source=ImageSource.new_base64("image/bmp", PNG))]
        )
        with pytest.raises(
            UnsupportedContent, match=r"messages\[2\]\.parts\[0\]\.output\[1\]: image media type 'image/bmp'"
        ):
            build([Message.user("look"), assistant(call()), user(result(output=output))])

    def test_user_image_uses_the_base64_source_form(self) -> None:
        body = build([user(TextPart(text="what is it?"), ImagePart(source=ImageSource.new_base64("image/webp", PNG)))])
        assert msgs(body)[0]["content"][1] == {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/webp", "data": PNG},
        }


class TestSystemMessageMidConversation:
    """A system message in the middle of a conversation is folded into top-level ``system``."""

    def test_system_argument_first_then_every_system_message_joined_by_newline(self) -> None:
        body = build(
            [
                system_msg("Be brief."),
                Message.user("hi"),
                Message.assistant("hello"),
                system_msg("Now use French."),
                Message.user("ça va?"),
            ],
            system="You are loopctl.",
        )
        assert body["system"] == [{"type": "text", "text": "You are loopctl.\nBe brief.\nNow use French."}]
        assert [m["role"] for m in msgs(body)] == ["user", "assistant", "user"]
        assert all(m["role"] != "system" for m in msgs(body))

    def test_system_between_two_user_messages_leaves_them_merged(self) -> None:
        body = build([Message.user("a"), system_msg("note"), Message.user("b")])
        assert msgs(body) == [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
        ]
        assert body["system"] == [{"type": "text", "text": "note"}]

    def test_system_between_a_tool_call_and_its_result_keeps_the_pair_adjacent(self) -> None:
        body = build([Message.user("a"), assistant(call()), system_msg("hurry"), user(result())])
        assert [m["role"] for m in msgs(body)] == ["user", "assistant", "user"]
        assert msgs(body)[2]["content"][0]["tool_use_id"] == "toolu_01"

    def test_no_system_at_all_omits_the_key_and_blank_ones_add_nothing(self) -> None:
        assert "system" not in build([Message.user("a")])
        assert "system" not in build([system_msg("  "), Message.user("a")], system="")

    def test_a_system_message_with_an_image_raises(self) -> None:
        bad = Message.model_construct(
            role=Role.SYSTEM, parts=(ImagePart(source=ImageSource.new_base64("image/png", PNG)),)
        )
        with pytest.raises(UnsupportedContent, match=r"messages\[0\]\.parts\[0\]: a 'image' part"):
            build([bad, Message.user("a")])


class _AudioPart(MessagePart):
    """A part kind from a "newer release" this one does not know."""

    type: str = "audio"
    data: str = ""


class TestPartTypeFromNewerRelease:
    """A conversation with a part type this release does not know raises UnsupportedContent with its path."""

    def test_unknown_part_in_a_user_message(self) -> None:
        newer = Message.model_construct(role=Role.USER, parts=(TextPart(text="hi"), _AudioPart(data="AAAA")))
        with pytest.raises(UnsupportedContent, match=r"messages\[1\]\.parts\[1\]: unknown part type 'audio'"):
            build([Message.user("a"), newer])

    def test_unknown_part_in_an_assistant_message(self) -> None:
        newer = Message.model_construct(role=Role.ASSISTANT, parts=(_AudioPart(),))
        with pytest.raises(UnsupportedContent, match=r"messages\[1\]\.parts\[0\]: unknown part type 'audio'"):
            build([Message.user("a"), newer])

    def test_known_part_in_a_role_that_cannot_hold_it(self) -> None:
        image_reply = Message.model_construct(
            role=Role.ASSISTANT, parts=(ImagePart(source=ImageSource.new_base64("image/png", PNG)),)
        )
        with pytest.raises(UnsupportedContent, match=r"messages\[1\]\.parts\[0\]: a 'image' part .* assistant message"):
            build([Message.user("a"), image_reply])
        call_in_user = Message.model_construct(role=Role.USER, parts=(call(),))
        with pytest.raises(UnsupportedContent, match=r"messages\[0\]\.parts\[0\]: a 'tool_call' part"):
            build([call_in_user])


class TestForeignAndUnsignedThinkingPolicy:
    """Thinking is replayed only to the provider that minted it, and only signed or redacted; anything else
    is omitted from the request, stays in history, never becomes text, and never breaks a request."""

    @pytest.mark.parametrize(
        "part",
        [
            ThinkingPart(text="gemini thought", signature="c2lnbmF0dXJl", provider="gemini"),
            ThinkingPart(text="openai summary", signature="gAAAAenc", provider="openai", item_id="rs_1"),
            ThinkingPart(text="no provider", signature="sig"),
            ThinkingPart(text="unsigned", provider="anthropic"),
            ThinkingPart(text="", redacted="blob", provider="gemini"),
        ],
        ids=["gemini", "openai", "no-provider", "anthropic-unsigned", "foreign-redacted"],
    )
    def test_omitted_and_never_turned_into_text(self, part: ThinkingPart) -> None:
        history = [Message.user("q"), assistant(part, TextPart(text="answer")), Message.user("more")]
        body = build(history)
        assert msgs(body)[1]["content"] == [{"type": "text", "text": "answer"}]
        sent = str(body)
        assert part.text == "" or part.text not in sent
        payload = part.signature or part.redacted
        assert payload is None or payload not in sent
        assert history[1].parts[0] is part  # history untouched

    def test_reply_of_only_foreign_thinking_is_dropped_whole(self) -> None:
        body = build(
            [Message.user("q"), assistant(ThinkingPart(text="t", signature="s", provider="gemini")), Message.user("r")]
        )
        assert [m["role"] for m in msgs(body)] == ["user"]

    def test_tool_loop_whose_thinking_was_foreign_turns_thinking_off_for_that_request(self) -> None:
        # With thinking on, the API wants the open tool-loop turn to start with a thinking block; the
        # omitted foreign block cannot be sent, so this one request goes without thinking.
        foreign = ThinkingPart(text="t", signature="s", provider="openai")
        body = build(
            [Message.user("q"), assistant(foreign, call()), user(result())], tools=TOOLS, reasoning_effort="high"
        )
        assert "thinking" not in body
        assert body["max_tokens"] == anthropic.DEFAULT_MAX_TOKENS

    def test_new_user_turn_after_foreign_thinking_keeps_thinking_on(self) -> None:
        foreign = ThinkingPart(text="t", signature="s", provider="openai")
        body = build(
            [
                Message.user("q"),
                assistant(foreign, call()),
                user(result()),
                Message.assistant("done"),
                Message.user("next"),
            ],
            reasoning_effort="high",
        )
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 16384}

    def test_anthropic_signed_thinking_keeps_thinking_on_in_a_tool_loop(self) -> None:
        body = build([Message.user("q"), assistant(signed(), call()), user(result())], reasoning_effort="medium")
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 8192}


# --- tool results, ids, alternation -------------------------------------------------------------------------


def test_tool_results_open_the_user_message_and_other_content_follows() -> None:
    body = build(
        [
            Message.user("go"),
            assistant(call("toolu_a"), call("toolu_b")),
            user(TextPart(text="here you go"), result("toolu_b", "B"), result("toolu_a", "A")),
        ]
    )
    # Results first, in the order of the calls they answer (they were sent in stored order, b then a).
    assert msgs(body)[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"},
        {"type": "tool_result", "tool_use_id": "toolu_b", "content": "B"},
        {"type": "text", "text": "here you go"},
    ]


def test_results_split_over_several_user_messages_are_merged_into_one() -> None:
    body = build(
        [
            Message.user("go"),
            assistant(call("toolu_a"), call("toolu_b")),
            user(result("toolu_a", "A"), TextPart(text="first note")),
            user(result("toolu_b", "B"), TextPart(text="second note")),
        ]
    )
    assert len(msgs(body)) == 3
    assert [b.get("tool_use_id", b.get("text")) for b in msgs(body)[2]["content"]] == [
        "toolu_a",
        "toolu_b",
        "first note",
        "second note",
    ]


def test_is_error_true_is_carried_and_false_or_none_omitted() -> None:
    body = build(
        [
            Message.user("go"),
            assistant(call("toolu_a"), call("toolu_b"), call("toolu_c")),
            user(result("toolu_a", "boom", True), result("toolu_b", "ok", False), result("toolu_c", "ok", None)),
        ]
    )
    blocks = msgs(body)[2]["content"]
    assert blocks[0] == {"type": "tool_result", "tool_use_id": "toolu_a", "content": "boom", "is_error": True}
    assert "is_error" not in blocks[1]
    assert "is_error" not in blocks[2]


def test_foreign_tool_ids_are_rewritten_identically_on_call_and_result() -> None:
    body = build([Message.user("go"), assistant(call("call:abc/1.2")), user(result("call:abc/1.2"))])
    sent_id = msgs(body)[1]["content"][0]["id"]
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", sent_id)
    assert sent_id.startswith("call_abc_1_2_")
    assert msgs(body)[2]["content"][0]["tool_use_id"] == sent_id


def test_valid_tool_ids_pass_unchanged() -> None:
    body = build([Message.user("go"), assistant(call("call_Ab-9")), user(result("call_Ab-9"))])
    assert msgs(body)[1]["content"][0]["id"] == "call_Ab-9"


def test_tool_input_that_is_not_an_object_raises() -> None:
    with pytest.raises(
        UnsupportedContent, match=r"messages\[1\]\.parts\[0\]\.input: .* must be a JSON object, got list"
    ):
        build([Message.user("go"), assistant(call(input=[1, 2])), user(result())])


def test_adjacent_same_role_messages_are_merged_in_the_request_only() -> None:
    history = [Message.user("a"), Message.user("b"), Message.assistant("c"), Message.assistant("d")]
    body = build(history)
    assert msgs(body) == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "c"}, {"type": "text", "text": "d"}]},
    ]
    assert len(history) == 4
    assert history[0].parts == (TextPart(text="a"),)


def test_merged_assistant_messages_keep_thinking_only_at_the_start() -> None:
    body = build(
        [
            Message.user("a"),
            assistant(signed("one", "s1"), TextPart(text="x")),
            assistant(signed("two", "s2"), call()),
            user(result()),
        ]
    )
    assert [b["type"] for b in msgs(body)[1]["content"]] == ["thinking", "text", "tool_use"]
    assert msgs(body)[1]["content"][0]["signature"] == "s1"


def test_empty_messages_are_not_sent() -> None:
    body = build(
        [Message.user("a"), Message.new(Role.ASSISTANT, []), Message.new(Role.USER, []), Message.assistant("b")]
    )
    assert [m["role"] for m in msgs(body)] == ["user", "assistant"]


class TestPrefill:
    """A request that ends on an assistant message continues it (prefill)."""

    def test_trailing_whitespace_of_the_final_assistant_text_is_trimmed(self) -> None:
        history = [Message.user("a"), Message.assistant("The answer is ")]
        assert msgs(build(history))[-1]["content"] == [{"type": "text", "text": "The answer is"}]
        assert history[1].parts[0] == TextPart(text="The answer is ")

    def test_thinking_is_removed_from_the_final_assistant_message_when_thinking_is_off(self) -> None:
        body = build([Message.user("a"), assistant(signed(), TextPart(text="Partial"))])
        assert msgs(body)[-1]["content"] == [{"type": "text", "text": "Partial"}]

    def test_thinking_stays_in_the_final_assistant_message_when_thinking_is_on(self) -> None:
        body = build([Message.user("a"), assistant(signed(), TextPart(text="Partial"))], reasoning_effort="low")
        assert [b["type"] for b in msgs(body)[-1]["content"]] == ["thinking", "text"]


# --- options ------------------------------------------------------------------------------------------------


def test_max_tokens_defaults_to_8192() -> None:
    assert build([Message.user("a")])["max_tokens"] == 8192
    assert build([Message.user("a")], max_tokens=100)["max_tokens"] == 100


@pytest.mark.parametrize(("effort", "budget"), [("minimal", 1024), ("low", 2048), ("medium", 8192), ("high", 16384)])
def test_reasoning_effort_maps_to_a_thinking_budget_below_max_tokens(effort: str, budget: int) -> None:
    body = build([Message.user("a")], reasoning_effort=effort)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert body["max_tokens"] == budget + 8192


def test_thinking_budget_is_lowered_to_fit_an_explicit_max_tokens() -> None:
    body = build([Message.user("a")], reasoning_effort="high", max_tokens=4096)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4095}
    assert body["max_tokens"] == 4096


def test_thinking_is_left_off_when_max_tokens_cannot_hold_the_minimum_budget() -> None:
    body = build([Message.user("a")], reasoning_effort="high", max_tokens=1024, temperature=0.2)
    assert "thinking" not in body
    assert body["temperature"] == 0.2


def test_temperature_is_sent_without_thinking_and_omitted_with_it() -> None:
    assert build([Message.user("a")], temperature=0.3)["temperature"] == 0.3
    assert "temperature" not in build([Message.user("a")], temperature=0.3, reasoning_effort="low")
    assert "temperature" not in build([Message.user("a")])


@pytest.mark.parametrize("choice", ["required", ForceTool("read_file")])
def test_forced_tool_choice_leaves_thinking_off(choice: Any) -> None:
    body = build([Message.user("a")], tools=TOOLS, tool_choice=choice, reasoning_effort="high")
    assert "thinking" not in body


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", {"type": "auto"}),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        (ForceTool("read_file"), {"type": "tool", "name": "read_file"}),
    ],
)
def test_tool_choice_mapping(choice: Any, wire: dict[str, Any]) -> None:
    assert build([Message.user("a")], tools=TOOLS, tool_choice=choice)["tool_choice"] == wire


def test_tool_choice_is_not_sent_without_tools() -> None:
    assert "tool_choice" not in build([Message.user("a")], tool_choice="auto")


def test_tools_are_converted_with_their_schema() -> None:
    tools = [*TOOLS, ToolSchema("now", "", {"type": "object", "properties": {}})]
    assert build([Message.user("a")], tools=tools)["tools"] == [
        {
            "name": "read_file",
            "description": "Read a file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
        {"name": "now", "input_schema": {"type": "object", "properties": {}}},
    ]


def test_stop_stream_and_extra() -> None:
    body = build([Message.user("a")], stop=["END"], stream=True, extra={"metadata": {"user_id": "u1"}, "max_tokens": 7})
    assert body["stop_sequences"] == ["END"]
    assert body["stream"] is True
    assert body["metadata"] == {"user_id": "u1"}
    assert body["max_tokens"] == 7  # extra is merged last
    assert "stream" not in build([Message.user("a")])


def test_unknown_reasoning_effort_raises() -> None:
    with pytest.raises(UnsupportedContent, match="reasoning_effort 'extreme'"):
        build([Message.user("a")], reasoning_effort="extreme")  # type: ignore[arg-type]


def test_build_request_from_model_request() -> None:
    request = ModelRequest(
        messages=[Message.user("a")], system="sys", tools=TOOLS, max_tokens=50, stop=["x"], extra={"top_k": 5}
    )
    body = build_request_from(request, model=MODEL, stream=True)
    assert body == build_request(
        [Message.user("a")],
        model=MODEL,
        system="sys",
        tools=TOOLS,
        max_tokens=50,
        stop=["x"],
        stream=True,
        extra={"top_k": 5},
    )
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}  # prompt caching on by default


# --- prompt caching -----------------------------------------------------------------------------------------


def _marked(body: dict[str, Any]) -> list[str]:
    """Where the cache breakpoints are: 'tools[i]', 'system[i]', 'messages[i].content[j]'."""
    out = [f"tools[{i}]" for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    out += [f"system[{i}]" for i, b in enumerate(body.get("system", [])) if "cache_control" in b]
    for mi, m in enumerate(body["messages"]):
        out += [f"messages[{mi}].content[{bi}]" for bi, b in enumerate(m["content"]) if "cache_control" in b]
    return out


LOOP = [
    Message.user("fix the bug"),
    assistant(signed(), call("toolu_1")),
    user(result("toolu_1", "file 1")),
    assistant(call("toolu_2")),
    user(result("toolu_2", "file 2")),
]


def test_breakpoints_on_last_tool_system_and_last_two_user_turns() -> None:
    body = build_request(LOOP, model=MODEL, system="sys", tools=[*TOOLS, ToolSchema("b")])
    assert _marked(body) == ["tools[1]", "system[0]", "messages[2].content[0]", "messages[4].content[0]"]
    assert body["tools"][1]["cache_control"] == {"type": "ephemeral"}


def test_never_more_than_four_breakpoints_and_the_prefix_of_the_next_call_hits() -> None:
    first = build_request(LOOP[:3], model=MODEL, system="sys", tools=TOOLS)
    second = build_request(LOOP, model=MODEL, system="sys", tools=TOOLS)
    assert len(_marked(first)) <= 4
    assert len(_marked(second)) <= 4
    # The last breakpoint of the first call is still a breakpoint in the second: an exact cache hit.
    assert "messages[2].content[0]" in _marked(first)
    assert "messages[2].content[0]" in _marked(second)


def test_breakpoints_skip_empty_tool_results_and_never_land_on_thinking() -> None:
    body = build_request([Message.user("q"), assistant(signed(), call()), user(result(output=""))], model=MODEL)
    assert _marked(body) == ["messages[0].content[0]"]
    assert all("cache_control" not in b for b in body["messages"][1]["content"])


def test_prompt_cache_off_places_no_breakpoint() -> None:
    assert _marked(build_request(LOOP, model=MODEL, system="s", tools=TOOLS, prompt_cache=False)) == []


def test_breakpoints_never_touch_cached_pieces() -> None:
    cache = ConversionCache()
    first = build_request(LOOP[:3], model=MODEL, cache=cache)
    build_request(LOOP, model=MODEL, cache=cache)
    assert first == build_request(LOOP[:3], model=MODEL)
    assert build_request(LOOP[:3], model=MODEL, cache=cache, prompt_cache=False) == build_request(
        LOOP[:3], model=MODEL, prompt_cache=False
    )


# --- conversion cache ---------------------------------------------------------------------------------------


def test_body_is_the_same_with_and_without_a_conversion_cache() -> None:
    history = [system_msg("s"), *LOOP, Message.assistant("done "), Message.user("again")]
    cache = ConversionCache()
    plain = build_request(history, model=MODEL, system="x", tools=TOOLS, reasoning_effort="low")
    assert build_request(history, model=MODEL, system="x", tools=TOOLS, reasoning_effort="low", cache=cache) == plain
    assert build_request(history, model=MODEL, system="x", tools=TOOLS, reasoning_effort="low", cache=cache) == plain
    assert len(cache) == len(history)


def test_the_cache_reuses_each_message_conversion() -> None:
    cache = ConversionCache()
    build_request(LOOP, model=MODEL, cache=cache)
    piece = cache.get(LOOP[1], anthropic.PROVIDER)
    assert piece is not None
    build_request([*LOOP, Message.assistant("ok")], model=MODEL, cache=cache)
    assert cache.get(LOOP[1], anthropic.PROVIDER) is piece
