"""The driver against the scripted client: tools, failures, cancellation, retries, limits, observers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loopctl.engine import (
    Approve,
    BareLoop,
    Deny,
    LoopMachine,
    ModelCallRetry,
    Modify,
    OutcomeKind,
    RunConfig,
    SessionConfig,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
)
from loopctl.errors import InvalidRequest, Overloaded, RateLimited, StreamTruncated
from loopctl.message import (
    ImagePart,
    ImageSource,
    Message,
    MessagePart,
    Retention,
    Role,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    check_conversation,
)
from loopctl.response import InvalidToolCall, ModelResponse, StopReason, Usage
from loopctl.testing import ScriptedClient
from loopctl.testing.scripted import Delay
from loopctl.tool import ToolContext, ToolOutput, tool

FAST = RunConfig(retry_initial_delay=0.001, retry_max_delay=0.01)


def calls(*specs: tuple[str, str, dict[str, Any]]) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(i, n, a) for i, n, a in specs])


@tool
async def echo(text: str) -> str:
    """Echo the text back."""
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


def results(loop: BareLoop, index: int = 2) -> list[ToolResultPart]:
    return [p for p in loop.history[index].parts if isinstance(p, ToolResultPart)]


async def test_a_tool_call_round_trip_commits_the_whole_exchange() -> None:
    client = ScriptedClient([calls(("c1", "echo", {"text": "hi"})), "done"])
    loop = BareLoop(client, [echo])
    run = await loop.run("go")
    assert run.outcome.kind is OutcomeKind.COMPLETED
    assert run.output == "done"
    assert [m.role for m in loop.history] == [Role.USER, Role.ASSISTANT, Role.USER, Role.ASSISTANT]
    assert results(loop) == [ToolResultPart(call_id="c1", name="echo", output="hi", is_error=False)]
    assert len(run.turns) == 2
    assert run.turns[0].tool_calls[0].result.output.root == "hi"
    assert run.turns[1].input == (loop.history[2],)
    assert check_conversation(list(loop.history)) == []


async def test_a_tool_that_raises_becomes_an_error_result_the_model_reads() -> None:
    client = ScriptedClient([calls(("c1", "boom", {"text": "x"})), "sorry"])
    loop = BareLoop(client, [boom])
    run = await loop.run("go")
    assert run.ok
    (r,) = results(loop)
    assert r.is_error is True
    assert str(r.output) == "Tool 'boom' failed: ValueError: cannot handle x"


class Unprintable(Exception):
    """An exception whose text cannot be read."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


async def test_a_tool_error_whose_text_cannot_be_read_is_still_an_error_result() -> None:
    # Formatting the error raised inside the handler, so run() raised RuntimeError("no text").
    @tool
    async def odd() -> str:
        """Fails oddly."""
        raise Unprintable

    loop = BareLoop(ScriptedClient([calls(("c1", "odd", {})), "sorry"]), [odd])
    run = await loop.run("go")
    assert run.ok
    (r,) = results(loop)
    assert (str(r.output), r.is_error) == ("Tool 'odd' failed: Unprintable: <its text cannot be read>", True)


class _NoText:
    def __str__(self) -> str:
        raise RuntimeError("no text")


@pytest.mark.parametrize(
    ("value", "sent", "is_error"),
    [
        # Neither JSON nor printable: to_tool_output raised out of the run.
        (
            _NoText(),
            "Tool 'give' returned output that cannot be sent: a _NoText value that is neither JSON nor printable",
            True,
        ),
        # A lone surrogate (a file name read with surrogateescape) failed the whole run with InvalidMessage, and
        # would have made every later request unwritable; it is sent as U+FFFD.
        ("caf\udce9.txt", "caf\ufffd.txt", False),
        # Parts built without validation that hold one cannot become a result (the model refuses them): an error
        # the model reads, not a failed run.
        (
            [TextPart.model_construct(text="a\ud800b")],
            "Tool 'give' returned output that cannot be sent: [0].text: expected a string that is valid Unicode "
            "(found a lone surrogate)",
            True,
        ),
    ],
)
async def test_tool_output_that_cannot_be_sent_as_is_never_breaks_the_run(
    value: object, sent: str, is_error: bool
) -> None:
    @tool
    async def give() -> object:
        """Returns the value."""
        return value

    loop = BareLoop(ScriptedClient([calls(("c1", "give", {})), "ok"]), [give])
    run = await loop.run("go")
    assert run.ok
    (r,) = results(loop)
    assert (str(r.output), r.is_error) == (sent, is_error)
    assert check_conversation(list(loop.history)) == []
    loop.machine.to_json()  # the conversation can be written


