"""The hash chain: node ids, and big payloads kept once by content hash.

A session's conversation is a chain of nodes. A node is one message plus its parent's id; its id is

    SHA-256( b"loopctl.node.v1\\x00" || parent id (32 bytes; 32 zero bytes for the first message) ||
             the message's canonical bytes )

where the canonical bytes are the message's conversation-file form (``docs/wire-format.md``: compact UTF-8
JSON, byte-stable). The id therefore covers exactly what the model saw and everything before it: two chains
that share a prefix share its nodes, and a changed byte anywhere changes every id after it.

A string of at least ``threshold`` bytes inside a message (image data, a long tool output, a file written by
a tool call) is kept once, as a *blob* keyed by the SHA-256 of its bytes, and cut out of the node's stored
body. The cut is done on the canonical bytes themselves: the blob holds the exact bytes removed (the JSON
string literal, quotes included) and the node keeps ``(offset, blob hash)`` pairs, so putting the blobs back
gives the canonical bytes again, byte for byte, whatever the message holds.

A *pack* holds ``PACK_SIZE`` consecutive nodes of a chain in one row (a copy: the nodes keep their own rows):
their ids, and their canonical bytes whole (payloads included) as one JSON array, so a load reads a long chain
in a few rows instead of one row per message and one per payload, and decodes each pack in one call. A pack
is named by the id of its last node, which covers every node before it, so packs are shared like nodes;
``verify`` re-derives each packed node's id from its parent's and its bytes (``docs/sessions.md``, "Packs").

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from loopctl._frozen import dataclass
from loopctl.message import Message
from loopctl.message.model import _dumps_bytes

__all__ = [
    "BLOB_THRESHOLD",
    "MAX_PACK_BYTES",
    "NODE_ID_TAG",
    "PACK_FORMAT",
    "PACK_SIZE",
    "ROOT_PARENT",
    "TOO_BIG_FORMAT",
    "Payload",
    "blob_hash",
    "canonical_bytes",
    "join_payloads",
    "node_id",
    "pack_nodes",
    "read_pack",
    "read_refs",
    "split_payloads",
    "unpack_nodes",
]

NODE_ID_TAG = b"loopctl.node.v1\x00"
"""Prefixed to every node hash, so a node id can never equal the hash of some other kind of data."""

ROOT_PARENT = bytes(32)
"""The parent written into the hash of a chain's first message."""

BLOB_THRESHOLD = 1024
"""Strings whose JSON literal is at least this many bytes are stored once as blobs (the stores' default)."""

PACK_SIZE = 100
"""Nodes per pack (the stores' default): a chain's nodes at depths ``k * PACK_SIZE`` to ``(k + 1) * PACK_SIZE -
1`` are copied into one pack when its last node is appended."""

MAX_PACK_BYTES = 64 * 2**20
"""The most bytes a pack's messages may take (the stores' default): the nodes of a pack that would be bigger are
only read from their rows. A pack is one value in one row, which a database caps (1 GB for SQLite's default
``SQLITE_MAX_LENGTH`` and for a PostgreSQL ``bytea``), while each node keeps its big payloads apart; a pack of
such size would save nothing measurable on a load, where a pack too big to be written would fail the append."""

TOO_BIG_FORMAT = 0
"""The ``format`` of the row left where a pack was too big to write (``MAX_PACK_BYTES``): it holds no node (its
``length`` is 0), loads ignore it as a pack of another format, and the appends after it know that the packs
below were written, so they do not read the chain back to write them."""

PACK_FORMAT = 1
"""The layout of a pack row this release writes and reads; a pack of another format is ignored (its nodes are
read from their own rows)."""

_REF = struct.Struct(">I32s")  # one payload reference: offset into the stored body, blob hash


def canonical_bytes(message: Message) -> bytes:
    """The message's conversation-file bytes (``Message.to_json`` as UTF-8). Raises ``InvalidMessage`` for a
    message that cannot be written (a lone surrogate)."""
    return _dumps_bytes(message.to_dict())


def node_id(parent: bytes | None, message_bytes: bytes) -> bytes:
    """The 32-byte id of the node holding ``message_bytes`` (canonical bytes) after ``parent`` (``None`` for
    the first message of a chain)."""
    h = hashlib.sha256(NODE_ID_TAG)
    h.update(parent if parent is not None else ROOT_PARENT)
    h.update(message_bytes)
    return h.digest()


def blob_hash(data: bytes) -> bytes:
    """The 32-byte key of a blob: the SHA-256 of its bytes.

    ``data`` is the blob's bytes.
    """
    return hashlib.sha256(data).digest()


@dataclass(frozen=True, slots=True)
class Payload:
    """A message's canonical bytes split for storage: the ``body`` with big strings cut out, ``refs`` (the
    cut points: ``(offset into body, blob hash)``, offsets non-decreasing), and the ``blobs`` themselves."""

    body: bytes
    refs: tuple[tuple[int, bytes], ...]
    blobs: Mapping[bytes, bytes]

    def packed_refs(self) -> bytes | None:
        """``refs`` as stored: 36 bytes each (a big-endian 32-bit offset, then the hash), or ``None``."""
        if not self.refs:
            return None
        return b"".join(_REF.pack(off, h) for off, h in self.refs)


def _big_strings(value: Any, threshold: int) -> Iterator[str]:
    """The string values (not keys) of ``value`` whose JSON literal may reach ``threshold`` bytes (at most 6
    bytes a character: a ``\\u`` escape), in serialization order."""
    if isinstance(value, str):
        if len(value) * 6 + 2 >= threshold:
            yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _big_strings(v, threshold)
    elif isinstance(value, list):
        for v in value:
            yield from _big_strings(v, threshold)


