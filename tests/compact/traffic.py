"""Read recorded provider requests back into neutral messages, for checking the token counter.

Test-only: the codecs (issues 2 and 3) build requests from messages; here the opposite direction is needed
and only roughly (what is counted, not what is replayed): each provider's request body becomes
``(messages, system, tools)`` and each recorded reply gives the ``input_tokens`` the provider reported
and the reply's ``output_tokens``. Wire shapes follow each provider's documented request format:
Anthropic Messages (``content`` blocks ``text``/``image``/``tool_use``/``tool_result``/``thinking``/
``redacted_thinking``), OpenAI Chat Completions (``messages`` with ``tool_calls`` and ``role: tool``),
OpenAI Responses (``input`` items ``message``/``function_call``/``function_call_output``/``reasoning``),
Gemini ``generateContent`` (``contents[].parts`` with ``functionCall``/``functionResponse``/
``inlineData``/``thought``/``thoughtSignature``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from loopctl.message import (
    ImagePart,
    ImageSource,
    Message,
    MessagePart,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
)
from loopctl.tool import ToolSchema
from tests.conftest import Recording


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


def _text_blocks(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [])


def _anthropic(body: dict[str, Any]) -> tuple[list[Message], str | None, list[ToolSchema]]:
    system = body.get("system")
    sys_text = _text_blocks(system) if system is not None else None
    tools = [
        ToolSchema(t["name"], t.get("description") or "", t.get("input_schema", {})) for t in body.get("tools", [])
    ]
    names: dict[str, str] = {}
    out: list[Message] = []
    for m in body["messages"]:
        content = m["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        parts: list[MessagePart] = []
        for b in content:
            kind = b["type"]
            if kind == "text":
                parts.append(TextPart(text=b["text"]))
            elif kind == "image":
                src = b["source"]
                parts.append(ImagePart(source=ImageSource(media_type=src["media_type"], data=src["data"])))
            elif kind == "tool_use":
                names[b["id"]] = b["name"]
                parts.append(ToolCallPart(id=b["id"], name=b["name"], input=b["input"]))
            elif kind == "tool_result":
                raw = b.get("content", "")
                output = raw if isinstance(raw, str) else _text_blocks(raw)
                parts.append(
                    ToolResultPart(call_id=b["tool_use_id"], name=names.get(b["tool_use_id"], ""), output=output)
                )
            elif kind == "thinking":
                parts.append(ThinkingPart(text=b["thinking"], signature=b.get("signature"), provider="anthropic"))
            elif kind == "redacted_thinking":
                parts.append(ThinkingPart(text="", redacted=b["data"], provider="anthropic"))
        out.append(Message.new(Role(m["role"]), parts))
    return out, sys_text, tools


def _openai_chat(body: dict[str, Any]) -> tuple[list[Message], str | None, list[ToolSchema]]:
    tools = [
        ToolSchema(t["function"]["name"], t["function"].get("description") or "", t["function"].get("parameters", {}))
        for t in body.get("tools", [])
    ]
    system: list[str] = []
    out: list[Message] = []
    names: dict[str, str] = {}
    for m in body["messages"]:
        role = m["role"]
        content = m.get("content")
        if role in ("system", "developer"):
            system.append(_text_blocks(content))
            continue
        if role == "tool":
            part = ToolResultPart(
                call_id=m["tool_call_id"], name=names.get(m["tool_call_id"], ""), output=_text_blocks(content)
            )
            if out and out[-1].role is Role.USER and all(p.is_tool_result() for p in out[-1].parts):
                out[-1] = Message.new(Role.USER, [*out[-1].parts, part])
            else:
                out.append(Message.new(Role.USER, [part]))
            continue
        parts: list[MessagePart] = []
        if isinstance(content, str):
            parts.append(TextPart(text=content))
        elif content:
            for b in content:
                if b["type"] == "text":
                    parts.append(TextPart(text=b["text"]))
                elif b["type"] == "image_url":
                    url = b["image_url"]["url"]
                    head, data = url.split(",", 1)
                    parts.append(ImagePart(source=ImageSource(media_type=head[5:].split(";")[0], data=data)))
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            names[call["id"]] = fn["name"]
            parts.append(ToolCallPart(id=call["id"], name=fn["name"], input=json.loads(fn["arguments"] or "{}")))
        out.append(Message.new(Role(role), parts))
    return out, "\n".join(system) or None, tools


def _openai_responses(body: dict[str, Any]) -> tuple[list[Message], str | None, list[ToolSchema]]:
    tools = [
        ToolSchema(t["name"], t.get("description") or "", t.get("parameters", {}))
        for t in body.get("tools", [])
        if t.get("type") == "function"
    ]
    system: list[str] = [body["instructions"]] if body.get("instructions") else []
    items = body["input"]
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    out: list[Message] = []
    names: dict[str, str] = {}

    def add(role: Role, part: MessagePart) -> None:
        if out and out[-1].role is role:
            out[-1] = Message.new(role, [*out[-1].parts, part])
        else:
            out.append(Message.new(role, [part]))

    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = item["role"]
            content = item["content"]
            if role in ("system", "developer"):
                system.append(_text_blocks(content))
                continue
            if isinstance(content, str):
                content = [{"type": "input_text", "text": content}]
            for b in content:
                if b["type"] in ("input_text", "output_text"):
                    add(Role(role), TextPart(text=b["text"]))
                elif b["type"] == "input_image":
                    head, data = b["image_url"].split(",", 1)
                    add(Role(role), ImagePart(source=ImageSource(media_type=head[5:].split(";")[0], data=data)))
        elif kind == "reasoning":
            text = "\n\n".join(s["text"] for s in item.get("summary", []))
            add(
                Role.ASSISTANT,
                ThinkingPart(
                    text=text, signature=item.get("encrypted_content"), provider="openai", item_id=item.get("id")
                ),
            )
        elif kind == "function_call":
            names[item["call_id"]] = item["name"]
            add(
                Role.ASSISTANT, ToolCallPart(id=item["call_id"], name=item["name"], input=json.loads(item["arguments"]))
            )
        elif kind == "function_call_output":
            add(
                Role.USER,
                ToolResultPart(call_id=item["call_id"], name=names.get(item["call_id"], ""), output=item["output"]),
            )
    return out, "\n".join(system) or None, tools


def _gemini(body: dict[str, Any]) -> tuple[list[Message], str | None, list[ToolSchema]]:
    tools = [
        ToolSchema(d["name"], d.get("description") or "", d.get("parameters") or d.get("parameters_json_schema") or {})
        for t in body.get("tools", [])
        for d in t.get("functionDeclarations", [])
    ]
    si = body.get("systemInstruction")
    system = "".join(p.get("text", "") for p in si["parts"]) if si else None
    out: list[Message] = []
    counter = 0
    for c in body["contents"]:
        role = Role.ASSISTANT if c.get("role") == "model" else Role.USER
        parts: list[MessagePart] = []
        for p in c["parts"]:
            if "thoughtSignature" in p and not p.get("thought"):
                parts.append(ThinkingPart(text="", signature=p["thoughtSignature"], provider="gemini"))
            if p.get("thought"):
                parts.append(
                    ThinkingPart(text=p.get("text", ""), signature=p.get("thoughtSignature"), provider="gemini")
                )
            elif "text" in p:
                parts.append(TextPart(text=p["text"]))
            elif "functionCall" in p:
                fc = p["functionCall"]
                counter += 1
                parts.append(
                    ToolCallPart(id=fc.get("id") or f"gemini_{counter}", name=fc["name"], input=fc.get("args", {}))
                )
            elif "functionResponse" in p:
                fr = p["functionResponse"]
                pending = [q for m in out for q in m.parts if isinstance(q, ToolCallPart) and q.name == fr["name"]]
                done = {q.call_id for m in out for q in m.parts if isinstance(q, ToolResultPart)}
                done |= {q.call_id for q in parts if isinstance(q, ToolResultPart)}
                call_id = fr.get("id") or next(q.id for q in pending if q.id not in done)
                resp = fr.get("response", {})
                output = resp["output"] if isinstance(resp.get("output"), str) else json.dumps(resp)
                parts.append(ToolResultPart(call_id=call_id, name=fr["name"], output=ToolContent.from_string(output)))
            elif "inlineData" in p:
                d = p["inlineData"]
                # google-genai sends base64url; the model holds standard base64.
                data = d["data"].replace("-", "+").replace("_", "/")
                parts.append(ImagePart(source=ImageSource(media_type=d["mimeType"], data=data)))
        out.append(Message.new(role, parts))
    return out, system, tools


_READERS = {
    "anthropic": _anthropic,
    "openai-chat": _openai_chat,
    "openai-responses": _openai_responses,
    "gemini": _gemini,
}


def _sse_payloads(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for line in raw.decode().replace("\r\n", "\n").split("\n"):
        if line.startswith("data:"):
            data = line[5:].strip()
            if data and data != "[DONE]":
                out.append(json.loads(data))
    return out


def _usage(api: str, rec: Recording) -> tuple[int, int] | None:
    """``(input_tokens, output_tokens)`` as reported, cached input included; ``None`` without usage."""
    payloads = _sse_payloads(rec.response_sse) if rec.has("response.sse") else [rec.response_json]
    inp = out = None
    for p in payloads:
        if api == "anthropic":
            usage = p.get("usage") or (p.get("message") or {}).get("usage")
            if usage and "input_tokens" in usage:
                inp = (
                    usage["input_tokens"]
                    + (usage.get("cache_creation_input_tokens") or 0)
                    + (usage.get("cache_read_input_tokens") or 0)
                )
            if usage and "output_tokens" in usage:
                out = usage["output_tokens"]
        elif api == "openai-chat":
            usage = p.get("usage")
            if usage:
                inp, out = usage["prompt_tokens"], usage["completion_tokens"]
        elif api == "openai-responses":
            usage = p.get("usage") or (p.get("response") or {}).get("usage")
            if usage:
                inp, out = usage["input_tokens"], usage["output_tokens"]
        elif api == "gemini":
            usage = p.get("usageMetadata")
            if usage and "promptTokenCount" in usage:
                inp = usage["promptTokenCount"]
                out = usage.get("totalTokenCount", inp) - inp
    if inp is None:
        return None
    return inp, out or 0


def api_of(provider: str, name: str) -> str:
    if provider == "openai":
        return "openai-chat" if name.startswith("chat-") else "openai-responses"
    return provider


def exchange(provider: str, name: str) -> Exchange | None:
    """The recorded exchange ``provider/name`` read back, or ``None`` when it has no request or no usage."""
    rec = Recording(provider, name)
    if not rec.has("request.json") or rec.meta.get("status") not in (200, None):
        return None
    api = api_of(provider, name)
    usage = _usage(api, rec)
    if usage is None:
        return None
    messages, system, tools = _READERS[api](rec.request)
    return Exchange(api, name, messages, system, tools, usage[0], usage[1])
