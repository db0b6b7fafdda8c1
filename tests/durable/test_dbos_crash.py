"""DBOS runs survive SIGKILL: worker processes on a SQLite system database, killed in the middle of a tool
call and started again."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.durable import workload
from tests.durable.harness import Worker, result, wait_for_file

pytest.importorskip("dbos")


def _args(workdir: Path, db: str, scenario: str, *extra: str) -> list[str]:
    return ["--workdir", str(workdir), "--db", db, "--scenario", scenario, "--workflow-id", "run-1", *extra]


def _crash_and_recover(tmp_path: Path, scenario: str, *recover_extra: str) -> dict[str, object]:
    db = f"sqlite:///{tmp_path / 'system.sqlite'}"
    first = Worker("dbos_worker.py", ["start", *_args(tmp_path, db, scenario)], tmp_path, "first")
    try:
        wait_for_file(tmp_path / "ready", 60, first)
    finally:
        first.kill()
    (tmp_path / "release").touch()
    second = Worker("dbos_worker.py", ["recover", *_args(tmp_path, db, scenario, *recover_extra)], tmp_path, "second")
    return result(tmp_path, "recover", second)


def test_a_run_killed_mid_tool_call_finishes_after_restart_and_the_earlier_tool_ran_once(tmp_path: Path) -> None:
    out = _crash_and_recover(tmp_path, "sequential")
    assert out["outcome"] == "completed"
    assert out["output"] == "done"
    assert out["turns"] == 3
    assert out["results"] == [["appended first"], ["released second"], []]
    # the append ran once; the interrupted call ran twice (assume any unit may run twice)
    assert workload.side_effects(tmp_path) == ["first", "block second", "block second"]
    # the new worker's observers saw what ran there, once: no replayed step emitted anything
    events = out["events"]
    assert events.count("RunStarted") == 0
    assert (events.count("TurnStarted"), events.count("TurnFinished"), events.count("RunFinished")) == (1, 1, 1)
    assert (events.count("ToolCallStarted"), events.count("ToolCallFinished")) == (1, 1)


def test_parallel_calls_across_a_crash_keep_their_records(tmp_path: Path) -> None:
    out = _crash_and_recover(tmp_path, "parallel")
    assert out["outcome"] == "completed"
    assert out["results"] == [["appended p1", "released p2", "appended p3"], []]
    lines = workload.side_effects(tmp_path)
    assert sorted(lines) == ["block p2", "block p2", "p1", "p3"]


def test_a_deferred_approval_answered_after_a_restart_runs_the_approved_call_once(tmp_path: Path) -> None:
    # The run waits in its workflow for approvals; the worker dies while it waits; a new worker recovers it
    # (it waits again), the approval comes, and the run finishes.
    db = f"sqlite:///{tmp_path / 'system.sqlite'}"
    first = Worker("dbos_worker.py", ["start", *_args(tmp_path, db, "approval")], tmp_path, "first")
    try:
        wait_for_file(tmp_path / "ready", 60, first)
    finally:
        first.kill()
    assert workload.side_effects(tmp_path) == []  # nothing deferred ran before the decision
    second = Worker("dbos_worker.py", ["recover", *_args(tmp_path, db, "approval", "--approve")], tmp_path, "second")
    out = result(tmp_path, "recover", second)
    assert out["outcome"] == "completed"
    assert out["output"] == "done"
    assert out["pending"] == []
    assert out["results"] == [["appended yes", workload.DENIAL, "free"], []]
    # the approved call ran exactly once, the denied one never
    assert workload.side_effects(tmp_path) == ["yes"]
    # each hook ran once, in the step it wraps: the recovered worker replayed the first worker's steps
    # without running their hooks again, and an approved call skips the hooks before it (asked already)
    assert sorted(workload.hook_lines(tmp_path)) == sorted(
        [
            "before_model", "after_model",  # turn 1, first worker
            "before_tool append yes", "before_tool append no", "before_tool tag free", "after_tool tag free",
            "after_tool append yes",  # the approved call, second worker
            "before_model", "after_model",  # turn 2, second worker
        ]
    )  # fmt: skip
    assert out["events"].count("ToolCallStarted") == 1  # the second worker ran only the approved call
