"""Sessions persist atomically and refuse what they cannot read, naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopctl.engine import LoopMachine
from loopctl.errors import ConversationFileError
from loopctl.message import Message
from loopctl.session import Session


def _session() -> Session:
    m = LoopMachine()
    m.accept_input("hi")
    m.model_response(Message.assistant("hello"), set(), 10)
    return Session(m, model="anthropic:claude", root="/tmp/x", system_prompt="be kind", metadata={"k": 1})


def test_a_session_round_trips_through_a_file(tmp_path: Path) -> None:
    path = tmp_path / "s" / "session.json"
    s = _session()
    s.save(path)
    back = Session.load(path)
    assert (back.model, back.root, back.system_prompt, back.metadata) == (
        "anthropic:claude",
        "/tmp/x",
        "be kind",
        {"k": 1},
    )
    assert list(back.machine.history) == [Message.user("hi"), Message.assistant("hello")]
    assert back.to_bytes() == s.to_bytes()


def test_a_failed_save_leaves_the_previous_file_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "session.json"
    _session().save(path)
    before = path.read_bytes()

    def boom(*a: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(OSError, match="disk full"):
        Session(LoopMachine(), model="x").save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["session.json"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not valid JSON"),
        ('{"format_version":1}', "not a loopctl session file"),
        ('{"format_version":7,"kind":"loopctl-session","machine":{}}', "format_version 7 is newer"),
        ('{"format_version":1,"kind":"loopctl-session"}', "the session has no machine object"),
    ],
)
def test_unreadable_session_files_name_the_file_and_the_problem(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ConversationFileError) as info:
        Session.load(path)
    assert str(path) in str(info.value)
    assert problem in str(info.value)
    assert path.read_text() == text


def test_a_bad_message_inside_a_session_is_named(tmp_path: Path) -> None:
    text = _session().to_bytes().decode().replace('"text":"hello"', '"text":5')
    path = tmp_path / "s.json"
    path.write_text(text)
    with pytest.raises(
        ConversationFileError, match=r"machine: bad message at history\[1\]\.parts\[0\]\.text: expected a string"
    ):
        Session.load(path)


def test_a_new_session_file_is_private_to_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    Session(LoopMachine()).save(path)
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_session_keeps_an_integer_past_64_bits_exactly(tmp_path: Path) -> None:
    # Session.from_bytes read the file with orjson, which turned 2**70 + 1 into the float 2**70.
    from loopctl.message import MessagePart, Role

    call = MessagePart.tool_call("c1", "pick", {"id": 2**70 + 1})
    conversation = [
        Message.user("go"),
        Message.new(Role.ASSISTANT, [call]),
        Message.new(Role.USER, [MessagePart.tool_result("c1", "pick", "ok")]),
    ]
    path = tmp_path / "s.json"
    Session(LoopMachine(conversation)).save(path)
    (value,) = Session.load(path).machine.history[1].tool_calls()[0].input.values()  # type: ignore[union-attr]
    assert (type(value), value) == (int, 2**70 + 1)
