"""Every public function and class of loopctl's public modules (and each class's public methods and
``__init__``) gives its type hints with ``typing.get_type_hints`` in a fresh process: a name an annotation uses
is defined when the annotation is read, even if the module imports it only for type checking or loads it on
first use (``loopctl.transport.from_string`` named ``Client``, which ``loopctl.transport`` defines only once
``loopctl.transport.Client`` has been read: NameError in a fresh process)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_PROBE = r"""
import importlib, inspect, json, pkgutil, sys, typing

import loopctl

names = ["loopctl"] + [
    m.name for m in pkgutil.walk_packages(loopctl.__path__, "loopctl.")
    if not any(part.startswith("_") for part in m.name.split("."))
]
modules = [importlib.import_module(name) for name in names]

# What to check: the module's own functions and classes, each class's public methods and __init__.
targets = []
for module in modules:
    for attribute, obj in list(vars(module).items()):
        if attribute.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        targets.append((f"{module.__name__}.{attribute}", obj))
        if inspect.isclass(obj):
            for name, member in vars(obj).items():
                if name.startswith("_") and name not in ("__init__", "__call__"):
                    continue
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                elif isinstance(member, property):
                    member = member.fget
                if inspect.isfunction(member):
                    targets.append((f"{module.__name__}.{attribute}.{name}", member))

# A fresh process: the names a package loads on first use (its module __getattr__) are taken out of its
# namespace again, whatever importing the other modules read of them.
for module in modules:
    lazy = vars(module).get("__getattr__")
    if lazy is None:
        continue
    for name in [n for n in getattr(module, "__all__", ()) if n in vars(module)]:
        value = vars(module).pop(name)
        try:
            lazy(name)
        except AttributeError:
            vars(module)[name] = value  # defined by the module itself
        else:
            vars(module).pop(name, None)

failed = []
for name, obj in targets:
    try:
        typing.get_type_hints(obj)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print(json.dumps({"checked": len(targets), "failed": failed}))
"""


def test_every_public_function_and_class_gives_its_type_hints_in_a_fresh_process() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120)
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["failed"] == []
    assert report["checked"] > 1000  # the walk found the package's modules


_LAZY_PROBE = r"""
import json, sys, typing
import loopctl.errors
before = "loopctl.engine" in sys.modules
hints = typing.get_type_hints(loopctl.errors.RunError.__init__)
from loopctl.engine.run import Run
print(json.dumps({"before": before, "after": "loopctl.engine.run" in sys.modules, "run": hints["run"].__origin__ is Run}))
"""


def test_a_name_read_only_by_annotations_is_imported_when_they_are_read() -> None:
    # loopctl.errors names the engine's Run in its annotations without importing the engine (a cycle, and the
    # cost of `loopctl --help`): the engine is imported when the hints are read, not before.
    out = subprocess.run([sys.executable, "-c", _LAZY_PROBE], capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(out.stdout) == {"before": False, "after": True, "run": True}


def test_a_lazy_module_names_what_it_lacks() -> None:
    from loopctl._lazy import LazyModule

    lazy = LazyModule("loopctl")
    assert isinstance(lazy.providers.native, LazyModule)  # a submodule, at any depth, imported when read
    native = lazy.providers.native.NativeTool
    from loopctl.providers.native import NativeTool

    assert native is NativeTool
    with pytest.raises(AttributeError, match="no attribute 'no_such_thing'"):
        _ = lazy.no_such_thing
    with pytest.raises(AttributeError):
        _ = lazy.__wrapped__  # a probe for a protocol is not an import
    assert repr(LazyModule("uvicorn")) == "<module 'uvicorn', imported when first used>"
