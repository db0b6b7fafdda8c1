"""Conversation checks: every broken pairing or placement rule, each with its path and the rule's name.

The rules are those of ``docs/wire-format.md``, "Conversation rules" (pairing, and placement by role).
An empty ``parts`` list is legal (silence) and is never
a problem by itself. A conversation that ends on an assistant message whose calls are not answered yet is
legal too: that is the state of a run waiting for its tools.

Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any

from loopctl._frozen import dataclass
from loopctl.errors import InvalidConversation
from loopctl.message.model import (
    CompactionPart,
    ImagePart,
    Message,
    Role,
    ServerToolCallPart,
    ServerToolResultPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    lone_surrogate_at,
)

__all__ = [
    "ConversationProblem",
    "ConversationRule",
    "check_conversation",
    "first_invalid_string",
    "unanswered_calls",
]


class ConversationRule(enum.StrEnum):
    """The rules :func:`check_conversation` checks; each value is the ``rule`` of a problem."""

    TOOL_RESULT_WITHOUT_CALL = "tool_result_answers_an_earlier_call"
    """A tool result's ``call_id`` matches a tool call of the assistant message it answers (the latest
    assistant message before it)."""
    DUPLICATE_TOOL_RESULT = "tool_call_answered_once"
    """A tool call is answered by one result, not several."""
    DUPLICATE_TOOL_CALL_ID = "tool_call_ids_unique_within_turn"
    """Tool-call ids are unique within a turn (one assistant message)."""
    UNANSWERED_TOOL_CALL = "tool_call_answered_before_next_assistant"
    """Every tool call is answered before the next assistant message."""
    TOOL_RESULT_OUTSIDE_USER = "tool_results_only_in_user_messages"
    """Tool results ride only in user messages."""
    TOOL_CALL_OUTSIDE_ASSISTANT = "tool_calls_only_in_assistant_messages"
    """Tool calls ride only in assistant messages."""
    IMAGE_OUTSIDE_USER = "images_only_in_user_messages"
    """Images ride only in user messages, including inside tool results."""
    THINKING_OUTSIDE_ASSISTANT = "thinking_only_in_assistant_messages"
    """Thinking rides only in assistant messages."""
    NATIVE_OUTSIDE_ASSISTANT = "provider_native_parts_only_in_assistant_messages"
    """What a provider ran or compacted on its own side (server tool calls and results, compaction) rides only in
    assistant messages (``docs/wire-format.md``, "Provider-native parts")."""
    INVALID_UNICODE = "strings_are_valid_unicode"
    """Every string is valid Unicode: no lone surrogate (as a careless truncation leaves)."""


@dataclass(frozen=True, slots=True)
class ConversationProblem:
    """One broken rule: where (``messages[3].parts[1]``), which :class:`ConversationRule`, and a readable
    detail."""

    path: str
    rule: ConversationRule
    detail: str

    def __str__(self) -> str:
        return f"{self.path}: {self.detail} [{self.rule.value}]"


def check_conversation(
    messages: Sequence[Message], *, strict: bool = False, at_rest: bool = False
) -> list[ConversationProblem]:
    """Every problem in ``messages``, in the order found (an empty list for a sound conversation).

    With ``strict=True`` a non-empty result is raised instead, as
    :class:`~loopctl.errors.InvalidConversation` listing every problem. With ``at_rest=True`` the
    conversation is one no run is in the middle of (a stored session at rest, a conversation file to
    continue): the last assistant message's calls must be answered too (a problem of rule
    ``UNANSWERED_TOOL_CALL`` each), since no provider takes new input after calls it got no results for.
    """
    problems: list[ConversationProblem] = []
    add = problems.append
    # Calls of the open turn (the latest assistant message): id -> (path, answered?)
    open_calls: dict[str, list[Any]] = {}
    older_calls: set[str] = set()

    for mi, msg in enumerate(messages):
        mpath = f"messages[{mi}]"
        role = msg.role
        if role is Role.ASSISTANT:
            for call_id, (cpath, answered) in open_calls.items():
                if not answered:
                    add(
                        ConversationProblem(
                            cpath,
                            ConversationRule.UNANSWERED_TOOL_CALL,
                            f"tool call {call_id!r} has no result before the next assistant message ({mpath})",
                        )
                    )
            older_calls.update(open_calls)
            open_calls = {}
        for pi, part in enumerate(msg.parts):
            ppath = f"{mpath}.parts[{pi}]"
            _check_strings(part, ppath, add)
            if isinstance(part, ToolCallPart):
                if role is not Role.ASSISTANT:
                    add(
                        ConversationProblem(
                            ppath,
                            ConversationRule.TOOL_CALL_OUTSIDE_ASSISTANT,
                            f"a tool call in {_a(role)} message",
                        )
                    )
                    continue
                if part.id in open_calls:
                    add(
                        ConversationProblem(
                            ppath,
                            ConversationRule.DUPLICATE_TOOL_CALL_ID,
                            f"tool-call id {part.id!r} is used twice in this turn (first at {open_calls[part.id][0]})",
                        )
                    )
                    continue
                open_calls[part.id] = [ppath, False]
            elif isinstance(part, ToolResultPart):
                if role is not Role.USER:
                    add(
                        ConversationProblem(
                            ppath,
                            ConversationRule.TOOL_RESULT_OUTSIDE_USER,
                            f"a tool result in {_a(role)} message",
                        )
                    )
                if role is not Role.USER and not part.output.is_string():
                    for oi, sub in enumerate(part.output.parts):
                        if isinstance(sub, ImagePart):
                            add(
                                ConversationProblem(
                                    f"{ppath}.output[{oi}]",
                                    ConversationRule.IMAGE_OUTSIDE_USER,
                                    f"an image inside a tool result in {_a(role)} message",
                                )
                            )
                entry = open_calls.get(part.call_id)
                if entry is None:
                    where = (
                        "answers a call of an earlier turn"
                        if part.call_id in older_calls
                        else "answers no earlier tool call"
                    )
                    add(
                        ConversationProblem(
                            ppath,
                            ConversationRule.TOOL_RESULT_WITHOUT_CALL,
                            f"tool result for {part.call_id!r} {where}",
                        )
                    )
                elif entry[1]:
                    add(
                        ConversationProblem(
                            ppath,
                            ConversationRule.DUPLICATE_TOOL_RESULT,
                            f"tool call {part.call_id!r} is answered twice (first answer before this one)",
                        )
                    )
                else:
                    entry[1] = True
            elif isinstance(part, ImagePart) and role is not Role.USER:
                add(ConversationProblem(ppath, ConversationRule.IMAGE_OUTSIDE_USER, f"an image in {_a(role)} message"))
            elif isinstance(part, (ServerToolCallPart, ServerToolResultPart, CompactionPart)):
                if role is not Role.ASSISTANT:
                    add(
                        ConversationProblem(
                            ppath,
                            ConversationRule.NATIVE_OUTSIDE_ASSISTANT,
                            f"a {part.type} part in {_a(role)} message",
                        )
                    )
            elif isinstance(part, ThinkingPart) and role is not Role.ASSISTANT:
                add(
                    ConversationProblem(
                        ppath, ConversationRule.THINKING_OUTSIDE_ASSISTANT, f"thinking in {_a(role)} message"
                    )
                )
    if at_rest:
        for call_id, (cpath, answered) in open_calls.items():
            if not answered:
                add(
                    ConversationProblem(
                        cpath,
                        ConversationRule.UNANSWERED_TOOL_CALL,
                        f"tool call {call_id!r} has no result, and no run is waiting for it: the conversation "
                        "cannot be continued (no provider takes new input after it)",
                    )
                )
    if strict and problems:
        raise InvalidConversation(list(problems))
    return problems


def unanswered_calls(messages: Sequence[Message]) -> list[ToolCallPart]:
    """The calls of the last assistant message of ``messages`` that no message after it answers, in call
    order (empty when there are none). Looks only at the messages from that assistant message on."""
    i = len(messages) - 1
    while i >= 0 and messages[i].role is not Role.ASSISTANT:
        i -= 1
    if i < 0:
        return []
    answered = {p.call_id for m in messages[i + 1 :] for p in m.parts if isinstance(p, ToolResultPart)}
    return [p for p in messages[i].parts if isinstance(p, ToolCallPart) and p.id not in answered]


def first_invalid_string(message: Message, path: str = "") -> str | None:
    """The path (``path`` + ``.parts[1].input.q``) of the first string of ``message`` that cannot be written
    as UTF-8 (a lone surrogate), or ``None``. The model's constructors refuse such strings; this finds one
    that got in without validation (``model_construct``). ASCII strings cost O(1) each."""
    found = lone_surrogate_at(message)
    if found is None:
        return None
    return f"{path}.{found}" if path else found


def _check_strings(part: object, path: str, add: Any) -> None:
    for sub, value in _strings_of(part, path):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            add(
                ConversationProblem(
                    sub,
                    ConversationRule.INVALID_UNICODE,
                    f"lone surrogate {value[exc.start]!r} at character {exc.start}",
                )
            )


def _strings_of(part: object, path: str) -> Iterable[tuple[str, str]]:
    if isinstance(part, TextPart):
        yield f"{path}.text", part.text
        if part.item_id is not None:
            yield f"{path}.item_id", part.item_id
        if part.provider is not None:
            yield f"{path}.provider", part.provider
        if part.citations is not None:
            yield from _json_strings(list(part.citations), f"{path}.citations")
    elif isinstance(part, ThinkingPart):
        for name in ("text", "signature", "redacted", "provider", "item_id"):
            value = getattr(part, name)
            if value is not None:
                yield f"{path}.{name}", value
    elif isinstance(part, ToolCallPart):
        yield f"{path}.id", part.id
        yield f"{path}.name", part.name
        for name in ("item_id", "provider"):
            value = getattr(part, name)
            if value is not None:
                yield f"{path}.{name}", value
        yield from _json_strings(part.input, f"{path}.input")
    elif isinstance(part, ToolResultPart):
        yield f"{path}.call_id", part.call_id
        yield f"{path}.name", part.name
        root = part.output.root
        if isinstance(root, str):
            yield f"{path}.output", root
        else:
            for i, sub in enumerate(root):
                yield from _strings_of(sub, f"{path}.output[{i}]")
    elif isinstance(part, ImagePart):
        yield f"{path}.source.media_type", part.source.media_type
    elif isinstance(part, (ServerToolCallPart, ServerToolResultPart, CompactionPart)):
        for name in ("id", "call_id", "name", "output", "provider", "server", "summary"):
            value = getattr(part, name, None)
            if isinstance(value, str):
                yield f"{path}.{name}", value
        if isinstance(part, ServerToolCallPart):
            yield from _json_strings(part.input, f"{path}.input")
        if part.raw is not None:
            yield from _json_strings(part.raw, f"{path}.raw")


def _json_strings(value: Any, path: str) -> Iterable[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield path, k
            yield from _json_strings(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _json_strings(v, f"{path}[{i}]")


def _a(role: Role) -> str:
    """``"a user"``, ``"an assistant"``, ``"a system"``: the role with its article, for problem details."""
    return f"an {role.value}" if role is Role.ASSISTANT else f"a {role.value}"
