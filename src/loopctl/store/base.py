"""What every session store does, written once over a small backend interface.

:class:`SessionStore` holds the algorithms (append with compare-and-swap on the head, fork, load, verify,
import and export of session files); a backend (:class:`~loopctl.store.SQLiteStore`,
:class:`~loopctl.store.PostgresStore`) supplies connections, transactions and its SQL dialect. Every
operation has a blocking form (``load``) and an async twin with the same meaning (``aload``), which runs
the blocking form on a worker thread (``asyncio.to_thread``), so a store works from any event loop, the
fresh one of each ``BareLoop.run_sync`` included.

Tables (both backends; the model and the version policy are in ``docs/sessions.md``):

- ``loopctl_nodes(id, parent, depth, body, refs)``: immutable, content-addressed nodes (``chain.py``);
- ``loopctl_blobs(hash, data)``: big payloads, stored once;
- ``loopctl_packs(id, parent, depth, length, format, ids, sizes, bodies)``: copies of a chain's nodes, many to
  a row, that a load reads instead of their own rows (``chain.py``);
- ``loopctl_sessions(id, head, revision, length, state, created_at, updated_at)``: the only rows that
  change, one per session: the head pointer and the state beside it;
- ``loopctl_heads(session_id, revision, head, at, kind)``: every move of every head, so an older chain (the
  one before a compaction) stays findable;
- ``loopctl_meta(key, value)``: ``schema_version``.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import datetime
import functools
import gc
import os
import secrets
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson
from pydantic import TypeAdapter, ValidationError

from loopctl._frozen import dataclass
from loopctl.engine.machine import MachineState
from loopctl.errors import (
    ConcurrentUpdate,
    ConversationFileError,
    InvalidMessage,
    SessionExists,
    SessionNotFound,
    StoreCorrupt,
    StoreError,
)
from loopctl.message import Message, Role, ToolResultPart
from loopctl.message.check import unanswered_calls
from loopctl.session import Session
from loopctl.store.chain import (
    BLOB_THRESHOLD,
    MAX_PACK_BYTES,
    PACK_FORMAT,
    PACK_SIZE,
    TOO_BIG_FORMAT,
    Payload,
    blob_hash,
    canonical_bytes,
    join_payloads,
    node_id,
    pack_nodes,
    read_pack,
    read_refs,
    split_payloads,
    unpack_nodes,
)
from loopctl.store.state import SessionState, restore_checked

__all__ = [
    "SCHEMA_VERSION",
    "Appended",
    "HeadMove",
    "Node",
    "SessionInfo",
    "SessionStore",
    "StoreProblem",
    "StoredSession",
    "new_session_id",
]

SCHEMA_VERSION = 1
"""The database schema this release creates and the newest it opens (policy: ``docs/sessions.md``)."""

FORKED_HERE = "Not run: the session was forked here."
"""The result :meth:`SessionStore.fork` gives a call of the fork's last reply that has none."""

HeadKind = Literal["create", "append", "rewrite", "fork", "import"]
"""Why a head moved: a new empty session, messages added on top of the head, a head moved to another
chain (compaction, a prune pass, an edit, a salvage back to a coherent prefix), a fork, an import."""

_MAX_ID = 200


# --- records -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Node:
    """One node of a chain: its ``id`` (hex), its ``parent`` (hex, ``None`` for the first message), its
    ``index`` in the chain (0 for the first message) and the ``message``."""

    id: str
    parent: str | None
    index: int
    message: Message


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A session as listed: its ``id``, ``head`` (hex node id, ``None`` when empty), ``revision`` (how many
    times the head moved), ``length`` (messages up to the head), the ``state`` beside the head, and when
    it was created and last changed (``created_at``, ``updated_at``: Unix time in seconds)."""

    id: str
    head: str | None
    revision: int
    length: int
    state: SessionState | None
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class StoredSession:
    """A loaded session: :class:`SessionInfo`'s fields, the ``messages`` up to the head (oldest first) and
    their ``node_ids`` (hex, same order)."""

    id: str
    head: str | None
    revision: int
    state: SessionState
    messages: tuple[Message, ...]
    node_ids: tuple[str, ...]
    created_at: float
    updated_at: float

    def machine(self) -> Any:
        """A new :class:`~loopctl.engine.LoopMachine` exactly as saved (raises ``StoreCorrupt`` when the state
        does not fit the chain)."""
        try:
            return restore_checked(self.state, self.messages, source=f"session {self.id!r}")
        except ConversationFileError as exc:
            raise StoreCorrupt(str(exc), session_id=self.id) from None

    def to_session(self) -> Session:
        """The session as a :class:`~loopctl.session.Session` (what a session file holds)."""
        st = self.state
        return Session(self.machine(), st.model, st.root, st.system_prompt, dict(st.metadata))


@dataclass(frozen=True, slots=True)
class Appended:
    """What an append wrote: the new ``head`` (hex), the ``node_ids`` of the appended messages (hex, in
    order) and the session's new ``revision``."""

    head: str | None
    node_ids: tuple[str, ...]
    revision: int


@dataclass(frozen=True, slots=True)
class HeadMove:
    """One move of a session's head: the ``revision`` it made, the new ``head`` (hex or ``None``), when
    (``at``, Unix time in seconds), and ``kind`` (:data:`HeadKind`)."""

    revision: int
    head: str | None
    at: float
    kind: str


@dataclass(frozen=True, slots=True)
class StoreProblem:
    """A problem :meth:`SessionStore.verify` found: the ``session_id``, the ``node`` concerned (hex, or
    ``None`` for the session row itself), the message ``index`` in its chain when known, and what is wrong."""

    session_id: str
    node: str | None
    index: int | None
    problem: str

    def __str__(self) -> str:
        where = f"session {self.session_id!r}"
        if self.node is not None:
            where += f", node {self.node[:12]}"
        if self.index is not None:
            where += f" (message {self.index})"
        return f"{where}: {self.problem}"


def new_session_id() -> str:
    """A fresh session id: the local time and 6 random hex digits (``20250101-120000-3f9a1c``), unique even
    for sessions started in the same second."""
    return f"{datetime.datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def check_store(store: object) -> None:
    """Raise ``TypeError`` when ``store`` is a path or a URL (a ``str`` or an ``os.PathLike``) rather than a
    :class:`SessionStore`, naming the store to make of it: ``store="sessions.db"``, as the command line's
    ``--store`` takes it, failed at the first run with ``AttributeError: 'str' object has no attribute
    'load'``."""
    if isinstance(store, (str, os.PathLike)):
        text = os.fspath(store)
        kind = "PostgresStore" if str(text).startswith(("postgresql://", "postgres://")) else "SQLiteStore"
        raise TypeError(
            f"store={text!r} is a {'URL' if kind == 'PostgresStore' else 'path'}, not a session store: "
            f"pass {kind}({text!r}) (from loopctl.store)"
        )


def check_session_id(session_id: object) -> str:
    """``session_id`` when it is a usable id (1 to 200 printable characters, no surrounding spaces); raises
    ``ValueError`` otherwise."""
    if not isinstance(session_id, str):
        raise TypeError(f"a session id is a string, not {type(session_id).__name__}")
    if not 0 < len(session_id) <= _MAX_ID or not session_id.isprintable() or session_id.strip() != session_id:
        raise ValueError(
            f"invalid session id {session_id!r}: expected 1 to {_MAX_ID} printable characters, "
            "without leading or trailing spaces"
        )
    return session_id


