"""Frozen, slotted dataclasses made cheaply: ``dataclass``, a drop-in for ``dataclasses.dataclass``.

``dataclasses`` writes each generated method of a class as source text and compiles it: six ``exec`` calls for
a frozen class (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``), about
half a million instructions each, which made creating loopctl's classes about a fifth of a CLI run's start
(``docs/performance.md``, section 10). ``dataclass`` takes the same arguments and makes the same classes:
for a frozen, slotted class it lets ``dataclasses`` do everything but write those methods (the fields, their
defaults and checks, the slots, ``__match_args__``, ``__dataclass_fields__``, so ``fields``, ``replace`` and
``asdict`` work as before), compiles only the ``__init__`` (once for all the classes of one shape, given each
class's field names: :func:`_init_for`), and gives the class ``__repr__``, ``__eq__``,
``__hash__``, ``__setattr__``, ``__delattr__`` and the pickling pair as closures over its field names, bound
once, which return what the generated ones return (``tests/test_frozen.py`` compares every loopctl class made
this way with a twin made by ``dataclasses``). Any other class is ``dataclasses``' own. Static tools (mypy,
the API reference) see ``dataclasses.dataclass`` itself.

The ``__init__`` sets each field through its slot's descriptor (``Cls.name.__set__``) rather than with
``object.__setattr__(self, name, value)`` as a frozen dataclass's does (a generic attribute lookup per field,
which made building the values of a turn about a fifth of the engine's own cost of a turn:
``docs/performance.md``, section 7), with the same parameters, defaults and default factories, then calls
``__post_init__``. The classes a turn makes are cheaper still (:func:`hot`): an instance of one is made an
instance of its twin class (the same ``__slots__``, no ``__setattr__`` of its own) while its slots are set by
plain assignment, then given its class back (``__class__`` assignment, which CPython allows between classes
of the same layout): about half the cost again (section 11).

One difference from Python 3.11's generated ``__setattr__``: assigning an attribute that is not a field raises
``FrozenInstanceError`` as the documentation says, where 3.11's slotted classes raised ``TypeError`` from
``super()`` (its closure held the class from before the slots were added).

Pure: no I/O.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import inspect
import keyword
import re
import reprlib
import sys
import types
from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

__all__ = ["dataclass"]


class _Factory:
    """The default of a parameter whose field has a ``default_factory`` (as dataclasses' own marker)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def _positional(f: dataclasses.Field[Any]) -> bool:
    """Whether the (pseudo-)field ``f`` is what :func:`_init_for` writes, or takes no part in ``__init__``: an
    ``__init__`` parameter, not keyword-only, not an ``InitVar`` (a ``ClassVar`` pseudo-field passes). dataclasses
    marks a pseudo-field's kind with a private sentinel whose repr is its name."""
    return f.init and f.kw_only is not True and repr(getattr(f, "_field_type", None)) != "_FIELD_INITVAR"


_LEADING_NAME = re.compile(r"\s*(\w+)\s*(?:\[|$)")
"""The name a string annotation starts with when no module is written before it (``IV`` of ``IV[int]``)."""


def _plain(cls: type) -> bool:
    """Whether ``cls``, not yet a dataclass, will have only positional ``__init__`` fields (no ``InitVar``,
    ``KW_ONLY``, ``init=False`` or keyword-only field, its own or a dataclass base's): what :func:`_init_for`
    writes. Read from the annotations and ``field()`` values before dataclasses processes them."""
    for base in cls.__mro__[1:]:
        if not all(_positional(f) for f in getattr(base, "__dataclass_fields__", {}).values()):
            return False
    module = sys.modules.get(cls.__module__)
    namespace = module.__dict__ if module is not None else {}
    for name, annotation in inspect.get_annotations(cls).items():
        text = annotation if isinstance(annotation, str) else repr(annotation)
        if "InitVar" in text or "KW_ONLY" in text:
            return False
        # A string naming them under another name (``from dataclasses import InitVar as IV``, then ``IV[int]``),
        # which dataclasses finds in the class's module as this does.
        leading = _LEADING_NAME.match(text)
        if leading is not None and namespace.get(leading[1]) in (dataclasses.InitVar, dataclasses.KW_ONLY):
            return False
        value = cls.__dict__.get(name)
        if isinstance(value, dataclasses.Field) and (not value.init or value.kw_only is True):
            return False
    return True


def _init_for(cls: type, fields: tuple[dataclasses.Field[Any], ...], *, twin: bool = False) -> Callable[..., None]:
    """The ``__init__`` of the slotted dataclass ``cls``: the parameters, defaults and default factories that
    dataclasses gives it, each slot set through its descriptor, then ``__post_init__`` if the class has one.

    Its code is compiled once per shape (the number of fields, which have a default factory, whether there is a
    ``__post_init__``: :func:`_init_code`) and given the class's field names as its parameters' names; the
    setters and factories are its closure, the defaults its ``__defaults__``, the module's namespace its
    globals, as in the function :func:`_init_from_source` writes (about half a million instructions each, for
    the hundred classes a CLI run makes before its first request: docs/performance.md, section 12). Fields
    whose names the code uses itself, or that are no names a parameter can have, go to
    :func:`_init_from_source` (which fails as before for the last), and so does a class :func:`hot` marked
    (``twin``), whose ``__init__`` builds an instance as one of its twin class. ``fields`` are in an order
    dataclasses accepts (:func:`_dataclass` refuses a field without a default after one with: :func:`_late_default`)."""
    names = [f.name for f in fields]
    defaulted = [f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING for f in fields]
    first_default = defaulted.index(True) if True in defaulted else len(fields)
    if twin or any(n.startswith("__dataclass_") or not n.isidentifier() or keyword.iskeyword(n) for n in names):
        return _init_from_source(cls, fields, twin=twin)
    me = "__dataclass_self__" if "self" in names else "self"
    post_init = hasattr(cls, "__post_init__")
    factories = tuple(f.default_factory is not dataclasses.MISSING for f in fields)
    code = _init_code(factories, post_init).replace(co_varnames=(me, *names))
    closed: dict[str, Any] = {"__dataclass_FACTORY__": _FACTORY}
    for i, f in enumerate(fields):
        closed[f"__dataclass_set_{i}"] = _setter(cls, f.name)
        closed[f"__dataclass_factory_{i}"] = f.default_factory
    defaults = tuple(_FACTORY if f.default is dataclasses.MISSING else f.default for f in fields[first_default:])
    module = sys.modules.get(cls.__module__)
    init: Callable[..., None] = types.FunctionType(
        code,
        module.__dict__ if module is not None else {},
        "__init__",
        defaults or None,
        tuple(types.CellType(closed[name]) for name in code.co_freevars),
    )
    return _named(init, cls, fields)


def _late_default(fields: tuple[dataclasses.Field[Any], ...]) -> TypeError | None:
    """The ``TypeError`` ``dataclasses`` raises for a class with an ``__init__`` (its own or made) whose ``fields``
    (the ``__init__``'s, in order) have one without a default after one with (the message is this Python's:
    3.13 names the field with the default too), not the ``SyntaxError`` that compiling the ``__init__`` would
    raise; ``None`` when there is no such field."""
    seen: dataclasses.Field[Any] | None = None
    for f in fields:
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            seen = f
        elif seen is not None:
            if sys.version_info >= (3, 13):
                return TypeError(f"non-default argument {f.name!r} follows default argument {seen.name!r}")
            return TypeError(f"non-default argument {f.name!r} follows default argument")
    return None


@functools.cache
def _init_code(factories: tuple[bool, ...], post_init: bool) -> types.CodeType:
    """The code of an ``__init__`` of ``len(factories)`` fields (``True``: the field has a default factory),
    calling ``__post_init__`` when ``post_init``, with parameters named ``__dataclass_arg_N`` (renamed by
    :func:`_init_for`) and free variables ``__dataclass_set_N`` (the field's setter), ``__dataclass_factory_N``
    (its factory) and ``__dataclass_FACTORY__`` (the marker of a factory's default)."""
    body: list[str] = []
    free = ["__dataclass_FACTORY__"]
    for i, factory in enumerate(factories):
        free.append(f"__dataclass_set_{i}")
        if factory:
            free.append(f"__dataclass_factory_{i}")
            body.append(
                f"  __dataclass_set_{i}(self, __dataclass_factory_{i}()"
                f" if __dataclass_arg_{i} is __dataclass_FACTORY__ else __dataclass_arg_{i})"
            )
        else:
            body.append(f"  __dataclass_set_{i}(self, __dataclass_arg_{i})")
    if post_init:
        body.append("  self.__post_init__()")
    args = ", ".join(["self", *(f"__dataclass_arg_{i}" for i in range(len(factories)))])
    source = (
        f"def __make_init__({', '.join(free)}):\n"
        f" def __init__({args}):\n" + ("\n".join(body) or "  pass") + "\n return __init__\n"
    )
    made = compile(source, "<string>", "exec")
    outer = next(c for c in made.co_consts if isinstance(c, types.CodeType))
    return next(c for c in outer.co_consts if isinstance(c, types.CodeType))


def _setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    """How ``__init__`` sets the field ``name``: its slot's descriptor's ``__set__``; a field kept in an
    instance dict (a base without slots) is set as dataclasses sets it."""
    slot = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
    return getattr(slot, "__set__", None) or (lambda obj, value, _name=name: object.__setattr__(obj, _name, value))


def _named(init: Callable[..., None], cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> Callable[..., None]:
    """``init`` named and annotated as the ``__init__`` of ``cls`` dataclasses writes."""
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    annotations: dict[str, Any] = {f.name: f.type for f in fields}
    annotations["return"] = None
    init.__annotations__ = annotations
    return init


def _init_from_source(
    cls: type, fields: tuple[dataclasses.Field[Any], ...], *, twin: bool = False
) -> Callable[..., None]:
    """:func:`_init_for`'s ``__init__``, written as source text with the field names and compiled; with ``twin``,
    the one :func:`hot` gives a class whose layout allows it (:func:`_twin`)."""
    # Its other names are of dataclasses' own kind (``__dataclass_...``), not a field's (a field named
    # ``_FACTORY`` took the marker's name before), and ``self`` is renamed when a field is called that.
    namespace: dict[str, Any] = {"__dataclass_FACTORY__": _FACTORY}
    me = "__dataclass_self__" if any(f.name == "self" for f in fields) else "self"
    args: list[str] = []
    body: list[str] = []
    for f in fields:
        name = f.name
        namespace[f"__dataclass_set_{name}"] = _setter(cls, name)
        if f.default is not dataclasses.MISSING:
            namespace[f"__dataclass_default_{name}"] = f.default
            args.append(f"{name}=__dataclass_default_{name}")
            body.append(f"    __dataclass_set_{name}({me}, {name})")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"__dataclass_factory_{name}"] = f.default_factory
            args.append(f"{name}=__dataclass_FACTORY__")
            body.append(
                f"    __dataclass_set_{name}({me}, __dataclass_factory_{name}()"
                f" if {name} is __dataclass_FACTORY__ else {name})"
            )
        else:
            args.append(name)
            body.append(f"    __dataclass_set_{name}({me}, {name})")
    # The twin's maker (``hot``): the class is made on the first instance.
    make_twin = _twin(cls, fields) if twin else None
    if make_twin is not None:
        # An instance of the class itself (not of a subclass, whose type must stay its own) is made as an
        # instance of its twin (the same slots, no frozen __setattr__), whose slots are set by plain
        # assignment, then given its class: about half the cost of a descriptor's ``__set__`` per field. A
        # subclass's instance gets each slot through its descriptor, by one shared function (the source stays
        # about as short as before: compiling it is most of what making the class costs). The default
        # factories run first: nothing can fail while the instance is the twin's.
        setters = tuple(namespace.pop(f"__dataclass_set_{f.name}") for f in fields)
        namespace["__dataclass_cls__"] = cls
        namespace["__dataclass_twin__"] = None
        namespace["__dataclass_make_twin__"] = make_twin
        namespace["__dataclass_object_setattr__"] = object.__setattr__
        namespace["__dataclass_type__"] = type  # a field may be called ``type``
        namespace["__dataclass_set_all__"] = functools.partial(_set_all, setters)
        body = [
            "    nonlocal __dataclass_twin__",
            *(
                f"    {f.name} = __dataclass_factory_{f.name}() if {f.name} is __dataclass_FACTORY__ else {f.name}"
                for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING
            ),
            f"    if __dataclass_type__({me}) is __dataclass_cls__:",
            "        if __dataclass_twin__ is None:",
            "            __dataclass_twin__ = __dataclass_make_twin__()",
            f"        __dataclass_object_setattr__({me}, '__class__', __dataclass_twin__)",
            "        " + "; ".join(f"{me}.{f.name} = {f.name}" for f in fields),
            f"        {me}.__class__ = __dataclass_cls__",
            "    else:",
            f"        __dataclass_set_all__({me}, ({', '.join(f.name for f in fields)},))",
        ]
    if hasattr(cls, "__post_init__"):
        body.append(f"    {me}.__post_init__()")
    # As dataclasses does: the setters, factories and defaults are the closure of a maker function run in the
    # class's module, so that the __init__'s globals are the module's and typing.get_type_hints reads its
    # annotations there (they name the module's imports), as it does the __init__ dataclasses writes.
    source = (
        f"def __make_init__({', '.join(namespace)}):\n"
        f" def __init__({', '.join([me, *args])}):\n"
        + ("\n".join(f" {line}" for line in body) or "     pass")
        + "\n return __init__\n"
    )
    module = sys.modules.get(cls.__module__)
    made: dict[str, Any] = {}
    exec(source, module.__dict__ if module is not None else {}, made)  # the programmer's own field names
    return _named(made["__make_init__"](**namespace), cls, fields)


_C = TypeVar("_C", bound=type)
_HOT: set[str] = set()  # the classes marked by ``hot`` before ``dataclass`` made them (module.qualname)


def hot(cls: _C) -> _C:
    """Mark ``cls`` for the ``__init__`` that builds an instance as one of its twin class (the same slots, no
    frozen ``__setattr__``) and then gives it its class: the same parameters, defaults, factories and
    ``__post_init__``, about half the cost per field of setting each slot through its descriptor
    (``docs/performance.md``, section 11). Applied under ``@dataclass``, which then writes that ``__init__``
    for a frozen, slotted class whose base is ``object`` (any other class it makes as it would unmarked). For
    the classes a turn makes; not every class: that ``__init__``'s source is longer, and compiling it at import
    costs more than most classes ever save. Returns ``cls``; raises ``TypeError`` over ``@dataclass`` (the
    class is made already)."""
    if "__dataclass_fields__" in cls.__dict__:
        raise TypeError(f"hot goes under @dataclass, not over it: {cls.__qualname__} is made already")
    _HOT.add(f"{cls.__module__}.{cls.__qualname__}")
    return cls


def _set_all(setters: tuple[Callable[[Any, Any], None], ...], obj: Any, values: tuple[Any, ...]) -> None:
    """Set each field of ``obj`` through its setter, in order (``__init__`` for an instance of a subclass)."""
    for set_field, value in zip(setters, values, strict=True):
        set_field(obj, value)


def _twin(cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> Callable[[], type] | None:
    """The maker of a class whose instances have the layout of ``cls``'s (its base ``object``, the same
    ``__slots__``) and no ``__setattr__`` of its own, so that an instance of one can be given the other's class
    (``__class__`` assignment checks the layouts match); ``None`` when ``cls`` is not such a class (a base of
    its own, a metaclass, a slot that is no field, a field that ``__init__``'s body could not name so, no
    field)."""
    slots = cls.__dict__.get("__slots__")
    names = [f.name for f in fields]
    if (
        not names
        or cls.__bases__ != (object,)
        or type(cls) is not type
        or type(slots) is not tuple
        or list(slots) != names  # a __weakref__ slot after the fields: CPython refuses the assignment
        or any(not n.isidentifier() or n.startswith("__") for n in names)
    ):
        return None
    return lambda: type(cls.__name__, (object,), {"__slots__": slots, "__module__": cls.__module__, "__doc__": None})


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A function of an object giving the tuple of its attributes ``names`` (``(self.a, self.b)``, as the
    methods dataclasses writes build it), however many there are."""
    if len(names) >= 2:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _methods(cls: type, fields: tuple[dataclasses.Field[Any], ...], *, eq: bool, repr_: bool) -> dict[str, Any]:
    """``__setattr__``, ``__delattr__``, ``__getstate__``, ``__setstate__`` of the frozen, slotted ``cls``,
    and ``__repr__``, ``__eq__`` and ``__hash__`` when asked for: what dataclasses' generated methods do, as
    closures over the field names."""
    names = tuple(f.name for f in fields)
    frozen_names = frozenset(names)
    FrozenInstanceError = dataclasses.FrozenInstanceError  # noqa: N806 - the exception's own name
    owner: type[Any] = cls

    def setattr_(self: Any, name: str, value: Any) -> None:
        if type(self) is owner or name in frozen_names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(owner, self).__setattr__(name, value)

    def delattr_(self: Any, name: str) -> None:
        if type(self) is owner or name in frozen_names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(owner, self).__delattr__(name)

    values = _getter(names)

    # A subclass that inherits these (one made by dataclasses without slots) may have more fields: as
    # dataclasses' own pair, the state is every field of the instance's class.
    def getstate_(self: Any) -> list[Any]:
        if type(self) is owner:
            return list(values(self))
        return [getattr(self, f.name) for f in dataclasses.fields(self)]

    def setstate_(self: Any, state: list[Any]) -> None:
        own = names if type(self) is owner else [f.name for f in dataclasses.fields(self)]
        for name, value in zip(own, state, strict=False):
            object.__setattr__(self, name, value)

    made: dict[str, Any] = {
        "__setattr__": setattr_,
        "__delattr__": delattr_,
        "__getstate__": getstate_,
        "__setstate__": setstate_,
    }
    if repr_:
        shown = tuple(f.name for f in fields if f.repr)

        @reprlib.recursive_repr()
        def repr_fn(self: Any) -> str:
            return f"{self.__class__.__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in shown)})"

        made["__repr__"] = repr_fn
    if eq:
        compared_names = tuple(f.name for f in fields if f.compare)
        compared = _getter(compared_names)

        if sys.version_info >= (3, 13):
            # 3.13's __eq__ is ``self is other or (self.a == other.a and ...)``, no longer a comparison of
            # tuples (which takes a value that is itself as equal: a NaN), and gives the comparison's own result.
            def eq_(self: Any, other: object) -> Any:
                if self is other:
                    return True
                if other.__class__ is self.__class__:
                    result: Any = True
                    for name in compared_names:
                        result = getattr(self, name) == getattr(other, name)
                        if not result:
                            break
                    return result
                return NotImplemented

        else:

            def eq_(self: Any, other: object) -> Any:  # bool, or NotImplemented for another class
                if other.__class__ is self.__class__:
                    return compared(self) == compared(other)
                return NotImplemented

        hashed = _getter(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))

        def hash_(self: Any) -> int:
            return hash(hashed(self))

        made["__eq__"] = eq_
        made["__hash__"] = hash_
    for name, fn in made.items():
        fn.__name__ = name
        fn.__qualname__ = f"{cls.__qualname__}.{name}"
        fn.__module__ = cls.__module__
    return made


def _dataclass(
    cls: type | None = None,
    /,
    *,
    init: bool = True,
    repr: bool = True,  # noqa: A002 - dataclasses' parameter name
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    frozen: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
) -> Any:
    """``dataclasses.dataclass``, the same arguments and results, cheaper for a frozen, slotted class (module
    docstring); anything else is dataclasses' own."""
    options: dict[str, Any] = {
        "init": init,
        "repr": repr,
        "eq": eq,
        "order": order,
        "unsafe_hash": unsafe_hash,
        "frozen": frozen,
        "match_args": match_args,
        "kw_only": kw_only,
        "slots": slots,
        "weakref_slot": weakref_slot,
    }
    if cls is None:
        return functools.partial(_dataclass, **options)
    if not (frozen and slots) or order or unsafe_hash or kw_only or not _plain(cls):
        return dataclasses.dataclass(cls, **options)
    own = cls.__dict__  # what the class body wrote (dataclasses keeps it, and adds nothing it has)
    for name in ("__setattr__", "__delattr__"):
        if name in own:  # dataclasses' own refusal
            raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
    class_hash = own.get("__hash__", dataclasses.MISSING)
    explicit_hash = not (class_hash is dataclasses.MISSING or (class_hash is None and "__eq__" in own))
    documented = bool(cls.__doc__)
    if not documented and init and "__init__" not in own:
        # Written below from the __init__ made here. Without one, dataclasses would write it from the signature of
        # the __init__ the class has now, object's: read from its text by tokenize, whose first use compiles a
        # large pattern (about 8 M instructions, docs/performance.md, section 12).
        type.__setattr__(cls, "__doc__", cls.__name__)
    # A dataclass base makes dataclasses check frozen against frozen: it writes __setattr__ and __delattr__.
    subclass = any(hasattr(base, "__dataclass_fields__") for base in cls.__mro__[1:])
    made: type[Any] = dataclasses.dataclass(
        cls, **{**options, "init": False, "repr": False, "eq": False, "frozen": subclass}
    )
    fields = dataclasses.fields(made)
    if (
        init
        and "__init__" not in own
        and not all(_positional(f) for f in made.__dict__["__dataclass_fields__"].values())
    ):
        raise TypeError(f"{cls.__name__}: a field that _plain did not see (InitVar, init=False or keyword-only)")
    late = _late_default(fields) if init else None
    if late is not None:  # dataclasses refuses such a class even when its body wrote its own __init__
        raise late
    methods = _methods(made, fields, eq=eq, repr_=repr)
    if subclass:
        del methods["__setattr__"], methods["__delattr__"]  # dataclasses wrote them, checks included
    if eq and explicit_hash:
        del methods["__hash__"]
    for name, fn in methods.items():
        if name == "__hash__" or name not in own:  # a body's __hash__ is None when it wrote __eq__ alone
            type.__setattr__(made, name, fn)
    if init and "__init__" not in own:
        twin = f"{made.__module__}.{made.__qualname__}" in _HOT
        type.__setattr__(made, "__init__", _init_for(made, fields, twin=twin))
        if not documented:  # dataclasses wrote the docstring from the __init__ the class had then: its base's
            try:
                text = str(inspect.signature(made)).replace(" -> None", "")
            except (TypeError, ValueError):  # as dataclasses: a signature it cannot read
                text = ""
            type.__setattr__(made, "__doc__", made.__name__ + text)
    params = made.__dict__["__dataclass_params__"]
    params.init, params.repr, params.eq, params.frozen = init, repr, eq, True
    # dataclasses did this before the methods above were set: an abstract __repr__, __eq__ or __hash__ of an ABC
    # base is implemented now.
    abc.update_abstractmethods(made)
    return made


if TYPE_CHECKING:
    from dataclasses import dataclass
else:
    dataclass = _dataclass
