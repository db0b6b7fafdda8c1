"""An agent whose sub-agent's tool needs approval, run durably (issue 19, item 4): the parent's workflow waits on
the sub-agent's call, named with its agent path; decisions bound to any other wait are refused; the worker
dies while it waits, and a new one resumes the sub-agent where it stopped (its tool runs once, no model call
of either agent is repeated), and the sub-agent's usage counts in the parent's run. DBOS on a SQLite system
database and a real Temporal dev server, each worker a process of its own (``apps/subagent_worker.py``)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.durable import workload
from tests.durable.harness import Worker, result, wait_for_file

APP = "subagent_worker.py"


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