async def test_when_one_parallel_call_raises_out_of_the_run_the_others_are_stopped() -> None:
    # A BaseException (not an Exception) is not the model's to read: it ends the run. The sibling call used
    # to go on running after run() had returned, and finished its side effect later.
    finished: list[str] = []

    class Abort(BaseException):
        pass

    @tool
    async def slow() -> str:
        """Takes a while."""
        await asyncio.sleep(0.2)
        finished.append("slow")
        return "done"

    @tool
    async def abort() -> str:
        """Aborts."""
        raise Abort

    loop = BareLoop(ScriptedClient([calls(("a", "slow", {}), ("b", "abort", {}))]), [slow, abort])
    with pytest.raises(Abort):
        await loop.run("go")
    await asyncio.sleep(0.3)
    assert finished == []
    assert loop.machine.outcome.kind is OutcomeKind.FAILED
    # The turn is kept, each call answered: neither came back, and either may have acted.
    assert [m.role for m in loop.history] == [Role.USER, Role.ASSISTANT, Role.USER]
    assert [str(r.output) for r in results(loop)] == [
        "Not known whether it ran: the run failed (Abort) before its result was recorded."
    ] * 2


async def test_a_run_whose_input_cannot_be_written_raises_and_the_loop_still_runs() -> None:
    # The input was taken, then counting it raised InvalidMessage out of run() with the machine left in
    # awaiting_model: every later run() raised MachineStateError.
    from loopctl.errors import InvalidMessage

    loop = BareLoop(ScriptedClient(["fine"]))
    with pytest.raises(InvalidMessage):
        await loop.run("bad \udcff")
    assert (await loop.run("good")).output == "fine"
    assert list(loop.history) == [Message.user("good"), Message.assistant("fine")]


async def test_an_observer_that_raises_as_the_run_starts_leaves_the_loop_usable() -> None:
    # The error escaped before the run's error handling began, leaving the machine in awaiting_model: every
    # later run() raised MachineStateError.
    def fragile(event: object) -> None:
        raise RuntimeError("observer bug")

    loop = BareLoop(ScriptedClient(["fine"]), observers=[fragile])
    with pytest.raises(RuntimeError, match="observer bug"):
        await loop.run("go")
    assert loop.machine.outcome.kind is OutcomeKind.FAILED
    loop.observers.clear()
    assert (await loop.run("again")).output == "fine"


async def test_a_tool_that_hangs_past_its_timeout_becomes_an_error_result() -> None:
    client = ScriptedClient([calls(("c1", "hang", {"seconds": 10})), "ok"])
    loop = BareLoop(client, [hang])
    run = await loop.run("go", RunConfig(tool_timeout=0.05))
    assert run.ok
    (r,) = results(loop)
    assert r.is_error is True
    assert str(r.output) == "Tool 'hang' timed out after 0.05 s and was stopped."


async def test_an_unknown_tool_is_answered_with_the_tools_that_exist() -> None:
    client = ScriptedClient([calls(("c1", "rm_rf", {})), "ok"])
    loop = BareLoop(client, [echo, boom])
    run = await loop.run("go")
    assert run.ok
    (r,) = results(loop)
    assert str(r.output) == "Unknown tool 'rm_rf'. The tools that exist are: boom, echo."
    assert run.turns[0].tool_calls[0].ran is False


async def test_invalid_tool_input_goes_back_to_the_model_naming_the_field() -> None:
    client = ScriptedClient([calls(("c1", "echo", {"txt": "typo"})), "ok"])
    loop = BareLoop(client, [echo])
    await loop.run("go")
    (r,) = results(loop)
    assert r.is_error is True
    assert "text: Field required" in str(r.output)
    assert "txt: Extra inputs are not permitted" in str(r.output)


async def test_parallel_calls_finishing_out_of_order_are_committed_in_call_order() -> None:
    # The calls finish in the order b, c, a whatever the machine's load: each waits for the one before it to
    # finish (sleeps of different lengths raced when starting the three took longer than their difference).
    order: list[str] = []
    finished = {name: asyncio.Event() for name in "abc"}

    @tool
    async def slow(name: str, after: str) -> str:
        """Waits for the call named ``after`` to finish (none: ""), then returns its name."""
        if after:
            await asyncio.wait_for(finished[after].wait(), 30)
        order.append(name)
        finished[name].set()
        return name

    reply = calls(
        ("a", "slow", {"name": "a", "after": "c"}),
        ("b", "slow", {"name": "b", "after": ""}),
        ("c", "slow", {"name": "c", "after": "b"}),
    )
    loop = BareLoop(ScriptedClient([reply, "ok"]), [slow])
    await loop.run("go")
    assert order == ["b", "c", "a"]
    assert [str(r.output) for r in results(loop)] == ["a", "b", "c"]


