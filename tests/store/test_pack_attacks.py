"""Packs under attack: writers racing around a pack's last node, writers killed while they complete packs,
forks inside and at the edge of packs. Whatever happens, a load gives exactly the chain of the node rows and
``verify`` finds nothing."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from loopctl.errors import ConcurrentUpdate
from loopctl.message import Message
from loopctl.store import SessionStore, StoredSession
from loopctl.store.chain import unpack_nodes
from tests.store import workers
from tests.store.test_store import raw

ctx = multiprocessing.get_context("spawn")


def rows_only(store: SessionStore, session_id: str) -> StoredSession:
    """The session as its node rows hold it (no pack read)."""
    saved = store.dialect
    store.dialect = dataclasses.replace(saved, chain_to_pack=saved.chain)
    try:
        return store.load(session_id)
    finally:
        store.dialect = saved


def assert_sound(store: SessionStore, *sessions: str) -> None:
    """Each session loads as its node rows hold it, verifies clean, and every pack holds only stored nodes."""
    for s in sessions:
        loaded = store.load(s)
        assert loaded == rows_only(store, s)
        assert store.verify(s) == []
    nodes = {bytes(r[0]) for r in raw(store, "SELECT id FROM loopctl_nodes")}
    for pid, _, _, length, _, ids, sizes, bodies in raw(
        store, "SELECT id, parent, depth, length, format, ids, sizes, bodies FROM loopctl_packs"
    ):
        pack_ids, _ = unpack_nodes(length, bytes(ids), bytes(sizes), bytes(bodies))
        assert set(pack_ids) <= nodes, "a pack holds a node that was never written"
        assert pack_ids[-1] == bytes(pid)


def test_threads_racing_around_pack_edges_one_wins_and_packs_stay_true(
    open_store: Callable[[], SessionStore],
) -> None:
    stores = [open_store() for _ in range(4)]
    for s in stores:
        s.pack_size = 5
    base = stores[0].append("a", [Message.user(f"a{i}") for i in range(9)], expected_head=None)
    stores[0].fork("a", at=base.node_ids[4], new_id="b")  # forked at a pack's last node
    stores[0].fork("a", at=base.node_ids[7], new_id="c")  # forked inside a pack
    wins: dict[str, int] = {"a": 0, "b": 0, "c": 0}
    lock = threading.Lock()
    start = threading.Barrier(len(stores))

    def writer(w: int) -> None:
        rng = random.Random(w)
        store = stores[w]
        start.wait()
        for r in range(25):
            s = rng.choice("abc")
            head = store.info(s).head
            try:
                # The same messages from every writer: racing appends name the same nodes and packs.
                store.append(s, [Message.user(f"{s} r{r} {k}") for k in range(rng.randint(1, 6))], expected_head=head)
            except ConcurrentUpdate:
                continue
            with lock:
                wins[s] += 1

    reader_store = open_store()
    reader_store.dialect = dataclasses.replace(reader_store.dialect, chain_to_pack=reader_store.dialect.chain)
    stop = threading.Event()
    reads: list[tuple[str, bool]] = []

    def reader() -> None:  # loads while the writers write: each load is the node rows' chain of its head
        while not stop.is_set():
            for s in "abc":
                try:
                    loaded = stores[0].load(s)
                    rows = reader_store.chain(loaded.head or "")
                except BaseException as exc:  # reported below
                    reads.append((f"{s}: {exc!r}", False))
                    return
                reads.append((s, [n.message for n in rows] == list(loaded.messages)))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(len(stores))]
    reading = threading.Thread(target=reader)
    reading.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    stop.set()
    reading.join(60)
    assert reads and [r for r in reads if not r[1]] == []
    for s in "abc":  # every win moved the head once: none lost, none doubled
        assert stores[0].info(s).revision == 1 + wins[s]
    assert_sound(stores[0], "a", "b", "c")


def test_a_writer_killed_while_it_completes_packs_leaves_no_half_pack(
    store: SessionStore, location: str, tmp_path: Path
) -> None:
    store.append("k", [Message.user("start")], expected_head=None)
    for round_ in range(3):  # (verify walks every head's chain: a long history makes it slow)
        started = tmp_path / f"started{round_}"
        p = ctx.Process(target=workers.append_packs_forever, args=(location, "k", 3, str(started)))
        p.start()
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(random.uniform(0.02, 0.15))
        assert p.pid is not None
        os.kill(p.pid, signal.SIGKILL)
        p.join(30)
        store.pack_size = 3
        assert_sound(store, "k")
    assert store.info("k").length > 8


def test_two_sessions_writing_the_same_nodes_and_packs_at_once_share_them(
    open_store: Callable[[], SessionStore],
) -> None:
    stores = [open_store(), open_store()]
    for s in stores:
        s.pack_size = 5
    base = stores[0].append("a", [Message.user(f"a{i}") for i in range(3)], expected_head=None)
    stores[0].fork("a", new_id="b")  # the same head: the same appends make the same nodes and packs
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        store, s = stores[w], "ab"[w]
        head = base.head
        try:
            for r in range(30):
                start.wait(60)  # both in the same moment, every time
                head = store.append(s, [Message.user(f"r{r} {k}") for k in range(r % 4 + 1)], expected_head=head).head
        except BaseException as exc:  # reported below
            errors.append(exc)
            start.abort()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == []
    assert stores[0].load("a").messages == stores[0].load("b").messages
    assert stores[0].load("a").node_ids == stores[0].load("b").node_ids
    assert_sound(stores[0], "a", "b")
