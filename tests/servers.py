"""Server processes the tests start, one per pytest-xdist worker (see ``tests/conftest.py``): a free port of
127.0.0.1, a process started on it and waited for, and started again on another port when the port was taken
between the check and the server's bind (several workers start servers at once)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest


def free_port() -> int:
    """A TCP port of 127.0.0.1 nothing listens on now (another process may take it before it is used:
    :class:`ServerProcess` retries)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def require_program(name: str) -> str:
    """The path of the program ``name``. When it is missing the test fails in CI (``CI=true``: ``make.py test``
    installs it, from its ``SYSTEM_TOOLS`` table) and is skipped elsewhere, saying what to install."""
    found = shutil.which(name)
    if found is not None:
        return found
    message = f"{name} is not installed (python3 make.py test installs it as root; see SYSTEM_TOOLS in make.py)"
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


class ServerProcess:
    """``command(port)`` run with its output in ``log``, ready once ``127.0.0.1:port`` accepts a connection,
    and so does each port of ``other_ports()`` (the other ports the last ``command`` call gave the process:
    a server that listens on its first port, then fails to bind another, exits after looking ready). A process
    that exits before (a port taken meanwhile, most often) is started again on new ports, up to ``attempts``
    times; then, or after ``timeout`` seconds, ``RuntimeError`` with the log's end."""

    def __init__(
        self,
        command: Callable[[int], list[str]],
        log: Path,
        *,
        timeout: float = 30.0,
        attempts: int = 3,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        other_ports: Callable[[], Sequence[int]] = tuple,
    ) -> None:
        self.log = log
        self._other_ports = other_ports
        for attempt in range(1, attempts + 1):
            self.port = free_port()
            with log.open("ab") as out:
                self.proc = subprocess.Popen(command(self.port), stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
            if self._wait_ready(timeout):
                return
            if self.proc.poll() is None:  # alive but not listening in time: not a port clash
                self.stop()
                raise RuntimeError(
                    f"{command(self.port)[0]} did not listen on {self.port} in {timeout} s:\n{self.tail()}"
                )
            if attempt == attempts:
                raise RuntimeError(f"{command(self.port)[0]} exited ({self.proc.returncode}):\n{self.tail()}")

    @property
    def address(self) -> str:
        """``127.0.0.1:port``."""
        return f"127.0.0.1:{self.port}"

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        waiting = [self.port, *self._other_ports()]
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", waiting[0]), timeout=0.2):
                    waiting.pop(0)
                    if not waiting:
                        return True
            except OSError:
                time.sleep(0.02)
        return False

    def tail(self, chars: int = 3000) -> str:
        """The end of the server's log."""
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def stop(self) -> None:
        """SIGKILL the process and reap it (test servers keep nothing worth a graceful stop)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
