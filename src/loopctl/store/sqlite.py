"""The embedded store: one SQLite file (standard library ``sqlite3``), the CLI's default.

The database runs in WAL mode (readers never wait for the writer; https://www.sqlite.org/wal.html) with a
busy timeout, and every write is one ``BEGIN IMMEDIATE`` transaction: it takes the write lock before it reads
the head it compares, so two writers, in two threads or two processes, can never both see the same head
(https://www.sqlite.org/lang_transaction.html). A transaction interrupted by a crash, even ``kill -9`` in
the middle of an append, is rolled back when the database is next opened: the previous head and its chain
stay exactly as they were. ``synchronous`` stays at SQLite's default, ``FULL``: a committed append
survives a power cut too.

Each thread uses its own connection (``sqlite3`` connections are not shared across threads); the async
methods run on ``asyncio.to_thread``'s workers.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from loopctl._fs import make_private_folders
from loopctl.errors import StoreError
from loopctl.store.base import Dialect, SessionStore, Tx, translate_errors
from loopctl.store.chain import BLOB_THRESHOLD, PACK_FORMAT, PACK_SIZE

__all__ = ["DEFAULT_BUSY_TIMEOUT", "SQLiteStore"]

DEFAULT_BUSY_TIMEOUT = 30.0
"""Seconds a writer waits for another writer's transaction before failing with ``StoreError``."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS loopctl_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS loopctl_nodes (
    id BLOB NOT NULL UNIQUE,
    parent BLOB,
    depth INTEGER NOT NULL,
    body BLOB NOT NULL,
    refs BLOB
);
CREATE TABLE IF NOT EXISTS loopctl_blobs (hash BLOB PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS loopctl_packs (
    id BLOB PRIMARY KEY,
    parent BLOB,
    depth INTEGER NOT NULL,
    length INTEGER NOT NULL,
    format INTEGER NOT NULL,
    ids BLOB NOT NULL,
    sizes BLOB NOT NULL,
    bodies BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS loopctl_sessions (
    id TEXT PRIMARY KEY,
    head BLOB,
    revision INTEGER NOT NULL,
    length INTEGER NOT NULL DEFAULT 0,
    state BLOB NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS loopctl_heads (
    session_id TEXT NOT NULL,
    revision INTEGER NOT NULL,
    head BLOB,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    PRIMARY KEY (session_id, revision)
);
"""

_SESSION_COLUMNS = "id, head, revision, length, state, created_at, updated_at"
_PACK_COLUMNS = "k.id, k.parent, k.depth, k.length, k.format, k.ids, k.sizes, k.bodies"

DIALECT = Dialect(
    get_session=f"SELECT {_SESSION_COLUMNS} FROM loopctl_sessions WHERE id = ?",
    lock_session=f"SELECT {_SESSION_COLUMNS} FROM loopctl_sessions WHERE id = ?",  # BEGIN IMMEDIATE locks
    insert_session="INSERT INTO loopctl_sessions (id, head, revision, length, state, created_at, updated_at) "
    "VALUES (?, NULL, ?, 0, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
    update_session="UPDATE loopctl_sessions SET head = ?, revision = ?, length = ?, state = ?, updated_at = ? "
    "WHERE id = ?",
    insert_node="INSERT INTO loopctl_nodes (id, parent, depth, body, refs) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO NOTHING",
    insert_blob="INSERT INTO loopctl_blobs (hash, data) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING",
    insert_head="INSERT INTO loopctl_heads (session_id, revision, head, at, kind) VALUES (?, ?, ?, ?, ?)",
    get_node="SELECT id, parent, depth, body, refs FROM loopctl_nodes WHERE id = ?",
    chain="WITH RECURSIVE c(id, parent, depth, body, refs) AS ("
    "SELECT id, parent, depth, body, refs FROM loopctl_nodes WHERE id = ? "
    "UNION ALL SELECT n.id, n.parent, n.depth, n.body, n.refs FROM loopctl_nodes n "
    "JOIN c ON n.id = c.parent AND n.depth = c.depth - 1) "
    "SELECT id, parent, depth, body, refs FROM c",
    walk="WITH RECURSIVE c(id, parent, depth, body, refs) AS ("
    "SELECT id, parent, depth, body, refs FROM loopctl_nodes WHERE id = ? "
    "UNION SELECT n.id, n.parent, n.depth, n.body, n.refs FROM loopctl_nodes n JOIN c ON n.id = c.parent) "
    "SELECT id, parent, depth, body, refs FROM c",
    chain_to_pack="WITH RECURSIVE c(id, parent, depth, body, refs) AS ("
    "SELECT id, parent, depth, body, refs FROM loopctl_nodes WHERE id = ? "
    "UNION ALL SELECT n.id, n.parent, n.depth, n.body, n.refs FROM loopctl_nodes n "
    "JOIN c ON n.id = c.parent AND n.depth = c.depth - 1 "
    f"WHERE NOT EXISTS (SELECT 1 FROM loopctl_packs p WHERE p.id = c.id AND p.format = {PACK_FORMAT})) "
    "SELECT id, parent, depth, body, refs FROM c",
    chain_above="WITH RECURSIVE c(id, parent, depth, body, refs) AS ("
    "SELECT id, parent, depth, body, refs FROM loopctl_nodes WHERE id = ? "
    "UNION ALL SELECT n.id, n.parent, n.depth, n.body, n.refs FROM loopctl_nodes n "
    "JOIN c ON n.id = c.parent AND n.depth = c.depth - 1 AND n.depth >= ?) "
    "SELECT id, parent, depth, body, refs FROM c",
    packs="WITH RECURSIVE p(id, parent, depth) AS ("
    f"SELECT id, parent, depth FROM loopctl_packs WHERE id = ? AND format = {PACK_FORMAT} AND length > 0 "
    "UNION ALL SELECT k.id, k.parent, k.depth FROM loopctl_packs k "
    "JOIN p ON k.id = p.parent AND k.depth + k.length = p.depth "
    f"WHERE k.format = {PACK_FORMAT} AND k.length > 0) "
    f"SELECT {_PACK_COLUMNS} FROM p JOIN loopctl_packs k ON k.id = p.id",
    has_pack="SELECT 1 FROM loopctl_packs WHERE id = ?",
    insert_pack="INSERT INTO loopctl_packs (id, parent, depth, length, format, ids, sizes, bodies) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
    packs_in="SELECT id, parent, depth, length, format, ids, sizes, bodies FROM loopctl_packs WHERE id IN ({in})",
    find_nodes="SELECT id FROM loopctl_nodes WHERE id BETWEEN ? AND ? LIMIT 2",
    list_sessions=f"SELECT {_SESSION_COLUMNS} FROM loopctl_sessions ORDER BY updated_at DESC, id",
    heads="SELECT revision, head, at, kind FROM loopctl_heads WHERE session_id = ? ORDER BY revision",
    blobs="SELECT hash, data FROM loopctl_blobs WHERE hash IN ({in})",
    param="?",
)


class _Tx:
    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._conn.execute(sql, params).fetchall()

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._conn.execute(sql, params).rowcount

    def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self._conn.executemany(sql, rows)


def _roll_back(conn: sqlite3.Connection) -> None:
    """End the transaction a failure interrupted, keeping the failure as the error reported. SQLite may have
    rolled it back itself (a full disk, an I/O error: https://www.sqlite.org/lang_transaction.html, "Response
    To Errors Within A Transaction"), and a failed ``COMMIT`` leaves it open: roll back only what is still
    open, and never let the rollback's own error replace the first."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


class SQLiteStore(SessionStore):
    """Sessions in the SQLite file at ``path`` (created with its missing folders when missing, private to its
    owner, as it holds whole conversations: the file 0o600, the folders 0o700).

    ``busy_timeout``: seconds a write waits for another process's write to finish before failing with
    ``StoreError``. ``blob_threshold``: strings of at least this many bytes (as JSON) are stored once by
    content hash. ``pack_size``: a chain's nodes are also copied, that many at a time, into packs that a load
    reads in one row each (``0``: no packs written; ``docs/sessions.md``, "Packs"). Opening a database whose
    schema is newer than this release reads raises ``StoreError``.
    """

    dialect = DIALECT

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        blob_threshold: int = BLOB_THRESHOLD,
        pack_size: int = PACK_SIZE,
    ) -> None:
        if str(path) in ("", ":memory:") or str(path).startswith("file:"):
            raise ValueError("SQLiteStore needs a file path (each thread opens its own connection to it)")
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self.blob_threshold = blob_threshold
        self.pack_size = pack_size
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._closed = False
        try:
            make_private_folders(self.path.parent)
            if not self.path.exists():
                with contextlib.suppress(FileExistsError):
                    os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError as exc:
            raise StoreError(f"cannot create the session database {str(self.path)!r} ({exc.strerror})") from None
        self._init_schema()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    def _pack_bytes_limit(self) -> int:
        # The most bytes SQLite takes in one value on this connection (SQLITE_LIMIT_LENGTH, 1 GB unless the
        # library was built or set otherwise: https://www.sqlite.org/limits.html), less a margin.
        return min(self.max_pack_bytes, self._conn().getlimit(sqlite3.SQLITE_LIMIT_LENGTH) - 1024)

    # --- connections ---------------------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            with translate_errors(sqlite3.Error, f"cannot open the session database {str(self.path)!r}"):
                conn = sqlite3.connect(
                    self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
                )
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[Tx]:
        conn = self._conn()
        with translate_errors(sqlite3.Error, f"writing to {str(self.path)!r} failed"):
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield _Tx(conn)
                conn.execute("COMMIT")
            except BaseException:
                _roll_back(conn)
                raise

    @contextlib.contextmanager
    def _read(self) -> Iterator[Tx]:
        conn = self._conn()
        with translate_errors(sqlite3.Error, f"reading {str(self.path)!r} failed"):
            conn.execute("BEGIN")  # one snapshot for all the reads of the block
            try:
                yield _Tx(conn)
            except BaseException:
                _roll_back(conn)
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close every connection the store opened (in any thread)."""
        self._closed = True
        with self._lock:
            conns, self._connections = self._connections, []
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    # --- schema --------------------------------------------------------------------------------------------

    def _init_schema(self) -> None:
        conn = self._conn()
        deadline = time.monotonic() + self.busy_timeout
        while True:  # switching to WAL needs a moment alone with the file; other openers may hold it
            try:
                conn.execute("PRAGMA journal_mode=WAL").fetchall()
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise StoreError(f"cannot open the session database {str(self.path)!r}: {exc}") from exc
                time.sleep(0.01)
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{str(self.path)!r} is not a session database ({exc})") from exc
        with self._write() as tx:
            tables = {r[0] for r in tx.query("SELECT name FROM sqlite_master WHERE type = 'table'")}
            # One statement at a time inside the transaction (executescript would commit first).
            statements = [st for st in _SCHEMA.split(";") if st.strip()]
            self._ensure_schema(tx, tables, statements, repr(str(self.path)))
