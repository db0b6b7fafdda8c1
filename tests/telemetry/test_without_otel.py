"""Runs without OpenTelemetry: ``import loopctl`` never imports it, and with the package hidden (a subprocess
whose import system refuses ``opentelemetry``) ``OTelObserver`` warns and a run works unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HIDE = """
import sys

class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Hide())
"""


def python(code: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_import_loopctl_and_its_engine_never_import_opentelemetry() -> None:
    out = python(
        """
        import json, sys
        import loopctl, loopctl.engine, loopctl.tool
        print(json.dumps({"otel": sorted(m for m in sys.modules if m.startswith("opentelemetry"))}))
        """
    )
    assert out == {"otel": []}


def test_a_run_with_opentelemetry_not_installed_works_and_the_observer_warns() -> None:
    out = python(
        HIDE
        + """
import json, warnings
try:
    import opentelemetry  # noqa: F401
    hidden = False
except ImportError:
    hidden = True
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from loopctl.telemetry import OTelObserver
    observer = OTelObserver(capture_content=True, agent_name="a")
from loopctl.engine import BareLoop
from loopctl.message import Message, MessagePart, Role
from loopctl.testing import ScriptedClient
from loopctl.tool import tool

@tool
async def add(a: int, b: int) -> str:
    '''Add.'''
    return str(a + b)

script = [Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "add", {"a": 2, "b": 40})]), "42"]
run = BareLoop(ScriptedClient(script), [add], observers=[observer]).run_sync("2 + 40?")
print(json.dumps({
    "hidden": hidden,
    "enabled": observer.enabled,
    "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
    "outcome": run.outcome.kind.value,
    "output": run.output,
    "otel": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
}))
"""
    )
    assert out == {
        "hidden": True,
        "enabled": False,
        "warnings": [
            "RuntimeWarning: opentelemetry-api is not installed, so OTelObserver records nothing "
            "(pip install 'pyloopctl[otel]')"
        ],
        "outcome": "completed",
        "output": "42",
        "otel": [],
    }
