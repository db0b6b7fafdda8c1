"""An empty user prompt is refused only by the provider that refuses it.

Responses and Gemini were refused up front ("nothing to send") although both answer an empty user message
with a 200: Responses ``{"role": "user", "content": ""}``, Gemini ``{"role": "user", "parts": [{"text":
""}]}``. Chat already sent ``{"role": "user", "content": ""}``. Anthropic refuses empty text ("text content
blocks must contain non-whitespace text"); an empty prompt after a history was dropped there, so the request
ended on the assistant's turn, which Anthropic reads as a prefill to continue: now it is refused, naming the
message. Bodies are validated against each SDK's request type.
"""

from __future__ import annotations

from typing import Any

import pytest

from loopctl.errors import UnsupportedContent
from loopctl.message import Message, Role, TextPart
from loopctl.providers import anthropic, gemini, openai_chat, openai_responses
from tests.providers.responses_wire import validate_with_sdk as validate_responses
from tests.providers.test_gemini_properties import validate_with_the_sdk as validate_gemini
from tests.providers.test_openai_chat_properties import validate as validate_chat

HISTORY = [Message.user("Hi."), Message.assistant("Hello! What can I do?")]


@pytest.mark.parametrize("history", [[], HISTORY], ids=["alone", "after-a-history"])
def test_responses_sends_an_empty_prompt(history: list[Message]) -> None:
    body = openai_responses.build_request([*history, Message.user("")], model="gpt-5")
    validate_responses(body)
    assert body["input"][-1] == {"role": "user", "content": ""}


@pytest.mark.parametrize("history", [[], HISTORY], ids=["alone", "after-a-history"])
def test_gemini_sends_an_empty_prompt(history: list[Message]) -> None:
    body = gemini.build_request([*history, Message.user("")], model="gemini-2.5-flash")
    validate_gemini(body)
    assert body["contents"][-1] == {"role": "user", "parts": [{"text": ""}]}
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"][-len(body["contents"]) :]


def test_gemini_still_drops_empty_text_that_another_part_stands_in_for() -> None:
    # Only a prompt that would otherwise vanish is sent as empty text; empty text next to other content is
    # not sent (Vertex refuses an empty text part).
    body = gemini.build_request([Message.user("Look."), Message.user("")], model="gemini-2.5-flash")
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Look."}]}]
    conversation = [Message.new(Role.USER, [TextPart(text=""), TextPart(text="x")])]
    assert gemini.build_request(conversation, model="gemini-2.5-flash")["contents"][0]["parts"] == [{"text": "x"}]


@pytest.mark.parametrize("history", [[], HISTORY], ids=["alone", "after-a-history"])
def test_chat_sends_an_empty_prompt(history: list[Message]) -> None:
    body = openai_chat.build_request([*history, Message.user("")], model="gpt-4o")
    validate_chat(body)
    assert body["messages"][-1] == {"role": "user", "content": ""}


@pytest.mark.parametrize(("history", "index"), [([], 0), (HISTORY, 2)], ids=["alone", "after-a-history"])
@pytest.mark.parametrize("text", ["", "  \n"])
def test_anthropic_refuses_an_empty_prompt_naming_it(history: list[Message], index: int, text: str) -> None:
    with pytest.raises(UnsupportedContent, match=rf"^messages\[{index}\]: the prompt is empty; Anthropic refuses"):
        anthropic.build_request([*history, Message.user(text)], model="claude-sonnet-4-5")


def test_anthropic_drops_empty_text_that_something_else_stands_in_for() -> None:
    body: dict[str, Any] = anthropic.build_request(
        [Message.user("Look."), Message.user("")], model="claude-sonnet-4-5", prompt_cache=False
    )
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Look."}]}]


@pytest.mark.parametrize(
    "codec", [anthropic, gemini, openai_chat, openai_responses], ids=lambda c: c.__name__.rsplit(".", 1)[-1]
)
def test_a_conversation_with_no_messages_is_still_nothing_to_send(codec: Any) -> None:
    with pytest.raises(UnsupportedContent, match="nothing to send"):
        codec.build_request([], model="m")
