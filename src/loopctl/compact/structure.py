"""The shape of a conversation that the passes must respect: where it may be cut, what a result answers,
and how to keep only the ``Durable`` results (with their calls) of a stretch that is being dropped.

Rules (``docs/wire-format.md``, "Conversation rules"; ``docs/compaction.md``, "Retention classes"):

- A tool result answers a call of the latest assistant message before it, so a cut between an assistant
  message and the last message holding one of its results would orphan a result or leave a call
  unanswered. Cuts are allowed only at the other boundaries (:attr:`Layout.cut_ok`).
- A run of thinking parts belongs to the tool calls after it, up to the next thinking part (Anthropic sends
  thinking before the ``tool_use`` blocks it led to, OpenAI Responses a reasoning item before its
  ``function_call`` items; Gemini's signature part sits right before the ``functionCall`` it came on,
  ``docs/providers.md``, "The reasoning replay policy"); keeping a call keeps the thinking that belongs to it.
- A provider item id (``item_id``) stays only where its part keeps the neighbour it had in the reply: an
  OpenAI Responses item sent with its id but without its reasoning item is refused
  (:func:`durable_copy`).

Everything here is linear in the number of messages. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from loopctl.compact.counting import HeuristicTokenCounter, TokenCounter
from loopctl.compact.textcut import clip
from loopctl.message import (
    Message,
    MessagePart,
    Retention,
    Role,
    ServerToolCallPart,
    ServerToolResultPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)

__all__ = [
    "CALL_INPUT_CHARS",
    "Layout",
    "base_tokens",
    "describe_call",
    "durable_copy",
    "per_message_tokens",
    "scan",
    "tail_start",
]

CALL_INPUT_CHARS = 200
"""A marker shows at most this many characters of a call's JSON input (cut safely, then ``…``)."""


@dataclass(slots=True)
class Layout:
    """What :func:`scan` learned about a conversation of ``n`` messages.

    ``cut_ok[i]`` (for ``0 <= i <= n``): a cut before message ``i`` separates no call from its result.
    ``answered_by[j]``: for a message holding tool results, the index of the assistant message whose calls
    they answer (``-1`` if none). ``durable_calls[a]``: the ids of the calls of assistant message ``a``
    whose results are ``Durable``; ``durable_results``: the indices of the messages holding ``Durable``
    results, ascending. ``untagged`` / ``requery``: the positions ``(message, part)`` of the untagged and
    ``Requery`` results that answer a call, oldest first. ``last_assistant``: index of the last assistant
    message (``-1``).
    """

    n: int
    cut_ok: list[bool]
    answered_by: dict[int, int] = field(default_factory=dict)
    durable_calls: dict[int, set[str]] = field(default_factory=dict)
    durable_results: list[int] = field(default_factory=list)
    untagged: list[tuple[int, int]] = field(default_factory=list)
    requery: list[tuple[int, int]] = field(default_factory=list)
    last_assistant: int = -1

    def cut_at_or_before(self, i: int) -> int:
        """The largest allowed cut ``<= i``."""
        while i > 0 and not self.cut_ok[i]:
            i -= 1
        return max(i, 0)

    def cut_at_or_after(self, i: int) -> int:
        """The smallest allowed cut ``>= i``."""
        while i < self.n and not self.cut_ok[i]:
            i += 1
        return min(i, self.n)


def scan(messages: Sequence[Message]) -> Layout:
    """One pass over ``messages``: allowed cuts, which assistant message each result answers, the ``Durable``
    results and their calls, and where the prunable results are."""
    n = len(messages)
    answered_by: dict[int, int] = {}
    last_result_of: dict[int, int] = {}
    durable_calls: dict[int, set[str]] = {}
    durable_results: list[int] = []
    untagged: list[tuple[int, int]] = []
    requery: list[tuple[int, int]] = []
    assistant, durable, requery_class = Role.ASSISTANT, Retention.DURABLE, Retention.REQUERY
    last_a = -1
    for j, m in enumerate(messages):
        if m.role is assistant:
            last_a = j
            # What the provider ran itself rides in the assistant message with its call: its results are
            # pooled like tool results, a Durable one keeps its call (same message) through a compaction.
            for k, part in enumerate(m.parts):
                if isinstance(part, ServerToolResultPart):
                    retention = part.retention
                    if retention is None:
                        untagged.append((j, k))
                    elif retention is requery_class:
                        requery.append((j, k))
                    elif retention is durable:
                        durable_calls.setdefault(j, set()).add(part.call_id)
            continue
        if last_a < 0:
            continue
        holds_durable = False
        for k, part in enumerate(m.parts):
            if isinstance(part, ToolResultPart):
                answered_by[j] = last_a
                last_result_of[last_a] = j
                retention = part.retention
                if retention is None:
                    untagged.append((j, k))
                elif retention is requery_class:
                    requery.append((j, k))
                elif retention is durable:
                    durable_calls.setdefault(last_a, set()).add(part.call_id)
                    holds_durable = True
        if holds_durable:
            durable_results.append(j)
    cut_ok = [True] * (n + 1)
    for a, end in last_result_of.items():
        cut_ok[a + 1 : end + 1] = [False] * (end - a)
    return Layout(n, cut_ok, answered_by, durable_calls, durable_results, untagged, requery, last_a)


def base_tokens(counter: TokenCounter) -> int:
    """What a request costs besides its messages under ``counter`` (system prompt, tools, calibration
    offset); may be negative for a calibrated :class:`HeuristicTokenCounter`."""
    if isinstance(counter, HeuristicTokenCounter):
        return counter.fixed_tokens()
    return counter.count([])


