"""``check_conversation``: each rule with a conversation that passes and one that fails, paths exact.

Sources: the guide's pairing rules ("Parts": ids unique within a turn, ``call_id`` matches the call it
answers), "Roles" (tool results ride in user messages), "Images" (images only in user messages), "Thinking
parts" (the model's reasoning, so assistant-only); issue 2 adds every call answered before the next assistant
message and valid Unicode strings. ``spec/python-api.md`` names the API and says an empty ``parts`` list is
never a problem by itself.
"""

from __future__ import annotations

import pytest

from loopctl import ImageSource, Message, MessagePart, Role
from loopctl.errors import InvalidConversation, LoopError
from loopctl.message import (
    ConversationProblem,
    ConversationRule,
    ImagePart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
    check_conversation,
)

R = ConversationRule
PNG = "iVBORw0KGgo="


def img() -> ImagePart:
    return ImagePart(source=ImageSource.new_base64("image/png", PNG))


def call(id: str, name: str = "read_file") -> MessagePart:
    return MessagePart.tool_call(id, name, {"path": "a"})


def result(call_id: str, name: str = "read_file", output: object = "ok") -> MessagePart:
    return MessagePart.tool_result(call_id, name, output, False)  # type: ignore[arg-type]


def user(*parts: MessagePart) -> Message:
    return Message.new(Role.USER, parts)


def assistant(*parts: MessagePart) -> Message:
    return Message.new(Role.ASSISTANT, parts)


def system(*parts: MessagePart) -> Message:
    return Message.new(Role.SYSTEM, parts)


def found(conversation: list[Message]) -> list[tuple[str, ConversationRule]]:
    return [(p.path, p.rule) for p in check_conversation(conversation)]


# --- rule: a tool result answers an earlier tool call with the same id --------------------------------------


def test_tool_result_answering_the_call_of_the_turn_passes() -> None:
    assert found([user(MessagePart.text("go")), assistant(call("call_1")), user(result("call_1"))]) == []


def test_tool_result_with_no_matching_call_fails() -> None:
    conversation = [user(MessagePart.text("go")), assistant(call("call_1")), user(result("call_1"), result("call_9"))]
    problems = check_conversation(conversation)
    assert [(p.path, p.rule) for p in problems] == [("messages[2].parts[1]", R.TOOL_RESULT_WITHOUT_CALL)]
    assert problems[0].detail == "tool result for 'call_9' answers no earlier tool call"


def test_tool_result_before_any_assistant_message_fails() -> None:
    assert found([user(result("call_1"))]) == [("messages[0].parts[0]", R.TOOL_RESULT_WITHOUT_CALL)]


def test_tool_result_answering_a_call_of_an_earlier_turn_fails() -> None:
    conversation = [
        user(MessagePart.text("go")),
        assistant(call("call_1")),
        user(result("call_1")),
        assistant(MessagePart.text("done")),
        user(result("call_1")),
    ]
    problems = check_conversation(conversation)
    assert [(p.path, p.rule) for p in problems] == [("messages[4].parts[0]", R.TOOL_RESULT_WITHOUT_CALL)]
    assert problems[0].detail == "tool result for 'call_1' answers a call of an earlier turn"


def test_a_tool_call_answered_twice_fails() -> None:
    conversation = [assistant(call("call_1")), user(result("call_1")), user(result("call_1"))]
    assert found(conversation) == [("messages[2].parts[0]", R.DUPLICATE_TOOL_RESULT)]


def test_results_of_one_turn_may_be_split_over_two_user_messages() -> None:
    conversation = [assistant(call("a"), call("b")), user(result("a")), user(MessagePart.text("also"), result("b"))]
    assert found(conversation) == []


# --- rule: tool-call ids are unique within a turn -----------------------------------------------------------


def test_distinct_call_ids_in_a_turn_pass_and_ids_may_repeat_across_turns() -> None:
    conversation = [
        assistant(call("call_1"), call("call_2")),
        user(result("call_1"), result("call_2")),
        assistant(call("call_1")),
        user(result("call_1")),
    ]
    assert found(conversation) == []


