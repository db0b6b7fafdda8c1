"""Handoffs: the model hands the conversation to another agent (a transfer_to_... tool per target), which goes
on with its own instructions, tools and output type; an input filter decides what it sees; the run records who
answered; a round trip across two providers through the fake server."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loopctl import Agent
from loopctl.agent import Handoff
from loopctl.engine import AgentHandoff, LoopEvent, OutcomeKind, RunConfig, RunFinished, RunStarted, UsageLimits
from loopctl.message import Message, MessagePart, Role, TextPart, ToolResultPart
from loopctl.response import Usage
from loopctl.store import SQLiteStore
from loopctl.testing import FakeProviderServer, ScriptedClient
from loopctl.tool import tool
from tests.fake_clients import make_client


def call(call_id: str, name: str, args: dict[str, Any] | None = None) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(call_id, name, args or {})])


def texts(messages: Sequence[Message]) -> list[str]:
    out = []
    for m in messages:
        for p in m.parts:
            if isinstance(p, TextPart):
                out.append(p.text)
            elif isinstance(p, ToolResultPart):
                out.append(f"result:{p.output}")
            elif p.is_tool_call():
                out.append(f"call:{getattr(p, 'name', '')}")
    return out


@tool
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"{order}: shipped"


async def test_a_handoff_round_trip_across_two_providers_through_the_fake_server() -> None:
    script = [
        call("t1", "transfer_to_billing"),  # triage, on OpenAI Chat
        call("b1", "refund", {"order": "A7"}),  # billing, on Anthropic
        "Refunded A7.",
        call("b2", "transfer_to_triage"),  # the next run: billing hands back
        "Anything else?",  # triage again, on OpenAI Chat
    ]
    with FakeProviderServer(script) as server:
        openai, anthropic = make_client("openai", server), make_client("anthropic", server)
        # triage -> billing -> triage: the way back is an agent of its own, made first (agents are frozen).
        triage_again = Agent(openai, instructions="You route.", name="triage")
        billing_with_back = Agent(
            anthropic,
            tools=[refund],
            instructions="You do billing.",
            name="billing",
            description="Refunds.",
            handoffs=[Handoff(triage_again)],
        )
        triage = Agent(openai, instructions="You route.", name="triage", handoffs=[billing_with_back])
        conv = triage.session("c1")
        events: list[LoopEvent] = []
        async with conv.stream("Refund order A7") as stream:
            events = [e async for e in stream]
            run = await stream.result()
        assert (run.output, run.agent) == ("Refunded A7.", "billing")
        assert conv.agent is billing_with_back
        second = await conv.run("Thanks, that is all")
        assert (second.output, second.agent) == ("Anything else?", "triage")
        assert conv.agent is triage_again
        await openai.aclose()
        await anthropic.aclose()
    apis = [r.api for r in server.requests]
    assert apis == ["openai-chat", "anthropic", "anthropic", "anthropic", "openai-chat"]
    first, to_billing = server.requests[0].body, server.requests[1].body
    assert [t["function"]["name"] for t in first["tools"]] == ["transfer_to_billing"]
    assert "Refunds." in first["tools"][0]["function"]["description"]
    assert "You do billing." in str(to_billing["system"]) and "You route." not in str(to_billing["system"])
    assert [t["name"] for t in to_billing["tools"]] == ["refund", "transfer_to_triage"]
    # Anthropic gets the conversation with the transfer call and its result, as its own tool_use/tool_result.
    blocks = [b["type"] for m in to_billing["messages"] for b in (m["content"] if isinstance(m["content"], list) else [])]
    assert blocks.count("tool_use") == 1 and blocks.count("tool_result") == 1
    back_to_triage = server.requests[4].body
    assert [m["role"] for m in back_to_triage["messages"]][:1] == ["system"]
    assert "You route." in back_to_triage["messages"][0]["content"]
    handoffs = [e for e in events if isinstance(e, AgentHandoff)]
    assert [(h.from_agent, h.to_agent, h.call.id) for h in handoffs] == [("triage", "billing", "t1")]
    assert sum(isinstance(e, RunStarted) for e in events) == 1 and sum(isinstance(e, RunFinished) for e in events) == 1
    assert [type(e).__name__ for e in events].count("ToolCallDeferred") == 0


async def test_an_input_filter_decides_what_the_target_sees() -> None:
    billing_client = ScriptedClient(["Billing here."])

    def last_only(history: Sequence[Message]) -> Sequence[Message]:
        return [*[m for m in history if m.role is Role.USER][-1:], history[-1]]

    billing = Agent(billing_client, name="billing")
    triage = Agent(
        ScriptedClient(["Hello.", call("t1", "transfer_to_billing")]),
        name="triage",
        handoffs=[Handoff(billing, input_filter=last_only)],
    )
    conv = triage.session("f")
    await conv.run("hi")
    run = await conv.run("I need a refund")
    assert run.agent == "billing"
    assert texts(billing_client.requests[0].messages) == ["I need a refund", "call:transfer_to_billing", "result:Transferred to billing: it answers from here on."]


async def test_the_run_counts_both_agents_usage_and_limits_span_the_handoff() -> None:
    usage = Usage(100, 10)
    billing_client = ScriptedClient([call("b1", "refund", {"order": "A"}), call("b2", "refund", {"order": "B"}), "x"], usage=usage)
    billing = Agent(billing_client, tools=[refund], name="billing")
    triage = Agent(ScriptedClient([call("t1", "transfer_to_billing")], usage=usage), name="triage", handoffs=[billing])
    run = await triage.run("refund", config=RunConfig(limits=UsageLimits(requests=2)))
    assert run.outcome.kind is OutcomeKind.LIMIT_REACHED  # 1 request of triage + 1 of billing, then the limit
    assert len(billing_client.requests) == 1
    assert run.usage == Usage(200, 20)
    assert [t.index for t in run.turns] == [1, 1]


async def test_other_calls_of_the_handing_reply_keep_their_results() -> None:
    reply = Message.new(
        Role.ASSISTANT,
        [MessagePart.tool_call("l1", "lookup", {"order": "A7"}), MessagePart.tool_call("t1", "transfer_to_billing", {})],
    )
    billing_client = ScriptedClient(["A7 is shipped; billing can help."])
    triage = Agent(
        ScriptedClient([reply]), tools=[lookup], name="triage", handoffs=[Agent(billing_client, name="billing")]
    )
    run = await triage.run("where is A7?")
    assert run.agent == "billing"
    assert texts(billing_client.requests[0].messages)[-2:] == [
        "result:A7: shipped",
        "result:Transferred to billing: it answers from here on.",
    ]


async def test_a_stored_conversation_goes_on_with_the_agent_that_answered_in_a_new_process(tmp_path: Path) -> None:
    billing_client = ScriptedClient(["Billing here.", "Still billing."])
    billing = Agent(billing_client, name="billing")
    triage_client = ScriptedClient([call("t1", "transfer_to_billing")])
    with SQLiteStore(tmp_path / "h.db") as store:
        run = await Agent(triage_client, name="triage", handoffs=[billing]).session("s", store=store).run("refund")
        assert run.agent == "billing"
    with SQLiteStore(tmp_path / "h.db") as store:  # new objects, as another process would make
        again = Agent(triage_client, name="triage", handoffs=[billing]).session("s", store=store)
        assert (await again.run("and?")).output == "Still billing."
        assert len(triage_client.requests) == 1


async def test_a_handover_a_process_left_half_done_is_finished_by_the_next_run(tmp_path: Path) -> None:
    from loopctl.engine import BareLoop

    billing_client = ScriptedClient(["Billing here: hello."])
    billing = Agent(billing_client, name="billing")
    triage_client = ScriptedClient([call("t1", "transfer_to_billing")])
    triage = Agent(triage_client, name="triage", handoffs=[billing])
    with SQLiteStore(tmp_path / "half.db") as store:
        # A process ran triage and stopped right after the transfer call paused it (before billing ran).
        paused = await BareLoop(triage_client, triage.tool_list, store=store, session_id="s").run("refund")
        assert paused.outcome.kind is OutcomeKind.AWAITING_APPROVAL
        run = await triage.session("s", store=store).run("hello?")
        assert (run.agent, run.output) == ("billing", "Billing here: hello.")
        assert texts(billing_client.requests[0].messages) == [
            "refund",
            "call:transfer_to_billing",
            "result:Transferred to billing: it answers from here on.",
            "hello?",
        ]
        assert len(store.load("s").messages) == 5
