"""A feature whose extra is not installed says which extra to install (``pip install 'pyloopctl[...]'``),
rather than a bare ``No module named ...`` from deep inside loopctl."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = [
    # blocked modules, the code, the message it must raise
    ("mcp", "from loopctl.mcp import MCPServerStdio", "loopctl.mcp needs the MCP SDK: pip install 'pyloopctl[mcp]'"),
    ("a2a", "from loopctl.a2a import A2AAgent", "loopctl.a2a needs the A2A SDK: pip install 'pyloopctl[a2a]'"),
    (
        "starlette,ag_ui",
        "from loopctl import Agent; from loopctl.testing import TestModel; Agent(TestModel()).to_ag_ui()",
        "an AG-UI app (agent.to_ag_ui()) needs the [web] extra: pip install 'pyloopctl[web]' "
        "(not installed: starlette, ag_ui)",
    ),
    (
        "starlette",
        "from loopctl import Agent; from loopctl.testing import TestModel; Agent(TestModel()).to_ai_sdk()",
        "an AI SDK app (agent.to_ai_sdk()) needs the [web] extra: pip install 'pyloopctl[web]' "
        "(not installed: starlette)",
    ),
]


@pytest.mark.parametrize(("blocked", "code", "message"), CASES)
def test_a_missing_extra_is_named(blocked: str, code: str, message: str) -> None:
    # Before: "No module named 'mcp'" / "'a2a'" at import, and to_ai_sdk() made an app that failed at its first
    # request. A module set to None in sys.modules cannot be imported: the package as if not installed.
    script = (
        "import sys\n"
        f"for name in {blocked.split(',')!r}: sys.modules[name] = None\n"
        "try:\n"
        f"    {code}\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"ImportError {message}"), done.stdout
