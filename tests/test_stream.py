"""The stream accumulator's argument parsing (``loopctl.stream``)."""

from __future__ import annotations

import json
import sys
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopctl.errors import ProviderProtocolError
from loopctl.message import ToolCallPart
from loopctl.message.model import MAX_INPUT_DEPTH
from loopctl.providers import openai_chat
from loopctl.response import StopReason
from loopctl.stream import (
    PartStarted,
    ResponseFinished,
    StreamAccumulator,
    ToolCallDelta,
    dumps_exact,
    loads_exact,
    parse_arguments,
)


def test_arguments_nested_deeper_than_a_tool_input_may_be_are_an_invalid_call() -> None:
    # They became the call's input unchecked (the accumulator copies without validating), giving a message
    # whose conversation file could not be read back.
    deep = "[" * (MAX_INPUT_DEPTH + 1) + "]" * (MAX_INPUT_DEPTH + 1)
    assert parse_arguments(deep) == ({}, "arguments are nested deeper than 128 levels")
    ok = "[" * MAX_INPUT_DEPTH + "]" * MAX_INPUT_DEPTH
    assert parse_arguments(ok)[1] is None

    acc = StreamAccumulator("test")
    acc.add(PartStarted(0, ToolCallPart(id="c1", name="t", input={})))
    acc.add(ToolCallDelta(0, deep))
    acc.add(ResponseFinished(StopReason.TOOL_CALL))
    response = acc.finish()
    assert response.message.parts[0] == ToolCallPart(id="c1", name="t", input={})
    assert [(c.id, c.error) for c in response.invalid_tool_calls] == [
        ("c1", "arguments are nested deeper than 128 levels")
    ]


def test_integers_past_64_bits_in_arguments_are_kept_exactly() -> None:
    # orjson read them as floats: -9223372036854775809 became -9.223372036854776e+18 (the property test
    # test_a_stream_decodes_the_same_however_it_is_split found it), silently changing the model's input.
    text = '{"A": -9223372036854775809, "B": [18446744073709551616, 1.5, 12345678901234567890123]}'
    value, error = parse_arguments(text)
    assert error is None
    assert value == {"A": -9223372036854775809, "B": [2**64, 1.5, 12345678901234567890123]}
    assert all(type(n) is int for n in (value["A"], value["B"][0], value["B"][2]))
    assert parse_arguments('{"n": 9007199254740993}') == ({"n": 9007199254740993}, None)
    assert parse_arguments('{"x": NaN, "pad": 1234567890123456789012}')[1] is not None


# loads_exact finds a possible integer past 64 bits by a scan of its digits; whatever the text, it must read
# the same values as the standard library (which keeps every integer exact), with the same types.
_wide_json = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(-(2**200), 2**200),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(st.characters(codec="utf-8", exclude_categories=("Cs",))),
        st.text(st.sampled_from("0123456789١٢٣٤٥٦٧٨٩߀"), min_size=15, max_size=40),  # digits inside strings
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)


def _typed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value), value)


