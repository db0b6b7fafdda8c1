"""Small builders for the hand-written conversations of the compaction tests."""

from __future__ import annotations

import base64
from typing import Any

from loopctl.compact import ContextBudget, HeuristicTokenCounter
from loopctl.message import (
    ImagePart,
    ImageSource,
    Message,
    MessagePart,
    Retention,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
)

PNG_1MB = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(1_000_000)).decode()
"""A 1 MB "image" (1.33 M base64 characters): huge by length, one image by count."""


def user(text: str) -> Message:
    return Message.user(text)


def assistant(text: str) -> Message:
    return Message.assistant(text)


def system(text: str) -> Message:
    return Message.new(Role.SYSTEM, [TextPart(text=text)])


def call(call_id: str, name: str = "read_file", **input: Any) -> ToolCallPart:
    return ToolCallPart(id=call_id, name=name, input=input or {"path": f"{call_id}.txt"})


def result(
    call_id: str,
    output: str | ToolContent = "ok",
    *,
    name: str = "read_file",
    retention: Retention | None = None,
    is_error: bool | None = False,
) -> ToolResultPart:
    return ToolResultPart(call_id=call_id, name=name, output=output, retention=retention, is_error=is_error)


def calls(*parts: MessagePart) -> Message:
    return Message.new(Role.ASSISTANT, parts)


def results(*parts: MessagePart) -> Message:
    return Message.new(Role.USER, parts)


def thinking(text: str = "Let me look.", signature: str | None = "sig") -> ThinkingPart:
    return ThinkingPart(text=text, signature=signature, provider="anthropic" if signature else None)


def image(data: str = PNG_1MB) -> ImagePart:
    return ImagePart(source=ImageSource(media_type="image/png", data=data))


def tool_turn(
    call_id: str,
    output: str = "ok",
    *,
    name: str = "read_file",
    retention: Retention | None = None,
    think: bool = False,
    **input: Any,
) -> list[Message]:
    """An assistant message with one call and the user message with its result."""
    parts: list[MessagePart] = [thinking()] if think else []
    parts.append(call(call_id, name, **input))
    return [calls(*parts), results(result(call_id, output, name=name, retention=retention))]


def all_results(messages: list[Message]) -> list[ToolResultPart]:
    return [p for m in messages for p in m.parts if isinstance(p, ToolResultPart)]


def durable_results(messages: list[Message]) -> list[ToolResultPart]:
    return [p for p in all_results(messages) if p.retention is Retention.DURABLE]


def exact_budget(target: int, protected_tail: int = 0) -> ContextBudget:
    """A budget whose target is exactly ``target`` tokens (every line at the window)."""
    return ContextBudget(
        window=target,
        threshold=1.0,
        emergency=1.0,
        prune_line=1.0,
        target_ratio=1.0,
        protected_tail=protected_tail,
        counter=HeuristicTokenCounter(),
    )
