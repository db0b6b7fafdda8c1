"""A string that cannot be written as UTF-8 (a lone surrogate) that still reaches a codec is refused with
``UnsupportedContent`` naming its path, in every codec, before a body is built.

The message model refuses such strings where a part is built (``tests/message/test_unicode.py``); one built
without validation (``model_construct``, a lenient reader) went into every codec's body and failed later in
the client with a bare ``TypeError`` (orjson) or ``UnicodeEncodeError`` (the SDKs' JSON), which ``run()``
raised instead of ending the run with an outcome.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from loopctl.engine import BareLoop, LoopMachine, RunConfig
from loopctl.errors import UnsupportedContent
from loopctl.message import Message, Role, TextPart, ThinkingPart, ToolCallPart, ToolContent, ToolResultPart
from loopctl.providers import anthropic, gemini, openai_chat, openai_responses
from loopctl.testing import FakeProviderServer
from loopctl.tool import ToolSchema
from tests.fake_clients import KINDS, make_client

CODECS = [anthropic, gemini, openai_chat, openai_responses]
MODEL = {"anthropic": "claude-x", "gemini": "gemini-2.5-flash", "openai_chat": "gpt-4o", "openai_responses": "gpt-5"}
BAD = "half \ud83d"


def name(codec: ModuleType) -> str:
    return codec.__name__.rsplit(".", 1)[-1]


def build(codec: ModuleType, messages: list[Message], **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = codec.build_request(messages, model=MODEL[name(codec)], **kw)
    return body


def unchecked_text(text: str) -> TextPart:
    return TextPart.model_construct(text=text)


def unchecked(role: Role, *parts: Any) -> Message:
    """A message built without validation (the model refuses these strings)."""
    return Message.model_construct(role=role, parts=parts)


CALL = ToolCallPart(id="call_1", name="lookup", input={"q": "x"})


CASES: dict[str, tuple[list[Message], str]] = {
    "user text": ([Message.user("ok"), unchecked(Role.USER, unchecked_text(BAD))], "messages[1].parts[0].text"),
    "assistant text": (
        [Message.user("hi"), unchecked(Role.ASSISTANT, unchecked_text(BAD)), Message.user("go on")],
        "messages[1].parts[0].text",
    ),
    "tool input": (
        [
            Message.user("hi"),
            unchecked(Role.ASSISTANT, ToolCallPart.model_construct(id="call_1", name="lookup", input={"q": [BAD]})),
            Message.new(Role.USER, [ToolResultPart(call_id="call_1", name="lookup", output="r")]),
        ],
        "messages[1].parts[0].input.q[0]",
    ),
    "tool output": (
        [
            Message.user("hi"),
            Message.new(Role.ASSISTANT, [CALL]),
            unchecked(
                Role.USER,
                ToolResultPart.model_construct(call_id="call_1", name="lookup", output=ToolContent.model_construct(root=BAD)),
            ),
        ],
        "messages[2].parts[0].output",
    ),
    "thinking signature": (
        [
            Message.user("hi"),
            unchecked(Role.ASSISTANT, ThinkingPart.model_construct(text="t", signature=BAD), TextPart(text="a")),
            Message.user("go on"),
        ],
        "messages[1].parts[0].signature",
    ),
}  # fmt: skip


@pytest.mark.parametrize("codec", CODECS, ids=name)
@pytest.mark.parametrize("case", list(CASES))
def test_a_lone_surrogate_in_a_message_is_unsupported_content_naming_its_path(codec: ModuleType, case: str) -> None:
    messages, path = CASES[case]
    with pytest.raises(UnsupportedContent) as info:
        build(codec, messages)
    assert str(info.value).startswith(f"{path}: a string that is not valid Unicode (a lone surrogate) cannot be sent")
    str(info.value).encode("utf-8")  # the error itself is printable


@pytest.mark.parametrize("codec", CODECS, ids=name)
@pytest.mark.parametrize(
    ("options", "path"),
    [
        ({"system": BAD}, "system"),
        ({"tools": [ToolSchema("lookup", BAD)]}, "tools[0].description"),
        ({"tools": [ToolSchema("lookup", "d", {"type": "object", "properties": {"q": {"description": BAD}}})]},
         "tools[0].input_schema.properties.q.description"),
    ],
)  # fmt: skip
def test_a_lone_surrogate_in_the_system_prompt_or_a_tool_is_unsupported_content(
    codec: ModuleType, options: dict[str, Any], path: str
) -> None:
    with pytest.raises(UnsupportedContent) as info:
        build(codec, [Message.user("hi")], **options)
    assert str(info.value).startswith(f"{path}: a string that is not valid Unicode")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_run_over_such_a_history_ends_with_an_outcome_instead_of_raising(kind: str) -> None:
    history = [unchecked(Role.USER, unchecked_text(BAD)), Message.assistant("noted")]
    with FakeProviderServer(["never sent"]) as server:
        client = make_client(kind, server)
        loop = BareLoop(client, [], machine=LoopMachine(history))
        run = await loop.run("and now?", RunConfig(max_turns=2))
        await client.aclose()
        assert server.requests == []
    assert not run.ok
    assert run.outcome.error_type == "UnsupportedContent"
    assert "messages[0].parts[0].text" in (run.outcome.error or "")
