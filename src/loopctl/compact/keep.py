"""Deciding what a compaction keeps: a head, the ``Durable`` results of the dropped middle, and a recent tail.

Both compactors cut the conversation into three stretches at allowed cuts (``structure.Layout``):
``messages[:head_end]`` (kept), the middle (dropped, except for its ``Durable`` results and their calls),
and ``messages[keep_from:]`` (kept). The tail starts as the protected tail and grows backwards, one whole
block between two allowed cuts at a time, while the result still fits the target. If even the parts that
must be kept (head, ``Durable`` results with their calls, protected tail, and the room the compactor
reserves for what it inserts) exceed the target, the plan raises
:class:`~loopctl.errors.CompactionOverflow` with the numbers.

Token accounting is exact for :class:`~loopctl.compact.HeuristicTokenCounter` (it is additive over
messages). Pure: no I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from loopctl.compact.counting import TokenCounter, message_tokens
from loopctl.compact.structure import Layout, base_tokens, durable_copy, per_message_tokens, scan, tail_start
from loopctl.errors import CompactionOverflow
from loopctl.message import Message

__all__ = ["KeepPlan", "plan_keep"]


@dataclass(slots=True)
class KeepPlan:
    """The outcome of :func:`plan_keep`.

    ``head_end`` / ``keep_from``: ``messages[:head_end]`` and ``messages[keep_from:]`` are kept as they are;
    the middle ``messages[head_end:keep_from]`` is dropped except for ``copies`` (its ``Durable`` results
    and their calls, in order). ``tokens_before``: the input's size. ``tokens_kept``: the size of head,
    copies and tail together (without what the compactor inserts). ``room``: what is left of the target for
    the compactor's insert (at least the ``reserve`` asked for). ``dropped``: whether anything goes at all.
    """

    head_end: int
    keep_from: int
    copies: list[Message]
    tokens_before: int
    tokens_kept: int
    room: int
    dropped: bool

    def assemble(self, messages: Sequence[Message], inserted: Sequence[Message] = ()) -> list[Message]:
        """Head, then ``inserted``, then the copies, then the tail."""
        return [*messages[: self.head_end], *inserted, *self.copies, *messages[self.keep_from :]]


def plan_keep(
    messages: Sequence[Message],
    *,
    counter: TokenCounter,
    target: int,
    protected_tail: int,
    head_end: int,
    keep_thinking: bool,
    reserve: int,
    what: str,
    layout: Layout | None = None,
) -> KeepPlan:
    """Plan a compaction of ``messages`` down to ``target`` tokens (see the module docstring).

    ``head_end``: the wanted end of the head (moved forward to an allowed cut). ``keep_thinking``: keep the
    thinking that belongs to each kept ``Durable`` call. ``reserve``: tokens the compactor needs for what it
    inserts after the head (a notice, a summary); counted as part of what must be kept. ``what``: the
    compactor's name, for the error text. Raises :class:`~loopctl.errors.CompactionOverflow` when head,
    ``Durable`` copies, protected tail and ``reserve`` together exceed ``target``.
    """
    layout = layout or scan(messages)
    n = len(messages)
    tokens = per_message_tokens(counter, messages)
    base = base_tokens(counter)
    before = max(0, base + sum(tokens))
    head_end = layout.cut_at_or_after(min(head_end, n))
    keep_from = max(tail_start(tokens, protected_tail, layout), head_end)

    bounds = [i for i in range(head_end, keep_from + 1) if layout.cut_ok[i]]
    blocks: list[tuple[int, int, list[Message], int]] = []  # (start, end, copies, full - copy tokens)
    copy_tokens_total = 0
    for start, end in itertools.pairwise(bounds):
        copies: list[Message] = []
        copy_tokens = 0
        for i in range(start, end):
            c = durable_copy(messages[i], i, layout, keep_thinking=keep_thinking)
            if c is not None:
                copies.append(c)
                copy_tokens += tokens[i] if c is messages[i] else message_tokens(counter, c)
        copy_tokens_total += copy_tokens
        blocks.append((start, end, copies, sum(tokens[start:end]) - copy_tokens))

    head_tokens = sum(tokens[:head_end])
    tail_tokens = sum(tokens[keep_from:])
    must_keep = base + head_tokens + copy_tokens_total + tail_tokens
    if must_keep + reserve > target:
        raise CompactionOverflow(
            f"{what}: the parts it must keep do not fit the target of {target:,} tokens: first message(s) "
            f"{head_tokens:,}, Durable results with their calls {copy_tokens_total:,}, protected tail "
            f"{tail_tokens:,}, fixed part (system prompt, tools) {base:,}"
            + (f", room for its own insert {reserve:,}" if reserve else "")
            + f" tokens; {must_keep + reserve:,} in all",
            tokens_before=before,
            tokens_after=must_keep + reserve,
            target=target,
        )
    kept = must_keep
    k = len(blocks)
    while k > 0 and kept + blocks[k - 1][3] + reserve <= target:
        kept += blocks[k - 1][3]
        k -= 1
    dropped = any(blocks[i][3] > 0 or len(blocks[i][2]) < blocks[i][1] - blocks[i][0] for i in range(k))
    copies = [c for i in range(k) for c in blocks[i][2]]
    new_keep_from = blocks[k][0] if k < len(blocks) else keep_from
    return KeepPlan(head_end, new_keep_from, copies, before, kept, target - kept, dropped)
