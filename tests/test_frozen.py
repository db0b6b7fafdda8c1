"""loopctl._frozen.dataclass: a frozen, slotted class it makes behaves as the one ``dataclasses.dataclass`` makes
from the same definition (the same parameters, values, repr, equality, hash, frozenness, pickling, replace), and
every such class of loopctl against a twin made by ``dataclasses`` from its fields."""

from __future__ import annotations

import abc
import copy
import dataclasses
import importlib
import inspect
import math
import pickle
import pkgutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import KW_ONLY as KeywordsAfter
from dataclasses import InitVar as Scale
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopctl
from loopctl._frozen import dataclass, hot

Decorator = Callable[..., Any]
BOTH: list[Decorator] = [dataclass, dataclasses.dataclass]


def _made_by_us(cls: type) -> bool:
    setattr_ = cls.__dict__.get("__setattr__")
    return getattr(getattr(setattr_, "__code__", None), "co_filename", "").endswith("_frozen.py")


def _definitions(make: Decorator) -> dict[str, type]:
    """The same definitions, made by ``make``: every option the fast path handles."""

    @make(frozen=True, slots=True)
    class Plain:
        a: int
        b: str = "x"
        c: tuple[int, ...] = dataclasses.field(default_factory=tuple)
        d: float = dataclasses.field(default=0.0, compare=False, repr=False)
        e: Any = dataclasses.field(default=None, hash=False)
        f: Any = dataclasses.field(default=None, compare=False, hash=True)
        limit: ClassVar[int] = 3

    @make(frozen=True, slots=True)
    class Empty:
        pass

    @make(frozen=True, slots=True)
    class One:
        a: Any

    @make(frozen=True, slots=True)
    class Checked:
        a: int
        seen: list[int] = dataclasses.field(default_factory=list)

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError(f"a must not be negative, got {self.a}")
            self.seen.append(self.a)

    @make(frozen=True, slots=True)
    class Own:
        a: Any

        def __repr__(self) -> str:
            return f"<own {self.a!r}>"

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Own) and repr(other.a)[:2] == repr(self.a)[:2]

        def __hash__(self) -> int:
            return len(repr(self.a)[:2])

    @make(frozen=True, slots=True)
    class EqOnly:  # noqa: PLW1641 - dataclasses leaves __hash__ None: checked against it
        a: int

        def __eq__(self, other: object) -> bool:
            return isinstance(other, EqOnly) and other.a == self.a

    @make(frozen=True, slots=True, eq=False, repr=False)
    class Identity:
        a: int

    @make(frozen=True, slots=True)
    class Sub(Plain):
        g: int = 7

    @make(frozen=True, slots=True, match_args=False)
    class NoMatch:
        a: int

    @make(frozen=True, slots=True)
    @hot  # marked, then made with the twin's __init__ (dataclasses' own class: untouched)
    class HotInner:
        a: int
        type: str = "x"  # a field named as the builtin the __init__ tests the class with
        seen: list[int] = dataclasses.field(default_factory=list)

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError(f"a must not be negative, got {self.a}")
            self.seen.append(self.a)

    @make(frozen=True, slots=True)
    @hot
    class HotOuter:
        a: Any
        b: tuple[int, ...] = dataclasses.field(default_factory=tuple)
        c: float = dataclasses.field(default=0.0, compare=False)

    classes = (Plain, Empty, One, Checked, Own, EqOnly, Identity, Sub, NoMatch, HotInner, HotOuter)
    return {c.__name__: c for c in classes}


OURS = _definitions(dataclass)
THEIRS = _definitions(dataclasses.dataclass)
NAMES = sorted(OURS)

values = st.integers(-5, 5) | st.text(max_size=3) | st.none() | st.floats(allow_nan=True) | st.tuples(st.integers())


def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(cls)  # type: ignore[arg-type]


