"""Sessions in a database: append-only chains of messages, one head pointer per session.

A session is a head pointer into a chain of immutable nodes; a node is one message plus its parent's id, and
its id is a hash over the parent's id and the message's conversation-file bytes (:mod:`loopctl.store.chain`).
A turn appends its new messages and moves the head with compare-and-swap on the head the writer last saw: a
stale writer gets :class:`~loopctl.errors.ConcurrentUpdate` and nothing is written. Compaction and edits
append new nodes (the old chain stays readable); a fork is a new session at any node, sharing every node
before it. The machine's other state is stored beside the head (:mod:`loopctl.store.state`).

Backends: :class:`SQLiteStore` (one file, the CLI's default ``.loopctl/sessions.db``) and
:class:`PostgresStore` (a server shared by many workers; extra ``loopctl[postgres]``, imported only when
used). ``BareLoop(client, tools, config, store=store, session_id="...")`` loads a session and appends every
turn to it. The model, the schema and its version policy: ``docs/sessions.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopctl.errors import ConcurrentUpdate, SessionExists, SessionNotFound, StoreCorrupt, StoreError
from loopctl.store.base import (
    SCHEMA_VERSION,
    Appended,
    HeadMove,
    Node,
    SessionInfo,
    SessionStore,
    StoredSession,
    StoreProblem,
    new_session_id,
)
from loopctl.store.binding import SessionBinding
from loopctl.store.chain import BLOB_THRESHOLD, node_id
from loopctl.store.sqlite import SQLiteStore
from loopctl.store.state import STATE_FORMAT_VERSION, SessionState

if TYPE_CHECKING:
    from loopctl.store.postgres import PostgresStore

__all__ = [
    "BLOB_THRESHOLD",
    "SCHEMA_VERSION",
    "STATE_FORMAT_VERSION",
    "Appended",
    "ConcurrentUpdate",
    "HeadMove",
    "Node",
    "PostgresStore",
    "SQLiteStore",
    "SessionBinding",
    "SessionExists",
    "SessionInfo",
    "SessionNotFound",
    "SessionState",
    "SessionStore",
    "StoreCorrupt",
    "StoreError",
    "StoreProblem",
    "StoredSession",
    "new_session_id",
    "node_id",
]


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":  # psycopg is an optional extra: imported on first use
        from loopctl.store.postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module 'loopctl.store' has no attribute {name!r}")