def _b(value: Any) -> bytes:
    """A stored byte value as ``bytes``. Text where bytes belong (a row edited by hand: SQLite's ``replace()``
    turns a blob into text) is read as its UTF-8 bytes, so the hashes, not a crash, report the change."""
    if type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return bytes(value)


def _ob(value: Any) -> bytes | None:
    return None if value is None else _b(value)


def _decode(bodies: list[bytes], first: int, ids: list[bytes], where: str, sid: str | None) -> list[Message]:
    """The messages of stored JSON ``bodies`` (messages ``first`` on of the chain of ``ids``), each validated
    once, straight by pydantic-core (what ``Message.from_json`` does, without its wrapper per message). Raises
    ``StoreCorrupt`` naming the first message that is not valid, and its node."""
    validate = Message.__pydantic_validator__.validate_json
    try:
        return [validate(body) for body in bodies]
    except ValidationError:  # find the first bad one, for its node and a message that names the path
        for i, body in enumerate(bodies):
            try:
                Message.from_json(body)
            except ValueError as exc:  # InvalidMessage
                raise _unreadable(where, first + i, ids[first + i], sid, str(exc)) from None
        raise


@functools.cache
def _messages_adapter() -> TypeAdapter[list[Message]]:
    """The validator of a JSON array of messages (built when a pack is first read: well under a millisecond)."""
    return TypeAdapter(list[Message])


def _decode_pack(
    array: bytes, count: int, first: int, ids: list[bytes], where: str, sid: str | None, pack: tuple[Any, ...]
) -> list[Message]:
    """The ``count`` messages of a pack's JSON ``array`` (messages ``first`` on of the chain of ``ids``), in one
    call into pydantic-core. Raises ``StoreCorrupt`` naming the first message that is not valid and its
    node, or the pack when its array does not hold its messages."""
    try:
        messages = _messages_adapter().validate_json(array)
    except ValidationError:
        messages = None
    if messages is not None and len(messages) == count:
        return messages
    try:  # the bodies one by one: which one is bad, or what is wrong with the array's layout
        _, bodies = unpack_nodes(count, _b(pack[5]), _b(pack[6]), array)
    except ValueError as exc:
        raise _pack_unreadable(where, pack, sid, str(exc)) from None
    _decode(bodies, first, ids, where, sid)  # raises naming the first message that is not valid
    got = "not a JSON array" if messages is None else f"an array of {len(messages)} messages"
    raise _pack_unreadable(where, pack, sid, f"its bodies make {got}, not of {count}")


def _bytes_column(rows: list[Any], index: int) -> list[bytes]:
    """Column ``index`` of ``rows`` as ``bytes`` (as :func:`_b` reads each value), at C speed when every value
    is ``bytes`` already (always, but for a row edited by hand)."""
    column = [r[index] for r in rows]
    if set(map(type, column)) <= {bytes}:
        return column
    return [_b(v) for v in column]


def _hex(value: bytes | None) -> str | None:
    return None if value is None else _b(value).hex()


def _unhex(value: str | None, what: str = "node id") -> bytes | None:
    if value is None:
        return None
    try:
        raw = bytes.fromhex(value)
    except (ValueError, TypeError):
        raise ValueError(f"invalid {what} {value!r}: expected 64 hex digits") from None
    if len(raw) != 32:
        raise ValueError(f"invalid {what} {value!r}: expected 64 hex digits")
    return raw


# --- the backend interface ---------------------------------------------------------------------------------


class Tx(Protocol):
    """A transaction of a backend (its SQL uses the backend's own placeholders)."""

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a statement that returns rows; all of them."""
        ...

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement; the number of rows it changed."""
        ...

    def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run a statement once per parameter row."""
        ...


@dataclass(frozen=True, slots=True)
class Dialect:
    """The SQL a backend speaks for each step (placeholders, locking, upserts)."""

    get_session: str
    lock_session: str  # the same row, locked against other writers until the transaction ends
    insert_session: str  # (id, revision, state, created_at, updated_at); does nothing when the id exists
    update_session: str  # (head, revision, length, state, updated_at, id)
    insert_node: str  # (id, parent, depth, body, refs); does nothing when the id exists
    insert_blob: str  # (hash, data); does nothing when the hash exists
    insert_head: str  # (session_id, revision, head, at, kind)
    get_node: str  # id -> (id, parent, depth, body, refs)
    chain: str  # head -> rows (id, parent, depth, body, refs), any order; each link's depth checked
    chain_to_pack: str  # as chain, but not past a node that is the last of a pack (that node included)
    chain_above: str  # (head, low) -> as chain, the nodes of depth >= low only
    packs: str  # the last node of a pack -> the chain of packs below it, rows as in packs_in, any order
    has_pack: str  # id -> a row when a pack ends at that node
    insert_pack: str  # (id, parent, depth, length, format, ids, sizes, bodies); nothing when the id exists
    packs_in: str  # a list of ids -> (id, parent, depth, length, format, ids, sizes, bodies); "{in}" as blobs
    walk: str  # head -> rows (id, parent, depth, body, refs): the parent links as stored, each row once
    find_nodes: str  # (low, high) -> ids
    list_sessions: str
    heads: str  # session_id -> (revision, head, at, kind)
    blobs: str  # a list of hashes -> (hash, data); "{in}" is replaced by the list's placeholders
    param: str  # the placeholder of one parameter: "?" or "%s"

    def blobs_query(self, hashes: Sequence[bytes]) -> tuple[str, Sequence[Any]]:
        """The blob lookup for ``hashes`` and its parameters."""
        return self.in_query(self.blobs, hashes)

    def in_query(self, sql: str, keys: Sequence[bytes]) -> tuple[str, Sequence[Any]]:
        """``sql`` (a lookup by a list of keys: ``blobs``, ``packs_in``) for ``keys``, and its parameters."""
        if "{in}" in sql:
            return sql.replace("{in}", ",".join([self.param] * len(keys))), list(keys)
        return sql, [list(keys)]


_BLOB_BATCH = 500


class _CollectorPause:
    """Pauses Python's cyclic garbage collector while a chain's messages are built (``with
    _collector_paused:``).

    A load creates a dozen objects per message and keeps them all: each pass of the collector over them frees
    nothing, and the full passes, whose number grows with every object the load keeps, took half of a
    10,000-message load (``docs/sessions.md``, "Figures"). The collector runs again when the last of the
    loads running at the same time (in any thread) ends, and only if it was enabled when the first began.
    Reference counting frees everything as usual meanwhile.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0  # loads building messages right now, in any thread
        self._resume = False  # whether the first of them found the collector enabled

    def __enter__(self) -> None:
        with self._lock:
            if self._active == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._active += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0 and self._resume:
                if not gc.get_freeze_count():
                    # Move every object to the oldest generation (freeze, then unfreeze at once): what the
                    # load built would otherwise be walked by the very next young collection, to free
                    # nothing. Skipped when the program froze objects itself (unfreeze would thaw them).
                    gc.freeze()
                    gc.unfreeze()
                gc.enable()


_collector_paused = _CollectorPause()


