"""Usage limits: each reached exactly at its boundary, kept across a save and restore of the machine, and the
run's history salvaged as for the turn limit."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from loopctl.engine import (
    Approve,
    BareLoop,
    Defer,
    LimitHit,
    LoopMachine,
    MachinePolicy,
    MachineState,
    OutcomeKind,
    RunConfig,
    UsageLimits,
)
from loopctl.errors import CostUnknown, UsageLimitReached
from loopctl.message import Message, MessagePart, Role, check_conversation
from loopctl.pricing import price
from loopctl.providers.base import ModelRequest
from loopctl.response import Usage
from loopctl.testing import ScriptedClient
from loopctl.tool import tool

USAGE = Usage(10, 5)  # what every scripted reply reports

ran: list[int] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


@tool
async def step(n: int) -> str:
    """Do step n."""
    ran.append(n)
    return f"step {n} done"


def calls(*ns: int) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"c{n}", "step", {"n": n}) for n in ns])


def working(batch: int = 1) -> Any:
    """A model that never stops calling ``step`` (each call with a new ``n``, so no loop is seen)."""
    count = {"i": 0}

    def reply(request: ModelRequest) -> Message:
        first = count["i"] * batch + 1
        count["i"] += 1
        return calls(*range(first, first + batch))

    return reply


def config(**limits: Any) -> RunConfig:
    return RunConfig(stream=False, limits=UsageLimits(**limits))


# --- requests and tool calls: checked before the step that would pass them -------------------------------------


async def test_a_limit_of_3_requests_allows_3() -> None:
    client = ScriptedClient(working(), usage=USAGE)
    run = await BareLoop(client, [step]).run("work", config(requests=3))
    assert client.calls == 3
    assert run.outcome.kind is OutcomeKind.LIMIT_REACHED
    assert run.outcome.limit == LimitHit("requests", 3, 3)
    assert run.outcome.error == "the requests limit (3) was reached: 3 spent"
    assert ran == [1, 2, 3]  # the third reply's call ran; the run ended before a fourth request
    with pytest.raises(UsageLimitReached) as caught:
        run.raise_for_outcome()
    assert caught.value.limit == LimitHit("requests", 3, 3)


async def test_a_run_that_answers_within_its_request_limit_completes() -> None:
    client = ScriptedClient([calls(1), calls(2), "done"], usage=USAGE)
    run = await BareLoop(client, [step]).run("work", config(requests=3))
    assert run.ok and run.output == "done" and client.calls == 3


async def test_a_limit_of_3_tool_calls_runs_3_and_not_the_fourth() -> None:
    client = ScriptedClient(working(), usage=USAGE)
    loop = BareLoop(client, [step])
    run = await loop.run("work", config(tool_calls=3))
    assert ran == [1, 2, 3]
    assert client.calls == 4  # the fourth reply asked for a fourth call, which did not start
    assert run.outcome.limit == LimitHit("tool_calls", 3, 3, needed=1)
    assert run.outcome.error == "the tool calls limit (3) would be passed: 3 spent, the next step needs 1 more"
    # Salvaged as for the turn limit: the reply whose call did not run is dropped, the rest is kept.
    history = list(loop.history)
    assert check_conversation(history) == []
    assert [m.role for m in history] == [Role.USER] + [Role.ASSISTANT, Role.USER] * 3


async def test_a_batch_that_would_pass_the_tool_call_limit_does_not_start() -> None:
    client = ScriptedClient(working(batch=2), usage=USAGE)
    run = await BareLoop(client, [step]).run("work", config(tool_calls=3))
    assert ran == [1, 2]  # the second batch of two would make four
    assert run.outcome.limit == LimitHit("tool_calls", 2, 3, needed=2)


async def test_calls_the_machine_answers_itself_do_not_count_as_tool_calls() -> None:
    unknown = Message.new(Role.ASSISTANT, [MessagePart.tool_call("u1", "nope", {})])
    client = ScriptedClient([unknown, calls(1), "done"], usage=USAGE)
    run = await BareLoop(client, [step]).run("work", config(tool_calls=1))
    assert run.ok and ran == [1]


# --- tokens and cost: checked after each reply ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("dimension", "per_reply"),
    [("input_tokens", 10), ("output_tokens", 5), ("total_tokens", 15)],
)
async def test_a_token_limit_allows_spending_it_exactly_and_ends_the_run_past_it(
    dimension: str, per_reply: int
) -> None:
    client = ScriptedClient(working(), usage=USAGE)
    limit = 3 * per_reply
    run = await BareLoop(client, [step]).run("work", config(**{dimension: limit}))
    assert client.calls == 4  # three replies spent the limit exactly; the fourth passed it
    assert run.outcome.limit == LimitHit(dimension, 4 * per_reply, limit)  # type: ignore[arg-type]
    assert ran == [1, 2, 3]  # the fourth reply's call did not run
    assert run.usage == Usage(40, 20)


async def test_a_reply_past_a_token_limit_that_answers_completes_the_run() -> None:
    # Nothing more would be spent: the answer is not thrown away for the limit.
    client = ScriptedClient([calls(1), "the answer"], usage=USAGE)
    run = await BareLoop(client, [step]).run("work", config(output_tokens=6))
    assert run.ok and run.output == "the answer" and run.usage.output_tokens == 10


class Anthropic(ScriptedClient):
    """Replies priced as Anthropic's claude-sonnet-4-5."""

    provider = "anthropic"


