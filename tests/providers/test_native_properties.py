"""Conversations holding provider-native parts, drawn at random: every codec builds a request its provider's
own SDK type accepts (a native part of another provider, or one that lost its block, goes as a note), the
incremental build gives the same bytes as a fresh one, and a native part of the codec's provider goes out as
its block exactly (``docs/providers.md``, "Provider-native parts")."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings

from loopctl.compact.provider import provider_window
from loopctl.message import CompactionPart, Message, ServerToolCallPart, ServerToolResultPart
from loopctl.message.model import _dumps_bytes
from loopctl.providers import anthropic, gemini, openai_chat, openai_responses
from loopctl.providers.base import RequestCache
from tests.providers.responses_wire import validate_with_sdk as validate_responses
from tests.providers.test_anthropic_properties import _object_inputs
from tests.providers.test_anthropic_properties import validate_with_sdk as validate_anthropic
from tests.providers.test_gemini_properties import _SDK as GEMINI_SDK
from tests.strategies import native_conversations

SLOW = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def _natives(conversation: list[Message]) -> list[Any]:
    return [
        p
        for m in conversation
        for p in m.parts
        if isinstance(p, (ServerToolCallPart, ServerToolResultPart, CompactionPart))
    ]


def _blocks_sent(body: dict[str, Any]) -> set[bytes]:
    out: set[bytes] = set()
    for message in body.get("messages") or body.get("contents") or []:
        content = message.get("content") if "content" in message else message.get("parts")
        for block in content if isinstance(content, list) else ():
            out.add(orjson.dumps(block))
    for item in body.get("input") or []:
        out.add(orjson.dumps(item))
    return out


@SLOW
@given(native_conversations().map(_object_inputs))  # Anthropic's tool_use input is an object
def test_anthropic_sends_its_own_blocks_verbatim_and_notes_for_the_rest(conversation: list[Message]) -> None:
    body = anthropic.build_request(conversation, model="claude-sonnet-4-5")
    sent = _blocks_sent(body)
    natives = _natives(conversation)
    # The API drops what comes before a compaction block, so the codec sends the conversation from its last
    # one on (docs/compaction.md): an earlier part is not sent at all.
    in_window = _natives(provider_window(conversation, "anthropic"))
    window = {id(p) for p in in_window}
    window_raws = {orjson.dumps(p.raw) for p in in_window if p.provider == "anthropic"}
    for part in natives:
        ours = part.provider == "anthropic" and part.raw is not None and id(part) in window
        if ours and not (isinstance(part, ServerToolCallPart) and _pruned_result(conversation, part.id)):
            assert orjson.dumps(part.raw) in sent
        elif part.raw is not None and orjson.dumps(part.raw) not in window_raws:
            assert orjson.dumps(part.raw) not in sent
    if not any(isinstance(p, CompactionPart) and p.provider == "anthropic" for p in natives):
        validate_anthropic(body)  # the compaction block is a beta type, outside the SDK's GA request types


@SLOW
@given(native_conversations())
def test_responses_sends_its_own_items_verbatim_and_the_body_is_a_valid_request(conversation: list[Message]) -> None:
    body = openai_responses.build_request(conversation, model="gpt-5")
    validate_responses(body)
    sent = _blocks_sent(body)
    for part in _natives(conversation):
        if part.provider != "openai" and part.raw is not None:
            assert orjson.dumps(part.raw) not in sent


@SLOW
@given(native_conversations())
def test_gemini_and_chat_build_valid_requests(conversation: list[Message]) -> None:
    body = gemini.build_request(conversation, model="gemini-3-flash-preview")
    for key, adapter in GEMINI_SDK.items():
        if key in body:
            adapter.validate_python(body[key])
    sent = _blocks_sent(body)
    for part in _natives(conversation):
        if part.provider != "gemini" and part.raw is not None:
            assert orjson.dumps(part.raw) not in sent
    chat = openai_chat.build_request(conversation, model="gpt-4o")
    assert all(m["role"] in ("system", "user", "assistant", "tool") for m in chat["messages"])


@SLOW
@given(native_conversations())
def test_incremental_builds_equal_fresh_builds_with_native_parts(conversation: list[Message]) -> None:
    codecs: list[tuple[ModuleType, dict[str, Any]]] = [
        (anthropic, {"model": "claude-sonnet-4-5", "prompt_cache": False}),
        (openai_responses, {"model": "gpt-5"}),
        (openai_chat, {"model": "gpt-4o"}),
    ]
    for codec, options in codecs:
        cache = RequestCache()
        for k in range(1, len(conversation) + 1):
            prefix = conversation[:k]
            try:
                fresh = _dumps_bytes(codec.build_request(prefix, **options))
            except Exception as exc:  # the same refusal either way
                fresh = repr(type(exc)).encode()
            try:
                incremental = codec.encode_request(prefix, cache=cache, **options)
            except Exception as exc:
                incremental = repr(type(exc)).encode()
            assert incremental == fresh, codec.__name__


def _pruned_result(conversation: list[Message], call_id: str) -> bool:
    """True when the call's result (in the same message) lost its block: the pair goes out as notes."""
    return any(
        isinstance(p, ServerToolResultPart) and p.call_id == call_id and (p.raw is None or p.provider != "anthropic")
        for m in conversation
        for p in m.parts
    )
