"""The message model's types, constructors, readers and display, rule by rule.

Sources: the guide (``spec/000_75b8c42ebf9fa697.txt``: "The shape", "Roles", "Parts", "Thinking parts",
"Helper methods", "Images", "Tool output content", "Serialization" reader/Display paragraphs, "Retention
classes", "A mini conversation") and ``spec/python-api.md`` ("Types", "Constructors and readers").
"""

from __future__ import annotations

import enum
import warnings
from dataclasses import FrozenInstanceError

import pytest

from loopctl import ImageSource, Message, MessagePart, Retention, Role, ToolContent
from loopctl.errors import InvalidMessage
from loopctl.message import (
    ImagePart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContentPart,
    ToolResultPart,
    check_conversation,
)

PNG = "iVBORw0KGgo="  # base64 of the PNG signature: valid base64, short


def image(media_type: str = "image/png") -> ImagePart:
    return ImagePart(source=ImageSource.new_base64(media_type, PNG))


# --- package and types (python-api.md, "Package and imports", "Types") --------------------------------------


def test_package_exports_the_model_names() -> None:
    import loopctl
    import loopctl.message as m

    assert loopctl.Message is m.Message
    assert loopctl.MessagePart is m.MessagePart
    assert loopctl.Role is m.Role
    assert loopctl.ToolContent is m.ToolContent
    assert loopctl.ImageSource is m.ImageSource
    assert loopctl.Retention is m.Retention


def test_the_five_part_kinds_are_subclasses_of_message_part() -> None:
    for kind in (TextPart, ImagePart, ToolCallPart, ThinkingPart, ToolResultPart):
        assert issubclass(kind, MessagePart)


def test_tool_content_part_is_the_union_of_text_part_and_image_part() -> None:
    from typing import get_args

    union = get_args(ToolContentPart)[0]
    assert set(get_args(union)) == {TextPart, ImagePart}


def test_role_is_a_str_enum_with_user_assistant_system() -> None:
    assert issubclass(Role, enum.StrEnum)
    assert [(r.name, r.value) for r in Role] == [("USER", "user"), ("ASSISTANT", "assistant"), ("SYSTEM", "system")]


def test_retention_has_requery_and_durable_and_untagged_is_none() -> None:
    assert [(r.name, r.value) for r in Retention] == [("REQUERY", "requery"), ("DURABLE", "durable")]
    assert MessagePart.tool_result("c", "t", "x").retention is None


def test_message_parts_default_to_empty() -> None:
    assert Message(role=Role.USER).parts == ()


def test_message_parts_can_be_empty_which_means_silence() -> None:
    silent = Message.new(Role.ASSISTANT, [])
    assert silent.parts == ()
    assert silent.text_content() == ""
    assert str(silent) == ""
    assert check_conversation([Message.user("hi"), silent]) == []


def test_message_parts_are_stored_as_a_tuple() -> None:
    msg = Message(role=Role.USER, parts=[TextPart(text="a"), TextPart(text="b")])
    assert isinstance(msg.parts, tuple)
    assert msg.parts == (TextPart(text="a"), TextPart(text="b"))


def test_role_accepts_its_string_value() -> None:
    assert Message(role="assistant").role is Role.ASSISTANT  # type: ignore[arg-type]


def test_thinking_part_signature_and_redacted_default_to_none() -> None:
    part = ThinkingPart(text="hmm")
    assert (part.signature, part.redacted, part.provider, part.item_id) == (None, None, None, None)


def test_tool_result_part_defaults_name_empty_is_error_none_retention_none() -> None:
    part = ToolResultPart(call_id="c", output="x")
    assert (part.name, part.is_error, part.retention) == ("", None, None)


def test_tool_call_input_is_any_json_value() -> None:
    for value in ({"path": "a.rs"}, [1, "two", None], "text", 3, 2.5, True, None):
        assert ToolCallPart(id="c", name="t", input=value).input == value