def split_payloads(message_bytes: bytes, wire: Mapping[str, Any], threshold: int = BLOB_THRESHOLD) -> Payload:
    """Cut the big strings of a message out of its canonical bytes.

    ``wire`` is the message's wire object (``Message.to_dict()``) that ``message_bytes`` was written from;
    it only says which strings to look for. Each is found in the bytes by its JSON literal, searching
    forward from the previous cut; one that is not found (written differently) simply stays in the body,
    so the split is always exact: ``join_payloads`` of the result gives ``message_bytes`` back.

    ``threshold`` is the size in bytes from which a string is cut out into a blob.
    """
    refs: list[tuple[int, bytes]] = []
    blobs: dict[bytes, bytes] = {}
    pieces: list[bytes] = []
    cursor = 0  # position in message_bytes
    removed = 0  # bytes cut out so far
    for text in _big_strings(wire, threshold):
        literal = orjson.dumps(text)
        if len(literal) < threshold:
            continue
        at = message_bytes.find(literal, cursor)
        if at < 0:
            continue
        key = blob_hash(literal)
        blobs[key] = literal
        pieces.append(message_bytes[cursor:at])
        refs.append((at - removed, key))
        removed += len(literal)
        cursor = at + len(literal)
    if not refs:
        return Payload(message_bytes, (), {})
    pieces.append(message_bytes[cursor:])
    return Payload(b"".join(pieces), tuple(refs), blobs)


def read_refs(packed: bytes | None, body_length: int) -> list[tuple[int, bytes]]:
    """Unpack a node's stored ``refs``; raises ``ValueError`` for a length that is not a whole number of
    references or offsets that go backwards or past the body.

    ``packed`` is the stored column (``None``: no references); ``body_length`` the length of the node's body in
    bytes, which every offset must fit. Returns ``(offset, hash)`` pairs in order.
    """
    if not packed:
        return []
    if len(packed) % _REF.size:
        raise ValueError(f"payload references of {len(packed)} bytes are not a whole number of references")
    out = [(off, bytes(h)) for off, h in _REF.iter_unpack(packed)]
    last = 0
    for off, _ in out:
        if off < last or off > body_length:
            raise ValueError(f"payload reference at offset {off} is out of order or past the body")
        last = off
    return out


def join_payloads(body: bytes, refs: list[tuple[int, bytes]], blobs: Mapping[bytes, bytes]) -> bytes:
    """The canonical bytes of a stored node: ``body`` with each referenced blob put back at its offset.
    Raises ``KeyError`` (the hash) for a blob that is missing from ``blobs``.

    ``refs`` are ``(offset, hash)`` pairs in body order, as :func:`read_refs` gives them.
    """
    if not refs:
        return body
    view = memoryview(body)
    pieces: list[bytes | memoryview] = []
    prev = 0
    for off, key in refs:
        pieces.append(view[prev:off])
        pieces.append(blobs[key])
        prev = off
    pieces.append(view[prev:])
    return b"".join(pieces)  # one copy of each byte (slices of a memoryview copy nothing)


def pack_nodes(ids: list[bytes], bodies: list[bytes]) -> tuple[bytes, bytes, bytes]:
    """The stored columns of a pack of the nodes ``ids`` (32 bytes each, oldest first) whose canonical bytes are
    ``bodies``: the ids joined; the sizes (a big-endian 32-bit length per node); the bodies as one JSON array
    (``[`` body ``,`` body ... ``]``), which a load decodes in one call."""
    if not ids or len(ids) != len(bodies) or any(len(i) != 32 for i in ids):
        raise ValueError("a pack needs one 32-byte id per body, and at least one")
    return b"".join(ids), struct.pack(f">{len(bodies)}I", *map(len, bodies)), b"[" + b",".join(bodies) + b"]"


def read_pack(count: int, ids: bytes, sizes: bytes, bodies: bytes) -> list[bytes]:
    """The node ids of a pack of ``count`` nodes, from its stored columns (as :func:`pack_nodes` writes them),
    after checking that the columns fit together (the separators between the bodies are checked by
    :func:`unpack_nodes`). Raises ``ValueError`` naming what does not fit: a column whose length is not
    ``count`` ids or sizes, or sizes that do not add up to the array's length."""
    if count <= 0:
        raise ValueError(f"the pack holds {count} nodes")
    if len(ids) != 32 * count:
        raise ValueError(f"its ids are {len(ids)} bytes, not {count} ids of 32")
    if len(sizes) != 4 * count:
        raise ValueError(f"its sizes are {len(sizes)} bytes, not {count} sizes of 4")
    total = sum(struct.unpack(f">{count}I", sizes)) + count + 1  # the brackets and the commas
    if total != len(bodies) or bodies[:1] != b"[" or bodies[-1:] != b"]":
        raise ValueError(f"its sizes make an array of {total} bytes but its bodies are {len(bodies)}")
    return [ids[i : i + 32] for i in range(0, 32 * count, 32)]


def unpack_nodes(count: int, ids: bytes, sizes: bytes, bodies: bytes) -> tuple[list[bytes], list[bytes]]:
    """The node ids and canonical bytes of a pack of ``count`` nodes from its stored columns: ``ids`` (32 bytes
    each), ``sizes`` (a big-endian 32-bit length each) and ``bodies`` (the JSON array of the bodies). Raises
    ``ValueError`` as :func:`read_pack` does, and for a body not followed by its separator."""
    id_list = read_pack(count, ids, sizes, bodies)
    out: list[bytes] = []
    at = 1
    for i, n in enumerate(struct.unpack(f">{count}I", sizes)):
        out.append(bodies[at : at + n])
        at += n
        if bodies[at : at + 1] != (b"]" if i == count - 1 else b","):
            raise ValueError(f"its body {i} is not followed by {']' if i == count - 1 else ','}")
        at += 1
    return id_list, out
