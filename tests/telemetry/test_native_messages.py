"""What telemetry records of the provider-native parts: the GenAI conventions' ``server_tool_call`` and
``server_tool_call_response`` parts (the readable call and result), never the opaque blocks."""

from __future__ import annotations

import orjson

from loopctl.message import CompactionPart, Message, Role, ServerToolCallPart, ServerToolResultPart, TextPart
from loopctl.response import StopReason
from loopctl.telemetry.messages import input_message, output_message

CALL = ServerToolCallPart(
    id="srvtoolu_1",
    name="web_search",
    input={"query": "news"},
    provider="anthropic",
    raw={"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "news"}},
)
RESULT = ServerToolResultPart(
    call_id="srvtoolu_1",
    name="web_search",
    output="CNN <https://cnn.com>",
    provider="anthropic",
    raw={"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [{"encrypted_content": "SECRET"}]},
)


def test_native_parts_are_recorded_as_the_conventions_server_tool_parts() -> None:
    message = Message.new(
        Role.ASSISTANT,
        [
            CompactionPart(provider="anthropic", summary="Earlier: a search.", raw={"type": "compaction"}),
            CompactionPart(provider="openai", raw={"type": "compaction", "encrypted_content": "SECRET"}),
            CALL,
            RESULT,
            TextPart(text="News."),
        ],
    )
    assert output_message(message, StopReason.END_TURN) == {
        "role": "assistant",
        "parts": [
            {"type": "compaction", "content": "Earlier: a search."},
            {
                "type": "server_tool_call",
                "id": "srvtoolu_1",
                "name": "web_search",
                "server_tool_call": {"type": "web_search", "input": {"query": "news"}},
            },
            {
                "type": "server_tool_call_response",
                "id": "srvtoolu_1",
                "server_tool_call_response": {"type": "web_search", "output": "CNN <https://cnn.com>"},
            },
            {"type": "text", "content": "News."},
        ],
        "finish_reason": "stop",
    }
    assert b"SECRET" not in orjson.dumps(input_message(message))
