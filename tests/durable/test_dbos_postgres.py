"""DBOS on PostgreSQL: several workers share one system database; when one is killed mid-run, another
recovers its run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.durable import workload
from tests.durable.harness import Worker, result, wait_for_file

pytest.importorskip("dbos")


def two_workers_one_killed(tmp_path: Path, db: str) -> None:
    common = ["--workdir", str(tmp_path), "--db", db, "--scenario", "sequential", "--workflow-id", "shared-1"]
    a = Worker("dbos_worker.py", ["start", *common, "--executor", "worker-a"], tmp_path, "worker-a")
    b = Worker(
        "dbos_worker.py",
        ["standby", *common, "--executor", "worker-b", "--recover-executor", "worker-a"],
        tmp_path,
        "worker-b",
    )
    try:
        wait_for_file(tmp_path / "ready", 60, a, b)
        a.kill()
        (tmp_path / "release").touch()
        (tmp_path / "recover-now").touch()
        out = result(tmp_path, "standby", b)
    finally:
        a.kill()
        b.kill()
    assert (tmp_path / "resumed.txt").read_text() == "shared-1"
    assert out["outcome"] == "completed"
    assert out["output"] == "done"
    assert out["results"] == [["appended first"], ["released second"], []]
    assert workload.side_effects(tmp_path) == ["first", "block second", "block second"]
    # worker B saw only the steps it ran: the rest of the run was replayed from the records
    assert out["events"].count("RunStarted") == 0
    assert out["events"].count("TurnFinished") == 1


def test_two_workers_one_killed_the_other_recovers_its_run(tmp_path: Path, dbos_postgres_url: str) -> None:
    two_workers_one_killed(tmp_path, dbos_postgres_url)
