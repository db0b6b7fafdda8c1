"""``loopctl approve SESSION``: a run paused in the store is listed, decided and continued by a real
``loopctl`` process, the model being the real OpenAI client against a fake provider server."""

from __future__ import annotations

import asyncio
import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loopctl.cli.approvals import decide_interactively
from loopctl.engine import Approve, BareLoop, Defer, Deny, Modify, PendingApproval
from loopctl.message import Message, Role, ToolCallPart, ToolResultPart, check_conversation
from loopctl.store import SessionState, SQLiteStore
from loopctl.testing import FakeProviderServer, ScriptedClient
from loopctl.tools.files import FileTools

ROOT = Path(__file__).resolve().parents[2]


def paused_session(db: Path, root: Path, *calls: ToolCallPart) -> None:
    """A stored session ``s1`` whose run paused on ``calls`` (the CLI's own file tools, write calls deferred)."""
    store = SQLiteStore(db)
    try:
        store.create("s1", state=SessionState.at_rest(0).with_settings(model="openai:gpt-4o", root=str(root)))
        reply = Message.new(Role.ASSISTANT, list(calls))
        loop = BareLoop(
            ScriptedClient([reply]),
            list(FileTools(root)),
            store=store,
            session_id="s1",
            permission=lambda c: Defer("it changes a file") if c.name == "write_file" else True,
        )
        run = asyncio.run(loop.run("write the notes"))
        assert run.outcome.kind.value == "awaiting_approval"
    finally:
        store.close()


