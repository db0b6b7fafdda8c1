"""The driver end to end: ``BareLoop`` over each of the four real clients against the fake provider server
(real HTTP and SSE on 127.0.0.1). Every run's history is checked with ``check_conversation`` and its exact
shape; the requests the server received show what the model read back."""

from __future__ import annotations

import asyncio
import base64
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from loopctl.engine import BareLoop, ModelCallRetry, OutcomeKind, Run, RunConfig, SessionConfig, ToolCallStarted
from loopctl.engine.events import ModelStreamEvent
from loopctl.errors import RateLimited, StreamTruncated
from loopctl.message import (
    Message,
    MessagePart,
    Role,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    check_conversation,
)
from loopctl.response import InvalidToolCall, ModelResponse, StopReason
from loopctl.stream import PartStarted, TextDelta
from loopctl.testing import CutStream, ErrorReply, FakeProviderServer
from loopctl.testing.demo import tool_exchanges
from loopctl.testing.wire import ReplyContext, encode_reply
from loopctl.tool import tool
from tests.fake_clients import API_OF, CONVERSATION_KEY, KINDS, THINKING_OF, make_client

FAST = RunConfig(retry_initial_delay=0.001, retry_max_delay=0.5)
SIGNATURE = "c2lnbmF0dXJl"  # base64 of b"signature"


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# --- tools ---------------------------------------------------------------------------------------------------

ran: list[str] = []


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    ran.clear()


@tool
async def echo(text: str) -> str:
    """Echo the text back."""
    ran.append(f"echo {text}")
    return text


@tool
async def boom(text: str) -> str:
    """Always fails."""
    raise ValueError(f"cannot handle {text}")


@tool
async def hang(seconds: float) -> str:
    """Sleeps."""
    await asyncio.sleep(seconds)
    return "woke"


@tool
async def slow(name: str, delay: float) -> str:
    """Sleeps ``delay`` seconds, then returns its name."""
    await asyncio.sleep(delay)
    ran.append(name)
    return f"{name} done"


# --- helpers -------------------------------------------------------------------------------------------------


def calls(*specs: tuple[str, str, dict[str, Any]], text: str | None = None) -> Message:
    parts: list[MessagePart] = [TextPart(text=text)] if text else []
    parts += [MessagePart.tool_call(i, n, a) for i, n, a in specs]
    return Message.new(Role.ASSISTANT, parts)


class Session:
    """One ``BareLoop`` over a real client of ``kind`` and a fake server playing ``script``."""

    def __init__(
        self, kind: str, script: Sequence[Any] | Callable[..., Any], tools: Sequence[Any] = (), **server: Any
    ) -> None:
        self.kind = kind
        self.server = FakeProviderServer(script, **server)
        self.tools = tools
        self.events: list[Any] = []
        self.loop: BareLoop

    async def run(self, prompt: str = "go", config: RunConfig = FAST, **kw: Any) -> Run:
        with self.server:
            client = make_client(self.kind, self.server)
            self.loop = BareLoop(
                client, self.tools, SessionConfig(system_prompt="Be brief."), observers=[self.events.append]
            )
            try:
                return await self.loop.run(prompt, config, **kw)
            finally:
                await client.aclose()

    @property
    def history(self) -> list[Message]:
        return list(self.loop.history)

    def results(self, index: int = 2) -> list[ToolResultPart]:
        return [p for p in self.history[index].parts if isinstance(p, ToolResultPart)]

    def read_back(self, request: int = 1) -> list[tuple[str, str | None, bool]]:
        """``(tool name, result text, is_error)`` of each call the model read back in request ``request``, from
        the request body in the provider's own wire format (``is_error`` only where the wire has a flag)."""
        return [
            (x.name, x.output, x.is_error)
            for x in tool_exchanges(API_OF[self.kind], self.server.requests[request].body)
        ]


def shape(history: Sequence[Message]) -> list[tuple[str, list[str]]]:
    return [(m.role.value, [p.type for p in m.parts]) for m in history]


def assert_coherent(history: Sequence[Message]) -> None:
    assert check_conversation(list(history)) == []


ROUND_TRIP = [
    ("user", ["text"]),
    ("assistant", ["tool_call"]),
    ("user", ["tool_result"]),
    ("assistant", ["text"]),
]

