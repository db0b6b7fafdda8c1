"""The AG-UI and AI SDK apps read by the protocols' own clients (``@ag-ui/client``'s ``HttpAgent``, which
verifies the events' order, and the ``ai`` package's ``Chat`` over ``DefaultChatTransport``, which parses each
chunk with the package's schema), run in node against the app served over HTTP: parallel tool calls, a reply
retried after it streamed, an approval round trip, and an error."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from loopctl import Agent
from loopctl.engine import RunConfig
from loopctl.errors import InvalidRequest, ServerError
from loopctl.message import Message, MessagePart, Role, TextPart, ThinkingPart
from loopctl.stream import PartStarted, ResponseStarted, TextDelta
from loopctl.testing import ScriptedClient
from loopctl.tool import ToolContext, tool
from tests.ui.conftest import AppServer
from tests.ui.node_env import node_program

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@tool
def look(path: str) -> str:
    """Look at a file."""
    return f"saw {path}"


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def reply(*parts: MessagePart) -> Message:
    return Message.new(Role.ASSISTANT, list(parts))


def call(call_id: str, name: str, **args: Any) -> MessagePart:
    return MessagePart.tool_call(call_id, name, args)


def run_client(node_clients: Path, mode: str, url: str, plan: list[dict[str, Any]]) -> dict[str, Any]:
    """The node client's summary of ``plan`` run against ``url``."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [*node_program(), str(node_clients / "client.mjs"), mode, url, thread, json.dumps(plan)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout)
    out["thread"] = thread
    return out


def parallel_agent() -> Agent[None, str]:
    script = [
        reply(
            ThinkingPart(text="Three files; I look at them at once."),
            TextPart(text="Looking at three files."),
            call("c1", "look", path="a.py"),
            call("c2", "look", path="b.py"),
            call("c3", "look", path="c.py"),
        ),
        "All three seen.",
    ]
    return Agent(ScriptedClient(script), tools=[look], name="reader")


class FlakyClient(ScriptedClient):
    """Streams part of a reply, then fails with a retryable error, once; then answers from the script."""

    async def generate(self, request: Any, *, stream: bool = True, on_event: Any = None) -> Any:
        if self.calls == 0 and on_event is not None:
            self.calls += 1
            on_event(ResponseStarted(None, "flaky"))
            on_event(PartStarted(0, TextPart(text="")))
            on_event(TextDelta(0, "Partial answ"))
            raise ServerError("the stream broke", provider="scripted", status=502)
        return await super().generate(request, stream=stream, on_event=on_event)


RETRY = RunConfig(retry_initial_delay=0.01, retry_max_delay=0.02)


def approval_agent() -> Agent[None, str]:
    script = [reply(TextPart(text="Deleting it."), call("d1", "delete", path="old.log")), "It is gone."]
    return Agent(ScriptedClient(script), tools=[delete], name="cleaner")


def denial_agent() -> Agent[None, str]:
    def answer(request: Any) -> Any:
        last = request.messages[-1]
        results = last.tool_results()
        if results:
            return f"Not deleted: {results[0].output}"
        return reply(call("d1", "delete", path="old.log"))

    return Agent(ScriptedClient(answer), tools=[delete], name="cleaner")


def failing_agent() -> Agent[None, str]:
    return Agent(ScriptedClient([InvalidRequest("the model refused the request", provider="scripted", status=400)]))


# --- AG-UI --------------------------------------------------------------------------------------------------


def types(step: dict[str, Any]) -> list[str]:
    """The step's event types, once ag-ui-validate (the AG-UI conformance validator) found no error or warning
    in its events."""
    from ag_ui_validate import create_validator

    validator = create_validator()
    for event in step["events"]:
        validator.feed(event)
    validator.finalize()
    report = validator.report()
    problems = [(d.rule, d.message) for d in report.diagnostics if d.severity in ("error", "warning")]
    assert problems == [] and report.internal_errors == []
    return [e["type"] for e in step["events"]]