async def test_sequential_dispatch_runs_one_call_at_a_time() -> None:
    running = 0
    peak = 0

    @tool
    async def probe(n: int) -> str:
        """Counts concurrency."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return str(n)

    reply = calls(*[(f"c{i}", "probe", {"n": i}) for i in range(4)])
    loop = BareLoop(ScriptedClient([reply, "ok"]), [probe])
    await loop.run("go", RunConfig(tool_dispatch="sequential"))
    assert peak == 1
    loop2 = BareLoop(ScriptedClient([reply, "ok"]), [probe])
    peak = 0
    await loop2.run("go", RunConfig(max_concurrency=2))
    assert peak == 2


async def test_cancel_mid_tool_keeps_the_turn_with_the_call_in_flight_answered() -> None:
    cancel = asyncio.Event()

    @tool
    async def block() -> str:
        """Blocks until cancelled."""
        cancel.set()
        await asyncio.sleep(30)
        return "never"

    client = ScriptedClient([calls(("c1", "echo", {"text": "x"})), calls(("c2", "block", {})), "unused"])
    loop = BareLoop(client, [echo, block])
    run = await loop.run("go", cancel=cancel)
    assert run.outcome.kind is OutcomeKind.CANCELLED
    # The first exchange completed and stays; so does the turn whose call was cancelled in flight (it may have
    # acted before it was stopped), answered so.
    assert [m.role for m in loop.history] == [Role.USER, Role.ASSISTANT, Role.USER, Role.ASSISTANT, Role.USER]
    assert check_conversation(list(loop.history)) == []
    (answer,) = results(loop, 4)
    assert answer.is_error
    assert str(answer.output) == "Not known whether it ran: the run was cancelled before its result was recorded."


async def test_cancel_while_waiting_for_the_model() -> None:
    cancel = asyncio.Event()
    client = ScriptedClient([Delay(30, "never")])
    loop = BareLoop(client)
    task = asyncio.create_task(loop.run("go", cancel=cancel))
    await asyncio.sleep(0.01)
    cancel.set()
    run = await asyncio.wait_for(task, 2)
    assert run.outcome.kind is OutcomeKind.CANCELLED
    assert list(loop.history) == [Message.user("go")]


async def test_task_cancellation_salvages_and_propagates() -> None:
    client = ScriptedClient([calls(("c1", "hang", {"seconds": 30}))])
    loop = BareLoop(client, [hang])
    task = asyncio.create_task(loop.run("go"))
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert loop.machine.outcome.kind is OutcomeKind.CANCELLED
    assert [m.role for m in loop.history] == [Role.USER, Role.ASSISTANT, Role.USER]
    assert str(results(loop)[0].output).startswith("Not known whether it ran: the run was cancelled")


async def test_cancelling_the_task_while_a_cancel_event_is_given_leaves_no_unretrieved_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # asyncio logged "_GatheringFuture exception was never retrieved" for the cancelled parallel calls.
    import gc

    client = ScriptedClient([calls(("a", "hang", {"seconds": 30}), ("b", "hang", {"seconds": 30}))])
    loop = BareLoop(client, [hang])
    task = asyncio.create_task(loop.run("go", cancel=asyncio.Event()))
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.01)
    gc.collect()
    assert "never retrieved" not in caplog.text
    assert loop.machine.outcome.kind is OutcomeKind.CANCELLED


async def test_a_rate_limit_then_success_is_retried_honouring_retry_after() -> None:
    seen: list[ModelCallRetry] = []
    client = ScriptedClient([RateLimited("slow down", retry_after=0.01), Overloaded("busy"), "fine"])
    loop = BareLoop(client, observers=[lambda e: seen.append(e) if isinstance(e, ModelCallRetry) else None])
    run = await loop.run("go", FAST)
    assert run.ok
    assert run.output == "fine"
    assert [(e.attempt, type(e.error).__name__) for e in seen] == [(1, "RateLimited"), (2, "Overloaded")]
    assert seen[0].delay == 0.01


async def test_a_stream_cut_mid_reply_is_retried_from_scratch() -> None:
    client = ScriptedClient([StreamTruncated("connection dropped"), "whole answer"])
    loop = BareLoop(client)
    run = await loop.run("go", FAST)
    assert run.output == "whole answer"
    assert client.calls == 2
    assert [m.role for m in loop.history] == [Role.USER, Role.ASSISTANT]


async def test_retries_give_up_after_max_retries() -> None:
    client = ScriptedClient([RateLimited("no")] * 3)
    loop = BareLoop(client)
    run = await loop.run("go", RunConfig(max_retries=2, retry_initial_delay=0.001, retry_max_delay=0.001))
    assert run.outcome.kind is OutcomeKind.FAILED
    assert run.outcome.error_type == "RateLimited"
    assert run.outcome.retryable is True
    assert client.calls == 3


async def test_a_non_retryable_provider_error_fails_the_run_keeping_history() -> None:
    client = ScriptedClient([calls(("c1", "echo", {"text": "x"})), InvalidRequest("bad", provider="anthropic")])
    loop = BareLoop(client, [echo])
    run = await loop.run("go", FAST)
    assert run.outcome.kind is OutcomeKind.FAILED
    assert run.outcome.error == "anthropic: bad"
    assert len(loop.history) == 3  # the completed exchange stays
    assert client.calls == 2


async def test_a_reply_that_uses_one_call_id_twice_fails_the_run_without_running_either_call() -> None:
    # It used to run both, then raise MachineStateError out of run() ("answered twice").
    ran: list[str] = []

    @tool
    async def note(text: str) -> str:
        """Notes the text."""
        ran.append(text)
        return text

    client = ScriptedClient([calls(("c1", "note", {"text": "a"}), ("c1", "note", {"text": "b"})), "after"])
    loop = BareLoop(client, [note])
    run = await loop.run("go", FAST)
    assert run.outcome.kind is OutcomeKind.FAILED
    assert run.outcome.error_type == "ProviderProtocolError"
    assert run.outcome.error == "the reply calls tools under the same id twice ('c1'); the calls cannot be run"
    assert ran == []
    assert list(loop.history) == [Message.user("go")]
    assert (await loop.run("again")).output == "after"
    assert check_conversation(loop.history) == []


async def test_a_max_tokens_stop_in_the_middle_of_a_tool_call_does_not_run_the_cut_call() -> None:
    ran: list[str] = []

    @tool
    async def note(text: str) -> str:
        """Records."""
        ran.append(text)
        return "noted"

    cut = ModelResponse(
        message=calls(("c1", "note", {"text": "whole"}), ("c2", "note", {})),
        stop_reason=StopReason.MAX_TOKENS,
        invalid_tool_calls=(InvalidToolCall("c2", "note", '{"text": "hal', "arguments are not valid JSON"),),
    )
    loop = BareLoop(ScriptedClient([cut, "retrying later"]), [note])
    run = await loop.run("go")
    assert ran == ["whole"]
    r1, r2 = results(loop)
    assert r1.is_error is False
    assert r2.is_error is True
    assert str(r2.output) == "The call was not run: arguments are not valid JSON"
    assert run.ok


async def test_a_refusal_ends_the_run_with_a_clear_outcome() -> None:
    refusal = ModelResponse(message=Message.assistant(""), stop_reason=StopReason.REFUSAL, raw_stop_reason="refusal")
    run = await BareLoop(ScriptedClient([refusal])).run("do something bad")
    assert run.outcome.kind is OutcomeKind.REFUSED


async def test_the_turn_limit_ends_the_run_with_coherent_history() -> None:
    client = ScriptedClient(lambda req: calls((f"c{len(req.messages)}", "echo", {"text": "again"})))
    loop = BareLoop(client, [echo])
    run = await loop.run("go", RunConfig(max_turns=3))
    assert run.outcome.kind is OutcomeKind.MAX_TURNS
    assert client.calls == 3
    assert len(loop.history) == 7
    assert check_conversation(list(loop.history)) == []


async def test_permission_can_approve_deny_or_modify_a_call() -> None:
    def decide(call: MessagePart) -> Any:
        text = call.input["text"]  # type: ignore[attr-defined]
        if text == "deny":
            return Deny("not allowed here")
        if text == "modify":
            return Modify({"text": "modified"})
        return Approve()

    reply = calls(("a", "echo", {"text": "ok"}), ("b", "echo", {"text": "deny"}), ("c", "echo", {"text": "modify"}))
    loop = BareLoop(ScriptedClient([reply, "done"]), [echo], permission=decide)
    run = await loop.run("go")
    a, b, c = results(loop)
    assert (str(a.output), a.is_error) == ("ok", False)
    assert (str(b.output), b.is_error) == ("not allowed here", True)
    assert (str(c.output), c.is_error) == ("modified", False)
    assert loop.history[1].tool_calls()[2].input == {"text": "modify"}  # history keeps the model's call
    assert [r.ran for r in run.turns[0].tool_calls] == [True, False, True]


async def test_an_async_permission_callback_is_awaited() -> None:
    async def never(call: MessagePart) -> bool:
        return False

    loop = BareLoop(ScriptedClient([calls(("a", "echo", {"text": "x"})), "ok"]), [echo], permission=never)
    await loop.run("go")
    assert results(loop)[0].is_error is True


async def test_tool_output_carries_images_errors_and_retention() -> None:
    png = "iVBORw0KGgo="

    @tool
    async def shot(ctx: ToolContext) -> ToolOutput:
        """Screenshot."""
        return ToolOutput(
            [TextPart(text=f"call {ctx.call_id}"), ImagePart(source=ImageSource(media_type="image/png", data=png))],
            retention=Retention.DURABLE,
        )

    loop = BareLoop(ScriptedClient([calls(("s1", "shot", {})), "seen"]), [shot])
    await loop.run("go")
    (r,) = results(loop)
    assert r.retention is Retention.DURABLE
    assert str(r.output) == "call s1"
    assert len(r.output.images()) == 1
    assert "ctx" not in shot.input_schema["properties"]


@pytest.mark.parametrize(
    ("media_type", "data", "problem"),
    [
        ("image/png", "aGVsbG8gd29ybGQ=", "its bytes are not PNG data"),  # "hello world"
        ("image/jpeg", "iVBORw0KGgo=", "its bytes are not JPEG data"),  # a PNG labelled JPEG
        ("image/png", "", "its bytes are not PNG data"),
        ("image/svg+xml", "PHN2Zz48L3N2Zz4=", "its media type 'image/svg+xml' is not one of image/png, image/jpeg"),
    ],
)
async def test_a_tool_image_no_provider_can_read_becomes_an_error_result(
    media_type: str, data: str, problem: str
) -> None:
    # It went into the conversation, so every later request failed: a 400 ("Image does not match the provided
    # media type", "Could not process image") or UnsupportedContent, run after run.
    @tool
    async def shot() -> ToolOutput:
        """Screenshot."""
        return ToolOutput([TextPart(text="here"), ImagePart(source=ImageSource(media_type=media_type, data=data))])

    loop = BareLoop(ScriptedClient([calls(("s1", "shot", {})), "seen"]), [shot])
    run = await loop.run("go")
    assert run.ok
    (r,) = results(loop)
    assert r.is_error is True
    assert str(r.output).startswith(f"Tool 'shot' returned an image that cannot be sent: {problem}")
    assert r.output.images() == ()


async def test_tool_images_of_every_common_type_pass() -> None:
    import base64

    heads = {
        "image/png": b"\x89PNG\r\n\x1a\n....",
        "image/jpeg": b"\xff\xd8\xff\xe0....",
        "image/gif": b"GIF89a....",
        "image/webp": b"RIFF\x00\x00\x00\x00WEBPVP8 ",
    }

    @tool
    async def shots() -> ToolOutput:
        """Screenshots."""
        return ToolOutput(
            [ImagePart(source=ImageSource(media_type=t, data=base64.b64encode(h).decode())) for t, h in heads.items()]
        )

    loop = BareLoop(ScriptedClient([calls(("s1", "shots", {})), "seen"]), [shots])
    await loop.run("go")
    (r,) = results(loop)
    assert (r.is_error, [i.source.media_type for i in r.output.images()]) == (False, list(heads))


async def test_observers_see_typed_events_in_order() -> None:
    events: list[Any] = []
    loop = BareLoop(ScriptedClient([calls(("c1", "echo", {"text": "x"})), "done"]), [echo], observers=[events.append])
    await loop.run("go")
    kinds = [type(e).__name__ for e in events if type(e).__name__ != "ModelStreamEvent"]
    assert kinds == [
        "RunStarted",
        "TurnStarted",
        "TurnFinished",
        "ToolCallStarted",
        "ToolCallFinished",
        "TurnStarted",
        "TurnFinished",
        "RunFinished",
    ]
    texts = [e.event.text for e in events if type(e).__name__ == "ModelStreamEvent" and hasattr(e.event, "text")]
    assert texts == ["done"]
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert finished[0].result.output.root == "x"
    plain = [e for e in events if type(e).__name__ != "ModelStreamEvent"]
    assert isinstance(plain[3], ToolCallStarted)
    assert isinstance(plain[2], TurnFinished)


async def test_a_session_moves_between_processes_through_the_machine() -> None:
    loop = BareLoop(ScriptedClient([calls(("c1", "echo", {"text": "x"})), "first"]), [echo])
    await loop.run("one")
    saved = loop.into_machine().to_json()
    restored = BareLoop.from_machine(LoopMachine.from_json(saved), ScriptedClient(["second"]), [echo])
    run = await restored.run("two")
    assert run.output == "second"
    assert [str(m) for m in restored.history] == [
        "one",
        '[Tool: echo with input: {"text":"x"}]',
        "[Tool Result: x]",
        "first",
        "two",
        "second",
    ]


async def test_each_request_starts_with_the_previous_request_byte_for_byte_over_20_turns() -> None:
    def reply(req: Any) -> Message:
        n = len(req.messages)
        if n >= 41:
            return Message.assistant("finished")
        return Message.new(
            Role.ASSISTANT,
            [
                ThinkingPart(text=f"step {n}: thinking ü", signature=f"sig{n}", provider="anthropic"),
                TextPart(text=f"calling {n}"),
                MessagePart.tool_call(f"call_{n}", "echo", {"text": f"value {n} 🚀"}),
            ],
        )

    client = ScriptedClient(reply)
    loop = BareLoop(client, [echo])
    run = await loop.run("start")
    assert run.ok
    assert len(client.requests) == 21
    previous = b""
    for req in client.requests:
        body = b"[" + b",".join(m.to_json().encode() for m in req.messages)
        assert body.startswith(previous)
        previous = body
    # Thinking stays verbatim in history across turns.
    assert loop.history[1].parts[0] == ThinkingPart(text="step 1: thinking ü", signature="sig1", provider="anthropic")


async def test_run_sync_runs_on_a_fresh_event_loop() -> None:
    loop = BareLoop(ScriptedClient(["hi"]))
    with pytest.raises(RuntimeError, match="inside a running event loop"):
        loop.run_sync("x")


def test_run_sync_outside_an_event_loop() -> None:
    run = BareLoop(ScriptedClient(["hi"])).run_sync("x")
    assert run.output == "hi"


async def test_usage_is_summed_over_turns() -> None:
    client = ScriptedClient([calls(("c1", "echo", {"text": "x"})), "ok"], usage=Usage(100, 10, 50, 0, 3))
    run = await BareLoop(client, [echo]).run("go")
    assert run.usage == Usage(200, 20, 100, 0, 6)


async def test_the_system_prompt_and_tool_schemas_reach_the_client() -> None:
    client = ScriptedClient(["ok"])
    await BareLoop(client, [echo], SessionConfig(system_prompt="be brief")).run("go", RunConfig(max_tokens=77))
    req = client.requests[0]
    assert req.system == "be brief"
    assert [t.name for t in req.tools] == ["echo"]
    assert req.tools[0].input_schema["required"] == ["text"]
    assert req.max_tokens == 77


async def test_a_huge_tool_output_is_cut_in_the_middle_with_a_note() -> None:
    @tool
    async def dump() -> str:
        """Returns a lot."""
        return "A" * 5_000 + "B" * 5_000

    loop = BareLoop(ScriptedClient([calls(("d1", "dump", {})), "ok"]), [dump])
    await loop.run("go", RunConfig(max_tool_output_chars=1_000))
    (r,) = results(loop)
    text = str(r.output)
    assert len(text) <= 1_000
    assert text.startswith("A" * 600)
    assert text.endswith("B" * 320)
    assert "…[9,040 characters cut]…" in text
    loop2 = BareLoop(ScriptedClient([calls(("d1", "dump", {})), "ok"]), [dump])
    await loop2.run("go", RunConfig(max_tool_output_chars=None))
    assert len(str(results(loop2)[0].output)) == 10_000


# --- a tool's own cancellation (issue 8, item 15) ----------------------------------------------------------


@tool
async def self_cancelling() -> str:
    """Awaits a sub-task of its own that gets cancelled."""
    inner = asyncio.create_task(asyncio.sleep(10))
    asyncio.get_running_loop().call_soon(inner.cancel)
    await inner
    return "never"


@pytest.mark.parametrize("dispatch", ["sequential", "parallel"])
@pytest.mark.parametrize("with_cancel_event", [False, True])
async def test_a_tool_whose_own_sub_task_is_cancelled_fails_as_a_tool_not_the_run(
    dispatch: str, with_cancel_event: bool
) -> None:
    # run() raised CancelledError: the tool's internal cancellation was taken for the caller's.
    script = [calls(("c1", "self_cancelling", {}), ("c2", "echo", {"text": "x"})), "went on"]
    loop = BareLoop(ScriptedClient(script), [self_cancelling, echo])
    cancel = asyncio.Event() if with_cancel_event else None
    run = await loop.run("go", RunConfig(tool_dispatch=dispatch), cancel=cancel)  # type: ignore[arg-type]
    assert (run.outcome.kind, run.output) == (OutcomeKind.COMPLETED, "went on")
    first, second = results(loop)
    assert (str(first.output), first.is_error) == (
        "Tool 'self_cancelling' failed: a task of its own was cancelled (CancelledError).",
        True,
    )
    assert (str(second.output), second.is_error) == ("x", False)


async def test_a_client_whose_own_task_is_cancelled_fails_the_run_rather_than_cancelling_the_caller() -> None:
    async def cancelled_inside(request: Any) -> str:
        inner = asyncio.create_task(asyncio.sleep(10))
        inner.cancel()
        await inner
        return "never"

    class Client(ScriptedClient):
        async def generate(self, request: Any, **kw: Any) -> Any:
            await cancelled_inside(request)

    loop = BareLoop(Client([]))
    run = await loop.run("go")
    assert run.outcome.kind is OutcomeKind.FAILED
    assert run.outcome.error == "an operation of the run was cancelled from inside it (asyncio.CancelledError)"
    assert list(loop.history) == [Message.user("go")]


async def test_the_callers_cancel_still_cancels_a_run_inside_a_tool() -> None:
    loop = BareLoop(ScriptedClient([calls(("c1", "hang", {"seconds": 30}), ("c2", "hang", {"seconds": 30}))]), [hang])
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await loop.run("go")
    assert loop.machine.outcome.kind is OutcomeKind.CANCELLED


# --- a failed run's output and error (issue 8, item 16) -----------------------------------------------------


async def test_a_failed_run_has_no_earlier_answer_and_carries_its_error() -> None:
    # run.output was the previous run's answer ("first answer") and the error only a string.
    from loopctl.errors import RunFailed

    error = InvalidRequest("bad request", provider="openai", status=400)
    loop = BareLoop(ScriptedClient(["first answer", error]))
    assert (await loop.run("one")).output == "first answer"
    run = await loop.run("two")
    assert (run.outcome.kind, run.output, run.error) == (OutcomeKind.FAILED, "", error)
    with pytest.raises(
        RunFailed, match=r"^the run ended with outcome failed: openai: bad request \(HTTP 400\)$"
    ) as info:
        run.raise_for_outcome()
    assert (info.value.__cause__, info.value.run) == (error, run)


async def test_raise_for_outcome_returns_a_completed_run_and_raises_one_type_per_outcome() -> None:
    from loopctl.errors import MaxTokensReached, RunCancelled, RunRefused, TurnLimitReached

    done = await BareLoop(ScriptedClient(["fine"])).run("go")
    assert done.raise_for_outcome() is done
    assert done.error is None
    cut = ModelResponse(Message.assistant("half an ans"), stop_reason=StopReason.MAX_TOKENS)
    refused = ModelResponse(Message.assistant("no"), stop_reason=StopReason.REFUSAL)
    cases: list[tuple[Any, RunConfig, type[Exception], str]] = [
        ([cut], RunConfig(), MaxTokensReached, "half an ans"),
        ([refused], RunConfig(), RunRefused, "no"),
        ([calls(("c1", "echo", {"text": "x"}))], RunConfig(max_turns=1), TurnLimitReached, ""),
    ]
    for script, config, raised, output in cases:
        run = await BareLoop(ScriptedClient(script), [echo]).run("go", config)
        assert (run.output, run.error) == (output, None)
        with pytest.raises(raised):
            run.raise_for_outcome()
    cancel = asyncio.Event()
    cancel.set()
    cancelled = await BareLoop(ScriptedClient(["never"])).run("go", cancel=cancel)
    with pytest.raises(RunCancelled):
        cancelled.raise_for_outcome()


# --- sync tools that time out (issue 8, item 20) ------------------------------------------------------------


async def test_a_sync_tool_that_times_out_is_said_to_be_still_running_and_is_asked_to_stop() -> None:
    # The result said "timed out ... and was stopped" while the thread went on running.
    import threading

    finished = threading.Event()
    seen_stop: list[bool] = []

    @tool
    def crunch(ctx: ToolContext) -> str:
        """Works in a thread, checking whether it should stop."""
        for _ in range(400):
            if ctx.stop_requested:
                seen_stop.append(True)
                break
            threading.Event().wait(0.005)
        finished.set()
        return "crunched"

    loop = BareLoop(ScriptedClient([calls(("c1", "crunch", {})), "ok"]), [crunch])
    run = await loop.run("go", RunConfig(tool_timeout=0.05))
    assert run.ok
    (r,) = results(loop)
    assert (str(r.output), r.is_error) == (
        "Tool 'crunch' timed out after 0.05 s. It runs in a worker thread, which cannot be stopped: it may still "
        "be running, and what it does may still take effect.",
        True,
    )
    assert await asyncio.to_thread(finished.wait, 5)
    assert seen_stop == [True]  # it polled ctx.stop_requested and stopped early


# --- deps for tools, instructions (issue 10, items 3 and 4) -------------------------------------------------


async def test_deps_reach_a_tool_through_its_context_and_not_its_schema() -> None:
    from dataclasses import dataclass

    from loopctl.tool import RunContext

    @dataclass
    class Deps:
        user: str

    seen: list[ToolContext[Deps]] = []

    @tool
    async def whoami(ctx: ToolContext[Deps], greeting: str) -> str:
        """Greets the user of the run."""
        seen.append(ctx)
        return f"{greeting}, {ctx.deps.user}"

    assert whoami.input_schema == {
        "additionalProperties": False,
        "properties": {"greeting": {"type": "string"}},
        "required": ["greeting"],
        "type": "object",
    }
    usage = Usage(input_tokens=10, output_tokens=2)
    client = ScriptedClient(["first", calls(("w1", "whoami", {"greeting": "hi"})), "done"], usage=usage)
    loop = BareLoop(client, [whoami])
    await loop.run("warm up")
    deps = Deps("ada")
    run = await loop.run("who am I?", deps=deps)
    assert run.ok
    (ctx,) = seen
    assert (ctx.deps, ctx.call_id, ctx.name, ctx.turn, ctx.usage) == (deps, "w1", "whoami", 1, usage)
    assert str(results(loop, 4)[0].output) == "hi, ada"
    assert client.requests[1].tools[0].input_schema == whoami.input_schema
    assert RunContext(deps).deps is deps


async def test_instructions_are_made_once_per_run_and_every_request_of_the_run_carries_the_same_bytes() -> None:
    from loopctl.tool import RunContext

    made: list[Any] = []

    async def instructions(ctx: RunContext[str]) -> str:
        made.append(ctx.deps)
        return f"You help {ctx.deps} (instructions number {len(made)})."

    script = [calls(("c1", "echo", {"text": "a"})), calls(("c2", "echo", {"text": "b"})), "done", "again"]
    client = ScriptedClient(script)
    loop = BareLoop(client, [echo], SessionConfig(system_prompt="Be brief.", instructions=instructions))
    await loop.run("go", deps="ada")
    assert made == ["ada"]  # three model calls, one evaluation
    systems = [r.system for r in client.requests]
    assert systems == ["Be brief.\n\nYou help ada (instructions number 1)."] * 3
    await loop.run("and again", deps="bob")
    assert made == ["ada", "bob"]
    assert client.requests[3].system == "Be brief.\n\nYou help bob (instructions number 2)."


async def test_instructions_may_be_a_string_or_a_sync_callable_and_system_prompt_keeps_working() -> None:
    client = ScriptedClient(["a", "b", "c"])
    await BareLoop(client, config=SessionConfig(instructions="Answer in French.")).run("go")
    await BareLoop(client, config=SessionConfig(instructions=lambda ctx: f"turn {ctx.turn}")).run("go")
    await BareLoop(client, config=SessionConfig(system_prompt="Only this.")).run("go")
    assert [r.system for r in client.requests] == ["Answer in French.", "turn 0", "Only this."]


async def test_instructions_that_do_not_return_text_are_refused_before_the_run_starts() -> None:
    loop = BareLoop(ScriptedClient(["a"]), config=SessionConfig(instructions=lambda ctx: 42))  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="instructions returned int, not a str"):
        await loop.run("go")
    assert list(loop.history) == []


async def test_an_output_validator_checks_plain_text_answers_too() -> None:
    # With no output_type the validator was never called: a rejected answer came back as the run's output.
    from loopctl.output import RejectOutput

    def short(text: str) -> str:
        if len(text) > 10:
            raise RejectOutput("Answer in ten characters or fewer.")
        return text.upper()

    client = ScriptedClient(["a far too long answer", "short one"])
    run = await BareLoop(client).run("go", output_validator=short)
    assert (run.outcome.kind, run.output) == (OutcomeKind.COMPLETED, "SHORT ONE")
    assert client.requests[1].messages[-1] == Message.user("Answer in ten characters or fewer.")
    assert client.requests[0].tools == () and client.requests[0].output_format is None


@pytest.mark.parametrize("mode", ["prompted", "native", "tool", "text"])
@pytest.mark.parametrize("message", [{"why": "too small"}, 42, None, ["a"]])
async def test_a_reject_output_whose_message_is_not_text_ends_the_run_failed_in_every_mode(
    mode: str, message: object
) -> None:
    # Issue 18, item 16: under PromptedOutput and NativeOutput run() raised InvalidMessage (the message became
    # the text of the retry prompt); under OutputTool the run failed with a confusing error; RejectOutput(None)
    # was read as acceptance and the run "completed" without output.
    from pydantic import BaseModel

    from loopctl.output import NativeOutput, OutputTool, PromptedOutput, RejectOutput

    class Size(BaseModel):
        n: int

    def reject(value: object) -> None:
        raise RejectOutput(message)  # type: ignore[arg-type]

    modes = {"prompted": PromptedOutput(Size), "native": NativeOutput(Size), "tool": OutputTool(Size)}
    output_type: object = modes.get(mode)
    reply = calls(("f1", "final_result", {"n": 1})) if mode == "tool" else '{"n": 1}'
    client = ScriptedClient([reply, reply])
    loop = BareLoop(client)
    run = await loop.run("go", output_type=output_type, output_validator=reject)
    assert run.outcome.kind is OutcomeKind.FAILED
    assert run.outcome.error_type == "TypeError"
    assert run.outcome.error == (
        "the output validator raised RejectOutput with a message of type "
        f"{type(message).__name__}; its message is the text the model reads, a str"
    )
    assert isinstance(run.error, TypeError)
    assert client.calls == 1
    assert check_conversation(list(loop.history)) == []
    assert loop.history[0] == Message.user("go")
    assert (await loop.run("again", output_type=output_type)).outcome.kind is OutcomeKind.COMPLETED


@pytest.mark.parametrize("mode", ["prompted", "tool", "text"])
async def test_a_reject_output_message_with_a_lone_surrogate_reaches_the_model_with_u_fffd(mode: str) -> None:
    # A message cut inside a surrogate pair could not be written: run() raised InvalidMessage (text modes).
    from pydantic import BaseModel

    from loopctl.output import OutputTool, PromptedOutput, RejectOutput

    class Size(BaseModel):
        n: int

    rejected: list[object] = []

    def once(value: object) -> object:
        if not rejected:
            rejected.append(value)
            raise RejectOutput("too small \ud83d")
        return value

    output_type: object = {"prompted": PromptedOutput(Size), "tool": OutputTool(Size)}.get(mode)
    reply = calls(("f1", "final_result", {"n": 1})) if mode == "tool" else '{"n": 1}'
    client = ScriptedClient([reply, reply if mode != "tool" else calls(("f2", "final_result", {"n": 1}))])
    run = await BareLoop(client).run("go", output_type=output_type, output_validator=once)
    assert run.outcome.kind is OutcomeKind.COMPLETED
    told = client.requests[1].messages[-1]
    assert "too small \ufffd" in (told.text_content() or str(told.parts[0].output))  # type: ignore[union-attr]