def _required(cls: type) -> int:
    return sum(1 for f in _fields(cls) if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


def _outcome(cls: type, args: tuple[Any, ...]) -> Any:
    try:
        return cls(*args)
    except Exception as exc:
        return (type(exc), str(exc))


def test_the_definitions_take_the_fast_path() -> None:
    assert all(_made_by_us(c) for name, c in OURS.items() if name != "Sub")  # Sub: dataclasses writes its setattr
    assert not any(_made_by_us(c) for c in THEIRS.values())
    assert OURS["Sub"].__init__.__code__.co_filename == "<string>"


@pytest.mark.parametrize("name", NAMES)
def test_same_class_shape(name: str) -> None:
    ours, theirs = OURS[name], THEIRS[name]
    assert str(inspect.signature(ours)) == str(inspect.signature(theirs))
    assert inspect.signature(ours.__init__).parameters.keys() == inspect.signature(theirs.__init__).parameters.keys()
    assert ours.__init__.__annotations__ == theirs.__init__.__annotations__
    assert [(f.name, f.type, f.default, f.repr, f.compare, f.hash) for f in _fields(ours)] == [
        (f.name, f.type, f.default, f.repr, f.compare, f.hash) for f in _fields(theirs)
    ]
    assert ours.__slots__ == theirs.__slots__
    assert getattr(ours, "__match_args__", None) == getattr(theirs, "__match_args__", None)
    assert repr(ours.__dataclass_params__) == repr(theirs.__dataclass_params__)
    assert (ours.__hash__ is None) == (theirs.__hash__ is None)
    assert ours.__repr__.__qualname__.endswith(".__repr__")


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_same_behaviour(name: str, data: st.DataObject) -> None:
    ours, theirs = OURS[name], THEIRS[name]
    fields = _fields(ours)
    n = data.draw(st.integers(_required(ours), len(fields)))
    args = tuple(data.draw(values) for _ in range(n))
    other = tuple(data.draw(st.sampled_from([*args, *data.draw(st.lists(values, max_size=2))])) for _ in range(n))
    a, b = _outcome(ours, args), _outcome(theirs, args)
    if isinstance(b, tuple):  # __post_init__ refused: the same error
        assert a == b
        return
    if theirs.__repr__ is not object.__repr__:
        assert repr(a) == repr(b)
    assert [getattr(a, f.name) for f in fields] == [getattr(b, f.name) for f in fields] or any(
        isinstance(v, float) and math.isnan(v) for v in args
    )
    a2, b2 = _outcome(ours, other), _outcome(theirs, other)
    if not isinstance(b2, tuple):
        assert (a == a2) == (b == b2)
        assert (a != a2) == (b != b2)
        assert (a == a) == (b == b)
    assert (a == args) == (b == args)  # another class: NotImplemented, then identity
    assert (ours.__hash__ is object.__hash__) == (theirs.__hash__ is object.__hash__)
    if theirs.__hash__ not in (None, object.__hash__):
        try:
            expected: Any = hash(b)
        except TypeError as exc:
            with pytest.raises(TypeError, match=str(exc).split("'")[0]):
                hash(a)
        else:
            assert hash(a) == expected
    for f in fields:
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot assign to field '{f.name}'"):
            setattr(a, f.name, 1)
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot delete field '{f.name}'"):
            delattr(a, f.name)
    assert a.__getstate__() == b.__getstate__()  # type: ignore[attr-defined]
    assert copy.copy(a).__getstate__() == a.__getstate__()  # type: ignore[attr-defined]
    assert copy.deepcopy(a).__getstate__() == copy.deepcopy(b).__getstate__()  # type: ignore[attr-defined]
    if fields:
        changed = {fields[0].name: 9}
        assert dataclasses.replace(a, **changed).__getstate__() == dataclasses.replace(b, **changed).__getstate__()
    assert dataclasses.asdict(a) == dataclasses.asdict(b) or any(isinstance(v, float) and math.isnan(v) for v in args)


def test_a_field_that_is_not_a_field_is_frozen_too() -> None:
    a = OURS["Plain"](1)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'other'"):
        a.other = 1  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'other'"):
        del a.other  # type: ignore[attr-defined]


def test_a_recursive_repr_ends() -> None:
    for make in (OURS, THEIRS):
        box: list[Any] = []
        a = make["One"](box)
        box.append(a)
        assert repr(a).endswith("One(a=[...])")


def test_a_subclass_made_by_dataclasses_of_a_class_made_here() -> None:
    @dataclasses.dataclass(frozen=True)
    class Child(OURS["Plain"]):  # type: ignore[misc, valid-type]
        h: int = 1

    child = Child(2)
    assert (
        repr(child)
        == "test_a_subclass_made_by_dataclasses_of_a_class_made_here.<locals>.Child(a=2, b='x', c=(), e=None, f=None, h=1)"
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        child.h = 3  # type: ignore[misc]


def test_pickles_at_module_level() -> None:
    from loopctl.response import Usage  # a class of loopctl made here

    usage = Usage(1, 2, 3, None, 5, 6)
    assert pickle.loads(pickle.dumps(usage)) == usage
    assert _made_by_us(Usage)


def test_what_it_does_not_handle_is_passed_on() -> None:
    @dataclass(frozen=True, slots=True)
    class KeywordOnly:
        a: int = dataclasses.field(kw_only=True)
        b: int = dataclasses.field(default=2, init=False)

    @dataclass(frozen=True, slots=True)
    class WithInitVar:
        a: int
        scale: dataclasses.InitVar[int] = 1

        def __post_init__(self, scale: int) -> None:
            object.__setattr__(self, "a", self.a * scale)

    @dataclass(frozen=True, slots=True)
    class KeywordOnlyChild(KeywordOnly):
        c: int = 0

    assert KeywordOnly(a=1) == KeywordOnly(a=1) and KeywordOnly(a=1).b == 2
    assert WithInitVar(2, 3).a == 6
    assert KeywordOnlyChild(a=1, c=2).c == 2
    assert not any(_made_by_us(c) for c in (KeywordOnly, WithInitVar, KeywordOnlyChild))
    with pytest.raises(TypeError):
        KeywordOnly(1)  # type: ignore[misc]

    with pytest.raises(TypeError, match="__setattr__"):

        @dataclass(frozen=True, slots=True)
        class Sets:
            a: int

            def __setattr__(self, name: str, value: Any) -> None:
                pass

    @dataclass(slots=True)
    class Mutable:  # not frozen: dataclasses' own
        a: int

    m = Mutable(1)
    m.a = 2
    assert m == Mutable(2) and not _made_by_us(Mutable)

    @dataclass(frozen=True, slots=True, order=True)
    class Ordered:
        a: int

    assert Ordered(1) < Ordered(2) and not _made_by_us(Ordered)


def _loopctl_classes() -> list[type]:
    """Every class of loopctl's modules made on the fast path (each module imported)."""
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(loopctl.__path__, "loopctl."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional dependency missing here
            continue
        for obj in vars(module).values():
            if isinstance(obj, type) and obj.__module__ == info.name and _made_by_us(obj):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


LOOPCTL = _loopctl_classes()


def test_loopctl_makes_its_frozen_classes_here() -> None:
    assert len(LOOPCTL) > 100
    names = {c.__name__ for c in LOOPCTL}
    assert {"Turn", "ToolCallRecord", "Usage", "ModelRequest", "RunStarted", "CallLLM"} <= names


def _own(fn: Any) -> bool:
    """Whether ``fn`` was written in the class body (not generated by dataclasses or by loopctl._frozen)."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    return code is not None and code.co_filename != "<string>" and not code.co_filename.endswith("_frozen.py")


def _twin(cls: type) -> type:
    """A class made by ``dataclasses`` from ``cls``'s fields and the methods its body wrote."""
    namespace = {
        name: cls.__dict__[name]
        for name in ("__post_init__", "__init__", "__repr__", "__eq__", "__hash__")
        if name in cls.__dict__ and _own(cls.__dict__[name])
    }
    if "__post_init__" not in namespace and hasattr(cls, "__post_init__"):
        namespace["__post_init__"] = cls.__post_init__
    fields = [
        (
            f.name,
            f.type,
            dataclasses.field(
                default=f.default, default_factory=f.default_factory, repr=f.repr, compare=f.compare, hash=f.hash
            ),
        )
        for f in _fields(cls)
    ]
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    return dataclasses.make_dataclass(
        cls.__qualname__, fields, namespace=namespace, frozen=True, slots=True, init=params.init
    )


@pytest.mark.parametrize("cls", LOOPCTL, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_each_loopctl_class_against_its_twin(cls: type) -> None:
    twin = _twin(cls)
    assert str(inspect.signature(cls)) == str(inspect.signature(twin))
    assert cls.__init__.__annotations__ == twin.__init__.__annotations__
    assert cls.__dataclass_params__.frozen and cls.__dataclass_params__.eq  # type: ignore[attr-defined]
    # Built from the same values (any value fits a slot; a __post_init__ that checks refuses both alike).
    fields = _fields(cls)
    args = tuple(range(len(fields)))
    a, b = _outcome(cls, args), _outcome(twin, args)
    if isinstance(b, tuple) or isinstance(a, tuple):
        assert type(a) is type(b)
        return
    assert repr(a) == repr(b)
    assert hash(a) == hash(b)
    assert (a == cls(*args) and a != cls(*reversed(args))) or len(set(args)) < 2 or not any(f.compare for f in fields)
    assert a.__getstate__() == b.__getstate__()


def test_the_fast_path_saves_the_compiles() -> None:
    """The count this exists for: ``exec`` calls while the CLI's run command and the engine are imported."""
    code = (
        "import builtins, sys\n"
        "n = [0]\n"
        "def hook(event, args):\n"
        "    if event == 'exec': n[0] += 1\n"
        "sys.addaudithook(hook)\n"
        "import loopctl.cli.run, loopctl.engine\n"
        "print(n[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # Modules' and libraries' included: 1,149 with dataclasses' methods, 735 with these, 601 with each shape of
    # __init__ compiled once (Python 3.11).
    assert int(out) < 650


_COUNTS: list[int] = []  # the count of the compiles of the _compiles call under way, while one is


def _count(event: str, args: tuple[Any, ...]) -> None:
    if _COUNTS and event in ("compile", "exec"):
        _COUNTS[-1] += 1


def _compiles(make: Callable[[], Any]) -> tuple[Any, int]:
    """What ``make()`` returns, and how many times it compiled or ran source text."""
    if _count not in _HOOKED:  # an audit hook cannot be removed: added once, it counts only inside this call
        sys.addaudithook(_count)
        _HOOKED.append(_count)
    _COUNTS.append(0)
    try:
        made = make()
    finally:
        count = _COUNTS.pop()
    return made, count


_HOOKED: list[Callable[[str, tuple[Any, ...]], None]] = []


def test_classes_of_one_shape_share_the_compiled_init_under_their_own_names() -> None:
    # The __init__ is compiled once per shape (how many fields, which have a default factory, a __post_init__)
    # and given each class's names, defaults and setters (docs/performance.md, section 12).
    def shaped(names: tuple[str, str, str, str], default: Any) -> type[Any]:
        a, b, c, d = names
        namespace: dict[str, Any] = {
            "__annotations__": {a: "int", b: "str", c: "list[int]", d: "Any"},
            c: dataclasses.field(default_factory=lambda: [9]),
            d: default,
            "__post_init__": lambda self: self.seen.append(getattr(self, a)),
            "seen": [],
            "__module__": __name__,
        }
        return dataclass(frozen=True, slots=True)(type("Shaped_" + a, (), namespace))

    first, compiled = _compiles(lambda: shaped(("q1", "q2", "q3", "q4"), 0.5))
    second, again = _compiles(lambda: shaped(("alpha", "beta", "gamma", "delta"), "d"))
    assert compiled >= 1 and again == 0
    made = second(beta="x", alpha=1)
    assert (made.alpha, made.beta, made.gamma, made.delta) == (1, "x", [9], "d")
    assert second.seen == [1] and first(2, "y", [3]).q3 == [3] and first.seen == [2]
    assert str(inspect.signature(second)) == (
        "(alpha: 'int', beta: 'str', gamma: 'list[int]' = <factory>, delta: 'Any' = 'd') -> None"
    )
    with pytest.raises(TypeError, match=r"Shaped_alpha.__init__\(\) missing 1 required positional argument: 'beta'"):
        second(1)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'q1'"):
        second(1, "x", q1=2)
    assert second.__init__.__globals__ is sys.modules[__name__].__dict__


@pytest.mark.parametrize("kind", ["made", "hot", "own init"])
def test_a_field_without_a_default_after_one_with_is_refused_as_dataclasses_refuses_it(kind: str) -> None:
    """The ``TypeError`` dataclasses raises, with its message (not a ``SyntaxError`` from compiling the
    ``__init__``), after a default value or factory: the ``__init__`` made, made ``hot``, or the class's own."""
    errors: list[tuple[type[BaseException], str]] = []
    for make in BOTH:
        with pytest.raises(Exception) as caught:  # the two are compared below

            @make(frozen=True, slots=True)
            @(hot if kind == "hot" and make is dataclass else (lambda c: c))
            class Late:
                a: int
                b: list[int] = dataclasses.field(default_factory=list)
                c: int = 1
                d: int  # type: ignore[misc]

                if kind == "own init":

                    def __init__(self) -> None:
                        pass

        errors.append((caught.type, str(caught.value)))
    assert errors[0] == errors[1]
    late = "non-default argument 'd' follows default argument"
    assert errors[0] == (TypeError, late + (" 'c'" if sys.version_info >= (3, 13) else ""))


def test_a_class_with_init_false_may_have_a_field_without_a_default_after_one_with() -> None:
    """As dataclasses: no ``__init__``, no order to keep."""
    for make in BOTH:

        @make(frozen=True, slots=True, init=False)
        class Late:
            a: int = 1
            b: int  # type: ignore[misc]

        assert [f.name for f in dataclasses.fields(Late)] == ["a", "b"]


def test_the_init_annotations_resolve_in_the_class_module() -> None:
    """``typing.get_type_hints`` of a made ``__init__`` reads its names in the class's module, as it does for
    the ``__init__`` dataclasses writes (NameError before: the function's globals were its own namespace)."""
    import typing

    from loopctl.engine.run import ToolCallRecord, Turn
    from loopctl.providers.base import ModelRequest

    for cls in (Turn, ToolCallRecord, ModelRequest):
        assert cls.__init__.__globals__ is sys.modules[cls.__module__].__dict__
        hints = typing.get_type_hints(cls.__init__)
        assert hints["return"] is type(None)
        assert set(hints) == {f.name for f in _fields(cls)} | {"return"}


@dataclasses.dataclass(frozen=True)
class _Child(OURS["Plain"]):  # type: ignore[misc, valid-type]
    """A subclass made by dataclasses, without slots, of a class made here (at module level: pickled)."""

    h: int = 1


def test_a_subclass_made_by_dataclasses_keeps_its_own_fields_when_copied_or_pickled() -> None:
    """The state of a subclass that inherits the pickling pair is every field of its class, as with
    dataclasses' own pair (before: only the base's fields, so the copy's ``h`` was the class default, 1)."""
    child = _Child(2, "y", h=5)
    assert child.__getstate__() == [2, "y", (), 0.0, None, None, 5]  # type: ignore[attr-defined]
    for made in (copy.copy(child), copy.deepcopy(child), pickle.loads(pickle.dumps(child))):
        assert made.h == 5 and made.b == "y"
        assert made == child


@pytest.mark.parametrize("make", BOTH, ids=["ours", "dataclasses"])
def test_fields_named_as_the_init_names_its_own(make: Decorator) -> None:
    """A field called ``self``, or as the names the made ``__init__`` used (a SyntaxError, and a factory
    called over the value given, before)."""

    @make(frozen=True, slots=True)
    class Named:
        self: int
        _set_self: int = 2
        _FACTORY: list[int] = dataclasses.field(default_factory=list)
        _factory__FACTORY: int = 4

        def __post_init__(self) -> None:
            self._FACTORY.append(self.self)

    named = Named(1, 3, [7], 5)
    assert (named.self, named._set_self, named._FACTORY, named._factory__FACTORY) == (1, 3, [7, 1], 5)
    assert Named(self=0)._FACTORY == [0]
    assert (
        str(inspect.signature(Named))
        == "(self: 'int', _set_self: 'int' = 2, _FACTORY: 'list[int]' = <factory>, _factory__FACTORY: 'int' = 4) -> None"
    )


def test_a_class_without_a_docstring_gets_dataclasses_one() -> None:
    """``Name(signature)``, as dataclasses writes it (before: ``Plain()``, and ``Sub``'s named only its base's
    fields, as dataclasses had read the signature before the ``__init__`` was made)."""
    for made in (OURS, THEIRS):
        assert made["Plain"].__doc__ == (
            "Plain(a: 'int', b: 'str' = 'x', c: 'tuple[int, ...]' = <factory>, d: 'float' = 0.0, e: 'Any' = None,"
            " f: 'Any' = None)"
        )
        assert made["Sub"].__doc__ == made["Plain"].__doc__.replace("Plain", "Sub")[:-1] + ", g: 'int' = 7)"
    from loopctl.response import Usage

    assert Usage.__doc__ is not None and not Usage.__doc__.startswith("Usage(")  # its own, kept


def test_a_class_without_a_docstring_is_documented_without_reading_a_signature_from_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # dataclasses would write the docstring from the signature the class had before its __init__ was made
    # (object's, read from its text by tokenize, whose first use compiles a large pattern: docs/performance.md,
    # section 12), which this module then replaces anyway.
    read: list[str] = []
    from_text = inspect._signature_fromstr  # type: ignore[attr-defined]

    def reading(cls: Any, obj: Any, s: str, *args: Any) -> Any:
        read.append(s)
        return from_text(cls, obj, s, *args)

    monkeypatch.setattr(inspect, "_signature_fromstr", reading)

    @dataclass(frozen=True, slots=True)
    class Point:
        x: int
        y: int = 0

    assert Point.__doc__ == "Point(x: 'int', y: 'int' = 0)"
    assert read == []


@pytest.mark.parametrize("make", BOTH, ids=["ours", "dataclasses"])
def test_equality_of_a_nan_field_is_this_pythons(make: Decorator) -> None:
    """Two instances holding the same NaN: equal up to 3.12 (tuples compared, identity first), not from 3.13
    (fields compared one by one); an instance is always equal to itself. The same for both makers."""

    @make(frozen=True, slots=True)
    class Nan:
        a: float = math.nan
        b: int = 0

    one, two = Nan(), Nan()
    assert one == one
    assert (one == two) is (sys.version_info < (3, 13))
    assert (one != two) is (sys.version_info >= (3, 13))
    assert Nan(1.0, 1) != Nan(1.0, 2)


@pytest.mark.parametrize("make", BOTH, ids=["ours", "dataclasses"])
def test_the_methods_made_implement_an_abstract_base_s(make: Decorator) -> None:
    """An ABC base's abstract ``__repr__`` and ``__hash__`` are implemented by the made ones (before: the
    class stayed abstract, as dataclasses had updated its abstract methods before they were set)."""

    class Shape(abc.ABC):
        @abc.abstractmethod
        def __repr__(self) -> str: ...

        @abc.abstractmethod
        def __hash__(self) -> int: ...

        @abc.abstractmethod
        def area(self) -> int: ...

    @make(frozen=True, slots=True)
    class Square(Shape):
        side: int

        def area(self) -> int:
            return self.side**2

    assert Square.__abstractmethods__ == frozenset()
    assert repr(Square(2)).endswith("Square(side=2)") and hash(Square(2)) == hash((2,))

    @make(frozen=True, slots=True)
    class Partial(Shape):
        side: int

    assert Partial.__abstractmethods__ == frozenset({"area"})


@pytest.mark.parametrize("make", BOTH, ids=["ours", "dataclasses"])
def test_init_var_and_kw_only_under_another_name(make: Decorator) -> None:
    """``InitVar`` and ``KW_ONLY`` imported under other names (string annotations: this module's
    ``from __future__ import annotations``) are dataclasses' classes (before: a TypeError from the fast path,
    which had looked for their names in the annotations' text)."""

    @make(frozen=True, slots=True)
    class Scaled:
        a: int
        scale: Scale[int] = 1

        def __post_init__(self, scale: int) -> None:
            object.__setattr__(self, "a", self.a * scale)

    @make(frozen=True, slots=True)
    class Keywords:
        a: int
        _: KeywordsAfter
        b: int = 0

    assert Scaled(2, 3).a == 6 and [f.name for f in _fields(Scaled)] == ["a"]
    assert Keywords(1, b=2).b == 2
    with pytest.raises(TypeError):
        Keywords(1, 2)  # type: ignore[misc]


def _twinned(cls: type) -> bool:
    return "__dataclass_twin__" in cls.__init__.__code__.co_freevars  # type: ignore[misc]


def test_a_hot_class_is_made_through_its_twin() -> None:
    """A class marked ``hot`` sets its slots on an instance of its twin (the same slots, no frozen
    ``__setattr__``), then gives it its class: the instance is of the class, frozen, with the values given; an
    instance of a subclass keeps its own class (its slots set through their descriptors); a failing default
    factory fails the call; a class with a ``__weakref__`` slot or a base of its own keeps its descriptors."""
    import weakref

    assert _twinned(OURS["HotInner"]) and _twinned(OURS["HotOuter"])
    assert not _twinned(OURS["Plain"])  # not marked: the shorter __init__
    assert not _twinned(THEIRS["HotInner"]) and not _twinned(THEIRS["HotOuter"])  # dataclasses' own, untouched
    for cls in (OURS["HotInner"], OURS["HotOuter"]):
        assert str(inspect.signature(cls)) == str(inspect.signature(THEIRS[cls.__name__]))

    @dataclass(frozen=True, slots=True)
    @hot
    class Kinds:
        type: str
        items: list[int] = dataclasses.field(default_factory=list)
        n: int = 3

        def __post_init__(self) -> None:
            self.items.append(self.n)

    class Loose(Kinds):
        __slots__ = ()

    for cls in (Kinds, Loose):
        made = cls("a", n=4)
        assert type(made) is cls
        assert (made.type, made.items, made.n) == ("a", [4], 4)
        with pytest.raises(dataclasses.FrozenInstanceError):
            made.n = 5  # type: ignore[misc]

    def refuse() -> list[int]:
        raise RuntimeError("no list")

    @dataclass(frozen=True, slots=True)
    @hot
    class Fails:
        items: list[int] = dataclasses.field(default_factory=refuse)

    with pytest.raises(RuntimeError, match="no list"):
        Fails()
    assert Fails([1]).items == [1]

    @dataclass(frozen=True, slots=True, weakref_slot=True)
    @hot
    class Referenced:  # CPython refuses __class__ assignment between two classes with a __weakref__ slot
        a: int

    @dataclass(frozen=True, slots=True)
    @hot
    class Derived(Kinds):
        m: int = 0

    assert not _twinned(Referenced) and not _twinned(Derived)
    made_ref = Referenced(1)
    assert weakref.ref(made_ref)() is made_ref
    assert Derived("b").m == 0


def test_hot_over_dataclass_is_refused() -> None:
    """``hot`` marks a class for ``dataclass`` to make; over a class made already it would do nothing, so it
    refuses."""

    @dataclass(frozen=True, slots=True)
    class Made:
        a: int

    with pytest.raises(TypeError, match=r"hot goes under @dataclass, not over it: .*Made is made already"):
        hot(Made)


def test_the_classes_a_turn_makes_are_hot() -> None:
    from loopctl.engine.limits import RunUsage
    from loopctl.engine.machine import CallTools
    from loopctl.engine.run import ModelReply, ToolCallRecord, Turn
    from loopctl.providers.base import ModelRequest
    from loopctl.response import ModelResponse, Usage

    for cls in (RunUsage, CallTools, ModelReply, ToolCallRecord, Turn, ModelRequest, ModelResponse, Usage):
        assert _twinned(cls), cls
        assert _made_by_us(cls)
