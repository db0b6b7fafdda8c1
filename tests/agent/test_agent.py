"""The Agent: one frozen definition serving many conversations at once, kept apart, one run at a time each."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from loopctl import Agent
from loopctl.agent import Conversation
from loopctl.engine import BareLoop, RunConfig
from loopctl.errors import ApprovalError, SessionBusy
from loopctl.message import Message, MessagePart, Role, TextPart
from loopctl.store import SQLiteStore
from loopctl.testing import Delay, FakeProviderServer, RecordedRequest, ScriptedClient
from loopctl.tool import ToolContext, tool
from tests.fake_clients import make_client

_USER = re.compile(rb"user-(\d\d)")


def _text(message: Message) -> str:
    return "".join(p.text for p in message.parts if isinstance(p, TextPart))


class _PerSession:
    """A model answering each request from its own text: the first turn of a session calls ``note`` with the
    session's marker, then it answers with every marker it saw. It records the markers of each request."""

    def __init__(self) -> None:
        self.seen: list[set[bytes]] = []

    def respond(self, request: RecordedRequest) -> Any:
        markers = set(_USER.findall(request.raw))
        self.seen.append(markers)
        raw = request.raw
        mark = sorted(markers)[0].decode() if markers else "??"
        if b"noted:" not in raw:  # nothing noted yet in this conversation: call the tool
            return Message.new(
                Role.ASSISTANT, [MessagePart.tool_call(f"call_{mark}", "note", {"text": f"user-{mark}"})]
            )
        turns = raw.count(b"turn-")
        return f"answer for user-{mark} after {turns} turn markers"


@tool
async def note(ctx: ToolContext[None], text: str) -> str:
    """Note a text.

    Args:
        text: what to note
    """
    await asyncio.sleep(0)
    return f"noted: {text}"


AGENT_TOOLS = [note]


@pytest.mark.parametrize(
    ("kind", "stored"), [("openai", False), ("openai-responses", True), ("anthropic", False), ("gemini", True)]
)
async def test_a_module_level_agent_serves_fifty_concurrent_sessions_each_request_holding_only_its_own(
    kind: str, stored: bool, tmp_path: Path
) -> None:
    model = _PerSession()
    with FakeProviderServer(model) as server:
        client = make_client(kind, server)
        agent = Agent(client, tools=AGENT_TOOLS, instructions="Answer briefly.", name="support")
        store = SQLiteStore(tmp_path / "s.db") if stored else None

        async def one(i: int) -> tuple[str, str]:
            conv = agent.session(f"user-{i:02d}", store=store) if store else agent.session(f"user-{i:02d}")
            first = await conv.run(f"I am user-{i:02d}, turn-1")
            second = await conv.run(f"user-{i:02d} again, turn-2")
            return first.output, second.output

        try:
            outputs = await asyncio.gather(*(one(i) for i in range(50)))
        finally:
            await client.aclose()
            if store is not None:
                store.close()
    # 50 sessions x (tool call + answer, then one answer): 150 requests, each with one session's messages only.
    assert len(server.requests) == 150
    assert all(len(markers) == 1 for markers in model.seen), [m for m in model.seen if len(m) != 1][:3]
    for i, (first, second) in enumerate(outputs):
        assert first == f"answer for user-{i:02d} after 1 turn markers"
        assert second == f"answer for user-{i:02d} after 2 turn markers"
    if stored:
        with SQLiteStore(tmp_path / "s.db") as again:
            msgs = again.load("user-07").messages
            assert len(msgs) == 6
            assert all(b"user-07" in m.to_json().encode() or not _text(m) for m in msgs)


async def test_a_second_run_on_a_busy_session_is_refused_and_adds_nothing(tmp_path: Path) -> None:
    agent = Agent(ScriptedClient([Delay(0.2, "slow answer"), "second"]), name="a")
    for store in (None, SQLiteStore(tmp_path / "b.db")):
        conv = agent.session("ticket-42", store=store)
        first = asyncio.ensure_future(conv.run("first"))
        await asyncio.sleep(0.05)
        with pytest.raises(SessionBusy, match="ticket-42"):
            await conv.run("second, at the same time")
        # The same session through another conversation object of the same store is busy too.
        if store is not None:
            with pytest.raises(SessionBusy):
                await agent.session("ticket-42", store=store).run("third")
        run = await first
        assert run.output == "slow answer"
        assert [_text(m) for m in conv.history] == ["first", "slow answer"]
        agent = Agent(ScriptedClient([Delay(0.2, "slow answer"), "second"]), name="a")
        if store is not None:
            store.close()