# Where each wire carries a result's error flag: Anthropic ``is_error``, Gemini an ``error`` key, Chat and
# Responses (no field for it) a marker before the text (``TOOL_ERROR_MARKER``, read back by ``tool_exchanges``).
FLAGS_ERRORS = {"openai": True, "openai-responses": True, "anthropic": True, "gemini": True}


def chat_tool_messages(s: Session, request: int = 1) -> list[Any]:
    return [m["content"] for m in s.server.requests[request].body["messages"] if m["role"] == "tool"]


def error_result(s: Session, text: str) -> None:
    """The one result of the first exchange is the error ``text``, in history and as the model read it."""
    assert_coherent(s.history)
    assert shape(s.history) == ROUND_TRIP
    (result,) = s.results()
    assert (str(result.output), result.is_error) == (text, True)
    (read,) = s.read_back()
    assert read[1:] == (text, FLAGS_ERRORS[s.kind])
    if s.kind == "openai":
        assert chat_tool_messages(s) == [f"[tool error] {text}"]


# --- tools that fail -------------------------------------------------------------------------------------------


async def test_a_tool_that_raises_becomes_an_error_result_the_model_reads(kind: str) -> None:
    s = Session(kind, [calls(("c1", "boom", {"text": "x"})), "sorry"], [boom])
    run = await s.run()
    assert (run.outcome.kind, run.output) == (OutcomeKind.COMPLETED, "sorry")
    error_result(s, "Tool 'boom' failed: ValueError: cannot handle x")


async def test_a_tool_that_hangs_past_its_timeout_becomes_an_error_result(kind: str) -> None:
    # Timed from the tool's start, not the run's: the run's first import of the provider's SDK took over 10 s
    # on a loaded machine.
    started: list[float] = []

    @tool(name="hang")
    async def hanging(seconds: float) -> str:
        """Sleeps."""
        started.append(time.perf_counter())
        await asyncio.sleep(seconds)
        return "woke"

    s = Session(kind, [calls(("c1", "hang", {"seconds": 30})), "ok"], [hanging])
    run = await s.run(config=RunConfig(tool_timeout=0.05))
    assert time.perf_counter() - started[0] < 10  # not the tool's 30 s (a margin for a loaded CI machine)
    assert run.ok
    error_result(s, "Tool 'hang' timed out after 0.05 s and was stopped.")


async def test_an_unknown_tool_is_answered_with_the_tools_that_exist(kind: str) -> None:
    s = Session(kind, [calls(("c1", "rm_rf", {"path": "/"})), "ok"], [echo, boom])
    run = await s.run()
    assert run.ok
    error_result(s, "Unknown tool 'rm_rf'. The tools that exist are: boom, echo.")
    assert run.turns[0].tool_calls[0].ran is False


async def test_invalid_tool_input_goes_back_to_the_model_naming_the_field(kind: str) -> None:
    s = Session(kind, [calls(("c1", "echo", {"txt": "typo"})), "ok"], [echo])
    await s.run()
    error_result(
        s,
        "Invalid input for tool 'echo': invalid input: text: Field required; txt: Extra inputs are not permitted",
    )
    assert ran == []


# --- parallel calls ---------------------------------------------------------------------------------------------


async def test_parallel_calls_finishing_out_of_order_are_answered_in_call_order(kind: str) -> None:
    reply = calls(
        ("a", "slow", {"name": "a", "delay": 0.06}),
        ("b", "slow", {"name": "b", "delay": 0.0}),
        ("c", "slow", {"name": "c", "delay": 0.03}),
        text="All three at once.",
    )
    s = Session(kind, [reply, "all done"], [slow])
    run = await s.run()
    assert run.ok
    assert ran == ["b", "c", "a"]  # finished out of order...
    assert_coherent(s.history)
    assert shape(s.history) == [
        ("user", ["text"]),
        ("assistant", ["text", "tool_call", "tool_call", "tool_call"]),
        ("user", ["tool_result", "tool_result", "tool_result"]),
        ("assistant", ["text"]),
    ]
    call_ids = [c.id for c in s.history[1].tool_calls()]
    assert [(r.call_id, r.name, str(r.output)) for r in s.results()] == [
        (call_ids[0], "slow", "a done"),
        (call_ids[1], "slow", "b done"),
        (call_ids[2], "slow", "c done"),
    ]  # ...answered in the order the model asked
    assert s.read_back() == [("slow", "a done", False), ("slow", "b done", False), ("slow", "c done", False)]


