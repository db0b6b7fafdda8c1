"""Approvals that wait: a deferred call pauses the run (``AWAITING_APPROVAL``), the machine holds it through a
save, and ``run(approvals=...)`` decides it later, in this process or another."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from loopctl.engine import (
    Approve,
    BareLoop,
    Defer,
    Deny,
    LoopMachine,
    MachineState,
    Modify,
    OutcomeKind,
    PendingApproval,
    RunFinished,
    ToolCallDeferred,
)
from loopctl.errors import ApprovalError, AwaitingApproval
from loopctl.message import Message, MessagePart, Role, ToolCallPart, ToolResultPart, check_conversation
from loopctl.store import SQLiteStore
from loopctl.testing import FakeProviderServer, ScriptedClient
from loopctl.tool import tool

ROOT = Path(__file__).resolve().parents[2]
ran: list[tuple[str, Any]] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


@tool
async def write(path: str, text: str) -> str:
    """Write a file."""
    ran.append(("write", {"path": path, "text": text}))
    return f"wrote {len(text)} characters to {path}"


@tool
async def read(path: str) -> str:
    """Read a file."""
    ran.append(("read", path))
    return f"contents of {path}"


@tool(requires_approval=True)
async def deploy(env: str) -> str:
    """Deploy."""
    ran.append(("deploy", env))
    return f"deployed to {env}"


def calls(*specs: tuple[str, str, dict[str, Any]]) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(i, n, a) for i, n, a in specs])


WRITE = calls(("w1", "write", {"path": "a.txt", "text": "hello"}))
READ_AND_WRITE = calls(("r1", "read", {"path": "b.txt"}), ("w1", "write", {"path": "a.txt", "text": "hello"}))


def defer_writes(call: ToolCallPart) -> Any:
    return Defer("it writes a file") if call.name == "write" else Approve()


def results(message: Message) -> dict[str, ToolResultPart]:
    return {p.call_id: p for p in message.parts if isinstance(p, ToolResultPart)}


async def test_a_deferred_call_pauses_the_run_holding_it() -> None:
    events: list[Any] = []
    client = ScriptedClient([READ_AND_WRITE])
    loop = BareLoop(client, [read, write], permission=defer_writes, observers=[events.append])
    run = await loop.run("copy b to a")
    assert run.outcome.kind is OutcomeKind.AWAITING_APPROVAL and not run.ok
    assert run.pending_approvals == (
        PendingApproval(
            ToolCallPart(id="w1", name="write", input={"path": "a.txt", "text": "hello"}), "it writes a file"
        ),
    )
    assert ran == [("read", "b.txt")]  # the call that was approved ran; the deferred one did not
    assert [(r.call.id, r.ran) for r in run.turns[0].tool_calls] == [("r1", True)]
    assert [e.call.id for e in events if isinstance(e, ToolCallDeferred)] == ["w1"]
    assert isinstance(events[-1], RunFinished)
    m = loop.machine
    assert m.state is MachineState.AWAITING_APPROVAL and m.pending_approvals == run.pending_approvals
    assert list(m.history) == []  # nothing committed yet: the turn is held whole
    restored = LoopMachine.from_json(m.to_json())
    assert restored.pending_approvals == run.pending_approvals and restored.to_json() == m.to_json()
    with pytest.raises(AwaitingApproval, match=r"awaiting_approval \(calls w1; continue with loop.run") as caught:
        run.raise_for_outcome()
    assert caught.value.pending == run.pending_approvals


async def test_approve_runs_the_call_once_without_asking_again_and_the_run_completes() -> None:
    asked: list[str] = []

    def permission(call: ToolCallPart) -> Any:
        asked.append(call.id)
        return defer_writes(call)

    client = ScriptedClient([READ_AND_WRITE, "copied"])
    loop = BareLoop(client, [read, write], permission=permission)
    await loop.run("copy b to a")
    run = await loop.run(approvals={"w1": Approve()})
    assert run.ok and run.output == "copied"
    assert ran == [("read", "b.txt"), ("write", {"path": "a.txt", "text": "hello"})]
    assert asked == ["r1", "w1"]  # the approved call was not put to the callback again
    assert [(r.call.id, r.ran, str(r.result.output)) for r in run.resumed_calls] == [
        ("w1", True, "wrote 5 characters to a.txt")
    ]
    history = list(loop.history)
    assert check_conversation(history) == []
    assert [str(r.output) for r in results(history[2]).values()] == ["contents of b.txt", "wrote 5 characters to a.txt"]
    # The model read both results, in the order it asked, in the request after the approval.
    assert client.requests[1].messages[2] == history[2]


async def test_deny_and_modify_decide_what_the_model_reads() -> None:
    two = calls(("w1", "write", {"path": "a.txt", "text": "x"}), ("w2", "write", {"path": "b.txt", "text": "y"}))
    loop = BareLoop(ScriptedClient([two, "ok"]), [write], permission=lambda c: Defer())
    await loop.run("write both")
    run = await loop.run(approvals={"w1": Deny("not that file"), "w2": Modify({"path": "c.txt", "text": "y"})})
    assert run.ok
    assert ran == [("write", {"path": "c.txt", "text": "y"})]
    answered = results(list(loop.history)[2])
    assert (str(answered["w1"].output), answered["w1"].is_error) == ("not that file", True)
    assert str(answered["w2"].output) == "wrote 1 characters to c.txt"
    assert list(loop.history)[1].tool_calls()[1].input == {"path": "b.txt", "text": "y"}  # the model's call is kept
    assert [(r.call.id, r.ran) for r in run.resumed_calls] == [("w1", False), ("w2", True)]


async def test_a_tool_marked_requires_approval_is_deferred_without_a_callback() -> None:
    loop = BareLoop(ScriptedClient([calls(("d1", "deploy", {"env": "prod"})), "deployed"]), [deploy])
    run = await loop.run("deploy")
    assert run.outcome.kind is OutcomeKind.AWAITING_APPROVAL and ran == []
    run = await loop.run(approvals={"d1": Approve()})
    assert run.ok and ran == [("deploy", "prod")]


async def test_calls_left_undecided_stay_pending() -> None:
    two = calls(("w1", "write", {"path": "a", "text": "1"}), ("w2", "write", {"path": "b", "text": "2"}))
    loop = BareLoop(ScriptedClient([two, "both written"]), [write], permission=lambda c: Defer())
    await loop.run("write")
    run = await loop.run(approvals={"w2": Approve()})
    assert run.outcome.kind is OutcomeKind.AWAITING_APPROVAL
    assert [p.id for p in run.pending_approvals] == ["w1"] and [r.call.id for r in run.resumed_calls] == ["w2"]
    restored = BareLoop.from_machine(LoopMachine.from_json(loop.machine.to_json()), loop.client, [write])
    run = await restored.run(approvals={"w1": Approve()})
    assert run.ok and [a for _, a in ran] == [{"path": "b", "text": "2"}, {"path": "a", "text": "1"}]
    assert list(results(list(restored.history)[2])) == ["w1", "w2"]  # the model's order


async def test_approvals_that_do_not_fit_are_refused_before_anything_runs() -> None:
    loop = BareLoop(ScriptedClient([WRITE, "ok"]), [write], permission=lambda c: Defer())
    with pytest.raises(ApprovalError, match="not paused"):
        await loop.run(approvals={"w1": Approve()})
    await loop.run("write")
    saved = loop.machine.to_json()
    with pytest.raises(ApprovalError, match=r"paused, awaiting approval of w1 \(write\)") as refused:
        await loop.run("something else")
    # The way out for an agent's conversation too, which has no machine to cancel.
    assert "(Deny every call to drop them;" in str(refused.value)
    with pytest.raises(ApprovalError, match="call 'nope' does not await approval"):
        await loop.run(approvals={"nope": Approve()})
    with pytest.raises(ApprovalError, match="the decision for call 'w1' is True"):
        await loop.run(approvals={"w1": True})  # type: ignore[dict-item]
    with pytest.raises(ApprovalError, match="takes no new input"):
        await loop.run("and this", approvals={"w1": Approve()})
    assert loop.machine.to_json() == saved and ran == []


async def test_decisions_with_a_bad_reason_or_input_are_refused_when_given() -> None:
    loop = BareLoop(ScriptedClient([WRITE, "ok"]), [write], permission=lambda c: Defer())
    await loop.run("write")
    saved = loop.machine.to_json()
    for bad in (Deny(None), Deny(123)):  # type: ignore[arg-type]
        with pytest.raises(ApprovalError, match="the reason of Deny for call 'w1' must be a string"):
            await loop.run(approvals={"w1": bad})
    refused = r"the input of Modify for call 'w1' \(write\) is refused: "
    with pytest.raises(ApprovalError, match=refused + r"input is not a JSON value \(its type is object\)"):
        await loop.run(approvals={"w1": Modify(object())})
    with pytest.raises(ApprovalError, match=refused + r"input.path is not a JSON value \(its type is set\)"):
        await loop.run(approvals={"w1": Modify({"path": {1}, "text": "x"})})
    with pytest.raises(
        ApprovalError, match=refused + "it does not fit the schema of 'write': invalid input: text: Field"
    ):
        await loop.run(approvals={"w1": Modify({"path": "a.txt"})})
    assert loop.machine.to_json() == saved and ran == []  # nothing decided, nothing ran


async def test_an_empty_deny_reason_gives_the_model_the_default_one() -> None:
    loop = BareLoop(ScriptedClient([WRITE, "ok"]), [write], permission=lambda c: Defer())
    await loop.run("write")
    await loop.run(approvals={"w1": Deny("")})
    assert str(results(loop.history[2])["w1"].output) == "The user denied this tool call."
    denied = BareLoop(ScriptedClient([WRITE, "ok"]), [write], permission=lambda c: Deny("  "))
    await denied.run("write")
    assert str(results(denied.history[2])["w1"].output) == "The user denied this tool call."
    assert ran == []


async def test_cancelling_a_paused_run_keeps_the_results_of_the_tools_that_ran() -> None:
    loop = BareLoop(ScriptedClient([READ_AND_WRITE]), [read, write], permission=defer_writes)
    await loop.run("copy")
    loop.machine.cancel()
    history = list(loop.history)
    assert loop.machine.outcome.kind is OutcomeKind.CANCELLED and check_conversation(history) == []
    answered = results(history[2])
    assert str(answered["r1"].output) == "contents of b.txt"
    assert answered["w1"].is_error and "awaited approval" in str(answered["w1"].output)


class City(BaseModel):
    name: str


async def test_a_typed_run_paused_for_approval_continues_with_its_output_type() -> None:
    answer = calls(("f1", "final_result", {"name": "Oslo"}))
    loop = BareLoop(ScriptedClient([WRITE, answer]), [write], permission=lambda c: Defer())
    run = await loop.run("write, then name a city", output_type=City)
    assert run.outcome.kind is OutcomeKind.AWAITING_APPROVAL
    with pytest.raises(ApprovalError, match="another output type"):
        await loop.run(approvals={"w1": Approve()})
    run = await loop.run(approvals={"w1": Approve()}, output_type=City)
    assert run.ok and run.output == City(name="Oslo")  # the output tool's call needed no approval


async def test_a_streamed_run_pauses_and_continues() -> None:
    loop = BareLoop(ScriptedClient([WRITE, "done"]), [write], permission=lambda c: Defer())
    async with loop.stream("write") as stream:
        kinds = [type(e).__name__ async for e in stream]
        run = await stream.result()
    assert run.outcome.kind is OutcomeKind.AWAITING_APPROVAL and "ToolCallDeferred" in kinds
    async with loop.stream(approvals={"w1": Approve()}) as stream:
        text = "".join([t async for t in stream.text()])
        run = await stream.result()
    assert run.ok and text == "done" and len(ran) == 1


class DecidesAtOnce(BareLoop):
    """A driver whose wait for approvals returns decisions at once (as a durable workflow's signal would)."""

    async def _await_approvals(self, pending: tuple[PendingApproval, ...]) -> dict[str, Any]:
        return {p.id: Approve() for p in pending}


async def test_a_driver_that_gets_its_decisions_at_once_continues_in_the_same_run() -> None:
    loop = DecidesAtOnce(ScriptedClient([READ_AND_WRITE, "copied"]), [read, write], permission=defer_writes)
    run = await loop.run("copy")
    assert run.ok and len(ran) == 2
    assert [(r.call.id, r.ran) for r in run.turns[0].tool_calls] == [("r1", True), ("w1", True)]


async def test_a_session_store_keeps_a_paused_run_paused(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        loop = BareLoop(ScriptedClient([WRITE]), [write], store=store, session_id="s", permission=lambda c: Defer())
        await loop.run("write")
        assert store.info("s").state.outcome == "awaiting_approval"  # type: ignore[union-attr]
        again = BareLoop(ScriptedClient(["done"]), [write], store=store, session_id="s")
        assert again.machine.state is MachineState.AWAITING_APPROVAL  # loaded as it is, not cancelled
        assert (await again.run(approvals={"w1": Approve()})).ok
        assert store.info("s").state.outcome == "completed"  # type: ignore[union-attr]
    finally:
        store.close()


def _worker(*args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.engine.approval_worker", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_a_deferred_approval_is_decided_in_another_process_and_the_tool_runs_once(tmp_path: Path) -> None:
    db, out = str(tmp_path / "sessions.db"), str(tmp_path / "out.txt")
    reply = calls(("call_1", "append_line", {"text": "approved line"}))
    with FakeProviderServer([reply, "The line is written."]) as server:
        started = _worker("start", db, "s1", server.openai_base_url, out)
        assert started == {"outcome": "awaiting_approval", "pending": ["call_1"]}
        assert not Path(out).exists()  # the first process ended without running the tool
        finished = _worker("approve", db, "s1", server.openai_base_url, out, "call_1")
    assert finished["outcome"] == "completed" and finished["text"] == "The line is written."
    assert finished["lines"] == ["approved line"]  # the tool ran exactly once
    assert finished["resumed"] == [["call_1", True, "appended 'approved line'"]]
    assert len(server.requests) == 2  # one model call before the pause, one after
    sent = server.requests[1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"] and sent[2]["tool_call_id"] == "call_1"
    store = SQLiteStore(db)
    try:
        assert store.info("s1").state.outcome == "completed"  # type: ignore[union-attr]
        assert check_conversation(list(store.load("s1").messages)) == []
    finally:
        store.close()


def _pause_on_append(db: str, session: str) -> None:
    """A stored run paused on one call of the workers' ``append_line`` tool (call id ``c1``)."""
    from tests.engine.approval_worker import make_tool

    store = SQLiteStore(db)
    try:
        reply = calls(("c1", "append_line", {"text": "sent once"}))
        tools = [make_tool(Path(db).with_name("unused.txt"))]
        run = BareLoop(ScriptedClient([reply]), tools, store=store, session_id=session, permission=lambda c: Defer())
        assert run.run_sync("send it").outcome.kind is OutcomeKind.AWAITING_APPROVAL
    finally:
        store.close()


def _spawn(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.engine.approval_worker", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_approving_one_paused_call_run_it_once(tmp_path: Path) -> None:
    # Both load the paused session, then both approve at once: the decision is saved (compare-and-swap on the
    # head both loaded) before the tool runs, so the second is refused before anything ran.
    db, out, go = str(tmp_path / "s.db"), tmp_path / "sent.txt", tmp_path / "go"
    _pause_on_append(db, "s")
    ready = [tmp_path / f"ready{i}" for i in range(2)]
    procs = [_spawn("race", db, "s", str(out), "c1", str(r), str(go)) for r in ready]
    try:
        deadline = time.monotonic() + 60
        while not all(r.exists() for r in ready):
            assert time.monotonic() < deadline, "the workers did not load the session"
            time.sleep(0.01)
        go.touch()
        reports = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=60)
            assert p.returncode == 0, stderr
            reports.append(orjson.loads(stdout.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert out.read_text().splitlines() == ["sent once"], reports  # the side effect happened exactly once
    assert sorted(r.get("outcome", r.get("raised")) for r in reports) == ["ConcurrentUpdate", "completed"]
    store = SQLiteStore(db)
    try:
        loaded = store.load("s")
        assert loaded.state.outcome == "completed"
        tool_results = [p for m in loaded.messages for p in m.parts if isinstance(p, ToolResultPart)]
        assert [str(r.output) for r in tool_results] == ["appended 'sent once'"]
    finally:
        store.close()


def test_a_crash_inside_an_approved_call_never_offers_it_for_approval_again(tmp_path: Path) -> None:
    # The approver dies inside the tool, after its side effect, before the run saved the result. The decision
    # was saved first: a later load does not show the call pending; it answers it "not known whether it ran".
    db, out = str(tmp_path / "s.db"), tmp_path / "sent.txt"
    _pause_on_append(db, "s")
    crashed = _spawn("crash", db, "s", str(out), "c1")
    crashed.communicate(timeout=60)
    assert crashed.returncode == -9  # SIGKILL, inside the tool
    assert out.read_text().splitlines() == ["sent once"]
    store = SQLiteStore(db)
    try:
        loop = BareLoop(ScriptedClient(["again?"]), [], store=store, session_id="s")
        m = loop.machine
        assert m.state is MachineState.TERMINAL and m.pending_approvals == ()
        answer = results(m.history[-1])["c1"]
        assert answer.is_error and str(answer.output).startswith("Not known whether it ran: it was approved")
        with pytest.raises(ApprovalError, match="decided already"):
            loop.run_sync(approvals={"c1": Approve()})
    finally:
        store.close()
    assert out.read_text().splitlines() == ["sent once"]  # the tool ran once
