"""The store's rules, each against both backends (a SQLite file and a real PostgreSQL server)."""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopctl.engine import LoopMachine, MachineState
from loopctl.errors import (
    ConcurrentUpdate,
    ConversationFileError,
    SessionExists,
    SessionNotFound,
    StoreCorrupt,
    StoreError,
)
from loopctl.message import (
    ImagePart,
    ImageSource,
    Message,
    Retention,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
    save_conversation,
)
from loopctl.session import Session
from loopctl.store import SCHEMA_VERSION, SessionState, SessionStore, SQLiteStore
from loopctl.store.chain import canonical_bytes, node_id
from tests.strategies import messages

_ids = itertools.count()
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 12).decode()


def sid() -> str:
    return f"s{next(_ids)}"


def raw(store: SessionStore, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run SQL on the store's database behind its back (``?`` placeholders): to corrupt rows."""
    if not isinstance(store, SQLiteStore):
        sql = sql.replace("?", "%s")
    with store._write() as tx:
        return tx.query(sql, params) if sql.lstrip().upper().startswith("SELECT") else [(tx.run(sql, params),)]


def every_kind() -> list[Message]:
    """One message per role using every part kind and every optional and extension key."""
    return [
        Message.new(Role.SYSTEM, [TextPart(text="be brief")]),
        Message.new(
            Role.USER,
            [
                TextPart(text='look é漢字🚀 "quoted" \\ \n'),
                ImagePart(source=ImageSource(media_type="image/png", data=PNG)),
            ],
        ),
        Message.new(
            Role.ASSISTANT,
            [
                ThinkingPart(text="hmm", signature="sig==", provider="anthropic"),
                ThinkingPart(text="", redacted="opaque", provider="anthropic"),
                ThinkingPart(text="summary", signature="enc", provider="openai", item_id="rs_1"),
                TextPart(text="reading", item_id="msg_1"),
                ToolCallPart(id="call_1", name="read", input={"path": "a.py", "n": 2**80, "deep": [[{"x": None}]]}),
                ToolCallPart(id="fc_x", name="grep", input={}, item_id="fc_1", provider="gemini"),
            ],
        ),
        Message.new(
            Role.USER,
            [
                ToolResultPart(
                    call_id="call_1", name="read", output="x" * 5000, is_error=False, retention=Retention.REQUERY
                ),
                ToolResultPart(
                    call_id="fc_x",
                    name="",
                    output=ToolContent.from_multipart(
                        [TextPart(text="screen"), ImagePart(source=ImageSource(media_type="image/png", data=PNG))]
                    ),
                    is_error=True,
                    retention=Retention.DURABLE,
                ),
                ToolResultPart(call_id="c3", name="n", output=ToolContent.from_multipart([])),
            ],
        ),
    ]


# --- round trips -------------------------------------------------------------------------------------------


def test_every_part_kind_and_optional_key_round_trips_byte_for_byte(store: SessionStore) -> None:
    msgs = every_kind()
    done = store.append("kinds", msgs, expected_head=None)
    loaded = store.load("kinds")
    assert list(loaded.messages) == msgs
    assert [canonical_bytes(m) for m in loaded.messages] == [canonical_bytes(m) for m in msgs]
    assert loaded.head == done.head and loaded.node_ids == done.node_ids
    assert store.verify("kinds") == []


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(st.lists(messages(), min_size=1, max_size=4), st.integers(1, 3))
def test_any_messages_round_trip_in_any_number_of_appends(store: SessionStore, msgs: list[Message], cuts: int) -> None:
    s = sid()
    head = None
    step = max(1, len(msgs) // cuts)
    for i in range(0, len(msgs), step):
        head = store.append(s, msgs[i : i + step], expected_head=head).head
    loaded = store.load(s)
    assert [canonical_bytes(m) for m in loaded.messages] == [canonical_bytes(m) for m in msgs]
    assert store.verify(s) == []


def test_a_machine_mid_run_round_trips_exactly(store: SessionStore) -> None:
    m = LoopMachine([Message.user("earlier"), Message.assistant("ok")])
    m.accept_input("list files")
    m.model_response(
        Message.new(
            Role.ASSISTANT, [ToolCallPart(id="c1", name="ls", input={}), ToolCallPart(id="c2", name="zz", input={})]
        ),
        {"ls"},
        123,
    )
    assert m.state is MachineState.AWAITING_TOOLS
    state = SessionState.of(m, model="anthropic:x", root="/w", system_prompt="sys", metadata={"k": [1]})
    store.append("mid", list(m.full_history()), expected_head=None, state=state)
    loaded = store.load("mid")
    assert loaded.machine().to_json() == m.to_json()
    assert (loaded.state.model, loaded.state.root, loaded.state.system_prompt) == ("anthropic:x", "/w", "sys")
    assert loaded.state.outcome == "running"


async def test_the_async_twins_do_what_the_blocking_forms_do(store: SessionStore) -> None:
    done = await store.aappend("a", [Message.user("hi")], expected_head=None)
    loaded = await store.aload("a")
    assert loaded.head == done.head and list(loaded.messages) == [Message.user("hi")]
    assert [i.id for i in await store.asessions()] == ["a"]
    assert await store.averify("a") == []
    with pytest.raises(ConcurrentUpdate):
        await store.aappend("a", [Message.user("again")], expected_head=None)


# --- compare-and-swap --------------------------------------------------------------------------------------


def test_a_stale_append_is_refused_and_writes_nothing(store: SessionStore) -> None:
    first = store.append("s", [Message.user("one")], expected_head=None)
    second = store.append("s", [Message.assistant("two")], expected_head=first.head)
    late = Message.assistant("written by a stale writer " * 100)
    with pytest.raises(ConcurrentUpdate) as caught:
        store.append("s", [late], expected_head=first.head)
    assert (caught.value.expected, caught.value.actual) == (first.head, second.head)
    assert caught.value.session_id == "s"
    info = store.info("s")
    assert (info.head, info.revision, info.length) == (second.head, 2, 2)
    would_be = node_id(bytes.fromhex(first.head or ""), canonical_bytes(late)).hex()
    with pytest.raises(SessionNotFound):
        store.find_node(would_be)
    assert raw(store, "SELECT count(*) FROM loopctl_blobs") == [(0,)]
    assert [h.revision for h in store.heads("s")] == [1, 2]


def test_a_state_saved_at_the_same_head_moves_the_revision_an_append_can_expect(store: SessionStore) -> None:
    # Nodes are named by content: a state-only save (an approval recorded before its call runs) keeps the head,
    # so only the revision tells a writer that another saved meanwhile.
    first = store.append("s", [Message.user("one")], expected_head=None)
    state = SessionState.at_rest(1)
    moved = store.append("s", [], expected_head=first.head, state=state, expected_revision=first.revision)
    assert (moved.head, moved.revision) == (first.head, first.revision + 1)
    with pytest.raises(ConcurrentUpdate, match="its revision is 2, not 1") as caught:
        store.append("s", [], expected_head=first.head, state=state, expected_revision=first.revision)
    assert (caught.value.expected_revision, caught.value.actual_revision) == (1, 2)
    assert store.info("s").revision == 2  # nothing written
    store.append("s", [], expected_head=first.head, state=state)  # without a revision, the head alone is checked


def test_expected_none_on_a_session_that_has_messages_is_stale(store: SessionStore) -> None:
    store.append("s", [Message.user("one")], expected_head=None)
    with pytest.raises(ConcurrentUpdate):
        store.append("s", [Message.user("other")], expected_head=None)
    assert [m.text_content() for m in store.load("s").messages] == ["one"]


def test_an_unknown_session_is_not_found(store: SessionStore) -> None:
    with pytest.raises(SessionNotFound, match="no session 'nope'"):
        store.load("nope")
    with pytest.raises(SessionNotFound):
        store.append("nope", [Message.user("x")], expected_head="ab" * 32)
    assert store.sessions() == []


def test_a_state_that_does_not_fit_the_chain_is_refused(store: SessionStore) -> None:
    with pytest.raises(ValueError, match="holds 0 messages but the chain up to the new head has 1"):
        store.append("s", [Message.user("x")], expected_head=None, state=SessionState.at_rest(0))
    with pytest.raises(SessionNotFound):
        store.info("s")


def test_session_ids_are_checked(store: SessionStore) -> None:
    for bad in ["", " x", "a\nb", "x" * 201]:
        with pytest.raises(ValueError, match="invalid session id"):
            store.append(bad, [Message.user("x")], expected_head=None)


# --- compaction, salvage, forks ------------------------------------------------------------------------------


def _conversation(n: int) -> list[Message]:
    out = [Message.user("task")]
    for i in range(n):
        out.append(Message.new(Role.ASSISTANT, [ToolCallPart(id=f"c{i}", name="read", input={"i": i})]))
        out.append(Message.new(Role.USER, [ToolResultPart(call_id=f"c{i}", name="read", output=f"file {i} " * 300)]))
    return out


def test_append_after_compaction_keeps_the_old_chain_readable(store: SessionStore) -> None:
    before = _conversation(3)  # 7 messages
    first = store.append("s", before, expected_head=None)
    compacted = [Message.user("summary of the work so far"), *before[-2:]]
    moved = store.append("s", compacted, expected_head=first.head, parent=None)
    after = store.append("s", [Message.assistant("done")], expected_head=moved.head)
    assert list(store.load("s").messages) == [*compacted, Message.assistant("done")]
    assert [h.kind for h in store.heads("s")] == ["append", "rewrite", "append"]
    old_head = store.heads("s")[0].head
    assert old_head is not None
    assert [n.message for n in store.chain(old_head)] == before  # what the model saw before the compaction
    # The kept tail is new nodes (new parents) but its big tool output is one blob, stored once.
    assert moved.node_ids[1:] != first.node_ids[-2:]
    assert raw(store, "SELECT count(*) FROM loopctl_blobs") == [(3,)]
    assert store.verify("s") == []
    assert after.revision == 3


def test_a_salvage_moves_the_head_back_to_an_ancestor(store: SessionStore) -> None:
    msgs = _conversation(2)
    done = store.append("s", msgs, expected_head=None)
    back = store.append("s", [], expected_head=done.head, parent=done.node_ids[2])
    assert back.head == done.node_ids[2] and back.node_ids == ()
    assert list(store.load("s").messages) == msgs[:3]
    assert store.heads("s")[-1].kind == "rewrite"


def test_a_fork_shares_the_prefix_and_diverges(store: SessionStore) -> None:
    msgs = _conversation(2)
    m = LoopMachine(msgs)
    m.accept_input("next")
    m.model_response(Message.assistant("finished"), set(), 10)
    full = list(m.full_history())
    done = store.append("orig", full, expected_head=None, state=SessionState.of(m, model="demo"))
    at_head = store.fork("orig", new_id="copy")
    assert at_head.head == done.head and store.load("copy").machine().to_json() == m.to_json()
    early = store.fork("orig", at=done.node_ids[2], new_id="early")
    assert early.length == 3 and early.state is not None and early.state.model == "demo"
    branch = store.append("early", [Message.assistant("another way")], expected_head=early.head)
    assert list(store.load("early").messages) == [*full[:3], Message.assistant("another way")]
    assert list(store.load("orig").messages) == full
    assert store.load("early").node_ids[:3] == done.node_ids[:3]  # shared, not copied
    assert branch.revision == 2
    with pytest.raises(SessionExists):
        store.fork("orig", new_id="early")
    with pytest.raises(SessionNotFound):
        store.fork("orig", at="00" * 32)
    assert {i.id for i in store.sessions()} == {"orig", "copy", "early"}


def _sent_email() -> list[Message]:
    """A finished run: the input, a reply calling ``send_email``, its result, the answer."""
    return [
        Message.user("mail ada"),
        Message.new(Role.ASSISTANT, [ToolCallPart(id="e1", name="send_email", input={"to": "ada"})]),
        Message.new(Role.USER, [ToolResultPart(call_id="e1", name="send_email", output="sent")]),
        Message.assistant("Sent."),
    ]


def test_a_fork_at_a_reply_that_called_tools_answers_the_calls_so_it_can_be_continued(store: SessionStore) -> None:
    # Issue 18, item 11: forked at the reply, the session ended with a call nobody answered, and every run
    # that continued it was refused by the provider (while check and verify called it sound).
    from loopctl.engine import BareLoop
    from loopctl.store.base import FORKED_HERE
    from loopctl.testing import ScriptedClient

    done = store.append("orig", _sent_email(), expected_head=None)
    info = store.fork("orig", at=done.node_ids[1], new_id="redo")
    forked = store.load("redo")
    assert [m.role for m in forked.messages] == [Role.USER, Role.ASSISTANT, Role.USER]
    (answer,) = forked.messages[2].parts
    assert answer == ToolResultPart(call_id="e1", name="send_email", output=FORKED_HERE, is_error=True)
    assert FORKED_HERE == "Not run: the session was forked here."
    assert forked.node_ids[:2] == done.node_ids[:2]  # the prefix is shared
    assert [h.kind for h in store.heads("redo")] == ["fork", "fork"]
    assert info.length == 3 and store.verify("redo") == []
    # a run continues it (the scripted client refuses what providers refuse, as the codecs do)
    client = ScriptedClient(["Not sending it again."])
    run = await_run(BareLoop(client, store=store, session_id="redo"), "actually, don't")
    assert run.ok
    assert [m.role for m in client.requests[0].messages] == [Role.USER, Role.ASSISTANT, Role.USER, Role.USER]
    assert list(store.load("orig").messages) == _sent_email()  # the original is untouched


def test_a_fork_at_a_head_paused_for_approval_keeps_its_calls_pending(store: SessionStore) -> None:
    m = LoopMachine()
    m.accept_input("mail ada")
    m.model_response(_sent_email()[1], {"send_email"}, 10)
    m.tool_results([], deferred=["e1"])
    assert m.state is MachineState.AWAITING_APPROVAL
    store.append("paused", list(m.full_history()), expected_head=None, state=SessionState.of(m))
    store.fork("paused", new_id="copy")
    copy = store.load("copy")
    assert len(copy.messages) == 2 and copy.state.outcome == "awaiting_approval"
    assert [p.id for p in copy.machine().pending_approvals] == ["e1"]
    assert store.verify("copy") == []


def test_a_head_at_rest_with_unanswered_calls_is_continued_from_its_coherent_prefix(store: SessionStore) -> None:
    from loopctl.engine import BareLoop
    from loopctl.testing import ScriptedClient

    store.append("cut", _sent_email()[:2], expected_head=None)
    client = ScriptedClient(["What should I do?"])
    run = await_run(BareLoop(client, store=store, session_id="cut"), "hello again")
    assert run.ok
    # like a run cut mid-turn: the reply whose calls have no result is dropped
    assert [m.text_content() for m in client.requests[0].messages] == ["mail ada", "hello again"]
    assert [m.text_content() for m in store.load("cut").messages] == ["mail ada", "hello again", "What should I do?"]
    assert store.verify("cut") == []


def await_run(loop: Any, task: str) -> Any:
    return loop.run_sync(task)


def test_a_node_is_found_by_a_prefix_of_its_id(store: SessionStore) -> None:
    done = store.append("s", [Message.user("a"), Message.user("b")], expected_head=None)
    assert done.head is not None
    assert store.find_node(done.head[:8].upper()) == done.head
    for bad in ("ab", "zzzz", "x" * 65):  # "zzzz" was told it needed "at least 4" digits, which it had
        with pytest.raises(ValueError) as caught:
            store.find_node(bad)
        assert str(caught.value) == f"invalid node id {bad!r}: expected 4 to 64 of its hex digits (0-9, a-f)"
    with pytest.raises(SessionNotFound):
        store.find_node("0000000")


# --- verification ----------------------------------------------------------------------------------------------


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def test_verify_finds_a_flipped_byte_in_a_message(store: SessionStore) -> None:
    done = store.append("s", _conversation(2), expected_head=None)
    target = bytes.fromhex(done.node_ids[3])
    body = bytes(raw(store, "SELECT body FROM loopctl_nodes WHERE id = ?", (target,))[0][0])
    raw(store, "UPDATE loopctl_nodes SET body = ? WHERE id = ?", (_flip(body, body.index(b"read") + 1), target))
    problems = store.verify("s")
    assert [(p.node, p.index) for p in problems] == [(done.node_ids[3], 3)]
    assert "does not match its id" in problems[0].problem
    assert str(problems[0]).startswith(f"session 's', node {done.node_ids[3][:12]} (message 3): ")


def test_verify_finds_a_flipped_byte_in_a_payload(store: SessionStore) -> None:
    done = store.append("s", _conversation(1), expected_head=None)  # the tool output is a blob
    ((key, data),) = raw(store, "SELECT hash, data FROM loopctl_blobs")
    raw(store, "UPDATE loopctl_blobs SET data = ? WHERE hash = ?", (_flip(bytes(data), 10), key))
    problems = store.verify("s")
    assert [(p.node, p.index) for p in problems] == [(done.node_ids[2], 2)]
    assert "does not match its hash" in problems[0].problem


def test_verify_finds_a_broken_link_and_load_refuses_it(store: SessionStore) -> None:
    done = store.append("s", _conversation(2), expected_head=None)
    target = bytes.fromhex(done.node_ids[1])
    raw(store, "UPDATE loopctl_nodes SET id = ? WHERE id = ?", (_flip(target, 0), target))
    problems = store.verify("s")
    assert any(p.node == done.node_ids[1] and "missing" in p.problem for p in problems)
    with pytest.raises(StoreCorrupt, match="a link is missing"):
        store.load("s")


def test_verify_checks_every_chain_the_head_pointed_to(store: SessionStore) -> None:
    first = store.append("s", _conversation(1), expected_head=None)
    store.append("s", [Message.user("summary")], expected_head=first.head, parent=None)
    target = bytes.fromhex(first.node_ids[0])
    body = bytes(raw(store, "SELECT body FROM loopctl_nodes WHERE id = ?", (target,))[0][0])
    raw(store, "UPDATE loopctl_nodes SET body = ? WHERE id = ?", (body.replace(b"task", b"tusk"), target))
    assert [p.node for p in store.verify("s")] == [first.node_ids[0]]


def test_verify_finds_a_head_moved_back_by_hand(store: SessionStore) -> None:
    # Issue 18, item 3: the last two messages dropped by moving the row's head back (length and state made to
    # fit, so every hash still matches); the head log still names the real head.
    done = store.append("s", _conversation(2), expected_head=None)
    assert done.head is not None
    earlier = bytes.fromhex(done.node_ids[2])
    raw(
        store,
        "UPDATE loopctl_sessions SET head = ?, length = ?, state = ? WHERE id = ?",
        (earlier, 3, SessionState.at_rest(3).to_bytes(), "s"),
    )
    assert len(store.load("s").messages) == 3  # it loads: only the head log tells
    problems = store.verify("s")
    assert [(p.node, p.index) for p in problems] == [(done.node_ids[2], None)]
    assert problems[0].problem == (
        f"its head is not the one its head log last recorded (revision 1, node {done.head[:12]}): "
        "the row was changed after it was written"
    )


def test_verify_finds_a_revision_the_head_log_never_recorded(store: SessionStore) -> None:
    done = store.append("s", _conversation(1), expected_head=None)
    store.append("s", [Message.assistant("done")], expected_head=done.head)
    raw(store, "DELETE FROM loopctl_heads WHERE session_id = ? AND revision = 2", ("s",))
    problems = store.verify("s")
    assert [p.problem for p in problems] == [
        "its row is at revision 2 but its head log ends at revision 1: the row was changed after it was written"
    ]


def test_a_state_of_a_newer_format_is_refused_loudly(store: SessionStore) -> None:
    store.append("s", [Message.user("x")], expected_head=None)
    state = orjson.loads(bytes(raw(store, "SELECT state FROM loopctl_sessions WHERE id = ?", ("s",))[0][0]))
    state["format_version"] = 2
    raw(store, "UPDATE loopctl_sessions SET state = ? WHERE id = ?", (orjson.dumps(state), "s"))
    with pytest.raises(StoreCorrupt, match="format_version 2 is newer than this release of loopctl reads"):
        store.load("s")
    assert any("newer" in p.problem for p in store.verify("s"))


@pytest.mark.parametrize("cost", ["abc", "", "NaN", "-1"])
def test_a_corrupted_cost_limit_is_reported_as_a_corrupt_store(store: SessionStore, cost: str) -> None:
    # Issue 18, item 20: a stored cost limit that is not a number raised decimal.InvalidOperation from load.
    from loopctl.engine import UsageLimits

    m = LoopMachine()
    m.accept_input("hi", limits=UsageLimits(cost=Decimal("0.5")))
    store.create("s")
    store.append("s", list(m.full_history()), expected_head=None, state=SessionState.of(m))
    state = orjson.loads(bytes(raw(store, "SELECT state FROM loopctl_sessions WHERE id = ?", ("s",))[0][0]))
    assert state["machine"]["limits"]["cost"] == "0.5"
    state["machine"]["limits"]["cost"] = cost
    raw(store, "UPDATE loopctl_sessions SET state = ? WHERE id = ?", (orjson.dumps(state), "s"))
    with pytest.raises(StoreCorrupt, match=r"session 's': machine: limits.cost must be a (finite )?number of USD"):
        store.load("s").machine()


def test_a_database_of_a_newer_schema_is_refused_loudly(
    store: SessionStore, open_store: Callable[[], SessionStore]
) -> None:
    raw(store, "UPDATE loopctl_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1} is newer"):
        open_store()


# --- session files ---------------------------------------------------------------------------------------------


def test_a_session_file_imports_and_exports_unchanged(store: SessionStore, tmp_path: Path) -> None:
    m = LoopMachine()
    m.accept_input("hi")
    m.model_response(Message.new(Role.ASSISTANT, [ToolCallPart(id="c", name="ls", input={})]), {"ls"}, 5)
    m.tool_results([Message.new(Role.USER, [ToolResultPart(call_id="c", name="ls", output="a.py")])])
    m.model_response(Message.assistant("one file"), set(), 9)
    original = Session(m, model="openai:gpt", root="/w", system_prompt="sys", metadata={"tag": "x"})
    path = tmp_path / "20250101-120000.json"
    original.save(path)
    info = store.import_file(path)
    assert info.id == "20250101-120000" and info.length == 4
    again = store.import_file(path)
    assert again.id.startswith("20250101-120000-") and again.id != info.id
    with pytest.raises(SessionExists):
        store.import_file(path, session_id=info.id)
    out = tmp_path / "out.json"
    store.export_file(info.id, out)
    assert out.read_bytes() == path.read_bytes()
    assert [h.kind for h in store.heads(info.id)] == ["import"]


def test_a_conversation_file_imports_as_a_session_at_rest(store: SessionStore, tmp_path: Path) -> None:
    msgs = every_kind()
    save_conversation(tmp_path / "chat.json", msgs)
    info = store.import_file(tmp_path / "chat.json", session_id="chat")
    machine = store.load(info.id).machine()
    assert list(machine.history) == msgs and machine.state is MachineState.START


def test_a_file_that_is_not_a_session_is_refused_naming_it(store: SessionStore, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "loopctl-session", "format_version": 9, "machine": {}}')
    with pytest.raises(ConversationFileError, match=r"bad\.json: format_version 9 is newer"):
        store.import_file(bad)
    assert store.sessions() == []


def test_blobs_put_beside_the_sessions_come_back_by_their_hash(store: SessionStore) -> None:
    from loopctl.store.chain import blob_hash

    data, other = b"\x00image bytes\xff" * 100, b"another"
    key = blob_hash(data)
    store.put_blobs({key: data})
    store.put_blobs({key: data, blob_hash(other): other})  # a key already stored is left as it is
    assert store.get_blobs([key, blob_hash(other), blob_hash(b"never stored")]) == {key: data, blob_hash(other): other}
    with pytest.raises(ValueError, match="not the SHA-256"):
        store.put_blobs({blob_hash(b"something else"): b"x"})
    assert store.get_blobs([blob_hash(b"something else")]) == {}