async def test_on_busy_wait_queues_the_second_run_after_the_first() -> None:
    client = ScriptedClient([Delay(0.1, "one"), "two"])
    conv = Agent(client).session("q", on_busy="wait")
    a, b = await asyncio.gather(conv.run("first"), conv.run("second"))
    assert (a.output, b.output) == ("one", "two")
    assert [_text(m) for m in client.requests[1].messages] == ["first", "one", "second"]


def test_on_busy_wait_queues_runs_of_one_session_from_several_threads(tmp_path: Path) -> None:
    # A threaded web server calling run_sync per request: each thread runs its own event loop. A waiting run
    # is woken on its own loop (it was an asyncio.Event of another loop: RuntimeError, and a thread hung).
    agent = Agent(ScriptedClient(lambda request: Delay(0.05, f"answer {len(request.messages)}")), name="a")
    outputs: list[str] = []
    errors: list[BaseException] = []
    with SQLiteStore(tmp_path / "t.db") as store:

        def worker(i: int) -> None:
            try:
                outputs.append(agent.session("shared", store=store, on_busy="wait").run_sync(f"q{i}").output)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert errors == [] and not any(t.is_alive() for t in threads)
        # One after another: each run saw the turns of those before it.
        assert sorted(outputs) == ["answer 1", "answer 3", "answer 5"]
        assert len(store.load("shared").messages) == 6


def test_a_run_of_a_busy_session_from_another_thread_is_refused(tmp_path: Path) -> None:
    agent = Agent(ScriptedClient([Delay(0.3, "slow"), "never"]), name="a")
    with SQLiteStore(tmp_path / "r.db") as store:
        started = threading.Event()
        first: list[str] = []

        def worker() -> None:
            started.set()
            first.append(agent.session("s", store=store).run_sync("first").output)

        thread = threading.Thread(target=worker, daemon=True)
        thread.start()
        started.wait(5)
        time.sleep(0.1)
        with pytest.raises(SessionBusy, match="'s'"):
            agent.session("s", store=store).run_sync("second")
        thread.join(10)
        assert first == ["slow"]
        assert len(store.load("s").messages) == 2


async def test_a_second_run_on_a_busy_bare_loop_raises_session_busy() -> None:
    loop = BareLoop(ScriptedClient([Delay(0.2, "x"), "y"]))
    first = asyncio.ensure_future(loop.run("one"))
    await asyncio.sleep(0.05)
    with pytest.raises(SessionBusy, match="already running"):
        await loop.run("two")
    assert (await first).output == "x"
    assert [_text(m) for m in loop.history] == ["one", "x"]


async def test_history_continues_a_conversation_by_hand_and_new_messages_is_what_a_run_added() -> None:
    client = ScriptedClient(["Hello Ada.", "Your name is Ada."])
    agent = Agent(client)
    first = await agent.run("My name is Ada.")
    assert [_text(m) for m in first.messages] == ["My name is Ada.", "Hello Ada."]
    assert list(first.new_messages()) == list(first.messages)
    second = await agent.run("What is my name?", history=first.messages)
    assert [_text(m) for m in client.requests[1].messages] == ["My name is Ada.", "Hello Ada.", "What is my name?"]
    assert [_text(m) for m in second.new_messages()] == ["What is my name?", "Your name is Ada."]
    assert len(second.messages) == 4


def test_history_ending_with_unanswered_calls_is_refused() -> None:
    call = Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "note", {"text": "x"})])
    with pytest.raises(ValueError, match="no results"):
        Agent(ScriptedClient([])).run_sync("go", history=[Message.user("hi"), call])


async def test_approvals_without_a_paused_session_are_refused() -> None:
    with pytest.raises(ApprovalError):
        await Agent(ScriptedClient(["x"])).run(approvals={"c1": None})  # type: ignore[dict-item]


def test_an_agent_is_frozen() -> None:
    agent = Agent(ScriptedClient([]), name="a")
    with pytest.raises(AttributeError, match="frozen"):
        agent.name = "b"
    renamed = agent.replace(name="b")
    assert (agent.name, renamed.name) == ("a", "b")


def test_two_tools_of_one_name_are_refused_when_the_agent_is_made() -> None:
    with pytest.raises(ValueError, match="two tools are named 'note'"):
        Agent(ScriptedClient([]), tools=[note, note])


