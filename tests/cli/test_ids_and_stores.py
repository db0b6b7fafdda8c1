"""What the command line does with session ids and stores it is given (issue 18, item 21): an id that cannot name
a session is one line and exit 2, never a traceback; a command that continues or reads a session creates no
store; ``show`` and ``check`` take a session id as ``--resume`` does; ``--store`` goes anywhere on the command
line; ``approve`` shows a write as ``run`` does, once; ``--help`` is plain text."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from loopctl.cli import main
from loopctl.message import Message, ToolCallPart
from loopctl.store import SQLiteStore
from tests.cli.test_approvals import paused_session
from tests.cli.test_cli import lines

BAD_ID = "expected 1 to 200 printable characters, without leading or trailing spaces"


@pytest.fixture
def empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with no store, the current folder, with no $LOOPCTL_STORE."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOPCTL_STORE", raising=False)
    return tmp_path


def invoke(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, lines(result.output)


@pytest.mark.parametrize("session_id", ["", " padded", "x" * 201, "tab\there"])
def test_approve_of_an_id_that_cannot_name_a_session_is_one_line(session_id: str, empty: Path) -> None:
    code, out = invoke("approve", session_id)
    assert (code, out) == (2, [f"error: invalid session id {session_id!r}: {BAD_ID}"])
    assert list(empty.iterdir()) == []


@pytest.mark.parametrize("session_id", [" x", "x" * 201])
def test_run_resume_of_an_id_that_cannot_name_a_session_is_one_line(session_id: str, empty: Path) -> None:
    code, out = invoke("run", "go", "--model", "demo", "--root", str(empty), "--resume", session_id)
    assert (code, out) == (2, [f"error: invalid session id {session_id!r}: {BAD_ID}"])
    assert list(empty.iterdir()) == []


@pytest.mark.parametrize("option", [["--mcp", "/nonexistent/server --flag"], ["--mcp-url", "http://127.0.0.1:9/mcp"]])
def test_a_run_whose_mcp_server_does_not_start_stores_no_session(option: list[str], empty: Path) -> None:
    # The session was created before the MCP servers started: each such failure left an empty session ("0 msgs
    # idle") in `loopctl sessions list`.
    code, out = invoke("run", "go", "--model", "demo", "--root", str(empty), *option)
    assert code == 2
    assert out[0].startswith("error: MCP server ") and "could not be started or reached" in out[0]
    assert list(empty.iterdir()) == []  # no store made, so no session in it


def test_run_resume_of_nothing_says_so_rather_than_naming_an_id_nobody_typed(empty: Path) -> None:
    # It said "no session '20250101-120000-3f9a1c' in SQLiteStore(...)": a fresh id, made up for "".
    code, out = invoke("run", "go", "--model", "demo", "--root", str(empty), "--resume", "")
    assert (code, out) == (2, ["error: --resume needs a session id or a session file"])


def test_continuing_a_session_in_a_folder_without_a_store_creates_none(empty: Path) -> None:
    code, out = invoke("approve", "nosuch")
    assert (code, out) == (2, ["error: no session 'nosuch' (no store at .loopctl/sessions.db)"])
    code, out = invoke("run", "go", "--model", "demo", "--root", str(empty), "--resume", "nosuch")
    assert (code, out) == (
        2,
        ["error: no session 'nosuch' (no store at '.loopctl/sessions.db') and no file of that name"],
    )
    assert list(empty.iterdir()) == []


def _stored(db: Path) -> None:
    with SQLiteStore(db) as store:
        store.append("s1", [Message.user("hello"), Message.assistant("world")], expected_head=None)


def test_show_and_check_take_a_stored_sessions_id(tmp_path: Path, empty: Path) -> None:
    db = tmp_path / "other.db"
    _stored(db)
    for args in (["show", "s1", "--store", str(db)], ["--store", str(db), "show", "s1"]):
        code, out = invoke(*args)
        assert code == 0
        assert out[:2] == ["model    (none)", "root     (none)"]
        assert out[-4:] == ["── user", "hello", "── assistant", "world"]
    code, out = invoke("check", "s1", "--store", str(db))
    assert (code, out) == (0, ["2 messages, 0 problems"])
    code, out = invoke("show", "s2", "--store", str(db))
    assert (code, out) == (2, [f"error: no file 's2', and no session of that id in SQLiteStore({str(db)!r})"])
    code, out = invoke("show", "missing.json")
    assert (code, out) == (
        2,
        ["error: no file 'missing.json', and no stored session of that id (no store at .loopctl/sessions.db)"],
    )
    assert sorted(p.name for p in empty.iterdir()) == ["other.db"]  # the default store was not created


@pytest.mark.parametrize(
    "args",
    [
        ["--store", "{db}", "sessions", "list"],
        ["sessions", "--store", "{db}", "list"],
        ["sessions", "list", "--store", "{db}"],
        ["--store", "elsewhere.db", "sessions", "list", "--store", "{db}"],  # the one nearest the command wins
    ],
    ids=["before-sessions", "before-list", "after-list", "nearest-wins"],
)
def test_store_is_taken_before_and_after_the_subcommand(args: list[str], tmp_path: Path, empty: Path) -> None:
    db = tmp_path / "other.db"
    _stored(db)
    code, out = invoke(*[a.format(db=db) for a in args])
    assert code == 0 and out[0].split()[:3] == ["s1", "2", "msgs"]


@pytest.mark.parametrize("where", ["before", "after"])
def test_run_and_approve_take_the_store_before_their_name(where: str, tmp_path: Path, empty: Path) -> None:
    db = tmp_path / "other.db"
    run = ["run", "go", "--model", "demo", "--root", str(empty), "--yes"]
    store = ["--store", str(db)]
    os.environ.pop("LOOPCTL_STORE", None)
    code, _ = invoke(*(store + run if where == "before" else run + store))
    assert code == 0
    with SQLiteStore(db) as opened:
        (info,) = opened.sessions()
    code, out = invoke(*([*store, "approve", info.id] if where == "before" else ["approve", info.id, *store]))
    assert (code, out) == (2, [f"error: session {info.id!r} awaits no approval (its last run: completed)"])
    assert not (empty / ".loopctl").exists()


def test_every_help_text_is_plain_text() -> None:
    # Docstrings written for the API reference showed their markup: "(readable by ``loopctl show`` ...)".
    markup = re.compile(r"``|:(?:mod|func|class|meth|data|attr):`")

    def walk(command: click.Command, path: list[str]) -> list[str]:
        found = [" ".join(path)]
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                found += walk(sub, [*path, name])
        return found

    for path in walk(main, []):
        code, out = invoke(*path.split(), "--help")
        assert code == 0
        assert not [line for line in out if markup.search(line)], path


def test_approve_at_a_terminal_shows_each_call_once_a_write_as_its_diff(tmp_path: Path) -> None:
    # The calls were listed as escaped JSON, then each was shown again before its question; `run` shows a
    # write as the path and a diff.
    db, root = tmp_path / "sessions.db", tmp_path / "project"
    root.mkdir()
    (root / "notes.txt").write_text("old line\n")
    write = ToolCallPart(id="w1", name="write_file", input={"path": "notes.txt", "content": "new line\n"})
    paused_session(db, root, write)
    out = _at_a_terminal(["approve", "s1", "--store", str(db)], answers=b"s\n", cwd=tmp_path)
    assert out.count("w1  write_file") == 1
    assert out.count("+new line") == 1 and "-old line" in out and "wants to replace notes.txt" in out
    assert '"content"' not in out  # not the JSON input
    assert "nothing decided; the calls stay pending" in out


def _at_a_terminal(args: list[str], *, answers: bytes, cwd: Path) -> str:
    """Run ``loopctl ARGS`` with a pseudo-terminal for stdin and stdout, typing ``answers``; its output."""
    from tests.cli.test_cli import env

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopctl", *args], cwd=cwd, env=env(COLUMNS="200"), stdin=follower,
        stdout=follower, stderr=follower,
    )  # fmt: skip
    os.close(follower)
    out = b""
    deadline = time.monotonic() + 60
    sent = False
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
            if not sent and b"[a]pprove" in out:
                os.write(leader, answers)
                sent = True
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(leader)
    text = out.decode("utf-8", "replace").replace("\r\n", "\n")
    return re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", text)  # rich's colours
