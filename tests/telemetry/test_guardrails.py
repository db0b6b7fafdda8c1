"""``OTelObserver`` with the guardrails' events and outcomes: a fallback inside one chat span, the run's cost,
a usage limit and a paused run (real runs, the SDK's in-memory exporter)."""

from __future__ import annotations

from decimal import Decimal

from opentelemetry.trace import StatusCode

from loopctl.engine import Approve, BareLoop, Defer, RunConfig, UsageLimits
from loopctl.message import Message, MessagePart, Role
from loopctl.providers import FallbackClient
from loopctl.response import Usage
from loopctl.telemetry import attributes as a
from loopctl.testing import ErrorReply, FakeProviderServer, ScriptedClient
from loopctl.tool import tool
from tests.fake_clients import make_client
from tests.telemetry.test_observer import Telemetry, attrs, by_name


@tool
async def note(text: str) -> str:
    """Write a note."""
    return f"noted {text}"


def call(i: int) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"c{i}", "note", {"text": str(i)})])


async def test_a_fallback_is_an_event_of_the_one_chat_span_which_then_names_the_fallback() -> None:
    tel = Telemetry()
    with FakeProviderServer([ErrorReply(status=500)]) as a_server, FakeProviderServer(["hello"]) as b_server:
        client = FallbackClient(make_client("openai", a_server), make_client("anthropic", b_server))
        try:
            run = await BareLoop(client, observers=[tel.observer()]).run("hi", RunConfig(max_retries=0))
        finally:
            await client.aclose()
    assert run.ok
    _root, chat = tel.spans()
    (event,) = [e for e in chat.events if e.name == a.LOOPCTL_FALLBACK_EVENT]
    assert dict(event.attributes or {}) == {
        a.LOOPCTL_FALLBACK_FROM: "openai:gpt-4o",
        a.LOOPCTL_FALLBACK_TO: "anthropic:claude-test-1",
        a.ERROR_TYPE: "ServerError",
    }
    assert (attrs(chat)[a.GEN_AI_PROVIDER_NAME], attrs(chat)[a.GEN_AI_REQUEST_MODEL]) == ("anthropic", "claude-test-1")
    assert chat.status.status_code is not StatusCode.ERROR
    (duration,) = tel.points(a.GEN_AI_CLIENT_OPERATION_DURATION)
    assert dict(duration.attributes or {})[a.GEN_AI_PROVIDER_NAME] == "anthropic"


class Anthropic(ScriptedClient):
    provider = "anthropic"


async def test_the_run_span_carries_the_cost_and_a_limit_is_its_error_type() -> None:
    tel = Telemetry()
    client = Anthropic([call(1), call(2), call(3)], model="claude-sonnet-4-5", usage=Usage(1000, 100))
    run = await BareLoop(client, [note], observers=[tel.observer()]).run(
        "go", RunConfig(limits=UsageLimits(requests=2))
    )
    assert run.outcome.kind.value == "limit_reached"
    root = by_name(tel.spans(), "invoke_agent")[0]
    assert attrs(root)[a.LOOPCTL_RUN_COST] == str(run.cost) == str(2 * Decimal("0.0045"))
    assert (attrs(root)[a.ERROR_TYPE], root.status.status_code) == ("limit_reached", StatusCode.ERROR)


async def test_a_paused_run_is_no_error_and_its_continuation_is_a_run_of_its_own() -> None:
    tel = Telemetry()
    loop = BareLoop(ScriptedClient([call(1), "done"]), [note], observers=[tel.observer()], permission=lambda c: Defer())
    await loop.run("go")
    (paused,) = by_name(tel.spans(), "invoke_agent")
    assert attrs(paused)[a.LOOPCTL_OUTCOME] == "awaiting_approval" and a.ERROR_TYPE not in attrs(paused)
    assert by_name(tel.spans(), "execute_tool note") == []  # the deferred call did not run
    await loop.run(approvals={"c1": Approve()})
    _paused_again, second = by_name(tel.spans(), "invoke_agent")
    assert attrs(second)[a.LOOPCTL_OUTCOME] == "completed"
    (tool_span,) = by_name(tel.spans(), "execute_tool note")
    assert tool_span.parent is not None and tool_span.parent.span_id == second.context.span_id
