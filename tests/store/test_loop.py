"""``BareLoop(..., store=, session_id=)``: a run loads its session, saves every turn, and never overwrites
another writer's work (both backends)."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loopctl.engine import BareLoop, CompactionFinished, LoopMachine, OutcomeKind, RunConfig, SessionConfig
from loopctl.errors import ConcurrentUpdate
from loopctl.message import Message, MessagePart, Role, check_conversation
from loopctl.providers import ModelRequest
from loopctl.session import Session
from loopctl.store import SessionStore
from loopctl.testing import ScriptedClient
from loopctl.testing.scripted import Delay
from loopctl.tool import tool
from tests.store import workers

FAST = RunConfig(stream=False, retry_initial_delay=0.001, retry_max_delay=0.01)


def calls(*specs: tuple[str, str, dict[str, Any]]) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(i, n, a) for i, n, a in specs])


@tool
async def echo(text: str) -> str:
    """Echo the text."""
    return f"echo: {text}"


async def test_a_loop_saves_every_turn_and_a_new_loop_continues_the_session(store: SessionStore) -> None:
    saved_before_each_call: list[int] = []

    def reply(request: ModelRequest) -> Message:
        saved_before_each_call.append(store.info("s").length)
        return calls(("c1", "echo", {"text": "hi"})) if len(saved_before_each_call) == 1 else Message.assistant("done")

    loop = BareLoop(ScriptedClient(reply), [echo], SessionConfig(system_prompt="be kind"), store=store, session_id="s")
    assert loop.session_id == "s" and list(loop.history) == []
    run = await loop.run("say hi", FAST)
    assert run.ok
    # The input was stored before the first call; the reply and its results before the second.
    assert saved_before_each_call == [1, 3]
    loaded = store.load("s")
    assert list(loaded.messages) == list(loop.history)
    assert loaded.machine().to_json() == loop.machine.to_json()
    assert loaded.state.system_prompt == "be kind" and loaded.state.outcome == "completed"
    assert [h.kind for h in store.heads("s")] == ["append", "append", "append"]

    again = BareLoop(ScriptedClient(["second answer"]), [echo], store=store, session_id="s")
    assert list(again.history) == list(loop.history)
    assert (await again.run("and again", FAST)).output == "second answer"
    assert [m.text_content() for m in store.load("s").messages][-2:] == ["and again", "second answer"]
    assert store.load("s").state.system_prompt == "be kind"  # kept though the new loop named none
    assert store.verify("s") == []


async def test_a_loop_without_a_session_id_starts_a_new_session(store: SessionStore) -> None:
    loop = BareLoop(ScriptedClient(["hello"]), store=store)
    await loop.run("hi", FAST)
    assert loop.session_id is not None
    assert [i.id for i in store.sessions()] == [loop.session_id]


def test_a_stored_session_and_a_machine_together_are_refused(store: SessionStore) -> None:
    store.append("s", [Message.user("x")], expected_head=None)
    with pytest.raises(ValueError, match="pass either it or a machine"):
        BareLoop(ScriptedClient([]), machine=LoopMachine(), store=store, session_id="s")


async def test_a_stale_loop_ends_its_run_failed_and_writes_nothing(store: SessionStore) -> None:
    first = BareLoop(ScriptedClient(["from the first"]), store=store, session_id="s")
    late_client = ScriptedClient(["never sent"])
    late = BareLoop(late_client, store=store, session_id="s")  # loaded the same (empty) session
    assert (await first.run("one", FAST)).ok
    before = store.info("s")
    run = await late.run("two", FAST)
    assert run.outcome.kind is OutcomeKind.FAILED
    assert run.outcome.error_type == "ConcurrentUpdate"
    assert "changed by another writer" in (run.outcome.error or "")
    assert late_client.requests == []  # refused before the model was called
    after = store.info("s")
    assert (after.head, after.revision) == (before.head, before.revision)
    # Still stale: the next run is refused the same way, without writing.
    assert (await late.run("three", FAST)).outcome.error_type == "ConcurrentUpdate"
    assert store.info("s").revision == before.revision
    fresh = BareLoop(ScriptedClient(["ok"]), store=store, session_id="s")
    assert (await fresh.run("four", FAST)).ok


async def test_a_refused_final_save_is_raised(store: SessionStore) -> None:
    def reply(request: ModelRequest) -> Message:
        other = store.info("s")  # another writer moves the head while the model answers
        store.append("s", [Message.user("sneaked in")], expected_head=other.head)
        return Message.assistant("answer")

    loop = BareLoop(ScriptedClient(reply), store=store, session_id="s")
    with pytest.raises(ConcurrentUpdate):
        await loop.run("go", FAST)
    assert [m.text_content() for m in store.load("s").messages] == ["go", "sneaked in"]


async def test_a_cancelled_run_saves_its_turns_with_the_call_in_flight_answered(store: SessionStore) -> None:
    cancel = asyncio.Event()

    @tool
    async def slow(n: int) -> str:
        """Slow."""
        cancel.set()
        await asyncio.sleep(10)
        return "late"

    client = ScriptedClient([calls(("c1", "echo", {"text": "a"})), calls(("c2", "slow", {"n": 1})), "never"])
    loop = BareLoop(client, [echo, slow], store=store, session_id="s")
    run = await loop.run("work", FAST, cancel=cancel)
    assert run.outcome.kind is OutcomeKind.CANCELLED
    loaded = store.load("s")
    assert list(loaded.messages) == list(loop.history)
    # the input, the first call and its result, the cut-off call and its answer (it may have acted)
    assert len(loaded.messages) == 5
    assert str(loaded.messages[-1].parts[0].output).startswith("Not known whether it ran")  # type: ignore[union-attr]
    assert check_conversation(list(loaded.messages)) == []
    assert loaded.state.outcome == "cancelled"
    # The cut-off turn was saved when the run ended (saves come between turns, and at the end).
    moves = store.heads("s")
    assert [h.kind for h in moves] == ["append", "append", "append"] and moves[-1].head != moves[-2].head


def test_a_crash_loses_at_most_the_turn_in_flight(store: SessionStore, location: str) -> None:
    proc = multiprocessing.get_context("spawn").Process(target=workers.crash_in_third_turn, args=(location, "s"))
    proc.start()
    proc.join(120)
    assert proc.exitcode == -9  # killed itself in the middle of its third turn's tool call
    loaded = store.load("s")
    texts = [m.text_content() or str(m) for m in loaded.messages]
    # Two whole turns are kept; the reply whose tool was running when the process died is not.
    assert len(loaded.messages) == 5 and texts[0] == "work"
    assert loaded.state.outcome == "running" and store.verify("s") == []
    # Resuming cancels the stopped run back to its coherent prefix and goes on.
    loop = BareLoop(ScriptedClient(["resumed"]), [echo], store=store, session_id="s")
    assert check_conversation(list(loop.history)) == []
    assert loop.machine.outcome.kind is OutcomeKind.CANCELLED
    assert loop.run_sync("continue", FAST).output == "resumed"
    assert len(store.load("s").messages) == 7


async def test_compaction_through_the_loop_keeps_the_chain_before_it_readable(store: SessionStore) -> None:
    big = "lorem ipsum dolor sit amet " * 40
    n = {"i": 0}

    def reply(request: ModelRequest) -> Message:
        n["i"] += 1
        if n["i"] > 30:
            return Message.assistant("all done")
        return Message.new(
            Role.ASSISTANT,
            [
                MessagePart.text(f"step {n['i']}: {big[:600]}"),
                MessagePart.tool_call(f"c{n['i']}", "echo", {"text": big}),
            ],
        )

    passes: list[CompactionFinished] = []
    loop = BareLoop(
        ScriptedClient(reply),
        [echo],
        SessionConfig(context_window=6_000),
        observers=[lambda e: passes.append(e) if isinstance(e, CompactionFinished) else None],
        store=store,
        session_id="s",
    )
    # The model repeats one call on purpose (to grow the context): loop detection would stop it.
    run = await loop.run("work through it", RunConfig(max_turns=40, stream=False, loop_detection=None))
    assert run.ok and {p.kind for p in passes} >= {"prune", "truncate"}
    loaded = store.load("s")
    assert list(loaded.messages) == list(loop.history)
    moves = store.heads("s")
    assert "rewrite" in [h.kind for h in moves]
    # Every earlier head's chain is still there: the longest is what the model saw before a pass.
    chains = [store.chain(h.head) for h in moves if h.head is not None]
    longest = max(chains, key=len)
    assert len(longest) > len(loaded.messages)
    assert longest[0].message.text_content() == "work through it"
    assert store.verify("s") == []


async def test_a_json_session_from_today_imports_and_continues(store: SessionStore, tmp_path: Path) -> None:
    # A session file as `loopctl run` writes it today (loopctl.session.Session).
    first = BareLoop(ScriptedClient([calls(("c1", "echo", {"text": "x"})), "first answer"]), [echo])
    await first.run("first task", FAST)
    path = tmp_path / "20250101-120000.json"
    Session(first.into_machine(), model="demo", root=str(tmp_path), system_prompt="sys").save(path)
    info = store.import_file(path)
    loop = BareLoop(ScriptedClient(["second answer"]), [echo], store=store, session_id=info.id)
    assert list(loop.history) == list(first.history)
    assert (await loop.run("second task", FAST)).output == "second answer"
    loaded = store.load(info.id)
    assert [m.text_content() for m in loaded.messages][-2:] == ["second task", "second answer"]
    assert (loaded.state.model, loaded.state.root) == ("demo", str(tmp_path))
    assert store.verify(info.id) == []


def test_a_slow_model_does_not_hold_the_session(store: SessionStore) -> None:
    # Saves happen between calls; nothing stays locked while the model thinks.
    loop = BareLoop(ScriptedClient([Delay(0.2, "late answer")]), store=store, session_id="s")

    async def main() -> None:
        task = asyncio.ensure_future(loop.run("go", FAST))
        await asyncio.sleep(0.1)
        other = await store.aappend("elsewhere", [Message.user("x")], expected_head=None)
        assert other.head is not None
        assert (await task).ok

    asyncio.run(main())


async def test_an_approval_is_recorded_before_its_call_runs_so_a_second_approver_is_refused(
    store: SessionStore,
) -> None:
    from loopctl.engine import Approve, Defer, MachineState

    started, release, ran = asyncio.Event(), asyncio.Event(), []

    @tool
    async def send(to: str) -> str:
        """Send mail."""
        ran.append(to)
        started.set()
        await release.wait()
        return f"sent to {to}"

    reply = calls(("c1", "send", {"to": "ana"}))
    paused = BareLoop(ScriptedClient([reply]), [send], store=store, session_id="s", permission=lambda c: Defer())
    assert (await paused.run("mail ana", FAST)).outcome.kind is OutcomeKind.AWAITING_APPROVAL
    first = BareLoop(ScriptedClient(["Sent."]), [send], store=store, session_id="s")
    second = BareLoop(ScriptedClient(["Sent again."]), [send], store=store, session_id="s")
    running = asyncio.ensure_future(first.run(approvals={"c1": Approve()}, config=FAST))
    await started.wait()  # the first approver's call is running; its decision is in the store
    assert store.load("s").machine().state is MachineState.AWAITING_TOOLS
    with pytest.raises(ConcurrentUpdate, match="revision"):
        await second.run(approvals={"c1": Approve()}, config=FAST)
    assert second.machine.state is MachineState.AWAITING_APPROVAL  # as it was loaded: nothing ran, nothing decided
    release.set()
    assert (await running).ok
    assert ran == ["ana"]
    assert store.load("s").state.outcome == "completed"


async def test_a_run_cancelled_while_its_save_is_in_flight_leaves_the_loop_usable(store: SessionStore) -> None:
    # Issue 18, item 13: the append committed on its worker thread after the run was cancelled, but the loop
    # never adopted its own write: every later run() failed ConcurrentUpdate with no other writer.
    committed, release = threading.Event(), threading.Event()
    real_append = store.append
    held: list[int] = []

    def append(*args: Any, **kwargs: Any) -> Any:
        done = real_append(*args, **kwargs)
        if not held:  # the first save (the input, before the first model call) waits once it committed
            held.append(done.revision)
            committed.set()
            release.wait(10)
        return done

    store.append = append  # type: ignore[method-assign]
    client = ScriptedClient(["never asked", "second answer"])
    loop = BareLoop(client, [echo], store=store, session_id="s")
    task = asyncio.ensure_future(loop.run("first", FAST))
    assert await asyncio.to_thread(committed.wait, 10)
    task.cancel()
    await asyncio.sleep(0.05)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert client.calls == 0
    assert loop.machine.outcome.kind is OutcomeKind.CANCELLED
    assert loop._binding is not None and loop._binding.stale is None
    run = await loop.run("second", FAST)
    assert (run.outcome.kind, run.output) == (OutcomeKind.COMPLETED, "never asked")
    loaded = store.load("s")
    assert [m.text_content() for m in loaded.messages] == ["first", "second", "never asked"]
    assert loaded.state.outcome == "completed"
    # the cancelled run's end was saved too: its state (cancelled) on top of its own write
    assert [h.kind for h in store.heads("s")] == ["append"] * 4


def test_a_save_cut_off_twice_is_settled_by_the_next_save_on_another_event_loop(store: SessionStore) -> None:
    # Cancelled again while it waited for its write, the save leaves the write unadopted; the event loop then
    # closes (run_sync). The next save reads the session back and finds its own write there.
    from loopctl.store.binding import SessionBinding

    committed, release = threading.Event(), threading.Event()
    real_append = store.append
    writes: list[int] = []

    def append(*args: Any, **kwargs: Any) -> Any:
        done = real_append(*args, **kwargs)
        writes.append(done.revision)
        if len(writes) == 1:
            committed.set()
            release.wait(10)
        return done

    store.append = append  # type: ignore[method-assign]
    binding = SessionBinding(store, "s")
    assert binding.load() is None
    machine = LoopMachine()
    machine.accept_input("first")

    async def cut_off_twice() -> None:
        task = asyncio.ensure_future(binding.asave(machine))
        assert await asyncio.to_thread(committed.wait, 10)
        task.cancel()
        await asyncio.sleep(0.01)
        task.cancel()  # while it waits for the write
        with pytest.raises(asyncio.CancelledError):
            await task
        threading.Timer(0.05, release.set).start()

    asyncio.run(cut_off_twice())
    assert binding.head is None  # not adopted yet
    machine.cancel()
    assert asyncio.run(binding.asave(machine)) is True
    assert binding.stale is None
    loaded = store.load("s")
    assert [m.text_content() for m in loaded.messages] == ["first"]
    assert loaded.state.outcome == "cancelled"
    assert len(writes) == 2 and binding.revision == loaded.revision


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("sessions.db", "store='sessions.db' is a path, not a session store: pass SQLiteStore('sessions.db')"),
        (Path("s.db"), "store='s.db' is a path, not a session store: pass SQLiteStore('s.db')"),
        ("postgresql://app@db/agents", "store='postgresql://app@db/agents' is a URL, not a session store: pass "
         "PostgresStore('postgresql://app@db/agents')"),
    ],
)  # fmt: skip
def test_a_path_given_as_the_store_is_refused_when_made_naming_the_store_to_make(
    given: object, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # store="sessions.db" (as the command line's --store takes it) was accepted, and the first run failed with
    # AttributeError: 'str' object has no attribute 'load' ('aload' through an agent's session).
    from loopctl import Agent

    monkeypatch.chdir(tmp_path)
    expected = f"{message} (from loopctl.store)"
    agent = Agent(ScriptedClient(["hi"]))
    makers: list[Callable[[], object]] = [
        lambda: BareLoop(ScriptedClient(["hi"]), store=given, session_id="s"),  # type: ignore[arg-type]
        lambda: agent.session("s", store=given),  # type: ignore[arg-type]
        lambda: agent.to_ai_sdk(store=given),  # type: ignore[arg-type]
        lambda: agent.to_ag_ui(store=given),  # type: ignore[arg-type]
    ]
    for make in makers:
        with pytest.raises(TypeError) as caught:
            make()
        assert str(caught.value) == expected
    assert list(tmp_path.iterdir()) == []  # nothing made of the path
