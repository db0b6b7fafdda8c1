"""``loopctl web --dbos URL``: a DBOS run waiting for approvals in another process (here, the test's) is listed
by the page's API and decided from it: each decision bound to the wait it answers, sent through DBOS."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from loopctl.testing import ScriptedClient
from tests.durable import workload
from tests.ui.conftest import WebServer, sample_project

pytest.importorskip("dbos")

from dbos import DBOS

from loopctl.durable.dbos import DBOSLoop


@pytest.fixture
def system_db(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'system.sqlite'}"
    DBOS(config={"name": "loopctl-web-tests", "system_database_url": url, "log_level": "WARNING"})
    yield url
    DBOS.destroy(destroy_registry=True)


async def _listed(base: str, workflow_id: str, path: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        for _ in range(400):
            waiting = (await client.get(base + "api/dbos")).json()
            for w in waiting:
                if w["workflowId"] == workflow_id and [c["input"] for c in w["calls"]] == [{"path": path}]:
                    return dict(w)
            await asyncio.sleep(0.05)
    raise AssertionError(f"{workflow_id} never listed waiting on {path}")


async def test_the_page_decides_a_dbos_run_waiting_elsewhere(system_db: str, tmp_path: Path) -> None:
    deleter = workload.Deleter()
    deleter.gate.set()
    loop = DBOSLoop(ScriptedClient(workload.deleting), [deleter.tool], name="ops", permission=workload.ask_first)
    DBOS.launch()
    task = asyncio.ensure_future(loop.run("clean up", workflow_id="ops-web-1"))
    server = await asyncio.to_thread(
        WebServer, sample_project(tmp_path / "p"), tmp_path / "s.db", "--model", "demo", "--dbos", system_db
    )
    try:
        html = (await asyncio.to_thread(httpx.get, server.url)).text
        token = re.search(r'name="loopctl-token" content="([^"]+)"', html)
        assert token is not None
        headers = {"X-Loopctl-Token": token.group(1)}
        first = await _listed(server.url, "ops-web-1", "/tmp/scratch")
        [call] = first["calls"]
        assert call["name"] == "delete" and call["key"] == {"run": "ops-web-1", "turn": 1, "call": workload.REPEATED}
        async with httpx.AsyncClient() as client:
            sent = await client.post(
                server.url + "api/dbos/ops-web-1/approve",
                json={"decisions": {call["id"]: {"decision": "approve"}}},
                headers=headers,
            )
            assert sent.status_code == 200, sent.text
            await _listed(server.url, "ops-web-1", "/etc/important")  # the run went on, and waits again
            denied = await client.post(
                server.url + "api/dbos/ops-web-1/approve",
                json={"decisions": {call["id"]: {"decision": "deny", "reason": "not that one"}}},
                headers=headers,
            )
            assert denied.status_code == 200
            unknown = await client.post(
                server.url + "api/dbos/ops-web-1/approve",
                json={"decisions": {"no-such-call": {"decision": "approve"}}},
                headers=headers,
            )
        run = await asyncio.wait_for(task, 60)
        assert run.outcome.kind.value == "completed"
        assert deleter.deleted == ["/tmp/scratch"]
        assert unknown.status_code == 400
    finally:
        await asyncio.to_thread(server.stop)
