"""A function tool's input without its input model (FunctionTool._plain_kwargs) is what the model gives:
the same keyword arguments, values and types, whenever the shortcut is taken; anything else goes to the
model, which refuses or converts as before."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import Field

from loopctl.tool import FunctionTool, ToolContext, ToolInputError, tool

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3), max_leaves=6
)


def f_all(text: str, count: int, ratio: float, flag: bool, anything: Any, loose=None) -> None:  # type: ignore[no-untyped-def]
    """A function of every plain kind."""


def f_defaults(text: str = "x", count: int = 3, ratio: float = 0.5, flag: bool = False, note: str = "n") -> None:
    """Defaults."""


def f_union(text: str, note: str | None = None) -> None:
    """A union takes the model."""


def f_described(text: Annotated[str, Field(description="the text")], n: int = 1) -> None:
    """A description is not a constraint."""


TOOLS = [FunctionTool(f_all), FunctionTool(f_defaults), FunctionTool(f_described), FunctionTool(f_union)]
FIELD_NAMES = ["text", "count", "ratio", "flag", "anything", "loose", "note", "n", "extra"]


def _model_kwargs(t: FunctionTool[Any], input: Any) -> dict[str, Any] | str:
    try:
        parsed = t._parse(input)
    except ToolInputError as exc:
        return f"refused: {exc}"
    return {k: getattr(parsed, k) for k in type(parsed).model_fields}


@pytest.mark.parametrize("t", TOOLS, ids=lambda t: t.name)
@given(st.dictionaries(st.sampled_from(FIELD_NAMES), json_values, max_size=7))
def test_the_shortcut_gives_what_the_model_gives(t: FunctionTool[Any], input: dict[str, Any]) -> None:
    fast = t._plain_kwargs(input)
    if fast is None:
        return  # the model decides, as before
    slow = _model_kwargs(t, input)
    assert isinstance(slow, dict), slow  # the shortcut never takes input the model refuses
    assert fast == slow
    for name, value in fast.items():
        assert type(value) is type(slow[name])
        if isinstance(value, str) or name == "anything":
            assert value is slow[name]  # the model hands back the same object too


def test_the_shortcut_is_taken_for_plain_input() -> None:
    t = FunctionTool(f_all)
    value = {"a": [1]}
    args = {"text": "hi", "count": 2, "ratio": 0.5, "flag": True, "anything": value}
    assert t._plain_kwargs(args) == {**args, "loose": None}
    assert FunctionTool(f_described)._plain_kwargs({"text": "x"}) == {"text": "x", "n": 1}


@pytest.mark.parametrize(
    "input",
    [
        {"text": "hi", "count": True, "ratio": 0.5, "flag": True, "anything": 1},  # a bool for an int
        {"text": "hi", "count": 2, "ratio": 1, "flag": True, "anything": 1},  # an int the model makes a float
        {"text": "hi", "count": 2, "ratio": 0.5, "flag": True, "anything": 1, "extra": 1},  # a key that is no field
        {"text": "hi", "count": 2, "ratio": 0.5, "flag": True},  # a required field missing
        [1, 2],
    ],
)
def test_anything_else_takes_the_model(input: Any) -> None:
    assert FunctionTool(f_all)._plain_kwargs(input) is None


def test_a_constrained_or_composite_field_always_takes_the_model() -> None:
    def constrained(text: Annotated[str, Field(min_length=2)]) -> None:
        """Constrained."""

    def composite(items: list[str]) -> None:
        """Composite."""

    def with_context(ctx: ToolContext[Any], text: str) -> None:
        """The context is not a field."""

    assert FunctionTool(constrained)._plain is None
    assert FunctionTool(composite)._plain is None
    assert FunctionTool(with_context)._plain is not None
    with pytest.raises(ToolInputError, match="at least 2"):
        asyncio.run(FunctionTool(constrained, inline=True).call({"text": "a"}, ToolContext("c", "constrained")))


def test_a_float_field_given_an_int_gets_a_float() -> None:
    seen: list[Any] = []

    @tool(inline=True)
    def ratio(r: float) -> str:
        """Ratio."""
        seen.append(r)
        return "ok"

    asyncio.run(ratio.call({"r": 1}, ToolContext("c", "ratio")))
    assert seen == [1.0]
    assert type(seen[0]) is float


def _mostly(kind: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return kind | kind | json_values


@given(
    st.fixed_dictionaries(
        {"text": _mostly(st.text())},
        optional={
            "count": _mostly(st.integers()),
            "ratio": _mostly(st.floats()),
            "flag": _mostly(st.booleans()),
            "anything": json_values,
            "loose": json_values,
            "note": json_values,
            "extra": json_values,
        },
    )
)
def test_typed_input_takes_the_shortcut_and_agrees(input: dict[str, Any]) -> None:
    for t in TOOLS:
        fast = t._plain_kwargs(input)
        if fast is None:
            continue
        slow = _model_kwargs(t, input)
        assert fast == slow or (  # NaN is not equal to itself: compare the same objects
            isinstance(slow, dict) and all(fast[k] is slow[k] or fast[k] == slow[k] for k in slow) and fast.keys() == slow.keys()
        )
        assert isinstance(slow, dict)
        assert {k: type(v) for k, v in fast.items()} == {k: type(v) for k, v in slow.items()}


def test_the_typed_strategy_reaches_the_shortcut() -> None:
    assert FunctionTool(f_defaults)._plain_kwargs({"text": "a", "ratio": float("inf")}) is not None
    assert FunctionTool(f_union)._plain is None


def f_validated_default(count: int = Field("5", validate_default=True)) -> int:  # type: ignore[assignment]
    """A default the model validates: "5" becomes 5."""
    return count


def f_bad_default(count: int = Field(None, validate_default=True)) -> int:  # type: ignore[assignment]
    """A default the model refuses when it validates it."""
    return count


def f_deprecated(count: Annotated[int, Field(deprecated="use total")] = 1) -> int:
    """A deprecated field: the model warns when the value is read."""
    return count


def test_a_default_the_model_validates_takes_the_model() -> None:
    # Field(validate_default=True): the model converts the default ("5" -> 5) or refuses it (None for an int);
    # handing the default out as it is would give the function what the model never gives.
    t = FunctionTool(f_validated_default)
    assert t._plain_kwargs({}) is None
    assert asyncio.run(t.call({}, None)) == 5  # type: ignore[arg-type]
    bad = FunctionTool(f_bad_default)
    assert bad._plain_kwargs({}) is None
    with pytest.raises(ToolInputError, match="count"):
        asyncio.run(bad.call({}, None))  # type: ignore[arg-type]
    assert bad._plain_kwargs({"count": 2}) is None  # the field takes the model, whatever the input


def test_a_deprecated_field_takes_the_model() -> None:
    # The model warns (DeprecationWarning) when a deprecated field is read: the shortcut would skip it.
    t = FunctionTool(f_deprecated)
    assert t._plain_kwargs({"count": 2}) is None
    with pytest.warns(DeprecationWarning, match="use total"):
        assert asyncio.run(t.call({"count": 2}, None)) == 2  # type: ignore[arg-type]