def test_redacted_thinking_has_empty_text_and_keeps_the_payload() -> None:
    part = ThinkingPart(text="", redacted="EqQBCgIYAhIM…opaque")
    assert part.text == ""
    assert part.redacted == "EqQBCgIYAhIM…opaque"


# --- immutability and equality (python-api.md: "immutable values that compare equal by value") -------------


def test_assigning_a_field_of_a_part_raises() -> None:
    part = TextPart(text="a")
    with pytest.raises(FrozenInstanceError, match=r"TextPart\.text"):
        part.text = "b"  # type: ignore[misc]
    assert part.text == "a"


def test_assigning_a_field_of_a_message_raises() -> None:
    msg = Message.user("a")
    with pytest.raises(FrozenInstanceError, match=r"Message\.role"):
        msg.role = Role.ASSISTANT  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del msg.parts
    assert msg == Message.user("a")


def test_assigning_a_field_of_an_image_source_or_tool_content_raises() -> None:
    with pytest.raises(FrozenInstanceError):
        ImageSource.new_base64("image/png", PNG).media_type = "image/gif"  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        ToolContent.from_string("x").root = "y"  # type: ignore[misc]


def test_parts_cannot_be_appended_to() -> None:
    msg = Message.user("a")
    with pytest.raises(AttributeError):
        msg.parts.append(TextPart(text="b"))  # type: ignore[attr-defined]


def test_building_a_message_copies_the_callers_list() -> None:
    parts = [TextPart(text="a")]
    msg = Message.new(Role.USER, parts)
    parts.append(TextPart(text="b"))
    assert msg.parts == (TextPart(text="a"),)


def test_tool_call_input_is_copied_from_the_callers_dict() -> None:
    args = {"path": ["a"]}
    part = MessagePart.tool_call("c", "read_file", args)
    args["path"].append("b")
    args["new"] = 1  # type: ignore[assignment]
    assert part.input == {"path": ["a"]}


def test_messages_and_parts_compare_equal_by_value() -> None:
    def build() -> Message:
        return Message.new(
            Role.USER,
            [
                MessagePart.text("a"),
                image(),
                MessagePart.tool_result("c", "t", [TextPart(text="x"), image()], True).with_retention(
                    Retention.DURABLE
                ),
            ],
        )

    assert build() == build()
    assert build() is not build()
    assert Message.user("a") != Message.user("b")
    assert Message.user("a") != Message.assistant("a")
    assert ThinkingPart(text="t", signature="s") != ThinkingPart(text="t", signature="s", provider="anthropic")


def test_equal_messages_without_tool_input_hash_equal() -> None:
    assert hash(Message.user("a")) == hash(Message.user("a"))
    assert len({Message.user("a"), Message.user("a"), Message.assistant("a")}) == 2


# --- constructors (guide, "Helper methods"; python-api.md, "Constructors and readers") ---------------------


def test_message_user_is_user_role_with_one_text_part() -> None:
    assert Message.user("hello") == Message(role=Role.USER, parts=(TextPart(text="hello"),))


def test_message_assistant_is_assistant_role_with_one_text_part() -> None:
    assert Message.assistant("hi there") == Message(role=Role.ASSISTANT, parts=(TextPart(text="hi there"),))


def test_message_new_gives_full_control_of_role_and_parts() -> None:
    msg = Message.new(Role.SYSTEM, [MessagePart.text("be brief"), MessagePart.text("and kind")])
    assert msg.role is Role.SYSTEM
    assert msg.parts == (TextPart(text="be brief"), TextPart(text="and kind"))


def test_there_is_no_message_system_constructor() -> None:
    assert not hasattr(Message, "system")


def test_message_part_text_builds_a_text_part() -> None:
    assert MessagePart.text("hi") == TextPart(text="hi")


def test_message_part_tool_call_builds_a_tool_call_part() -> None:
    part = MessagePart.tool_call("call_1", "echo", {"message": "hi"})
    assert part == ToolCallPart(id="call_1", name="echo", input={"message": "hi"})


