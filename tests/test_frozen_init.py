"""fast_init (loopctl._frozen): each class it is used on builds exactly what the __init__ dataclasses wrote
builds: the same field values, defaults and fresh default-factory values, __post_init__ run, still frozen."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopctl.engine.limits
import loopctl.engine.machine
import loopctl.engine.run
import loopctl.providers.base
import loopctl.response
from loopctl._frozen import _ORIGINAL, dataclass_init, fast_init

CLASSES = [
    loopctl.response.Usage,
    loopctl.response.ModelResponse,
    loopctl.providers.base.ModelRequest,
    loopctl.engine.limits.RunUsage,
    loopctl.engine.machine.CallLLM,
    loopctl.engine.machine.CallTools,
    loopctl.engine.run.ToolCallRecord,
    loopctl.engine.run.ModelReply,
    loopctl.engine.run.Turn,
]


def _values(obj: object) -> list[tuple[str, Any]]:
    return [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]  # type: ignore[arg-type]


def _made_both_ways(cls: type, args: tuple[Any, ...]) -> tuple[Any, Any]:
    fast = cls(*args)
    slow = object.__new__(cls)
    dataclass_init(cls)(slow, *args)
    return fast, slow


def test_every_class_with_fast_init_is_checked_here() -> None:
    assert set(_ORIGINAL) == set(CLASSES)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_same_parameters_as_the_dataclass_init(cls: type) -> None:
    fast = inspect.signature(cls.__init__).parameters
    slow = inspect.signature(dataclass_init(cls)).parameters
    assert list(fast) == list(slow)
    for name, p in fast.items():
        q = slow[name]
        assert p.kind == q.kind
        if repr(q.default) == "<factory>":
            assert repr(p.default) == "<factory>"
        else:
            assert p.default is q.default
    assert cls.__init__.__annotations__ == dataclass_init(cls).__annotations__


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_the_type_hints_resolve_as_the_dataclass_init_s(cls: type) -> None:
    # the __init__ reads its annotations in the class's module (it named nothing there once: NameError)
    hints = typing.get_type_hints(cls.__init__)
    assert hints == typing.get_type_hints(dataclass_init(cls))
    assert hints["return"] is type(None)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@given(data=st.data())
def test_same_values_as_the_dataclass_init(cls: type, data: st.DataObject) -> None:
    fields = dataclasses.fields(cls)
    required = sum(1 for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
    n = data.draw(st.integers(min_value=required, max_value=len(fields)))
    # Any value goes into a slot (the class's types are for mypy); __post_init__ checks are kept valid.
    args = tuple(
        None if f.name == "tool_choice" else data.draw(st.integers() | st.text() | st.none() | st.tuples(st.integers()))
        for f in fields[:n]
    )
    fast, slow = _made_both_ways(cls, args)
    assert _values(fast) == _values(slow)
    for f in fields[n:]:
        if f.default_factory is not dataclasses.MISSING:  # a fresh value each time, as dataclasses makes it
            assert getattr(fast, f.name) == f.default_factory()
            assert getattr(fast, f.name) is not getattr(cls(*args), f.name) or getattr(fast, f.name) == ()


def test_post_init_still_runs() -> None:
    with pytest.raises(ValueError, match="tool_choice"):
        loopctl.providers.base.ModelRequest(messages=[], tool_choice="sometimes")  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_still_frozen(cls: type) -> None:
    fields = dataclasses.fields(cls)
    obj = cls(*[None for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING])
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, fields[0].name, 1)
    assert obj == obj.__class__(*[getattr(obj, f.name) for f in fields])


def test_refuses_a_class_it_does_not_fit() -> None:
    @dataclasses.dataclass
    class Plain:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class KeywordOnly:
        a: int = dataclasses.field(kw_only=True)

    for cls in (Plain, KeywordOnly):
        with pytest.raises(TypeError):
            fast_init(cls)


def test_usage_with_every_count_adds_each() -> None:
    a = loopctl.response.Usage(1, None, 3, None, 5, 6)
    b = loopctl.response.Usage(None, 2, 3, None, None, 1)
    assert a + b == loopctl.response.Usage(1, 2, 6, None, 5, 7)
