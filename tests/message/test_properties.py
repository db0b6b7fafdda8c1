"""Property tests of the wire form over generated messages and conversations (``tests/strategies.py``).

Sources: issue 2, "The JSON wire form" (serializing the same message twice gives identical bytes;
``from_json(to_json(m)) == m`` for every ``m``), ``spec/python-api.md`` (compact output, non-ASCII as UTF-8),
and the guide's reader rules (``text_content`` joins with no separator, Display joins with newlines).
The strategies include non-ASCII, emoji and strings of several thousand characters.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from loopctl import Message, MessagePart
from loopctl.message import (
    TextPart,
    check_conversation,
    dumps_conversation,
    dumps_conversation_bytes,
    load_conversation,
    loads_conversation,
    save_conversation,
)
from tests.strategies import conversations, messages, wire_part

SETTINGS = settings(max_examples=300, deadline=None)


@SETTINGS
@given(messages())
def test_from_json_of_to_json_gives_the_same_message(message: Message) -> None:
    assert Message.from_json(message.to_json()) == message


@SETTINGS
@given(messages())
def test_to_json_twice_gives_identical_bytes_and_survives_a_round_trip(message: Message) -> None:
    first = message.to_json()
    assert message.to_json() == first
    assert Message.from_json(first).to_json() == first
    assert Message.from_json(first.encode()).to_json() == first


@SETTINGS
@given(messages())
def test_from_dict_of_to_dict_gives_the_same_message(message: Message) -> None:
    assert Message.from_dict(message.to_dict()) == message
    assert Message.from_dict(json.loads(message.to_json())) == message


@SETTINGS
@given(messages())
def test_to_json_is_the_compact_json_of_to_dict(message: Message) -> None:
    text = message.to_json()
    assert json.loads(text) == message.to_dict()
    assert "\n" not in text  # newlines inside strings are escaped; no pretty-printing


@SETTINGS
@given(wire_part)
def test_a_part_round_trips_through_its_dict_and_json(part: MessagePart) -> None:
    assert MessagePart.from_dict(part.to_dict()) == part
    assert MessagePart.from_dict(json.loads(part.to_json())) == part
    assert part.to_json() == MessagePart.from_dict(json.loads(part.to_json())).to_json()


# Printable text with no character JSON must escape: it must appear in the output exactly as given.
_verbatim = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"), exclude_characters='"\\'), max_size=3000
)


@SETTINGS
@given(_verbatim)
def test_non_ascii_text_is_written_as_utf8_without_escapes(text: str) -> None:
    assert TextPart(text=text).to_json() == '{"type":"text","text":"' + text + '"}'


@SETTINGS
@given(messages())
def test_text_content_is_the_text_parts_joined_with_no_separator(message: Message) -> None:
    assert message.text_content() == "".join(p.text for p in message.parts if isinstance(p, TextPart))


@settings(max_examples=150, deadline=None)
@given(conversations())
def test_a_conversation_round_trips_through_dumps_and_loads(conversation: list[Message]) -> None:
    text = dumps_conversation(conversation)
    assert loads_conversation(text) == conversation
    assert dumps_conversation(loads_conversation(text)) == text
    data = dumps_conversation_bytes(conversation)
    assert data == text.encode("utf-8")
    assert loads_conversation(data) == conversation


@settings(max_examples=150, deadline=None)
@given(st.lists(messages(), max_size=6))
def test_any_list_of_messages_round_trips_through_dumps_and_loads(conversation: list[Message]) -> None:
    text = dumps_conversation(conversation)
    assert loads_conversation(text) == conversation
    assert dumps_conversation(conversation) == text
    bare = json.dumps([m.to_dict() for m in conversation], ensure_ascii=True)
    assert loads_conversation(bare) == conversation


@settings(max_examples=50, deadline=None)
@given(conversations())
def test_a_conversation_round_trips_through_a_file_and_still_passes_the_checks(conversation: list[Message]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "chat.json"
        save_conversation(path, conversation)
        loaded = load_conversation(path)
        assert path.read_bytes() == dumps_conversation_bytes(conversation)
    assert loaded == conversation
    assert check_conversation(loaded) == []
