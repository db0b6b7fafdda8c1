"""The layout keeps its promise: the codecs import nothing that does I/O, the clients are where the docs say,
and importing loopctl or its codecs loads no HTTP client and no SDK."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import loopctl.providers
import loopctl.providers.clients
import loopctl.transport

PROVIDERS = Path(loopctl.providers.__file__).parent
IO_MODULES = {"httpx", "httpx2", "openai", "anthropic", "google", "socket", "asyncio", "urllib", "http", "ssl",
              "loopctl.transport"}  # fmt: skip


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_codec_modules_import_nothing_that_does_io() -> None:
    checked = []
    for path in sorted(PROVIDERS.glob("*.py")):
        if path.name in ("__init__.py", "clients.py"):  # the lazy names and the old import path of the clients
            continue
        bad = {m for m in imported_modules(path) if m.split(".")[0] in IO_MODULES or m.startswith("loopctl.transport")}
        assert bad == set(), f"{path.name} imports {sorted(bad)}"
        checked.append(path.name)
    assert {"openai_chat.py", "openai_responses.py", "anthropic.py", "gemini.py", "base.py", "sse.py"} <= set(checked)


def test_the_clients_are_the_same_objects_from_every_import_path() -> None:
    for name in ("OpenAIChatClient", "OpenAIResponsesClient", "AnthropicClient", "GeminiClient", "from_string"):
        assert getattr(loopctl.providers, name) is getattr(loopctl.transport, name)
        assert getattr(loopctl.providers.clients, name) is getattr(loopctl.transport, name)
    assert all(hasattr(loopctl.providers, name) for name in loopctl.providers.__all__)


def test_importing_loopctl_and_its_codecs_loads_no_http_client_and_no_sdk() -> None:
    code = (
        "import sys, loopctl, loopctl.providers, loopctl.providers.openai_chat, loopctl.providers.anthropic;"
        "print(sorted(m for m in ('httpx', 'httpx2', 'openai', 'anthropic', 'loopctl.transport') if m in sys.modules));"
        "import loopctl.transport;"
        "print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["[]", "[]"]  # and the transport loads an SDK only when a client is made