def per_message_tokens(counter: TokenCounter, messages: Sequence[Message]) -> list[int]:
    """The tokens each message adds, in order (``count([m]) - count([])`` for a plain counter).

    ``messages`` is the conversation; ``counter`` counts its tokens.
    """
    if isinstance(counter, HeuristicTokenCounter):
        return counter.tokens_each(messages)
    base = counter.count([])
    return [counter.count([m]) - base for m in messages]


def tail_start(token_of: Callable[[int], int], protected: int, layout: Layout) -> int:
    """Where the protected tail starts: the messages that fit, whole, in the last ``protected`` tokens, and
    always at least the last message; then back to an allowed cut, so the tail never starts between a call
    and its results (and so always holds the results the model has not seen yet). A big message just before
    the tail is not protected by being next to it. ``token_of(i)``: the tokens of message ``i``; only the
    messages near the end are asked for.

    ``layout`` is the conversation's :func:`scan`.
    """
    n = layout.n
    if n == 0:
        return 0
    i = n - 1
    acc = token_of(i)
    while i > 0 and acc + token_of(i - 1) <= protected:
        i -= 1
        acc += token_of(i)
    return layout.cut_at_or_before(i)


def durable_copy(message: Message, index: int, layout: Layout, *, keep_thinking: bool) -> Message | None:
    """What of ``message`` (at ``index``) survives when its stretch of the conversation is dropped: only the
    ``Durable`` results, or in an assistant message only the calls answered by ``Durable`` results (and the
    provider-side calls with their ``Durable`` results, which ride in the same message), each
    with the thinking that belongs to it (unless ``keep_thinking`` is false: thinking ages out). Text,
    images, other results and system messages go. Returns ``None`` when nothing survives, so a pass never
    creates an empty message. A message that survives whole is returned as is (same object).

    The thinking that belongs to a call is the run of thinking parts that opens its group: a group is a run
    of thinking parts and the parts after it up to the next thinking part, so parallel calls share the
    thinking before the first of them (Anthropic's thinking block before its ``tool_use`` blocks, OpenAI
    Responses' reasoning item before its ``function_call`` items), and it is kept once, before the first kept
    call of the group.

    Item ids (``item_id``, OpenAI Responses ``fc_…`` / ``rs_…``) refer to a reply's items as the provider
    stored them, where a reasoning item and the item right after it are a pair the API checks ("Item 'fc_…'
    of type 'function_call' was provided without its required 'reasoning' item", ``docs/providers/
    openai_responses.md``). A kept part that is not a thinking part therefore keeps its ``item_id`` only when
    the part before it in the message is also the part before it in the copy; otherwise the copy drops the
    id with the pair (an item without an id is new input, always accepted), and the Responses codec then
    leaves out a reasoning item whose following item has no id.

    ``layout`` is the conversation's :func:`scan`.
    """
    if message.role is Role.ASSISTANT:
        keep_ids = layout.durable_calls.get(index)
        if not keep_ids:
            return None
        picked: list[int] = []
        group: list[int] = []  # the thinking run that opens the current group
        emitted = True  # the current group's thinking is already in ``picked`` (or there is none)
        after_thinking = False
        for i, part in enumerate(message.parts):
            if isinstance(part, ThinkingPart):
                if not after_thinking:
                    group, emitted = [], False  # a new group starts
                group.append(i)
                after_thinking = True
                continue
            after_thinking = False
            if (isinstance(part, (ToolCallPart, ServerToolCallPart)) and part.id in keep_ids) or (
                isinstance(part, ServerToolResultPart) and part.call_id in keep_ids
            ):
                if keep_thinking and not emitted:
                    picked.extend(group)
                emitted = True
                picked.append(i)
        parts = message.parts
        if len(picked) == len(parts):
            return message
        kept: list[MessagePart] = []
        previous = -1
        for i in picked:
            part = parts[i]
            if previous != i - 1 and not isinstance(part, ThinkingPart) and getattr(part, "item_id", None) is not None:
                part = part.model_copy(update={"item_id": None})
            kept.append(part)
            previous = i
    else:
        kept = [p for p in message.parts if isinstance(p, ToolResultPart) and p.retention is Retention.DURABLE]
        if kept and index not in layout.answered_by:
            return None  # a result with no call before it: never keep it
        if len(kept) == len(message.parts):
            return message
    if not kept:
        return None
    return message.model_copy(update={"parts": tuple(kept)})


def describe_call(name: str, call_input: Any, limit: int = CALL_INPUT_CHARS) -> str:
    """``name(<compact JSON input>)`` with the input cut safely to ``limit`` characters, for markers.

    ``call_input`` is the call's input (a JSON value).
    """
    try:
        # orjson writes the same compact, key-sorted, UTF-8 JSON as ``str(message)`` shows a call, ten times faster.
        text = orjson.dumps(call_input, option=orjson.OPT_SORT_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):
        try:  # integers past 64 bits
            text = json.dumps(call_input, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
        except (TypeError, ValueError):
            text = repr(call_input)
    return f"{name or 'tool'}({clip(text, limit)})"


def calls_of(messages: Sequence[Message], layout: Layout, index: int) -> dict[str, ToolCallPart]:
    """The tool calls that the results in message ``index`` answer, by id."""
    a = layout.answered_by.get(index, -1)
    if a < 0:
        return {}
    return {p.id: p for p in messages[a].parts if isinstance(p, ToolCallPart)}