def test_agui_parallel_tool_calls(app_server: AppServer, node_clients: Path) -> None:
    url = app_server.mount("agui-parallel", parallel_agent().to_ag_ui())
    [step] = run_client(node_clients, "agui", url, [{"prompt": "Read the three files."}])["steps"]
    assert step["error"] is None
    seen = types(step)
    assert seen[0] == "RUN_STARTED" and seen[-1] == "RUN_FINISHED"
    assert seen.count("TOOL_CALL_START") == 3 and seen.count("TOOL_CALL_END") == 3
    assert seen.count("TOOL_CALL_RESULT") == 3
    assert "REASONING_MESSAGE_CONTENT" in seen and seen.count("STEP_STARTED") == seen.count("STEP_FINISHED") == 2
    # Each call's arguments, start to end, and its result after its end.
    for cid, path in (("c1", "a.py"), ("c2", "b.py"), ("c3", "c.py")):
        mine = [e for e in step["events"] if e.get("toolCallId") == cid]
        assert [e["type"] for e in mine] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
        assert json.loads(mine[1]["delta"]) == {"path": path} and mine[3]["content"] == f"saw {path}"
    assert step["finished"]["result"] == "All three seen."
    messages = step["messages"]
    assert [m["role"] for m in messages] == ["user", "reasoning", "assistant", "tool", "tool", "tool", "assistant"]
    assert [c["function"]["name"] for c in messages[2]["toolCalls"]] == ["look", "look", "look"]
    assert messages[-1]["content"] == "All three seen."


def test_agui_retried_reply_is_erased(app_server: AppServer, node_clients: Path) -> None:
    agent = Agent(FlakyClient(["The whole answer."]), name="flaky")
    url = app_server.mount("agui-retry", agent.to_ag_ui(config=RETRY))
    [step] = run_client(node_clients, "agui", url, [{"prompt": "Answer."}])["steps"]
    assert step["error"] is None
    seen = types(step)
    # The failed attempt's text was shown, then a snapshot without it, then the answer.
    snap = seen.index("MESSAGES_SNAPSHOT")
    assert "TEXT_MESSAGE_CONTENT" in seen[:snap] and "TEXT_MESSAGE_CONTENT" in seen[snap:]
    contents = [m.get("content") for m in step["messages"] if m["role"] == "assistant"]
    assert contents == ["The whole answer."]
    assert not any("Partial" in json.dumps(m) for m in step["messages"])


