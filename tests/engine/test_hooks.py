"""Hooks: run in order around each model call and tool call; may change the request, block a call, replace a
result; a hook that raises fails the run with ``HookFailed`` naming it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from loopctl.engine import BareLoop, Block, Hook, OutcomeKind, RunConfig
from loopctl.errors import HookFailed, RunFailed
from loopctl.message import Message, MessagePart, Role, ToolCallPart, ToolResultPart
from loopctl.providers.base import ModelRequest
from loopctl.response import ModelResponse
from loopctl.testing import ScriptedClient
from loopctl.tool import tool

log: list[str] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    log.clear()


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    log.append(f"tool {key}")
    return f"secret-{key}"


def call(i: str, key: str) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(i, "lookup", {"key": key})])


class Recorder(Hook):
    """Logs each method it is called with, tagged."""

    def __init__(self, tag: str) -> None:
        self.name = tag

    def before_model(self, request: ModelRequest) -> ModelRequest:
        log.append(f"{self.name} before_model system={request.system}")
        return dataclasses.replace(request, system=f"{request.system or ''}+{self.name}")

    async def after_model(self, response: ModelResponse) -> None:
        log.append(f"{self.name} after_model")

    def before_tool(self, call: ToolCallPart) -> None:
        log.append(f"{self.name} before_tool {call.id}")

    async def after_tool(self, call: ToolCallPart, result: ToolResultPart) -> str:
        log.append(f"{self.name} after_tool {result.output}")
        return f"{result.output}|{self.name}"


async def test_hooks_run_in_order_and_each_sees_what_the_one_before_left() -> None:
    client = ScriptedClient([call("c1", "k"), "done"])
    loop = BareLoop(
        client, [lookup], hooks=[Recorder("A"), Recorder("B")], permission=lambda c: log.append("perm") or True
    )
    run = await loop.run("look k up", RunConfig(stream=False))
    assert run.ok
    assert log[:9] == [
        "A before_model system=None",
        "B before_model system=+A",
        "A after_model",
        "B after_model",
        "A before_tool c1",
        "B before_tool c1",
        "perm",  # the permission check comes after the hooks
        "tool k",
        "A after_tool secret-k",
    ]
    assert log[9] == "B after_tool secret-k|A"
    assert client.requests[0].system == "+A+B"  # the request as the hooks left it was sent
    result = list(loop.history)[2].parts[0]
    assert isinstance(result, ToolResultPart) and str(result.output) == "secret-k|A|B"  # what the model read


class Gate(Hook):
    def __init__(self) -> None:
        self.asked: list[str] = []

    def before_tool(self, call: ToolCallPart) -> Block | None:
        self.asked.append(call.id)
        return Block("lookups of 'prod' are not allowed") if call.input == {"key": "prod"} else None


async def test_a_blocked_call_does_not_run_and_the_model_reads_why() -> None:
    later = Gate()
    asked: list[str] = []
    two = Message.new(
        Role.ASSISTANT,
        [MessagePart.tool_call("c1", "lookup", {"key": "prod"}), MessagePart.tool_call("c2", "lookup", {"key": "dev"})],
    )
    loop = BareLoop(
        ScriptedClient([two, "ok"]), [lookup], hooks=[Gate(), later], permission=lambda c: asked.append(c.id) or True
    )
    run = await loop.run("look up")
    assert run.ok and log == ["tool dev"]
    first, second = list(loop.history)[2].parts
    assert isinstance(first, ToolResultPart) and first.is_error
    assert str(first.output) == "lookups of 'prod' are not allowed"
    assert isinstance(second, ToolResultPart) and str(second.output) == "secret-dev"
    assert later.asked == ["c2"] and asked == ["c2"]  # a block stops the later hooks and the permission check
    assert [(r.call.id, r.ran) for r in run.turns[0].tool_calls] == [("c1", False), ("c2", True)]


class Redactor(Hook):
    def after_tool(self, call: ToolCallPart, result: ToolResultPart) -> ToolResultPart:
        return result.model_copy(update={"output": result.output.__class__.from_string("[redacted]")})


async def test_after_tool_replaces_the_result_the_model_reads() -> None:
    loop = BareLoop(ScriptedClient([call("c1", "k"), "ok"]), [lookup], hooks=[Redactor()])
    await loop.run("go")
    assert str(list(loop.history)[2].parts[0].output) == "[redacted]"  # type: ignore[union-attr]


class Broken(Hook):
    def __init__(self, method: str) -> None:
        self.method = method

    def before_model(self, request: ModelRequest) -> None:
        if self.method == "before_model":
            raise RuntimeError("the moderation service is down")

    def after_tool(self, call: ToolCallPart, result: ToolResultPart) -> Any:
        if self.method == "after_tool":
            return 42  # not a result
        return None


async def test_a_hook_that_raises_fails_the_run_with_an_error_naming_it() -> None:
    client = ScriptedClient(["never sent"])
    run = await BareLoop(client, hooks=[Broken("before_model")]).run("go")
    assert run.outcome.kind is OutcomeKind.FAILED and run.outcome.error_type == "HookFailed"
    assert isinstance(run.error, HookFailed) and (run.error.hook, run.error.method) == ("Broken", "before_model")
    assert str(run.error) == "hook Broken.before_model failed: RuntimeError: the moderation service is down"
    assert isinstance(run.error.__cause__, RuntimeError)
    assert client.calls == 0
    with pytest.raises(RunFailed):
        run.raise_for_outcome()


async def test_a_hook_that_returns_what_it_may_not_fails_the_run() -> None:
    loop = BareLoop(ScriptedClient([call("c1", "k"), "ok"]), [lookup], hooks=[Broken("after_tool")])
    run = await loop.run("go")
    assert isinstance(run.error, HookFailed)
    assert str(run.error) == "hook Broken.after_tool failed: returned int, not a ToolResultPart, str or None"
    assert run.error.call_id == "c1"
    # The tool ran: the turn is kept, its result withheld (the failed hook may have been the redacting one).
    (answer,) = list(loop.history)[2].parts
    assert isinstance(answer, ToolResultPart) and answer.is_error
    assert str(answer.output) == f"The tool ran, but the run failed after it ({run.error}); its result is withheld."
    assert "secret" not in str(answer.output) and log == ["tool k"]


def charge(i: str, amount: int) -> ToolCallPart:
    return ToolCallPart(id=i, name="lookup", input={"key": str(amount)})


class Audit(Hook):
    """Its audit log fails: before the call ``fail_before``, after every call with ``after``."""

    name = "audit"

    def __init__(self, fail_before: str | None = None, after: bool = False) -> None:
        self.fail_before, self.after = fail_before, after

    def before_tool(self, call: ToolCallPart) -> None:
        if call.id == self.fail_before:
            raise ConnectionError("audit log unreachable")

    async def after_tool(self, call: ToolCallPart, result: ToolResultPart) -> None:
        if self.after:
            raise ConnectionError("audit log unreachable")


async def test_a_before_tool_failure_keeps_the_results_of_the_calls_that_ran_before_it() -> None:
    reply = Message.new(Role.ASSISTANT, [charge("c1", 10), charge("c2", 20), charge("c3", 30)])
    loop = BareLoop(ScriptedClient([reply, "never"]), [lookup], hooks=[Audit(fail_before="c2")])
    run = await loop.run("charge", RunConfig(tool_dispatch="sequential"))
    assert run.outcome.error_type == "HookFailed" and log == ["tool 10"]
    history = list(loop.history)
    assert history[1] == reply  # the turn is kept, every call answered
    answers = {p.call_id: p for p in history[2].parts if isinstance(p, ToolResultPart)}
    assert str(answers["c1"].output) == "secret-10" and not answers["c1"].is_error
    failed = "hook audit.before_tool failed: ConnectionError: audit log unreachable"
    assert str(answers["c2"].output) == f"Not run: {failed}."
    assert str(answers["c3"].output) == f"Not run: the run failed before the call ran ({failed})."
    assert [(r.call.id, r.ran) for r in run.turns[0].tool_calls] == [("c1", True), ("c2", False), ("c3", False)]


async def test_an_after_tool_failure_in_a_parallel_batch_keeps_what_ran() -> None:
    reply = Message.new(Role.ASSISTANT, [charge("c1", 10), charge("c2", 20)])
    loop = BareLoop(ScriptedClient([reply, "never"]), [lookup], hooks=[Audit(after=True)])
    run = await loop.run("charge", RunConfig(tool_dispatch="parallel"))
    assert run.outcome.error_type == "HookFailed" and sorted(log) == ["tool 10", "tool 20"]
    answers = [p for p in list(loop.history)[2].parts if isinstance(p, ToolResultPart)]
    assert [a.call_id for a in answers] == ["c1", "c2"] and all(a.is_error for a in answers)
    texts = [str(a.output) for a in answers]
    # The first to fail says it ran; the other was stopped in flight (after its tool ran, here): not known.
    assert any(t.startswith("The tool ran, but the run failed after it") for t in texts)
    assert all(t.startswith(("The tool ran", "Not known whether it ran")) for t in texts)


async def test_any_object_with_hook_methods_is_a_hook() -> None:
    class OnlyAfterModel:
        name = "counter"

        def __init__(self) -> None:
            self.seen = 0

        def after_model(self, response: ModelResponse) -> None:
            self.seen += 1

    counter = OnlyAfterModel()
    run = await BareLoop(ScriptedClient([call("c1", "k"), "ok"]), [lookup], hooks=[counter]).run("go")
    assert run.ok and counter.seen == 2
    with pytest.raises(TypeError, match="is not a hook"):
        BareLoop(ScriptedClient([]), hooks=[object()])


class Rewrite(Hook):
    name = "fix-request"

    def __init__(self, **change: Any) -> None:
        self.change = change

    def before_model(self, request: ModelRequest) -> ModelRequest:
        return dataclasses.replace(request, **self.change)


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"messages": ["hello"]}, "returned a request that cannot be sent: messages[0] is a str, not a Message"),
        ({"messages": "hello"}, "messages must be a sequence of Message, not str"),
        ({"extra": {"metadata": {1, 2}}}, "extra.metadata is not a JSON value (its type is set)"),
        ({"stop": "END"}, "stop must be a sequence of str or None"),
        ({"tool_choice": "bogus"}, "ValueError: tool_choice must be 'auto', 'none', 'required' or ForceTool"),
    ],
)
async def test_a_before_model_hook_returning_a_bad_request_fails_the_run_naming_it(
    kind: str, change: dict[str, Any], problem: str
) -> None:
    from loopctl.testing import FakeProviderServer
    from tests.fake_clients import make_client

    with FakeProviderServer(["fine"]) as server:
        client = make_client(kind, server)
        try:
            run = await BareLoop(client, hooks=[Rewrite(**change)]).run("go")
        finally:
            await client.aclose()
        assert server.requests == []  # nothing was sent
    assert run.outcome.kind is OutcomeKind.FAILED and isinstance(run.error, HookFailed)
    assert (run.error.hook, run.error.method) == ("fix-request", "before_model")
    assert problem in str(run.error)


def test_a_request_or_run_with_a_bad_tool_choice_is_refused_where_it_is_made() -> None:
    with pytest.raises(ValueError, match="tool_choice must be"):
        ModelRequest(messages=[], tool_choice="bogus")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tool_choice must be"):
        RunConfig(tool_choice="any")  # type: ignore[arg-type]