class SessionStore(abc.ABC):
    """A store of sessions: append-only chains of messages, one head pointer per session.

    Subclasses give the connections (:meth:`_write`, :meth:`_read`) and the :class:`Dialect`. The public
    operations below raise :class:`~loopctl.errors.SessionNotFound` for an unknown session,
    :class:`~loopctl.errors.ConcurrentUpdate` for a stale head, :class:`~loopctl.errors.StoreCorrupt` for a
    row that cannot be read back, and :class:`~loopctl.errors.StoreError` when the database fails.
    """

    dialect: Dialect
    blob_threshold: int = BLOB_THRESHOLD
    pack_size: int = PACK_SIZE
    max_pack_bytes: int = MAX_PACK_BYTES
    """A pack whose messages would take more bytes than this is not written: its nodes are read from their rows
    (:data:`~loopctl.store.chain.MAX_PACK_BYTES`)."""

    def _pack_bytes_limit(self) -> int:
        """The most bytes a pack written now may take: :attr:`max_pack_bytes`, or less when the database
        takes less in one value."""
        return self.max_pack_bytes

    @abc.abstractmethod
    def _write(self) -> contextlib.AbstractContextManager[Tx]:
        """A write transaction: committed when the block ends, rolled back when it raises. Two write
        transactions that lock the same session row (``lock_session``) run one after the other."""

    @abc.abstractmethod
    def _read(self) -> contextlib.AbstractContextManager[Tx]:
        """A read-only transaction."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the store's connections; using it afterwards raises ``StoreError``."""

    def _ensure_schema(self, tx: Tx, tables: set[str], statements: Iterable[str], where: str) -> None:
        """Create the tables in ``tx`` when the database has none (``tables``: the names of those it has), add
        the tables an older release did not create (``loopctl_packs``: a table older releases ignore, so not a
        new schema version), and refuse a database whose schema is newer than :data:`SCHEMA_VERSION` (policy:
        ``docs/sessions.md``)."""
        version = None
        if "loopctl_meta" in tables:
            row = tx.query("SELECT value FROM loopctl_meta WHERE key = 'schema_version'")
            version = int(row[0][0]) if row else None
        if version is not None and version > SCHEMA_VERSION:
            raise StoreError(
                f"{where}: schema version {version} is newer than this release of loopctl reads ({SCHEMA_VERSION}); "
                "upgrade loopctl to open it"
            )
        if version is not None:
            if "loopctl_packs" not in tables:  # a database an older release created
                for statement in statements:
                    if "loopctl_packs" in statement.split("(")[0]:
                        tx.run(statement)
        else:
            for statement in statements:
                tx.run(statement)
            tx.run(
                f"INSERT INTO loopctl_meta (key, value) VALUES ('schema_version', {self.dialect.param}) "
                "ON CONFLICT DO NOTHING",
                (str(SCHEMA_VERSION),),
            )

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing -------------------------------------------------------------------------------------------

    def create(self, session_id: str | None = None, *, state: SessionState | None = None) -> SessionInfo:
        """Create an empty session (no messages yet) named ``session_id`` (default: :func:`new_session_id`).
        Raises ``SessionExists`` when the id is taken.

        ``state`` is the session's first state (:class:`SessionState`: settings, machine at rest), or none.
        """
        sid = check_session_id(session_id) if session_id is not None else new_session_id()
        st = state or SessionState.at_rest(0)
        if st.message_count != 0:
            raise ValueError("a new empty session needs a state holding no messages")
        now = time.time()
        with self._write() as tx:
            if not tx.run(self.dialect.insert_session, (sid, 1, st.to_bytes(), now, now)):
                raise SessionExists(f"session {sid!r} already exists", session_id=sid)
            tx.run(self.dialect.insert_head, (sid, 1, None, now, "create"))
        return SessionInfo(sid, None, 1, 0, st, now, now)

    def append(
        self,
        session_id: str,
        messages: Iterable[Message],
        *,
        expected_head: str | None,
        parent: str | Literal["head"] | None = "head",
        state: SessionState | None = None,
        expected_revision: int | None = None,
    ) -> Appended:
        """Append ``messages`` to the session and move its head to the last of them, if and only if its head
        is still ``expected_head`` (``None``: the session is empty or does not exist yet, and is created)
        and, when ``expected_revision`` is given, its revision is still that one. A writer that saves states
        (a run's progress with no new message, such as an approval recorded before the call runs) needs the
        revision: nodes are named by their content, so a write that keeps the head, or that appends what
        another writer appended too, leaves the head as it was.

        The messages hang from ``parent``: the head (default), another node (hex id) to move the head to a new
        branch (a compaction or an edit, which leaves the old chain readable), or ``None`` to start a new
        chain. ``state`` is stored beside the new head and must hold exactly the messages of its chain; by
        default the session is at rest with them as its history (its settings kept).

        Raises :class:`~loopctl.errors.ConcurrentUpdate` when the head has moved or the revision is not the
        one expected (nothing is written),
        ``SessionNotFound`` when ``expected_head`` is given but the session does not exist or ``parent``
        names no node, ``ValueError`` for a state that does not fit, ``InvalidMessage`` for a message that
        cannot be written (before anything is).

        ``session_id`` names the session.
        """
        return self._append(
            check_session_id(session_id),
            list(messages),
            expected_head,
            parent,
            state,
            new_only=False,
            expected_revision=expected_revision,
        )

    def _append(
        self,
        sid: str,
        messages: list[Message],
        expected_head: str | None,
        parent: str | Literal["head"] | None,
        state: SessionState | None,
        *,
        new_only: bool,
        kind: HeadKind | None = None,
        expected_revision: int | None = None,
    ) -> Appended:
        expected = _unhex(expected_head, "expected head")
        base = expected if parent == "head" else _unhex(parent, "parent")
        # Everything that needs no database is done before the transaction: the ids, the payload split.
        prepared: list[tuple[bytes, Payload, bytes]] = []
        prev = base
        for i, message in enumerate(messages):
            if not isinstance(message, Message):
                raise TypeError(f"messages[{i}] is a {type(message).__name__}, not a Message")
            try:
                data = canonical_bytes(message)
            except InvalidMessage as exc:
                where = f"messages[{i}].{exc.path}" if exc.path else f"messages[{i}]"
                raise InvalidMessage(where, exc.expected) from None
            nid = node_id(prev, data)
            prepared.append((nid, split_payloads(data, message.to_dict(), self.blob_threshold), data))
            prev = nid
        head = prev
        d = self.dialect
        now = time.time()
        with self._write() as tx:
            row = tx.query(d.lock_session, (sid,))
            if not row:
                if expected is not None:
                    raise SessionNotFound(f"no session {sid!r}", session_id=sid)
                tx.run(d.insert_session, (sid, 0, SessionState.at_rest(0).to_bytes(), now, now))
                row = tx.query(d.lock_session, (sid,))
            elif new_only:
                raise SessionExists(f"session {sid!r} already exists", session_id=sid)
            _, current, revision, length, state_bytes, _, _ = row[0]
            current = _ob(current)
            if current != expected:
                raise ConcurrentUpdate(sid, expected_head, _hex(current))
            if expected_revision is not None and revision != expected_revision:
                raise ConcurrentUpdate(
                    sid, expected_head, _hex(current), expected_revision=expected_revision, actual_revision=revision
                )
            if base is None:
                depth0 = 0
            elif base == current:
                depth0 = length
            else:
                found = tx.query(d.get_node, (base,))
                if not found:
                    raise SessionNotFound(f"no node {_hex(base)} to append to", session_id=sid)
                depth0 = found[0][2] + 1
            new_length = depth0 + len(prepared)
            if state is None:
                old = _state(state_bytes, sid) if revision else None
                state = SessionState.at_rest(new_length, old)
            elif state.message_count != new_length:
                raise ValueError(
                    f"the state holds {state.message_count} messages but the chain up to the new head has {new_length}"
                )
            blobs: dict[bytes, bytes] = {}
            for _, payload, _ in prepared:
                blobs.update(payload.blobs)
            if blobs:
                tx.run_many(d.insert_blob, list(blobs.items()))
            if prepared:
                rows = []
                p = base
                for i, (nid, payload, _) in enumerate(prepared):
                    rows.append((nid, p, depth0 + i, payload.body, payload.packed_refs()))
                    p = nid
                tx.run_many(d.insert_node, rows)
                self._write_packs(tx, base, depth0, prepared)
            revision += 1
            tx.run(d.update_session, (head, revision, new_length, state.to_bytes(), now, sid))
            if kind is None:
                kind = "append" if base == current else "rewrite"
            tx.run(d.insert_head, (sid, revision, head, now, kind))
        return Appended(_hex(head), tuple(n.hex() for n, _, _ in prepared), revision)

    def _write_packs(
        self, tx: Tx, base: bytes | None, depth0: int, prepared: list[tuple[bytes, Payload, bytes]]
    ) -> None:
        """Write the packs the appended nodes complete (``prepared``: their ids, payload splits and canonical
        bytes, the first at depth ``depth0`` after ``base``): one per multiple of :attr:`pack_size` reached,
        unless a pack already ends at that node (another session wrote it) or its messages would take more than
        :meth:`_pack_bytes_limit` bytes (they are read from their rows; a row of :data:`TOO_BIG_FORMAT` says so).
        A pack's nodes from before this
        append are read back from their rows. When the packs below are missing too (a chain written before
        packs, or with another pack size), they are written now, once: the whole chain is read back. When the
        rows cannot be read whole (a broken chain), no pack is written, and the load reads those nodes from
        their rows, as it reads a chain written before packs."""
        size = self.pack_size
        if size <= 0 or not prepared:
            return
        d = self.dialect
        last = depth0 + len(prepared) - 1
        first_tip = (depth0 // size + 1) * size - 1
        if first_tip > last:
            return
        # The nodes from depth `low` to `last`: their ids and canonical bytes, and the parent of the first.
        ids = [nid for nid, _, _ in prepared]
        bodies = [data for _, _, data in prepared]
        low, parent = depth0, base
        start = first_tip - size + 1
        if start < depth0:
            earlier = self._rows_above(tx, base, start, depth0 - start)
            if earlier is None:
                return
            parent, ids, bodies, low = earlier[0], earlier[1] + ids, earlier[2] + bodies, start
        elif start > depth0:
            ids, bodies, low, parent = ids[start - depth0 :], bodies[start - depth0 :], start, ids[start - depth0 - 1]
        if parent is not None and not tx.query(d.has_pack, (parent,)):
            earlier = self._rows_above(tx, parent, 0, low)  # no pack below: the chain's first packs are missing
            if earlier is not None:
                parent, ids, bodies, low = None, earlier[1] + ids, earlier[2] + bodies, 0
        limit = self._pack_bytes_limit()
        for tip in range(low + size - 1, last + 1, size):
            tip_id = ids[tip - low]
            if tx.query(d.has_pack, (tip_id,)):
                continue
            at = tip - size + 1 - low
            first_parent = ids[at - 1] if at > 0 else parent
            if sum(map(len, bodies[at : at + size])) + size + 1 > limit:  # these nodes are read from their rows
                tx.run(d.insert_pack, (tip_id, first_parent, tip - size + 1, 0, TOO_BIG_FORMAT, b"", b"", b""))
                continue
            pack = pack_nodes(ids[at : at + size], bodies[at : at + size])
            tx.run(d.insert_pack, (tip_id, first_parent, tip - size + 1, size, PACK_FORMAT, *pack))

    def _rows_above(
        self, tx: Tx, head: bytes | None, low: int, count: int
    ) -> tuple[bytes | None, list[bytes], list[bytes]] | None:
        """The ``count`` nodes of the chain ending at ``head`` from depth ``low`` up: the parent of the first,
        their ids and canonical bytes, oldest first; ``None`` when they cannot be read whole."""
        if head is None:
            return None
        rows = sorted(tx.query(self.dialect.chain_above, (head, low)), key=itemgetter(2))
        if len(rows) != count or [r[2] for r in rows] != list(range(low, low + count)) or _b(rows[-1][0]) != head:
            return None
        ids = [_b(r[0]) for r in rows]
        if [_ob(r[1]) for r in rows[1:]] != ids[:-1]:
            return None
        try:
            bodies = self._joined_bodies(tx, rows)
        except (ValueError, KeyError):
            return None
        return _ob(rows[0][1]), ids, bodies

    def _joined_bodies(self, tx: Tx, rows: list[tuple[Any, ...]]) -> list[bytes]:
        """The canonical bytes of node ``rows`` (their payloads put back). Raises ``ValueError`` for references
        that cannot be read, ``KeyError`` (the hash) for a payload that is missing."""
        bodies = _bytes_column(rows, 3)
        cuts = {i: read_refs(_b(r[4]), len(bodies[i])) for i, r in enumerate(rows) if r[4]}
        blobs = self._fetch_blobs(tx, {key for refs in cuts.values() for _, key in refs})
        for i, ref_list in cuts.items():
            bodies[i] = join_payloads(bodies[i], ref_list, blobs)
        return bodies

    def fork(self, session_id: str, *, at: str | None = None, new_id: str | None = None) -> SessionInfo:
        """A new session (``new_id``, default :func:`new_session_id`) whose head is the node ``at`` (hex; any
        node, by default the session's head). It shares every node with the original: nothing is copied.
        Forked at the head, it takes the session's state; at another node, a machine at rest holding that
        node's chain, with the session's settings. Raises ``SessionExists`` for a taken ``new_id``,
        ``SessionNotFound`` for an unknown session or node.

        A fork at rest whose last reply called tools that have no results (forked at that reply: no provider
        takes new input after it) gets them answered, as a second head move on top of the fork: each such
        call reads :data:`FORKED_HERE` (an error result), so the new session can be continued and the model
        learns its calls did not run.

        ``session_id`` names the session to fork.
        """
        sid = check_session_id(session_id)
        nid = check_session_id(new_id) if new_id is not None else new_session_id()
        target = _unhex(at)
        d = self.dialect
        now = time.time()
        with self._write() as tx:
            row = tx.query(d.get_session, (sid,))
            if not row:
                raise SessionNotFound(f"no session {sid!r}", session_id=sid)
            _, head, _, length, state_bytes, _, _ = row[0]
            head = _ob(head)
            state = _state(state_bytes, sid)
            if target is not None and target != head:
                found = tx.query(d.get_node, (target,))
                if not found:
                    raise SessionNotFound(f"no node {at}", session_id=sid)
                head, length = target, found[0][2] + 1
                state = SessionState.at_rest(length, state)
            if not tx.run(d.insert_session, (nid, 1, state.to_bytes(), now, now)):
                raise SessionExists(f"session {nid!r} already exists", session_id=nid)
            tx.run(d.update_session, (head, 1, length, state.to_bytes(), now, nid))
            tx.run(d.insert_head, (nid, 1, head, now, "fork"))
        info = SessionInfo(nid, _hex(head), 1, length, state, now, now)
        if head is None or state.in_flight or state.machine["state"] == MachineState.AWAITING_APPROVAL.value:
            return info  # a run in flight is cut back when loaded; a paused one is continued with its decisions
        answers = _answers_for_fork([n.message for n in self.chain(head.hex())])
        if answers is None:
            return info
        self._append(nid, [answers], info.head, "head", None, new_only=False, kind="fork", expected_revision=1)
        return self.info(nid)

    def import_session(self, session: Session, *, session_id: str | None = None) -> SessionInfo:
        """Store a :class:`~loopctl.session.Session` (a session file's contents) as a new session
        ``session_id`` (default: :func:`new_session_id`); raises ``SessionExists`` when the id is taken."""
        sid = check_session_id(session_id) if session_id is not None else new_session_id()
        state = SessionState.of_session(session)
        self._append(sid, list(session.machine.full_history()), None, None, state, new_only=True, kind="import")
        return self.info(sid)

    def import_file(self, path: str | os.PathLike[str], *, session_id: str | None = None) -> SessionInfo:
        """Import a session file (``loopctl-session``) or a conversation file (its messages become the
        history of a session at rest). The id defaults to the file's name without its suffix, with a random
        suffix when that is taken. Raises ``ConversationFileError`` naming the file for one that cannot be
        read (the file is never changed) and ``SessionExists`` for a taken ``session_id``.

        ``path`` is the file to read.
        """
        p = Path(path)
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise ConversationFileError(str(p), f"cannot read the file ({exc.strerror})") from None
        session = _read_session_file(data, str(p))
        if session_id is not None:
            return self.import_session(session, session_id=session_id)
        stem = p.stem.strip() or "imported"
        try:
            stem = check_session_id(stem[: _MAX_ID - 8])
        except ValueError:
            stem = "imported"
        try:
            return self.import_session(session, session_id=stem)
        except SessionExists:
            return self.import_session(session, session_id=f"{stem}-{secrets.token_hex(3)}")

    def export_file(self, session_id: str, path: str | os.PathLike[str]) -> None:
        """Write the session to ``path`` as a session file (``docs/wire-format.md``), atomically; a new file
        is private to its owner (0o600). ``loopctl run --resume FILE`` and :meth:`import_file` read it.

        ``session_id`` names the session to write.
        """
        self.load(session_id).to_session().save(path)

    # --- reading -------------------------------------------------------------------------------------------

    def info(self, session_id: str) -> SessionInfo:
        """The session's head and state, without its messages; raises ``SessionNotFound``.

        ``session_id`` names the session.
        """
        sid = check_session_id(session_id)
        with self._read() as tx:
            row = tx.query(self.dialect.get_session, (sid,))
        if not row:
            raise SessionNotFound(f"no session {sid!r}", session_id=sid)
        return _info(row[0])

    def sessions(self) -> list[SessionInfo]:
        """Every session, the most recently changed first."""
        with self._read() as tx:
            rows = tx.query(self.dialect.list_sessions)
        return [_info(r) for r in rows]

    def load(self, session_id: str) -> StoredSession:
        """The session with its messages up to the head. Raises ``SessionNotFound``, and ``StoreCorrupt``
        for a chain with a missing link, a message that does not parse, a payload that is missing or a state
        that cannot be read, naming the node (the hashes are not re-derived: that is :meth:`verify`).

        ``session_id`` names the session.
        """
        sid = check_session_id(session_id)
        with self._read() as tx:
            row = tx.query(self.dialect.get_session, (sid,))
            if not row:
                raise SessionNotFound(f"no session {sid!r}", session_id=sid)
            _, head, revision, length, state_bytes, created, updated = row[0]
            head = _ob(head)
            ids, _, messages = self._chain(tx, head, length, sid)
        state = _state(state_bytes, sid)
        if state.message_count != len(messages):
            raise StoreCorrupt(
                f"session {sid!r}: its state holds {state.message_count} messages but its chain {len(messages)}",
                session_id=sid,
            )
        return StoredSession(
            sid, _hex(head), revision, state, tuple(messages), tuple(map(bytes.hex, ids)), created, updated
        )

    def chain(self, node: str) -> list[Node]:
        """The chain ending at ``node`` (hex), oldest first: the conversation as it stood at that node.
        Raises ``SessionNotFound`` for an unknown node."""
        raw = _unhex(node)
        with self._read() as tx:
            found = tx.query(self.dialect.get_node, (raw,))
            if not found:
                raise SessionNotFound(f"no node {node}")
            ids, parents, messages = self._chain(tx, raw, found[0][2] + 1, None)
        return [Node(n.hex(), _hex(p), i, m) for i, (n, p, m) in enumerate(zip(ids, parents, messages, strict=True))]

    def heads(self, session_id: str) -> list[HeadMove]:
        """Every move of the session's head, oldest first: the chains it pointed to before (the one before a
        compaction, before a salvage...) stay readable with :meth:`chain`.

        ``session_id`` names the session.
        """
        sid = check_session_id(session_id)
        with self._read() as tx:
            rows = tx.query(self.dialect.heads, (sid,))
        if not rows:
            self.info(sid)  # raises SessionNotFound
        return [HeadMove(r[0], _hex(_ob(r[1])), float(r[2]), r[3]) for r in rows]

    def find_node(self, prefix: str) -> str:
        """The full id of the node whose hex id starts with ``prefix`` (at least 4 hex digits). Raises
        ``SessionNotFound`` when no node or several nodes match, ``ValueError`` for a prefix that is not
        hex."""
        p = prefix.strip().lower()
        if len(p) < 4 or len(p) > 64 or any(c not in "0123456789abcdef" for c in p):
            raise ValueError(f"invalid node id {prefix!r}: expected 4 to 64 of its hex digits (0-9, a-f)")
        low = bytes.fromhex((p + "0" * 64)[:64])
        high = bytes.fromhex((p + "f" * 64)[:64])
        with self._read() as tx:
            rows = tx.query(self.dialect.find_nodes, (low, high))
        if not rows:
            raise SessionNotFound(f"no node {prefix}")
        if len(rows) > 1:
            raise SessionNotFound(f"node id {prefix} is ambiguous: give more of its digits")
        return _b(rows[0][0]).hex()

    def _chain(
        self, tx: Tx, head: bytes | None, length: int, sid: str | None
    ) -> tuple[list[bytes], list[bytes | None], list[Message]]:
        """The chain ending at ``head`` (``length`` nodes), read in one query and checked link by link:
        its node ids, their parents and the messages, oldest first."""
        if head is None:
            return [], [], []
        with _collector_paused:
            return self._read_chain(tx, head, length, sid)

    def _read_chain(
        self, tx: Tx, head: bytes, length: int, sid: str | None
    ) -> tuple[list[bytes], list[bytes | None], list[Message]]:
        d = self.dialect
        where = f"session {sid!r}" if sid is not None else f"node {head.hex()[:12]}"
        # The newest nodes from their own rows, down to the last node of a pack; the packs below it; the
        # nodes below the lowest pack (a chain written before packs, or packs of another format) from their rows.
        tail = sorted(tx.query(d.chain_to_pack, (head,)), key=itemgetter(2))
        packs: list[tuple[Any, ...]] = []
        below: list[tuple[Any, ...]] = []
        if tail and tail[0][2] > 0 and _b(tail[-1][0]) == head:
            packs = tx.query(d.packs, (_b(tail[0][0]),))
            for pack in packs:  # whole numbers, but in a row edited by hand (SQLite keeps any type)
                if type(pack[2]) is not int or type(pack[3]) is not int:
                    raise _pack_unreadable(where, pack, sid, "its depth or length is not a whole number")
            packs.sort(key=itemgetter(2))
            if packs:
                tail = tail[1:]  # the pack holds its last node
                parent = _ob(packs[0][1])
            else:  # the walk stopped at a missing link, or at a pack that cannot be used: the rows, then
                parent = _ob(tail[0][1])
            if parent is not None:
                below = sorted(tx.query(d.chain, (parent,)), key=itemgetter(2))
        found = len(below) + sum(p[3] for p in packs) + len(tail)
        top = tail[-1][0] if tail else packs[-1][0] if packs else None
        if found != length or top is None or _b(top) != head:
            raise StoreCorrupt(
                f"{where}: the chain has {found} readable nodes of {length}; a link is missing "
                "(run verify for details)",
                session_id=sid,
                node=head.hex(),
            )
        # The links checked a column at a time (list comparisons run in C), the loop per node kept for naming
        # where a bad chain breaks. A packed node's depth and parent are its place in its pack.
        ids = _bytes_column(below, 0)
        depths = [r[2] for r in below]
        stored_parents = [r[1] for r in below]
        below_bodies = self._node_bodies(tx, below, 0, ids, where, sid)
        arrays: list[tuple[int, int, bytes]] = []  # each pack: its first message's index, its size, its array
        for pack in packs:
            pid, pparent, pdepth, plength, _, pids, psizes, pbodies = pack
            try:
                pack_ids = read_pack(plength, _b(pids), _b(psizes), _b(pbodies))
                if pack_ids[-1] != _b(pid):
                    raise ValueError(f"its last node is {pack_ids[-1].hex()[:12]}, not the one it is named by")
            except ValueError as exc:
                raise _pack_unreadable(where, pack, sid, str(exc)) from None
            arrays.append((len(ids), plength, _b(pbodies)))
            depths += range(pdepth, pdepth + plength)
            stored_parents += [pparent, *pack_ids[:-1]]
            ids += pack_ids
        tail_ids = _bytes_column(tail, 0)
        tail_bodies = self._node_bodies(tx, tail, len(ids), tail_ids, where, sid)
        ids += tail_ids
        depths += [r[2] for r in tail]
        stored_parents += [r[1] for r in tail]
        parents: list[bytes | None] = [None, *ids[:-1]]
        if depths != list(range(len(ids))) or (
            stored_parents != parents and [_ob(p) for p in stored_parents] != parents
        ):
            for i, (nid, parent, depth) in enumerate(zip(ids, stored_parents, depths, strict=True)):
                if depth != i or _ob(parent) != parents[i]:
                    raise StoreCorrupt(f"{where}: the chain is broken at message {i}", session_id=sid, node=nid.hex())
        messages = _decode(below_bodies, 0, ids, where, sid)
        for (first, count, array), pack in zip(arrays, packs, strict=True):
            messages += _decode_pack(array, count, first, ids, where, sid, pack)
        messages += _decode(tail_bodies, len(ids) - len(tail_bodies), ids, where, sid)
        return ids, parents, messages

    def _node_bodies(
        self, tx: Tx, rows: list[tuple[Any, ...]], first: int, ids: list[bytes], where: str, sid: str | None
    ) -> list[bytes]:
        """The canonical bytes of the node ``rows`` (messages ``first`` on, of ``ids``), their payloads put back;
        ``StoreCorrupt`` naming the node whose references cannot be read or whose payload is missing."""
        bodies = _bytes_column(rows, 3)
        cuts: dict[int, list[tuple[int, bytes]]] = {}  # the payload references of the nodes that have any
        wanted: set[bytes] = set()
        for i in [i for i, r in enumerate(rows) if r[4]]:
            try:
                ref_list = read_refs(_b(rows[i][4]), len(bodies[i]))
            except ValueError as exc:
                raise _unreadable(where, first + i, ids[i], sid, str(exc)) from None
            wanted.update(key for _, key in ref_list)
            cuts[i] = ref_list
        blobs = self._fetch_blobs(tx, wanted)
        for i, ref_list in cuts.items():
            try:
                bodies[i] = join_payloads(bodies[i], ref_list, blobs)
            except KeyError as exc:
                what = f"a payload is missing ({_b(exc.args[0]).hex()[:12]})"
                raise _unreadable(where, first + i, ids[i], sid, what) from None
        return bodies

    def _blobs(self, tx: Tx, rows: Iterable[tuple[Any, ...]]) -> dict[bytes, bytes]:
        """The blobs the node ``rows`` refer to (a row whose references cannot be read is skipped: the caller
        reports it)."""
        wanted: set[bytes] = set()
        for r in rows:
            if r[4]:
                with contextlib.suppress(ValueError):
                    wanted.update(h for _, h in read_refs(_b(r[4]), len(_b(r[3]))))
        return self._fetch_blobs(tx, wanted)

    def _fetch_blobs(self, tx: Tx, wanted: Iterable[bytes]) -> dict[bytes, bytes]:
        out: dict[bytes, bytes] = {}
        keys = sorted(wanted)
        for i in range(0, len(keys), _BLOB_BATCH):
            sql, params = self.dialect.blobs_query(keys[i : i + _BLOB_BATCH])
            for h, data in tx.query(sql, params):
                out[_b(h)] = _b(data)
        return out

    # --- blobs ---------------------------------------------------------------------------------------------

    def put_blobs(self, blobs: Mapping[bytes, bytes]) -> None:
        """Store each blob of ``blobs`` under its key, the SHA-256 of its bytes (``chain.blob_hash``); a key
        already stored is left as it is. For other content-addressed data kept beside the sessions (the
        Temporal claim check of ``loopctl.durable.claimcheck``). Raises ``ValueError`` for a key that is not
        its blob's hash, before anything is written."""
        for key, data in blobs.items():
            if blob_hash(data) != key:
                raise ValueError(f"blob key {key.hex()} is not the SHA-256 of its {len(data)} bytes")
        if blobs:
            with self._write() as tx:
                tx.run_many(self.dialect.insert_blob, list(blobs.items()))

    def get_blobs(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        """The blobs of ``keys`` the store has (a key it does not have is left out)."""
        wanted = sorted(set(keys))
        out: dict[bytes, bytes] = {}
        with self._read() as tx:
            for i in range(0, len(wanted), _BLOB_BATCH):
                sql, params = self.dialect.blobs_query(wanted[i : i + _BLOB_BATCH])
                for h, data in tx.query(sql, params):
                    out[_b(h)] = _b(data)
        return out

    # --- verification --------------------------------------------------------------------------------------

    def verify(self, session_id: str) -> list[StoreProblem]:
        """Re-derive every hash of the session: each node of its current chain and of every chain its head
        pointed to before (from :meth:`heads`), and each blob they use, and compare the session's row with its
        head log (a head moved by hand disagrees with the log's last entry). Returns the problems found, each
        naming its node: empty when the session is sound. Raises ``SessionNotFound``.

        ``session_id`` names the session.
        """
        sid = check_session_id(session_id)
        problems: list[StoreProblem] = []
        with self._read() as tx:
            row = tx.query(self.dialect.get_session, (sid,))
            if not row:
                raise SessionNotFound(f"no session {sid!r}", session_id=sid)
            _, head, revision, length, state_bytes, _, _ = row[0]
            head = _ob(head)
            log = tx.query(self.dialect.heads, (sid,))
            problems += _check_head_log(sid, head, revision, log)
            heads = [head] + [_ob(r[1]) for r in log]
            seen: dict[bytes, int] = {}  # the nodes checked, and their depths
            for h in dict.fromkeys(heads):
                # A past head already walked (an ancestor of a chain checked before it: every head of a session
                # that only grew) had its whole chain checked with it; walking it again read the chain back once
                # per save, quadratic in the session's length.
                if h is not None and h not in seen:
                    problems += self._verify_chain(tx, sid, h, seen, length if h == head else None)
            problems += self._verify_packs(tx, sid, seen)
        try:
            state = _state(state_bytes, sid)
            if state.message_count != length:
                problems.append(
                    StoreProblem(sid, None, None, f"its state holds {state.message_count} messages, its chain {length}")
                )
        except StoreCorrupt as exc:
            problems.append(StoreProblem(sid, None, None, exc.message))
        return problems

    def _verify_chain(
        self, tx: Tx, sid: str, head: bytes, seen: dict[bytes, int], length: int | None
    ) -> list[StoreProblem]:
        """Problems of the chain ending at ``head`` (``length`` nodes when it is the current head), walking the
        parent links as stored and stopping at a node already checked (in ``seen``, which gets each node
        walked, with its depth)."""
        rows = {_b(r[0]): r for r in tx.query(self.dialect.walk, (head,))}
        blobs = self._blobs(tx, rows.values())
        problems: list[StoreProblem] = []
        walked: set[bytes] = set()
        at: bytes | None = head
        child: bytes | None = None
        child_depth: int | None = None
        while at is not None and at not in seen:
            if at in walked:
                problems.append(StoreProblem(sid, at.hex(), None, "its chain loops back to it"))
                break
            walked.add(at)
            r = rows.get(at)
            if r is None:
                what = "the session's head" if child is None else f"the parent of node {child.hex()[:12]}"
                problems.append(StoreProblem(sid, at.hex(), None, f"{what} is missing from the nodes"))
                break
            _, parent, depth, body, refs = r
            seen[at] = depth
            parent, body = _ob(parent), _b(body)
            if child is None and length is not None and depth != length - 1:
                problems.append(StoreProblem(sid, at.hex(), depth, f"the head is message {depth}, not {length - 1}"))
            if child_depth is not None and depth != child_depth - 1:
                problems.append(StoreProblem(sid, at.hex(), depth, f"its depth is {depth}, its child's {child_depth}"))
            if parent is None and depth != 0:
                problems.append(StoreProblem(sid, at.hex(), depth, f"it has no parent but is message {depth}"))
            problems += self._verify_node(sid, at, parent, depth, body, refs, blobs)
            child, child_depth, at = at, depth, parent
        return problems

    def _verify_packs(self, tx: Tx, sid: str, nodes: dict[bytes, int]) -> list[StoreProblem]:
        """Problems of the packs that end at one of ``nodes`` (the nodes of the session's chains, and their
        depths): each packed node's id re-derived from its parent's and its bytes, as the node's own row is, and
        the pack's place in the chain checked against its last node's. A pack of another format than this
        release's is not read by its loads either, and is left alone."""
        problems: list[StoreProblem] = []
        keys = sorted(nodes)
        for i in range(0, len(keys), _BLOB_BATCH):
            sql, params = self.dialect.in_query(self.dialect.packs_in, keys[i : i + _BLOB_BATCH])
            for pid, parent, depth, length, fmt, ids, sizes, bodies in tx.query(sql, params):
                if fmt == PACK_FORMAT:
                    tip = nodes[_b(pid)]
                    problems += _verify_pack(
                        sid, _b(pid), tip, _ob(parent), depth, length, _b(ids), _b(sizes), _b(bodies)
                    )
        return problems

    @staticmethod
    def _verify_node(
        sid: str, nid: bytes, parent: bytes | None, depth: int, body: bytes, refs: Any, blobs: dict[bytes, bytes]
    ) -> list[StoreProblem]:
        try:
            ref_list = read_refs(_ob(refs) if refs else None, len(body))
        except ValueError as exc:
            return [StoreProblem(sid, nid.hex(), depth, str(exc))]
        problems = []
        for _, key in ref_list:
            data = blobs.get(key)
            if data is None:
                problems.append(StoreProblem(sid, nid.hex(), depth, f"its payload {key.hex()[:12]} is missing"))
            elif blob_hash(data) != key:
                problems.append(
                    StoreProblem(sid, nid.hex(), depth, f"its payload {key.hex()[:12]} does not match its hash")
                )
        if problems:
            return problems
        computed = node_id(parent, join_payloads(body, ref_list, blobs))
        if computed != nid:
            return [
                StoreProblem(
                    sid,
                    nid.hex(),
                    depth,
                    f"its content does not match its id (it hashes to {computed.hex()[:12]}): the row was changed "
                    "after it was written",
                )
            ]
        return []

    # --- async twins ---------------------------------------------------------------------------------------

    async def acreate(self, session_id: str | None = None, *, state: SessionState | None = None) -> SessionInfo:
        """:meth:`create`, off the event loop."""
        return await asyncio.to_thread(self.create, session_id, state=state)

    async def aappend(
        self,
        session_id: str,
        messages: Iterable[Message],
        *,
        expected_head: str | None,
        parent: str | Literal["head"] | None = "head",
        state: SessionState | None = None,
        expected_revision: int | None = None,
    ) -> Appended:
        """:meth:`append`, off the event loop."""
        msgs = list(messages)
        return await asyncio.to_thread(
            self.append,
            session_id,
            msgs,
            expected_head=expected_head,
            parent=parent,
            state=state,
            expected_revision=expected_revision,
        )

    async def afork(self, session_id: str, *, at: str | None = None, new_id: str | None = None) -> SessionInfo:
        """:meth:`fork`, off the event loop."""
        return await asyncio.to_thread(self.fork, session_id, at=at, new_id=new_id)

    async def aload(self, session_id: str) -> StoredSession:
        """:meth:`load`, off the event loop."""
        return await asyncio.to_thread(self.load, session_id)

    async def ainfo(self, session_id: str) -> SessionInfo:
        """:meth:`info`, off the event loop."""
        return await asyncio.to_thread(self.info, session_id)

    async def asessions(self) -> list[SessionInfo]:
        """:meth:`sessions`, off the event loop."""
        return await asyncio.to_thread(self.sessions)

    async def achain(self, node: str) -> list[Node]:
        """:meth:`chain`, off the event loop."""
        return await asyncio.to_thread(self.chain, node)

    async def aheads(self, session_id: str) -> list[HeadMove]:
        """:meth:`heads`, off the event loop."""
        return await asyncio.to_thread(self.heads, session_id)

    async def averify(self, session_id: str) -> list[StoreProblem]:
        """:meth:`verify`, off the event loop."""
        return await asyncio.to_thread(self.verify, session_id)

    async def aimport_file(self, path: str | os.PathLike[str], *, session_id: str | None = None) -> SessionInfo:
        """:meth:`import_file`, off the event loop."""
        return await asyncio.to_thread(self.import_file, path, session_id=session_id)

    async def aexport_file(self, session_id: str, path: str | os.PathLike[str]) -> None:
        """:meth:`export_file`, off the event loop."""
        await asyncio.to_thread(self.export_file, session_id, path)

    async def aput_blobs(self, blobs: Mapping[bytes, bytes]) -> None:
        """:meth:`put_blobs`, off the event loop."""
        await asyncio.to_thread(self.put_blobs, dict(blobs))

    async def aget_blobs(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        """:meth:`get_blobs`, off the event loop."""
        return await asyncio.to_thread(self.get_blobs, list(keys))

    async def aclose(self) -> None:
        """:meth:`close`, off the event loop."""
        await asyncio.to_thread(self.close)


def _check_head_log(sid: str, head: bytes | None, revision: int, log: Sequence[tuple[Any, ...]]) -> list[StoreProblem]:
    """Problems of the session row against its head log (``log``: rows ``(revision, head, at, kind)``, oldest
    first): every write moves both in one transaction, so the row's revision is the log's last and its head
    that entry's head. A row moved by hand (a head set back to drop the last messages) disagrees."""
    changed = "the row was changed after it was written"
    if not log:
        return [StoreProblem(sid, _hex(head), None, f"its head log is empty: {changed}")]
    last_revision, last_head = log[-1][0], _ob(log[-1][1])
    if revision != last_revision:
        return [
            StoreProblem(
                sid,
                None,
                None,
                f"its row is at revision {revision} but its head log ends at revision {last_revision}: {changed}",
            )
        ]
    if head != last_head:
        logged = "no node" if last_head is None else f"node {last_head.hex()[:12]}"
        return [
            StoreProblem(
                sid,
                _hex(head),
                None,
                f"its head is not the one its head log last recorded (revision {last_revision}, {logged}): {changed}",
            )
        ]
    return []


def _verify_pack(
    sid: str,
    pid: bytes,
    tip: int,
    parent: bytes | None,
    depth: Any,
    length: Any,
    ids: bytes,
    sizes: bytes,
    bodies: bytes,
) -> list[StoreProblem]:
    """Problems of one pack (named by its last node ``pid``, message ``tip`` of its chain): a place in the chain
    that is not its last node's, a layout that cannot be read, or a packed node whose id does not derive from its
    parent's and its bytes."""
    if type(depth) is not int or type(length) is not int:
        return [
            StoreProblem(sid, pid.hex(), tip, f"its pack ({_span(depth, length)}) cannot be read: the row was changed")
        ]
    where = f"its copy in the pack of {_span(depth, length)}"
    if depth + length - 1 != tip:
        return [
            StoreProblem(
                sid, pid.hex(), tip, f"the pack of {_span(depth, length)} ends at message {tip}: the row was changed"
            )
        ]
    try:
        pack_ids, pack_bodies = unpack_nodes(length, ids, sizes, bodies)
    except ValueError as exc:
        return [StoreProblem(sid, pid.hex(), depth + length - 1, f"{where} cannot be read: {exc}")]
    if pack_ids[-1] != pid:
        return [StoreProblem(sid, pid.hex(), depth + length - 1, f"{where} ends at another node: the row was changed")]
    prev = parent
    for i, (nid, body) in enumerate(zip(pack_ids, pack_bodies, strict=True)):
        computed = node_id(prev, body)
        if computed != nid:
            return [
                StoreProblem(
                    sid,
                    nid.hex(),
                    depth + i,
                    f"{where} does not match its id (it hashes to {computed.hex()[:12]}): the row was changed "
                    "after it was written",
                )
            ]
        prev = nid
    return []


def _answers_for_fork(messages: Sequence[Message]) -> Message | None:
    """The message answering the calls of the last reply of ``messages`` that have no result, each with
    :data:`FORKED_HERE`; ``None`` when there are none, or when a message other than tool results follows that
    reply (results after new input are refused by some providers: such a head is cut back to its coherent
    prefix when a run continues it)."""
    calls = unanswered_calls(messages)
    if not calls:
        return None
    for m in reversed(messages):
        if m.role is Role.ASSISTANT:
            break
        if not all(isinstance(p, ToolResultPart) for p in m.parts):
            return None
    return Message(
        role=Role.USER,
        parts=tuple(ToolResultPart(call_id=c.id, name=c.name, output=FORKED_HERE, is_error=True) for c in calls),
    )


def _span(depth: Any, length: Any) -> str:
    """The messages a pack row says it holds (``depth`` and ``length`` as stored: whole numbers but in a row
    edited by hand)."""
    if type(depth) is int and type(length) is int:
        return f"messages {depth} to {depth + length - 1}"
    return f"messages from {depth!r}, {length!r} of them"


def _pack_unreadable(where: str, pack: tuple[Any, ...], sid: str | None, what: str) -> StoreCorrupt:
    pid = _b(pack[0])
    return StoreCorrupt(
        f"{where}: the pack of {_span(pack[2], pack[3])} (ending at node {pid.hex()[:12]}) cannot be read: {what}",
        session_id=sid,
        node=pid.hex(),
    )


def _unreadable(where: str, index: int, nid: bytes, sid: str | None, what: str) -> StoreCorrupt:
    return StoreCorrupt(
        f"{where}: message {index} (node {nid.hex()[:12]}) cannot be read: {what}", session_id=sid, node=nid.hex()
    )


def _state(data: Any, sid: str) -> SessionState:
    try:
        return SessionState.from_bytes(_b(data), source=f"session {sid!r} state")
    except ConversationFileError as exc:
        raise StoreCorrupt(str(exc), session_id=sid) from None


def _info(row: tuple[Any, ...]) -> SessionInfo:
    sid, head, revision, length, state_bytes, created, updated = row
    try:
        state: SessionState | None = _state(state_bytes, sid)
    except StoreCorrupt:
        state = None
    return SessionInfo(sid, _hex(_ob(head)), revision, length, state, created, updated)


def _read_session_file(data: bytes, source: str) -> Session:
    """A session file's contents, or a conversation file's messages as a session at rest."""
    from loopctl.engine.machine import LoopMachine
    from loopctl.message import loads_conversation

    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and doc.get("kind") == "loopctl-session":
        return Session.from_bytes(data, source=source)
    return Session(LoopMachine(loads_conversation(data, source=source)))


@contextlib.contextmanager
def translate_errors(kind: type[BaseException] | tuple[type[BaseException], ...], what: str) -> Iterator[None]:
    """Re-raise a backend's own errors (``kind``) as ``StoreError`` naming ``what`` failed."""
    try:
        yield
    except StoreError:
        raise
    except kind as exc:
        raise StoreError(f"{what}: {exc}") from exc
