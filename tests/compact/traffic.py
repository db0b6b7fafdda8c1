"""Read recorded provider requests back into neutral messages, for checking the token counter.

Test-only: each provider's request body becomes ``(messages, system, tools)`` through the same readers the
codecs' follow-up tests use, and the recorded reply, parsed by the provider's codec, gives the
``input_tokens`` the provider reported and the reply's ``output_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loopctl.message import Message
from loopctl.providers import anthropic, gemini, openai_chat, openai_responses
from loopctl.tool import ToolSchema
from tests.conftest import Recording
from tests.providers import anthropic_reader, chat_reader, gemini_recorded, responses_wire


@dataclass
class Exchange:
    """One recorded request read back: the conversation, system prompt and tools, and the usage."""

    provider: str
    name: str
    messages: list[Message]
    system: str | None
    tools: list[ToolSchema]
    input_tokens: int
    output_tokens: int


def _anthropic(body: dict[str, Any]) -> tuple[list[Message], str | None, list[ToolSchema]]:
    tools = [
        ToolSchema(t["name"], t.get("description") or "", t.get("input_schema", {})) for t in body.get("tools", [])
    ]
    return anthropic_reader.read_messages(body), anthropic_reader.read_system(body), tools


def _openai_chat(body: dict[str, Any]) -> tuple[list[Message], str | None, list[ToolSchema]]:
    return chat_reader.messages_from_chat(body["messages"]), None, chat_reader.tools_from_chat(body.get("tools", []))


def _openai_responses(body: dict[str, Any]) -> tuple[list[Message], str | None, list[ToolSchema]]:
    tools = [
        ToolSchema(t["name"], t.get("description") or "", t.get("parameters", {}))
        for t in body.get("tools", [])
        if t.get("type") == "function"
    ]
    items = body["input"]
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    return responses_wire.read_input(items), body.get("instructions"), tools


def _gemini(body: dict[str, Any]) -> tuple[list[Message], str | None, list[ToolSchema]]:
    tools = [
        ToolSchema(d["name"], d.get("description") or "", d.get("parameters") or d.get("parameters_json_schema") or {})
        for t in body.get("tools", [])
        for d in t.get("functionDeclarations", [])
    ]
    return gemini_recorded.messages_of(body), gemini_recorded.system_of(body), tools


# Each provider's test reader (the same ones the codecs' follow-up tests use), and its codec for the usage.
_READERS = {
    "anthropic": (_anthropic, anthropic),
    "openai-chat": (_openai_chat, openai_chat),
    "openai-responses": (_openai_responses, openai_responses),
    "gemini": (_gemini, gemini),
}


def _usage(api: str, rec: Recording) -> tuple[int, int] | None:
    """``(input_tokens, output_tokens)`` as the codec reads the recorded reply (cached input included);
    ``None`` without usage."""
    codec = _READERS[api][1]
    reply = (
        codec.parse_stream([rec.response_sse]) if rec.has("response.sse") else codec.parse_response(rec.response_json)
    )
    if reply.usage.input_tokens == 0:
        return None
    return reply.usage.input_tokens, reply.usage.output_tokens


def api_of(provider: str, name: str) -> str:
    if provider == "openai":
        return "openai-chat" if name.startswith("chat-") else "openai-responses"
    return provider


def exchange(provider: str, name: str) -> Exchange | None:
    """The recorded exchange ``provider/name`` read back, or ``None`` when it has no request or no usage."""
    rec = Recording(provider, name)
    if not rec.has("request.json") or rec.meta.get("status") not in (200, None):
        return None
    if name.startswith("native-"):
        # Built-in tools: the usage counts what the provider's own tool runs added (search results, fetched
        # pages) inside the call, which the request never carried; no measure of the request alone.
        return None
    api = api_of(provider, name)
    usage = _usage(api, rec)
    if usage is None:
        return None
    messages, system, tools = _READERS[api][0](rec.request)
    return Exchange(api, name, messages, system, tools, usage[0], usage[1])
