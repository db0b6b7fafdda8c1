"""DBOSLoop in one process, on a SQLite system database: the mapping of a run onto a workflow and steps,
replay from the records, cancellation and failures."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from loopctl.engine import BareLoop, OutcomeKind, RunConfig
from loopctl.errors import AuthenticationError
from loopctl.message import Message, Role, ToolCallPart
from loopctl.testing import ScriptedClient
from loopctl.tool import tool
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
            Message.new("assistant", [ToolCallPart(id="w1", name="wait", input={})]),
            "unused",
        ]
    )
    loop = DBOSLoop(client, [*workload.tools(tmp_path), wait], name="wl")
    dbos_sqlite.launch()
    task = asyncio.ensure_future(loop.run("go", workflow_id="long"))
    await asyncio.wait_for(started.wait(), 10)
    await loop.cancel("long")
    run = await asyncio.wait_for(task, 10)
    assert run.outcome.kind is OutcomeKind.CANCELLED
    # the coherent prefix: the input, the first call with its result; the unanswered call is dropped
    roles = [(m.role, [type(p).__name__ for p in m.parts]) for m in loop.history]
    assert roles == [
        (Role.USER, ["TextPart"]),
        (Role.ASSISTANT, ["ToolCallPart"]),
        (Role.USER, ["ToolResultPart"]),
    ]
    assert await dbos_sqlite.get_workflow_status_async(cancel_marker_id("long")) is not None
    assert client.calls == 2


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
    async def fast() -> str:
        """Finish first."""
        return "fast"

    @tool
    async def medium() -> str:
        """Finish second."""
        await asyncio.sleep(0.1)
        return "medium"

    calls = [ToolCallPart(id=f"c{i}", name=n, input={}) for i, n in enumerate(["slow", "fast", "medium", "fast"])]
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
