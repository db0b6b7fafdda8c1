"""The model's checks moved into C (issue 23) refuse exactly what the Python checks they replace refused.

Strings: every string field is read by pydantic-core as UTF-8 (``model.Str``), which refuses a lone
surrogate as it validates; before, a Python walk (``lone_surrogate_at``) looked for one after validation.
A tool call's ``input``: orjson writes and reads the value back and the copy must equal it; anything else
takes the full check (depth, ``JsonValue``, finiteness, lone surrogates). Here the old checks are rebuilt
from pydantic's ``JsonValue`` and the walks they used, and both are run on values drawn to hit every case: a
value one accepts the other accepts, as an equal value of the same types; a value one refuses the other
refuses with :class:`~loopctl.errors.InvalidMessage` and the same text and path.
"""

from __future__ import annotations

import enum
import math
import uuid
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, JsonValue, ValidationError, field_validator

from loopctl.errors import InvalidMessage
from loopctl.message import Message, Role, TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from loopctl.message.model import MAX_INPUT_DEPTH, _invalid, _unwritable_at, json_depth, lone_surrogate_at

SETTINGS = settings(max_examples=400, deadline=None)

SURROGATE_ERROR = "expected a string that is valid Unicode (found a lone surrogate)"


class _Old(BaseModel):
    """The tool-call input checks as they were before issue 23."""

    input: JsonValue

    @field_validator("input", mode="before")
    @classmethod
    def _shallow(cls, value: Any) -> Any:
        if json_depth(value) > MAX_INPUT_DEPTH:
            raise ValueError("too deep")
        return value

    @field_validator("input")
    @classmethod
    def _finite(cls, value: JsonValue) -> JsonValue:
        if _unwritable_at(value, "", numbers=True) is not None:
            raise ValueError("not finite")
        return value


def old_input(value: Any) -> tuple[bool, Any]:
    """``(True, the value kept)`` or ``(False, None)`` as the old checks decided."""
    try:
        kept = _Old(input=value).input
    except ValidationError:
        return False, None
    if _unwritable_at(kept, "", strings=True) is not None:  # the old lone_surrogate_at walk of a part
        return False, None
    return True, kept


class Colour(enum.Enum):
    RED = "red"


class Size(enum.IntEnum):
    BIG = 1


class Name(str):
    pass


def shape(value: Any) -> Any:
    """``value`` with each leaf replaced by its exact type (the copy must keep the types, not just compare
    equal: ``1 == 1.0 == True``)."""
    if isinstance(value, dict):
        return (dict, [(type(k), k, shape(v)) for k, v in value.items()])
    if isinstance(value, list):
        return (list, [shape(v) for v in value])
    return (type(value), value if not (isinstance(value, float) and math.isnan(value)) else "nan")


any_char = st.characters(codec=None)  # lone surrogates included
odd_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(any_char, max_size=8),
    st.sampled_from([Colour.RED, Size.BIG, Name("x"), uuid.UUID(int=7), b"x", (1, 2), (), 1 + 2j, ...]),
)
odd_value: st.SearchStrategy[Any] = st.recursive(
    odd_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(any_char, max_size=6), inner, max_size=4),
        st.dictionaries(st.integers(0, 3), inner, min_size=1, max_size=2),
        st.builds(OrderedDict, st.dictionaries(st.text(max_size=3), inner, max_size=2)),
        st.builds(tuple, st.lists(inner, max_size=3)),
    ),
    max_leaves=14,
)


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


deep_value = st.integers(MAX_INPUT_DEPTH - 3, MAX_INPUT_DEPTH + 3).map(nested)


@SETTINGS
@given(st.one_of(odd_value, deep_value))
def test_a_tool_call_input_is_refused_exactly_when_it_was(value: Any) -> None:
    ok, kept = old_input(value)
    if not ok:
        with pytest.raises(InvalidMessage) as info:
            ToolCallPart(id="c", name="t", input=value)
        assert info.value.path.startswith("input")
        return
    part = ToolCallPart(id="c", name="t", input=value)
    assert shape(part.input) == shape(kept)


@SETTINGS
@given(st.one_of(odd_value, deep_value))
def test_a_message_with_a_tool_call_is_refused_exactly_when_it_was(value: Any) -> None:
    ok, _ = old_input(value)
    data = {"role": "assistant", "parts": [{"type": "tool_call", "id": "c", "name": "t", "input": value}]}
    if not ok:
        with pytest.raises(InvalidMessage) as info:
            Message.from_dict(data)
        assert info.value.path.startswith("parts[0].input")
        return
    Message.from_dict(data)


@SETTINGS
@given(st.text(any_char, max_size=12))
def test_a_string_field_is_refused_exactly_when_it_has_a_lone_surrogate(text: str) -> None:
    try:
        text.encode("utf-8")
        writable = True
    except UnicodeEncodeError:
        writable = False
    builders = [
        (lambda: TextPart(text=text), "text"),
        (lambda: ThinkingPart(text="", signature=text), "signature"),
        (lambda: ToolCallPart(id=text, name="t", input={}), "id"),
        (lambda: ToolResultPart(call_id="c", name=text, output="x"), "name"),
        (lambda: ToolResultPart(call_id="c", name="t", output=text), "output"),
        (lambda: Message.user(text), "parts[0].text"),
        (lambda: Message.new(Role.USER, [{"type": "text", "text": text}]), "parts[0].text"),  # type: ignore[list-item]
        (lambda: TextPart(text="x").model_copy(update={"text": text}), "text"),
    ]
    for build, path in builders:
        if writable:
            build()
            continue
        with pytest.raises(InvalidMessage) as info:
            build()
        assert (info.value.path, info.value.expected) == (path, SURROGATE_ERROR)


def test_the_input_kept_is_a_copy() -> None:
    given_input = {"a": [1, {"b": "c"}]}
    part = ToolCallPart(id="c", name="t", input=given_input)
    given_input["a"].append(2)  # type: ignore[attr-defined]
    assert part.input == {"a": [1, {"b": "c"}]}


def test_the_old_walk_still_finds_a_string_that_got_in_unchecked() -> None:
    # model_construct skips validation; check_conversation and the writers still find the string.
    part = TextPart.model_construct(text="cut \ud83d")
    assert lone_surrogate_at(Message.model_construct(role=Role.USER, parts=(part,))) == "parts[0].text"


def test_a_pydantic_unicode_error_on_a_field_reads_as_the_surrogate_error() -> None:
    with pytest.raises(ValidationError) as info:
        TextPart.model_validate({"text": "a\udc00"})
    assert str(_invalid(info.value, "")) == f"text: {SURROGATE_ERROR}"
