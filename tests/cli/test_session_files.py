"""What the command line keeps in and reads from session files: metadata survives --resume (integers past
64 bits included), a root folder whose name is not UTF-8 runs and resumes, and show/check tell a session
from a conversation by the whole document."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import orjson
import pytest

from loopctl.engine import LoopMachine, OutcomeKind
from loopctl.message import Message, MessagePart, Role, check_conversation, save_conversation
from loopctl.session import Session
from tests.cli.test_cli import DEMO_DELAY_VAR, SAMPLE, TASK, lines, loopctl
from tests.testing.test_demo import EXPECTED_TODO_MD

BIG = 2**70 + 1


def test_resume_keeps_the_sessions_metadata_and_integers_past_64_bits(project: Path, tmp_path: Path) -> None:
    # --resume built a new Session without the old metadata (wiped), and a metadata integer past 64 bits made
    # every save raise (orjson writes 64 bits at most): the session loaded but could never be saved again.
    path = tmp_path / "s.json"
    Session(LoopMachine(), model="demo", root=str(project), metadata={"ticket": BIG, "owner": {"id": -BIG}}).save(path)
    # Written exactly (orjson reads it back lossy, as a float).
    assert orjson.loads(path.read_bytes())["metadata"]["ticket"] == float(BIG)
    assert Session.load(path).metadata["ticket"] == BIG
    done = loopctl("run", TASK, "--resume", str(path), "--yes", cwd=tmp_path, **{DEMO_DELAY_VAR: "0"})
    assert (done.returncode, done.stderr) == (0, "")
    saved = Session.load(path)
    assert saved.metadata["ticket"] == BIG
    assert saved.metadata["owner"] == {"id": -BIG}
    assert saved.machine.outcome.kind is OutcomeKind.COMPLETED


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "sample-project"
    shutil.copytree(SAMPLE, root)
    return root


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="needs a file system that takes any bytes")
@pytest.mark.parametrize("where", ["file", "store"])
def test_a_root_whose_name_is_not_utf8_runs_saves_and_resumes(where: str, tmp_path: Path) -> None:
    # The run crashed with the SDK's UnicodeEncodeError (the name went into the system prompt) or orjson's in
    # the autosave, and saved nothing.
    odd = os.fsdecode(os.fsencode(tmp_path) + b"/proj-\xff\xfe")
    shutil.copytree(SAMPLE, odd)
    session = tmp_path / "s.json"
    to_file = ["--session", str(session)] if where == "file" else []
    done = loopctl("run", TASK, "--model", "demo", "--root", odd, "--yes", *to_file, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert (Path(odd) / "TODO.md").read_text() == EXPECTED_TODO_MD
    if where == "file":
        saved = Session.load(session)
        assert saved.root == str(tmp_path / "proj-\ufffd\ufffd")  # readable...
        assert saved.machine.outcome.kind is OutcomeKind.COMPLETED
        resume, cwd = str(session), tmp_path / "elsewhere"
        cwd.mkdir()
    else:
        (resume,) = re.findall(r"--resume (\S+)", lines(done.stdout)[-1])
        cwd = tmp_path  # where the store is
    # ... and resumed exactly: the session's folder, found again (from another folder for a file).
    (Path(odd) / "TODO.md").unlink()
    again = loopctl("run", "Again, please.", "--resume", resume, "--yes", cwd=cwd, **{DEMO_DELAY_VAR: "0"})
    assert (again.returncode, again.stderr) == (0, "")
    assert "Done. TODO.md lists the 5 TODO comments" in again.stdout
    if where == "file":
        assert check_conversation(list(Session.load(session).machine.history)) == []


def test_a_task_or_system_prompt_that_is_not_utf8_is_a_clear_error(project: Path, tmp_path: Path) -> None:
    bad = os.fsdecode(b"fix \xff")
    done = loopctl("run", "x", "--model", "demo", "--root", str(project), "--system", bad, cwd=tmp_path)
    assert (done.returncode, lines(done.stderr)) == (
        2,
        ["error: --system is not valid text (it holds bytes that are not UTF-8)"],
    )
    done = loopctl("run", bad, "--model", "demo", "--root", str(project), cwd=tmp_path)
    assert (done.returncode, lines(done.stderr)) == (
        2,
        ["error: TASK is not valid text (it holds bytes that are not UTF-8)"],
    )


@pytest.mark.parametrize("command", ["show", "check"])
def test_a_conversation_whose_tool_input_has_a_kind_key_is_read_as_a_conversation(command: str, tmp_path: Path) -> None:
    # show and check sniffed the first 4 KB for '"kind"' and read such a conversation as a session: "not a
    # loopctl session file".
    path = tmp_path / "c.json"
    conversation = [
        Message.user("make it"),
        Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "create", {"kind": "loopctl-session"})]),
        Message.new(Role.USER, [MessagePart.tool_result("c1", "create", "made", False)]),
        Message.assistant("done"),
    ]
    save_conversation(path, conversation)
    done = loopctl(command, str(path), cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    if command == "check":
        assert done.stdout == "4 messages, 0 problems\n"
    else:
        assert lines(done.stdout)[:2] == ["── user", "make it"]
        assert '[Tool: create with input: {"kind":"loopctl-session"}]' in done.stdout


def test_show_of_a_session_saved_mid_run_says_so(tmp_path: Path) -> None:
    machine = LoopMachine()
    machine.accept_input("go")
    path = tmp_path / "s.json"
    Session(machine, model="anthropic:claude-x", root="/p").save(path)
    shown = loopctl("show", str(path), cwd=tmp_path)
    assert lines(shown.stdout)[:5] == [
        "model    anthropic:claude-x",
        "root     /p",
        "outcome  running, or stopped mid-run (awaiting_model; --resume continues it)",
        "usage    not recorded",
        "messages 1",
    ]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"kind": "loopctl-session", "format_version": 1}', "the session has no machine object"),
    ],
)
def test_show_of_a_broken_file_is_one_line(content: bytes, problem: str, tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(content)
    shown = loopctl("show", str(path), cwd=tmp_path)
    assert shown.returncode == 2
    (line,) = lines(shown.stderr)
    assert line.startswith("error: ") and problem in line


@pytest.mark.parametrize("task", ["", "  \n\t"])
def test_an_empty_task_is_refused_before_anything_runs(task: str, project: Path, tmp_path: Path) -> None:
    # It used to start the run (and save a session) and send an empty user turn, which providers refuse.
    done = loopctl("run", task, "--model", "demo", "--root", str(project), cwd=tmp_path)
    assert done.returncode == 2
    assert lines(done.stderr) == [
        'error: TASK is empty: say what the agent should do, e.g. loopctl run "Summarize README.md"'
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["sample-project"]  # no store, no session file


def test_show_of_a_stored_session_gives_its_last_runs_usage(project: Path, tmp_path: Path) -> None:
    # A stored session has no CLI usage sum (that lives in a session file's metadata): show said "not recorded".
    from loopctl.store import SQLiteStore

    done = loopctl("run", TASK, "--model", "demo", "--root", str(project), "--yes", cwd=tmp_path, **{DEMO_DELAY_VAR: "0"})
    assert (done.returncode, done.stderr) == (0, "")
    (sid,) = re.findall(r"--resume (\S+)", lines(done.stdout)[-1])
    with SQLiteStore(tmp_path / ".loopctl" / "sessions.db") as store:
        spent = store.load(sid).machine().usage
    assert spent.requests == 5 and spent.input_tokens > 0 and spent.output_tokens > 0
    shown = loopctl("show", sid, cwd=tmp_path)
    assert lines(shown.stdout)[3] == (
        f"usage    last run: {spent.input_tokens:,} tokens in · {spent.output_tokens:,} out (5 model calls)"
    )