def test_message_part_tool_result_builds_a_tool_result_part() -> None:
    part = MessagePart.tool_result("call_1", "echo", "echo: hi", False)
    assert part == ToolResultPart(
        call_id="call_1", name="echo", output=ToolContent.from_string("echo: hi"), is_error=False, retention=None
    )


def test_tool_result_constructor_always_stores_is_error_as_a_bool() -> None:
    assert MessagePart.tool_result("c", "t", "x").is_error is False
    assert MessagePart.tool_result("c", "t", "x", True).is_error is True
    assert MessagePart.tool_result("c", "t", "x", is_error=False).is_error is False


def test_tool_result_constructor_refuses_a_non_bool_is_error() -> None:
    for bad in (None, 0, 1, "true"):
        with pytest.raises(InvalidMessage) as info:
            MessagePart.tool_result("c", "t", "x", bad)  # type: ignore[arg-type]
        assert info.value.path == "is_error"
        assert "expected true or false" in str(info.value)


def test_tool_result_constructor_starts_untagged() -> None:
    assert MessagePart.tool_result("c", "t", "x", True).retention is None


def test_tool_result_constructor_accepts_a_plain_string_as_output() -> None:
    part = MessagePart.tool_result("c", "t", "plain", False)
    assert part.output == ToolContent.from_string("plain")
    assert part.output.is_string()


def test_tool_result_constructor_accepts_a_list_of_parts_as_output() -> None:
    part = MessagePart.tool_result("c", "t", [TextPart(text="a"), image()], False)
    assert part.output == ToolContent.from_multipart([TextPart(text="a"), image()])
    assert not part.output.is_string()


def test_a_plain_str_is_accepted_wherever_a_tool_content_is() -> None:
    assert ToolResultPart(call_id="c", output="x") == ToolResultPart(call_id="c", output=ToolContent.from_string("x"))


def test_image_source_new_base64_sets_media_type_data_and_base64_encoding() -> None:
    source = ImageSource.new_base64("image/png", PNG)
    assert (source.encoding, source.media_type, source.data) == ("base64", "image/png", PNG)
    assert source == ImageSource(media_type="image/png", data=PNG)


def test_image_part_goes_in_a_user_message() -> None:
    msg = Message.new(Role.USER, [ImagePart(source=ImageSource.new_base64("image/png", PNG))])
    assert msg.parts[0].is_image()
    assert check_conversation([msg]) == []


def test_tool_content_from_string_is_the_text_form() -> None:
    content = ToolContent.from_string("x")
    assert content.is_string()
    assert content.root == "x"
    assert content.parts == (TextPart(text="x"),)
    assert content.images() == ()


def test_tool_content_from_multipart_is_the_multipart_form() -> None:
    content = ToolContent.from_multipart([TextPart(text="a"), image(), TextPart(text="b")])
    assert not content.is_string()
    assert content.parts == (TextPart(text="a"), image(), TextPart(text="b"))
    assert content.images() == (image(),)


def test_tool_content_from_multipart_may_hold_several_text_blocks() -> None:
    content = ToolContent.from_multipart([TextPart(text="a"), TextPart(text="b")])
    assert str(content) == "a\nb"


# --- with_retention (guide, "Retention classes"; python-api.md) ---------------------------------------------


def test_with_retention_returns_a_new_tagged_part_and_leaves_the_original() -> None:
    part = MessagePart.tool_result("c", "read_file", "contents", False)
    tagged = part.with_retention(Retention.REQUERY)
    assert tagged.retention is Retention.REQUERY
    assert part.retention is None
    assert tagged is not part
    assert tagged == ToolResultPart(
        call_id="c", name="read_file", output="contents", is_error=False, retention=Retention.REQUERY
    )


def test_with_retention_none_removes_the_tag() -> None:
    tagged = MessagePart.tool_result("c", "t", "x").with_retention(Retention.DURABLE)
    assert tagged.with_retention(None).retention is None


