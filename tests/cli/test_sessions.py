"""``loopctl run`` with its default store, and ``loopctl sessions``: real processes on a fresh copy of the sample
project, the demo model over a local fake server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from loopctl.cli import DEMO_DELAY_VAR, main
from loopctl.engine import LoopMachine
from loopctl.message import Message, check_conversation
from loopctl.session import Session
from loopctl.store import SessionState, SQLiteStore

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "sample-project"
TASK = "Find the TODO comments in this project and write a summary of them to TODO.md."


def start(*args: str, cwd: Path, **extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "LOOPCTL_STORE"}
    env.update({"PYTHONPATH": str(ROOT / "src"), "PYTHONUNBUFFERED": "1", "COLUMNS": "400", **extra})
    return subprocess.Popen(
        [sys.executable, "-m", "loopctl", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "sample-project"
    shutil.copytree(SAMPLE, root)
    return root


def test_two_runs_started_at_once_are_two_sessions_in_the_default_store(project: Path, tmp_path: Path) -> None:
    # The bug this replaces: two runs started in the same second from one folder wrote the same file.
    runs = [
        start("run", TASK, "--model", "demo", "--root", str(project), "--yes", cwd=tmp_path, **{DEMO_DELAY_VAR: "0.02"})
        for _ in range(2)
    ]
    results = [finish(p) for p in runs]
    assert [(code, err) for code, _, err in results] == [(0, ""), (0, "")]
    assert not (tmp_path / ".loopctl" / "sessions").exists()  # no JSON autosave any more
    store = SQLiteStore(tmp_path / ".loopctl" / "sessions.db")
    listed = store.sessions()
    assert len(listed) == 2 and listed[0].id != listed[1].id
    for info in listed:
        assert f"--resume {info.id}" in " ".join(out for _, out, _ in results)
        loaded = store.load(info.id)
        assert len(loaded.messages) == 10 and loaded.state.outcome == "completed"
        assert loaded.state.model == "demo" and loaded.state.root == str(project.resolve())
        assert check_conversation(list(loaded.messages)) == []
        assert store.verify(info.id) == []
    store.close()


def test_resume_by_id_continues_and_two_resumes_at_once_never_overwrite(project: Path, tmp_path: Path) -> None:
    first = start(
        "run", TASK, "--model", "demo", "--root", str(project), "--yes", cwd=tmp_path, **{DEMO_DELAY_VAR: "0"}
    )
    code, _, err = finish(first)
    assert (code, err) == (0, "")
    store = SQLiteStore(tmp_path / ".loopctl" / "sessions.db")
    (info,) = store.sessions()
    # Two runs resume the same session at the same moment: one moves the head, the other is refused.
    resumes = [
        start("run", f"Anything left? ({i})", "--resume", info.id, "--yes", cwd=tmp_path, **{DEMO_DELAY_VAR: "0.05"})
        for i in range(2)
    ]
    done = [finish(p) for p in resumes]
    codes = sorted(code for code, _, _ in done)
    loaded = store.load(info.id)
    answers = [m for m in loaded.messages[10:] if m.role.value == "assistant"]
    if codes == [0, 0]:  # the second started after the first had saved: both continued, one after the other
        assert len(answers) == 2
    else:
        # Both started from the same head. The one that wrote first continued; the other was refused when it
        # saved (its input may have been taken as the stop of a stopped run), and nothing it did after is kept.
        assert codes == [0, 2]
        refused = next(err for code, _, err in done if code != 0)
        assert "changed by another writer" in refused and "nothing was written" in refused
        assert len(answers) == 1
    assert store.verify(info.id) == []
    assert check_conversation(list(loaded.messages)) == []
    store.close()


def test_a_save_refused_mid_run_is_the_same_error_and_exit_code_as_a_refused_last_save(
    project: Path, tmp_path: Path
) -> None:
    # Seen under load: a run refused at a save between two model calls exited 1 with the error in its summary
    # on stdout, where a run refused at its last save exits 2 with it on stderr.
    run = start(
        "run", TASK, "--model", "demo", "--root", str(project), "--yes", cwd=tmp_path, **{DEMO_DELAY_VAR: "0.2"}
    )
    store = SQLiteStore(tmp_path / ".loopctl" / "sessions.db")
    deadline = time.monotonic() + 60
    while not (listed := store.sessions()) or listed[0].head is None:  # until the run has saved its input
        assert time.monotonic() < deadline and run.poll() is None
        time.sleep(0.02)
    (info,) = listed
    other = store.append(info.id, [Message.user("meanwhile, from elsewhere")], expected_head=info.head)
    code, out, err = finish(run)
    assert code == 2, (out, err)
    assert err.startswith("error: ") and "changed by another writer" in err and "nothing was written" in err
    loaded = store.load(info.id)
    assert loaded.messages[-1] == Message.user("meanwhile, from elsewhere")  # the other writer's work is kept
    assert store.info(info.id).head == other.head
    assert not (project / "TODO.md").exists()  # refused before the model was called again: no tool ran
    assert store.verify(info.id) == []
    store.close()


def test_resume_of_an_unknown_id_is_a_clear_error(tmp_path: Path) -> None:
    code, _, err = finish(start("run", "more", "--resume", "no-such-session", cwd=tmp_path))
    assert code == 2
    assert "no session 'no-such-session'" in err and "no file of that name" in err


def test_a_run_in_a_postgres_store(project: Path, tmp_path: Path, postgres_dsn: str) -> None:
    proc = start("run", TASK, "--model", "demo", "--root", str(project), "--yes", "--store", postgres_dsn, cwd=tmp_path,
                 **{DEMO_DELAY_VAR: "0"})  # fmt: skip
    code, _, err = finish(proc)
    assert (code, err) == (0, "")
    from loopctl.store import PostgresStore

    with PostgresStore(postgres_dsn) as store:
        (info,) = store.sessions()
        assert len(store.load(info.id).messages) == 10
    assert not (tmp_path / ".loopctl").exists()


# --- loopctl sessions ---------------------------------------------------------------------------------------


def _session_file(path: Path) -> Session:
    m = LoopMachine()
    m.accept_input("list the files")
    m.model_response(Message.assistant("x"), set(), 3)
    m.accept_input("and again \x1b[31mred\x1b[0m \u202eevil")
    m.model_response(Message.assistant("done \x1b]0;title\x07"), set(), 9)
    s = Session(m, model="demo", root="/w")
    s.save(path)
    return s


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["sessions", *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_the_sessions_commands_in_the_default_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOPCTL_STORE", raising=False)
    assert invoke("list") == (0, "no sessions\n")
    _session_file(tmp_path / "old.json")
    code, out = invoke("import", "old.json")
    assert code == 0 and out.startswith("imported old.json as old (4 messages)")
    assert Path(tmp_path, ".loopctl", "sessions.db").is_file()
    code, out = invoke("list")
    assert code == 0 and out.split()[:5] == ["old", "4", "msgs", "completed", "demo"]
    code, out = invoke("show", "old")
    assert code == 0
    # What the model wrote is shown inert: the escape sequences are text, never sent to the terminal.
    assert "\x1b" not in out and "\u202e" not in out
    assert "and again \\x1b[31mred\\x1b[0m \\u202eevil" in out and "done \\x1b]0;title\\x07" in out
    store = SQLiteStore(Path(tmp_path, ".loopctl", "sessions.db"))
    ids = store.load("old").node_ids
    assert f"── [1] assistant  {ids[1][:12]}" in out
    code, out = invoke("fork", "old", "--at", ids[1][:8], "--as", "early")
    assert code == 0 and "as early (2 messages)" in out
    assert [m.text_content() for m in store.load("early").messages] == ["list the files", "x"]
    code, out = invoke("export", "early", "early.json")
    assert code == 0
    assert list(Session.load(Path(tmp_path, "early.json")).machine.history) == list(store.load("early").messages)
    assert invoke("verify", "old") == (0, "old: 4 messages, every hash matches\n")
    store.close()


def test_fork_at_a_reply_that_called_tools_answers_them_and_verify_and_check_see_an_unanswered_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 18, item 11: `fork --at` the reply made a session every `--resume` of which failed, while `check`
    # and `verify` called it sound.
    from loopctl.message import MessagePart, Role, ToolResultPart
    from loopctl.store.base import FORKED_HERE

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOPCTL_STORE", raising=False)
    reply = Message.new(Role.ASSISTANT, [MessagePart.tool_call("w1", "write_file", {"path": "a", "content": "x"})])
    answered = Message.new(Role.USER, [MessagePart.tool_result("w1", "write_file", "wrote a")])
    store = SQLiteStore(Path(tmp_path, ".loopctl", "sessions.db"))
    done = store.append("s1", [Message.user("write a"), reply, answered, Message.assistant("ok")], expected_head=None)
    code, out = invoke("fork", "s1", "--at", done.node_ids[1][:10], "--as", "redo")
    assert code == 0
    assert out.startswith(
        "forked s1 as redo (3 messages; the tool calls of its last reply were answered as not run); continue with"
    )
    (answer,) = store.load("redo").messages[-1].parts
    assert isinstance(answer, ToolResultPart) and str(answer.output) == FORKED_HERE
    assert invoke("verify", "redo") == (0, "redo: 3 messages, every hash matches\n")
    # a head that ends on the reply (made by hand, or by a fork of an older release) is reported
    store.append("cut", [Message.user("write a"), reply], expected_head=None)
    code, out = invoke("verify", "cut")
    assert code == 1
    node = store.load("cut").node_ids[1][:12]
    assert out == (
        f"session 'cut', node {node} (message 1, messages[1].parts[0]): tool call 'w1' has no result, and no run is "
        "waiting for it: the conversation cannot be continued (no provider takes new input after it) "
        "[tool_call_answered_before_next_assistant]\n"
    )
    code, _ = invoke("export", "cut", "cut.json")
    assert code == 0
    checked = CliRunner().invoke(main, ["check", "cut.json"])
    assert checked.exit_code == 1
    assert checked.output.splitlines()[0].startswith(
        "messages[1].parts[0]: tool call 'w1' has no result, and no run is waiting for it"
    )
    store.close()


def test_reading_commands_in_a_folder_without_a_store_create_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `sessions list` in an empty folder made .loopctl/sessions.db: looking created the store.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOPCTL_STORE", raising=False)
    assert invoke("list") == (0, "no sessions\n")
    assert invoke("--store", "other.db", "list") == (0, "no sessions\n")
    for command in (["show", "s1"], ["verify", "s1"], ["export", "s1", "s1.json"], ["fork", "s1"]):
        result = CliRunner().invoke(main, ["sessions", *command])
        assert (result.exit_code, result.output) == (2, "error: no session 's1' (no store at .loopctl/sessions.db)\n")
    assert list(tmp_path.iterdir()) == []


def _closed_pipe_run(*args: str, cwd: Path) -> tuple[int, str]:
    """``loopctl ARGS`` with stdout a pipe whose reader has gone (as ``| head -1`` after its line):
    ``(exit status, stderr)``."""
    read, write = os.pipe()
    os.close(read)
    env = {k: v for k, v in os.environ.items() if k != "LOOPCTL_STORE"}
    env["PYTHONPATH"] = str(ROOT / "src")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "loopctl", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=write,
            stderr=subprocess.PIPE, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    return done.returncode, done.stderr


def test_show_and_sessions_show_exit_0_when_the_reader_stops_early(tmp_path: Path) -> None:
    # `loopctl show s.json | head -1` exited 1 (rich's default for a broken pipe).
    _session_file(tmp_path / "s.json")
    assert _closed_pipe_run("show", "s.json", cwd=tmp_path) == (0, "")
    assert _closed_pipe_run("sessions", "import", "s.json", cwd=tmp_path) == (0, "")
    assert _closed_pipe_run("sessions", "show", "s", cwd=tmp_path) == (0, "")
    assert _closed_pipe_run("sessions", "list", cwd=tmp_path) == (0, "")
    # check's status says whether the file is sound: a closed pipe is not a pass.
    assert _closed_pipe_run("check", "s.json", cwd=tmp_path)[0] == 1


def test_verify_exits_1_naming_the_changed_row(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SQLiteStore(db) as store:
        done = store.append("s", [Message.user("hello"), Message.assistant("world")], expected_head=None)
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE loopctl_nodes SET body = replace(body, 'world', 'w0rld')")
    code, out = invoke("--store", str(db), "verify", "s")
    assert code == 1
    assert out.startswith(f"session 's', node {done.node_ids[1][:12]} (message 1): its content does not match")


def test_verify_exits_1_for_a_session_truncated_by_hand(tmp_path: Path) -> None:
    # Issue 18, item 3: the row's head moved back (the last message dropped, length and state made to fit) was
    # called sound, every hash matching; the head log says otherwise.
    db = tmp_path / "s.db"
    with SQLiteStore(db) as store:
        done = store.append("s", [Message.user("hello"), Message.assistant("world")], expected_head=None)
        state = SessionState.at_rest(1).to_bytes()
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE loopctl_sessions SET head = ?, length = 1, state = ?", (bytes.fromhex(done.node_ids[0]), state)
        )
    code, out = invoke("--store", str(db), "verify", "s")
    assert (code, out) == (
        1,
        f"session 's', node {done.node_ids[0][:12]}: its head is not the one its head log last recorded "
        f"(revision 1, node {done.node_ids[1][:12]}): the row was changed after it was written\n",
    )


def test_unknown_sessions_and_bad_files_exit_2(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    result = CliRunner().invoke(main, ["sessions", "--store", db, "show", "nope"])
    assert result.exit_code == 2 and "error: no session 'nope'" in result.output
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = CliRunner().invoke(main, ["sessions", "--store", db, "import", str(bad)])
    assert result.exit_code == 2 and "bad.json: not valid JSON" in result.output
    result = CliRunner().invoke(main, ["sessions", "--store", db, "fork", "nope", "--at", "zz"])
    assert result.exit_code == 2 and "invalid node id 'zz'" in result.output
