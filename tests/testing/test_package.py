"""``loopctl.testing`` loads each name's module when the name is first used (PEP 562): the demo run imports
the fake server without the scripted clients and ``TestModel`` (docs/performance.md, section 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import loopctl.testing as testing


def _fresh(code: str) -> list[str]:
    probe = f"import json, sys\n{code}\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('loopctl'))))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return list(json.loads(out.splitlines()[-1]))


def test_importing_the_package_loads_none_of_its_modules() -> None:
    loaded = _fresh("import loopctl.testing")
    assert not [m for m in loaded if m.startswith("loopctl.testing.")]


def test_a_name_loads_only_its_own_module() -> None:
    loaded = _fresh("from loopctl.testing import FakeProviderServer")
    assert "loopctl.testing.server" in loaded
    assert "loopctl.testing.models" not in loaded


def test_every_listed_name_is_the_one_its_module_defines() -> None:
    import importlib

    for name in testing.__all__:
        module = importlib.import_module(testing._MODULES[name])
        assert getattr(testing, name) is getattr(module, name)
    assert sorted(testing._MODULES) == sorted(testing.__all__)
    assert set(testing.__all__) <= set(dir(testing))
    namespace: dict[str, object] = {}
    exec("from loopctl.testing import *", namespace)  # the star import is what is tested
    assert {name for name in namespace if not name.startswith("__")} == set(testing.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    missing = "Nope"  # a name mypy would refuse as an attribute
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        getattr(testing, missing)
