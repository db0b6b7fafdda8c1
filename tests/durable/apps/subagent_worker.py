"""A worker process running an agent with a sub-agent durably, on DBOS or on Temporal (run as a script; the
test kills it while the run waits for the approval of the sub-agent's call, and starts another).

    python subagent_worker.py ENGINE MODE --workdir DIR --workflow-id ID [--db URL] [--address HOST:PORT]
                              [--task-queue Q]

The agent ``boss`` calls its sub-agent ``researcher`` (call ``p1``), whose tool ``delete`` requires approval
(call ``k1``). ``start`` starts the run and writes ``ready`` (the calls the run waits on, as JSON) once it
waits, then sleeps until killed. ``recover`` starts a worker (DBOS recovers the run at launch; Temporal's new
worker takes the workflow), tries decisions bound to other waits (each refused: ``refused`` in the result),
approves the call with the key it was listed with, and writes ``result-recover.json``.

Side effects land in ``DIR``: ``side-effects.log`` (a line per ``delete`` that ran) and ``requests.log`` (a
line per model request, naming the agent and the process), so the test counts what ran, across processes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout, for tests.durable.workload

from loopctl import Agent
from loopctl.durable.approvals import ApprovalKey, AwaitedCall, awaited_to_dict, bound_to_dict
from loopctl.engine import Approve, SubAgentEvent
from loopctl.errors import ApprovalError
from loopctl.message import Message, Role, ToolCallPart
from loopctl.providers.base import ModelRequest
from loopctl.response import Usage
from loopctl.testing import ScriptedClient
from loopctl.tool import tool
from tests.durable import workload

BOSS_USAGE = Usage(input_tokens=100, output_tokens=10)
CHILD_USAGE = Usage(input_tokens=7, output_tokens=3)


def agents(workdir: Path, mode: str, permission: Any = None) -> Agent[None, str]:
    """``boss``, with ``researcher`` among its tools; each model request is logged as ``<agent> <mode>``.
    ``permission`` is ``boss``'s permission callback."""

    def scripted(name: str, replies: list[Message], usage: Usage) -> ScriptedClient:
        def reply(request: ModelRequest) -> Message:
            with (workdir / "requests.log").open("a") as f:
                f.write(f"{name} {mode}\n")
            return replies[min(workload.replies_so_far(request), len(replies) - 1)]

        return ScriptedClient(reply, usage=usage)

    @tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        with (workdir / "side-effects.log").open("a") as f:
            f.write(path + "\n")
        return f"deleted {path}"

    def call(call_id: str, name: str, args: dict[str, Any]) -> Message:
        return Message.new(Role.ASSISTANT, [ToolCallPart(id=call_id, name=name, input=args)])

    researcher = Agent(
        scripted(
            "researcher", [call("k1", "delete", {"path": "/tmp/old.log"}), Message.assistant("Gone.")], CHILD_USAGE
        ),
        tools=[delete],
        name="researcher",
        description="Cleans up files.",
    )
    return Agent(
        scripted("boss", [call("p1", "researcher", {"input": "delete /tmp/old.log"}), Message.assistant("Done.")], BOSS_USAGE),
        tools=[researcher],
        name="boss",
        permission=permission,
    )  # fmt: skip


def others(shown: AwaitedCall, engine: str) -> list[ApprovalKey]:
    """Keys of waits the run is not in, for the call it waits on, that ``approve`` can refuse at once: the
    sub-agent's bare call id with the parent's path, another run's; on DBOS also the call without the
    sub-agent's path and with the parent's call in another turn (a Temporal update naming a wait the run has
    not reached yet waits for it: those go by signal, :func:`decide`)."""
    key = shown.key
    keys = [
        ApprovalKey(key.run, key.turn, "k1", key.path),
        ApprovalKey(f"{key.run}-other", key.turn, key.call, key.path),
    ]
    if engine == "dbos":
        keys += [ApprovalKey(key.run, key.turn, key.call), ApprovalKey(key.run, key.turn, key.call, ((2, "p1"),))]
    return keys


async def decide(
    engine: str, approve: Any, pending: Any, workflow_id: str, send: Any
) -> tuple[list[str], list[dict[str, Any]], bool]:
    """Try the keys of other waits (each must be refused); send the decision without the sub-agent's path
    raw (the DBOS topic, the Temporal signal), which the run must drop; then approve the call with its listed
    key. Returns the refusals, the calls shown, and whether the run still waited after the raw decision."""
    shown: tuple[AwaitedCall, ...] = ()
    for _ in range(400):
        shown = await pending(workflow_id)
        if shown:
            break
        await asyncio.sleep(0.05)
    refused: list[str] = []
    for key in others(shown[0], engine):
        try:
            await approve(workflow_id, {key: Approve()})
        except ApprovalError as exc:
            refused.append(str(exc))
    key = shown[0].key
    await send(workflow_id, bound_to_dict({ApprovalKey(key.run, key.turn, key.call): Approve()}))
    await asyncio.sleep(0.5)  # time for the run to read (and drop) it
    still = [a.key for a in await pending(workflow_id)] == [key]
    await approve(workflow_id, {key: Approve()})
    return refused, [awaited_to_dict(a) for a in shown], still