@given(_wide_json, st.booleans(), st.booleans())
def test_loads_exact_reads_what_the_standard_library_reads(value: Any, ascii_only: bool, as_bytes: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    expected = _typed(json.loads(text))
    assert _typed(loads_exact(text.encode() if as_bytes else text)) == expected


@pytest.mark.parametrize(
    "text",
    [
        "1234567890123456789",  # 19 digits, within 64 bits
        "12345678901234567890",  # 20 digits, past them
        "-9223372036854775809",
        '{"a": "x", "n": [18446744073709551616]}',
        '["é漢字🚀", 123456789012345678901234567890]',
        '{"digits in text": "12345678901234567890123", "n": 1}',
    ],
)
def test_loads_exact_keeps_integers_of_any_size(text: str) -> None:
    assert _typed(loads_exact(text)) == _typed(json.loads(text))
    assert _typed(loads_exact(text.encode())) == _typed(json.loads(text))


@given(_wide_json, st.text(min_size=1, max_size=12), st.sampled_from([None, "fc_1"]), st.integers(1, 4))
def test_a_streamed_call_is_the_part_its_constructor_makes_of_the_same_arguments(
    value: Any, call_id: str, item_id: str | None, pieces: int
) -> None:
    # The accumulator builds the finished call without validating its input again (parse_arguments already
    # read it as the validation would keep it): the part must be the one the constructor makes, field for
    # field, with the same JSON and the same fields set.
    text = json.dumps(value)
    acc = StreamAccumulator("test")
    acc.add(PartStarted(0, ToolCallPart(id=call_id, name="t", input={}, item_id=item_id)))
    size = -(-len(text) // pieces)
    for start in range(0, len(text), size):
        acc.add(ToolCallDelta(0, text[start : start + size]))
    acc.add(ResponseFinished(StopReason.TOOL_CALL))
    (part,) = acc.finish().message.parts
    expected = ToolCallPart(id=call_id, name="t", input=json.loads(text), item_id=item_id)
    assert type(part) is ToolCallPart
    assert part == expected
    assert _typed(part.input) == _typed(expected.input)
    assert part.to_dict() == expected.to_dict()
    assert part.model_dump_json() == expected.model_dump_json()
    assert part.model_fields_set == expected.model_validate(expected.model_dump()).model_fields_set


def test_a_subclass_of_a_tool_call_part_keeps_its_own_validation_when_its_call_finishes() -> None:
    class Tagged(ToolCallPart):
        tag: str = "x"

    acc = StreamAccumulator("test")
    acc.add(PartStarted(0, Tagged(id="c1", name="t", input={}, tag="kept")))
    acc.add(ToolCallDelta(0, '{"n": 1}'))
    acc.add(ResponseFinished(StopReason.TOOL_CALL))
    (part,) = acc.finish().message.parts
    assert type(part) is Tagged
    assert (part.input, part.tag) == ({"n": 1}, "kept")


def test_an_integer_past_64_bits_nested_too_deep_for_the_standard_library_is_a_typed_refusal() -> None:
    # orjson reads up to 1,024 levels; text it accepted that holds an integer past 64 bits is read again by
    # json.loads, which recursed past the interpreter's limit: a RecursionError escaped parse_arguments and
    # every stream decoder (a model's or a server's nested reply crashed the call, untyped).
    text = "[" * 1020 + "12345678901234567890123" + "]" * 1020
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # the interpreter's default (a test runner may raise it)
    try:
        with pytest.raises(orjson.JSONDecodeError, match="nested too deep"):
            loads_exact(text)
        with pytest.raises(orjson.JSONDecodeError, match="nested too deep"):
            loads_exact(text.encode())
        value, error = parse_arguments(text)
        assert value == {}
        assert error is not None and error.startswith("arguments are not valid JSON: nested too deep")
        decoder = openai_chat.StreamDecoder()
        event = '{"id":"r","choices":[{"index":0,"delta":{"tool_calls":[]}}],"x":' + text + "}"
        with pytest.raises(ProviderProtocolError, match="a stream event is not JSON"):
            decoder.feed(f"data: {event}\n\n".encode())
    finally:
        sys.setrecursionlimit(limit)


def test_arguments_sent_as_an_object_nested_too_deep_for_the_standard_library_are_a_typed_refusal() -> None:
    # A compatible server's arguments object is written back to text by dumps_exact: orjson writes 254 levels,
    # json.dumps recursed past the interpreter's limit, and a RecursionError escaped the Chat decoder.
    depth = 1000
    deep = '{"a":' * depth + "1" + "}" * depth
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # the interpreter's default (a test runner may raise it)
    try:
        with pytest.raises(ValueError, match="nested too deep to write as JSON"):
            dumps_exact(orjson.loads(deep))
        call = '{"index":0,"id":"c1","function":{"name":"t","arguments":' + deep + "}}"
        event = '{"id":"r","choices":[{"index":0,"delta":{"tool_calls":[' + call + "]}}]}"
        with pytest.raises(ProviderProtocolError, match="nested too deep to write as JSON"):
            openai_chat.StreamDecoder().feed(f"data: {event}\n\n".encode())
    finally:
        sys.setrecursionlimit(limit)
    assert dumps_exact({"n": 2**70, "s": "é"}) == '{"n":1180591620717411303424,"s":"é"}'
