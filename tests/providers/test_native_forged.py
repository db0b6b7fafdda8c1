"""Forged or cut provider-native parts on their way back to Anthropic: a server tool result whose call is not
before it in the assistant turn (compacted away, or the file edited) goes as its note, never as a block the API
refuses with a 400; a result whose call is in the turn's earlier message (a ``pause_turn`` continuation) still
goes whole."""

from __future__ import annotations

from typing import Any

from loopctl.message import Message, Role, ServerToolCallPart, ServerToolResultPart, TextPart
from loopctl.providers import anthropic

CALL_RAW: dict[str, Any] = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}
RESULT_RAW: dict[str, Any] = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}


def _call() -> ServerToolCallPart:
    return ServerToolCallPart(id="srvtoolu_1", name="web_search", input={"query": "q"}, provider="anthropic", raw=CALL_RAW)


def _result() -> ServerToolResultPart:
    return ServerToolResultPart(
        call_id="srvtoolu_1", name="web_search", output="no hits", provider="anthropic", raw=RESULT_RAW
    )


def _assistant_blocks(messages: list[Message]) -> list[dict[str, Any]]:
    body = anthropic.build_request(messages, model="claude-sonnet-4-5")
    return [b for m in body["messages"] if m["role"] == "assistant" for b in m["content"]]


def test_a_server_tool_result_without_its_call_goes_as_its_note() -> None:
    messages = [
        Message.user("search"),
        Message.new(Role.ASSISTANT, [_result(), TextPart(text="done")]),
        Message.user("thanks"),
    ]
    blocks = _assistant_blocks(messages)
    assert [b["type"] for b in blocks] == ["text", "text"]
    assert blocks[0]["text"] == "[web_search result: no hits]"


def test_a_result_whose_call_is_in_the_turns_earlier_message_goes_whole() -> None:
    messages = [
        Message.user("search"),
        Message.new(Role.ASSISTANT, [_call()]),  # paused (pause_turn) after the call
        Message.new(Role.ASSISTANT, [_result(), TextPart(text="done")]),
        Message.user("thanks"),
    ]
    blocks = _assistant_blocks(messages)
    assert [b["type"] for b in blocks] == ["server_tool_use", "web_search_tool_result", "text"]
