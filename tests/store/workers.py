"""Code the concurrency tests run in separate processes (started with ``spawn``: each is a fresh interpreter
with its own connections, as separate programs on one machine would be)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from loopctl.errors import ConcurrentUpdate
from loopctl.message import Message, Role, ToolCallPart, ToolResultPart
from loopctl.store import SessionStore, SQLiteStore
from loopctl.store.base import Tx

BARRIER_TIMEOUT = 120.0


def open_store(location: str) -> SessionStore:
    """The store at ``sqlite:PATH`` or ``postgres:DSN``."""
    kind, _, where = location.partition(":")
    if kind == "sqlite":
        return SQLiteStore(where)
    from loopctl.store import PostgresStore

    return PostgresStore(where, max_size=2)


def turn(tag: str, size: int = 0) -> list[Message]:
    """One tool-calling turn's two messages, tagged; ``size`` pads the tool output (bytes)."""
    return [
        Message.new(Role.ASSISTANT, [ToolCallPart(id=f"c-{tag}", name="read", input={"tag": tag})]),
        Message.new(Role.USER, [ToolResultPart(call_id=f"c-{tag}", name="read", output=f"{tag} " + "x" * size)]),
    ]


def race(location: str, session_id: str, worker: int, rounds: int, barrier: Any, results: Any) -> None:
    """Each round: read the head, wait until every worker has read it, then append on top of it. Every
    worker but the first to write holds a stale head."""
    store = open_store(location)
    try:
        for r in range(rounds):
            head = store.info(session_id).head
            barrier.wait(BARRIER_TIMEOUT)
            try:
                store.append(session_id, [Message.user(f"w{worker} r{r}")], expected_head=head)
                results.put((r, worker, "won"))
            except ConcurrentUpdate:
                results.put((r, worker, "refused"))
            barrier.wait(BARRIER_TIMEOUT)
    finally:
        store.close()


def persist(location: str, session_id: str, worker: int, count: int, barrier: Any, results: Any) -> None:
    """Append ``count`` messages, each on the head just read, reading again after every refusal."""
    store = open_store(location)
    refused = 0
    try:
        barrier.wait(BARRIER_TIMEOUT)
        for i in range(count):
            while True:
                head = store.info(session_id).head
                try:
                    store.append(session_id, [Message.user(f"w{worker} m{i}")], expected_head=head)
                    break
                except ConcurrentUpdate:
                    refused += 1
        results.put((worker, refused))
    finally:
        store.close()


def grow(location: str, session_id: str, turns: int, barrier: Any, results: Any) -> None:
    """Grow one session of its own by ``turns`` turns, alongside the other workers."""
    store = open_store(location)
    try:
        barrier.wait(BARRIER_TIMEOUT)
        head = None
        for t in range(turns):
            head = store.append(session_id, turn(f"{session_id}-{t}", 200), expected_head=head).head
        results.put(session_id)
    finally:
        store.close()


class _Pausing:
    """A transaction that stops for good just before the head moves (after the nodes and blobs are in)."""

    def __init__(self, tx: Tx, update_sql: str, ready: Path) -> None:
        self._tx, self._update, self._ready = tx, update_sql, ready

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._tx.query(sql, params)

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        if sql == self._update:
            self._ready.write_text("in the middle of an append")
            time.sleep(3600)  # until SIGKILL
        return self._tx.run(sql, params)

    def run_many(self, sql: str, rows: Any) -> None:
        self._tx.run_many(sql, rows)


def append_and_hang(location: str, session_id: str, head: str, tag: str, ready: str) -> None:
    """Start a big append on ``head`` and stop inside its transaction, waiting to be killed."""
    store = open_store(location)
    original = store._write

    @contextlib.contextmanager
    def paused() -> Iterator[Tx]:
        with original() as tx:
            yield _Pausing(tx, store.dialect.update_session, Path(ready))

    store._write = paused  # type: ignore[method-assign]
    store.append(session_id, [*turn(tag, 50_000), *turn(tag + "b", 10)], expected_head=head)


def append_forever(location: str, session_id: str, started: str) -> None:
    """Append batches of 6 messages (with big payloads) until killed."""
    store = open_store(location)
    head = store.info(session_id).head
    Path(started).write_text("started")
    i = 0
    while True:
        batch = [m for k in range(3) for m in turn(f"{i}-{k}", 20_000)]
        head = store.append(session_id, batch, expected_head=head).head
        i += 1


def crash_in_third_turn(location: str, session_id: str) -> None:
    """Run an agent whose third tool call kills its own process (SIGKILL: no cleanup of any kind)."""
    import os
    import signal

    from loopctl.engine import BareLoop, RunConfig
    from loopctl.testing import ScriptedClient
    from loopctl.tool import tool

    @tool
    async def step(n: int) -> str:
        """A tool that dies on its third call."""
        if n == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"step {n} done"

    def reply(n: int) -> Message:
        return Message.new(Role.ASSISTANT, [ToolCallPart(id=f"c{n}", name="step", input={"n": n})])

    loop = BareLoop(
        ScriptedClient([reply(1), reply(2), reply(3)]), [step], store=open_store(location), session_id=session_id
    )
    loop.run_sync("work", RunConfig(stream=False))


def append_packs_forever(location: str, session_id: str, pack_size: int, started: str) -> None:
    """Append batches of 1 to 4 messages (a big payload now and then) with a small pack size, so that most
    appends complete a pack, until killed."""
    import random

    store = open_store(location)
    store.pack_size = pack_size
    head = store.info(session_id).head
    Path(started).write_text("started")
    i = 0
    while True:
        n = random.randint(1, 4)
        batch = [Message.user(f"m{i}-{k} " + "é" * (3000 if (i + k) % 5 == 0 else 3)) for k in range(n)]
        head = store.append(session_id, batch, expected_head=head).head
        i += 1