# --- cancellation -----------------------------------------------------------------------------------------------


async def test_a_cancel_mid_tool_keeps_the_turn_with_the_call_in_flight_answered(kind: str) -> None:
    cancel = asyncio.Event()

    @tool
    async def block() -> str:
        """Blocks until cancelled."""
        cancel.set()
        await asyncio.sleep(30)
        return "never"

    script = [calls(("c1", "echo", {"text": "x"})), calls(("c2", "block", {})), "unused"]
    s = Session(kind, script, [echo, block])
    started = time.perf_counter()
    run = await s.run(cancel=cancel)
    assert time.perf_counter() - started < 10  # not the tool's 30 s (a margin for a loaded CI machine)
    assert run.outcome.kind is OutcomeKind.CANCELLED
    # The finished exchange stays; so does the turn whose call was cancelled in flight, answered so.
    assert_coherent(s.history)
    assert shape(s.history) == [
        ("user", ["text"]),
        ("assistant", ["tool_call"]),
        ("user", ["tool_result"]),
        ("assistant", ["tool_call"]),
        ("user", ["tool_result"]),
    ]
    assert [str(r.output) for r in s.results(2) + s.results(4)] == [
        "x",
        "Not known whether it ran: the run was cancelled before its result was recorded.",
    ]
    assert len(s.server.requests) == 2


# --- retries ---------------------------------------------------------------------------------------------------


async def test_a_rate_limit_then_success_is_retried_after_the_providers_wait(kind: str) -> None:
    # Timed between the two requests' arrivals, not over the run: the run's first import of the provider's SDK
    # can take seconds on a loaded machine.
    arrived: list[float] = []
    replies = iter([ErrorReply.rate_limited(retry_after=0.2), "fine"])

    def timed(body: Any) -> Any:
        arrived.append(time.perf_counter())
        return next(replies)

    s = Session(kind, timed)
    run = await s.run()
    elapsed = arrived[1] - arrived[0]
    assert (run.outcome.kind, run.output) == (OutcomeKind.COMPLETED, "fine")
    retries = [e for e in s.events if isinstance(e, ModelCallRetry)]
    assert [(e.turn, e.attempt, type(e.error), e.delay) for e in retries] == [(1, 1, RateLimited, 0.2)]
    assert 0.2 <= elapsed < 10  # it waited the provider's 0.2 s (the upper bound is a margin for a loaded machine)
    first, second = s.server.requests
    assert first.body == second.body  # the same request, sent again
    assert shape(s.history) == [("user", ["text"]), ("assistant", ["text"])]


def observed_text(events: Sequence[Any], turn: int) -> list[str]:
    """The reply text observers saw in ``turn``, one string per attempt (a ``ModelCallRetry`` starts the next)."""
    attempts = [""]
    for e in events:
        if getattr(e, "turn", None) != turn:
            continue
        if isinstance(e, ModelCallRetry):
            attempts.append("")
        elif isinstance(e, ModelStreamEvent):
            if isinstance(e.event, TextDelta):
                attempts[-1] += e.event.text
            elif isinstance(e.event, PartStarted) and isinstance(e.event.part, TextPart):
                attempts[-1] += e.event.part.text
    return attempts


async def test_a_stream_cut_mid_reply_is_retried_and_the_retry_starts_its_message_afresh(kind: str) -> None:
    lost = calls(("c1", "echo", {"text": "lost"}), text="The first attempt, which the network will cut.")
    kept = calls(("c2", "echo", {"text": "kept"}), text="Second attempt.")
    # Cut just after the first piece of text, wherever each API puts it among its events.
    pieces = encode_reply(API_OF[kind], ModelResponse(lost), ReplyContext("m"), stream=True).pieces
    after = 1 + next(i for i, piece in enumerate(pieces) if b"The first" in piece)
    s = Session(kind, [CutStream(lost, after_events=after), kept, "done"], [echo])
    run = await s.run()
    assert run.ok
    retries = [e for e in s.events if isinstance(e, ModelCallRetry)]
    assert [(e.turn, e.attempt, type(e.error)) for e in retries] == [(1, 1, StreamTruncated)]
    seen = observed_text(s.events, turn=1)
    assert seen[0] != "" and "The first attempt".startswith(seen[0])  # observers saw the cut reply begin...
    assert seen[1] == "Second attempt."  # ...then the retry from its first delta
    assert ran == ["echo kept"]  # nothing of the cut reply ran
    assert_coherent(s.history)
    assert shape(s.history) == [
        ("user", ["text"]),
        ("assistant", ["text", "tool_call"]),
        ("user", ["tool_result"]),
        ("assistant", ["text"]),
    ]
    assert s.history[1].text_content() == "Second attempt."  # the retry's message only
    assert s.history[1].tool_calls()[0].input == {"text": "kept"}
    assert len(run.turns) == 2 and run.turns[0].output == s.history[1]
    assert s.server.requests[0].body == s.server.requests[1].body


