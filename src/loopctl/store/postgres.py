"""The server store: PostgreSQL through psycopg 3 and a ``psycopg_pool`` connection pool, for sessions shared
by many workers on many machines (extra ``pyloopctl[postgres]``).

An append locks its session's row (``SELECT ... FOR UPDATE``) before it compares the head, so writers of one
session run one after the other, while writers of different sessions never wait for each other
(https://www.postgresql.org/docs/current/explicit-locking.html#LOCKING-ROWS). Nodes and blobs are inserted
with ``ON CONFLICT DO NOTHING``: two sessions that write the same message share its row. A transaction cut
off by a crash is rolled back by the server: the previous head stays. The schema is created on first use
under a transaction-level advisory lock, so many workers may start at once.

The blocking methods use a ``psycopg_pool.ConnectionPool``; their async twins run them on worker threads
(``SessionStore``), so one store serves any number of event loops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from loopctl.errors import StoreError
from loopctl.store.base import Dialect, SessionStore, Tx, translate_errors
from loopctl.store.chain import BLOB_THRESHOLD, PACK_FORMAT, PACK_SIZE

try:
    import psycopg
    import psycopg_pool
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError("PostgresStore needs psycopg 3 and psycopg_pool: pip install 'pyloopctl[postgres]'") from exc

__all__ = ["PostgresStore"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS loopctl_meta (key text PRIMARY KEY, value text NOT NULL)",
    "CREATE TABLE IF NOT EXISTS loopctl_nodes (id bytea PRIMARY KEY, parent bytea, depth integer NOT NULL, "
    "body bytea NOT NULL, refs bytea)",
    "CREATE TABLE IF NOT EXISTS loopctl_blobs (hash bytea PRIMARY KEY, data bytea NOT NULL)",
    "CREATE TABLE IF NOT EXISTS loopctl_packs (id bytea PRIMARY KEY, parent bytea, depth integer NOT NULL, "
    "length integer NOT NULL, format integer NOT NULL, ids bytea NOT NULL, sizes bytea NOT NULL, "
    "bodies bytea NOT NULL)",
    "CREATE TABLE IF NOT EXISTS loopctl_sessions (id text PRIMARY KEY, head bytea, revision bigint NOT NULL, "
    "length integer NOT NULL DEFAULT 0, state bytea NOT NULL, created_at double precision NOT NULL, "
    "updated_at double precision NOT NULL)",
    "CREATE TABLE IF NOT EXISTS loopctl_heads (session_id text NOT NULL, revision bigint NOT NULL, head bytea, "
    "at double precision NOT NULL, kind text NOT NULL, PRIMARY KEY (session_id, revision))",
)

_TABLES = ("loopctl_meta", "loopctl_nodes", "loopctl_blobs", "loopctl_packs", "loopctl_sessions", "loopctl_heads")

_SESSION_COLUMNS = "id, head, revision, length, state, created_at, updated_at"
_PACK_COLUMNS = "k.id, k.parent, k.depth, k.length, k.format, k.ids, k.sizes, k.bodies"

DIALECT = Dialect(
    get_session=f"SELECT {_SESSION_COLUMNS} FROM loopctl_sessions WHERE id = %s",
    lock_session=f"SELECT {_SESSION_COLUMNS} FROM loopctl_sessions WHERE id = %s FOR UPDATE",
    insert_session="INSERT INTO loopctl_sessions (id, head, revision, length, state, created_at, updated_at) "
    "VALUES (%s, NULL, %s, 0, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
    update_session="UPDATE loopctl_sessions SET head = %s, revision = %s, length = %s, state = %s, updated_at = %s "
    "WHERE id = %s",
    insert_node="INSERT INTO loopctl_nodes (id, parent, depth, body, refs) VALUES (%s, %s, %s, %s, %s) "
    "ON CONFLICT (id) DO NOTHING",
    insert_blob="INSERT INTO loopctl_blobs (hash, data) VALUES (%s, %s) ON CONFLICT (hash) DO NOTHING",
    insert_head="INSERT INTO loopctl_heads (session_id, revision, head, at, kind) VALUES (%s, %s, %s, %s, %s)",
    get_node="SELECT id, parent, depth, body, refs FROM loopctl_nodes WHERE id = %s",
    chain="WITH RECURSIVE c(id, parent, depth, body, refs) AS ("
    "SELECT id, parent, depth, body, refs FROM loopctl_nodes WHERE id = %s "
    "UNION ALL SELECT n.id, n.parent, n.depth, n.body, n.refs FROM loopctl_nodes n "
    "JOIN c ON n.id = c.parent AND n.depth = c.depth - 1) "
    "SELECT id, parent, depth, body, refs FROM c",
    walk="WITH RECURSIVE c(id, parent, depth, body, refs) AS ("
    "SELECT id, parent, depth, body, refs FROM loopctl_nodes WHERE id = %s "
    "UNION SELECT n.id, n.parent, n.depth, n.body, n.refs FROM loopctl_nodes n JOIN c ON n.id = c.parent) "
    "SELECT id, parent, depth, body, refs FROM c",
    chain_to_pack="WITH RECURSIVE c(id, parent, depth, body, refs) AS ("
    "SELECT id, parent, depth, body, refs FROM loopctl_nodes WHERE id = %s "
    "UNION ALL SELECT n.id, n.parent, n.depth, n.body, n.refs FROM loopctl_nodes n "
    "JOIN c ON n.id = c.parent AND n.depth = c.depth - 1 "
    f"WHERE NOT EXISTS (SELECT 1 FROM loopctl_packs p WHERE p.id = c.id AND p.format = {PACK_FORMAT})) "
    "SELECT id, parent, depth, body, refs FROM c",
    chain_above="WITH RECURSIVE c(id, parent, depth, body, refs) AS ("
    "SELECT id, parent, depth, body, refs FROM loopctl_nodes WHERE id = %s "
    "UNION ALL SELECT n.id, n.parent, n.depth, n.body, n.refs FROM loopctl_nodes n "
    "JOIN c ON n.id = c.parent AND n.depth = c.depth - 1 AND n.depth >= %s) "
    "SELECT id, parent, depth, body, refs FROM c",
    packs="WITH RECURSIVE p(id, parent, depth) AS ("
    f"SELECT id, parent, depth FROM loopctl_packs WHERE id = %s AND format = {PACK_FORMAT} AND length > 0 "
    "UNION ALL SELECT k.id, k.parent, k.depth FROM loopctl_packs k "
    "JOIN p ON k.id = p.parent AND k.depth + k.length = p.depth "
    f"WHERE k.format = {PACK_FORMAT} AND k.length > 0) "
    f"SELECT {_PACK_COLUMNS} FROM p JOIN loopctl_packs k ON k.id = p.id",
    has_pack="SELECT 1 FROM loopctl_packs WHERE id = %s",
    insert_pack="INSERT INTO loopctl_packs (id, parent, depth, length, format, ids, sizes, bodies) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
    packs_in="SELECT id, parent, depth, length, format, ids, sizes, bodies FROM loopctl_packs WHERE id = ANY(%s)",
    find_nodes="SELECT id FROM loopctl_nodes WHERE id BETWEEN %s AND %s LIMIT 2",
    list_sessions=f"SELECT {_SESSION_COLUMNS} FROM loopctl_sessions ORDER BY updated_at DESC, id",
    heads="SELECT revision, head, at, kind FROM loopctl_heads WHERE session_id = %s ORDER BY revision",
    blobs="SELECT hash, data FROM loopctl_blobs WHERE hash = ANY(%s)",
    param="%s",
)

_SCHEMA_LOCK = 0x6C6F6F70  # "loop": the advisory lock key held while the schema is created


class _Tx:
    __slots__ = ("_conn",)

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        # Results in the binary format: a bytea arrives as its bytes, where the text format sends twice as
        # many hex digits for libpq to decode (half the client's CPU of a load went there).
        return self._conn.execute(sql, params, binary=True).fetchall()

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._conn.execute(sql, params).rowcount

    def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(sql, rows)


class PostgresStore(SessionStore):
    """Sessions in the PostgreSQL database at ``dsn`` (a libpq connection string or URL:
    ``postgresql://user@host/db``, ``host=/run/postgresql dbname=app``).

    ``min_size`` and ``max_size`` bound the connection pool; ``connect_timeout`` is how long (seconds) opening
    the store waits for a first connection before raising ``StoreError`` (a server still starting is waited
    for; an unknown host, a wrong password or a database that does not exist raise at once, with libpq's
    reason). Tables are named ``loopctl_*``, so
    the store can share a database with an application. Opening a database whose schema is newer than this
    release reads raises ``StoreError``.

    ``blob_threshold`` is the size in bytes from which a big string of a message (an image's data, a long tool
    result) is stored once as a blob, shared by every node that holds it. ``pack_size``: a chain's nodes are
    also copied, that many at a time, into packs that a load reads in one row each (``0``: no packs written;
    ``docs/sessions.md``, "Packs").
    """

    dialect = DIALECT

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 30.0,
        blob_threshold: int = BLOB_THRESHOLD,
        pack_size: int = PACK_SIZE,
    ) -> None:
        self.blob_threshold = blob_threshold
        self.pack_size = pack_size
        self._dsn = dsn
        _refuse_what_waiting_cannot_fix(dsn, connect_timeout)
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] = psycopg_pool.ConnectionPool(
            dsn, min_size=min_size, max_size=max_size, open=False, name="loopctl-store"
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise StoreError(f"cannot connect to PostgreSQL at {_safe(dsn)} within {connect_timeout:g} s") from exc
        try:
            self._init_schema()
        except BaseException:
            self._pool.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresStore({_safe(self._dsn)!r})"

    @contextlib.contextmanager
    def _write(self) -> Iterator[Tx]:
        if self._pool.closed:
            raise StoreError(f"{self!r} is closed")
        with (
            translate_errors(psycopg.Error, "writing to PostgreSQL failed"),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            yield _Tx(conn)

    @contextlib.contextmanager
    def _read(self) -> Iterator[Tx]:
        if self._pool.closed:
            raise StoreError(f"{self!r} is closed")
        with (
            translate_errors(psycopg.Error, "reading from PostgreSQL failed"),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield _Tx(conn)

    def close(self) -> None:
        """Close the pool and its connections."""
        self._pool.close()

    def _init_schema(self) -> None:
        with self._write() as tx:
            tx.query("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            found = tx.query(
                "SELECT " + ", ".join(f"to_regclass('{t}') IS NOT NULL" for t in _TABLES)  # our names, not input
            )[0]
            tables = {t for t, present in zip(_TABLES, found, strict=True) if present}
            self._ensure_schema(tx, tables, _SCHEMA, f"PostgreSQL at {_safe(self._dsn)}")


# libpq's words for a connection that no wait can make work: a host name that does not resolve, a role or
# database that does not exist, a password or pg_hba.conf refusal (a refused or timed-out connection may be a
# server still starting: the pool waits for it).
_PERMANENT = (
    "could not translate host name",
    "name or service not known",
    "nodename nor servname",
    "password authentication failed",
    "no pg_hba.conf entry",
    "does not exist",
    "invalid connection option",
)


def _refuse_what_waiting_cannot_fix(dsn: str, timeout: float) -> None:
    """One direct connection first: ``StoreError`` at once, with libpq's reason, when it fails in a way the
    pool's retries would only repeat for ``timeout`` seconds (an unknown host, a wrong password)."""
    try:
        psycopg.connect(dsn, connect_timeout=max(1, int(timeout))).close()
    except psycopg.OperationalError as exc:
        reason = (str(exc).strip().splitlines() or [""])[-1].strip()
        if any(word in reason.lower() for word in _PERMANENT):
            password = _password(dsn)
            if password:
                reason = reason.replace(password, "***")
            raise StoreError(f"cannot connect to PostgreSQL at {_safe(dsn)}: {reason}") from None
    except psycopg.ProgrammingError as exc:  # a malformed connection string
        raise StoreError(f"not a PostgreSQL connection string or URL: {_safe(dsn)} ({exc})") from None


def _password(dsn: str) -> str | None:
    try:
        from psycopg.conninfo import conninfo_to_dict

        value = conninfo_to_dict(dsn).get("password")
    except psycopg.Error:
        return None
    return str(value) if value else None


def _safe(dsn: str) -> str:
    """``dsn`` without its password, for messages and ``repr``."""
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<dsn>"
    if "password" in params:
        params["password"] = "***"
    return make_conninfo(**{k: str(v) for k, v in params.items()})
