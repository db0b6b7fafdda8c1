"""Compaction wired into the engine: long runs cross the lines several times and finish, with the history
sound after every pass (issue 5, "Wiring")."""

from __future__ import annotations

import re
from typing import Any

import pytest

from loopctl.compact import (
    PRUNE_MARKER,
    SUMMARY_HEADER,
    SUMMARY_SYSTEM_PROMPT,
    SummarizingCompactor,
)
from loopctl.engine import BareLoop, CompactionFinished, OutcomeKind, RunConfig, SessionConfig
from loopctl.message import Message, MessagePart, Retention, Role, ToolResultPart, check_conversation
from loopctl.providers import ModelRequest
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.testing import ScriptedClient
from loopctl.tool import ToolOutput, tool

BIG = "lorem ipsum dolor sit amet " * 40  # ~1,080 characters, ~270 tokens


@tool
async def read(n: int) -> ToolOutput:
    """A re-derivable read."""
    return ToolOutput(f"file {n}: {BIG}", retention=Retention.REQUERY)


@tool
async def grep(n: int) -> str:
    """An untagged search."""
    return f"hits {n}: {BIG}"


@tool
async def save(n: int) -> ToolOutput:
    """A write: its result is not re-derivable."""
    return ToolOutput(f"saved note {n}", retention=Retention.DURABLE)


def agent(turns: int) -> Any:
    """A scripted model that calls read / grep / save in turn, ``turns`` times, then answers."""
    tools = ["read", "grep", "save"]
    state = {"n": 0}

    def reply(request: ModelRequest) -> Message:
        if request.system == SUMMARY_SYSTEM_PROMPT:
            return Message.assistant("The agent read files, searched and saved notes; work continues.")
        state["n"] += 1
        n = state["n"]
        if n > turns:
            return Message.assistant("all done")
        # The model's own words are not prunable: only truncation or a summary can free them.
        return Message.new(
            Role.ASSISTANT,
            [MessagePart.text(f"step {n}: {BIG[:600]}"), MessagePart.tool_call(f"c{n}", tools[n % 3], {"n": n})],
        )

    return reply


class Watch:
    """An observer that checks the history after every compaction pass."""

    def __init__(self) -> None:
        self.loop: BareLoop | None = None
        self.passes: list[CompactionFinished] = []

    def __call__(self, event: Any) -> None:
        if isinstance(event, CompactionFinished):
            self.passes.append(event)
            assert self.loop is not None
            history = list(self.loop.machine.full_history())
            assert check_conversation(history) == [], event
            assert all(m.parts for m in history), "a pass left an empty message"


def run(turns: int, config: SessionConfig, client: ScriptedClient | None = None) -> tuple[BareLoop, Watch, Any]:
    watch = Watch()
    loop = BareLoop(client or ScriptedClient(agent(turns)), [read, grep, save], config, observers=[watch])
    watch.loop = loop
    result = loop.run_sync("work through the files", RunConfig(max_turns=turns + 5, stream=False))
    return loop, watch, result


def durable_results(messages: list[Message]) -> list[ToolResultPart]:
    return [p for m in messages for p in m.parts if isinstance(p, ToolResultPart) and p.retention is Retention.DURABLE]


def test_a_long_run_crosses_the_lines_several_times_prunes_truncates_and_finishes() -> None:
    loop, watch, result = run(60, SessionConfig(context_window=6_000))
    assert result.outcome.kind is OutcomeKind.COMPLETED
    assert result.output == "all done"
    kinds = [p.kind for p in watch.passes]
    assert kinds.count("prune") >= 2
    assert kinds.count("truncate") >= 2
    for p in watch.passes:
        assert p.tokens_after < p.tokens_before or p.kind == "prune"
    history = list(loop.history)
    assert check_conversation(history) == []
    # Every Durable result of the run is still there, verbatim.
    saved = [str(r.output) for r in durable_results(history)]
    assert saved == [f"saved note {n}" for n in range(2, 61, 3)]
    # Old untagged and Requery results were pruned to the marker naming the call.
    marker_prefix = PRUNE_MARKER.split("{call}")[0]
    assert any(str(p.output).startswith(marker_prefix) for m in history for p in m.tool_results())
    # The window was respected: no request went over it (the counter's own estimate).
    counter = loop._counter
    assert counter.count(history) < 6_000


def test_a_summarizing_compactor_sends_its_request_through_the_client_and_keeps_durable_results() -> None:
    config = SessionConfig(context_window=6_000, compactor=SummarizingCompactor(max_summary_tokens=300))
    client = ScriptedClient(agent(40))
    loop, watch, result = run(40, config, client)
    assert result.ok
    assert "summarize" in [p.kind for p in watch.passes]
    summary_requests = [r for r in client.requests if r.system == SUMMARY_SYSTEM_PROMPT]
    assert summary_requests
    transcript = summary_requests[0].messages[-1].text_content()
    assert "file " not in transcript or "re-run read" in transcript  # Requery results only as markers
    history = list(loop.history)
    assert any(m.text_content().startswith(SUMMARY_HEADER) for m in history)
    assert [str(r.output) for r in durable_results(history)] == [f"saved note {n}" for n in range(2, 41, 3)]


def test_a_failed_summary_call_falls_back_to_truncation() -> None:
    def reply(request: ModelRequest) -> Any:
        if request.system == SUMMARY_SYSTEM_PROMPT:
            from loopctl.errors import InvalidRequest

            raise InvalidRequest("the summary model is down")
        return agent_reply(request)

    agent_reply = agent(40)
    config = SessionConfig(context_window=6_000, compactor=SummarizingCompactor(max_summary_tokens=300))
    loop, watch, result = run(40, config, ScriptedClient(reply))
    assert result.ok
    assert "truncate" in [p.kind for p in watch.passes]
    assert check_conversation(list(loop.history)) == []