def test_with_retention_accepts_the_string_values() -> None:
    assert MessagePart.tool_result("c", "t", "x").with_retention("durable").retention is Retention.DURABLE


def test_with_retention_refuses_an_unknown_class() -> None:
    with pytest.raises(InvalidMessage) as info:
        MessagePart.tool_result("c", "t", "x").with_retention("forever")  # type: ignore[arg-type]
    assert info.value.path == "retention"
    assert "'forever'" in str(info.value)


def test_with_retention_returns_other_part_kinds_unchanged() -> None:
    for part in (
        TextPart(text="a"),
        image(),
        ToolCallPart(id="c", name="t", input={}),
        ThinkingPart(text="t", signature="s"),
    ):
        assert part.with_retention(Retention.REQUERY) is part


# --- readers ------------------------------------------------------------------------------------------------


def test_is_predicates_name_each_kind() -> None:
    kinds = {
        "text": TextPart(text="a"),
        "image": image(),
        "tool_call": ToolCallPart(id="c", name="t", input={}),
        "thinking": ThinkingPart(text="t"),
        "tool_result": ToolResultPart(call_id="c", output="x"),
    }
    for name, part in kinds.items():
        assert part.is_text() is (name == "text")
        assert part.is_image() is (name == "image")
        assert part.is_tool_call() is (name == "tool_call")
        assert part.is_thinking() is (name == "thinking")
        assert part.is_tool_result() is (name == "tool_result")


def test_as_text_gives_the_text_of_a_text_part_only() -> None:
    assert TextPart(text="hi").as_text() == "hi"
    assert ThinkingPart(text="private").as_text() is None  # a thinking part is not text
    assert ToolResultPart(call_id="c", output="x").as_text() is None
    assert ToolCallPart(id="c", name="t", input={}).as_text() is None
    assert image().as_text() is None


def test_text_content_joins_text_parts_with_no_separator() -> None:
    msg = Message.new(Role.ASSISTANT, [MessagePart.text("a"), MessagePart.text("b")])
    assert msg.text_content() == "ab"


def test_text_content_skips_tool_thinking_and_image_parts() -> None:
    msg = Message.new(
        Role.ASSISTANT,
        [
            ThinkingPart(text="secret"),
            MessagePart.text("Let me check. "),
            MessagePart.tool_call("c", "read_file", {"path": "a"}),
            MessagePart.text("Done."),
        ],
    )
    assert msg.text_content() == "Let me check. Done."
    user = Message.new(Role.USER, [MessagePart.tool_result("c", "t", "out"), image(), MessagePart.text("ok")])
    assert user.text_content() == "ok"


def test_tool_call_parts_lists_id_name_input_in_order() -> None:
    msg = Message.new(
        Role.ASSISTANT,
        [
            MessagePart.text("two calls"),
            MessagePart.tool_call("call_1", "read_file", {"path": "a"}),
            ThinkingPart(text="t"),
            MessagePart.tool_call("call_2", "grep", {"pattern": "x"}),
        ],
    )
    assert msg.tool_call_parts() == [("call_1", "read_file", {"path": "a"}), ("call_2", "grep", {"pattern": "x"})]
    assert Message.user("none").tool_call_parts() == []


def test_is_error_true_marks_failure_and_none_or_false_mean_success() -> None:
    assert ToolResultPart(call_id="c", output="x", is_error=True).failed() is True
    assert ToolResultPart(call_id="c", output="x", is_error=False).failed() is False
    assert ToolResultPart(call_id="c", output="x", is_error=None).failed() is False


# --- Display (guide, "Serialization"; python-api.md: str(message), str(tool_content)) -----------------------


def test_display_joins_part_chunks_with_newlines() -> None:
    msg = Message.new(Role.ASSISTANT, [MessagePart.text("a"), MessagePart.text("b")])
    assert str(msg) == "a\nb"
    assert msg.text_content() == "ab"  # log output and text_content() legitimately differ


