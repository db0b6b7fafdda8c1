"""An agent whose sub-agent's tool needs approval, run durably (issue 19, item 4): the parent's workflow waits on
the sub-agent's call, named with its agent path; decisions bound to any other wait are refused; the worker
dies while it waits, and a new one resumes the sub-agent where it stopped (its tool runs once, no model call
of either agent is repeated), and the sub-agent's usage counts in the parent's run. DBOS on a SQLite system
database and a real Temporal dev server, each worker a process of its own (``apps/subagent_worker.py``)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.durable import workload
from tests.durable.harness import Worker, result, wait_for_file

APP = "subagent_worker.py"


async def _pending(loop: Any, workflow_id: str) -> Any:
    for _ in range(400):
        shown = await loop.pending(workflow_id)
        if shown:
            return shown
        await asyncio.sleep(0.025)
    raise AssertionError(f"{workflow_id} never waited for an approval")


def _crash_while_waiting_and_recover(tmp_path: Path, engine: str, *args: str) -> tuple[list[Any], dict[str, Any]]:
    """Start the run in one worker, kill it once the run waits, recover in another: the calls the first worker
    saw the run wait on, and the recovering worker's result."""
    first = Worker(APP, [engine, "start", *args], tmp_path, "first")
    try:
        wait_for_file(tmp_path / "ready", 60, first)
    finally:
        first.kill()
    shown = workload.json.loads((tmp_path / "ready").read_text())
    assert workload.side_effects(tmp_path) == []  # nothing ran before the decision
    second = Worker(APP, [engine, "recover", *args], tmp_path, "second")
    return shown, result(tmp_path, "recover", second)


def _check(tmp_path: Path, shown: list[Any], out: dict[str, Any], run_id: str, refusals: int) -> None:
    # The parent's run waits on the sub-agent's call, named with its agent path, keyed with the parent's call.
    [waiting] = shown
    assert waiting["call"]["id"] == "k1" and waiting["call"]["name"] == "delete"
    assert (waiting["agent"], waiting["turn"], waiting["path"]) == ("boss > researcher", 1, [[1, "p1"]])
    assert waiting["run"] == run_id or waiting["run"].endswith("/1")
    assert out["shown"] == shown  # the recovered run waits on the same call, in the same wait
    # A decision bound to another wait is refused (the sub-agent's bare call id, another run's key; on DBOS also
    # the call without its path, and with the parent's call in another turn); one sent raw without the path
    # (the DBOS topic, the Temporal signal) is dropped: the run still waits.
    assert len(out["refused"]) == refusals, out["refused"]
    assert all("does not await" in r for r in out["refused"]), out["refused"]
    assert out["still_waiting"] is True
    assert out["outcome"] == "completed" and out["output"] == "Done."
    assert out["pending"] == []
    assert out["tool_results"] == [["Gone."], []]
    # The approved call ran once; no model call was made twice: one of each agent before the crash, one after.
    assert workload.side_effects(tmp_path) == ["/tmp/old.log"]
    requests = (tmp_path / "requests.log").read_text().splitlines()
    assert sorted(requests) == ["boss recover", "boss start", "researcher recover", "researcher start"]
    # The sub-agent's usage counts in the parent's: two replies of each.
    assert out["usage"] == [2 * 100 + 2 * 7, 2 * 10 + 2 * 3]
    # The new worker's observers saw the sub-agent's events (with its path) that happened there, once.
    events = out["events"]
    assert events.count("boss > researcher:ToolCallStarted") == 1
    assert events.count("boss > researcher:TurnFinished") == 1
    assert events.count("TurnFinished") == 1


def test_dbos_a_sub_agents_approval_survives_a_restart_and_resumes_it_where_it_stopped(tmp_path: Path) -> None:
    pytest.importorskip("dbos")
    db = f"sqlite:///{tmp_path / 'system.sqlite'}"
    shown, out = _crash_while_waiting_and_recover(
        tmp_path, "dbos", "--workdir", str(tmp_path), "--workflow-id", "job-1", "--db", db
    )
    _check(tmp_path, shown, out, "job-1", 4)


