"""A faster ``__init__`` for the frozen, slotted dataclasses a turn makes many of.

The ``__init__`` that ``dataclasses`` writes for a frozen class sets each field with ``object.__setattr__(self,
name, value)``: a generic attribute lookup per field, which made building the values of a turn (its request,
reply, records) about a fifth of the engine's own cost of a turn (``docs/performance.md``, section 7).
:func:`fast_init` gives such a class an ``__init__`` with the same parameters, defaults and default factories
that sets each slot through its own descriptor (``Cls.name.__set__``) and then calls ``__post_init__`` as the
generated one does. The class stays frozen (assignment still raises ``FrozenInstanceError``); only the way
its constructor stores the fields changes (each class it is used on is checked against the ``__init__``
dataclasses wrote, by the tests).

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["dataclass_init", "fast_init"]

_C = TypeVar("_C", bound=type)

_ORIGINAL: dict[type, Callable[..., None]] = {}


class _Factory:
    """The default of a parameter whose field has a ``default_factory`` (as dataclasses' own marker)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def fast_init(cls: _C) -> _C:
    """Give the frozen, slotted dataclass ``cls`` a faster ``__init__`` (module docstring); returns ``cls``.
    Raises ``TypeError`` for a class it does not fit: not a frozen dataclass with slots, or with a field that
    is not an ``__init__`` parameter, keyword-only, or an ``InitVar``."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen dataclass with slots")
    every = cls.__dict__["__dataclass_fields__"]
    fields = dataclasses.fields(cls)
    if len(fields) != len(every) or any(not f.init or f.kw_only for f in fields):
        raise TypeError(f"{cls.__name__} has a field fast_init does not handle (InitVar, init=False, kw_only)")
    namespace: dict[str, Any] = {"_FACTORY": _FACTORY}
    args: list[str] = []
    body: list[str] = []
    for f in fields:
        name = f.name
        namespace[f"_set_{name}"] = cls.__dict__[name].__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{name}"] = f.default
            args.append(f"{name}=_default_{name}")
            body.append(f"    _set_{name}(self, {name})")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{name}"] = f.default_factory
            args.append(f"{name}=_FACTORY")
            body.append(f"    _set_{name}(self, _factory_{name}() if {name} is _FACTORY else {name})")
        else:
            args.append(name)
            body.append(f"    _set_{name}(self, {name})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    # As dataclasses does: the setters, factories and defaults are the closure of a maker function run in the
    # class's module, so that the __init__'s globals are the module's and typing.get_type_hints reads its
    # annotations there (they name the module's imports), as it does the __init__ dataclasses wrote.
    source = (
        f"def __make_init__({', '.join(namespace)}):\n"
        f"  def __init__(self, {', '.join(args)}):\n"
        + ("\n".join(f"  {line}" for line in body) or "      pass")
        + "\n  return __init__\n"
    )
    module = sys.modules.get(cls.__module__)
    made: dict[str, Any] = {}
    exec(source, module.__dict__ if module is not None else {}, made)  # the programmer's own field names
    init = made["__make_init__"](**namespace)
    original = cls.__dict__["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = dict(original.__annotations__)
    init.__doc__ = original.__doc__
    _ORIGINAL[cls] = original
    type.__setattr__(cls, "__init__", init)
    return cls


def dataclass_init(cls: type) -> Callable[..., None]:
    """The ``__init__`` dataclasses wrote for ``cls``, before :func:`fast_init` replaced it (for the tests
    that compare the two)."""
    return _ORIGINAL[cls]