def test_display_renders_a_tool_call_with_compact_sorted_json_input() -> None:
    msg = Message.new(
        Role.ASSISTANT, [MessagePart.tool_call("c", "read_file", {"path": "a.rs", "lines": [1, 2], "all": True})]
    )
    assert str(msg) == '[Tool: read_file with input: {"all":true,"lines":[1,2],"path":"a.rs"}]'


def test_display_sorts_nested_keys_and_keeps_non_ascii() -> None:
    msg = Message.new(Role.ASSISTANT, [MessagePart.tool_call("c", "say", {"z": {"b": 1, "a": "é漢🚀"}, "a": None})])
    assert str(msg) == '[Tool: say with input: {"a":null,"z":{"a":"é漢🚀","b":1}}]'


def test_display_renders_a_non_object_tool_input_as_json() -> None:
    msg = Message.new(Role.ASSISTANT, [MessagePart.tool_call("c", "echo", "hi")])
    assert str(msg) == '[Tool: echo with input: "hi"]'


def test_display_renders_a_tool_result_with_its_output_text() -> None:
    msg = Message.new(Role.USER, [MessagePart.tool_result("c", "read_file", "meeting notes", False)])
    assert str(msg) == "[Tool Result: meeting notes]"


def test_display_renders_a_multipart_tool_result_with_text_parts_joined_and_images_skipped() -> None:
    output = [TextPart(text="before"), image(), TextPart(text="after")]
    msg = Message.new(Role.USER, [MessagePart.tool_result("c", "shot", output, False)])
    assert str(msg) == "[Tool Result: before\nafter]"


def test_display_renders_an_image_with_its_media_type() -> None:
    assert str(Message.new(Role.USER, [image("image/jpeg")])) == "[Image: image/jpeg]"


def test_display_adds_no_chunk_for_thinking() -> None:
    msg = Message.new(
        Role.ASSISTANT,
        [ThinkingPart(text="private", signature="sig"), MessagePart.text("answer"), ThinkingPart(text="more")],
    )
    assert str(msg) == "answer"
    assert str(Message.new(Role.ASSISTANT, [ThinkingPart(text="only")])) == ""


def test_display_of_a_mixed_message() -> None:
    msg = Message.new(
        Role.ASSISTANT,
        [
            MessagePart.text("Let me check that"),
            ThinkingPart(text="hidden"),
            MessagePart.tool_call("call_1", "read_file", {"path": "notes.txt"}),
        ],
    )
    assert str(msg) == 'Let me check that\n[Tool: read_file with input: {"path":"notes.txt"}]'


def test_str_of_text_tool_content_is_the_text_itself() -> None:
    assert str(ToolContent.from_string("line 1\nline 2")) == "line 1\nline 2"


def test_str_of_multipart_tool_content_joins_text_with_newlines_and_skips_images() -> None:
    content = ToolContent.from_multipart([image(), TextPart(text="a"), image(), TextPart(text="b")])
    assert str(content) == "a\nb"
    assert str(ToolContent.from_multipart([image()])) == ""


def test_str_of_a_part_is_its_display_chunk() -> None:
    assert str(TextPart(text="a")) == "a"
    assert str(image()) == "[Image: image/png]"
    assert str(ThinkingPart(text="t")) == ""


def test_repr_omits_unset_optional_keys_and_image_bytes() -> None:
    assert repr(ThinkingPart(text="t")) == "ThinkingPart(text='t')"
    assert repr(image()) == "ImagePart(source=ImageSource(media_type='image/png', data=<12 base64 chars>))"


# --- the name clash (python-api.md, last bullet of "Wire form") ---------------------------------------------


def test_message_part_text_constructor_is_not_a_default_for_the_text_field() -> None:
    with pytest.raises(InvalidMessage) as info:
        TextPart()  # type: ignore[call-arg]
    assert info.value.path == "text"
    with pytest.raises(InvalidMessage) as info:
        ThinkingPart()  # type: ignore[call-arg]
    assert info.value.path == "text"


def test_the_text_field_of_an_instance_is_its_text_not_the_constructor() -> None:
    part = TextPart(text="hello")
    assert part.text == "hello"
    assert isinstance(ThinkingPart(text="x").text, str)


