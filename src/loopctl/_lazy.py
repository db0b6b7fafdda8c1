"""A module imported when an annotation naming it is read, not when the module naming it is imported.

A module that imports a name only for its annotations, under ``if TYPE_CHECKING:`` (to stay cheap to import,
or to break an import cycle, or because the name is in an optional extra), leaves that name undefined at run
time, so ``typing.get_type_hints`` raises ``NameError`` on every function or class that names it. Such a
module binds the name's top package instead, as a :class:`LazyModule`, and its annotations give the name's
full path, ``package.module.Name``: reading it (``typing.get_type_hints`` evaluating the annotation) imports
the module then, and gives the real object::

    if TYPE_CHECKING:
        import loopctl.store
    else:
        loopctl = LazyModule("loopctl")

    def bind(store: loopctl.store.SessionStore) -> None: ...

Nothing here does I/O until an attribute is read.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

__all__ = ["LazyModule"]


class LazyModule:
    """Stands for the module ``name`` until one of its attributes is read: then imports it (an
    ``ImportError`` if it, or an optional extra it needs, is not installed) and returns the attribute. A
    submodule comes back as a ``LazyModule`` of its own, imported or not yet, so that a dotted path reaches
    any depth (``LazyModule("loopctl").providers.native.NativeTool`` imports ``loopctl.providers.native``).
    Raises ``AttributeError`` for a name that is neither an attribute nor a submodule."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):  # copy, pickle and friends probing for protocols: not the module's
            raise AttributeError(attribute)
        import importlib  # here: loopctl.errors binds a LazyModule, and is imported by `loopctl --help`
        module = importlib.import_module(self._name)
        try:
            value = getattr(module, attribute)
        except AttributeError:
            try:
                value = importlib.import_module(f"{self._name}.{attribute}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{self._name}.{attribute}":
                    raise
                raise AttributeError(f"module {self._name!r} has no attribute {attribute!r}") from None
        if isinstance(value, ModuleType) and value.__name__ == f"{self._name}.{attribute}":
            return LazyModule(value.__name__)  # its own submodules may not be imported yet
        return value

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported when first used>"