def loopctl(*args: str, base_url: str | None = None) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k not in ("LOOPCTL_STORE",)}
    env.update({"PYTHONPATH": str(ROOT / "src"), "COLUMNS": "300", "OPENAI_API_KEY": "test"})
    if base_url is not None:
        env["OPENAI_BASE_URL"] = base_url
    done = subprocess.run(
        [sys.executable, "-m", "loopctl", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def write(call_id: str, path: str, content: str) -> ToolCallPart:
    return ToolCallPart(id=call_id, name="write_file", input={"path": path, "content": content})


def test_approve_lists_the_pending_calls_inert(tmp_path: Path) -> None:
    db, root = tmp_path / "sessions.db", tmp_path / "project"
    root.mkdir()
    paused_session(db, root, write("w1", "notes.txt", "\x1b[31mred\x1b[0m"))
    code, out, err = loopctl("approve", "s1", "--store", str(db), "--list")
    assert code == 0, err
    assert "session s1 awaits 1 call(s):" in out
    assert "  w1  write_file  — it changes a file\n" in out
    # A write is shown as `loopctl run` shows it before asking: the path, then the diff (issue 18, item 21).
    assert "      wants to create notes.txt\n" in out
    assert "      +\\x1b[31mred\\x1b[0m\n" in out  # the escape is shown, not sent
    assert "\x1b[31m" not in out
    assert not (root / "notes.txt").exists()


def test_approve_shows_the_whole_input_however_long_a_value_before_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The model picks the input and its key order: a long harmless value first must not hide the path.
    db, root = tmp_path / "sessions.db", tmp_path / "project"
    root.mkdir()
    long = "Here is the weekly summary you asked for. " * 40
    call = ToolCallPart(id="w1", name="write_file", input={"content": long + "\u202eevil", "path": ".ssh/config"})
    paused_session(db, root, call)
    code, out, err = loopctl("approve", "s1", "--store", str(db), "--list")
    assert code == 0, err
    assert "      wants to create .ssh/config\n" in out and long + "\\u202eevil" in out
    assert "\u202e" not in out and "…" not in out
    capsys.readouterr()
    decide_interactively([PendingApproval(call, "it changes a file")], lambda text, **kw: "s")
    prompt_text = capsys.readouterr().out
    assert '"path": ".ssh/config"' in prompt_text and long + "\\u202eevil" in prompt_text


def test_approve_decides_and_continues_the_run_in_a_new_process(tmp_path: Path) -> None:
    db, root = tmp_path / "sessions.db", tmp_path / "project"
    root.mkdir()
    paused_session(db, root, write("w1", "notes.txt", "one\n"), write("w2", "other.txt", "two\n"))
    with FakeProviderServer(["Wrote notes.txt; other.txt was refused."]) as server:
        code, out, err = loopctl(
            "approve", "s1", "--store", str(db), "--approve", "w1", "--deny", "w2", "--reason", "not that one",
            base_url=server.openai_base_url,
        )  # fmt: skip
    assert code == 0, err
    assert (root / "notes.txt").read_text() == "one\n" and not (root / "other.txt").exists()
    assert "● completed" in out and "w1 write_file: ran" in out and "w2 write_file: not run" in out
    sent = next(r for r in server.requests if r.api is not None).body["messages"]  # after the context probes
    tool_messages = [m for m in sent if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages][1] == ("w2", "[tool error] not that one")
    store = SQLiteStore(db)
    try:
        assert store.info("s1").state.outcome == "completed"  # type: ignore[union-attr]
        messages = list(store.load("s1").messages)
        assert check_conversation(messages) == []
        results = [p for p in messages[2].parts if isinstance(p, ToolResultPart)]
        assert [r.call_id for r in results] == ["w1", "w2"]
    finally:
        store.close()


def test_approve_without_decisions_and_without_a_terminal_says_how(tmp_path: Path) -> None:
    db, root = tmp_path / "sessions.db", tmp_path / "project"
    root.mkdir()
    paused_session(db, root, write("w1", "a.txt", "x"))
    code, _, err = loopctl("approve", "s1", "--store", str(db))
    assert code == 2 and "no decisions: pass --all, --approve ID" in err
    code, _, err = loopctl("approve", "s1", "--store", str(db), "--approve", "nope")
    assert code == 2 and "call 'nope' is not pending (pending: w1)" in err


def test_approve_refuses_a_session_that_awaits_nothing(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    store = SQLiteStore(db)
    store.create("done", state=SessionState.at_rest(0))
    store.close()
    code, _, err = loopctl("approve", "done", "--store", str(db), "--all")
    assert code == 2 and "session 'done' awaits no approval (its last run: idle)" in err


def test_the_interactive_questions_make_each_kind_of_decision() -> None:
    pending = [PendingApproval(write(f"w{i}", f"{i}.txt", "x"), None) for i in range(1, 5)]
    answers = iter(["a", "d", "because", "m", "{not json", '{"path": "3b.txt", "content": "y"}', "s"])

    def prompt(text: str, **kw: Any) -> Any:
        return next(answers)

    decisions = decide_interactively(pending, prompt)
    assert decisions == {
        "w1": Approve(),
        "w2": Deny("because"),
        "w3": Modify({"path": "3b.txt", "content": "y"}),
    }


@pytest.mark.parametrize(("cost", "shown"), [("0.0123", "$0.0123"), ("0.000045", "$0.000045"), ("0", "$0.0000")])
def test_costs_are_shown_in_dollars(cost: str, shown: str) -> None:
    from decimal import Decimal

    from loopctl.cli.render import dollars

    assert dollars(Decimal(cost)) == shown


def test_approve_summarizes_the_run_as_loopctl_run_does_refusals_included(tmp_path: Path) -> None:
    # `loopctl approve` printed "1 turn(s) · 10 tokens in · 5 out" and said nothing of the file change it refused
    # (no terminal, no --yes); `loopctl run` says "● completed · 1 file change refused" and why.
    db, root = tmp_path / "sessions.db", tmp_path / "project"
    root.mkdir()
    paused_session(db, root, write("w1", "notes.txt", "one\n"))
    again = Message.new(Role.ASSISTANT, [write("w9", "more.txt", "two\n")])
    with FakeProviderServer([again, "Wrote notes.txt; more.txt was refused."]) as server:
        code, out, err = loopctl(
            "approve", "s1", "--store", str(db), "--approve", "w1", base_url=server.openai_base_url
        )
    assert code == 0, err
    assert (root / "notes.txt").read_text() == "one\n" and not (root / "more.txt").exists()
    summary = [line.rstrip() for line in out.splitlines()][-5:]
    refusal = "write_file was not approved: the CLI cannot ask (stdin is not a terminal); run with --yes"
    assert summary[:2] == ["● completed · 1 file change refused", "  w1 write_file: ran"]
    usage = r"  this continuation: 2 turns · [\d,]+ tokens in \(0 cached\) · [\d,]+ out · \d+\.\d s"
    assert re.fullmatch(usage, summary[2])
    assert summary[3] == f"  refused: {refusal}"
    assert re.fullmatch(r"  the whole run: 3 model call\(s\) · [\d,]+ tokens in · [\d,]+ out", summary[4])


def test_a_modified_call_shows_the_input_that_ran_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    db, root = tmp_path / "sessions.db", tmp_path / "project"
    root.mkdir()
    paused_session(db, root, write("w1", "a.txt", "hi"))
    code, out, err = loopctl(
        "approve", "s1", "--store", str(db), "--modify", "w1", '{"path": "b.txt"}', "--yes",
    )  # fmt: skip
    assert code == 2 and "the decisions were not recorded, and nothing ran" in err
    assert "does not fit the schema of 'write_file': invalid input: content: Field required" in err
    assert sorted(p.name for p in root.iterdir()) == []
    with FakeProviderServer(["Wrote b.txt."]) as server:
        code, out, err = loopctl(
            "approve", "s1", "--store", str(db), "--modify", "w1", '{"path": "b.txt", "content": "changed"}',
            "--yes", base_url=server.openai_base_url,
        )  # fmt: skip
    assert code == 0, err
    assert sorted(p.name for p in root.iterdir()) == ["b.txt"]
    assert "→ write_file(path=b.txt, content=changed)\n" in out  # what ran, not the model's input
    assert "  (input modified; the model asked for (path=a.txt, content=hi))\n" in out
    assert '  w1 write_file: ran with the modified input {"path":"b.txt","content":"changed"}\n' in out
    assert "  this continuation: 1 turn · " in out and "  the whole run: 2 model call(s)" in out


def test_the_cli_asks_about_a_write_its_preview_cannot_read(tmp_path: Path) -> None:
    """``loopctl run``'s permission lets a change through unasked only when the file tool refuses it anyway
    (outside the root, a protected path); a preview that fails otherwise (here: content that is not text; also a
    file it cannot read, which the atomic replace overwrites) is asked about, and without a terminal refused."""
    from rich.console import Console

    from loopctl.cli.approve import Approval
    from loopctl.engine import Deny
    from loopctl.message import ToolCallPart
    from loopctl.tools.files import FileTools

    ask = Approval(FileTools(tmp_path), Console(file=io.StringIO()), interactive=False)
    assert isinstance(ask(ToolCallPart(id="c", name="write_file", input={"path": "a.md", "content": 5})), Deny)
    assert ask(ToolCallPart(id="c", name="write_file", input={"path": "../a.md", "content": "x"})) is True
    assert ask(ToolCallPart(id="c", name="write_file", input={"path": ".git/config", "content": "x"})) is True
