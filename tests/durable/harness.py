"""Worker processes for the crash tests: start one, wait for a file it writes, kill it with SIGKILL, start
another; every wait has a deadline, and a worker left running is killed when the test ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

APPS = Path(__file__).parent / "apps"


class Worker:
    """One worker process running ``apps/<script>`` with ``args``; its output goes to ``<workdir>/<label>.log``."""

    def __init__(
        self, script: str, args: list[str], workdir: Path, label: str, env: dict[str, str] | None = None
    ) -> None:
        self.label = label
        self.log = workdir / f"{label}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(APPS / script), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )

    def kill(self) -> None:
        """SIGKILL: no cleanup runs in the worker, as when a machine is lost."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def wait(self, timeout: float) -> int:
        """Wait for the worker to exit by itself; its exit code (fails the test, with its log, on timeout)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"worker {self.label} did not finish in {timeout} s:\n{self.output()}") from None

    def output(self) -> str:
        """What the worker printed."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def wait_for_file(path: Path, timeout: float, *workers: Worker) -> str:
    """The text of ``path`` once it exists; fails (with the workers' logs) after ``timeout`` seconds or when
    a worker exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text()
        for w in workers:
            if w.proc.poll() is not None:
                raise AssertionError(f"worker {w.label} exited ({w.proc.returncode}) before {path.name}:\n{w.output()}")
        time.sleep(0.02)
    logs = "\n".join(f"--- {w.label}\n{w.output()}" for w in workers)
    raise AssertionError(f"{path.name} did not appear in {timeout} s\n{logs}")


def result(workdir: Path, mode: str, worker: Worker, timeout: float = 60) -> dict[str, Any]:
    """The run summary a worker wrote as ``result-<mode>.json`` after exiting 0."""
    code = worker.wait(timeout)
    path = workdir / f"result-{mode}.json"
    assert code == 0 and path.exists(), f"worker {worker.label} exited {code}:\n{worker.output()}"
    value: dict[str, Any] = json.loads(path.read_text())
    return value
