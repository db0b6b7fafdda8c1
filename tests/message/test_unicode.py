"""A string with a lone surrogate is refused where a message or part is built, naming its path.

Such a string (text cut inside a surrogate pair, bytes decoded with ``surrogateescape``) cannot be written as
UTF-8: ``Message.user("half \\ud83d")`` went into every codec's body and failed later in the client with a bare
``TypeError`` / ``UnicodeEncodeError``, and a conversation holding it could be neither sent nor saved. Every
way a string gets into a part is checked: the constructors and helpers, ``from_dict`` / ``model_validate``,
``from_json`` (pydantic's JSON parser refuses an unpaired escape itself) and ``model_copy``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from loopctl import ImageSource, Message, MessagePart, Role, ToolContent
from loopctl.errors import InvalidMessage
from loopctl.message import ImagePart, TextPart, ThinkingPart, ToolCallPart, ToolResultPart

BAD = "half \ud83d"
EXPECTED = "expected a string that is valid Unicode (found a lone surrogate)"
PNG = "iVBORw0KGgo="


def path_of(fn: Callable[[], object]) -> str:
    with pytest.raises(InvalidMessage) as info:
        fn()
    assert info.value.expected == EXPECTED
    str(info.value)  # printable
    return info.value.path


@pytest.mark.parametrize(
    ("build", "path"),
    [
        (lambda: Message.user(BAD), "parts[0].text"),
        (lambda: Message.assistant(BAD), "parts[0].text"),
        (lambda: MessagePart.text(BAD), "text"),
        (lambda: TextPart(text=BAD), "text"),
        (lambda: TextPart(text="ok", item_id=BAD), "item_id"),
        (lambda: ThinkingPart(text=BAD), "text"),
        (lambda: ThinkingPart(text="", signature=BAD), "signature"),
        (lambda: ThinkingPart(text="", redacted=BAD), "redacted"),
        (lambda: ThinkingPart(text="", provider=BAD), "provider"),
        (lambda: ThinkingPart(text="", item_id=BAD), "item_id"),
        (lambda: MessagePart.tool_call(BAD, "t", {}), "id"),
        (lambda: MessagePart.tool_call("c", BAD, {}), "name"),
        (lambda: ToolCallPart(id="c", name="t", input={}, item_id=BAD), "item_id"),
        (lambda: ToolCallPart(id="c", name="t", input={}, provider=BAD), "provider"),
        (lambda: MessagePart.tool_call("c", "t", {"path": BAD}), "input.path"),
        (lambda: MessagePart.tool_call("c", "t", {"a": [1, {"b": BAD}]}), "input.a[1].b"),
        (lambda: MessagePart.tool_call("c", "t", BAD), "input"),
        (lambda: MessagePart.tool_call("c", "t", {BAD: 1}), "input.half \\ud83d"),  # the key, escaped
        (lambda: MessagePart.tool_result(BAD, "t", "out"), "call_id"),
        (lambda: MessagePart.tool_result("c", BAD, "out"), "name"),
        (lambda: MessagePart.tool_result("c", "t", BAD), "output"),
        (lambda: MessagePart.tool_result("c", "t", [TextPart(text="ok"), {"type": "text", "text": BAD}]), "output[1].text"),  # type: ignore[list-item]
        (lambda: ToolContent(BAD), ""),
        (lambda: ToolContent.from_string(BAD), ""),
        (lambda: ImageSource.new_base64(BAD, PNG), "media_type"),
        (lambda: Message.new(Role.USER, [TextPart(text="ok"), {"type": "text", "text": BAD}]), "parts[1].text"),  # type: ignore[list-item]
    ],
)  # fmt: skip
def test_every_constructor_refuses_a_lone_surrogate_with_its_path(build: Callable[[], object], path: str) -> None:
    assert path_of(build) == path


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"role": "user", "parts": [{"type": "text", "text": BAD}]}, "parts[0].text"),
        ({"role": "assistant", "parts": [{"type": "thinking", "text": "t", "signature": BAD}]}, "parts[0].signature"),
        (
            {"role": "assistant", "parts": [{"type": "tool_call", "id": "c", "name": "t", "input": {"q": [BAD]}}]},
            "parts[0].input.q[0]",
        ),
        (
            {"role": "user", "parts": [{"type": "tool_result", "call_id": "c", "name": "t", "output": BAD, "is_error": False}]},
            "parts[0].output",
        ),
        (
            {"role": "user", "parts": [{"type": "image", "source": {"encoding": "base64", "media_type": BAD, "data": PNG}}]},
            "parts[0].source.media_type",
        ),
    ],
)  # fmt: skip
def test_reading_from_python_values_refuses_a_lone_surrogate(data: dict[str, Any], path: str) -> None:
    assert path_of(lambda: Message.from_dict(data)) == path
    assert path_of(lambda: MessagePart.from_dict(data["parts"][0])) == path.removeprefix("parts[0].")


def test_reading_json_refuses_an_unpaired_escape() -> None:
    # An escaped lone surrogate is invalid JSON text for pydantic's parser: refused before any field is built.
    with pytest.raises(InvalidMessage, match="invalid JSON"):
        Message.from_json('{"role":"user","parts":[{"type":"text","text":"half \\ud83d"}]}')
    # A pair written as two escapes is one character and reads fine.
    assert Message.from_json('{"role":"user","parts":[{"type":"text","text":"\\ud83d\\ude80"}]}').text_content() == "🚀"


@pytest.mark.parametrize(
    ("part", "update", "path"),
    [
        (TextPart(text="ok"), {"text": BAD}, "text"),
        (ThinkingPart(text="ok"), {"signature": BAD}, "signature"),
        (ToolCallPart(id="c", name="t", input={}), {"input": {"k": BAD}}, "input.k"),
        (ToolResultPart(call_id="c", name="t", output="ok"), {"output": BAD}, "output"),
        (ImageSource.new_base64("image/png", PNG), {"media_type": BAD}, "media_type"),
        (Message.user("ok"), {"parts": ({"type": "text", "text": BAD},)}, "parts[0].text"),
    ],
)
def test_model_copy_validates_what_it_puts_in(part: Any, update: dict[str, Any], path: str) -> None:
    # pydantic's model_copy sets the update unchecked: TextPart.model_copy(update={"text": 5}) gave a
    # TextPart whose text is 5.
    assert path_of(lambda: part.model_copy(update=update)) == path


def test_model_copy_refuses_values_of_the_wrong_type_and_unknown_fields() -> None:
    with pytest.raises(InvalidMessage, match=r"^text: expected a string$"):
        TextPart(text="ok").model_copy(update={"text": 5})
    with pytest.raises(InvalidMessage, match=r"^is_error: expected true, false or null$"):
        ToolResultPart(call_id="c", output="ok").model_copy(update={"is_error": "yes"})
    with pytest.raises(TypeError, match="TextPart has no field 'txt'"):
        TextPart(text="ok").model_copy(update={"txt": "x"})


def test_model_copy_still_copies_good_values() -> None:
    call = ToolCallPart(id="c", name="t", input={})
    assert call.model_copy(update={"input": {"n": 2**70}}) == ToolCallPart(id="c", name="t", input={"n": 2**70})
    assert TextPart(text="a").model_copy() == TextPart(text="a")
    image = ImagePart(source=ImageSource.new_base64("image/png", PNG))
    assert Message.user("x").model_copy(update={"parts": (image,)}).parts == (image,)


def test_valid_text_of_every_width_is_accepted() -> None:
    for text in ("plain", "café", "漢字", "🚀 \U0010ffff", "\ufffd", ""):
        assert Message.user(text).text_content() == text
        assert MessagePart.tool_call("c", "t", {text: [text]}).input == {text: [text]}