# --- the guide's mini conversation --------------------------------------------------------------------------


def test_mini_conversation_pairs_the_call_and_its_user_side_result() -> None:
    conversation = [
        Message.user("What is in notes.txt?"),
        Message.new(Role.ASSISTANT, [MessagePart.tool_call("call_1", "read_file", {"path": "notes.txt"})]),
        Message.new(Role.USER, [MessagePart.tool_result("call_1", "read_file", "meeting notes: buy milk", False)]),
        Message.assistant("The file says: buy milk."),
    ]
    assert check_conversation(conversation) == []
    result = conversation[2].parts[0]
    assert conversation[2].role is Role.USER
    assert isinstance(result, ToolResultPart)
    assert result.call_id == conversation[1].tool_call_parts()[0][0] == "call_1"
    assert conversation[3].text_content() == "The file says: buy milk."


def test_a_constructor_fills_the_instance_as_pydantic_s_own_does() -> None:
    """The constructors call the class's validator on the new instance themselves (``_Value.__init__``,
    ``Message.__init__``), as ``BaseModel.__init__`` does: the same value, the same fields set, and the class's
    own subclass kept."""
    call = ToolCallPart(id="c1", name="echo", input={"text": "x"})
    assert call == ToolCallPart.model_validate({"id": "c1", "name": "echo", "input": {"text": "x"}})
    assert call.model_fields_set == {"id", "name", "input"}
    message = Message(role=Role.ASSISTANT, parts=(call,))
    assert message.parts[0] is call  # an instance is kept, not validated again
    assert message.model_fields_set == {"role", "parts"}
    assert Message(role=Role.USER).parts == () and Message(role=Role.USER).model_fields_set == {"role", "parts"}
    assert Message(role="user", parts=[TextPart(text="hi")]) == Message.user("hi")

    class Tagged(Message):
        pass

    tagged = Tagged(role=Role.USER, parts=())
    assert type(tagged) is Tagged and tagged.role is Role.USER
    with pytest.raises(InvalidMessage, match=r"^parts\[0\]\.text: "):
        Message(role=Role.USER, parts=[{"type": "text", "text": 5}])


def test_a_subclass_of_a_part_with_text_keeps_its_text_field_as_declared() -> None:
    """A subclass of ``TextPart`` or ``ThinkingPart`` made after the module (a user's) inherits ``text`` as declared:
    required, a strict string that refuses a lone surrogate, from the constructor and ``from_dict`` alike. Before,
    pydantic took the constructor ``MessagePart.text`` (a class attribute of the base) for the field's default:
    ``text`` was optional and unchecked (``SubText()`` held the bound constructor, which no JSON writer takes)."""

    class Quoted(TextPart):
        pass

    class Mulled(ThinkingPart):
        pass

    for kind in (Quoted, Mulled):
        assert kind.model_fields["text"].is_required()
        with pytest.raises(InvalidMessage, match=r"^text: a value is required here"):
            kind()
        with pytest.raises(InvalidMessage, match=r"^text: expected a string that is valid Unicode"):
            kind(text="\ud800")
        with pytest.raises(InvalidMessage, match=r"^text: "):
            kind(text=5)
        assert kind(text="hi").text == "hi"
    assert Quoted(text="hi").to_dict() == {"type": "text", "text": "hi"}

    with warnings.catch_warnings():  # pydantic: the field shadows the base's constructor, as it is meant to
        warnings.simplefilter("ignore")

        class Note(MessagePart):  # a part class of its own that declares a text field
            text: str

    assert Note.model_fields["text"].is_required()
    with pytest.raises(InvalidMessage, match=r"^text: a value is required here"):
        Note()
    # The constructor is still there where no field is called ``text``.
    assert MessagePart.text("hi") == TextPart(text="hi") == ImagePart.text("hi")
    assert not hasattr(TextPart, "text") and TextPart(text="a").text == "a"
