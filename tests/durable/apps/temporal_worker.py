"""A Temporal worker process for the durable tests (run as a script; the test kills it and starts another).

    python temporal_worker.py MODE --address HOST:PORT --task-queue Q --workdir DIR --scenario NAME
                              --workflow-id ID [--without-tool NAME]

``start`` starts a worker and the workflow ``ID`` and runs until killed; ``recover`` starts a worker and
waits for ``ID``'s result, written as ``result-recover.json`` in ``DIR``. ``history`` writes the finished
workflow's history as ``history.json``.

The ``approval`` scenario defers its ``append`` calls: ``start`` writes ``ready`` once the run waits for
approvals; ``recover`` then approves one and denies the other (the signal ``approve``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout, for tests.durable.workload

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Worker

from loopctl.durable._payloads import run_from_dict
from loopctl.durable.temporal import (
    WORKFLOW_NAME,
    LoopWorkflow,
    LoopWorkflowInput,
    TemporalLoop,
    approve,
    pending_approvals,
)
from loopctl.engine import Approve, Deny
from tests.durable import workload


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["start", "recover", "history"])
    p.add_argument("--address", required=True)
    p.add_argument("--task-queue", required=True)
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--scenario", required=True)
    p.add_argument("--workflow-id", required=True)
    p.add_argument("--without-tool", default=None)
    args = p.parse_args()
    asyncio.run(run(args))
    # Skip interpreter finalization: the SDK's bridge can abort there (temporalio/sdk-python#300), after the
    # result is written.
    sys.stdout.flush()
    os._exit(0)


async def run(args: argparse.Namespace) -> None:
    client = await Client.connect(args.address)
    workdir: Path = args.workdir
    handle = client.get_workflow_handle(args.workflow_id)

    async def siblings_recorded() -> None:
        # the other calls of the turn (the appends) must be in the history before the test kills this worker
        expected = sum(1 for name, _ in workload.SCENARIOS[args.scenario][0] if name == "append")
        while True:
            history = await handle.fetch_history()
            done = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED]
            # the first model call's completion, then the appends'
            if len(done) >= 1 + expected:
                return
            await asyncio.sleep(0.05)

    tools = [t for t in workload.tools(workdir, siblings_recorded) if t.name != args.without_tool]
    events: list[str] = []
    approval = args.scenario == "approval"
    loop = TemporalLoop(
        workload.model(args.scenario),
        tools,
        name="wl",
        observers=[lambda e: events.append(type(e).__name__)],
        permission=workload.defer_appends if approval else None,
        hooks=[workload.FileHooks(workdir)] if approval else (),
        heartbeat_timeout=timedelta(seconds=1),
        # the dead worker's activity is retried as soon as its heartbeat times out (the default waits 1 s more)
        activity_retry=RetryPolicy(initial_interval=timedelta(milliseconds=100)),
    )
    # The worker to be killed caches no workflow: otherwise the next workflow task waits for the dead worker's
    # sticky queue to time out (5 s) before any other worker may take it.
    cached = 0 if args.mode == "start" else 100
    worker = Worker(
        client,
        task_queue=args.task_queue,
        workflows=[LoopWorkflow],
        activities=loop.activities,
        max_cached_workflows=cached,
    )
    if args.mode == "history":
        history = await handle.fetch_history()
        (workdir / "history.json").write_text(history.to_json())
        return
    async with worker:
        if args.mode == "start":
            await client.start_workflow(
                WORKFLOW_NAME, LoopWorkflowInput(loop="wl", input="go"), id=args.workflow_id, task_queue=args.task_queue
            )
            if approval:
                while not await pending_approvals(client, args.workflow_id):
                    await asyncio.sleep(0.05)
                (workdir / "ready").write_text("paused")
            await asyncio.sleep(3600)
        if approval:
            await approve(
                client, args.workflow_id, {workload.APPROVED: Approve(), workload.DENIED: Deny(workload.DENIAL)}
            )
        result = await handle.result()
    workload.write_json(workdir / "result-recover.json", workload.summary(run_from_dict(result["run"]), events))


if __name__ == "__main__":
    main()