# --- max_tokens --------------------------------------------------------------------------------------------------


async def test_a_max_tokens_stop_in_the_middle_of_a_tool_call_does_not_run_the_cut_call(kind: str) -> None:
    cut = ModelResponse(
        message=calls(("c1", "echo", {"text": "whole"}), ("c2", "echo", {})),
        stop_reason=StopReason.MAX_TOKENS,
        invalid_tool_calls=(InvalidToolCall("c2", "echo", '{"text": "hal', "cut off"),),
    )
    s = Session(kind, [cut, "I ran out of room; trying again later."], [echo])
    run = await s.run()
    assert run.ok
    assert run.turns[0].stop_reason is StopReason.MAX_TOKENS
    assert ran == ["echo whole"]  # the cut call never ran
    assert [r.ran for r in run.turns[0].tool_calls] == [True, False]
    assert not any(isinstance(e, ToolCallStarted) and e.call.name == "echo" and e.call.input == {} for e in s.events)
    assert_coherent(s.history)
    assert shape(s.history) == [
        ("user", ["text"]),
        ("assistant", ["tool_call", "tool_call"]),
        ("user", ["tool_result", "tool_result"]),
        ("assistant", ["text"]),
    ]
    whole, not_run = s.results()
    assert (str(whole.output), whole.is_error) == ("whole", False)
    assert not_run.is_error is True
    assert str(not_run.output).startswith("The call was not run: arguments are not valid JSON")
    assert s.read_back() == [("echo", "whole", False), ("echo", str(not_run.output), FLAGS_ERRORS[kind])]


# --- a streamed and a whole reply give the same run ---------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_a_tool_round_trip_streamed_or_not(kind: str, stream: bool) -> None:
    s = Session(kind, [calls(("c1", "echo", {"text": "héllo 🚀"})), "done"], [echo])
    run = await s.run(config=RunConfig(stream=stream))
    assert (run.outcome.kind, run.output) == (OutcomeKind.COMPLETED, "done")
    assert_coherent(s.history)
    assert shape(s.history) == ROUND_TRIP
    assert str(s.results()[0].output) == "héllo 🚀"
    assert [r.stream for r in s.server.requests] == [stream, stream]
    streamed = [e for e in s.events if isinstance(e, ModelStreamEvent)]
    assert bool(streamed) is stream


# --- thinking and prompt caching ------------------------------------------------------------------------------------


def thinking_turn(kind: str, n: int) -> Message:
    """A reply with thinking signed by ``kind``'s own provider (on Gemini the signature rides on the call)."""
    provider = THINKING_OF[kind]
    signature = base64.b64encode(f"signature {n}".encode()).decode() if n else SIGNATURE  # Gemini's must be base64
    call = MessagePart.tool_call(f"call_{n}", "echo", {"text": f"v{n}"})
    if kind == "gemini":  # the signature rides on the (first) functionCall part
        parts: list[MessagePart] = [
            ThinkingPart(text=f"Step {n}: what next?", provider=provider),
            TextPart(text=f"Echoing {n}."),
            ThinkingPart(text="", signature=signature, provider=provider),
            call,
        ]
    else:
        parts = [
            ThinkingPart(text=f"Step {n}: what next?", signature=signature, provider=provider),
            TextPart(text=f"Echoing {n}."),
            call,
        ]
    return Message.new(Role.ASSISTANT, parts)