def test_agui_approval_round_trip(app_server: AppServer, node_clients: Path) -> None:
    url = app_server.mount("agui-approval", approval_agent().to_ag_ui())
    plan = [
        {"prompt": "Delete old.log."},
        {"resume": [{"interruptId": "d1", "status": "resolved", "payload": {"approved": True}}]},
    ]
    first, second = run_client(node_clients, "agui", url, plan)["steps"]
    assert first["error"] is None and first["finished"]["outcome"] == "interrupt"
    [interrupt] = first["finished"]["interrupts"]
    assert interrupt["id"] == "d1" and interrupt["toolCallId"] == "d1" and interrupt["reason"] == "tool_approval"
    assert interrupt["metadata"] == {
        "toolName": "delete",
        "input": {"path": "old.log"},
        "agent": "cleaner",
        "callId": "d1",
    }
    assert "TOOL_CALL_RESULT" not in types(first)
    assert second["error"] is None and second["finished"]["result"] == "It is gone."
    assert types(second)[0] == "RUN_STARTED"  # conformant too: the continued call announced before its result
    assert [e["content"] for e in second["events"] if e["type"] == "TOOL_CALL_RESULT"] == ["deleted old.log"]
    roles = [m["role"] for m in second["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]


class Cart:
    """Deps holding AG-UI's shared state (the input's ``state``)."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state


@tool
def add_item(ctx: ToolContext[Cart], item: str) -> str:
    """Put an item in the cart."""
    ctx.deps.state = {**ctx.deps.state, "items": [*ctx.deps.state.get("items", []), item]}
    return f"added {item}"


def test_agui_shared_state(app_server: AppServer, node_clients: Path) -> None:
    """The input's state reaches the tools through the deps; a tool's change comes back as a STATE_SNAPSHOT
    after its result, which @ag-ui/client applies to its state; an unchanged state sends none."""
    script = [reply(call("s1", "add_item", item="pear")), "Added.", "Nothing to do."]
    agent = Agent(ScriptedClient(script), tools=[add_item], deps_type=Cart, name="shop")
    url = app_server.mount("agui-state", agent.to_ag_ui(deps=lambda request, run_input: Cart(run_input.state)))
    plan = [{"state": {"items": ["apple"], "owner": "ada"}, "prompt": "Add a pear."}, {"prompt": "Anything else?"}]
    first, second = run_client(node_clients, "agui", url, plan)["steps"]
    assert first["error"] is None
    seen = types(first)
    assert seen.count("STATE_SNAPSHOT") == 1
    assert seen[seen.index("TOOL_CALL_RESULT") + 1] == "STATE_SNAPSHOT"
    [snapshot] = [e for e in first["events"] if e["type"] == "STATE_SNAPSHOT"]
    assert snapshot["snapshot"] == {"items": ["apple", "pear"], "owner": "ada"}
    assert first["state"] == {"items": ["apple", "pear"], "owner": "ada"}
    assert second["error"] is None and "STATE_SNAPSHOT" not in types(second)
    assert second["state"] == first["state"]


def test_agui_front_end_tools(app_server: AppServer, node_clients: Path) -> None:
    """A tool the front end declares: the model calls it, the run ends with the call pending for the client
    (no interrupt: a completed run), and the client's tool message is the call's result when the run goes on."""

    def answer(request: Any) -> Any:
        offered = [t.name for t in request.tools]
        results = request.messages[-1].tool_results()
        if results:
            return f"The user picked {results[0].output}."
        assert "pick_color" in offered, offered
        return reply(TextPart(text="Asking."), call("f1", "pick_color", prompt="Which color?"))

    agent = Agent(ScriptedClient(answer), tools=[look], name="painter")
    url = app_server.mount("agui-frontend", agent.to_ag_ui())
    tools = [
        {
            "name": "pick_color",
            "description": "Ask the user for a color.",
            "parameters": {"type": "object", "properties": {"prompt": {"type": "string"}}},
        }
    ]
    plan = [
        {"prompt": "Paint it.", "tools": tools},
        {"toolResults": [{"toolCallId": "f1", "content": "teal"}], "tools": tools},
    ]
    first, second = run_client(node_clients, "agui", url, plan)["steps"]
    assert first["error"] is None and first["finished"]["outcome"] == "success"
    assert first["finished"]["pendingToolCallIds"] == ["f1"] and first["finished"]["interrupts"] == []
    assert "TOOL_CALL_RESULT" not in types(first)
    assert second["error"] is None and second["finished"]["result"] == "The user picked teal."
    assert types(second)[-1] == "RUN_FINISHED"
    roles = [m["role"] for m in second["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_agui_error(app_server: AppServer, node_clients: Path) -> None:
    url = app_server.mount("agui-error", failing_agent().to_ag_ui())
    [step] = run_client(node_clients, "agui", url, [{"prompt": "Hi."}])["steps"]
    assert types(step)[0] == "RUN_STARTED" and types(step)[-1] == "RUN_ERROR"
    assert "the model refused the request" in step["error"]["message"] and step["error"]["code"] == "failed"


# --- the AI SDK ---------------------------------------------------------------------------------------------


def chunk_types(step: dict[str, Any]) -> list[str]:
    return [c["type"] for c in step["chunks"]]


def test_ai_sdk_parallel_tool_calls(app_server: AppServer, node_clients: Path) -> None:
    url = app_server.mount("aisdk-parallel", parallel_agent().to_ai_sdk())
    out = run_client(node_clients, "aisdk", url, [{"prompt": "Read the three files."}])
    [step] = out["steps"]
    assert step["status"] == "ready" and step["error"] is None and out["errors"] == []
    seen = chunk_types(step)
    assert seen[0] == "start" and seen[-1] == "finish"
    assert seen.count("start-step") == seen.count("finish-step") == 2
    assert seen.count("tool-input-available") == 3 and seen.count("tool-output-available") == 3
    [message] = [m for m in step["messages"] if m["role"] == "assistant"]
    tools = [p for p in message["parts"] if p["type"] == "tool-look"]
    assert [(p["toolCallId"], p["state"], p["input"], p["output"]) for p in tools] == [
        ("c1", "output-available", {"path": "a.py"}, "saw a.py"),
        ("c2", "output-available", {"path": "b.py"}, "saw b.py"),
        ("c3", "output-available", {"path": "c.py"}, "saw c.py"),
    ]
    texts = [p["text"] for p in message["parts"] if p["type"] == "text"]
    assert texts == ["Looking at three files.", "All three seen."]
    assert [p["text"] for p in message["parts"] if p["type"] == "reasoning"] == ["Three files; I look at them at once."]
    assert message["metadata"]["outcome"] == "completed"
    turns = [d["data"]["turn"] for d in out["data"] if d["type"] == "data-loopctl-turn"]
    assert turns == [1, 2]


def test_ai_sdk_retried_reply_is_erased(app_server: AppServer, node_clients: Path) -> None:
    agent = Agent(FlakyClient(["The whole answer."]), name="flaky")
    url = app_server.mount("aisdk-retry", agent.to_ai_sdk(config=RETRY))
    [step] = run_client(node_clients, "aisdk", url, [{"prompt": "Answer."}])["steps"]
    seen = chunk_types(step)
    reset = seen.index("reset-step")
    assert "text-delta" in seen[:reset] and "text-delta" in seen[reset:]
    [message] = [m for m in step["messages"] if m["role"] == "assistant"]
    assert [p["text"] for p in message["parts"] if p["type"] == "text"] == ["The whole answer."]
    assert "Partial" not in json.dumps(message)


def test_ai_sdk_approval_round_trip(app_server: AppServer, node_clients: Path) -> None:
    url = app_server.mount("aisdk-approval", approval_agent().to_ai_sdk())
    first, second = run_client(node_clients, "aisdk", url, [{"prompt": "Delete old.log."}, {"approve": True}])["steps"]
    [asked] = [p for m in first["messages"] for p in m["parts"] if p["type"] == "tool-delete"]
    assert asked["state"] == "approval-requested" and asked["approval"]["id"] == "d1"
    assert asked["input"] == {"path": "old.log"}
    assert "tool-approval-request" in chunk_types(first)
    # The approval sent the next request (sendAutomaticallyWhen), which ran the call and finished the reply.
    assert second["status"] == "ready" and second["error"] is None
    [message] = [m for m in second["messages"] if m["role"] == "assistant"]
    [done] = [p for p in message["parts"] if p["type"] == "tool-delete"]
    assert done["state"] == "output-available" and done["output"] == "deleted old.log"
    assert [p["text"] for p in message["parts"] if p["type"] == "text"] == ["Deleting it.", "It is gone."]


def test_ai_sdk_denial(app_server: AppServer, node_clients: Path) -> None:
    url = app_server.mount("aisdk-denial", denial_agent().to_ai_sdk())
    plan = [{"prompt": "Delete old.log."}, {"approve": False, "reason": "keep it"}]
    _, second = run_client(node_clients, "aisdk", url, plan)["steps"]
    assert second["status"] == "ready"
    [message] = [m for m in second["messages"] if m["role"] == "assistant"]
    [denied] = [p for p in message["parts"] if p["type"] == "tool-delete"]
    assert denied["state"] == "output-denied"
    assert [p["text"] for p in message["parts"] if p["type"] == "text"] == ["Not deleted: keep it"]


def test_ai_sdk_error(app_server: AppServer, node_clients: Path) -> None:
    url = app_server.mount("aisdk-error", failing_agent().to_ai_sdk())
    out = run_client(node_clients, "aisdk", url, [{"prompt": "Hi."}])
    [step] = out["steps"]
    assert step["status"] == "error" and "the model refused the request" in step["error"]
    assert chunk_types(step)[-2:] == ["error", "finish"] or "error" in chunk_types(step)