def test_a_call_id_used_twice_in_one_turn_fails() -> None:
    conversation = [assistant(call("call_1"), MessagePart.text("and"), call("call_1", "grep")), user(result("call_1"))]
    problems = check_conversation(conversation)
    assert [(p.path, p.rule) for p in problems] == [("messages[0].parts[2]", R.DUPLICATE_TOOL_CALL_ID)]
    assert "first at messages[0].parts[0]" in problems[0].detail


# --- rule: every tool call is answered before the next assistant message ------------------------------------


def test_a_conversation_waiting_for_its_tool_results_passes() -> None:
    assert found([user(MessagePart.text("go")), assistant(call("call_1"), call("call_2"))]) == []


def test_a_call_unanswered_when_the_next_assistant_message_comes_fails() -> None:
    conversation = [
        user(MessagePart.text("go")),
        assistant(call("call_1"), call("call_2")),
        user(result("call_2")),
        assistant(MessagePart.text("moving on")),
    ]
    problems = check_conversation(conversation)
    assert [(p.path, p.rule) for p in problems] == [("messages[1].parts[0]", R.UNANSWERED_TOOL_CALL)]
    assert problems[0].detail == "tool call 'call_1' has no result before the next assistant message (messages[3])"


def test_a_system_message_between_call_and_result_is_allowed() -> None:
    conversation = [assistant(call("c")), system(MessagePart.text("note")), user(result("c"))]
    assert found(conversation) == []


# --- rule: tool results only in user messages; tool calls only in assistant messages ------------------------


def test_tool_result_in_an_assistant_or_system_message_fails() -> None:
    conversation = [assistant(call("a"), result("a")), system(result("a"))]
    assert found(conversation) == [
        ("messages[0].parts[1]", R.TOOL_RESULT_OUTSIDE_USER),
        ("messages[1].parts[0]", R.TOOL_RESULT_OUTSIDE_USER),
        ("messages[1].parts[0]", R.DUPLICATE_TOOL_RESULT),
    ]


def test_tool_call_in_a_user_or_system_message_fails() -> None:
    conversation = [user(MessagePart.text("x"), call("a")), system(call("b"))]
    problems = check_conversation(conversation)
    assert [(p.path, p.rule) for p in problems] == [
        ("messages[0].parts[1]", R.TOOL_CALL_OUTSIDE_ASSISTANT),
        ("messages[1].parts[0]", R.TOOL_CALL_OUTSIDE_ASSISTANT),
    ]
    assert problems[0].detail == "a tool call in a user message"


# --- rule: images only in user messages, including inside tool results --------------------------------------


def test_images_in_user_messages_and_user_side_tool_results_pass() -> None:
    conversation = [user(MessagePart.text("look"), img()), assistant(call("c")), user(result("c", output=[img()]))]
    assert found(conversation) == []


def test_an_image_in_an_assistant_or_system_message_fails() -> None:
    conversation = [assistant(MessagePart.text("here"), img()), system(img())]
    problems = check_conversation(conversation)
    assert [(p.path, p.rule) for p in problems] == [
        ("messages[0].parts[1]", R.IMAGE_OUTSIDE_USER),
        ("messages[1].parts[0]", R.IMAGE_OUTSIDE_USER),
    ]
    assert problems[0].detail == "an image in an assistant message"


def test_an_image_inside_a_tool_result_outside_a_user_message_fails() -> None:
    conversation = [assistant(call("c"), result("c", output=[TextPart(text="t"), img()]))]
    assert found(conversation) == [
        ("messages[0].parts[1]", R.TOOL_RESULT_OUTSIDE_USER),
        ("messages[0].parts[1].output[1]", R.IMAGE_OUTSIDE_USER),
    ]


# --- rule: thinking only in assistant messages --------------------------------------------------------------


