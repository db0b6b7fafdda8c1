"""Packs: a chain's nodes copied many to a row, which a load reads instead of the nodes' own rows. A session
loads exactly as from its node rows, whatever the pack size and however it was appended; a pack that was
changed or cut short is named by ``load`` and ``verify``; a store written before packs still loads, and gets
packs as it grows."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopctl.errors import StoreCorrupt, StoreError
from loopctl.message import Message, Role, TextPart, ToolCallPart, ToolResultPart
from loopctl.store import SessionStore, SQLiteStore
from loopctl.store.chain import PACK_FORMAT, canonical_bytes, node_id, pack_nodes, unpack_nodes
from tests.store.test_load import _fields_sets
from tests.store.test_store import raw, sid
from tests.strategies import messages


def _ids(msgs: list[Message]) -> list[str]:
    out: list[str] = []
    prev: bytes | None = None
    for m in msgs:
        prev = node_id(prev, canonical_bytes(m))
        out.append(prev.hex())
    return out


def _turns(n: int) -> list[Message]:
    """``n`` messages: a user's input, then calls and their results (a long output each third turn, stored as a
    payload in the node rows), and so on."""
    out: list[Message] = [Message.user("start")]
    i = 0
    while len(out) < n:
        i += 1
        out.append(
            Message.new(
                Role.ASSISTANT,
                [TextPart(text=f"step {i} é"), ToolCallPart(id=f"c{i}", name="read", input={"path": f"f{i}"})],
            )
        )
        output = f"line {i}\n" * (300 if i % 3 == 0 else 2)
        out.append(Message.new(Role.USER, [ToolResultPart(call_id=f"c{i}", name="read", output=output)]))
    return out[:n]


def _packs(store: SessionStore) -> list[tuple[Any, ...]]:
    return raw(store, "SELECT id, parent, depth, length, format, ids, sizes, bodies FROM loopctl_packs ORDER BY depth")


def _pack_of(store: SessionStore, depth: int) -> tuple[Any, ...]:
    return next(p for p in _packs(store) if p[2] == depth)


# --- the round trip ------------------------------------------------------------------------------------------


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    st.lists(messages(), min_size=1, max_size=14),
    st.lists(st.integers(1, 5), min_size=1, max_size=14),
    st.sampled_from([1, 2, 3, 5]),
    st.sampled_from([3, 1024]),
)
def test_a_session_loads_from_its_packs_exactly_as_from_its_node_rows(
    store: SessionStore, msgs: list[Message], chunks: list[int], size: int, threshold: int
) -> None:
    store.pack_size, store.blob_threshold = size, threshold
    s = sid()
    head: str | None = None
    at = 0
    for n in [*chunks, len(msgs)]:  # appended in pieces: packs completed by later appends read earlier nodes back
        if at >= len(msgs):
            break
        head = store.append(s, msgs[at : at + n], expected_head=head).head
        at += n
    loaded = store.load(s)
    assert list(loaded.messages) == msgs
    assert list(loaded.node_ids) == _ids(msgs)
    assert [_fields_sets(m) for m in loaded.messages] == [_fields_sets(Message.from_json(m.to_json())) for m in msgs]
    assert [(n.id, n.index, n.message) for n in store.chain(_ids(msgs)[-1])] == list(
        zip(_ids(msgs), range(len(msgs)), msgs, strict=True)
    )
    assert store.verify(s) == []
    # A pack ends at every multiple of the pack size (the store is shared by the examples: an earlier example's
    # pack of another size may be the one that ends there), and every pack holds exactly its nodes' bytes.
    ids = _ids(msgs)
    wire = dict(zip(ids, map(canonical_bytes, msgs), strict=True))
    packs = {bytes(p[0]).hex(): p for p in _packs(store)}
    assert all(ids[t] in packs for t in range(size - 1, len(msgs), size))
    for tip in set(ids) & set(packs):
        _, _, depth, length, fmt, pids, sizes, bodies = packs[tip]
        assert fmt == PACK_FORMAT and ids[depth + length - 1] == tip
        got = unpack_nodes(length, bytes(pids), bytes(sizes), bytes(bodies))
        assert got == (
            [bytes.fromhex(i) for i in ids[depth : depth + length]],
            [wire[i] for i in ids[depth : depth + length]],
        )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=8))
def test_pack_columns_give_back_the_ids_and_bytes_they_were_made_of(bodies: list[bytes]) -> None:
    ids = [node_id(None, b) for b in bodies]
    assert unpack_nodes(len(ids), *pack_nodes(ids, bodies)) == (ids, bodies)


def test_the_stored_layout_of_a_pack(store: SessionStore) -> None:
    store.pack_size = 2
    msgs = [Message.user("a"), Message.assistant("b"), Message.user("c")]
    done = store.append("s", msgs, expected_head=None)
    [(pid, parent, depth, length, fmt, ids, sizes, bodies)] = _packs(store)
    a, b = canonical_bytes(msgs[0]), canonical_bytes(msgs[1])
    assert bytes(pid).hex() == done.node_ids[1]
    assert (parent, depth, length, fmt) == (None, 0, 2, 1)
    assert bytes(ids) == bytes.fromhex(done.node_ids[0]) + bytes.fromhex(done.node_ids[1])
    assert bytes(sizes) == len(a).to_bytes(4, "big") + len(b).to_bytes(4, "big")
    assert bytes(bodies) == b"[" + a + b"," + b + b"]"


def test_a_long_session_is_read_from_its_packs(store: SessionStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.pack_size = 10
    msgs = _turns(57)
    head = None
    for i in range(0, 57, 2):  # as a loop saves: a reply and its results at a time
        head = store.append("s", msgs[i : i + 2], expected_head=head).head
    assert [(p[2], p[3]) for p in _packs(store)] == [(d, 10) for d in range(0, 50, 10)]
    queries = _count_rows(store, "_read", monkeypatch)  # the rows each query of the load returned
    assert list(store.load("s").messages) == msgs
    # The session row, the 8 newest nodes down to the last node of the top pack, the 5 packs, then the payloads
    # of the newest nodes only (message 54's long output).
    assert queries == [1, 8, 5, 1]


def _count_rows(store: SessionStore, method: str, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows each query returns in the store's ``_read`` or ``_write`` transactions, from now on."""
    queries: list[int] = []
    real = getattr(type(store), method)

    @contextlib.contextmanager
    def spy(self: SessionStore) -> Iterator[Any]:
        with real(self) as tx:
            yield _Counting(tx, queries)

    monkeypatch.setattr(type(store), method, spy)
    return queries


