"""Fallback models through real clients and fake provider servers (real HTTP and SSE on 127.0.0.1): a 500
after the retries, a 400 named in ``fallback_on``, a stream cut half-way (no duplicated text as final output),
and every client failing (``FALLBACK_EXHAUSTED``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from loopctl.engine import (
    BareLoop,
    ModelCallRetry,
    ModelFallback,
    ModelStreamEvent,
    OutcomeKind,
    ReplyDiscarded,
    Run,
    RunConfig,
    TurnFinished,
)
from loopctl.engine.streaming import text_of
from loopctl.errors import (
    ContextOverflow,
    FallbackExhausted,
    FallbackFailed,
    InvalidRequest,
    ServerError,
    StreamTruncated,
)
from loopctl.message import Message, MessagePart, Role, TextPart, ThinkingPart
from loopctl.providers import FallbackClient
from loopctl.testing import CutStream, ErrorReply, FakeProviderServer, ScriptedClient, StreamError
from loopctl.tool import tool
from tests.fake_clients import make_client

FAST = RunConfig(retry_initial_delay=0.001, retry_max_delay=0.01, max_retries=2)
SERVER_ERROR = ErrorReply(status=500)
PRIMARY_TEXT = "The primary model begins a long answer that will be cut off before its end."
FALLBACK_TEXT = "The fallback model answers in full."


@tool
async def echo(text: str) -> str:
    """Echo the text back."""
    return text


async def run_chain(
    primary: Sequence[Any],
    fallback: Sequence[Any],
    config: RunConfig = FAST,
    *,
    kinds: tuple[str, str] = ("openai", "anthropic"),
    **chain: Any,
) -> tuple[Run, list[Any], FakeProviderServer, FakeProviderServer]:
    """One run on ``FallbackClient(<kinds[0]> client, <kinds[1]> client)``, each against its own fake server."""
    events: list[Any] = []
    with FakeProviderServer(primary) as a, FakeProviderServer(fallback) as b:
        client = FallbackClient(make_client(kinds[0], a), make_client(kinds[1], b), **chain)
        try:
            run = await BareLoop(client, [echo], observers=[events.append]).run("go", config)
        finally:
            await client.aclose()
    return run, events, a, b


async def test_a_500_that_outlives_the_retries_goes_to_the_fallback() -> None:
    run, events, a, b = await run_chain([SERVER_ERROR] * 3, [FALLBACK_TEXT])
    assert run.ok and run.output == FALLBACK_TEXT
    assert (len(a.requests), len(b.requests)) == (3, 1)  # the first try and two retries, then the fallback
    assert [type(e).__name__ for e in events if isinstance(e, (ModelCallRetry, ModelFallback))] == [
        "ModelCallRetry",
        "ModelCallRetry",
        "ModelFallback",
    ]
    fell = next(e for e in events if isinstance(e, ModelFallback))
    assert (fell.from_provider, fell.from_model, fell.to_provider, fell.to_model) == (
        "openai",
        "gpt-4o",
        "anthropic",
        "claude-test-1",
    )
    assert isinstance(fell.error, ServerError)
    assert (run.turns[0].provider, run.turns[0].model) == ("anthropic", "claude-test-1")


async def test_a_400_named_in_fallback_on_goes_to_the_fallback_at_once() -> None:
    run, _, a, b = await run_chain([ErrorReply(status=400)], [FALLBACK_TEXT], fallback_on=[InvalidRequest])
    assert run.ok and (len(a.requests), len(b.requests)) == (1, 1)
    assert run.turns[0].model == "claude-test-1"


async def test_a_400_not_named_fails_the_run_as_it_would_without_fallbacks() -> None:
    run, _, a, b = await run_chain([ErrorReply(status=400)], [FALLBACK_TEXT])
    assert run.outcome.kind is OutcomeKind.FAILED and isinstance(run.error, InvalidRequest)
    assert (len(a.requests), len(b.requests)) == (1, 0)


def _final_text(events: list[Any]) -> str:
    finished = [e for e in events if isinstance(e, TurnFinished)]
    return "".join(p.text for e in finished for p in e.message.parts if isinstance(p, TextPart))


def _shown_after_discards(events: list[Any]) -> str:
    """The text an observer that erases what each ReplyDiscarded voids is left showing."""
    shown: list[str] = []
    for e in events:
        if isinstance(e, ReplyDiscarded):
            assert "".join(shown).endswith(e.text)
            shown = list("".join(shown)[: len("".join(shown)) - len(e.text)])
        elif isinstance(e, ModelStreamEvent):
            shown.append(text_of(e.event))
    return "".join(shown)


@pytest.mark.parametrize("retries", [0, 1])
async def test_a_stream_cut_half_way_is_sent_again_to_the_fallback_without_duplicated_text(retries: int) -> None:
    cut = CutStream(PRIMARY_TEXT, after_events=4)
    config = RunConfig(retry_initial_delay=0.001, retry_max_delay=0.01, max_retries=retries)
    run, events, a, b = await run_chain([cut] * (retries + 1), [FALLBACK_TEXT], config)
    assert run.ok and run.output == FALLBACK_TEXT and run.text == FALLBACK_TEXT
    assert (len(a.requests), len(b.requests)) == (retries + 1, 1)
    discarded = [e for e in events if isinstance(e, ReplyDiscarded)]
    assert [d.reason for d in discarded] == ["retry"] * retries + ["fallback"]
    assert all(d.text and PRIMARY_TEXT.startswith(d.text) and d.text != PRIMARY_TEXT for d in discarded)
    fell = next(i for i, e in enumerate(events) if isinstance(e, ModelFallback))
    assert isinstance(events[fell - 1], ReplyDiscarded)  # the discard comes first
    assert isinstance(events[fell].error, StreamTruncated)
    # The final output holds the fallback's reply once, and none of the primary's partial text.
    assert _final_text(events) == FALLBACK_TEXT
    assert _shown_after_discards(events) == FALLBACK_TEXT
    assert run.turns[0].output == Message.assistant(FALLBACK_TEXT)  # what the history keeps


async def test_a_mid_stream_error_that_is_not_retryable_still_goes_to_the_fallback() -> None:
    broken = StreamError(PRIMARY_TEXT, error=ErrorReply(status=400, message="the stream went wrong"), after_events=3)
    run, events, a, b = await run_chain([broken], [FALLBACK_TEXT], kinds=("anthropic", "openai"))
    assert run.ok and run.output == FALLBACK_TEXT and (len(a.requests), len(b.requests)) == (1, 1)
    assert [d.reason for d in events if isinstance(d, ReplyDiscarded)] == ["fallback"]
    assert _shown_after_discards(events) == FALLBACK_TEXT


async def test_a_streamed_run_shows_the_discard_to_its_reader() -> None:
    with FakeProviderServer([CutStream(PRIMARY_TEXT, after_events=4)]) as a, FakeProviderServer([FALLBACK_TEXT]) as b:
        client = FallbackClient(make_client("openai", a), make_client("gemini", b))
        try:
            async with BareLoop(client).stream("go", RunConfig(max_retries=0)) as stream:
                seen = [e async for e in stream]
                run = await stream.result()
        finally:
            await client.aclose()
    assert run.text == FALLBACK_TEXT and _shown_after_discards(seen) == FALLBACK_TEXT
    assert (run.turns[0].provider, run.turns[0].model) == ("gemini", "gemini-3-pro")


async def test_when_every_client_fails_the_run_ends_fallback_exhausted_listing_each_error() -> None:
    run, _, a, b = await run_chain([SERVER_ERROR] * 3, [ErrorReply.overloaded()] * 3)
    assert run.outcome.kind is OutcomeKind.FALLBACK_EXHAUSTED
    assert isinstance(run.error, FallbackFailed)
    assert [(label, type(e).__name__) for label, e in run.error.errors] == [
        ("openai:gpt-4o", "ServerError"),
        ("anthropic:claude-test-1", "Overloaded"),
    ]
    assert run.outcome.error is not None and run.outcome.error.startswith("every model of the fallback chain failed")
    assert (len(a.requests), len(b.requests)) == (3, 3)
    with pytest.raises(FallbackExhausted) as caught:
        run.raise_for_outcome()
    assert caught.value.errors == run.error.errors


async def test_thinking_signed_by_the_primary_is_not_sent_to_another_provider() -> None:
    thought = ThinkingPart(text="I should echo it.", signature="c2lnbmF0dXJl", provider="anthropic")
    first = Message.new(Role.ASSISTANT, [thought, MessagePart.tool_call("toolu_1", "echo", {"text": "hi"})])
    run, _, a, b = await run_chain([first, *[SERVER_ERROR] * 3], ["echoed"], kinds=("anthropic", "openai"))
    assert run.ok and [t.provider for t in run.turns] == ["anthropic", "openai"]
    sent = b.requests[0].body["messages"]
    assistant = next(m for m in sent if m["role"] == "assistant")
    assert assistant["tool_calls"][0]["function"]["name"] == "echo"
    assert "reasoning_content" not in assistant and "I should echo it." not in str(sent)
    assert "I should echo it." in str(a.requests[1].body)  # the primary got it back, signed, on its retries


async def test_each_call_starts_at_the_primary_again() -> None:
    primary = ScriptedClient([ServerError("down"), "the primary is back"], model="p")
    fallback = ScriptedClient([Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "echo", {"text": "x"})])])
    loop = BareLoop(FallbackClient(primary, fallback), [echo])
    run = await loop.run("go", RunConfig(max_retries=0))
    assert run.ok and [t.model for t in run.turns] == ["scripted", "p"]


async def test_a_context_overflow_is_left_to_the_compaction_unless_named() -> None:
    overflow = ContextOverflow("prompt is too long: 300000 tokens > 200000 maximum", provider="anthropic")
    chain = FallbackClient(ScriptedClient([]), ScriptedClient([]))
    assert not chain.falls_back(overflow, streamed=False)
    assert FallbackClient(ScriptedClient([]), ScriptedClient([]), fallback_on=[ContextOverflow]).falls_back(
        overflow, streamed=False
    )
    assert FallbackClient(ScriptedClient([]), ScriptedClient([]), fallback_on=lambda e: True).falls_back(
        overflow, streamed=False
    )


async def test_used_on_its_own_it_tries_each_client_once() -> None:
    from loopctl.providers import ModelRequest

    chain = FallbackClient(ScriptedClient([ServerError("down")]), ScriptedClient(["fine"], model="second"))
    reply = await chain.generate(ModelRequest(messages=[Message.user("hi")]), stream=False)
    assert reply.model == "second" and reply.message == Message.assistant("fine")
    with pytest.raises(ValueError, match="at least one fallback"):
        FallbackClient(ScriptedClient([]))
    with pytest.raises(TypeError, match="exception classes"):
        FallbackClient(ScriptedClient([]), ScriptedClient([]), fallback_on=["InvalidRequest"])  # type: ignore[list-item]