def test_thinking_in_an_assistant_message_passes() -> None:
    assert (
        found([user(MessagePart.text("q")), assistant(ThinkingPart(text="hm", signature="s"), MessagePart.text("a"))])
        == []
    )


def test_thinking_in_a_user_or_system_message_fails() -> None:
    conversation = [user(ThinkingPart(text="hm")), system(MessagePart.text("x"), ThinkingPart(text="", redacted="r"))]
    assert found(conversation) == [
        ("messages[0].parts[0]", R.THINKING_OUTSIDE_ASSISTANT),
        ("messages[1].parts[1]", R.THINKING_OUTSIDE_ASSISTANT),
    ]


# --- rule: strings are valid Unicode ------------------------------------------------------------------------


def test_non_ascii_and_emoji_strings_pass() -> None:
    assert found([user(MessagePart.text("café 漢字 🚀 \U0010ffff")), assistant(ThinkingPart(text="𝔘"))]) == []


# The constructors refuse a lone surrogate (InvalidMessage), so these parts are built as a lenient reader or
# ``model_construct`` would build them, without validation: the rule is for values that got past the model.


def text(value: str) -> TextPart:
    return TextPart.model_construct(text=value)


def raw_user(*parts: MessagePart) -> Message:
    return Message.model_construct(role=Role.USER, parts=parts)


def raw_assistant(*parts: MessagePart) -> Message:
    return Message.model_construct(role=Role.ASSISTANT, parts=parts)


def test_a_lone_surrogate_in_text_is_reported_not_crashing() -> None:
    truncated = "🚀🚀"[:1] + "\ud83d"  # what slicing UTF-16 code units leaves
    problems = check_conversation([raw_user(MessagePart.text("fine"), text(truncated))])
    assert [(p.path, p.rule) for p in problems] == [("messages[0].parts[1].text", R.INVALID_UNICODE)]
    assert problems[0].detail == "lone surrogate '\\ud83d' at character 1"
    assert str(problems[0])  # printable even though the string is not


def test_lone_surrogates_are_reported_wherever_they_are() -> None:
    s = "x\udc00"
    conversation = [
        raw_assistant(
            ThinkingPart.model_construct(text="ok", signature=s, provider="anthropic"),
            ToolCallPart.model_construct(id="id" + s, name="t", input={"a": [1, {"b": s}], s: 1}),
        ),
        raw_user(
            ToolResultPart.model_construct(
                call_id="id" + s, name="t", output=ToolContent.model_construct(root=(text(s),)), is_error=False
            ),
            img(),
        ),
    ]
    assert found(conversation) == [
        ("messages[0].parts[0].signature", R.INVALID_UNICODE),
        ("messages[0].parts[1].id", R.INVALID_UNICODE),
        ("messages[0].parts[1].input.a[1].b", R.INVALID_UNICODE),
        ("messages[0].parts[1].input", R.INVALID_UNICODE),  # the key itself
        ("messages[1].parts[0].call_id", R.INVALID_UNICODE),
        ("messages[1].parts[0].output[0].text", R.INVALID_UNICODE),
    ]


def test_a_lone_surrogate_in_a_string_tool_output_is_reported() -> None:
    bad = ToolResultPart.model_construct(call_id="c", name="t", output=ToolContent.model_construct(root="half \ud800"))
    conversation = [raw_assistant(call("c")), raw_user(bad)]
    assert found(conversation) == [("messages[1].parts[0].output", R.INVALID_UNICODE)]


# --- general --------------------------------------------------------------------------------------------------


def test_an_empty_parts_list_is_never_a_problem() -> None:
    assert found([user(), assistant(), system(), user()]) == []
    assert found([]) == []