@dataclasses.dataclass
class _Counting:
    tx: Any
    rows: list[int]

    def query(self, sql: str, params: Any = ()) -> Any:
        out = self.tx.query(sql, params)
        self.rows.append(len(out))
        return out

    def run(self, sql: str, params: Any = ()) -> Any:
        return self.tx.run(sql, params)

    def run_many(self, sql: str, rows: Any) -> None:
        self.tx.run_many(sql, rows)


def test_forks_and_rewrites_share_and_use_packs(store: SessionStore) -> None:
    store.pack_size = 4
    msgs = _turns(11)
    done = store.append("s", msgs, expected_head=None)
    fork = store.fork("s", at=done.node_ids[6], new_id="f")  # mid-pack: its nodes 4 to 6 from their rows
    assert list(store.load("f").messages) == msgs[:7]
    more = _turns(13)[11:]
    store.append("s", more, expected_head=done.head)
    assert list(store.load("s").messages) == msgs + more
    # A compaction's new chain (no parent) gets packs of its own; the old chain stays readable.
    summary = [Message.user("summary"), *msgs[-5:]]
    info = store.info("s")
    store.append("s", summary, expected_head=info.head, parent=None)
    assert list(store.load("s").messages) == summary
    assert [n.message for n in store.chain(done.node_ids[-1])] == msgs
    assert fork.length == 7 and store.verify("s") == [] and store.verify("f") == []
    assert len(_packs(store)) == 3 + 1  # 0-3, 4-7, 8-11 of the first chain; 0-3 of the summary's


