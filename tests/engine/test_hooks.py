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
    assert list(loop.history) == [Message.user("go")]  # the half-done turn is dropped, as for any failure


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
