"""A DBOS worker process for the durable tests (run as a script; the test kills it and starts it again).

    python dbos_worker.py MODE --workdir DIR --db URL --scenario NAME --workflow-id ID [--executor ID]
                          [--without-tool NAME] [--recover-executor ID] [--app-version V] [--approve]

``start`` runs the scenario as workflow ``ID``; ``recover`` launches DBOS (which recovers this executor's
pending runs) and waits for ``ID``; ``standby`` launches, waits for the file ``recover-now``, then hands the
runs of ``--recover-executor`` to itself. Each writes ``result-MODE.json`` (the run's summary) in ``DIR``.

The ``approval`` scenario defers its ``append`` calls: ``start`` writes ``ready`` once the run waits for
approvals; ``recover --approve`` approves one and denies the other once DBOS has launched.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout, for tests.durable.workload

from dbos import DBOS

from loopctl.durable.dbos import DBOSLoop, recover
from loopctl.engine import Approve, Deny
from tests.durable import workload


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["start", "recover", "standby"])
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--scenario", required=True)
    p.add_argument("--workflow-id", required=True)
    p.add_argument("--executor", default=None)
    p.add_argument("--without-tool", default=None)
    p.add_argument("--recover-executor", default=None)
    p.add_argument("--app-version", default=None)
    p.add_argument("--approve", action="store_true")
    args = p.parse_args()
    workdir: Path = args.workdir
    workflow_id: str = args.workflow_id

    config = {"name": "loopctl-tests", "system_database_url": args.db, "log_level": "WARNING"}
    if args.executor:
        config["executor_id"] = args.executor
    if args.app_version:
        config["application_version"] = args.app_version
    DBOS(config=config)  # type: ignore[arg-type]

    async def siblings_recorded() -> None:
        # the other calls of the turn (the appends) must be recorded before the test kills this process
        expected = sum(1 for name, _ in workload.SCENARIOS[args.scenario][0] if name == "append")
        while True:
            steps = await DBOS.list_workflow_steps_async(workflow_id)
            done = [s for s in steps if s["function_name"] == "wl.tool.append" and s["output"] is not None]
            if len(done) >= expected:
                return
            await asyncio.sleep(0.02)

    tools = [t for t in workload.tools(workdir, siblings_recorded) if t.name != args.without_tool]
    events: list[str] = []
    approval = args.scenario == "approval"
    loop = DBOSLoop(
        workload.model(args.scenario),
        tools,
        name="wl",
        observers=[lambda e: events.append(type(e).__name__)],
        permission=workload.defer_appends if approval else None,
        hooks=[workload.FileHooks(workdir)] if approval else (),
    )

    async def announce_pause() -> None:
        while not await loop.pending(workflow_id):
            await asyncio.sleep(0.05)
        (workdir / "ready").write_text("paused")

    async def run() -> None:
        DBOS.launch()
        if args.mode == "start":
            watcher = asyncio.ensure_future(announce_pause()) if approval else None
            result = await loop.run("go", workflow_id=workflow_id)
            if watcher is not None:
                watcher.cancel()
        else:
            if args.approve:
                await loop.approve(workflow_id, {workload.APPROVED: Approve(), workload.DENIED: Deny(workload.DENIAL)})
            if args.mode == "standby":
                while not (workdir / "recover-now").exists():
                    await asyncio.sleep(0.02)
                resumed = await recover([args.recover_executor])
                (workdir / "resumed.txt").write_text(",".join(resumed))
            handle = await DBOS.retrieve_workflow_async(workflow_id)
            result = await handle.get_result(polling_interval_sec=0.05)  # DBOS polls each second by default
        workload.write_json(workdir / f"result-{args.mode}.json", workload.summary(result, events))

    try:
        asyncio.run(run())
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    # The result is written and every record committed: exit at once (DBOS.destroy() waits for its threads).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
