"""DBOSLoop in one process, on a SQLite system database: the mapping of a run onto a workflow and steps,
replay from the records, cancellation and failures; typed output, deps, instructions and streaming."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from loopctl.engine import (
    Approve,
    BareLoop,
    Block,
    Deny,
    Hook,
    LimitHit,
    Modify,
    OutcomeKind,
    RunConfig,
    SessionConfig,
    UsageLimits,
)
from loopctl.errors import (
    ApprovalError,
    AuthenticationError,
    FallbackFailed,
    HookFailed,
    OutputInvalid,
    OutputValidationError,
    RunFailed,
    ServerError,
)
from loopctl.message import Message, Role, ToolCallPart
from loopctl.output import RejectOutput
from loopctl.pricing import price
from loopctl.providers import FallbackClient
from loopctl.testing import ScriptedClient
from loopctl.tool import RunContext, ToolContext, tool
from tests.durable import workload

pytest.importorskip("dbos")

from loopctl.durable.dbos import DBOSLoop, StepNames, cancel_marker_id

FIXTURES = Path(__file__).parent / "fixtures"


async def _steps(dbos: Any, workflow_id: str) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = await dbos.list_workflow_steps_async(workflow_id)
    return steps


def _shape(run: Any) -> list[Any]:
    """A run without its timings."""
    return [
        run.outcome,
        run.output,
        run.usage,
        [(t.index, t.input, t.output, [(r.call, r.result, r.ran) for r in t.tool_calls]) for t in run.turns],
    ]


async def test_a_run_is_a_workflow_whose_steps_have_the_stable_names(dbos_sqlite: Any, tmp_path: Path) -> None:
    loop = DBOSLoop(workload.model("plain"), workload.tools(tmp_path), name="wl")
    dbos_sqlite.launch()
    run = await loop.run("go", workflow_id="run-1")
    assert run.outcome.kind is OutcomeKind.COMPLETED
    # Compatibility data: a pending run recorded by this release is recovered by the next one only if the
    # step sequence stays the same (docs/durable.md, "Compatibility").
    expected = json.loads((FIXTURES / "dbos-steps-plain.json").read_text())
    assert [s["function_name"] for s in await _steps(dbos_sqlite, "run-1")] == expected
    assert (await dbos_sqlite.get_workflow_status_async("run-1")).name == "wl.run"


async def test_a_durable_run_decides_what_a_plain_run_decides(dbos_sqlite: Any, tmp_path: Path) -> None:
    loop = DBOSLoop(workload.model("plain"), workload.tools(tmp_path), name="wl")
    dbos_sqlite.launch()
    durable = await loop.run("go")
    plain = await BareLoop(workload.model("plain"), workload.tools(tmp_path)).run("go")
    assert _shape(durable) == _shape(plain)
    assert len(durable.turns) == 3


async def test_successive_runs_continue_the_conversation(dbos_sqlite: Any, tmp_path: Path) -> None:
    client = ScriptedClient(["one", "two"])
    loop = DBOSLoop(client, [], name="chat")
    dbos_sqlite.launch()
    await loop.run("first")
    run = await loop.run("second")
    assert run.output == "two"
    assert [m.text_content() for m in loop.history] == ["first", "one", "second", "two"]
    assert [m.text_content() for m in client.requests[1].messages] == ["first", "one", "second"]


async def test_starting_a_workflow_id_that_ran_returns_its_recorded_run(dbos_sqlite: Any, tmp_path: Path) -> None:
    client = ScriptedClient(["the answer", "another"])
    loop = DBOSLoop(client, [], name="chat")
    dbos_sqlite.launch()
    first = await loop.run("q", workflow_id="once")
    again = await DBOSLoop.run(loop, "q", workflow_id="once")
    assert again.output == first.output == "the answer"
    assert client.calls == 1


async def test_a_replay_uses_the_records_and_emits_no_events_for_them(dbos_sqlite: Any, tmp_path: Path) -> None:
    events: list[Any] = []
    client = workload.model("plain")
    loop = DBOSLoop(client, workload.tools(tmp_path), name="wl", observers=[events.append])
    dbos_sqlite.launch()
    original = await loop.run("go", workflow_id="run-1")
    calls, seen = client.calls, len(events)
    last_model = max(s["function_id"] for s in await _steps(dbos_sqlite, "run-1") if s["function_name"] == "wl.model")
    # Re-run the workflow: every step before the last model call is replayed from its record.
    fork = await dbos_sqlite.fork_workflow_async("run-1", last_model)
    replayed = await fork.get_result()
    assert _shape(replayed) == _shape(original)
    assert client.calls == calls + 1  # only the last model call ran again
    # the run's clock is the recorded durations of its steps: replayed turns read what the first run measured
    assert [t.duration for t in replayed.turns[:-1]] == [t.duration for t in original.turns[:-1]]
    assert all(t.duration > 0 for t in original.turns)
    assert original.duration >= sum(t.duration for t in original.turns)
    kinds = [type(e).__name__ for e in events[seen:]]
    assert kinds[0] == "TurnStarted" and kinds[-2:] == ["TurnFinished", "RunFinished"]
    assert "RunStarted" not in kinds and "ToolCallStarted" not in kinds
    assert [e.turn for e in events[seen:] if type(e).__name__ == "TurnFinished"] == [3]


async def test_a_failed_model_call_is_recorded_and_replays_as_the_same_failure(
    dbos_sqlite: Any, tmp_path: Path
) -> None:
    client = ScriptedClient([AuthenticationError("bad key", provider="openai", status=401)])
    loop = DBOSLoop(client, [], name="chat")
    dbos_sqlite.launch()
    run = await loop.run("hi", workflow_id="bad")
    assert run.outcome.kind is OutcomeKind.FAILED
    assert run.outcome.error_type == "AuthenticationError"
    assert run.outcome.error == "openai: bad key (HTTP 401)"
    model_step = next(s for s in await _steps(dbos_sqlite, "bad") if s["function_name"] == "chat.model")
    replayed = await (await dbos_sqlite.fork_workflow_async("bad", model_step["function_id"] + 1)).get_result()
    assert replayed.outcome == run.outcome
    assert client.calls == 1
    # the error itself crosses the pickled result: same class, text and attributes
    stored = await (await dbos_sqlite.retrieve_workflow_async("bad")).get_result()
    assert type(stored.error) is AuthenticationError
    assert (str(stored.error), stored.error.status) == ("openai: bad key (HTTP 401)", 401)
    with pytest.raises(RunFailed) as raised:
        stored.raise_for_outcome()
    assert raised.value.__cause__ is stored.error


async def test_a_cancel_from_outside_ends_the_run_cancelled_with_salvage(dbos_sqlite: Any, tmp_path: Path) -> None:
    started = asyncio.Event()

    @tool
    async def wait() -> str:
        """Wait a long time."""
        started.set()
        await asyncio.sleep(60)
        return "never"

    client = ScriptedClient(
        [
            Message.new("assistant", [ToolCallPart(id="t1", name="tag", input={"text": "kept"})]),
            Message.new(
                "assistant",
                [ToolCallPart(id="t2", name="tag", input={"text": "sent"}), ToolCallPart(id="w1", name="wait", input={})],
            ),
            "unused",
        ]
    )
    loop = DBOSLoop(client, [*workload.tools(tmp_path), wait], name="wl")
    dbos_sqlite.launch()
    task = asyncio.ensure_future(loop.run("go", workflow_id="long"))
    await asyncio.wait_for(started.wait(), 10)
    for _ in range(500):  # the second tag call's step is recorded: it came back before the cancel
        if sum(s["function_name"] == "wl.tool.tag" for s in await _steps(dbos_sqlite, "long")) == 2:
            break
        await asyncio.sleep(0.01)
    await loop.cancel("long")
    run = await asyncio.wait_for(task, 10)
    assert run.outcome.kind is OutcomeKind.CANCELLED
    # the input, the first call with its result, and the cut-off batch: the call that finished keeps its
    # result (issue 18: a cancel forgot the tools that had run), the one in flight is answered as such
    roles = [(m.role, [type(p).__name__ for p in m.parts]) for m in loop.history]
    assert roles == [
        (Role.USER, ["TextPart"]),
        (Role.ASSISTANT, ["ToolCallPart"]),
        (Role.USER, ["ToolResultPart"]),
        (Role.ASSISTANT, ["ToolCallPart", "ToolCallPart"]),
        (Role.USER, ["ToolResultPart", "ToolResultPart"]),
    ]
    answers = [(str(p.output), p.is_error) for p in loop.history[-1].parts]  # type: ignore[union-attr]
    assert answers == [
        ("sent", False),
        ("Not known whether it ran: the run was cancelled before its result was recorded.", True),
    ]
    assert await dbos_sqlite.get_workflow_status_async(cancel_marker_id("long")) is not None
    assert client.calls == 2


# --- a committed record (a run killed mid tool call) recovered by this release ----------------------------------

PENDING = FIXTURES / "dbos-pending-sequential.sql"
"""A SQLite system database, as SQL, of workflow ``committed-1`` of the ``sequential`` workload, recorded by a
worker killed in its ``block`` tool call (``apps/dbos_worker.py start ... --app-version loopctl-committed-1``,
then SIGKILL): the model reply, the ``append`` call and the next reply are recorded, the ``block`` call is not."""


@pytest.fixture
def dbos_committed(tmp_path: Path) -> Iterator[Any]:
    """``DBOS(config=...)`` on a copy of the committed record (application version pinned, as DBOS recovers
    only the runs of its own version); build the loop, then launch (which recovers ``committed-1``)."""
    dbos = pytest.importorskip("dbos")
    with contextlib.closing(sqlite3.connect(tmp_path / "system.sqlite")) as conn:
        conn.executescript(PENDING.read_text())
    dbos.DBOS(
        config={
            "name": "loopctl-tests",
            "system_database_url": f"sqlite:///{tmp_path / 'system.sqlite'}",
            "application_version": "loopctl-committed-1",
            "log_level": "WARNING",
        }
    )
    yield dbos.DBOS
    dbos.DBOS.destroy(destroy_registry=True)


async def test_a_committed_record_replays_and_the_run_finishes_without_repeating_a_recorded_call(
    dbos_committed: Any, tmp_path: Path
) -> None:
    (tmp_path / "release").touch()
    events: list[str] = []
    client = workload.model("sequential")
    observers = [lambda e: events.append(type(e).__name__)]
    DBOSLoop(client, workload.tools(tmp_path), name="wl", observers=observers)
    dbos_committed.launch()
    run = await (await dbos_committed.retrieve_workflow_async("committed-1")).get_result(polling_interval_sec=0.05)
    assert run.outcome.kind is OutcomeKind.COMPLETED
    assert workload.summary(run)["results"] == [["appended first"], ["released second"], []]
    assert workload.side_effects(tmp_path) == ["block second"]  # the recorded append did not run again
    assert client.calls == 1  # only the last reply: the two recorded ones were read from the record
    assert events.count("RunStarted") == 0
    assert (events.count("ToolCallStarted"), events.count("TurnFinished")) == (1, 1)


async def test_a_change_that_breaks_determinism_is_caught_when_the_committed_record_replays(
    dbos_committed: Any, tmp_path: Path
) -> None:
    # The recorded first reply calls `append`; without that tool the machine answers the call itself, so the
    # next step is a model call where the record holds the tool step: DBOS refuses to go on.
    tools = [t for t in workload.tools(tmp_path) if t.name != "append"]
    DBOSLoop(workload.model("sequential"), tools, name="wl")
    dbos_committed.launch()
    handle = await dbos_committed.retrieve_workflow_async("committed-1")
    with pytest.raises(Exception, match=r"wl\.tool\.append") as caught:
        await handle.get_result(polling_interval_sec=0.05)
    assert type(caught.value).__name__ == "DBOSUnexpectedStepError"  # "check that your workflow is deterministic"
    assert workload.side_effects(tmp_path) == []


def test_names_make_the_stable_step_names() -> None:
    names = StepNames("support-bot")
    assert (names.workflow, names.start, names.model, names.summarize, names.cancel) == (
        "support-bot.run",
        "support-bot.start",
        "support-bot.model",
        "support-bot.summarize",
        "support-bot.cancel",
    )
    assert names.tool("read_file") == "support-bot.tool.read_file"


@pytest.mark.parametrize("bad", ["", "has.dot", "has space", "x" * 201])
def test_a_name_that_cannot_prefix_step_names_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="durable loop's name"):
        StepNames(bad)


async def test_parallel_tool_steps_are_numbered_in_call_order_whatever_order_they_finish(
    dbos_sqlite: Any, tmp_path: Path
) -> None:
    @tool
    async def slow() -> str:
        """Finish last."""
        await asyncio.sleep(0.3)
        return "slow"

    @tool
    async def fast(n: int = 0) -> str:
        """Finish first."""
        return "fast"

    @tool
    async def medium() -> str:
        """Finish second."""
        await asyncio.sleep(0.1)
        return "medium"

    # the two fast calls differ (identical calls of one reply would run once)
    calls = [
        ToolCallPart(id=f"c{i}", name=n, input={"n": 1} if i == 3 else {})
        for i, n in enumerate(["slow", "fast", "medium", "fast"])
    ]
    client = ScriptedClient(lambda r: Message.new("assistant", calls) if workload.replies_so_far(r) == 0 else "done")
    loop = DBOSLoop(client, [slow, fast, medium], name="par")
    dbos_sqlite.launch()
    # at most two at once: the third and fourth calls start when a slot frees, in completion order
    original = await loop.run("go", workflow_id="par-1", config=RunConfig(max_concurrency=2))
    steps = await _steps(dbos_sqlite, "par-1")
    assert [s["function_name"] for s in steps if ".tool." in s["function_name"]] == [
        "par.tool.slow",
        "par.tool.fast",
        "par.tool.medium",
        "par.tool.fast",
    ]
    # a replay from the first tool step on gets each record back at its call
    first_tool = min(s["function_id"] for s in steps if ".tool." in s["function_name"])
    replayed = await (await dbos_sqlite.fork_workflow_async("par-1", first_tool + 2)).get_result()
    assert _shape(replayed) == _shape(original)
    assert [r.result.output.root for r in replayed.turns[0].tool_calls] == ["slow", "fast", "medium", "fast"]


# --- what a plain run takes, in a durable run: typed output, deps, instructions, streaming -------------------


Verdict = workload.Verdict
Deps = workload.Deps
_final = workload.final


async def test_a_typed_output_is_checked_in_the_model_step_and_comes_back_validated(
    dbos_sqlite: Any, tmp_path: Path
) -> None:
    replies = [
        _final("f1", label="ok", score="high"),  # not valid: the model is told, and tries again
        _final("f2", label="ok", score=3),  # valid, but the validator rejects it
        _final("f3", label="ok", score=5),
    ]
    client = ScriptedClient(replies)
    checked: list[Verdict] = []

    def validator(value: Verdict) -> Verdict:
        checked.append(value)
        if value.score < 5:
            raise RejectOutput("the score must be at least 5")
        return value

    loop = DBOSLoop(client, [], name="typed", output_type=Verdict, output_validator=validator)
    dbos_sqlite.launch()
    cfg = RunConfig(output_retries=2)
    run = await loop.run("judge", cfg, workflow_id="typed-1")
    assert run.ok
    assert run.output == Verdict(label="ok", score=5)
    assert type(run.output) is Verdict
    assert [v.score for v in checked] == [3, 5]
    plain = await BareLoop(ScriptedClient(replies)).run("judge", cfg, output_type=Verdict, output_validator=validator)
    assert _shape(plain) == _shape(run)
    del checked[2:]
    # the workflow's result, as DBOS stored it (pickled), holds the validated value
    stored = await (await dbos_sqlite.retrieve_workflow_async("typed-1")).get_result()
    assert stored.output == Verdict(label="ok", score=5)
    steps = await _steps(dbos_sqlite, "typed-1")
    names = [s["function_name"] for s in steps]
    assert names == ["typed.start", "typed.model", "typed.model", "typed.model", "DBOS.setEvent"]
    last_model = steps[3]
    assert json.loads(last_model["output"])["output"]["value"] == {"label": "ok", "score": 5}
    # replayed from after the last model step: the recorded verdicts are used, the validator does not run again
    replayed = await (await dbos_sqlite.fork_workflow_async("typed-1", last_model["function_id"] + 1)).get_result()
    assert replayed.output == run.output
    assert _shape(replayed) == _shape(run)
    assert len(checked) == 2
    assert client.calls == 3


async def test_a_run_that_ends_output_invalid_keeps_its_error_in_the_stored_result(dbos_sqlite: Any) -> None:
    loop = DBOSLoop(ScriptedClient([_final("f1", label="ok")]), [], name="typed", output_type=Verdict)
    dbos_sqlite.launch()
    run = await loop.run("judge", workflow_id="bad-output", config=RunConfig(output_retries=0))
    assert run.outcome.kind is OutcomeKind.OUTPUT_INVALID
    stored = await (await dbos_sqlite.retrieve_workflow_async("bad-output")).get_result()
    assert type(stored.error) is OutputValidationError
    assert stored.error.errors == ["score: Field required"]
    with pytest.raises(OutputInvalid):
        stored.raise_for_outcome()


async def test_deps_reach_tools_and_instructions_and_are_never_recorded(dbos_sqlite: Any) -> None:
    @tool
    def whoami(ctx: ToolContext[Deps]) -> str:
        """Who the run is for."""
        return f"{ctx.deps.user} (key of {len(ctx.deps.secret)} characters)"

    client = ScriptedClient([Message.new("assistant", [ToolCallPart(id="w", name="whoami", input={})]), "done"])
    deps = Deps(user="ada", secret="s3cr3t-token-never-stored")
    config = SessionConfig(instructions=lambda ctx: f"You help {ctx.deps.user}.")
    loop = DBOSLoop(client, [whoami], config, name="deps", deps=deps)
    dbos_sqlite.launch()
    run = await loop.run("who am I?", workflow_id="deps-1")
    assert run.turns[0].tool_calls[0].result.output.root == "ada (key of 25 characters)"
    assert client.requests[0].system == "You help ada."
    recorded = [s["output"] for s in await _steps(dbos_sqlite, "deps-1")]
    [status] = await dbos_sqlite.list_workflows_async(workflow_ids=["deps-1"], load_input=True)
    assert "ada (key of 25" in " ".join(map(str, recorded))
    assert deps.secret not in " ".join(map(str, recorded)) + repr(status.input) + repr(status.output)


async def test_callable_instructions_are_evaluated_once_per_run_and_replayed_from_their_record(
    dbos_sqlite: Any, tmp_path: Path
) -> None:
    made = 0

    async def instructions(ctx: RunContext[None]) -> str:
        nonlocal made
        made += 1
        return f"instructions #{made}"

    client = workload.model("plain")
    loop = DBOSLoop(client, workload.tools(tmp_path), SessionConfig(instructions=instructions), name="wl")
    dbos_sqlite.launch()
    await loop.run("go", workflow_id="ins-1")
    assert [r.system for r in client.requests] == ["instructions #1"] * 3
    steps = await _steps(dbos_sqlite, "ins-1")
    assert [s["function_name"] for s in steps[:3]] == ["wl.start", "wl.instructions", "wl.model"]
    last_model = max(s["function_id"] for s in steps if s["function_name"] == "wl.model")
    await (await dbos_sqlite.fork_workflow_async("ins-1", last_model)).get_result()
    assert made == 1  # the replay read the recorded text
    assert client.requests[-1].system == "instructions #1"


async def test_a_stream_yields_the_runs_events_and_then_its_run(dbos_sqlite: Any, tmp_path: Path) -> None:
    seen: list[Any] = []
    loop = DBOSLoop(workload.model("plain"), workload.tools(tmp_path), name="wl", observers=[seen.append])
    dbos_sqlite.launch()
    async with loop.stream("go", workflow_id="s-1") as stream:
        events = [e async for e in stream]
    run = await stream.result()
    assert run.output == "done"
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "RunStarted"
    assert kinds[-1] == "RunFinished"
    assert (kinds.count("TurnStarted"), kinds.count("ToolCallFinished")) == (3, 3)
    assert events[-1].run.output == "done"
    assert [type(e).__name__ for e in seen] == kinds  # the loop's observers saw the same events
    # a workflow id that already ran streams nothing and gives its recorded run
    async with loop.stream("go", workflow_id="s-1") as again:
        assert [e async for e in again] == []
    assert (await again.result()).output == "done"


async def test_leaving_a_stream_early_cancels_the_run_with_salvage(dbos_sqlite: Any, tmp_path: Path) -> None:
    @tool
    async def wait() -> str:
        """Wait a long time."""
        await asyncio.sleep(60)
        return "never"

    client = ScriptedClient([Message.new("assistant", [ToolCallPart(id="w1", name="wait", input={})]), "unused"])
    loop = DBOSLoop(client, [wait], name="wl")
    dbos_sqlite.launch()
    async with loop.stream("go", workflow_id="s-2") as stream:
        async for event in stream:
            if type(event).__name__ == "ToolCallStarted":
                break
    run = await asyncio.wait_for(stream.result(), 10)
    assert run.outcome.kind is OutcomeKind.CANCELLED
    # the call cut off in flight is kept, answered: it may have acted
    assert [m.role for m in loop.history] == [Role.USER, Role.ASSISTANT, Role.USER]
    assert str(loop.history[-1].parts[0].output).startswith("Not known whether it ran")  # type: ignore[union-attr]


def test_an_output_type_pickle_cannot_store_is_refused_when_the_loop_is_built(dbos_sqlite: Any) -> None:
    class Local(BaseModel):
        x: int

    with pytest.raises(TypeError, match="cannot be pickled"):
        DBOSLoop(ScriptedClient(["x"]), [], name="local", output_type=Local)


async def test_a_second_run_at_once_on_one_loop_is_refused(dbos_sqlite: Any) -> None:
    gate = asyncio.Event()

    @tool
    async def hold() -> str:
        """Wait for the gate."""
        await gate.wait()
        return "held"

    client = ScriptedClient([Message.new("assistant", [ToolCallPart(id="h", name="hold", input={})]), "first"])
    loop = DBOSLoop(client, [hold], name="one")
    dbos_sqlite.launch()
    first = asyncio.ensure_future(loop.run("a"))
    await asyncio.sleep(0.05)
    with pytest.raises(RuntimeError, match="already running"):
        await loop.run("b")
    gate.set()
    assert (await first).output == "first"


# --- guardrails (docs/guardrails.md) on DBOS -----------------------------------------------------------------


async def test_a_usage_limit_ends_a_durable_run_limit_reached_as_a_plain_run(dbos_sqlite: Any, tmp_path: Path) -> None:
    # Limits are the machine's: the workflow state, so they come with the run (and with its recovery).
    loop = DBOSLoop(workload.model("plain"), workload.tools(tmp_path), name="wl")
    tools_loop = DBOSLoop(workload.model("plain"), workload.tools(tmp_path), name="wl2")
    dbos_sqlite.launch()
    config = RunConfig(limits=UsageLimits(requests=2))
    run = await loop.run("go", config, workflow_id="limited")
    assert run.outcome.kind is OutcomeKind.LIMIT_REACHED
    assert run.outcome.limit == LimitHit("requests", spent=2, limit=2)
    assert len(run.turns) == 2
    plain = await BareLoop(workload.model("plain"), workload.tools(tmp_path)).run("go", config)
    assert _shape(run) == _shape(plain)
    # the limit and what was spent are in the machine after the run (the event loopctl.machine)
    assert loop.machine.usage.requests == 2
    # a tool-call limit is checked before the batch that would pass it: the batch of two does not start
    few = RunConfig(limits=UsageLimits(tool_calls=1))
    run = await tools_loop.run("go", few, workflow_id="few-tools")
    assert run.outcome.kind is OutcomeKind.LIMIT_REACHED
    assert (run.outcome.limit.dimension, run.outcome.limit.spent, run.outcome.limit.needed) == ("tool_calls", 0, 2)


async def test_loop_detection_ends_a_durable_run_loop_detected(dbos_sqlite: Any, tmp_path: Path) -> None:
    def same(request: Any) -> Message:
        n = workload.replies_so_far(request)
        return Message.new("assistant", [ToolCallPart(id=f"r{n}", name="tag", input={"text": "again"})])

    loop = DBOSLoop(ScriptedClient(same), workload.tools(tmp_path), name="wl")
    dbos_sqlite.launch()
    run = await loop.run("go", RunConfig(loop_detection=2), workflow_id="looping")
    assert run.outcome.kind is OutcomeKind.LOOP_DETECTED
    plain = await BareLoop(ScriptedClient(same), workload.tools(tmp_path)).run("go", RunConfig(loop_detection=2))
    assert _shape(run) == _shape(plain)
    # the 2nd call in a row is answered with an error (the soft stop), the 3rd ends the run (its reply dropped)
    assert [[r.ran for r in t.tool_calls] for t in run.turns] == [[True], [False], []]


async def test_a_fallback_and_the_cost_are_recorded_with_the_model_step_and_replayed(
    dbos_sqlite: Any, tmp_path: Path
) -> None:
    primary = ScriptedClient(workload.down, model="primary")
    backup = workload.priced_plain()
    loop = DBOSLoop(FallbackClient(primary, backup), workload.tools(tmp_path), name="wl")
    dbos_sqlite.launch()
    run = await loop.run("go", RunConfig(max_retries=0), workflow_id="fell-back")
    one = price(workload.PRICED, "claude-sonnet-4-5", provider="anthropic")
    assert one is not None and one > 0
    assert run.outcome.kind is OutcomeKind.COMPLETED
    assert [(t.provider, t.model, t.cost) for t in run.turns] == [("anthropic", "claude-sonnet-4-5", one)] * 3
    assert run.cost == 3 * one
    assert (primary.calls, backup.calls) == (3, 3)
    # replayed from the records: earlier turns' answers, their client and their cost come from the model steps
    steps = await _steps(dbos_sqlite, "fell-back")
    last_model = max(s["function_id"] for s in steps if s["function_name"] == "wl.model")
    replayed = await (await dbos_sqlite.fork_workflow_async("fell-back", last_model)).get_result()
    assert replayed.turns[:2] == run.turns[:2]
    assert (primary.calls, backup.calls) == (4, 4)  # only the last model call ran again, falling back again
    assert replayed.cost == run.cost


async def test_every_client_of_a_fallback_chain_failing_ends_fallback_exhausted_with_each_error(
    dbos_sqlite: Any,
) -> None:
    chain = FallbackClient(
        ScriptedClient([ServerError("down")], model="a"), ScriptedClient([ServerError("out")], model="b")
    )
    loop = DBOSLoop(chain, [], name="chat")
    dbos_sqlite.launch()
    run = await loop.run("hi", RunConfig(max_retries=0), workflow_id="exhausted")
    assert run.outcome.kind is OutcomeKind.FALLBACK_EXHAUSTED
    # the stored result (DBOS pickled it) keeps each client's error
    stored = await (await dbos_sqlite.retrieve_workflow_async("exhausted")).get_result()
    assert isinstance(stored.error, FallbackFailed)
    assert [(label, type(e).__name__, str(e)) for label, e in stored.error.errors] == [
        ("scripted:a", "ServerError", str(run.error.errors[0][1])),
        ("scripted:b", "ServerError", str(run.error.errors[1][1])),
    ]


class Blocker(Hook):
    """Blocks every `append`; fails on `block`."""

    def before_tool(self, call: ToolCallPart) -> Block | None:
        """Block or fail by the tool's name."""
        if call.name == "block":
            raise RuntimeError("no blocking here")
        return Block("appending is not allowed") if call.name == "append" else None


