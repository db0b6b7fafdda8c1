"""DBOSLoop's approvals against what a real approver does (issue 18): a decision answers only the wait it was
given for, with call ids that repeat every turn (an id-less OpenAI-compatible server gives ``call_chatcmpl_0``
each time); a run that ended refuses decisions; a decision that does not fit the tool never destroys a waiting
run; and a workflow id started again does not rewind the conversation. DBOS on a SQLite system database, in
this process; the approval binding itself also on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopctl.engine import Approve, Deny, Modify, OutcomeKind
from loopctl.errors import ApprovalError
from loopctl.testing import ScriptedClient
from tests.durable import workload

pytest.importorskip("dbos")

from dbos import DBOS

from loopctl.durable.dbos import APPROVALS_TOPIC, DBOSLoop


@pytest.fixture(params=["sqlite", "postgres"])
def dbos_system(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """``DBOS(config=...)`` on a fresh system database: SQLite in the test's folder, or a new database on the
    test run's PostgreSQL; destroyed (registry too) after the test."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'system.sqlite'}"
    else:
        url = request.getfixturevalue("dbos_postgres_url")
    DBOS(config={"name": "loopctl-tests", "system_database_url": url, "log_level": "WARNING"})
    yield DBOS
    DBOS.destroy(destroy_registry=True)


REPEATED = workload.REPEATED
Deleter = workload.Deleter
deleting = workload.deleting
ask_first = workload.ask_first