async def test_a_model_string_makes_one_client_per_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeProviderServer(["one", "two"]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        agent = Agent("openai:gpt-4o-mini")
        assert (await agent.run("a")).output == "one"
        client = agent.client()
        assert (await agent.run("b")).output == "two"
        assert agent.client() is client  # the same pool for every run on this loop
        await agent.aclose()
    assert [r.body["model"] for r in server.requests] == ["gpt-4o-mini", "gpt-4o-mini"]


def test_run_sync_with_a_model_string_closes_its_client(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeProviderServer(["one", "two"]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        agent = Agent("openai:gpt-4o-mini")
        assert agent.run_sync("a").output == "one"
        assert agent.run_sync("b").output == "two"  # a fresh event loop: a fresh client, not the closed one


def test_run_sync_closes_the_clients_its_sub_agents_and_handoff_targets_made(monkeypatch: pytest.MonkeyPatch) -> None:
    # A sub-agent's or a handoff target's client made from a model string on run_sync's event loop was left
    # open when the loop ended (its pool's sockets unclosed: a ResourceWarning per run of a sync web app).
    clients: dict[str, Any] = {}

    def remember(*agents: Agent[Any, Any]) -> Any:
        @tool
        async def mark() -> str:
            """Remember the clients the agents use on this loop."""
            clients.update({a.name: a.client() for a in agents})
            return "marked"

        return mark

    def call(call_id: str, name: str, args: dict[str, str] | None = None) -> Message:
        return Message.new(Role.ASSISTANT, [MessagePart.tool_call(call_id, name, args or {})])

    with FakeProviderServer(["researched", "billing here"]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        researcher = Agent("openai:gpt-4o-mini", name="researcher", description="Researches.")
        billing = Agent("openai:gpt-4o-mini", name="billing")
        script = [call("m", "mark"), call("r1", "researcher", {"input": "look"}), call("t1", "transfer_to_billing")]
        boss = Agent(ScriptedClient(script), tools=[remember(researcher, billing), researcher], handoffs=[billing])
        run = boss.run_sync("go")
        assert (run.agent, run.output) == ("billing", "billing here")
        assert clients["researcher"] is not clients["billing"]
        assert [clients[n]._http.is_closed for n in ("researcher", "billing")] == [True, True]


async def test_a_run_on_a_conversation_of_another_agent_is_refused() -> None:
    # support.run(session=billing.session(...)) ran billing (its model, tools and instructions), silently.
    support = Agent(ScriptedClient(["support here"]), name="support")
    billing_client = ScriptedClient(["billing here"])
    billing = Agent(billing_client, name="billing")
    conv = billing.session("x")
    with pytest.raises(ValueError, match="conversation of the agent 'billing', not of 'support'"):
        await support.run("hi", session=conv)
    with pytest.raises(ValueError, match="not of 'support'"):
        support.stream("hi", session=conv)
    assert billing_client.calls == 0 and conv.history == ()
    assert (await billing.run("hi", session=conv)).output == "billing here"


async def test_runs_of_a_conversation_go_on_where_the_last_ended_in_memory_and_in_a_store(tmp_path: Path) -> None:
    for store in (None, SQLiteStore(tmp_path / "c.db")):
        client = ScriptedClient(["a1", "a2"])
        conv: Conversation[None, str] = Agent(client).session("c", store=store)
        await conv.run("q1")
        run = await conv.run("q2")
        assert [_text(m) for m in client.requests[1].messages] == ["q1", "a1", "q2"]
        assert [_text(m) for m in run.new_messages()] == ["q2", "a2"]
        if store is not None:
            store.close()


async def test_limits_of_the_agent_apply_to_each_run() -> None:
    call = Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "note", {"text": "x"})])
    from loopctl.engine import UsageLimits

    agent = Agent(ScriptedClient([call, "done"]), tools=[note], limits=UsageLimits(requests=1))
    run = await agent.run("go", config=RunConfig(max_turns=5))
    assert run.outcome.kind.value == "limit_reached"


class Deps:
    pass


@tool
def needs(ctx: ToolContext[Deps]) -> str:
    """Needs deps."""
    return "x"


def test_a_tool_whose_deps_the_agent_does_not_give_is_refused_when_the_agent_is_made() -> None:
    with pytest.raises(TypeError, match=r"tool 'needs' takes ToolContext\[.*Deps\], but the agent has no deps_type"):
        Agent(ScriptedClient([]), tools=[needs])  # type: ignore[misc]
    with pytest.raises(TypeError, match="deps_type=int"):
        Agent(ScriptedClient([]), tools=[needs], deps_type=int)  # type: ignore[misc]
    Agent(ScriptedClient([]), tools=[needs, note], deps_type=Deps)


def test_importing_the_agent_pulls_in_no_provider_client_store_or_telemetry() -> None:
    import subprocess
    import sys

    code = (
        "import sys\nfrom loopctl import Agent\nimport loopctl.agent\n"
        "print(sorted(m for m in sys.modules if m.startswith(('loopctl.transport', 'loopctl.store', "
        "'loopctl.telemetry', 'openai', 'anthropic', 'httpx', 'opentelemetry', 'genai_prices'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"