def replayed_thinking(kind: str, request: dict[str, Any]) -> Any:
    """The thinking of the first reply as request ``request`` sends it back."""
    conversation = request[CONVERSATION_KEY[kind]]
    if kind == "anthropic":
        return conversation[1]["content"][0]
    if kind == "openai-responses":
        return next(item for item in conversation if item.get("type") == "reasoning")
    if kind == "gemini":
        return conversation[1]["parts"][:2]
    return {k: v for k, v in conversation[2].items() if k.startswith("reasoning")}  # after system, user


async def test_thinking_is_replayed_verbatim_to_the_provider_that_minted_it(kind: str) -> None:
    s = Session(kind, [thinking_turn(kind, 0), "done"], [echo])
    # reasoning_effort asks Responses for encrypted reasoning, the payload that replays without storage.
    run = await s.run(config=RunConfig(reasoning_effort="low"))
    assert run.ok
    assert_coherent(s.history)
    replay = replayed_thinking(kind, s.server.requests[1].body)
    if kind == "anthropic":
        assert replay == {"type": "thinking", "thinking": "Step 0: what next?", "signature": SIGNATURE}
    elif kind == "openai-responses":
        assert replay == {
            "type": "reasoning",
            "id": "rs_fake000001_0",
            "summary": [{"type": "summary_text", "text": "Step 0: what next?"}],
            "encrypted_content": SIGNATURE,
        }
    elif kind == "gemini":
        assert replay == [
            {"text": "Step 0: what next?", "thought": True},
            {"text": "Echoing 0."},
        ]
        call_part = s.server.requests[1].body["contents"][1]["parts"][2]
        assert call_part == {"functionCall": {"name": "echo", "args": {"text": "v0"}}, "thoughtSignature": SIGNATURE}
    else:  # Chat Completions has no reasoning replay (openai_chat module docstring): nothing is sent back
        assert replay == {}
    thinking = [p for p in s.history[1].parts if isinstance(p, ThinkingPart)]
    assert thinking[-1].signature == (None if kind == "openai" else SIGNATURE)
    assert {p.provider for p in thinking} == {THINKING_OF[kind]}


def without_cache_marks(value: Any) -> Any:
    """``value`` without Anthropic's ``cache_control`` marks: a breakpoint moves to the newest turn each call
    and is not part of the cached prefix (platform.claude.com/docs/en/build-with-claude/prompt-caching)."""
    if isinstance(value, dict):
        return {k: without_cache_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_marks(v) for v in value]
    return value


async def test_each_request_starts_with_the_previous_request_so_prompt_caches_hit(kind: str) -> None:
    turns = 5
    s = Session(kind, [*(thinking_turn(kind, n) for n in range(turns)), "finished"], [echo])
    run = await s.run(config=RunConfig(reasoning_effort="low"))
    assert run.ok and len(run.turns) == turns + 1
    assert_coherent(s.history)
    bodies = [without_cache_marks(r.body) for r in s.server.requests]
    key = CONVERSATION_KEY[kind]
    for previous, current in itertools.pairwise(bodies):
        before, after = previous[key], current[key]
        assert len(after) > len(before)
        assert after[: len(before)] == before
        # Everything around the conversation (model, system, tools, settings) is the same every call.
        assert {k: v for k, v in current.items() if k != key} == {k: v for k, v in previous.items() if k != key}


# --- a provider's context overflow (issue 8, item 6) ----------------------------------------------------------


@tool
async def dump(n: int) -> str:
    """A big, re-derivable output."""
    return f"dump {n}: " + "lorem ipsum dolor sit amet " * 90


@tool
async def note(text: str) -> Any:
    """A write: its result is not re-derivable."""
    from loopctl.message import Retention
    from loopctl.tool import ToolOutput

    ran.append(f"note {text}")
    return ToolOutput(f"noted {text}", retention=Retention.DURABLE)