async def test_hooks_run_inside_the_steps_they_wrap_and_a_failing_hook_fails_the_run(
    dbos_sqlite: Any, tmp_path: Path
) -> None:
    recorded = workload.FileHooks(tmp_path)
    loop = DBOSLoop(workload.model("sequential"), workload.tools(tmp_path), name="wl", hooks=[recorded, Blocker()])
    dbos_sqlite.launch()
    run = await loop.run("go", workflow_id="hooked")
    assert run.outcome.kind is OutcomeKind.FAILED
    assert run.outcome.error_type == "HookFailed"
    assert isinstance(run.error, HookFailed) and (run.error.hook, run.error.method) == ("Blocker", "before_tool")
    assert run.turns[0].tool_calls[0].result.output.root == "appending is not allowed"
    assert workload.side_effects(tmp_path) == []  # blocked, and the failing hook stopped `block` before it ran
    lines = workload.hook_lines(tmp_path)
    assert lines == [
        "before_model", "after_model", "before_tool append first",
        "before_model", "after_model", "before_tool block second",
    ]  # fmt: skip
    # replayed from the records (forked after the first tool step): no hook of a recorded step runs again
    steps = await _steps(dbos_sqlite, "hooked")
    first_tool = min(s["function_id"] for s in steps if s["function_name"] == "wl.tool.append")
    replayed = await (await dbos_sqlite.fork_workflow_async("hooked", first_tool + 1)).get_result()
    assert replayed.outcome == run.outcome
    assert workload.hook_lines(tmp_path)[len(lines) :] == ["before_model", "after_model", "before_tool block second"]


