"""The MCP reference servers (npm packages, ``tests/mcp/reference/package-lock.json``), as loopctl servers.

``python3 make.py test`` installs Node.js (apt-get, when missing) and the servers (``npm ci`` into
``.loopctl/mcp-servers``) before pytest runs; when the tests run on their own, the first test that needs them
installs them, under a file lock so that parallel workers install once. Without Node.js the tests that need
them fail, saying why (they are never skipped silently).
"""

from __future__ import annotations

import fcntl
import importlib.util
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from loopctl.mcp import MCPServerHTTP, MCPServerStdio

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = ROOT / ".loopctl" / "mcp-servers"
EVERYTHING = INSTALLED / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
LOOPBACK = Path(__file__).with_name("reference") / "loopback.mjs"  # HTTP servers listen on 127.0.0.1 only
START_TIMEOUT = 60.0


def _make() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loopctl_make", ROOT / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def node() -> str:
    """The ``node`` command, with the reference servers installed; fails the test when that cannot be."""
    found = shutil.which("node")
    if found is None:
        pytest.fail("Node.js is not installed: the MCP reference servers cannot run (make.py test installs it)")
    INSTALLED.parent.mkdir(parents=True, exist_ok=True)
    with (INSTALLED.parent / "mcp-servers.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one pytest worker installs, the others wait for it
        if not _make().ensure_mcp_servers(INSTALLED):
            pytest.fail("the MCP reference servers could not be installed with npm ci (see the output above)")
    return found


def everything_stdio(**options: Any) -> MCPServerStdio:
    """The reference "everything" server (``@modelcontextprotocol/server-everything``) over stdio."""
    options.setdefault("connect_timeout", START_TIMEOUT)
    options.setdefault("name", "everything")
    options.setdefault("stderr", subprocess.DEVNULL)  # its start-up banner
    return MCPServerStdio(node(), [str(EVERYTHING), "stdio"], **options)


class EverythingHTTP:
    """The everything server's streamable-HTTP transport as a process of its own, on a free port."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port: int = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> EverythingHTTP:
        self.process = subprocess.Popen(
            [node(), "--import", LOOPBACK.as_uri(), str(EVERYTHING), "streamableHttp"],
            env={"PATH": "/usr/bin:/bin", "PORT": str(self.port)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the everything server exited with {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the everything server did not start listening")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def client(self, **options: Any) -> MCPServerHTTP:
        options.setdefault("connect_timeout", START_TIMEOUT)
        options.setdefault("name", "everything")
        return MCPServerHTTP(self.url, **options)
