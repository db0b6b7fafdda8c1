"""Without its extra, a durable module says which extra installs it (as ``loopctl.store.postgres`` does),
rather than a bare ``ModuleNotFoundError`` naming the engine's package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The child hides the engine (a None entry in sys.modules makes importing it fail as a missing package does),
# imports the module, and prints the error's type and text.
_CHILD = """
import sys
sys.modules[{blocked!r}] = None
try:
    import {module}
except ImportError as exc:
    print(type(exc).__name__, exc, sep="\\n")
else:
    print("imported")
"""


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("loopctl.durable.dbos", "dbos", "dbos"),
        ("loopctl.durable.temporal", "temporalio", "temporal"),
        ("loopctl.durable.claimcheck", "temporalio", "temporal"),
    ],
)
def test_a_durable_module_without_its_extra_names_the_extra(module: str, blocked: str, extra: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD.format(blocked=blocked, module=module)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    kind, message = done.stdout.splitlines()[:2]
    assert kind == "ImportError"  # not ModuleNotFoundError: the package to install is ours, with the extra
    assert message.startswith(f"{module} needs ")
    hint, cause = message.split(" needs ", 1)[1].split(" (", 1)
    assert hint.endswith(f": pip install 'pyloopctl[{extra}]'")
    assert repr(blocked) in cause or f"import of {blocked} halted" in cause  # what Python said is kept
