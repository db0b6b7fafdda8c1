"""The stream accumulator's argument parsing (``loopctl.stream``)."""

from __future__ import annotations

from loopctl.message import ToolCallPart
from loopctl.message.model import MAX_INPUT_DEPTH
from loopctl.response import StopReason
from loopctl.stream import PartStarted, ResponseFinished, StreamAccumulator, ToolCallDelta, parse_arguments


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