# --- damage ----------------------------------------------------------------------------------------------------


def _packed_session(store: SessionStore) -> tuple[list[Message], list[str]]:
    store.pack_size = 4
    msgs = _turns(10)
    return msgs, list(store.append("s", msgs, expected_head=None).node_ids)


def test_a_pack_whose_sizes_are_cut_short_is_named_by_load_and_verify(store: SessionStore) -> None:
    _, ids = _packed_session(store)
    pack = _pack_of(store, 4)
    raw(store, "UPDATE loopctl_packs SET sizes = ? WHERE id = ?", (bytes(pack[6])[:-2], bytes(pack[0])))
    with pytest.raises(
        StoreCorrupt, match=r"the pack of messages 4 to 7 .* cannot be read: its sizes are 14 bytes"
    ) as info:
        store.load("s")
    assert info.value.node == ids[7] and info.value.session_id == "s"
    problems = store.verify("s")
    assert [(p.node, p.index) for p in problems] == [(ids[7], 7)]
    assert "its copy in the pack of messages 4 to 7 cannot be read" in problems[0].problem


def test_a_message_changed_in_a_pack_is_named_by_verify(store: SessionStore) -> None:
    _, ids = _packed_session(store)
    pack = _pack_of(store, 4)
    changed = bytes(pack[7]).replace(b"step 3", b"step 9")
    assert changed != bytes(pack[7])
    raw(store, "UPDATE loopctl_packs SET bodies = ? WHERE id = ?", (changed, bytes(pack[0])))
    problems = store.verify("s")
    assert [(p.node, p.index) for p in problems] == [(ids[5], 5)]
    assert "its copy in the pack of messages 4 to 7 does not match its id" in problems[0].problem
    assert "step 9" in store.load("s").messages[5].text_content()  # load reads, verify checks: as for a node row


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ((b'"text":"step 3', b'"text":7,"x":"'), r"message 5 .* cannot be read: parts\[0\]\.text: expected a string"),
        ((b'{"type":"text","text":"step 3', b'{"type":"video","tex":"step 3'), "message 5 .* cannot be read: .*unknown part type"),
        ((b'},{"role":"user","parts":[{"type":"tool_result","call_id":"c3"', b"}]"), "the pack of messages 4 to 7 .* its sizes make an array"),
    ],
)  # fmt: skip
def test_a_message_in_a_pack_that_is_not_valid_is_named_by_load(
    store: SessionStore, change: tuple[bytes, bytes], why: str
) -> None:
    _, ids = _packed_session(store)
    pack = _pack_of(store, 4)
    changed = bytes(pack[7]).replace(*change)
    assert changed != bytes(pack[7])
    raw(store, "UPDATE loopctl_packs SET bodies = ? WHERE id = ?", (changed, bytes(pack[0])))
    with pytest.raises(StoreCorrupt, match=f"session 's': {why}") as info:
        store.load("s")
    assert info.value.node in (ids[5], ids[7])
    assert store.verify("s")


def test_a_pack_named_by_another_node_is_refused(store: SessionStore) -> None:
    _, ids = _packed_session(store)
    pack = _pack_of(store, 4)
    other = bytes(pack[5])[:-32] + bytes.fromhex(ids[0])
    raw(store, "UPDATE loopctl_packs SET ids = ? WHERE id = ?", (other, bytes(pack[0])))
    with pytest.raises(StoreCorrupt, match=r"the pack of messages 4 to 7 .* its last node is"):
        store.load("s")


def test_a_pack_deleted_or_of_another_format_loses_nothing(store: SessionStore) -> None:
    msgs, ids = _packed_session(store)
    raw(store, "UPDATE loopctl_packs SET format = ? WHERE depth = ?", (PACK_FORMAT + 1, 4))
    assert list(store.load("s").messages) == msgs  # read from the node rows, below it too
    assert store.verify("s") == []
    raw(store, "DELETE FROM loopctl_packs")
    assert list(store.load("s").messages) == msgs
    assert list(store.load("s").node_ids) == ids


