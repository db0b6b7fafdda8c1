"""The session file survives a kill at any point of a run: it always loads, resumes coherently, and never
forgets a write that happened. In process, every state a kill can leave is checked (the file as it is at
each event and right after each write); then real processes are killed with SIGKILL and resumed."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopctl.cli.autosave import (
    INTERRUPTED_BEFORE,
    INTERRUPTED_DURING,
    Autosave,
    SessionInUse,
    create_session_file,
    lock_session,
)
from loopctl.engine import BareLoop, LoopEvent, LoopMachine, MachineState, OutcomeKind, RunConfig, ToolCallFinished
from loopctl.message import Message, MessagePart, Role, TextPart, ToolCallPart, ToolResultPart, check_conversation
from loopctl.session import Session
from loopctl.testing import ScriptedClient
from loopctl.testing.demo import DemoScript
from loopctl.testing.server import RecordedRequest
from loopctl.tools.files import FileTools
from tests.cli.test_cli import DEMO_DELAY_VAR, SAMPLE, TASK, env_playing, loopctl
from tests.testing.test_demo import EXPECTED_TODO_MD

CALLS = [
    MessagePart.tool_call("r1", "read_file", {"path": "a.txt"}),
    MessagePart.tool_call("w1", "write_file", {"path": "out/one.txt", "content": "one\n"}),
    MessagePart.tool_call("w2", "write_file", {"path": "two.txt", "content": "two\n"}),
    MessagePart.tool_call("e1", "edit_file", {"path": "a.txt", "old": "alpha", "new": "ALPHA"}),
]


def resumed(data: bytes) -> LoopMachine:
    """The machine ``loopctl run --resume`` continues from a session file holding ``data``."""
    machine = Session.from_bytes(data).machine
    if machine.state not in (MachineState.START, MachineState.TERMINAL):
        machine.cancel()
    return machine


def snapshot(root: Path) -> dict[str, bytes]:
    """The project's files. A write in progress in another thread (parallel calls) shows as its target with
    no content yet: the atomic write's temporary file ``.NAME.RANDOM.tmp``."""
    out: dict[str, bytes] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        tmp = re.fullmatch(r"(.*?)\.([^/]+)\.[0-9a-f]{12}\.tmp", rel)
        if tmp:
            out.setdefault(f"{tmp.group(1)}{tmp.group(2)}", b"<being written>")
            continue
        try:
            if p.is_file():
                out[rel] = p.read_bytes()
        except FileNotFoundError:  # replaced as we looked
            continue
    return out


def results_of(history: list[Message]) -> dict[str, ToolResultPart]:
    return {p.call_id: p for m in history for p in m.parts if isinstance(p, ToolResultPart)}


def calls_of(history: list[Message]) -> dict[str, ToolCallPart]:
    return {p.id: p for m in history for p in m.parts if isinstance(p, ToolCallPart)}