def test_calibration_follows_the_reported_input_tokens() -> None:
    # A provider whose tokenizer counts 30% more than the heuristic: the engine calibrates on its reports and
    # its estimate stays within 10% of them.
    from loopctl.compact import HeuristicTokenCounter

    seen: list[int] = []
    truth = HeuristicTokenCounter()

    def reply(request: ModelRequest) -> ModelResponse:
        n = len(request.messages)
        tokens = int(1.3 * truth.count(list(request.messages)))
        seen.append(tokens)
        msg = (
            Message.assistant("done")
            if n > 10
            else Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"c{n}", "grep", {"n": n})])
        )
        return ModelResponse(msg, Usage(input_tokens=tokens, output_tokens=10), StopReason.END_TURN)

    loop = BareLoop(ScriptedClient(reply), [grep], SessionConfig(context_window=1_000_000))
    result = loop.run_sync("go")
    assert result.ok
    # The estimate of the last request (before its reply) is within 10% of what the provider reported.
    sent_last = list(loop.history)[:-1]
    assert abs(loop._counter.count(sent_last) - seen[-1]) / seen[-1] < 0.10


def test_a_run_whose_kept_parts_cannot_fit_ends_with_the_numbers_keeping_the_results_of_tools_that_ran() -> None:
    @tool
    async def keep(n: int) -> ToolOutput:
        """Durable and big."""
        return ToolOutput(f"{n}: {BIG * 3}", retention=Retention.DURABLE)

    def reply(request: ModelRequest) -> Message:
        n = len(request.messages)
        return Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"k{n}", "keep", {"n": n})])

    loop = BareLoop(ScriptedClient(reply), [keep], SessionConfig(context_window=3_000))
    result = loop.run_sync("hoard", RunConfig(max_turns=50, stream=False))
    assert result.outcome.kind is OutcomeKind.CONTEXT_OVERFLOW
    assert result.outcome.error_type == "CompactionOverflow"
    assert re.search(r"do not fit the target of [\d,]+ tokens: first message\(s\) \d+", result.outcome.error or "")
    # The run used to be discarded whole, Durable results of tools that ran included (issue 8, item 6): now
    # the coherent prefix stays, every call answered.
    history = list(loop.history)
    assert history[0] == Message.user("hoard")
    kept = [p for m in history for p in m.parts if isinstance(p, ToolResultPart)]
    ran = len(result.turns)
    assert [p.call_id for p in kept] == [t.tool_calls[0].call.id for t in result.turns if t.tool_calls]
    assert len(kept) >= ran - 1 > 0
    assert check_conversation(history) == []


# --- a provider's context overflow (issue 8, item 6) ----------------------------------------------------------


def overflowing(window: int, ratio: float, *, sticky: bool = False) -> Any:
    """The scripted agent behind a provider that counts ``ratio`` times the heuristic's tokens, reports no
    usage (so nothing calibrates the estimate) and refuses, in Anthropic's words, a request over ``window``
    by its count; with ``sticky``, every request after the first refused one is refused too."""
    from loopctl.compact import HeuristicTokenCounter
    from loopctl.errors import ContextOverflow

    truth = HeuristicTokenCounter()
    agent_reply = agent(30)
    refused = {"n": 0}

    def reply(request: ModelRequest) -> Any:
        tokens = int(ratio * truth.count(list(request.messages)))
        if tokens > window or (sticky and refused["n"]):
            refused["n"] += 1
            text = f"prompt is too long: {max(tokens, window + 1)} tokens > {window} maximum"
            raise ContextOverflow(text, provider="anthropic", status=400, provider_message=text)
        return agent_reply(request)

    return reply


def test_a_provider_overflow_mid_run_compacts_retries_and_finishes_with_every_durable_result() -> None:
    # The estimate stayed under the lines, the provider said "prompt is too long", and the run was discarded
    # whole: history [] with the Durable results of tools that ran.
    loop, watch, result = run(30, SessionConfig(context_window=20_000), ScriptedClient(overflowing(20_000, 3.0)))
    assert result.outcome.kind is OutcomeKind.COMPLETED, result.outcome
    assert [(p.kind, p.reason) for p in watch.passes if p.reason == "emergency"]
    history = list(loop.history)
    assert [str(r.output) for r in durable_results(history)] == [f"saved note {n}" for n in range(2, 31, 3)]
    assert check_conversation(history) == []


def test_a_call_that_overflows_again_after_the_compaction_ends_the_run_keeping_the_coherent_prefix() -> None:
    from loopctl.errors import ContextOverflow, RunFailed

    client = ScriptedClient(overflowing(20_000, 3.0, sticky=True))
    loop, watch, result = run(30, SessionConfig(context_window=20_000), client)
    assert result.outcome.kind is OutcomeKind.CONTEXT_OVERFLOW
    assert result.outcome.error_type == "ContextOverflow"
    assert isinstance(result.error, ContextOverflow)
    assert str(result.error).startswith("anthropic: prompt is too long")
    # The call was refused, the conversation compacted, the call tried again and refused again: the run ends,
    # and nothing a tool produced is dropped; every call of the kept history has its result.
    answered = len(result.turns)
    assert answered >= 5
    assert client.calls == answered + 2
    assert [p.reason for p in watch.passes if p.kind == "truncate"] == ["emergency"]
    history = list(loop.history)
    assert check_conversation(history) == []
    assert [str(r.output) for r in durable_results(history)] == [f"saved note {n}" for n in range(2, answered + 1, 3)]
    assert history[-1].tool_results()  # the last exchange, complete
    with pytest.raises(RunFailed) as info:
        result.raise_for_outcome()
    assert info.value.__cause__ is result.error
    assert info.value.run is result
