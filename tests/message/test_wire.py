"""The JSON wire form, rule by rule.

Sources: the guide's "Serialization" and "The four wire shapes" (five shapes, one per part type), and
``spec/python-api.md``, "Wire form (JSON)": key order, always-written keys, only-when-set keys, retention as an
object, the untagged ToolContent, old-data defaults, unknown keys ignored, compact UTF-8 output; and the
extension keys of "Provider signatures" (``docs/wire-format.md``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopctl import ImageSource, Message, MessagePart, Retention, Role, ToolContent
from loopctl.errors import InvalidMessage
from loopctl.message import (
    ImagePart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    check_conversation,
    dumps_conversation,
    load_conversation,
    loads_conversation,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "conversations"
PNG = "iVBORw0KGgo="


def compact(text: str) -> str:
    """The same JSON document written compactly, keys in their order, non-ASCII as UTF-8."""
    return json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)


# --- the guide's shapes, byte for byte ----------------------------------------------------------------------

# The guide's five shapes with each "…" filled by a valid value, written compactly.
GUIDE_SHAPES = [
    '{"type":"text","text":"hello"}',
    '{"type":"image","source":{"encoding":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}',
    '{"type":"tool_call","id":"call_1","name":"read_file","input":{"path":"a.rs"}}',
    '{"type":"thinking","text":"The user wants a.rs; read it first.","signature":"EqQBCkYIBRgCKkCmXXcm1p2Fv0aL9wYhT3k="}',
    '{"type":"tool_result","call_id":"call_1","name":"read_file","output":"fn main() {}\\n","is_error":true}',
]


@pytest.mark.parametrize("shape", GUIDE_SHAPES, ids=["text", "image", "tool_call", "thinking", "tool_result"])
def test_the_guides_wire_shapes_parse_and_reserialize_byte_for_byte(shape: str) -> None:
    part = MessagePart.from_dict(json.loads(shape))
    assert part.to_json() == shape
    assert json.dumps(part.to_dict(), separators=(",", ":"), ensure_ascii=False) == shape


def test_the_guides_wire_shapes_are_the_five_part_kinds() -> None:
    parts = [MessagePart.from_dict(json.loads(s)) for s in GUIDE_SHAPES]
    assert parts == [
        TextPart(text="hello"),
        ImagePart(source=ImageSource(media_type="image/png", data=PNG)),
        ToolCallPart(id="call_1", name="read_file", input={"path": "a.rs"}),
        ThinkingPart(text="The user wants a.rs; read it first.", signature="EqQBCkYIBRgCKkCmXXcm1p2Fv0aL9wYhT3k="),
        ToolResultPart(call_id="call_1", name="read_file", output="fn main() {}\n", is_error=True),
    ]


def test_the_guides_message_example_is_role_then_parts_tagged_by_type() -> None:
    shape = '{"role":"user","parts":[{"type":"text","text":"hello"}]}'
    msg = Message.from_json(shape)
    assert msg == Message.user("hello")
    assert msg.to_json() == shape


def test_guide_shapes_built_by_the_constructors_serialize_to_the_same_bytes() -> None:
    built = [
        MessagePart.text("hello"),
        ImagePart(source=ImageSource.new_base64("image/png", PNG)),
        MessagePart.tool_call("call_1", "read_file", {"path": "a.rs"}),
        ThinkingPart(text="The user wants a.rs; read it first.", signature="EqQBCkYIBRgCKkCmXXcm1p2Fv0aL9wYhT3k="),
        MessagePart.tool_result("call_1", "read_file", "fn main() {}\n", True),
    ]
    assert [p.to_json() for p in built] == GUIDE_SHAPES


# --- key order ----------------------------------------------------------------------------------------------


def test_message_keys_are_role_then_parts() -> None:
    assert list(Message.user("a").to_dict()) == ["role", "parts"]


def test_part_keys_are_type_first_then_declaration_order() -> None:
    full_thinking = ThinkingPart(text="t", signature="s", redacted="r", provider="openai", item_id="rs_1")
    assert list(full_thinking.to_dict()) == ["type", "text", "signature", "redacted", "provider", "item_id"]
    full_result = ToolResultPart(call_id="c", name="n", output="o", is_error=False, retention=Retention.REQUERY)
    assert list(full_result.to_dict()) == ["type", "call_id", "name", "output", "is_error", "retention"]
    full_call = ToolCallPart(id="c", name="n", input={}, item_id="fc_1")
    assert list(full_call.to_dict()) == ["type", "id", "name", "input", "item_id"]
    assert list(TextPart(text="t", item_id="msg_1").to_dict()) == ["type", "text", "item_id"]
    assert list(ImagePart(source=ImageSource.new_base64("image/png", PNG)).to_dict()) == ["type", "source"]


def test_image_source_keys_are_encoding_media_type_data() -> None:
    assert list(ImageSource.new_base64("image/png", PNG).to_dict()) == ["encoding", "media_type", "data"]


def test_key_order_on_input_does_not_matter_and_output_is_canonical() -> None:
    scrambled = '{"is_error":false,"output":"o","name":"n","call_id":"c","type":"tool_result"}'
    part = MessagePart.from_dict(json.loads(scrambled))
    assert part.to_json() == '{"type":"tool_result","call_id":"c","name":"n","output":"o","is_error":false}'
    msg = Message.from_json('{"parts":[],"role":"assistant"}')
    assert msg.to_json() == '{"role":"assistant","parts":[]}'


# --- always-written and only-when-set keys ------------------------------------------------------------------


def test_tool_result_name_is_always_written_even_when_empty() -> None:
    assert ToolResultPart(call_id="c", output="o").to_json() == (
        '{"type":"tool_result","call_id":"c","name":"","output":"o","is_error":null}'
    )


def test_tool_result_name_defaults_to_empty_string_for_old_data() -> None:
    part = MessagePart.from_dict({"type": "tool_result", "call_id": "c", "output": "o", "is_error": None})
    assert isinstance(part, ToolResultPart)
    assert part.name == ""


def test_tool_result_is_error_is_always_written_as_true_false_or_null() -> None:
    base = '{"type":"tool_result","call_id":"c","name":"t","output":"o","is_error":'
    assert ToolResultPart(call_id="c", name="t", output="o", is_error=True).to_json() == base + "true}"
    assert ToolResultPart(call_id="c", name="t", output="o", is_error=False).to_json() == base + "false}"
    assert ToolResultPart(call_id="c", name="t", output="o", is_error=None).to_json() == base + "null}"


def test_tool_result_is_error_missing_on_input_reads_as_none() -> None:
    part = MessagePart.from_dict({"type": "tool_result", "call_id": "c", "name": "t", "output": "o"})
    assert isinstance(part, ToolResultPart)
    assert part.is_error is None
    assert part.to_json().endswith('"is_error":null}')


def test_tool_result_is_error_null_on_input_reads_as_none() -> None:
    part = MessagePart.from_dict({"type": "tool_result", "call_id": "c", "output": "o", "is_error": None})
    assert isinstance(part, ToolResultPart)
    assert part.is_error is None


def test_thinking_signature_and_redacted_are_written_only_when_set() -> None:
    assert ThinkingPart(text="t").to_json() == '{"type":"thinking","text":"t"}'
    assert ThinkingPart(text="t", signature="s").to_json() == '{"type":"thinking","text":"t","signature":"s"}'
    assert ThinkingPart(text="", redacted="r").to_json() == '{"type":"thinking","text":"","redacted":"r"}'


def test_thinking_signature_and_redacted_missing_on_input_read_as_none() -> None:
    part = MessagePart.from_dict({"type": "thinking", "text": "t"})
    assert part == ThinkingPart(text="t", signature=None, redacted=None)


def test_thinking_signature_is_replayed_verbatim() -> None:
    odd = 'EqQB+/=\n\u00e9 \\ "quoted" \U0001f680 ' + "x" * 5000
    part = ThinkingPart(text="t", signature=odd, provider="anthropic")
    again = MessagePart.from_dict(json.loads(part.to_json()))
    assert isinstance(again, ThinkingPart)
    assert again.signature == odd
    assert again.to_json() == part.to_json()


def test_retention_is_written_only_when_set() -> None:
    assert "retention" not in ToolResultPart(call_id="c", output="o").to_dict()


def test_retention_is_written_as_a_type_object() -> None:
    part = MessagePart.tool_result("c", "t", "o")
    assert part.with_retention(Retention.REQUERY).to_json().endswith(',"retention":{"type":"requery"}}')
    assert part.with_retention(Retention.DURABLE).to_json().endswith(',"retention":{"type":"durable"}}')


def test_retention_reads_the_type_object() -> None:
    for value in ("requery", "durable"):
        part = MessagePart.from_dict(
            {"type": "tool_result", "call_id": "c", "output": "o", "retention": {"type": value}}
        )
        assert isinstance(part, ToolResultPart)
        assert part.retention is Retention(value)


def test_retention_reads_bare_strings_and_writes_the_object() -> None:
    part = MessagePart.from_dict({"type": "tool_result", "call_id": "c", "output": "o", "retention": "durable"})
    assert isinstance(part, ToolResultPart)
    assert part.retention is Retention.DURABLE
    assert part.to_json().endswith(',"retention":{"type":"durable"}}')


def test_retention_null_on_input_reads_as_untagged() -> None:
    part = MessagePart.from_dict({"type": "tool_result", "call_id": "c", "output": "o", "retention": None})
    assert isinstance(part, ToolResultPart)
    assert part.retention is None


def test_retention_travels_through_serialization() -> None:
    msg = Message.new(Role.USER, [MessagePart.tool_result("c", "t", "o").with_retention(Retention.DURABLE)])
    again = Message.from_json(msg.to_json())
    assert isinstance(again.parts[0], ToolResultPart)
    assert again.parts[0].retention is Retention.DURABLE


# --- the extension keys (python-api.md, "Provider signatures"; docs/wire-format.md) -------------------------


def test_extension_keys_are_omitted_when_unset() -> None:
    assert TextPart(text="a").to_json() == '{"type":"text","text":"a"}'
    assert ToolCallPart(id="c", name="n", input={}).to_json() == '{"type":"tool_call","id":"c","name":"n","input":{}}'
    assert ThinkingPart(text="t", signature="s").to_json() == '{"type":"thinking","text":"t","signature":"s"}'


def test_thinking_provider_and_item_id_are_written_when_set_and_read_back() -> None:
    part = ThinkingPart(text="sum", signature="enc", provider="openai", item_id="rs_1")
    text = '{"type":"thinking","text":"sum","signature":"enc","provider":"openai","item_id":"rs_1"}'
    assert part.to_json() == text
    assert MessagePart.from_dict(json.loads(text)) == part


def test_tool_call_item_id_is_written_after_input_and_read_back() -> None:
    part = ToolCallPart(id="call_1", name="n", input={"a": 1}, item_id="fc_1")
    text = '{"type":"tool_call","id":"call_1","name":"n","input":{"a":1},"item_id":"fc_1"}'
    assert part.to_json() == text
    assert MessagePart.from_dict(json.loads(text)) == part


def test_text_item_id_is_written_when_set_and_read_back() -> None:
    part = TextPart(text="hi", item_id="msg_1")
    assert part.to_json() == '{"type":"text","text":"hi","item_id":"msg_1"}'
    assert MessagePart.from_dict(part.to_dict()) == part


# --- ToolContent is untagged --------------------------------------------------------------------------------


def test_text_tool_content_is_a_bare_json_string() -> None:
    assert MessagePart.tool_result("c", "t", "out").to_dict()["output"] == "out"


def test_multipart_tool_content_is_a_bare_array_of_text_and_image_parts() -> None:
    part = MessagePart.tool_result(
        "c", "t", [TextPart(text="a"), ImagePart(source=ImageSource.new_base64("image/png", PNG))]
    )
    assert part.to_json() == (
        '{"type":"tool_result","call_id":"c","name":"t","output":[{"type":"text","text":"a"},'
        '{"type":"image","source":{"encoding":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}],'
        '"is_error":false}'
    )
    assert MessagePart.from_dict(json.loads(part.to_json())) == part


def test_tool_content_to_wire_is_the_bare_value() -> None:
    assert ToolContent.from_string("x").to_wire() == "x"
    assert ToolContent.from_multipart([TextPart(text="a")]).to_wire() == [{"type": "text", "text": "a"}]


def test_an_empty_multipart_output_stays_an_empty_array() -> None:
    part = MessagePart.tool_result("c", "t", [])
    assert part.to_dict()["output"] == []
    again = MessagePart.from_dict(part.to_dict())
    assert isinstance(again, ToolResultPart)
    assert not again.output.is_string()


def test_an_empty_parts_list_is_written_and_read() -> None:
    assert Message.new(Role.ASSISTANT, []).to_json() == '{"role":"assistant","parts":[]}'
    assert Message.from_json('{"role":"assistant","parts":[]}').parts == ()


def test_a_message_read_without_parts_is_refused() -> None:
    # It read as an empty message; the original (serde, no default) requires both keys, and a file that
    # lost its parts is damaged, not silent.
    for read in (lambda: Message.from_dict({"role": "user"}), lambda: Message.from_json('{"role":"user"}')):
        with pytest.raises(InvalidMessage) as info:
            read()
        assert str(info.value) == "parts: a value is required here (missing key)"
    with pytest.raises(InvalidMessage, match=r"^role: a value is required here"):
        Message.from_dict({"parts": []})


def test_the_keyword_constructor_still_defaults_parts_to_empty() -> None:
    # python-api.md: `Message(role=..., parts=[...])`; `parts` defaults to empty.
    assert Message(role=Role.USER) == Message.from_dict({"role": "user", "parts": []})
    assert Message(role=Role.USER).parts == ()


# --- compact UTF-8 output and byte stability ---------------------------------------------------------------


def test_to_json_is_compact() -> None:
    text = Message.new(Role.ASSISTANT, [MessagePart.tool_call("c", "t", {"a": [1, 2], "b": {"c": None}})]).to_json()
    assert (
        text
        == '{"role":"assistant","parts":[{"type":"tool_call","id":"c","name":"t","input":{"a":[1,2],"b":{"c":null}}}]}'
    )
    assert ", " not in text
    assert ": " not in text


def test_to_json_writes_non_ascii_as_utf8_not_escapes() -> None:
    text = Message.user("caf\u00e9 \u6f22\u5b57 \U0001f680 \u2014").to_json()
    assert text == '{"role":"user","parts":[{"type":"text","text":"café 漢字 🚀 —"}]}'
    assert "\\u" not in text


def test_to_json_escapes_only_what_json_requires() -> None:
    text = MessagePart.text('a"b\\c\nd\te\x01').to_json()
    assert text == '{"type":"text","text":"a\\"b\\\\c\\nd\\te\\u0001"}'


def test_input_key_order_is_kept_as_given() -> None:
    part = MessagePart.tool_call("c", "t", {"z": 1, "a": 2})
    assert part.to_json() == '{"type":"tool_call","id":"c","name":"t","input":{"z":1,"a":2}}'


def test_serializing_the_same_message_twice_gives_identical_bytes() -> None:
    msg = Message.new(
        Role.ASSISTANT,
        [ThinkingPart(text="t\u00e9", signature="s"), MessagePart.tool_call("c", "t", {"x": 1.5, "y": [True, None]})],
    )
    assert msg.to_json() == msg.to_json()
    assert Message.from_json(msg.to_json()).to_json() == msg.to_json()


def test_integers_beyond_64_bits_round_trip_exactly() -> None:
    big = 2**70 + 1
    part = MessagePart.tool_call("c", "t", {"n": big, "m": -(2**80), "f": 0.1})
    text = part.to_json()
    assert (
        text
        == '{"type":"tool_call","id":"c","name":"t","input":{"n":1180591620717411303425,"m":-1208925819614629174706176,"f":0.1}}'
    )
    assert text == part.to_json()
    assert MessagePart.from_dict(json.loads(text)) == part
    assert Message.from_json(Message.new(Role.ASSISTANT, [part]).to_json()).parts == (part,)


def test_from_json_accepts_bytes_and_str() -> None:
    text = '{"role":"user","parts":[{"type":"text","text":"é"}]}'
    assert Message.from_json(text) == Message.from_json(text.encode()) == Message.user("é")


def test_from_json_reads_unicode_escapes() -> None:
    assert Message.from_json('{"role":"user","parts":[{"type":"text","text":"caf\\u00e9 \\ud83d\\ude80"}]}') == (
        Message.user("café 🚀")
    )


# --- unknown keys (python-api.md: ignored on input, as the original does) ----------------------------------


def test_unknown_keys_in_a_message_are_ignored() -> None:
    msg = Message.from_dict({"role": "user", "parts": [], "timestamp": "2025-01-01", "meta": {"a": 1}})
    assert msg == Message(role=Role.USER)
    assert msg.to_json() == '{"role":"user","parts":[]}'


def test_unknown_keys_in_a_part_are_ignored() -> None:
    part = MessagePart.from_dict({"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}})
    assert part.to_json() == '{"type":"text","text":"a"}'


def test_unknown_keys_in_an_image_source_and_retention_are_ignored() -> None:
    part = MessagePart.from_dict(
        {"type": "image", "source": {"encoding": "base64", "media_type": "image/png", "data": PNG, "url": "x"}}
    )
    assert part == ImagePart(source=ImageSource.new_base64("image/png", PNG))
    result = MessagePart.from_dict(
        {"type": "tool_result", "call_id": "c", "output": "o", "retention": {"type": "requery", "why": "file"}}
    )
    assert isinstance(result, ToolResultPart)
    assert result.retention is Retention.REQUERY


def test_image_source_encoding_missing_on_input_reads_as_base64() -> None:
    part = MessagePart.from_dict({"type": "image", "source": {"media_type": "image/png", "data": PNG}})
    assert isinstance(part, ImagePart)
    assert part.source.encoding == "base64"
    assert part.to_json().startswith('{"type":"image","source":{"encoding":"base64",')


# --- to_dict / from_dict --------------------------------------------------------------------------------------


def test_to_dict_and_from_dict_round_trip_a_message() -> None:
    msg = Message.new(
        Role.USER,
        [
            MessagePart.text("a"),
            MessagePart.tool_result("c", "t", [TextPart(text="x")], True).with_retention("requery"),
        ],
    )
    assert msg.to_dict() == {
        "role": "user",
        "parts": [
            {"type": "text", "text": "a"},
            {
                "type": "tool_result",
                "call_id": "c",
                "name": "t",
                "output": [{"type": "text", "text": "x"}],
                "is_error": True,
                "retention": {"type": "requery"},
            },
        ],
    }
    assert Message.from_dict(msg.to_dict()) == msg


def test_message_from_dict_accepts_part_objects_too() -> None:
    assert Message.from_dict({"role": "user", "parts": [TextPart(text="a")]}) == Message.user("a")


# --- conversations written by the original and by us --------------------------------------------------------


def test_a_conversation_written_by_the_original_loads() -> None:
    conversation = load_conversation(FIXTURES / "original-bare-array.json")
    assert [m.role for m in conversation] == [
        Role.SYSTEM,
        Role.USER,
        Role.ASSISTANT,
        Role.USER,
        Role.ASSISTANT,
        Role.USER,
        Role.ASSISTANT,
        Role.USER,
    ]
    kinds = {type(p) for m in conversation for p in m.parts}
    kinds |= {
        type(s) for m in conversation for p in m.tool_results() if not p.output.is_string() for s in p.output.parts
    }
    assert kinds == {TextPart, ImagePart, ToolCallPart, ThinkingPart, ToolResultPart}
    first_result = conversation[3].parts[0]
    assert first_result == ToolResultPart(call_id="call_1", name="", output="meeting notes: buy milk", is_error=None)
    assert [p.is_error for p in conversation[3].tool_results() + conversation[5].tool_results()] == [None, False, True]
    assert all(p.retention is None for m in conversation for p in m.tool_results())
    redacted = conversation[4].parts[0]
    assert redacted == ThinkingPart(
        text="", redacted="EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"
    )
    assert conversation[7].parts == ()
    assert check_conversation(conversation) == []


def test_a_conversation_written_by_the_original_is_rewritten_with_the_always_written_keys() -> None:
    conversation = load_conversation(FIXTURES / "original-bare-array.json")
    written = dumps_conversation(conversation)
    assert written.startswith('{"format_version":1,"messages":[{"role":"system",')
    assert (
        '{"type":"tool_result","call_id":"call_1","name":"","output":"meeting notes: buy milk","is_error":null}'
        in written
    )
    assert loads_conversation(written) == conversation


def test_a_conversation_using_every_optional_key_loads_and_round_trips_byte_for_byte() -> None:
    raw = (FIXTURES / "every-optional-key.json").read_text(encoding="utf-8")
    conversation = loads_conversation(raw)
    assert dumps_conversation(conversation) == compact(raw)
    thinking = [p for m in conversation for p in m.parts if isinstance(p, ThinkingPart)]
    assert {p.provider for p in thinking} == {"anthropic", "gemini", "openai"}
    assert any(p.redacted for p in thinking)
    assert any(p.item_id for p in thinking)
    assert any(isinstance(p, TextPart) and p.item_id for m in conversation for p in m.parts)
    assert any(isinstance(p, ToolCallPart) and p.item_id for m in conversation for p in m.parts)
    results = [p for m in conversation for p in m.tool_results()]
    assert [(p.is_error, p.retention) for p in results] == [
        (False, Retention.REQUERY),
        (None, Retention.DURABLE),
        (True, None),
    ]
    assert check_conversation(conversation) == []