async def test_a_provider_overflow_is_compacted_and_the_call_sent_again(kind: str) -> None:
    # The provider's "prompt is too long" (each API's own 400) discarded the run whole: history [], the
    # Durable note included, though the tool had run.
    from loopctl.compact import ContextBudget
    from loopctl.engine import CompactionFinished

    script = [
        calls(("d1", "dump", {"n": 1}), ("d2", "dump", {"n": 2})),
        calls(("n1", "note", {"text": "kept"})),
        ErrorReply.context_overflow(),
        "done",
    ]
    events: list[Any] = []
    with FakeProviderServer(script) as server:
        client = make_client(kind, server)
        config = SessionConfig(budget=ContextBudget(window=4_000, protected_tail=200))
        loop = BareLoop(client, [dump, note], config, observers=[events.append])
        try:
            run = await loop.run("go", FAST)
        finally:
            await client.aclose()
    assert run.outcome.kind is OutcomeKind.COMPLETED, run.outcome
    assert ran == ["note kept"]
    assert [(e.kind, e.reason) for e in events if isinstance(e, CompactionFinished)] == [("truncate", "emergency")]
    history = list(loop.history)
    assert_coherent(history)
    noted = [p for m in history for p in m.tool_results() if p.name == "note"]
    assert [str(p.output) for p in noted] == ["noted kept"]
    # The call was sent again, shorter: the two dumps were cut, the note kept.
    refused, retried = (server.requests[i].body[CONVERSATION_KEY[kind]] for i in (2, 3))
    assert len(str(retried)) < len(str(refused)) / 2
    assert "noted kept" in str(retried) and "dump 1" not in str(retried)


async def test_a_call_that_overflows_twice_ends_the_run_keeping_the_results_of_tools_that_ran(kind: str) -> None:
    from loopctl.compact import ContextBudget
    from loopctl.errors import ContextOverflow

    script = [
        calls(("d1", "dump", {"n": 1}), ("d2", "dump", {"n": 2})),
        calls(("n1", "note", {"text": "kept"})),
        ErrorReply.context_overflow(),
        ErrorReply.context_overflow(),
    ]
    with FakeProviderServer(script) as server:
        client = make_client(kind, server)
        loop = BareLoop(client, [dump, note], SessionConfig(budget=ContextBudget(window=4_000, protected_tail=200)))
        try:
            run = await loop.run("go", FAST)
        finally:
            await client.aclose()
    assert run.outcome.kind is OutcomeKind.CONTEXT_OVERFLOW
    assert isinstance(run.error, ContextOverflow)
    assert run.outcome.error == str(run.error)
    assert len(server.requests) == 4
    history = list(loop.history)
    assert_coherent(history)
    assert [str(p.output) for m in history for p in m.tool_results() if p.name == "note"] == ["noted kept"]
    assert history[-1].tool_results()


# --- an empty prompt (issue 8, item 24) ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_an_empty_prompt_is_sent_where_the_provider_answers_it(kind: str, stream: bool) -> None:
    # Responses and Gemini answer an empty user message with a 200, Chat too; the run ended "nothing to send"
    # before the model was asked. Anthropic refuses empty text: the run fails with UnsupportedContent, naming
    # the message, before any request (it dropped the prompt, sending a request that ended on the assistant's
    # turn, which Anthropic continues as a prefill). Either way run() returns an outcome, it does not raise.
    from loopctl.errors import UnsupportedContent

    config = RunConfig(stream=stream, retry_initial_delay=0.001)
    with FakeProviderServer(["hello", "answered", "again"]) as server:
        client = make_client(kind, server)
        loop = BareLoop(client, [], SessionConfig())
        try:
            assert (await loop.run("hi", config)).ok
            run = await loop.run("", config)
            # The conversation goes on: the next prompt is sent (Anthropic: with the empty one left out).
            after = await loop.run("more", config)
        finally:
            await client.aclose()
    history = list(loop.history)
    if kind == "anthropic":
        assert run.outcome.kind is OutcomeKind.FAILED
        assert isinstance(run.error, UnsupportedContent)
        assert str(run.error).startswith("messages[2]: the prompt is empty; Anthropic refuses")
        assert (after.outcome.kind, after.output) == (OutcomeKind.COMPLETED, "answered")
        assert [len(r.body["messages"]) for r in server.requests] == [1, 3]
        assert [b["text"] for b in server.requests[1].body["messages"][-1]["content"]] == ["more"]
        return
    assert (run.outcome.kind, run.output) == (OutcomeKind.COMPLETED, "answered")
    assert after.output == "again"
    assert len(server.requests) == 3
    sent = server.requests[1].body[CONVERSATION_KEY[kind]]
    empty = {"role": "user", "parts": [{"text": ""}]} if kind == "gemini" else {"role": "user", "content": ""}
    assert sent[-1] == empty
    assert len(sent) == 3
    assert_coherent(history)
    assert [m.text_content() for m in history] == ["hi", "hello", "", "answered", "more", "again"]