def result(run: Any, events: list[str], decided: tuple[list[str], list[dict[str, Any]], bool]) -> dict[str, Any]:
    refused, shown, still = decided
    return {
        "still_waiting": still,
        "outcome": run.outcome.kind.value,
        "output": run.output,
        "usage": [run.usage.input_tokens, run.usage.output_tokens],
        "pending": [p.id for p in run.pending_approvals],
        "tool_results": [[str(r.result.output) for r in t.tool_calls] for t in run.turns],
        "events": events,
        "refused": refused,
        "shown": shown,
    }


async def announce(pending: Any, workflow_id: str, workdir: Path) -> None:
    """Write ``ready`` (the calls the run waits on) once it waits."""
    while True:
        shown = await pending(workflow_id)
        if shown:
            workload.write_json(workdir / "ready", [awaited_to_dict(a) for a in shown])
            return
        await asyncio.sleep(0.05)


def event_name(event: Any) -> str:
    if isinstance(event, SubAgentEvent):
        return f"{event.agent}:{type(event.event).__name__}"
    return type(event).__name__


async def run_dbos(args: argparse.Namespace) -> None:
    from dbos import DBOS

    from loopctl.durable._payloads import dumps
    from loopctl.durable.dbos import APPROVALS_TOPIC, DBOSLoop

    DBOS(config={"name": "loopctl-tests", "system_database_url": args.db, "log_level": "WARNING"})
    events: list[str] = []
    loop = DBOSLoop.from_agent(agents(args.workdir, args.mode), name="boss")
    loop.observers.append(lambda e: events.append(event_name(e)))
    DBOS.launch()
    wid = args.workflow_id
    if args.mode == "start":
        running = asyncio.ensure_future(loop.run("Clean up.", workflow_id=wid))
        await announce(loop.pending, wid, args.workdir)
        await asyncio.sleep(3600)
        running.cancel()

    async def send(workflow_id: str, message: dict[str, Any]) -> None:
        await DBOS.send_async(workflow_id, dumps({"approvals": message}), APPROVALS_TOPIC)

    decided = await decide("dbos", loop.approve, loop.pending, wid, send)
    handle = await DBOS.retrieve_workflow_async(wid)
    run = await handle.get_result(polling_interval_sec=0.05)
    workload.write_json(args.workdir / "result-recover.json", result(run, events, decided))


async def run_temporal(args: argparse.Namespace) -> None:
    from temporalio.client import Client
    from temporalio.common import RetryPolicy
    from temporalio.worker import Worker

    from loopctl.durable._payloads import run_from_dict
    from loopctl.durable.temporal import (
        APPROVE_SIGNAL,
        WORKFLOW_NAME,
        LoopWorkflow,
        LoopWorkflowInput,
        TemporalLoop,
        approve,
        pending_approvals,
    )

    client = await Client.connect(args.address)
    events: list[str] = []
    loop = TemporalLoop.from_agent(
        agents(args.workdir, args.mode),
        name="boss",
        heartbeat_timeout=timedelta(seconds=1),
        activity_retry=RetryPolicy(initial_interval=timedelta(milliseconds=100)),
    )
    loop.observers.append(lambda e: events.append(event_name(e)))
    wid = args.workflow_id
    # The worker to be killed caches no workflow (else the next task waits 5 s for its sticky queue).
    cached = 0 if args.mode == "start" else 100
    worker = Worker(
        client, task_queue=args.task_queue, workflows=[LoopWorkflow], activities=loop.activities, max_cached_workflows=cached
    )  # fmt: skip
    async with worker:
        if args.mode == "start":
            params = LoopWorkflowInput(loop="boss", input="Clean up.")
            await client.start_workflow(WORKFLOW_NAME, params, id=wid, task_queue=args.task_queue)
            await announce(lambda w: pending_approvals(client, w), wid, args.workdir)
            await asyncio.sleep(3600)

        async def approving(workflow_id: str, decisions: Any) -> Any:
            return await approve(client, workflow_id, decisions)

        async def send(workflow_id: str, message: dict[str, Any]) -> None:
            await client.get_workflow_handle(workflow_id).signal(APPROVE_SIGNAL, message)

        decided = await decide("temporal", approving, lambda w: pending_approvals(client, w), wid, send)
        out = await client.get_workflow_handle(wid).result()
    run = run_from_dict(out["run"], loop.output_values)
    workload.write_json(args.workdir / "result-recover.json", result(run, events, decided))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("engine", choices=["dbos", "temporal"])
    p.add_argument("mode", choices=["start", "recover"])
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--workflow-id", required=True)
    p.add_argument("--db", default=None)
    p.add_argument("--address", default=None)
    p.add_argument("--task-queue", default=None)
    args = p.parse_args()
    try:
        asyncio.run(run_dbos(args) if args.engine == "dbos" else run_temporal(args))
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    # The result is written and every record committed: exit at once (DBOS.destroy() waits for its threads;
    # the Temporal SDK's bridge can abort at interpreter finalization, temporalio/sdk-python#300).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
