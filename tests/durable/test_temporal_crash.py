"""Temporal runs survive SIGKILL: worker processes on a real Temporal dev server, killed in the middle of a
tool call; a new worker finishes the run."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.durable import workload
from tests.durable.harness import Worker, result, wait_for_file

pytest.importorskip("temporalio")


def _args(server: Any, workdir: Path, scenario: str, workflow_id: str, *extra: str) -> list[str]:
    return [
        "--address", server.address, "--task-queue", f"q-{workflow_id}", "--workdir", str(workdir),
        "--scenario", scenario, "--workflow-id", workflow_id, *extra,
    ]  # fmt: skip


def _crash_and_recover(server: Any, tmp_path: Path, scenario: str) -> dict[str, Any]:
    wid = f"wf-{uuid.uuid4().hex[:8]}"
    first = Worker("temporal_worker.py", ["start", *_args(server, tmp_path, scenario, wid)], tmp_path, "first")
    try:
        wait_for_file(tmp_path / "ready", 60, first)
    finally:
        first.kill()
    (tmp_path / "release").touch()
    second = Worker("temporal_worker.py", ["recover", *_args(server, tmp_path, scenario, wid)], tmp_path, "second")
    return result(tmp_path, "recover", second)


def test_a_run_killed_mid_tool_call_finishes_on_a_new_worker_and_the_earlier_tool_ran_once(
    temporal_server: Any, tmp_path: Path
) -> None:
    out = _crash_and_recover(temporal_server, tmp_path, "sequential")
    assert out["outcome"] == "completed"
    assert out["output"] == "done"
    assert out["results"] == [["appended first"], ["released second"], []]
    assert workload.side_effects(tmp_path) == ["first", "block second", "block second"]
    # the new worker's observers saw what ran there, once: no replayed step emitted anything
    events = out["events"]
    assert events.count("RunStarted") == 0
    assert (events.count("TurnStarted"), events.count("TurnFinished"), events.count("RunFinished")) == (1, 1, 1)
    assert (events.count("ToolCallStarted"), events.count("ToolCallFinished")) == (1, 1)


def test_parallel_calls_across_a_crash_keep_their_results(temporal_server: Any, tmp_path: Path) -> None:
    out = _crash_and_recover(temporal_server, tmp_path, "parallel")
    assert out["outcome"] == "completed"
    assert out["results"] == [["appended p1", "released p2", "appended p3"], []]
    assert sorted(workload.side_effects(tmp_path)) == ["block p2", "block p2", "p1", "p3"]


def test_a_deferred_approval_answered_after_a_restart_runs_the_approved_call_once(
    temporal_server: Any, tmp_path: Path
) -> None:
    # The workflow waits for the signal `approve`; its worker dies while it waits; a new worker takes the
    # workflow when the signal comes, and the run finishes.
    wid = f"wf-{uuid.uuid4().hex[:8]}"
    first = Worker(
        "temporal_worker.py", ["start", *_args(temporal_server, tmp_path, "approval", wid)], tmp_path, "first"
    )
    try:
        wait_for_file(tmp_path / "ready", 60, first)
    finally:
        first.kill()
    assert workload.side_effects(tmp_path) == []  # nothing deferred ran before the decision
    second = Worker(
        "temporal_worker.py", ["recover", *_args(temporal_server, tmp_path, "approval", wid)], tmp_path, "second"
    )
    out = result(tmp_path, "recover", second)
    assert out["outcome"] == "completed"
    assert out["output"] == "done"
    assert out["pending"] == []
    assert out["results"] == [["appended yes", workload.DENIAL, "free"], []]
    # the approved call ran exactly once, the denied one never
    assert workload.side_effects(tmp_path) == ["yes"]
    # each hook ran once, in the activity it wraps (replay runs no activity again); an approved call skips
    # the hooks before it (they were asked before it was deferred)
    assert sorted(workload.hook_lines(tmp_path)) == sorted(
        [
            "before_model", "after_model",
            "before_tool append yes", "before_tool append no", "before_tool tag free", "after_tool tag free",
            "after_tool append yes",
            "before_model", "after_model",
        ]
    )  # fmt: skip
    assert out["events"].count("ToolCallStarted") == 1  # the new worker ran only the approved call
