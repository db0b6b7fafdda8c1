"""A count a reply does not carry is ``None`` (not reported), never 0: OpenAI-compatible servers that send no
``usage`` or no ``*_details``, Anthropic-compatible servers without cache counts, a Gemini reply without
``usageMetadata`` (issue 18: telemetry recorded these as 0)."""

from __future__ import annotations

from loopctl.providers import anthropic, gemini, openai_chat, openai_responses
from loopctl.response import Usage

CHAT = {"id": "c", "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}


def test_chat_without_usage_reports_nothing() -> None:
    assert openai_chat.parse_response(CHAT).usage == Usage()


def test_chat_without_details_reports_the_totals_only() -> None:
    body = {**CHAT, "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}
    assert openai_chat.parse_response(body).usage == Usage(12, 3)  # cache reads and reasoning: not reported


def test_chat_details_with_zeros_are_reported_zeros() -> None:
    usage = {
        "prompt_tokens": 12,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    assert openai_chat.parse_response({**CHAT, "usage": usage}).usage == Usage(12, 3, 0, None, 0)


def test_responses_without_usage_reports_nothing() -> None:
    body = {"id": "r", "model": "m", "status": "completed", "output": []}
    assert openai_responses.parse_response(body).usage == Usage()


def test_anthropic_without_cache_counts_reports_input_and_output_only() -> None:
    body = {
        "id": "m",
        "model": "claude",
        "role": "assistant",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 9, "output_tokens": 2},
    }
    assert anthropic.parse_response(body).usage == Usage(9, 2)
    assert anthropic.parse_response({**body, "usage": {}}).usage == Usage()


def test_gemini_without_usage_metadata_reports_nothing() -> None:
    body = {"candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]}, "finishReason": "STOP"}]}
    assert gemini.parse_response(body).usage == Usage()
