"""The A2A server the tests talk to: ``loopctl a2a serve --agent tests.mcp.served:agent`` in a real process on
127.0.0.1 (one per module, so per pytest-xdist worker), conversations in a SQLite store of its own."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(process: subprocess.Popen[bytes], port: int) -> None:
    """Wait until the server ``process`` listens on ``port``; ``RuntimeError`` with its stderr if it exits."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the A2A server exited: {process.stderr.read() if process.stderr else b''!r}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("the A2A server did not start listening") from None
            time.sleep(0.05)


@pytest.fixture(scope="module")
def a2a_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    store = tmp_path_factory.mktemp("a2a") / "served.db"
    process = subprocess.Popen(
        [sys.executable, "-m", "loopctl", "a2a", "serve", "--agent", "tests.mcp.served:agent",
         "--port", str(port), "--store", str(store)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_for_port(process, port)
        yield f"http://127.0.0.1:{port}/"
    finally:
        process.kill()
        process.wait(10)
