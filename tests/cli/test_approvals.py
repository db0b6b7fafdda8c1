"""``loopctl approve SESSION``: a run paused in the store is listed, decided and continued by a real
``loopctl`` process, the model being the real OpenAI client against a fake provider server."""

from __future__ import annotations

import asyncio
import os
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
    assert 'w1  write_file({"path":"notes.txt","content":"\\u001b[31mred' in out  # the escape is shown, not sent
    assert "\x1b[31m" not in out and "— it changes a file" in out
    assert not (root / "notes.txt").exists()


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
    sent = server.requests[0].body["messages"]
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
