"""OpenAI Responses non-streamed replies: how ``output`` items become parts (beyond the recordings)."""

from __future__ import annotations

from typing import Any

from loopctl.message import Message, Role, TextPart, ThinkingPart, ToolCallPart
from loopctl.providers import openai_responses as codec
from loopctl.response import StopReason, Usage


def response(
    *output: dict[str, Any], status: str = "completed", reason: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "status": status,
        "model": "gpt-5",
        "error": None,
        "incomplete_details": {"reason": reason} if reason else None,
        "output": list(output),
        **extra,
    }


def message(item_id: str, *content: dict[str, Any]) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "assistant", "status": "completed", "content": list(content)}


def text(t: str) -> dict[str, Any]:
    return {"type": "output_text", "text": t, "annotations": [], "logprobs": []}


def call(arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {
        "id": "fc_1",
        "type": "function_call",
        "status": "completed",
        "call_id": call_id,
        "name": "f",
        "arguments": arguments,
    }


def test_reasoning_item_without_summary_is_one_empty_thinking_part() -> None:
    r = codec.parse_response(
        response(
            {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "E"}, message("msg_1", text("x"))
        )
    )
    assert r.message.parts == (
        ThinkingPart(text="", signature="E", provider="openai", item_id="rs_1"),
        TextPart(text="x", item_id="msg_1"),
    )


def test_reasoning_item_without_encrypted_content_has_no_signature() -> None:
    item = {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]}
    assert codec.parse_response(response(item)).message.parts == (
        ThinkingPart(text="s", provider="openai", item_id="rs_1"),
    )


def test_several_output_text_contents_share_the_message_id_and_rebuild_as_one_item() -> None:
    r = codec.parse_response(response(message("msg_1", text("a"), text("b"))))
    assert r.message.parts == (TextPart(text="a", item_id="msg_1"), TextPart(text="b", item_id="msg_1"))
    rebuilt = codec.build_request([Message.user("q"), r.message], model="m")["input"][1]
    assert rebuilt == {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "a", "annotations": []},
            {"type": "output_text", "text": "b", "annotations": []},
        ],
    }


def test_refusal_content_is_kept_as_text_and_stops_as_refusal() -> None:
    r = codec.parse_response(response(message("msg_1", {"type": "refusal", "refusal": "I can't help with that."})))
    assert r.message.parts == (TextPart(text="I can't help with that.", item_id="msg_1"),)
    assert (r.stop_reason, r.raw_stop_reason) == (StopReason.REFUSAL, "completed")


def test_incomplete_max_output_tokens_is_max_tokens() -> None:
    r = codec.parse_response(response(message("msg_1", text("cut")), status="incomplete", reason="max_output_tokens"))
    assert (r.stop_reason, r.raw_stop_reason) == (StopReason.MAX_TOKENS, "max_output_tokens")


def test_incomplete_content_filter_is_refusal() -> None:
    r = codec.parse_response(response(status="incomplete", reason="content_filter"))
    assert (r.stop_reason, r.raw_stop_reason) == (StopReason.REFUSAL, "content_filter")
    assert r.message == Message(role=Role.ASSISTANT)


def test_tool_call_with_a_plain_completed_status_is_tool_call() -> None:
    r = codec.parse_response(response(message("msg_1", text("calling")), call('{"a":1}')))
    assert (r.stop_reason, r.raw_stop_reason) == (StopReason.TOOL_CALL, "completed")


def test_empty_arguments_read_as_an_empty_object() -> None:
    r = codec.parse_response(response(call("")))
    assert r.message.parts == (ToolCallPart(id="call_1", name="f", input={}, item_id="fc_1"),)
    assert r.invalid_tool_calls == ()


def test_arguments_that_are_not_json_give_an_empty_input_and_an_invalid_tool_call() -> None:
    r = codec.parse_response(response(call('{"city": "Par'), status="incomplete", reason="max_output_tokens"))
    assert r.message.parts == (ToolCallPart(id="call_1", name="f", input={}, item_id="fc_1"),)
    (invalid,) = r.invalid_tool_calls
    assert (invalid.id, invalid.name, invalid.arguments) == ("call_1", "f", '{"city": "Par')
    assert "not valid JSON" in invalid.error


def test_usage_maps_cache_reads_cache_writes_and_reasoning() -> None:
    usage = {
        "input_tokens": 5000,
        "input_tokens_details": {"cached_tokens": 4096, "cache_write_tokens": 512},
        "output_tokens": 300,
        "output_tokens_details": {"reasoning_tokens": 256},
        "total_tokens": 5300,
    }
    r = codec.parse_response(response(usage=usage))
    assert r.usage == Usage(
        input_tokens=5000, output_tokens=300, cache_read_tokens=4096, cache_write_tokens=512, reasoning_tokens=256
    )
    assert r.usage.total_tokens == 5300


def test_missing_usage_is_zero() -> None:
    assert codec.parse_response(response()).usage == Usage()
