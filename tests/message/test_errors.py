"""Bad input raises ``InvalidMessage`` naming the path and what was expected; nothing is coerced.

Source: ``spec/python-api.md``, "Wire form (JSON)": bad input (a wrong type, a missing required key, an
unknown part ``type``, image data that is not base64) raises ``loopctl.errors.InvalidMessage``, a subclass of
both ``LoopError`` and ``ValueError``, whose text names the path of the bad value in the form
``parts[2].source.data``; pydantic's errors never leak out unwrapped. Issue 2 adds: an ``encoding`` other than
base64, and a number where a string belongs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pydantic
import pytest

from loopctl import ImageSource, Message, MessagePart, Role, ToolContent
from loopctl.errors import InvalidMessage, LoopError
from loopctl.message import ImagePart, TextPart, ThinkingPart, ToolCallPart, ToolResultPart

PNG = "iVBORw0KGgo="


def two_texts_then(part: dict[str, Any]) -> dict[str, Any]:
    """A user message whose bad part is parts[2]."""
    return {"role": "user", "parts": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}, part]}


def raises(fn: Callable[[], object]) -> InvalidMessage:
    with pytest.raises(InvalidMessage) as info:
        fn()
    err = info.value
    # Never a pydantic error, not even as the visible cause.
    assert not isinstance(err, pydantic.ValidationError)
    assert err.__cause__ is None
    assert err.__suppress_context__ or err.__context__ is None
    return err


def test_invalid_message_is_a_loop_error_and_a_value_error() -> None:
    assert issubclass(InvalidMessage, LoopError)
    assert issubclass(InvalidMessage, ValueError)
    err = raises(lambda: Message.from_dict({"role": "robot"}))
    assert isinstance(err, LoopError)
    assert isinstance(err, ValueError)


def test_image_data_that_is_not_base64_names_parts_2_source_data() -> None:
    bad = {"type": "image", "source": {"encoding": "base64", "media_type": "image/png", "data": "not base64!"}}
    err = raises(lambda: Message.from_dict(two_texts_then(bad)))
    assert err.path == "parts[2].source.data"
    assert str(err) == "parts[2].source.data: expected standard base64 image data (Only base64 data is allowed)"


def test_image_data_with_bad_padding_or_url_safe_alphabet_is_refused() -> None:
    for data, why in (("iVBORw0KGgo", "Incorrect padding"), ("-_-_", "Only base64 data is allowed")):
        err = raises(lambda d=data: ImageSource.new_base64("image/png", d))  # type: ignore[misc]
        assert str(err) == f"data: expected standard base64 image data ({why})"


def test_image_data_with_line_breaks_is_refused() -> None:
    err = raises(lambda: ImageSource.new_base64("image/png", "iVBO\nRw0KGgo="))
    assert err.path == "data"


def test_an_encoding_other_than_base64_names_the_encoding_path() -> None:
    bad = {"type": "image", "source": {"encoding": "url", "media_type": "image/png", "data": PNG}}
    err = raises(lambda: Message.from_dict(two_texts_then(bad)))
    assert str(err) == "parts[2].source.encoding: expected 'base64'"


def test_an_unknown_part_type_names_the_part_and_the_known_types() -> None:
    err = raises(lambda: Message.from_dict(two_texts_then({"type": "video", "url": "x"})))
    assert str(err) == (
        "parts[2]: unknown part type 'video'; expected one of 'text', 'image', 'tool_call', 'thinking', 'tool_result', "
        "'server_tool_call', 'server_tool_result', 'compaction'"
    )


def test_a_part_without_type_is_refused() -> None:
    err = raises(lambda: Message.from_dict(two_texts_then({"text": "no type"})))
    assert str(err) == 'parts[2]: expected an object with a "type" key'


def test_a_number_where_a_string_belongs_is_an_error_not_coerced() -> None:
    err = raises(lambda: Message.from_dict(two_texts_then({"type": "text", "text": 42})))
    assert str(err) == "parts[2].text: expected a string"
    err = raises(lambda: MessagePart.from_dict({"type": "tool_call", "id": 7, "name": "t", "input": {}}))
    assert str(err) == "id: expected a string"
    err = raises(lambda: Message.from_json('{"role":"user","parts":[{"type":"tool_result","call_id":1,"output":"o"}]}'))
    assert str(err) == "parts[0].call_id: expected a string"


def test_a_string_where_a_bool_belongs_is_an_error_not_coerced() -> None:
    for value in ("true", 1, 0):
        err = raises(
            lambda v=value: MessagePart.from_dict({"type": "tool_result", "call_id": "c", "output": "o", "is_error": v})
        )  # type: ignore[misc]
        assert str(err) == "is_error: expected true, false or null"


def test_a_missing_required_key_names_it() -> None:
    err = raises(lambda: Message.from_dict(two_texts_then({"type": "tool_call", "id": "c", "input": {}})))
    assert str(err) == "parts[2].name: a value is required here (missing key)"
    err = raises(lambda: Message.from_dict({"parts": []}))
    assert str(err) == "role: a value is required here (missing key)"
    err = raises(lambda: MessagePart.from_dict({"type": "tool_result", "call_id": "c"}))
    assert err.path == "output"
    err = raises(lambda: MessagePart.from_dict({"type": "tool_call", "id": "c", "name": "t"}))
    assert err.path == "input"


def test_a_missing_text_is_an_error_not_the_constructor() -> None:
    err = raises(lambda: Message.from_dict(two_texts_then({"type": "text"})))
    assert str(err) == "parts[2].text: a value is required here (missing key)"
    err = raises(lambda: MessagePart.from_dict({"type": "thinking", "signature": "s"}))
    assert str(err) == "text: a value is required here (missing key)"


def test_a_missing_image_source_field_names_it() -> None:
    err = raises(lambda: Message.from_dict(two_texts_then({"type": "image", "source": {"media_type": "image/png"}})))
    assert str(err) == "parts[2].source.data: a value is required here (missing key)"


def test_a_wrong_container_type_is_an_error() -> None:
    assert str(raises(lambda: Message.from_dict([1, 2]))) == "<message>: expected an object"
    assert str(raises(lambda: Message.from_dict({"role": "user", "parts": "hello"}))) == "parts: expected an array"
    assert str(raises(lambda: Message.from_dict(two_texts_then("text")))) == "parts[2]: expected an object"  # type: ignore[arg-type]
    err = raises(lambda: Message.from_dict(two_texts_then({"type": "image", "source": "iVBORw0KGgo="})))
    assert str(err) == "parts[2].source: expected an object"


def test_an_unknown_role_is_an_error() -> None:
    assert str(raises(lambda: Message.from_dict({"role": "tool", "parts": []}))) == (
        "role: expected 'user', 'assistant' or 'system'"
    )
    assert raises(lambda: Message.new("robot", [])).path == "role"


def test_a_bad_tool_output_names_the_output_path() -> None:
    err = raises(lambda: Message.from_dict(two_texts_then({"type": "tool_result", "call_id": "c", "output": 5})))
    assert str(err) == "parts[2].output: expected a string or an array of text/image parts"
    err = raises(
        lambda: Message.from_dict(two_texts_then({"type": "tool_result", "call_id": "c", "output": {"text": "x"}}))
    )
    assert err.path == "parts[2].output"


def test_a_bad_part_inside_a_multipart_output_names_its_index() -> None:
    output = [{"type": "text", "text": "ok"}, {"type": "tool_call", "id": "c", "name": "n", "input": {}}]
    err = raises(lambda: Message.from_dict(two_texts_then({"type": "tool_result", "call_id": "c", "output": output})))
    assert str(err) == "parts[2].output[1]: unknown part type 'tool_call'; expected one of 'text', 'image'"
    output = [{"type": "image", "source": {"media_type": "image/png", "data": "%%%"}}]
    err = raises(lambda: Message.from_dict(two_texts_then({"type": "tool_result", "call_id": "c", "output": output})))
    assert err.path == "parts[2].output[0].source.data"


def test_a_bad_retention_names_it_and_says_what_is_expected() -> None:
    bad = {"type": "tool_result", "call_id": "c", "output": "o", "retention": "forever"}
    err = raises(lambda: Message.from_dict(two_texts_then(bad)))
    assert str(err) == 'parts[2].retention: expected "requery" or "durable", got \'forever\''
    bad["retention"] = {"kind": "requery"}
    err = raises(lambda: Message.from_dict(two_texts_then(bad)))
    assert err.path == "parts[2].retention"
    assert '{"type": "requery"}' in str(err)


def test_a_non_json_tool_input_such_as_a_set_is_refused() -> None:
    err = raises(lambda: MessagePart.tool_call("c", "t", {"tags": [1, {2, 3}]}))
    assert err.path == "input.tags[1]"
    assert "expected a JSON value" in str(err)
    err = raises(
        lambda: Message.from_dict(
            {"role": "assistant", "parts": [{"type": "tool_call", "id": "c", "name": "t", "input": {1, 2}}]}
        )
    )
    assert err.path == "parts[0].input"


def test_a_tool_input_with_non_string_keys_or_tuples_is_refused() -> None:
    assert raises(lambda: MessagePart.tool_call("c", "t", {1: "a"})).path.startswith("input")
    assert raises(lambda: MessagePart.tool_call("c", "t", (1, 2))).path == "input"


def test_nan_and_infinity_in_a_tool_input_are_refused_with_their_path() -> None:
    err = raises(lambda: MessagePart.tool_call("c", "t", {"a": [1.0, float("nan")]}))
    assert str(err) == "input.a[1]: expected a finite number (JSON has no NaN or Infinity)"
    err = raises(lambda: MessagePart.tool_call("c", "t", float("-inf")))
    assert err.path == "input"


def test_nan_and_overflowing_numbers_in_json_text_are_refused() -> None:
    for literal in ("NaN", "Infinity", "1e400"):
        text = '{"role":"assistant","parts":[{"type":"tool_call","id":"c","name":"t","input":{"x":[' + literal + "]}}]}"
        err = raises(lambda t=text: Message.from_json(t))  # type: ignore[misc]
        assert err.path == "parts[0].input.x[0]", literal


def _nested(depth: int) -> object:
    value: object = {}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


def test_a_tool_input_nested_past_the_limit_is_refused_and_anything_accepted_is_read_back() -> None:
    # An input 200 levels deep was accepted, saved, and then could not be loaded ("recursion limit exceeded"),
    # while one 300 deep was refused with a path that did not name `input`.
    from loopctl.engine import LoopMachine
    from loopctl.message import dumps_conversation, loads_conversation
    from loopctl.message.model import MAX_INPUT_DEPTH
    from loopctl.session import Session

    deepest = MessagePart.tool_call("c", "t", _nested(MAX_INPUT_DEPTH))
    conversation = [
        Message.user("go"),
        Message.new(Role.ASSISTANT, [deepest]),
        Message.new(Role.USER, [MessagePart.tool_result("c", "t", "ok")]),
    ]
    assert loads_conversation(dumps_conversation(conversation)) == conversation
    assert Message.from_json(conversation[1].to_json()) == conversation[1]
    session = Session(LoopMachine(conversation))
    assert list(Session.from_bytes(session.to_bytes()).machine.history) == conversation
    for depth in (MAX_INPUT_DEPTH + 1, 200, 300, 5000):
        err = raises(lambda d=depth: MessagePart.tool_call("c", "t", _nested(d)))  # type: ignore[misc]
        assert str(err) == "input: expected JSON nested at most 128 levels deep (arrays and objects)", depth


def test_text_that_is_not_json_is_refused() -> None:
    err = raises(lambda: Message.from_json('{"role": "user", "parts": ['))
    assert err.path == ""
    assert str(err).startswith("<message>: invalid JSON (")


def test_json_text_with_a_lone_surrogate_is_refused() -> None:
    err = raises(lambda: Message.from_json('{"role":"user","parts":[{"type":"text","text":"a\ud800"}]}'))
    assert str(err) == "<message>: expected JSON text that is valid Unicode (found a lone surrogate)"
    raises(lambda: Message.from_json('{"role":"user","parts":[{"type":"text","text":"a\\ud800"}]}'))


def test_writing_a_lone_surrogate_raises_with_its_path() -> None:
    # The constructors refuse one (tests/message/test_unicode.py); a value built without validation
    # (model_construct) is still refused when written.
    msg = Message.model_construct(
        role=Role.USER, parts=(TextPart(text="ok"), TextPart.model_construct(text="cut \ud83d"))
    )
    err = raises(msg.to_json)
    assert str(err) == "parts[1].text: expected a string that is valid Unicode (found a lone surrogate)"
    bad_call = ToolCallPart.model_construct(id="c", name="t", input={"k": ["x", "\udc00"]})
    call = Message.model_construct(role=Role.ASSISTANT, parts=(bad_call,))
    assert raises(call.to_json).path == "parts[0].input.k[1]"


def test_direct_constructors_raise_invalid_message_not_pydantic_errors() -> None:
    assert str(raises(lambda: TextPart(text=5))) == "text: expected a string"  # type: ignore[arg-type]
    assert str(raises(lambda: ImageSource(media_type="image/png", data="!"))).startswith(
        "data: expected standard base64"
    )
    assert raises(lambda: ImagePart(source={"media_type": "image/png"})).path == "source.data"  # type: ignore[arg-type]
    assert raises(lambda: ThinkingPart(text="t", signature=b"bytes")).path == "signature"  # type: ignore[arg-type]
    assert raises(lambda: ToolCallPart(id="c", name=None, input={})).path == "name"  # type: ignore[arg-type]
    assert raises(lambda: ToolResultPart(call_id="c", output="o", is_error="yes")).path == "is_error"  # type: ignore[arg-type]
    assert raises(lambda: Message(role=Role.USER, parts=[TextPart(text="a"), "b"])).path == "parts[1]"  # type: ignore[list-item]
    assert raises(lambda: Message(role="nobody")).path == "role"  # type: ignore[arg-type]
    assert raises(lambda: ToolContent.from_multipart(["x"])).path == "[0]"  # type: ignore[list-item]
    assert raises(lambda: ToolContent(5)).path == ""
    assert raises(lambda: MessagePart.tool_result("c", "t", 5)).path == "output"  # type: ignore[arg-type]


def test_from_dict_of_a_part_names_paths_without_the_type_tag() -> None:
    assert (
        str(raises(lambda: MessagePart.from_dict({"type": "text"}))) == "text: a value is required here (missing key)"
    )
    output = [{"type": "text", "text": "ok"}, {"type": "text"}]
    err = raises(lambda: MessagePart.from_dict({"type": "tool_result", "call_id": "c", "output": output}))
    assert str(err) == "output[1].text: a value is required here (missing key)"


def test_errors_inside_a_conversation_name_the_message_index() -> None:
    from loopctl.errors import ConversationFileError
    from loopctl.message import loads_conversation

    doc = {
        "format_version": 1,
        "messages": [
            {"role": "user", "parts": []},
            two_texts_then({"type": "image", "source": {"media_type": "image/png", "data": "@"}}),
        ],
    }
    with pytest.raises(ConversationFileError) as info:
        loads_conversation(json.dumps(doc))
    assert str(info.value).startswith("<string>: messages[1].parts[2].source.data: expected standard base64 image data")
    assert isinstance(info.value.__cause__, InvalidMessage)
    assert info.value.__cause__.path == "messages[1].parts[2].source.data"


def test_the_message_names_every_documented_failure_kind_as_invalid_message() -> None:
    """One sweep over issue 2's list: each kind is InvalidMessage with a non-empty expectation."""
    cases: list[Callable[[], object]] = [
        lambda: Message.from_dict({"role": 1}),  # wrong type
        lambda: Message.from_dict({"parts": []}),  # missing key
        lambda: MessagePart.from_dict({"type": "audio"}),  # unknown part type
        lambda: MessagePart.from_dict({"type": "image", "source": {"encoding": "hex", "media_type": "i", "data": ""}}),
        lambda: MessagePart.from_dict({"type": "image", "source": {"media_type": "i", "data": "***"}}),
        lambda: MessagePart.from_dict({"type": "text", "text": 1.5}),  # number for a string
        lambda: MessagePart.tool_call("c", "t", {"s": {1}}),  # non-JSON input
    ]
    for case in cases:
        err = raises(case)
        assert err.expected