async def _paused(loop: DBOSLoop[Any], workflow_id: str) -> tuple[Any, ...]:
    for _ in range(400):
        pending = await loop.pending(workflow_id)
        if pending:
            return pending
        await asyncio.sleep(0.025)
    raise AssertionError(f"{workflow_id} never waited for approvals")


async def test_a_deferred_call_makes_the_workflow_wait_for_approve(dbos_sqlite: Any, tmp_path: Path) -> None:
    loop = DBOSLoop(workload.model("approval"), workload.tools(tmp_path), name="wl", permission=workload.defer_appends)
    dbos_sqlite.launch()
    task = asyncio.ensure_future(loop.run("go", workflow_id="waits"))
    pending = await _paused(loop, "waits")
    assert [(p.id, p.name, p.input, p.reason) for p in pending] == [
        (workload.APPROVED, "append", {"text": "yes"}, "it writes a file"),
        (workload.DENIED, "append", {"text": "no"}, "it writes a file"),
    ]
    with pytest.raises(ApprovalError, match="does not await nope"):
        await loop.approve("waits", {"nope": Approve()})
    # decisions may come in parts: the run waits again for the rest
    await loop.approve("waits", {workload.APPROVED: Modify({"text": "modified"})})
    for _ in range(400):
        if [p.id for p in await loop.pending("waits")] == [workload.DENIED]:
            break
        await asyncio.sleep(0.025)
    # The approved call runs as a step once its decision is in; the pending list can change before that step
    # finished (seen under load): wait for its effect, for a bounded time.
    for _ in range(800):
        if workload.side_effects(tmp_path):
            break
        await asyncio.sleep(0.025)
    assert workload.side_effects(tmp_path) == ["modified"]
    await loop.approve("waits", {workload.DENIED: Deny(workload.DENIAL)})
    run = await asyncio.wait_for(task, 30)
    assert run.outcome.kind is OutcomeKind.COMPLETED
    assert [[str(r.result.output) for r in t.tool_calls] for t in run.turns] == [
        ["appended modified", workload.DENIAL, "free"],
        [],
    ]
    assert workload.side_effects(tmp_path) == ["modified"]
    assert await loop.pending("waits") == ()
    steps = [s["function_name"] for s in await _steps(dbos_sqlite, "waits")]
    assert steps.count("DBOS.recv") == 2 and steps.count("wl.tool.append") == 3  # 2 deferred, 1 run