async def test_a_cost_limit_allows_spending_it_exactly_and_ends_the_run_past_it() -> None:
    usage = Usage(1_000, 100)
    one = price(usage, "claude-sonnet-4-5", provider="anthropic")
    assert one == Decimal("0.0045")
    client = Anthropic(working(), model="claude-sonnet-4-5", usage=usage)
    run = await BareLoop(client, [step]).run("work", config(cost=2 * one))
    assert client.calls == 3
    assert run.outcome.limit == LimitHit("cost", 3 * one, 2 * one)
    assert run.outcome.error == "the cost limit (0.0090 USD) was passed: 0.0135 USD spent"
    assert run.cost == 3 * one and ran == [1, 2]


async def test_a_cost_limit_with_a_reply_of_unknown_price_stops_the_run() -> None:
    client = ScriptedClient(working(), model="a-model-without-a-price", usage=USAGE)
    run = await BareLoop(client, [step]).run("work", config(cost=Decimal(1)))
    assert client.calls == 1 and ran == []
    assert run.outcome.kind is OutcomeKind.FAILED and run.outcome.error_type == "CostUnknown"
    assert isinstance(run.error, CostUnknown)


def test_limits_refuse_what_is_not_a_limit() -> None:
    with pytest.raises(ValueError, match="requests must be a whole number"):
        UsageLimits(requests=-1)
    with pytest.raises(ValueError, match="cost must be a finite number"):
        UsageLimits(cost=Decimal("NaN"))
    assert UsageLimits(cost=0.1).cost == Decimal("0.1")  # type: ignore[arg-type]


# --- across a save and restore -------------------------------------------------------------------------------

POLICY = MachinePolicy()


def test_a_restored_machine_keeps_counting_toward_its_limits() -> None:
    m = LoopMachine()
    m.accept_input("work", limits=UsageLimits(requests=3, tool_calls=3, output_tokens=100))
    for n in (1, 2):
        assert m.next_step(POLICY).__class__.__name__ == "CallLLM"
        m.model_response(calls(n), {"step"}, 10, usage=USAGE)
        m.next_step(POLICY)
        m.tool_results([Message(role=Role.USER, parts=(MessagePart.tool_result(f"c{n}", "step", "ok"),))])
    restored = LoopMachine.from_json(m.to_json())
    assert restored.usage == m.usage and restored.usage.requests == 2 and restored.usage.tool_calls == 2
    assert restored.limits == UsageLimits(requests=3, tool_calls=3, output_tokens=100)
    restored.next_step(POLICY)
    restored.model_response(calls(3), {"step"}, 10, usage=USAGE)  # the third request: allowed
    restored.next_step(POLICY)
    restored.tool_results([Message(role=Role.USER, parts=(MessagePart.tool_result("c3", "step", "ok"),))])
    again = LoopMachine.from_json(restored.to_json())
    done = again.next_step(POLICY)  # a fourth would pass the limit
    assert again.state is MachineState.TERMINAL
    assert again.outcome.limit == LimitHit("requests", 3, 3)
    assert done.outcome == again.outcome  # type: ignore[union-attr]
    assert LoopMachine.from_json(again.to_json()).outcome == again.outcome  # the hit is saved with the outcome


async def test_a_paused_run_resumed_in_another_loop_keeps_counting_requests() -> None:
    first = ScriptedClient([calls(1)], usage=USAGE)
    loop = BareLoop(first, [step], permission=lambda call: Defer())
    run = await loop.run("work", config(requests=2))
    assert run.outcome.kind is OutcomeKind.AWAITING_APPROVAL and ran == []
    text = loop.machine.to_json()
    second = ScriptedClient(working(), usage=USAGE)
    later = BareLoop.from_machine(LoopMachine.from_json(text), second, [step])
    resumed = await later.run(approvals={"c1": Approve()}, config=RunConfig(stream=False))
    assert second.calls == 1  # one request was spent before the pause, one after: the limit of 2
    assert resumed.outcome.limit == LimitHit("requests", 2, 2)
    assert ran == [1, 1]  # the approved call, then the call of the one request made after the pause