@pytest.mark.parametrize("dispatch", ["parallel", "sequential"])
async def test_a_kill_at_any_point_leaves_a_session_that_knows_every_write(tmp_path: Path, dispatch: str) -> None:
    # The autosave saved on turn and tool-call events while the machine still awaited tools, and never after
    # the results were committed: killed during turn 2, the resumed session had lost turn 1's call and result
    # (a finished write_file was forgotten).
    root = tmp_path / "proj"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    initial = snapshot(root)
    path = tmp_path / "s.json"
    session = Session(LoopMachine(), model="scripted", root=str(root))
    create_session_file(path, session)
    points: list[tuple[str, bytes, dict[str, bytes]]] = []  # (when, the session file, the project's files)

    def record(when: str) -> None:
        points.append((when, path.read_bytes(), snapshot(root)))

    files = FileTools(root)
    write_bytes = files._write_bytes

    def writing(p: Path, rel: str, data: bytes) -> None:
        write_bytes(p, rel, data)
        record(f"after writing {rel}")  # the instant a kill would leave the write done and the tool unfinished

    files._write_bytes = writing  # type: ignore[method-assign]

    def after(event: LoopEvent) -> None:
        record(
            f"{type(event).__name__} {event.call.id}" if isinstance(event, ToolCallFinished) else type(event).__name__
        )

    autosave = Autosave(session, path)
    script = [
        Message.new(Role.ASSISTANT, [MessagePart.tool_call("l1", "list_files", {})]),
        Message.new(Role.ASSISTANT, CALLS),
        "All four done.",
    ]
    loop = BareLoop(
        ScriptedClient(script), files, observers=[autosave, after], permission=None, machine=session.machine
    )
    run = await loop.run("go", RunConfig(tool_dispatch=dispatch))  # type: ignore[arg-type]
    assert run.ok
    assert len(points) > 20

    for when, data, disk in points:
        machine = resumed(data)
        history = list(machine.full_history())
        assert check_conversation(history) == [], when
        calls, results = calls_of(history), results_of(history)
        # Every change on disk is known to the session, as done or as possibly done.
        changed = {rel for rel, body in disk.items() if initial.get(rel) != body}
        by_path = {str(c.input["path"]): c for c in calls.values() if c.name in ("write_file", "edit_file")}
        for rel in changed:
            assert rel in by_path, f"{when}: {rel} was written but the session does not know it"
            result = results[by_path[rel].id]
            assert str(result.output) in (
                INTERRUPTED_DURING,
                {"out/one.txt": "created out/one.txt (4 bytes)", "two.txt": "created two.txt (4 bytes)",
                 "a.txt": "edited a.txt: replaced 5 characters with 5"}[rel],
            ), when  # fmt: skip
        # A result the session holds for real is never replaced by an interruption later.
        for _call_id, result in results.items():
            if str(result.output) in (INTERRUPTED_DURING, INTERRUPTED_BEFORE):
                assert result.is_error is True
        # And the session resumes: the model sees the calls and their results, and the run can go on.
        again = BareLoop(ScriptedClient(["resumed"]), FileTools(root), machine=machine)
        assert (await again.run("go on")).ok, when

    # A finished write is saved as finished as soon as its call ends: by the time an observer after the
    # autosave sees its ToolCallFinished (with parallel dispatch another call's write may come in between).
    whens = [when for when, _, _ in points]
    finished = [
        when
        for when, data, _ in points
        if str(
            results_of(list(resumed(data).full_history()))
            .get("w1", ToolResultPart(call_id="w1", name="", output=""))
            .output
        )
        == "created out/one.txt (4 bytes)"
    ]
    assert "ToolCallFinished w1" in finished
    assert whens.index(finished[0]) > whens.index("after writing out/one.txt")
    if dispatch == "sequential":
        assert finished[0] == "ToolCallFinished w1"
    final = Session.load(path).machine
    assert final.outcome.kind is OutcomeKind.COMPLETED
    assert final.history == loop.history


async def test_a_call_not_started_is_saved_as_not_run(tmp_path: Path) -> None:
    machine = LoopMachine()
    machine.accept_input("go")
    machine.model_response(Message.new(Role.ASSISTANT, CALLS[:2]), {"read_file", "write_file"}, 0)
    session = Session(machine)
    autosave = Autosave(session, tmp_path / "s.json")
    from loopctl.engine import ToolCallStarted

    autosave(ToolCallStarted(1, CALLS[1]))  # the write started; the read has not
    saved = Session.load(tmp_path / "s.json").machine
    assert saved.state is MachineState.AWAITING_MODEL
    assert [(p.call_id, str(p.output), p.is_error) for p in saved.pending[-1].parts] == [
        ("r1", INTERRUPTED_BEFORE, True),
        ("w1", INTERRUPTED_DURING, True),
    ]
    assert machine.state is MachineState.AWAITING_TOOLS  # the live machine is untouched


KILL_AFTER = [
    "  ✓ list_files",  # between turns
    "→ read_file(path=textutils.py)",  # in the middle of a parallel batch
    "→ write_file",  # the write started (or finished): it must be known
    "  ✓ write_file",  # the write finished
    "Done. TODO.md lists",  # the final answer streaming
]


