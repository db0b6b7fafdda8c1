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
