"""The session file of a ``loopctl run --session FILE`` (the store, ``loopctl.cli.sessions``, is the
default): created exclusively, locked while a run uses it, and saved as the run goes so that a process killed
at any moment leaves a session that resumes with all the work done.

What a kill can lose is what the file did not hold yet. The machine commits a turn's tool results only once
every call of the turn has finished, so :class:`Autosave` saves a *snapshot*: while tools run, the saved
machine holds the model's calls with the results that have finished, and for each call still running (or not
started) an error result saying the run stopped there. It saves when a call that may change something starts
(any tool but the reading file tools: a write, an MCP tool...), so an effect can never have happened without
the session knowing of the call, when any call finishes, when the results
are committed (the next model call starts), after compaction, and when the run ends. Saves are atomic
(``Session.save``): a kill mid-save leaves the previous save.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from loopctl._fs import make_private_folders
from loopctl.engine import (
    CompactionFinished,
    LoopEvent,
    LoopMachine,
    MachinePolicy,
    MachineState,
    RunFinished,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
)
from loopctl.errors import LoopError
from loopctl.message import Message, MessagePart, Role, ToolResultPart
from loopctl.response import Usage
from loopctl.session import Session
from loopctl.tools.files import READ_TOOLS

__all__ = [
    "CLI_KEY",
    "INTERRUPTED_BEFORE",
    "INTERRUPTED_DURING",
    "Autosave",
    "SessionInUse",
    "cli_values",
    "create_session_file",
    "lock_session",
    "usage_of",
]

INTERRUPTED_DURING = (
    "The run stopped (its process ended) while this call was running: it may or may not have taken effect."
)
"""The saved result of a call that was running when the last save was made (seen only after a kill)."""

INTERRUPTED_BEFORE = "The run stopped (its process ended) before this call ran."
"""The saved result of a call that had not started when the last save was made (seen only after a kill)."""

CLI_KEY = "cli"
"""The key of ``Session.metadata`` the command line keeps its own values under: ``usage`` (the token counts of
every run of the session, summed), and ``base_url`` and ``root_bytes`` when they apply."""


class SessionInUse(LoopError):
    """Another ``loopctl run`` is using the session file."""

    retryable = True


class Autosave:
    """An observer that keeps ``session`` saved at ``path`` as a run goes (see the module docstring).

    ``pure`` names the tools that change nothing (default: the reading file tools); the start of any other
    tool's call is saved before it runs.
    ``on_error`` is called once with the first save that fails (an ``OSError``, or text that cannot be
    written); the run goes on and later saves are tried again."""

    def __init__(
        self,
        session: Session,
        path: Path,
        *,
        pure: frozenset[str] = READ_TOOLS,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.session = session
        self.path = path
        self.pure = pure
        self.on_error = on_error
        self.saves = 0
        self._started: set[str] = set()
        self._finished: dict[str, ToolResultPart] = {}
        self._usage = _usage_of(session.metadata)
        self._failed = False

    def __call__(self, event: LoopEvent) -> None:
        if isinstance(event, TurnStarted):
            # The previous turn's results are committed: the machine is whole again.
            self._started.clear()
            self._finished.clear()
            self.save()
        elif isinstance(event, TurnFinished):
            self._usage = self._usage + event.usage
            self._started.clear()
            self._finished.clear()
            self.save()
        elif isinstance(event, ToolCallStarted):
            self._started.add(event.call.id)
            if event.call.name not in self.pure:
                self.save()
        elif isinstance(event, ToolCallFinished):
            self._finished[event.call.id] = event.result
            self.save()
        elif isinstance(event, (CompactionFinished, RunFinished)):
            self.save()

    def snapshot(self) -> LoopMachine:
        """The machine as it should be saved now: the live one, or, while tools run, a copy whose calls are
        all answered (finished results, and :data:`INTERRUPTED_DURING` / :data:`INTERRUPTED_BEFORE`)."""
        machine = self.session.machine
        if machine.state is not MachineState.AWAITING_TOOLS or not (self._started or self._finished):
            return machine
        copy = LoopMachine.from_json(machine.to_json())
        step = copy.next_step(MachinePolicy())
        calls = getattr(step, "calls", ())
        results = [
            self._finished.get(c.id)
            or MessagePart.tool_result(
                c.id, c.name, INTERRUPTED_DURING if c.id in self._started else INTERRUPTED_BEFORE, True
            )
            for c in calls
        ]
        copy.tool_results([Message(role=Role.USER, parts=tuple(results))])
        return copy

    def save(self) -> bool:
        """Save the snapshot now (atomically); whether it was saved. A failure goes to ``on_error`` (the first
        time) and is not raised: the run must not die of its autosave."""
        snapshot = self.snapshot()
        meta = dict(self.session.metadata)
        meta[CLI_KEY] = {**cli_values(meta), "usage": self._usage.to_dict()}
        session = Session(snapshot, self.session.model, self.session.root, self.session.system_prompt, meta)
        try:
            session.save(self.path)
        except (OSError, LoopError, ValueError, TypeError) as exc:
            if not self._failed and self.on_error is not None:
                self.on_error(exc)
            self._failed = True
            return False
        self.session.metadata = meta
        self.saves += 1
        return True


def cli_values(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the CLI's values in a session's ``metadata`` (:data:`CLI_KEY`; empty when absent or not an
    object)."""
    value = metadata.get(CLI_KEY)
    return dict(value) if isinstance(value, dict) else {}


def _usage_of(metadata: Mapping[str, Any]) -> Usage:
    """The summed usage the CLI kept in a session's metadata (zero when absent or malformed)."""
    raw = cli_values(metadata).get("usage")
    if not isinstance(raw, dict):
        return Usage()
    counts = {k: v for k, v in raw.items() if k in Usage.__dataclass_fields__ and type(v) is int and v >= 0}
    return Usage(**counts)


def usage_of(session: Session) -> Usage | None:
    """The summed usage of every CLI run of ``session``, or ``None`` when it holds none."""
    return _usage_of(session.metadata) if "usage" in cli_values(session.metadata) else None


# --- the session file ---------------------------------------------------------------------------------------


def create_session_file(path: Path, session: Session) -> Path:
    """Create the session file ``path`` exclusively (``O_EXCL``; 0o600, missing folders made 0o700) and write
    ``session`` into it. Raises ``FileExistsError`` when ``path`` exists, and ``OSError`` when it cannot be
    created."""
    data = session.to_bytes()
    make_private_folders(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


@contextlib.contextmanager
def lock_session(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the session file ``path`` (on ``.NAME.lock`` beside it, as the file itself
    is replaced by each save) for as long as the block runs; raises :class:`SessionInUse` when another
    process holds it. A no-op where ``fcntl`` is missing (Windows)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    lock = path.parent / f".{path.name}.lock"
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SessionInUse(f"the session {path} is in use by another loopctl run") from None
        # The holder before us may have removed the lock file as we opened it: lock the file that is there.
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)
