"""Many writers at once, and writers killed mid-append: separate processes on one database, both backends."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loopctl.errors import SessionNotFound
from loopctl.message import Message
from loopctl.store import SessionStore
from loopctl.store.chain import canonical_bytes, node_id
from tests.store import workers

WORKERS = 8
ctx = multiprocessing.get_context("spawn")


def _run_all(target: Callable[..., None], args: list[tuple[Any, ...]], timeout: float = 300) -> None:
    procs = [ctx.Process(target=target, args=a) for a in args]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(1.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0] * len(procs)


def _drain(q: Any, n: int) -> list[Any]:
    return [q.get(timeout=30) for _ in range(n)]


def test_eight_writers_racing_on_stale_heads_one_wins_each_race(store: SessionStore, location: str) -> None:
    rounds = 5
    store.append("shared", [Message.user("start")], expected_head=None)
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    _run_all(workers.race, [(location, "shared", w, rounds, barrier, results) for w in range(WORKERS)])
    outcomes = _drain(results, WORKERS * rounds)
    winners = {}
    for r in range(rounds):
        of_round = Counter(o for rr, _, o in outcomes if rr == r)
        assert of_round == {"won": 1, "refused": WORKERS - 1}, f"round {r}: {of_round}"
        winners[r] = next(w for rr, w, o in outcomes if rr == r and o == "won")
    loaded = store.load("shared")
    # No gap, no duplicate: the start, then exactly each round's winner, in order.
    assert [m.text_content() for m in loaded.messages] == ["start"] + [f"w{winners[r]} r{r}" for r in range(rounds)]
    assert store.info("shared").revision == 1 + rounds
    assert store.verify("shared") == []


def test_eight_writers_that_reload_after_a_refusal_lose_nothing(store: SessionStore, location: str) -> None:
    count = 6
    store.create("shared")
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    _run_all(workers.persist, [(location, "shared", w, count, barrier, results) for w in range(WORKERS)])
    refused = sum(r for _, r in _drain(results, WORKERS))
    texts = [m.text_content() for m in store.load("shared").messages]
    assert len(texts) == len(set(texts)) == WORKERS * count
    assert set(texts) == {f"w{w} m{i}" for w in range(WORKERS) for i in range(count)}
    for w in range(WORKERS):  # each writer's own messages keep their order
        own = [t for t in texts if t.startswith(f"w{w} ")]
        assert own == [f"w{w} m{i}" for i in range(count)]
    assert store.info("shared").revision == 1 + WORKERS * count
    assert store.verify("shared") == []
    assert refused >= 0


def test_eight_sessions_written_at_once_lose_nothing(store: SessionStore, location: str) -> None:
    turns = 10
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    ids = [f"session-{w}" for w in range(WORKERS)]
    _run_all(workers.grow, [(location, sid, turns, barrier, results) for sid in ids])
    assert sorted(_drain(results, WORKERS)) == sorted(ids)
    assert sorted(i.id for i in store.sessions()) == sorted(ids)
    for sid in ids:
        loaded = store.load(sid)
        expected = [m for t in range(turns) for m in workers.turn(f"{sid}-{t}", 200)]
        assert list(loaded.messages) == expected
        assert store.verify(sid) == []


def _wait_for(path: Path, proc: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.is_alive(), "the writer died before it got there"
        assert time.monotonic() < deadline, "the writer never got there"
        time.sleep(0.01)


def test_a_writer_killed_in_the_middle_of_an_append_leaves_the_previous_head(
    store: SessionStore, location: str, tmp_path: Path
) -> None:
    before = workers.turn("one", 10)
    done = store.append("s", before, expected_head=None)
    assert done.head is not None
    ready = tmp_path / "ready"
    proc = ctx.Process(target=workers.append_and_hang, args=(location, "s", done.head, "two", str(ready)))
    proc.start()
    _wait_for(ready, proc)
    os.kill(proc.pid, signal.SIGKILL)  # nodes and blobs inserted, head not yet moved, nothing committed
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    info = store.info("s")
    assert (info.head, info.revision, info.length) == (done.head, 1, 2)
    assert list(store.load("s").messages) == before
    lost = workers.turn("two", 50_000)[0]
    with pytest.raises(SessionNotFound):  # the killed transaction's rows are gone with it
        store.find_node(node_id(bytes.fromhex(done.head), canonical_bytes(lost)).hex())
    assert store.verify("s") == []
    after = store.append("s", workers.turn("three"), expected_head=done.head)  # no lock left behind
    assert store.load("s").node_ids[-1] == after.head


def test_a_writer_killed_at_any_moment_leaves_whole_appends_only(
    store: SessionStore, location: str, tmp_path: Path
) -> None:
    store.create("s")
    for attempt, delay in enumerate((0.05, 0.2, 0.5)):
        started = tmp_path / f"started-{attempt}"
        proc = ctx.Process(target=workers.append_forever, args=(location, "s", str(started)))
        proc.start()
        _wait_for(started, proc)
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        info = store.info("s")
        assert info.length % 6 == 0  # every append was whole, or not at all
        assert len(store.load("s").messages) == info.length
        assert store.verify("s") == []
