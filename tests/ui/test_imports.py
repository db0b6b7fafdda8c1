"""``import loopctl`` stays cheap: nothing of ``loopctl.ui``, Starlette or the protocol packages is imported
until an app is made, and ``loopctl --help`` imports none of it either."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("loopctl.ui", "starlette", "ag_ui", "uvicorn", "opentelemetry.sdk")


def imported_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def test_import_loopctl_and_the_agent_import_no_ui() -> None:
    mods = imported_after("import loopctl\nfrom loopctl import Agent\nAgent('openai:gpt-4o').to_ai_sdk")
    assert not {m for m in mods if m.startswith(HEAVY)}


def test_the_cli_imports_no_ui_until_web_runs() -> None:
    mods = imported_after("import loopctl.cli")
    assert not {m for m in mods if m.startswith(HEAVY)}


def test_the_apps_import_their_libraries() -> None:
    code = (
        "from loopctl import Agent\nfrom loopctl.testing import ScriptedClient\n"
        "a = Agent(ScriptedClient(['x']))\na.to_ai_sdk()\na.to_ag_ui()"
    )
    mods = imported_after(code)
    assert {"ag_ui", "loopctl.ui.ai_sdk", "loopctl.ui.ag_ui"} <= mods  # Starlette: at the first request