def test_every_problem_is_reported_in_order() -> None:
    conversation = [
        user(ThinkingPart(text="t")),
        assistant(call("a"), call("a"), img()),
        assistant(MessagePart.text("x")),
        user(result("zz")),
    ]
    assert found(conversation) == [
        ("messages[0].parts[0]", R.THINKING_OUTSIDE_ASSISTANT),
        ("messages[1].parts[1]", R.DUPLICATE_TOOL_CALL_ID),
        ("messages[1].parts[2]", R.IMAGE_OUTSIDE_USER),
        ("messages[1].parts[0]", R.UNANSWERED_TOOL_CALL),
        ("messages[3].parts[0]", R.TOOL_RESULT_WITHOUT_CALL),
    ]


def test_problem_prints_path_detail_and_rule() -> None:
    problem = ConversationProblem("messages[3].parts[1]", R.IMAGE_OUTSIDE_USER, "an image in an assistant message")
    assert str(problem) == "messages[3].parts[1]: an image in an assistant message [images_only_in_user_messages]"


def test_rule_values_name_the_rules() -> None:
    assert {r.value for r in ConversationRule} == {
        "tool_result_answers_an_earlier_call",
        "tool_call_answered_once",
        "tool_call_ids_unique_within_turn",
        "tool_call_answered_before_next_assistant",
        "tool_results_only_in_user_messages",
        "tool_calls_only_in_assistant_messages",
        "images_only_in_user_messages",
        "thinking_only_in_assistant_messages",
        "provider_native_parts_only_in_assistant_messages",
        "strings_are_valid_unicode",
    }


def test_strict_form_raises_invalid_conversation_listing_every_problem() -> None:
    conversation = [user(ThinkingPart(text="t")), assistant(img())]
    with pytest.raises(InvalidConversation) as info:
        check_conversation(conversation, strict=True)
    err = info.value
    assert isinstance(err, LoopError)
    assert isinstance(err, ValueError)
    assert err.problems == check_conversation(conversation)
    assert str(err) == (
        "the conversation breaks 2 rule(s):\n"
        "  - messages[0].parts[0]: thinking in a user message [thinking_only_in_assistant_messages]\n"
        "  - messages[1].parts[0]: an image in an assistant message [images_only_in_user_messages]"
    )


def test_strict_form_returns_an_empty_list_for_a_sound_conversation() -> None:
    assert check_conversation([user(MessagePart.text("hi")), assistant(MessagePart.text("hello"))], strict=True) == []


def test_strict_form_reports_lone_surrogates_without_crashing() -> None:
    with pytest.raises(InvalidConversation) as info:
        check_conversation([raw_user(text("\udfff"))], strict=True)
    assert [p.rule for p in info.value.problems] == [R.INVALID_UNICODE]  # type: ignore[attr-defined]


def test_a_conversation_at_rest_must_answer_its_last_replys_calls_too() -> None:
    # Issue 18, item 11: a session forked at a reply that called tools was called sound, and could never be
    # continued (no provider takes new input after calls it got no results for).
    waiting = [user(MessagePart.text("go")), assistant(call("a"), call("b")), user(result("a"))]
    assert found(waiting) == []  # a run may be waiting for its tools
    problems = check_conversation(waiting, at_rest=True)
    assert [(p.path, p.rule) for p in problems] == [("messages[1].parts[1]", R.UNANSWERED_TOOL_CALL)]
    assert problems[0].detail == (
        "tool call 'b' has no result, and no run is waiting for it: the conversation cannot be continued (no provider "
        "takes new input after it)"
    )
    assert check_conversation([*waiting, user(result("b"))], at_rest=True) == []


def test_unanswered_calls_are_the_last_replys_calls_without_a_result() -> None:
    from loopctl.message.check import unanswered_calls

    conversation = [assistant(call("x")), user(result("x")), assistant(call("a"), call("b"), call("c"))]
    assert [c.id for c in unanswered_calls(conversation)] == ["a", "b", "c"]
    assert [c.id for c in unanswered_calls([*conversation, user(result("b"))])] == ["a", "c"]
    assert unanswered_calls(conversation[:2]) == [] and unanswered_calls([user(MessagePart.text("hi"))]) == []