class LongDone(DemoScript):
    """The demo model, whose final answer streams 600 more lines after its first (24 s at 0.02 s an event): its
    first line shows while it streams. (The demo's one-line answer showed only once the run had completed, so
    the kill raced the process's exit, which a loaded machine could let it win.)"""

    def respond(self, request: RecordedRequest) -> Message:
        message = super().respond(request)
        texts = [p.text for p in message.parts if isinstance(p, TextPart)]
        if message.tool_calls() or not texts or not texts[0].startswith("Done."):
            return message
        more = [TextPart(text=f"\nmore ({i})") for i in range(600)]
        return Message.new(Role.ASSISTANT, [*message.parts, *more])


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
@pytest.mark.parametrize("mark", KILL_AFTER)
def test_a_run_killed_with_sigkill_resumes_and_never_forgets_the_write(mark: str, tmp_path: Path) -> None:
    import shutil

    project = tmp_path / "sample-project"
    shutil.copytree(SAMPLE, project)
    session = tmp_path / "s.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopctl", "run", TASK, "--model", "demo", "--root", str(project), "--yes",
         "--session", str(session)],
        cwd=tmp_path, env=env_playing(tmp_path, "tests.cli.test_autosave:LongDone", **{DEMO_DELAY_VAR: "0.02"}),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    started = time.monotonic()
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(mark):
            break
        assert time.monotonic() - started < 120, seen  # a hang guard (process starts are slow on a loaded machine)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL

    machine = resumed(session.read_bytes())
    history = list(machine.full_history())
    assert check_conversation(history) == []
    if (project / "TODO.md").exists():  # the write happened before the kill: the session knows
        writes = [c for c in calls_of(history).values() if c.name == "write_file"]
        assert [c.input["path"] for c in writes] == ["TODO.md"], mark
        assert str(results_of(history)[writes[0].id].output) in (INTERRUPTED_DURING, "created TODO.md (409 bytes)")
    if mark == "  ✓ write_file":
        assert str(results_of(history)[writes[0].id].output) == "created TODO.md (409 bytes)"

    done = loopctl("run", "Please go on.", "--resume", str(session), "--yes", cwd=tmp_path, **{DEMO_DELAY_VAR: "0"})
    assert (done.returncode, done.stderr) == (0, "")
    final = Session.load(session).machine
    assert final.outcome.kind is OutcomeKind.COMPLETED
    assert check_conversation(list(final.history)) == []
    # Killed before the write, the resumed run makes it; made before the kill, it is whole (writes are atomic).
    if KILL_AFTER.index(mark) < 2 or (project / "TODO.md").exists():
        assert (project / "TODO.md").read_text() == EXPECTED_TODO_MD


# --- the session file: unique, exclusive, locked -------------------------------------------------------------


def test_a_session_file_is_created_exclusively(tmp_path: Path) -> None:
    session = Session(LoopMachine(), model="m")
    path = create_session_file(tmp_path / "new" / "s.json", session)
    assert Session.load(path).model == "m"
    with pytest.raises(FileExistsError):
        create_session_file(path, Session(LoopMachine(), model="other"))
    assert Session.load(path).model == "m"


def test_an_existing_session_file_is_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text("precious")
    done = loopctl("run", TASK, "--model", "demo", "--root", str(tmp_path), "--session", "s.json", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: 's.json' already exists; continue it with --resume, or choose another --session"
    ]
    assert (tmp_path / "s.json").read_text() == "precious"


def test_a_session_in_use_by_another_run_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    Session(LoopMachine(), model="demo", root=str(tmp_path)).save(path)
    with lock_session(path):
        done = loopctl("run", "x", "--resume", str(path), cwd=tmp_path)
        assert done.returncode == 2
        assert done.stderr.splitlines() == [f"error: the session {path} is in use by another loopctl run"]
        with pytest.raises(SessionInUse), lock_session(path):
            pass
    with lock_session(path):  # released
        pass
    assert not (tmp_path / ".s.json.lock").exists()
