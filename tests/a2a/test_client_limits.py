"""What a remote A2A agent can make :class:`~loopctl.a2a.A2AAgent` hold or do is bounded: against a hostile agent
on the ``a2a-sdk``'s own server (``tests/a2a/hostile_remote.py``, a real process over HTTP), a huge answer is
cut in the middle for the model, too many events, artifact parts or response bytes fail the call with
:class:`~loopctl.a2a.A2ALimitExceeded` (naming the agent and the limit) and cancel the remote task, and a flood
of status updates reaches the run's observers as a few coalesced progress events."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopctl.a2a.client as client_module
from loopctl import Agent
from loopctl.a2a import A2AAgent, A2ALimitExceeded
from loopctl.a2a.client import FIRST_EVENT_WAIT, MAX_DESCRIPTION_CHARS, MAX_RESULT_CHARS, _Text
from loopctl.compact.textcut import clip_middle
from loopctl.engine import Approve, Deny, OutcomeKind, RunConfig, ToolProgress
from loopctl.message import Message, MessagePart, Role
from loopctl.testing import ScriptedClient
from loopctl.tool import ToolContext
from tests.a2a.conftest import ROOT
from tests.servers import ServerProcess


@pytest.fixture(scope="module")
def hostile_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("hostile") / "server.log"
    server = ServerProcess(lambda port: [sys.executable, "-m", "tests.a2a.hostile_remote", str(port)], log, cwd=ROOT)
    try:
        yield f"http://{server.address}/"
    finally:
        server.stop()


def cancelled_on(url: str) -> list[str]:
    ids: list[str] = httpx.get(url + "cancelled").json()
    return ids


async def call(tool: A2AAgent, text: str) -> Any:
    return await tool.call({"input": text}, ToolContext("c1", tool.name))


async def test_a_huge_answer_is_cut_in_the_middle_for_the_model(hostile_url: str) -> None:
    async with A2AAgent(hostile_url, name="hostile", max_result_chars=1_000) as tool:
        out = await call(tool, "big 2000000")
    assert isinstance(out, str)
    assert len(out) <= 1_000
    assert out.startswith("<head>xxx") and out.endswith("xxx<tail>")
    kept = len(out) - len(out[out.index("…") : out.rindex("…") + 1])
    assert f"[{2_000_000 - kept:,} characters cut]" in out
    # The default keeps what the engine's own clip keeps (RunConfig.max_tool_output_chars).
    async with A2AAgent(hostile_url, name="hostile") as tool:
        default = await call(tool, "big 300000")
    assert len(default) <= MAX_RESULT_CHARS and "characters cut]" in default
    assert default == clip_middle("<head>" + "x" * (300_000 - 12) + "<tail>", MAX_RESULT_CHARS)


async def test_a_huge_data_answer_is_cut_in_the_middle_as_its_json_text(hostile_url: str) -> None:
    # Before: only text parts were bounded; a data part of 200,000 characters went to the model whole.
    whole = '{"blob":"<head>' + "x" * (200_000 - 12) + '<tail>"}'
    async with A2AAgent(hostile_url, name="hostile", max_result_chars=1_000) as tool:
        out = await call(tool, "data 200000")
        small = await call(tool, "data 100")
    assert isinstance(out, str)
    assert out == clip_middle(whole, 1_000)
    assert len(out) <= 1_000
    assert out.startswith('{"blob":"<head>xxx') and out.endswith('xxx<tail>"}')
    kept = len(out) - len(out[out.index("…") : out.rindex("…") + 1])
    assert f"[{len(whole) - kept:,} characters cut]" in out
    # data that fits stays data (the engine writes its JSON for the model)
    assert small == {"blob": "<head>" + "x" * 88 + "<tail>"}


def test_the_bounded_text_is_clip_middle_of_the_whole() -> None:
    pieces = ["alpha " * 50, "", "beta " * 300, "gamma", "δ" * 999]
    for limit in (60, 100, 500, 5_000, 100_000):
        held = _Text(limit)
        for piece in pieces:
            held.add(piece)
        assert held.value() == clip_middle("\n".join(pieces), limit)


@given(
    st.lists(st.text(st.characters(exclude_characters="…"), max_size=300), max_size=30),
    st.integers(min_value=41, max_value=2_000),
)
def test_the_bounded_text_keeps_a_head_and_a_tail_and_counts_the_cut(pieces: list[str], limit: int) -> None:
    whole = "\n".join(pieces)
    held = _Text(limit)
    for piece in pieces:
        held.add(piece)
    out = held.value()
    assert len(out) <= limit
    if len(whole) <= limit:
        assert out == whole
        return
    head, _, rest = out.partition("…[")
    cut_text, _, tail = rest.partition(" characters cut]…")
    cut = int(cut_text.replace(",", ""))
    assert whole.startswith(head) and whole.endswith(tail)
    assert len(head) + cut + len(tail) == len(whole)
    if whole.isascii():
        assert out == clip_middle(whole, limit)


async def test_too_many_artifact_parts_fail_the_call_and_cancel_the_remote_task(hostile_url: str) -> None:
    before = set(cancelled_on(hostile_url))
    async with A2AAgent(hostile_url, name="hostile", max_parts=20) as tool:
        with pytest.raises(A2ALimitExceeded) as raised:
            await call(tool, "artifacts 500")
    err = raised.value
    assert (err.agent, err.limit, err.value) == ("hostile", "max_parts", 20)
    assert "the remote agent hostile sent more than 20 artifact parts" in str(err) and "max_parts=20" in str(err)
    assert not err.retryable
    assert len(set(cancelled_on(hostile_url)) - before) == 1  # the remote task was cancelled, not left running


async def test_too_many_events_fail_the_call(hostile_url: str) -> None:
    async with A2AAgent(hostile_url, name="hostile", max_events=50) as tool:
        with pytest.raises(A2ALimitExceeded, match=r"hostile sent more than 50 events.*max_events=50"):
            await call(tool, "status 5000")


async def test_a_response_over_the_byte_limit_fails_the_call(hostile_url: str) -> None:
    async with A2AAgent(hostile_url, name="hostile", max_response_bytes=100_000) as tool:
        with pytest.raises(A2ALimitExceeded) as raised:
            await call(tool, "big 1000000")
        assert raised.value.limit == "max_response_bytes"
        # The same tool still answers what fits.
        assert await call(tool, "big 5000") == "<head>" + "x" * (5000 - 12) + "<tail>"


async def test_inside_a_run_the_limit_is_the_calls_error_the_model_reads(hostile_url: str) -> None:
    script = [Message.new(Role.ASSISTANT, [MessagePart.tool_call("p1", "hostile", {"input": "artifacts 50"})]), "ok"]
    async with A2AAgent(hostile_url, name="hostile", max_parts=5) as tool:
        run = await Agent(ScriptedClient(script), tools=[tool], name="boss").run("Go.")
    [record] = run.turns[0].tool_calls
    assert record.result.is_error and isinstance(record.error, A2ALimitExceeded)
    assert "max_parts=5" in str(record.result.output)


async def test_a_flood_of_status_updates_is_coalesced_into_few_progress_events(hostile_url: str) -> None:
    events: list[ToolProgress] = []

    def observe(event: Any) -> None:
        if isinstance(event, ToolProgress):
            events.append(event)

    script = [Message.new(Role.ASSISTANT, [MessagePart.tool_call("p1", "hostile", {"input": "status 3000"})]), "ok"]
    async with A2AAgent(hostile_url, name="hostile", progress_interval=0.2) as tool:
        agent = Agent(ScriptedClient(script), tools=[tool], name="boss", observers=[observe])
        started = time.monotonic()
        run = await agent.run("Go.")
        took = time.monotonic() - started
    assert run.output == "ok" and str(run.turns[0].tool_calls[0].result.output) == "done"
    assert events, "the remote agent's progress was not forwarded"
    assert len(events) <= took / 0.2 + 2 < 3000
    # The newest update is not lost: the last one reported is the remote's last step.
    assert events[-1].message == "step 2999" and events[-1].progress == 3000
    assert [e.progress for e in events] == sorted(e.progress for e in events)


@pytest.mark.parametrize(
    "option", [{"max_result_chars": 0}, {"max_events": -1}, {"max_parts": 1.5}, {"progress_interval": -1}]
)
def test_limits_must_be_positive(option: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(option))):
        A2AAgent("http://127.0.0.1:9/", name="remote", **option)


async def test_a_resumed_call_cancelled_before_the_remote_answers_cancels_the_remote_task(hostile_url: str) -> None:
    # Before: the task id was only known from the remote's first event, so a call given up on before the remote
    # said anything (here its tool timeout) left the remote task running on the decisions it had been sent.
    script = [Message.new(Role.ASSISTANT, [MessagePart.tool_call("p1", "hostile", {"input": "approve"})]), "ok"]
    before = set(cancelled_on(hostile_url))
    async with A2AAgent(hostile_url, name="hostile") as tool:
        agent = Agent(ScriptedClient(script), tools=[tool], name="boss", run_config=RunConfig(tool_timeout=1.0))
        conv = agent.session()
        paused = await conv.run("Go.")
        [pending] = paused.pending_approvals
        assert pending.id == "p1/d1"
        run = await conv.run(approvals={"p1/d1": Approve()})
    [record] = run.resumed_calls
    assert record.result.is_error and run.output == "ok"
    for _ in range(50):
        if set(cancelled_on(hostile_url)) - before:
            break
        await asyncio.sleep(0.1)
    assert len(set(cancelled_on(hostile_url)) - before) == 1


async def test_a_call_cancelled_before_the_remote_named_its_task_cancels_it(hostile_url: str) -> None:
    # Before: the task id was known only from the remote's first event, so a call cancelled before it came left
    # the remote task running (tasks/cancel needs the id, and the server chooses it).
    before = set(cancelled_on(hostile_url))
    async with A2AAgent(hostile_url, name="hostile") as tool:
        assert await call(tool, "ok") == "ok"  # the card read: the next call sends its message at once
        pending = asyncio.ensure_future(call(tool, "late 500"))
        await asyncio.sleep(0.05)  # the remote says nothing for 500 ms
        pending.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await pending
        waited = time.monotonic() - started
    assert waited < FIRST_EVENT_WAIT + 1.0  # bounded: it waited for the first event, not for the task's end
    new = set(cancelled_on(hostile_url)) - before
    assert len(new) == 1  # the task the remote named after the call was cancelled


async def test_a_call_cancelled_before_a_remote_that_never_names_its_task_waits_only_so_long(
    hostile_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "FIRST_EVENT_WAIT", 0.3)
    async with A2AAgent(hostile_url, name="hostile") as tool:
        assert await call(tool, "ok") == "ok"
        pending = asyncio.ensure_future(call(tool, "silent"))
        await asyncio.sleep(0.05)
        pending.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await pending
        waited = time.monotonic() - started
    assert 0.25 <= waited < 1.5


@pytest.mark.parametrize("how", ["cancelled", "denied"])
async def test_a_run_that_gives_up_a_call_paused_on_a_remote_approval_cancels_the_remote_task(
    hostile_url: str, how: str
) -> None:
    # Before: the remote task stayed input-required when the calling run ended without calling the tool again
    # (cancelled before it did, or the call itself denied): nothing would ever answer it.
    script = [Message.new(Role.ASSISTANT, [MessagePart.tool_call("p1", "hostile", {"input": "approve"})]), "ok"]
    async with A2AAgent(hostile_url, name="hostile") as tool:
        conv = Agent(ScriptedClient(script), tools=[tool], name="boss").session()
        paused = await conv.run("Go.")
        [pending] = paused.pending_approvals
        assert pending.id == "p1/d1"
        before = set(cancelled_on(hostile_url))
        if how == "cancelled":
            cancel = asyncio.Event()
            cancel.set()
            run = await conv.run(approvals={"p1/d1": Approve()}, cancel=cancel)
            assert run.outcome.kind is OutcomeKind.CANCELLED
        else:
            run = await conv.run(approvals={"p1": Deny("not now")})
            assert run.output == "ok"
        assert run.resumed_calls == () or not run.resumed_calls[0].ran
    assert len(set(cancelled_on(hostile_url)) - before) == 1


async def test_the_byte_limit_keeps_the_proxies_of_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # The limit is a response hook: a transport of its own would have turned off HTTP(S)_PROXY (httpx reads them
    # only when it makes its own transports).
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    async with A2AAgent("http://remote.example/", name="remote") as tool:
        http = tool._http_client()
        assert any(pattern.scheme == "http" for pattern in http._mounts)


async def test_a_huge_card_description_is_cut_for_the_model(tmp_path: Path) -> None:
    # Before: the card's description (any size) became the tool's description, sent with every model request.
    server = ServerProcess(
        lambda port: [sys.executable, "-m", "tests.a2a.hostile_remote", str(port), "1000000"],
        tmp_path / "server.log",
        cwd=ROOT,
    )
    try:
        async with await A2AAgent.connect(f"http://{server.address}/") as tool:
            assert tool.name == "hostile"
            assert len(tool.description) <= MAX_DESCRIPTION_CHARS and tool.description.startswith("ddd")
    finally:
        server.stop()


async def test_a_held_progress_message_is_sent_once_the_interval_has_passed(hostile_url: str) -> None:
    # A burst of status updates, then the remote works in silence until the test releases it. Before: the
    # burst's newest message was held until another update came or the call ended, so the observers showed an
    # old step all that time. (The remote's silence was 2 s, and the test read the newest message's time
    # against the call's end: on a loaded machine the burst took most of those 2 s to reach the client.)
    interval = 0.2
    got: list[tuple[float, float, str | None]] = []
    newest = asyncio.Event()

    def progress(done: float, total: float | None, message: str | None) -> None:
        got.append((time.monotonic(), done, message))
        if message == "step 199":
            newest.set()

    async with A2AAgent(hostile_url, name="hostile", progress_interval=interval) as tool:
        context = ToolContext("c1", tool.name, _progress=progress)
        running = asyncio.ensure_future(tool.call({"input": "burst 200"}, context))
        try:
            # Held until the call's end, it would not come before the release: the wait times out.
            await asyncio.wait_for(newest.wait(), 30)
            came_first = not running.done()
        except TimeoutError:
            came_first = False
        finally:
            async with httpx.AsyncClient() as http:
                (await http.post(hostile_url + "release")).raise_for_status()
        out = await running
    assert came_first, "the newest progress waited for the call's end"
    assert out == "done"
    assert got[-1][1:] == (200, "step 199")
    # Passed on at most one every interval: as many as the burst's time at the client allows, not 200 (the
    # first one is passed on at once, and one more for rounding).
    assert len(got) <= 2 + (got[-1][0] - got[0][0]) / interval, got
    assert [done for _, done, _ in got] == sorted(done for _, done, _ in got)


async def test_task_snapshots_do_not_reset_the_count_of_artifact_parts(hostile_url: str) -> None:
    # The remote sends 10 artifact parts, then the task without artifacts, 30 times. Before: the task (which
    # replaces no part held) set the count back to 0, so 300 parts were held and handed on under max_parts=50.
    async with A2AAgent(hostile_url, name="hostile", max_parts=50) as tool:
        with pytest.raises(A2ALimitExceeded) as raised:
            await call(tool, "resets 30")
    assert raised.value.limit == "max_parts"


async def test_concurrent_first_calls_read_the_card_once(hostile_url: str) -> None:
    # Before: each of the calls that came before the SDK client was made read the card and made a client of its
    # own (the last one kept, the others left to the garbage collector, never closed).
    cards: list[str] = []

    async def seen(request: httpx.Request) -> None:
        if request.url.path.endswith("agent-card.json"):
            cards.append(str(request.url))

    async with A2AAgent(hostile_url, name="hostile") as tool:
        tool._http_client().event_hooks["request"].append(seen)
        contexts = [ToolContext(f"c{i}", tool.name) for i in range(8)]
        outs = await asyncio.gather(*(tool.call({"input": "hello"}, c) for c in contexts))
        client = tool._client
        assert await tool._sdk() is client
    assert outs == ["ok"] * 8
    assert len(cards) == 1, cards


async def test_the_server_chooses_the_task_id_a_message_cannot_name_a_new_task(hostile_url: str) -> None:
    """The protocol rule FIRST_EVENT_WAIT rests on (A2A specification, "Message" ``taskId``, and the a2a-sdk
    server's request handler): a message that names a task the server does not have is refused, so a client
    cannot choose the id of its new task up front and learns it only from the remote's first event."""
    import uuid

    from a2a.client import A2ACardResolver, ClientConfig, create_client
    from a2a.types import Message as A2AMessage
    from a2a.types import Part, SendMessageRequest
    from a2a.types import Role as A2ARole

    async with httpx.AsyncClient(timeout=10) as http:
        card = await A2ACardResolver(http, hostile_url).get_agent_card()
        client = await create_client(card, client_config=ClientConfig(httpx_client=http))
        message = A2AMessage(
            message_id=uuid.uuid4().hex, role=A2ARole.ROLE_USER, parts=[Part(text="ok")], task_id="chosen-by-client"
        )
        with pytest.raises(Exception, match="chosen-by-client") as refused:
            async for _ in client.send_message(SendMessageRequest(message=message)):
                pass
    assert "exist" in str(refused.value) or "not found" in str(refused.value).lower()