def test_a_changed_node_row_under_a_pack_is_still_named_by_verify(store: SessionStore) -> None:
    msgs, ids = _packed_session(store)
    raw(store, "UPDATE loopctl_nodes SET body = ? WHERE id = ?", (b'{"role":"user","parts":[]}', bytes.fromhex(ids[1])))
    assert list(store.load("s").messages) == msgs  # the pack is read
    assert [(p.node, p.index) for p in store.verify("s")] == [(ids[1], 1)]


def test_a_failed_pack_write_leaves_the_session_as_it_was(store: SessionStore) -> None:
    msgs, _ = _packed_session(store)
    before = store.info("s")
    store.dialect = dataclasses.replace(store.dialect, insert_pack="INSERT INTO loopctl_no_such_table VALUES (1)")
    with pytest.raises(StoreError):
        store.append("s", _turns(14)[10:], expected_head=before.head)
    assert store.info("s") == before
    assert list(store.load("s").messages) == msgs
    assert raw(store, "SELECT count(*) FROM loopctl_nodes") == [(10,)]


# --- a store written before packs -------------------------------------------------------------------------------


def test_a_store_written_before_packs_loads_and_gets_packs_as_it_grows(
    store: SessionStore, open_store: Callable[[], SessionStore]
) -> None:
    store.pack_size = 0  # as a release without packs wrote it
    msgs = _turns(9)
    done = store.append("s", msgs, expected_head=None)
    raw(store, "DROP TABLE loopctl_packs")
    again = open_store()  # a release with packs opens it: the table is added
    again.pack_size = 4
    assert list(again.load("s").messages) == msgs
    assert again.verify("s") == []
    more = _turns(13)[9:]
    # Completes the pack of messages 8 to 11 (message 8 read back from its row), and writes the two packs below,
    # missing, once: the chain is read back whole.
    again.append("s", more, expected_head=done.head)
    assert [(p[2], p[3]) for p in _packs(again)] == [(0, 4), (4, 4), (8, 4)]
    assert list(again.load("s").messages) == msgs + more
    assert again.verify("s") == []