def test_temporal_a_sub_agents_approval_survives_a_restart_and_resumes_it_where_it_stopped(
    temporal_server: Any, tmp_path: Path
) -> None:
    pytest.importorskip("temporalio")
    wid = f"job-{uuid.uuid4().hex[:8]}"
    args = [
        "--workdir",
        str(tmp_path),
        "--workflow-id",
        wid,
        "--address",
        temporal_server.address,
        "--task-queue",
        f"q-{wid}",
    ]
    shown, out = _crash_while_waiting_and_recover(tmp_path, "temporal", *args)
    _check(tmp_path, shown, out, wid, 2)


async def test_dbos_a_sub_agents_call_is_decided_against_its_own_tool_and_runs_with_a_modify(
    dbos_sqlite: Any, tmp_path: Path
) -> None:
    # In one process: approve() checks a Modify of the sub-agent's call against the sub-agent's tool (refused,
    # nothing sent, the run waits on), the modified call runs once, the sub-agent's steps carry its names and
    # its events reach the loop's observers with its path.
    from loopctl.durable.dbos import DBOSLoop
    from loopctl.engine import Modify, SubAgentEvent
    from loopctl.errors import ApprovalError
    from tests.durable.apps.subagent_worker import agents

    events: list[Any] = []
    loop = DBOSLoop.from_agent(agents(tmp_path, "one"), name="ops")
    loop.observers.append(events.append)
    dbos_sqlite.launch()
    task = asyncio.ensure_future(loop.run("Clean up.", workflow_id="ops-1"))
    [pending] = await _pending(loop, "ops-1")
    with pytest.raises(ApprovalError, match="does not fit the schema of 'delete'"):
        await loop.approve("ops-1", {pending.key: Modify({"path": 3})})
    assert [p.key for p in await loop.pending("ops-1")] == [pending.key]
    await loop.approve("ops-1", {"p1/k1": Modify({"path": "/tmp/other.log"})})  # bound to the wait it is in
    run = await asyncio.wait_for(task, 20)
    assert run.output == "Done." and run.usage.input_tokens == 2 * 100 + 2 * 7
    assert workload.side_effects(tmp_path) == ["/tmp/other.log"]
    steps = [s["function_name"] for s in await dbos_sqlite.list_workflow_steps_async("ops-1")]
    assert [s for s in steps if s.startswith("ops.")] == [
        "ops.start", "ops.model", "ops.tool.researcher", "ops.researcher.model", "ops.researcher.tool.delete",
        "ops.researcher.tool.delete", "ops.researcher.model", "ops.model",
    ]  # fmt: skip
    inner = [e for e in events if isinstance(e, SubAgentEvent)]
    assert {(e.agent, e.call_id) for e in inner} == {("boss > researcher", "p1")}
    assert [type(e.event).__name__ for e in inner if type(e.event).__name__.startswith("ToolCall")] == [
        "ToolCallDeferred", "ToolCallStarted", "ToolCallFinished",
    ]  # fmt: skip


async def test_dbos_the_parents_permission_decides_the_call_that_runs_a_sub_agent_first(
    dbos_sqlite: Any, tmp_path: Path
) -> None:
    # The parent's permission callback defers the call that runs the sub-agent: the run waits on it (no path),
    # and only once it is approved does the sub-agent run, and wait on its own call.
    from loopctl.durable.dbos import DBOSLoop
    from loopctl.engine import Approve, Defer
    from tests.durable.apps.subagent_worker import agents

    def ask(call: Any) -> Any:
        return Defer("it delegates") if call.name == "researcher" else Approve()

    loop = DBOSLoop.from_agent(agents(tmp_path, "one", permission=ask), name="gated")
    dbos_sqlite.launch()
    task = asyncio.ensure_future(loop.run("Clean up.", workflow_id="gated-1"))
    [first] = await _pending(loop, "gated-1")
    assert (first.id, first.agent, first.key.path, first.reason) == ("p1", "", (), "it delegates")
    assert not (tmp_path / "requests.log").read_text().count("researcher")  # the sub-agent has not run
    await loop.approve("gated-1", {first.key: Approve()})
    for _ in range(400):
        shown = await loop.pending("gated-1")
        if shown and shown[0].id == "p1/k1":
            break
        await asyncio.sleep(0.025)
    [second] = shown
    assert (second.agent, second.key.path) == ("boss > researcher", ((1, "p1"),))  # the agent path names the agents
    await loop.approve("gated-1", {second.key: Approve()})
    run = await asyncio.wait_for(task, 20)
    assert run.output == "Done." and workload.side_effects(tmp_path) == ["/tmp/old.log"]
