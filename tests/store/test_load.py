"""Loading a chain: the messages built are exactly those ``Message.from_json`` reads from the canonical bytes,
a row that cannot be read is named, and the garbage collector is left as it was found."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopctl.errors import StoreCorrupt
from loopctl.message import Message, Role, TextPart, ToolResultPart
from loopctl.store import SessionStore
from loopctl.store import base as store_base
from loopctl.store.base import _collector_paused
from loopctl.store.chain import canonical_bytes
from tests.store.test_store import raw, sid
from tests.strategies import messages


def _fields_sets(value: Any) -> Any:
    """Every model value's type and ``model_fields_set``, recursively: what a build that skipped validation
    would get wrong first."""
    if isinstance(value, tuple):
        return [_fields_sets(v) for v in value]
    fields = getattr(value, "model_fields_set", None)
    if fields is None:
        return value
    return (type(value), sorted(fields), {k: _fields_sets(v) for k, v in value.__dict__.items()})


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(st.lists(messages(), min_size=1, max_size=5), st.sampled_from([3, 64, 1024]))
def test_a_loaded_message_is_what_from_json_reads_from_its_canonical_bytes(
    store: SessionStore, msgs: list[Message], threshold: int
) -> None:
    store.blob_threshold = threshold  # 3: nearly every string is a payload, put back by the load
    s = sid()
    store.append(s, msgs, expected_head=None)
    loaded = store.load(s).messages
    expected = [Message.from_json(canonical_bytes(m)) for m in msgs]
    assert list(loaded) == expected == msgs
    assert [_fields_sets(m) for m in loaded] == [_fields_sets(m) for m in expected]


def _two_turns() -> list[Message]:
    return [
        Message.user("read the file"),
        Message.new(Role.USER, [ToolResultPart(call_id="c1", name="read_file", output="line\n" * 400)]),
        Message.assistant("done"),
    ]


def test_a_node_whose_payload_references_are_cut_short_is_named_by_load_and_verify(store: SessionStore) -> None:
    done = store.append("s", _two_turns(), expected_head=None)
    target = bytes.fromhex(done.node_ids[1])  # its tool output is a payload
    raw(store, "UPDATE loopctl_nodes SET refs = ? WHERE id = ?", (b"abc", target))
    with pytest.raises(StoreCorrupt, match=r"message 1 .* cannot be read: payload references of 3 bytes") as info:
        store.load("s")
    assert info.value.node == done.node_ids[1]
    problems = store.verify("s")
    assert [(p.node, p.index) for p in problems] == [(done.node_ids[1], 1)]
    assert "not a whole number of references" in problems[0].problem


def test_a_node_whose_payload_is_gone_is_named_by_load(store: SessionStore) -> None:
    done = store.append("s", _two_turns(), expected_head=None)
    raw(store, "DELETE FROM loopctl_blobs")
    with pytest.raises(StoreCorrupt, match=r"message 1 .* cannot be read: a payload is missing") as info:
        store.load("s")
    assert info.value.node == done.node_ids[1]


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"role":"user","parts":[{"type":"text","text":"x"}', "invalid JSON"),
        (b'{"role":"user","parts":[{"type":"text","text":"\\ud83d"}]}', "invalid JSON"),  # a lone surrogate
        (b'{"role":"user","parts":[{"type":"text","text":7}]}', "parts\\[0\\].text: expected a string"),
        (b'{"role":"user","parts":[{"type":"video"}]}', "unknown part type 'video'"),
    ],
)
def test_a_body_that_is_not_a_valid_message_is_named_by_load(store: SessionStore, body: bytes, why: str) -> None:
    done = store.append("s", [Message.user("a"), Message.assistant("b")], expected_head=None)
    raw(store, "UPDATE loopctl_nodes SET body = ? WHERE id = ?", (body, bytes.fromhex(done.node_ids[0])))
    with pytest.raises(StoreCorrupt, match=f"session 's': message 0 .* cannot be read: .*{why}") as info:
        store.load("s")
    assert info.value.node == done.node_ids[0]


# --- the garbage collector -------------------------------------------------------------------------------------


@pytest.fixture
def collector() -> Iterator[None]:
    """Restores the collector's state after a test that changes it."""
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_the_collector_is_paused_while_messages_are_built_and_enabled_after(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch, collector: None
) -> None:
    store.append("s", [Message.user("a"), Message.assistant("b")], expected_head=None)
    seen: list[bool] = []
    real = store_base._decode  # the messages are built there, all at once

    def spy(bodies: list[bytes], *args: Any) -> list[Message]:
        seen.extend(gc.isenabled() for _ in bodies)
        return real(bodies, *args)

    monkeypatch.setattr(store_base, "_decode", spy)
    gc.enable()
    assert [m.text_content() for m in store.load("s").messages] == ["a", "b"]
    assert seen == [False, False]
    assert gc.isenabled()


def test_a_collector_the_program_disabled_stays_disabled(store: SessionStore, collector: None) -> None:
    store.append("s", [Message.user("a")], expected_head=None)
    gc.disable()
    store.load("s")
    assert not gc.isenabled()


def test_the_collector_is_enabled_again_when_a_load_fails(store: SessionStore, collector: None) -> None:
    done = store.append("s", [Message.user("a")], expected_head=None)
    raw(store, "UPDATE loopctl_nodes SET body = ? WHERE id = ?", (b"{", bytes.fromhex(done.head or "")))
    gc.enable()
    with pytest.raises(StoreCorrupt):
        store.load("s")
    assert gc.isenabled()


def test_objects_the_program_froze_stay_frozen(store: SessionStore, collector: None) -> None:
    store.append("s", [Message.user("a")], expected_head=None)
    gc.enable()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        store.load("s")
        # Frozen objects that die leave the count, but thawing them all would make it 0.
        assert gc.get_freeze_count() > frozen * 0.9
        assert gc.isenabled()
    finally:
        gc.unfreeze()


def test_what_a_load_built_is_still_collected_when_it_becomes_garbage(store: SessionStore, collector: None) -> None:
    store.append("s", [Message.new(Role.USER, [TextPart(text="a")])], expected_head=None)
    gc.enable()

    class Holder:
        pass

    a, b = Holder(), Holder()
    a.other, b.other = b, a  # type: ignore[attr-defined]  # a cycle: only the collector frees it
    a.session = store.load("s")  # type: ignore[attr-defined]
    ref = weakref.ref(a)
    del a, b
    gc.collect()
    assert ref() is None


def test_loads_in_several_threads_enable_the_collector_when_the_last_one_ends(collector: None) -> None:
    gc.enable()
    with _collector_paused:
        with _collector_paused:  # a second load, in another thread, began meanwhile
            assert not gc.isenabled()
        assert not gc.isenabled()  # the first is still building
    assert gc.isenabled()
    done = threading.Event()
    inside = threading.Event()

    def other() -> None:
        with _collector_paused:
            inside.set()
            done.wait(10)

    t = threading.Thread(target=other)
    t.start()
    inside.wait(10)
    with _collector_paused:
        pass
    assert not gc.isenabled()  # the other thread's load is still building
    done.set()
    t.join()
    assert gc.isenabled()
