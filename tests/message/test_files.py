"""Conversation files: the versioned document, the bare array, the version policy, atomic writes, errors.

Sources: ``spec/python-api.md``, "Wire form (JSON)", the conversation-files bullet (``dumps_conversation``,
``loads_conversation``, ``save_conversation`` (atomic), ``load_conversation``; ``{"format_version": 1,
"messages": [...]}``; newer versions refused with a clear error; a bare array accepted), and the policy
next to ``FORMAT_VERSION`` in ``loopctl/message/files.py`` (``docs/wire-format.md``).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from loopctl import Message, MessagePart, Role
from loopctl.errors import ConversationFileError, InvalidMessage, LoopError
from loopctl.message import (
    FORMAT_VERSION,
    TextPart,
    dumps_conversation,
    dumps_conversation_bytes,
    load_conversation,
    loads_conversation,
    save_conversation,
)

CONVERSATION = [
    Message.user("What is in notes.txt?"),
    Message.new(Role.ASSISTANT, [MessagePart.tool_call("call_1", "read_file", {"path": "notes.txt"})]),
    Message.new(Role.USER, [MessagePart.tool_result("call_1", "read_file", "meeting notes: buy milk", False)]),
    Message.assistant("The file says: buy milk — d’accord 🚀"),
]
OLD = [Message.user("the old conversation")]


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def file_error(fn: object, *args: object) -> ConversationFileError:
    with pytest.raises(ConversationFileError) as info:
        fn(*args)  # type: ignore[operator]
    return info.value


# --- the format ----------------------------------------------------------------------------------------------


def test_format_version_is_1() -> None:
    assert FORMAT_VERSION == 1


def test_dumps_writes_a_format_version_1_object_with_messages() -> None:
    text = dumps_conversation([Message.user("hi")])
    assert text == '{"format_version":1,"messages":[{"role":"user","parts":[{"type":"text","text":"hi"}]}]}'


def test_dumps_of_an_empty_conversation() -> None:
    assert dumps_conversation([]) == '{"format_version":1,"messages":[]}'
    assert loads_conversation('{"format_version":1,"messages":[]}') == []


def test_dumps_bytes_is_the_utf8_of_dumps() -> None:
    assert dumps_conversation_bytes(CONVERSATION) == dumps_conversation(CONVERSATION).encode("utf-8")
    assert "🚀".encode() in dumps_conversation_bytes(CONVERSATION)


def test_dumps_accepts_any_iterable_of_messages() -> None:
    assert dumps_conversation(iter(CONVERSATION)) == dumps_conversation(CONVERSATION)


def test_loads_reads_what_dumps_writes_from_str_and_bytes() -> None:
    assert loads_conversation(dumps_conversation(CONVERSATION)) == CONVERSATION
    assert loads_conversation(dumps_conversation_bytes(CONVERSATION)) == CONVERSATION


def test_loads_accepts_a_bare_array_as_the_original_writes() -> None:
    bare = json.dumps([m.to_dict() for m in CONVERSATION], indent=2)
    assert loads_conversation(bare) == CONVERSATION
    assert loads_conversation("  [ ]  ") == []


def test_loads_accepts_whitespace_and_pretty_printing() -> None:
    pretty = json.dumps(json.loads(dumps_conversation(CONVERSATION)), indent=4, ensure_ascii=True)
    assert loads_conversation("\n\t " + pretty + "\n") == CONVERSATION


def test_loads_ignores_unknown_top_level_keys() -> None:
    doc = {"format_version": 1, "created_by": "a later tool", "messages": [Message.user("a").to_dict()]}
    assert loads_conversation(json.dumps(doc)) == [Message.user("a")]


# --- the version policy --------------------------------------------------------------------------------------


def test_a_newer_format_version_is_refused_with_an_error_that_says_so() -> None:
    err = file_error(loads_conversation, '{"format_version":3,"messages":[]}')
    assert (
        str(err)
        == "<string>: format_version 3 is newer than this release of loopctl reads (2); upgrade loopctl to read it"
    )


def test_a_newer_format_version_with_a_different_shape_still_says_newer() -> None:
    doc = '{"format_version":7,"messages":{"segments":[{"kind":"new"}]}}'
    assert "format_version 7 is newer" in str(file_error(loads_conversation, doc))
    doc = '{"format_version":3,"messages":[{"role":"user","parts":[{"type":"hologram"}]}]}'
    assert "format_version 3 is newer" in str(file_error(loads_conversation, doc))


def test_a_format_version_below_1_is_refused() -> None:
    for version in (0, -1):
        err = file_error(loads_conversation, json.dumps({"format_version": version, "messages": []}))
        assert str(err) == f"<string>: format_version {version} is not a valid version (expected 1)"


def test_a_format_version_that_is_not_an_integer_is_refused() -> None:
    for version in ('"1"', "1.0", "true", "null"):
        err = file_error(loads_conversation, '{"format_version":' + version + ',"messages":[]}')
        assert str(err) == "<string>: format_version must be an integer (expected 1)", version


def test_an_object_without_format_version_is_refused() -> None:
    err = file_error(loads_conversation, '{"messages":[]}')
    assert str(err) == "<string>: format_version is missing (expected 1)"


def test_an_object_without_messages_or_with_non_array_messages_is_refused() -> None:
    assert str(file_error(loads_conversation, '{"format_version":1}')) == (
        "<string>: messages is missing (expected an array of messages)"
    )
    assert str(file_error(loads_conversation, '{"format_version":1,"messages":{}}')) == (
        "<string>: messages must be an array of messages"
    )


# --- corrupt input -------------------------------------------------------------------------------------------


def test_conversation_file_error_is_a_loop_error_and_a_value_error() -> None:
    assert issubclass(ConversationFileError, LoopError)
    assert issubclass(ConversationFileError, ValueError)


def test_text_that_is_not_json_is_refused() -> None:
    err = file_error(loads_conversation, '{"format_version":1,"messages":[')
    assert str(err).startswith("<string>: not valid JSON (")
    assert err.source == "<string>"


def test_a_document_that_is_neither_object_nor_array_is_refused() -> None:
    for text in ('"a string"', "42", "", "   ", "null"):
        err = file_error(loads_conversation, text)
        assert str(err) == (
            "<string>: expected a JSON object with format_version and messages, or a JSON array of messages"
        )


def test_bytes_that_are_not_utf8_are_refused() -> None:
    err = file_error(loads_conversation, b'[{"role":"user","parts":[{"type":"text","text":"\xff"}]}]')
    assert str(err).startswith("<string>: not valid JSON (")


def test_a_str_with_a_lone_surrogate_is_refused() -> None:
    err = file_error(loads_conversation, '[{"role":"user","parts":[{"type":"text","text":"\ud800"}]}]')
    assert str(err) == "<string>: not valid Unicode text (a lone surrogate)"


def test_a_bad_message_in_a_bare_array_names_its_path() -> None:
    err = file_error(loads_conversation, '[{"role":"user","parts":[]},{"role":"user","parts":[{"type":"text"}]}]')
    assert str(err) == "<string>: messages[1].parts[0].text: a value is required here (missing key)"
    assert isinstance(err.__cause__, InvalidMessage)


def test_a_bad_message_in_a_versioned_file_names_its_path() -> None:
    doc = '{"format_version":1,"messages":[{"role":"user","parts":[{"type":"text","text":1}]}]}'
    assert str(file_error(loads_conversation, doc)) == "<string>: messages[0].parts[0].text: expected a string"


def test_the_source_argument_names_the_origin_in_errors() -> None:
    err = file_error(lambda: loads_conversation("nope", source="chat.json"))
    assert err.source == "chat.json"
    assert str(err).startswith("chat.json: ")


def test_a_corrupt_file_gives_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_bytes(b'{"format_version":1,"messages":[{"role":"us')
    err = file_error(load_conversation, path)
    assert err.source == str(path)
    assert str(err).startswith(f"{path}: not valid JSON (")


def test_a_file_with_a_bad_message_gives_an_error_naming_the_file_and_path(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text('[{"role":"user","parts":[{"type":"image","source":{"media_type":"image/png","data":"%"}}]}]')
    err = file_error(load_conversation, path)
    assert str(err).startswith(f"{path}: messages[0].parts[0].source.data: expected standard base64 image data")


def test_a_newer_file_gives_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "future.json"
    path.write_text('{"format_version":99,"messages":[]}')
    assert str(file_error(load_conversation, str(path))) == (
        f"{path}: format_version 99 is newer than this release of loopctl reads (2); upgrade loopctl to read it"
    )


def test_a_missing_or_unreadable_file_gives_an_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    assert str(file_error(load_conversation, missing)) == f"{missing}: cannot read the file (No such file or directory)"
    assert file_error(load_conversation, tmp_path).source == str(tmp_path)


def test_loading_never_changes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    raw = b'[{"role":"user","parts":[{"type":"text","text":"old format"}]}]'
    path.write_bytes(raw)
    before = path.stat().st_mtime_ns
    assert load_conversation(path) == [Message.user("old format")]
    assert path.read_bytes() == raw
    assert path.stat().st_mtime_ns == before


# --- saving --------------------------------------------------------------------------------------------------


def test_save_writes_exactly_the_dumps_bytes_and_load_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    save_conversation(path, CONVERSATION)
    assert path.read_bytes() == dumps_conversation_bytes(CONVERSATION)
    assert load_conversation(path) == CONVERSATION
    assert files_in(tmp_path) == ["chat.json"]


def test_save_accepts_a_str_path_and_replaces_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    save_conversation(str(path), OLD)
    save_conversation(str(path), CONVERSATION)
    assert load_conversation(path) == CONVERSATION
    assert files_in(tmp_path) == ["chat.json"]


def test_save_then_load_round_trips_a_bare_array_file_to_the_versioned_form(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([m.to_dict() for m in CONVERSATION]))
    save_conversation(path, load_conversation(path))
    assert path.read_text(encoding="utf-8").startswith('{"format_version":1,"messages":[')


def test_a_failed_rename_leaves_the_old_file_intact_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "chat.json"
    save_conversation(path, OLD)
    old_bytes = path.read_bytes()

    def crash(src: object, dst: object) -> None:
        raise OSError("disk pulled out mid-rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk pulled out"):
        save_conversation(path, CONVERSATION)
    assert path.read_bytes() == old_bytes
    assert files_in(tmp_path) == ["chat.json"]


def test_a_failure_while_writing_leaves_the_old_file_intact_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "chat.json"
    save_conversation(path, OLD)
    old_bytes = path.read_bytes()

    def crash(fd: int) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="no space left"):
        save_conversation(path, CONVERSATION)
    assert path.read_bytes() == old_bytes
    assert files_in(tmp_path) == ["chat.json"]


def test_an_interrupt_while_writing_leaves_the_old_file_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "chat.json"
    save_conversation(path, OLD)

    def interrupt(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupt)
    with pytest.raises(KeyboardInterrupt):
        save_conversation(path, CONVERSATION)
    assert load_conversation(path) == OLD
    assert files_in(tmp_path) == ["chat.json"]


def test_a_message_that_cannot_be_serialized_leaves_the_old_file_intact(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    save_conversation(path, OLD)
    old_bytes = path.read_bytes()
    # Built without validation (the constructors refuse a lone surrogate): still never written.
    bad = [
        Message.user("fine"),
        Message.model_construct(role=Role.USER, parts=(TextPart.model_construct(text="cut in half \ud83d"),)),
    ]
    with pytest.raises(InvalidMessage) as info:
        save_conversation(path, bad)
    assert info.value.path == "messages[1].parts[0].text"
    assert path.read_bytes() == old_bytes
    assert files_in(tmp_path) == ["chat.json"]


def test_a_new_file_gets_the_permissions_open_would_give(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    os.umask(umask)
    path = tmp_path / "chat.json"
    save_conversation(path, OLD)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


def test_a_replaced_file_keeps_its_permissions(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    save_conversation(path, OLD)
    path.chmod(0o640)
    save_conversation(path, CONVERSATION)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert load_conversation(path) == CONVERSATION


def test_saving_into_a_missing_folder_raises_os_error_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        save_conversation(tmp_path / "no" / "chat.json", OLD)
    assert files_in(tmp_path) == []