async def test_a_cancel_ends_a_run_waiting_for_approvals_cancelled(dbos_sqlite: Any, tmp_path: Path) -> None:
    loop = DBOSLoop(workload.model("approval"), workload.tools(tmp_path), name="wl", permission=workload.defer_appends)
    dbos_sqlite.launch()
    task = asyncio.ensure_future(loop.run("go", workflow_id="cancelled-wait"))
    await _paused(loop, "cancelled-wait")
    await loop.cancel("cancelled-wait")
    run = await asyncio.wait_for(task, 30)
    assert run.outcome.kind is OutcomeKind.CANCELLED
    assert workload.side_effects(tmp_path) == []
    # the turn is kept whole: the call that ran keeps its result, the undecided ones say why they did not run
    results = [p for m in loop.history for p in m.tool_results()]
    assert [(r.call_id, r.is_error) for r in results] == [
        (workload.APPROVED, True), (workload.DENIED, True), ("call-0-2", False),
    ]  # fmt: skip


async def test_a_run_that_waited_past_its_approval_timeout_pauses_and_a_new_workflow_continues_it(
    dbos_sqlite: Any, tmp_path: Path
) -> None:
    loop = DBOSLoop(
        workload.model("approval"),
        workload.tools(tmp_path),
        name="wl",
        permission=workload.defer_appends,
        approval_timeout=0.2,
    )
    dbos_sqlite.launch()
    paused = await loop.run("go", workflow_id="timed-out")
    assert paused.outcome.kind is OutcomeKind.AWAITING_APPROVAL
    assert [p.id for p in paused.pending_approvals] == [workload.APPROVED, workload.DENIED]
    assert loop.machine.pending_approvals == paused.pending_approvals
    with pytest.raises(ApprovalError, match="paused"):
        await loop.run("new input")
    done = await loop.run(
        approvals={workload.APPROVED: Approve(), workload.DENIED: Deny(workload.DENIAL)}, workflow_id="continued"
    )
    assert done.outcome.kind is OutcomeKind.COMPLETED
    assert [str(r.result.output) for r in done.resumed_calls] == ["appended yes", workload.DENIAL]
    assert workload.side_effects(tmp_path) == ["yes"]