def test_an_append_reads_back_only_the_rows_of_the_pack_it_completes(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.pack_size = 4
    msgs = _turns(14)
    head = store.append("s", msgs[:9], expected_head=None).head
    queries = _count_rows(store, "_write", monkeypatch)
    store.append("s", msgs[9:14], expected_head=head)  # completes 8 to 11: reads node 8 back, no more
    assert max(queries) == 1
    assert [(p[2], p[3]) for p in _packs(store)] == [(0, 4), (4, 4), (8, 4)]


# --- damage found by an adversarial pass --------------------------------------------------------------------------


@pytest.mark.parametrize("shift", [1, -1])
def test_a_pack_whose_depth_was_changed_is_named_by_verify(store: SessionStore, shift: int) -> None:
    _, ids = _packed_session(store)
    raw(store, "UPDATE loopctl_packs SET depth = depth + ? WHERE depth = 4", (shift,))
    with pytest.raises(StoreCorrupt, match="the chain is broken at message"):
        store.load("s")  # the load refuses the chain it would read ...
    problems = store.verify("s")  # ... and verify names the row that was changed
    assert [(p.node, p.index) for p in problems] == [(ids[7], 7)]
    assert f"the pack of messages {4 + shift} to {7 + shift} ends at message 7" in problems[0].problem


@pytest.mark.parametrize(
    ("column", "why"),
    [
        ("depth", r"the pack of messages from 'x', 4 of them .* its depth or length is not a whole number"),
        ("length", r"the pack of messages from 4, 'x' of them .* its depth or length is not a whole number"),
        ("parent", "a link is missing"),
    ],
)
@pytest.mark.parametrize("backend", ["sqlite"])  # only SQLite keeps a value of another type than its column's
def test_a_pack_column_of_the_wrong_type_is_a_typed_error(store: SessionStore, column: str, why: str) -> None:
    assert isinstance(store, SQLiteStore)
    _, ids = _packed_session(store)
    raw(store, f"UPDATE loopctl_packs SET {column} = 'x' WHERE depth = 4")
    with pytest.raises(StoreCorrupt, match=why):
        store.load("s")
    problems = store.verify("s")
    assert len(problems) == 1 and problems[0].node in ids[4:8]


def _big(i: int) -> Message:
    return Message.user(f"{i} " + "x" * 300_000)  # a payload of 300 kB: its node row is small


def test_a_pack_too_big_for_one_row_is_not_written_and_the_session_still_grows(store: SessionStore) -> None:
    store.pack_size = 4
    store.max_pack_bytes = 1_000_000  # type: ignore[attr-defined]
    msgs = [_big(i) for i in range(6)] + [Message.user(f"small {i}") for i in range(6)]
    head = None
    for m in msgs:
        head = store.append("s", [m], expected_head=head).head
    # The pack of messages 0 to 3 (1.2 MB) is left out: its nodes are read from their rows. 4 to 7 (0.6 MB) fits.
    assert [(p[2], p[3], p[4]) for p in _packs(store)] == [(0, 0, 0), (4, 4, PACK_FORMAT), (8, 4, PACK_FORMAT)]
    assert list(store.load("s").messages) == msgs
    assert store.verify("s") == []


def test_a_pack_bigger_than_sqlite_takes_in_a_value_does_not_stop_the_session(tmp_path: Any) -> None:
    import sqlite3

    store = SQLiteStore(tmp_path / "s.db", pack_size=4)
    # A database whose values are limited to 1 MB (SQLite's default limit is 1 GB: 100 messages of 10 MB).
    store._conn().setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1_000_000)
    msgs = [_big(i) for i in range(6)]
    head = None
    for m in msgs:  # each node fits; the pack of the first four would not
        head = store.append("s", [m], expected_head=head).head
    assert [p[4] for p in _packs(store)] == [0]  # the pack of the first four: too big
    assert list(store.load("s").messages) == msgs
    store.close()


def test_after_packs_too_big_an_append_does_not_read_the_chain_back_again(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.pack_size = 4
    store.max_pack_bytes = 1_000_000  # type: ignore[attr-defined]
    msgs = [_big(i) for i in range(12)] + [Message.user(f"small {i}") for i in range(4)]
    head = None
    for m in msgs[:15]:
        head = store.append("s", [m], expected_head=head).head
    queries = _count_rows(store, "_write", monkeypatch)
    store.append("s", msgs[15:], expected_head=head)  # completes 12 to 15: reads back 12 to 14, not the whole chain
    assert max(queries) == 3
    assert [(p[2], p[3]) for p in _packs(store) if p[4] == PACK_FORMAT] == [(12, 4)]
    assert list(store.load("s").messages) == msgs
    assert store.verify("s") == []


def test_verify_walks_a_grown_session_once(store: SessionStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each past head (one per save) was walked to the root again: 30 saves read the chain back 31 times, and a
    # session of a few thousand messages took a minute to verify on PostgreSQL.
    store.pack_size = 0
    msgs = _turns(60)
    head = None
    for i in range(0, 60, 2):
        head = store.append("s", msgs[i : i + 2], expected_head=head).head
    queries = _count_rows(store, "_read", monkeypatch)
    assert store.verify("s") == []
    assert queries.count(60) == 1  # one walk of the 60 nodes
    assert max(queries) == 60 and len(queries) < 10
    # A rewritten session still has its old chain walked (and checked) once, beside the new one.
    store.append("s", [Message.user("a new start")], expected_head=head, parent=None)
    queries.clear()
    assert store.verify("s") == []
    assert sorted(q for q in queries if q >= 60) == [60]