def _drops(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the DBOS adapter logged (the decisions it dropped)."""
    return [r.getMessage() for r in caplog.records if r.name == "loopctl.durable.dbos"]


async def _waiting_on(loop: DBOSLoop[Any], workflow_id: str, path: str) -> Any:
    """The call the run waits on once it waits on the one deleting ``path``."""
    for _ in range(400):
        pending = await loop.pending(workflow_id)
        if [p.input for p in pending] == [{"path": path}]:
            return pending[0]
        await asyncio.sleep(0.025)
    raise AssertionError(f"{workflow_id} never waited on the call deleting {path}: {await loop.pending(workflow_id)}")


async def test_a_repeated_approval_never_approves_the_next_call_with_the_same_id(dbos_system: Any) -> None:
    deleter = Deleter()
    loop = DBOSLoop(ScriptedClient(deleting), [deleter.tool], name="ops", permission=ask_first)
    dbos_system.launch()
    task = asyncio.ensure_future(loop.run("clean up", workflow_id="ops-1"))
    first = await _waiting_on(loop, "ops-1", "/tmp/scratch")
    assert first.id == REPEATED
    await loop.approve("ops-1", {REPEATED: Approve()})
    await asyncio.wait_for(deleter.started.wait(), 10)
    # The approver's request is retried while the approved call runs: the wait it answered is over, so it is
    # refused, not kept for the next wait on a call that happens to have the same id.
    with pytest.raises(ApprovalError, match="awaits no approval now"):
        await loop.approve("ops-1", {REPEATED: Approve()})
    deleter.gate.set()
    second = await _waiting_on(loop, "ops-1", "/etc/important")
    assert second.id == REPEATED  # the same id, another call: nobody has decided it
    await asyncio.sleep(0.3)
    assert deleter.deleted == ["/tmp/scratch"]
    await loop.approve("ops-1", {REPEATED: Deny("keep it")})
    run = await asyncio.wait_for(task, 30)
    assert run.outcome.kind is OutcomeKind.COMPLETED
    assert deleter.deleted == ["/tmp/scratch"]
    assert [str(r.result.output) for t in run.turns for r in t.tool_calls] == ["deleted /tmp/scratch", "keep it"]


async def test_a_stale_decision_already_in_the_topic_is_dropped_and_logged(
    dbos_system: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # What a duplicated delivery leaves in the topic: the decision for turn 1 again (bound, as approve() sends
    # it), and the same decision as a sender that names no wait writes it. Neither answers turn 2.
    deleter = Deleter()
    loop = DBOSLoop(ScriptedClient(deleting), [deleter.tool], name="ops", permission=ask_first)
    dbos_system.launch()
    task = asyncio.ensure_future(loop.run("clean up", workflow_id="ops-2"))
    await _waiting_on(loop, "ops-2", "/tmp/scratch")
    await loop.approve("ops-2", {REPEATED: Approve()})
    await asyncio.wait_for(deleter.started.wait(), 10)
    for stale in (
        {REPEATED: {"decision": "approve", "run": "ops-2", "turn": 1}},
        {REPEATED: {"decision": "approve"}},
        {REPEATED: {"decision": "approve", "run": "another-run", "turn": 2}},
    ):
        await DBOS.send_async("ops-2", json.dumps({"approvals": stale}), APPROVALS_TOPIC)
    with caplog.at_level(logging.WARNING, logger="loopctl.durable.dbos"):
        deleter.gate.set()
        second = await _waiting_on(loop, "ops-2", "/etc/important")
        for _ in range(200):  # the run reads the three stale messages, drops each, and waits on
            if len(_drops(caplog)) >= 3:
                break
            await asyncio.sleep(0.025)
    assert deleter.deleted == ["/tmp/scratch"]
    assert len(_drops(caplog)) == 3
    text = "\n".join(_drops(caplog))
    assert "turn 1 of run 'ops-2'" in text and "names no run and turn" in text and "run 'another-run'" in text
    await loop.approve("ops-2", {second.key: Deny("keep it")})
    run = await asyncio.wait_for(task, 30)
    assert run.outcome.kind is OutcomeKind.COMPLETED
    assert deleter.deleted == ["/tmp/scratch"]


async def test_a_decision_keyed_by_what_was_shown_is_refused_once_the_run_moved_on(dbos_sqlite: Any) -> None:
    deleter = Deleter()
    deleter.gate.set()
    loop = DBOSLoop(ScriptedClient(deleting), [deleter.tool], name="ops", permission=ask_first)
    dbos_sqlite.launch()
    task = asyncio.ensure_future(loop.run("clean up", workflow_id="ops-3"))
    shown = await _waiting_on(loop, "ops-3", "/tmp/scratch")
    assert (shown.key.run, shown.key.turn, shown.key.call) == ("ops-3", 1, REPEATED)
    assert await loop.approve("ops-3", {shown.key: Approve()}) == (shown.key,)
    now = await _waiting_on(loop, "ops-3", "/etc/important")
    assert (now.key.turn, now.key.call) == (2, REPEATED)
    # the approver's request, keyed by the call it showed, comes again after the run moved on
    with pytest.raises(ApprovalError, match="does not await call 'call_chatcmpl_0' of turn 1"):
        await loop.approve("ops-3", {shown.key: Approve()})
    await loop.approve("ops-3", {now.key: Deny("no")})
    run = await asyncio.wait_for(task, 30)
    assert deleter.deleted == ["/tmp/scratch"]
    assert run.outcome.kind is OutcomeKind.COMPLETED


async def test_an_approval_for_a_run_that_ended_is_refused(dbos_sqlite: Any, tmp_path: Path) -> None:
    loop = DBOSLoop(workload.model("approval"), workload.tools(tmp_path), name="wl", permission=workload.defer_appends)
    chat = DBOSLoop(ScriptedClient(["hello"]), [], name="chat")
    dbos_sqlite.launch()
    task = asyncio.ensure_future(loop.run("go", workflow_id="ends"))
    while not await loop.pending("ends"):
        await asyncio.sleep(0.025)
    await loop.approve("ends", {workload.APPROVED: Approve(), workload.DENIED: Deny(workload.DENIAL)})
    run = await asyncio.wait_for(task, 30)
    assert run.outcome.kind is OutcomeKind.COMPLETED
    with pytest.raises(ApprovalError, match="has ended"):
        await loop.approve("ends", {workload.APPROVED: Approve()})
    assert await loop.pending("ends") == ()
    await chat.run("hi", workflow_id="chatted")
    with pytest.raises(ApprovalError, match="no run 'chatted' of the loop 'wl'"):
        await loop.approve("chatted", {workload.APPROVED: Approve()})
    with pytest.raises(ApprovalError, match="no run 'nobody'"):
        await loop.approve("nobody", {workload.APPROVED: Approve()})
    assert workload.side_effects(tmp_path) == ["yes"]


async def test_an_approval_for_a_run_that_paused_past_its_timeout_is_refused(dbos_sqlite: Any, tmp_path: Path) -> None:
    loop = DBOSLoop(
        workload.model("approval"),
        workload.tools(tmp_path),
        name="wl",
        permission=workload.defer_appends,
        approval_timeout=0.2,
    )
    dbos_sqlite.launch()
    paused = await loop.run("go", workflow_id="paused")
    assert paused.outcome.kind is OutcomeKind.AWAITING_APPROVAL
    with pytest.raises(ApprovalError, match=r"has ended .*run\(approvals=\.\.\.\)"):
        await loop.approve("paused", {workload.APPROVED: Approve()})
    assert workload.side_effects(tmp_path) == []


async def test_a_modify_that_does_not_fit_the_tool_is_refused_and_the_run_keeps_waiting(
    dbos_sqlite: Any, tmp_path: Path
) -> None:
    loop = DBOSLoop(workload.model("approval"), workload.tools(tmp_path), name="wl", permission=workload.defer_appends)
    dbos_sqlite.launch()
    task = asyncio.ensure_future(loop.run("go", workflow_id="modify"))
    while not await loop.pending("modify"):
        await asyncio.sleep(0.025)
    with pytest.raises(ApprovalError, match=r"does not fit the schema of 'append'"):
        await loop.approve("modify", {workload.APPROVED: Modify({"txt": "typo"})})
    with pytest.raises(ApprovalError, match="is not a JSON value"):
        await loop.approve("modify", {workload.APPROVED: Modify({"text": object()})})
    await asyncio.sleep(0.2)
    assert not task.done()
    assert [p.id for p in await loop.pending("modify")] == [workload.APPROVED, workload.DENIED]
    await loop.approve("modify", {workload.APPROVED: Modify({"text": "fixed"}), workload.DENIED: Deny("no")})
    run = await asyncio.wait_for(task, 30)
    assert run.outcome.kind is OutcomeKind.COMPLETED
    assert workload.side_effects(tmp_path) == ["fixed"]


async def test_a_modify_that_does_not_fit_the_tool_sent_to_the_topic_is_dropped_and_the_run_waits_on(
    dbos_sqlite: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A sender that skips approve()'s checks (another process, an older release): the workflow must not end
    # ERROR with its machine lost; it drops the decision, logs it, and waits for a good one.
    loop = DBOSLoop(workload.model("approval"), workload.tools(tmp_path), name="wl", permission=workload.defer_appends)
    dbos_sqlite.launch()
    task = asyncio.ensure_future(loop.run("go", workflow_id="bad-modify"))
    while not await loop.pending("bad-modify"):
        await asyncio.sleep(0.025)
    bad = {"decision": "modify", "input": {"txt": "typo"}}
    with caplog.at_level(logging.WARNING, logger="loopctl.durable.dbos"):
        for item in (bad, {**bad, "run": "bad-modify", "turn": 1}):
            await DBOS.send_async("bad-modify", json.dumps({"approvals": {workload.APPROVED: item}}), APPROVALS_TOPIC)
        for _ in range(200):
            if len(_drops(caplog)) >= 2:
                break
            await asyncio.sleep(0.025)
    assert len(_drops(caplog)) == 2
    unbound, bound = _drops(caplog)
    assert "names no run and turn" in unbound
    assert "does not fit the schema of 'append'" in bound
    assert not task.done()
    assert [p.id for p in await loop.pending("bad-modify")] == [workload.APPROVED, workload.DENIED]
    await loop.approve("bad-modify", {workload.APPROVED: Approve(), workload.DENIED: Deny("no")})
    run = await asyncio.wait_for(task, 30)
    assert run.outcome.kind is OutcomeKind.COMPLETED
    assert workload.side_effects(tmp_path) == ["yes"]


async def test_starting_a_finished_workflow_id_again_does_not_rewind_the_conversation(dbos_sqlite: Any) -> None:
    client = ScriptedClient(["one", "two", "never"])
    loop = DBOSLoop(client, [], name="chat")
    dbos_sqlite.launch()
    first = await loop.run("first", workflow_id="req-1")
    await loop.run("second", workflow_id="req-2")
    retried = await loop.run("first", workflow_id="req-1")  # a retried request
    assert retried.output == first.output == "one"
    assert client.calls == 2
    assert [m.text_content() for m in loop.history] == ["first", "one", "second", "two"]
    # and the conversation goes on from there
    await loop.run("third", workflow_id="req-3")
    assert [m.text_content() for m in client.requests[-1].messages] == ["first", "one", "second", "two", "third"]
