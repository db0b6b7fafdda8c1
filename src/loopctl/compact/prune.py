"""The prune pass: replace the output of old tool results with a short marker that names the call.

The retention classes (``docs/compaction.md``, "Retention classes"): untagged results go first and are
exactly what the prune pass clears; ``Requery`` results are cleared after the untagged pool runs out, with a
marker naming the tool call; ``Durable`` results are never pruned. The order is untagged first, oldest
first, ``Requery`` only while still short of the needed room; a recent tail (2,000 tokens by default) is
never touched.

A pruned result keeps its ``call_id``, ``name``, ``is_error`` and ``retention``; only ``output`` changes,
so pairing is untouched and no message loses a part. A result the provider produced itself (a
:class:`~loopctl.message.ServerToolResultPart`, in the assistant message of its call) is pruned the same way,
and it and its call also lose their ``raw`` blocks, which carry the result verbatim: the pair then travels
as notes to every provider, its own included. Messages the pass does not change are returned as the
same objects (a counter's per-message cache keeps hitting).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from loopctl.compact.counting import HeuristicTokenCounter, TokenCounter, message_tokens
from loopctl.compact.structure import Layout, describe_call, scan, tail_start
from loopctl.message import Message, MessagePart, ServerToolCallPart, ServerToolResultPart, ToolCallPart, ToolResultPart

__all__ = ["PRUNE_MARKER", "prune", "prune_marker"]

PRUNE_MARKER = "[output pruned to save context: {call}. Run the call again if you need its result.]"
"""The text that replaces a pruned result's output; ``{call}`` becomes ``name(<JSON input>)`` with the input
cut to 200 characters without breaking a character."""


def prune_marker(name: str, call_input: object) -> str:
    """The marker for a result of the call ``name(call_input)``."""
    return PRUNE_MARKER.format(call=describe_call(name, call_input))


def prune(
    messages: Sequence[Message],
    *,
    need: int | None = None,
    counter: TokenCounter | None = None,
    protected_tail: int = 2_000,
) -> list[Message]:
    """Replace old tool results' output with :data:`PRUNE_MARKER` and return the new list.

    ``need``: tokens to free (``ContextBudget.room_needed(tokens)``). Untagged results outside the
    protected tail are pruned oldest first until ``need`` is met, then ``Requery`` results oldest first
    until it is met; ``Durable`` results never. With ``need=None`` every old untagged result is pruned and
    no ``Requery`` result. A result whose output is already no bigger than its marker is skipped.
    ``counter`` measures the savings (default: a fresh :class:`HeuristicTokenCounter`).
    ``protected_tail``: the messages that fit whole in the last ``protected_tail`` tokens are never
    touched; nor is the last message, nor any result the model has not seen yet (the tail never starts
    between an assistant message and its results).

    Pruning is best effort: when everything prunable is pruned and ``need`` is still not met, the list is
    returned as it is and the budget's next check asks for a compaction. The input must satisfy
    ``check_conversation``; the output then does too.
    """
    if need is not None and need <= 0:
        return list(messages)
    counter = counter or HeuristicTokenCounter()
    layout = scan(messages)
    end = tail_start(lambda i: message_tokens(counter, messages[i]), protected_tail, layout)

    current: dict[int, Message] = {}
    freed = 0
    pools = [layout.untagged] if need is None else [layout.untagged, layout.requery]
    for pool in pools:
        for j, k in pool:
            if j >= end or (need is not None and freed >= need):
                break
            freed += _prune_one(messages, layout, counter, current, (j, k))
    out = list(messages)
    for j, m in current.items():
        out[j] = m
    return out


def _prune_one(
    messages: Sequence[Message],
    layout: Layout,
    counter: TokenCounter,
    current: dict[int, Message],
    where: tuple[int, int],
) -> int:
    """Prune part ``k`` of message ``j`` (``where``; in its current version) if that saves tokens; return the
    saving in tokens."""
    j, k = where
    msg = current.get(j, messages[j])
    part = msg.parts[k]
    parts: tuple[MessagePart, ...] = msg.parts
    if isinstance(part, ServerToolResultPart):
        new = _prune_server(msg, k, part)
        if new is None:
            return 0
    elif isinstance(part, ToolResultPart):
        call = _call_for(messages, layout.answered_by.get(j, -1), part.call_id)
        marker = prune_marker(call.name if call else part.name, call.input if call else "…")
        if part.output.root == marker:
            return 0
        # The constructors are faster than model_copy (pydantic passes the untouched parts through); every
        # field but the output is carried over, extension keys included.
        pruned = ToolResultPart(**{**part.__dict__, "output": marker})
        new = Message(role=msg.role, parts=(*parts[:k], pruned, *parts[k + 1 :]))
    else:  # pragma: no cover - the caller passes result positions only
        return 0
    if isinstance(counter, HeuristicTokenCounter):
        # Measured afresh: cache lookups in a million-message history cost more than measuring one message.
        saved = counter.measure(msg) - counter.measure(new)
    else:
        saved = message_tokens(counter, msg) - message_tokens(counter, new)
    if saved <= 0:
        return 0
    current[j] = new
    return saved


def _prune_server(msg: Message, k: int, part: ServerToolResultPart) -> Message | None:
    """``msg`` with the provider-side result at ``k`` pruned: its output becomes the marker, and it and its
    call (in the same message) lose their ``raw`` blocks, which hold the result too (an OpenAI Responses item
    carries call and result together; an Anthropic ``server_tool_use`` may not be sent without its result
    block). Every codec then sends the pair as notes. ``None`` when it is pruned already."""
    parts = list(msg.parts)
    call_at = next((i for i, p in enumerate(parts) if isinstance(p, ServerToolCallPart) and p.id == part.call_id), None)
    call = parts[call_at] if call_at is not None else None
    assert call is None or isinstance(call, ServerToolCallPart)
    marker = prune_marker(call.name if call else part.name, call.input if call else "…")
    if part.output == marker and part.raw is None and (call is None or call.raw is None):
        return None
    parts[k] = ServerToolResultPart(**{**part.__dict__, "output": marker, "raw": None})
    if call is not None and call_at is not None:
        parts[call_at] = ServerToolCallPart(**{**call.__dict__, "raw": None})
    return Message(role=msg.role, parts=tuple(parts))


def _call_for(messages: Sequence[Message], assistant: int, call_id: str) -> ToolCallPart | None:
    if assistant < 0:
        return None
    for p in messages[assistant].parts:
        if isinstance(p, ToolCallPart) and p.id == call_id:
            return p
    return None
