"""The client features against loopctl's own test server (``tests/mcp/server.py``), run as a real subprocess: sampling
with tools both ways, answered by a real client against a second fake provider server and counted in the
calling run; the sampling handler refusing, editing and answering; tool filters and approval rules."""

from __future__ import annotations

import json
from typing import Any

from loopctl.engine import Approve, OutcomeKind
from loopctl.mcp import SamplingRequest
from loopctl.providers import ModelRequest
from loopctl.response import ModelResponse, Usage
from loopctl.testing import FakeProviderServer
from tests.fake_clients import make_client
from tests.mcp.conftest import Model, calls, stdio_server


class Recording:
    """A real model client that keeps the replies it returned (to check what the run counted)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.provider = client.provider
        self.model = client.model
        self.replies: list[ModelResponse] = []

    async def generate(self, request: ModelRequest, *, stream: bool = True, on_event: Any = None) -> ModelResponse:
        reply = await self.client.generate(request, stream=stream, on_event=on_event)
        self.replies.append(reply)
        return reply

    async def aclose(self) -> None:
        await self.client.aclose()


async def test_sampling_with_tools_is_answered_by_the_hosts_model_and_counted_in_the_run() -> None:
    # The server offers its own tool in the sampling request; the host's model calls it; the server answers the
    # call in a second sampling request. Both model calls count in the run that called the server's tool.
    host_script = [calls(("t1", "temperature", {"city": "Oslo"})), "Sunny, 21 C."]
    with FakeProviderServer(host_script) as host:
        sampler = Recording(make_client("openai", host))
        async with stdio_server(mode="legacy", sampling=sampler) as server:
            with Model([calls(("f1", "forecast", {"city": "Oslo"})), "done"], [server]) as model:
                run = await model.run()
            assert server.sampled == 2
        await sampler.aclose()
    assert run.ok
    assert model.loop is not None
    (result,) = model.loop.history[2].tool_results()
    assert str(result.output) == "gpt-4o: Sunny, 21 C. (stop: endTurn)"
    first, second = (r.body for r in host.requests)
    assert first["messages"] == [
        {"role": "system", "content": "You forecast."},
        {"role": "user", "content": "Forecast for Oslo?"},
    ]
    assert [t["function"]["name"] for t in first["tools"]] == ["temperature"]
    assert (first["tool_choice"], first["max_tokens"] if "max_tokens" in first else first["max_completion_tokens"]) == ("auto", 200)
    assistant, answered = second["messages"][1:]
    assert (assistant["tool_calls"][0]["id"], assistant["tool_calls"][0]["function"]["name"]) == ("t1", "temperature")
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"city": "Oslo"}
    assert answered == {"role": "tool", "tool_call_id": "t1", "content": "21 C in Oslo"}
    # The run's usage is its own model calls plus the server's two sampling calls.
    sampled = sampler.replies[0].usage + sampler.replies[1].usage
    turns = run.turns[0].usage + run.turns[1].usage
    assert run.usage == turns + sampled
    assert (sampled.input_tokens or 0) > 0
    assert model.loop.machine.usage.input_tokens == run.usage.input_tokens  # and in the limits' count


async def test_the_sampling_handler_refuses_edits_or_answers() -> None:
    seen: list[SamplingRequest] = []

    async def refuse(request: SamplingRequest) -> None:
        seen.append(request)

    # One server process; the handler (and the sampling client) are swapped between calls: both are read when a
    # request arrives.
    server = stdio_server(mode="legacy", on_sampling=refuse)
    await server.connect()
    try:
        refused = await server.call_tool("forecast", {"city": "Rome"})
        answered, edited, host = await _answered_and_edited(server)
    finally:
        await server.aclose()
    assert refused.is_error and "the user rejected the sampling request" in str(refused.content)
    (request,) = seen
    assert (request.server, request.request.system, request.request.max_tokens) == ("python server.py", "You forecast.", 200)
    assert [t.name for t in request.request.tools] == ["temperature"] and request.request.tool_choice == "auto"
    assert request.tool_call_id is not None and request.tool_call_id.startswith("direct-")

    assert (answered.content, answered.is_error) == ("by-hand: Warm. (stop: endTurn)", False)
    # The model was asked without the server's tool, so it answered in text, as the server reports.
    prefix = "no tool call: "
    assert str(edited.content).startswith(prefix)
    reply = json.loads(str(edited.content)[len(prefix) :])
    assert ([(c["type"], c["text"]) for c in reply["content"]], reply["model"], reply["stop_reason"]) == (
        [("text", "Cold.")],
        "gpt-4o",
        "endTurn",
    )
    body = host.requests[0].body
    assert body["messages"][0] == {"role": "system", "content": "Answer in one word."}
    assert "tools" not in body


async def _answered_and_edited(server: Any) -> tuple[Any, Any, FakeProviderServer]:
    async def answer(request: SamplingRequest) -> ModelResponse:
        from loopctl.message import Message, MessagePart, Role

        if len(request.request.messages) == 1:
            message = Message.new(Role.ASSISTANT, [MessagePart.tool_call("x1", "temperature", {"city": "Rome"})])
        else:
            message = Message.assistant("Warm.")
        return ModelResponse(message, Usage(1, 1), model="by-hand")

    server.on_sampling = answer
    answered = await server.call_tool("forecast", {"city": "Rome"})

    with FakeProviderServer(["Cold."]) as host:
        sampler = make_client("openai", host)

        async def edit(request: SamplingRequest) -> ModelRequest:
            from dataclasses import replace

            return replace(request.request, system="Answer in one word.", tools=())

        server.sampling, server.on_sampling = sampler, edit
        edited = await server.call_tool("forecast", {"city": "Rome"})
        await sampler.aclose()
    return answered, edited, host


async def test_allow_and_deny_lists_and_a_filter_decide_the_offered_tools() -> None:
    # One server process; the lists are changed between listings (refresh_tools applies them).
    async with stdio_server(allow_tools={"add", "echo", "pid"}, deny_tools={"pid"}) as server:
        assert [t.mcp_name for t in server.tools] == ["add", "echo"]
        server.allow_tools, server.deny_tools = None, frozenset()
        server.tool_filter = lambda t: bool(t.annotations and t.annotations.read_only_hint)
        assert [t.mcp_name for t in await server.refresh_tools()] == ["pid"]


APPROVAL_RULES: list[tuple[Any, set[str]]] = [
    (True, {"add", "echo", "pid"}),
    ("unless_read_only", {"add", "echo"}),
    ({"echo"}, {"echo"}),
    (lambda t: t.mcp_name.startswith("a"), {"add"}),
    (False, set()),
]


async def test_approval_rules_mark_the_tools_whose_calls_wait() -> None:
    marked: list[set[str]] = []
    async with stdio_server(allow_tools={"add", "echo", "pid"}) as server:  # one process, each rule in turn
        for rule, _ in APPROVAL_RULES:
            server.require_approval = rule
            tools = await server.refresh_tools()
            marked.append({t.mcp_name for t in tools if getattr(t, "requires_approval", False)})
    assert marked == [needing for _, needing in APPROVAL_RULES]


async def test_a_call_that_needs_approval_waits_and_runs_once_approved() -> None:
    script = [calls(("e1", "echo", {"text": "careful"})), "done"]
    async with stdio_server(require_approval={"echo"}) as server:
        with Model(script, [server]) as model:
            paused = await model.run()
            assert paused.outcome.kind is OutcomeKind.AWAITING_APPROVAL
            assert [p.call.name for p in paused.pending_approvals] == ["echo"]
            done = await model.run(None, approvals={"e1": Approve()})
    assert done.ok
    assert model.loop is not None
    (result,) = model.loop.history[2].tool_results()
    assert (str(result.output), result.is_error) == ("careful", False)
