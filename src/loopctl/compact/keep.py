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
        """Head, then ``inserted``, then the copies, then the tail.

        ``messages`` is the conversation the plan was made for.
        """
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
    tokens: Sequence[int] | None = None,
) -> KeepPlan:
    """Plan a compaction of ``messages`` down to ``target`` tokens (see the module docstring).

    ``head_end``: the wanted end of the head (moved forward to an allowed cut). ``keep_thinking``: keep the
    thinking that belongs to each kept ``Durable`` call. ``reserve``: tokens the compactor needs for what it
    inserts after the head (a notice, a summary); counted as part of what must be kept. ``what``: the
    compactor's name, for the error text. ``layout`` / ``tokens``: :func:`~loopctl.compact.structure.scan`
    and the per-message tokens, when the caller has them already. Raises
    :class:`~loopctl.errors.CompactionOverflow` when head, ``Durable`` copies, protected tail and
    ``reserve`` together exceed ``target``.

    Cost: one pass over the messages for the tokens (none when given), prefix sums at C speed, work in
    proportion to the messages holding ``Durable`` parts, and a binary search for the cut.

    ``counter`` counts tokens; ``protected_tail`` is the number of tokens at the end that are kept whole (see
    :func:`~loopctl.compact.structure.tail_start`).
    """
    layout = layout or scan(messages)
    n = len(messages)
    tokens = tokens if tokens is not None else per_message_tokens(counter, messages)
    base = base_tokens(counter)
    before = max(0, base + sum(tokens))
    head_end = layout.cut_at_or_after(min(head_end, n))
    keep_from = max(tail_start(tokens.__getitem__, protected_tail, layout), head_end)

    # The Durable copies of the middle, by message index (assistant messages with Durable calls, messages
    # with Durable results), and what they weigh.
    bearing = sorted(i for i in (*layout.durable_calls, *layout.durable_results) if head_end <= i < keep_from)
    copies: dict[int, tuple[Message, int]] = {}
    for i in bearing:
        c = durable_copy(messages[i], i, layout, keep_thinking=keep_thinking)
        if c is not None:
            copies[i] = (c, tokens[i] if c is messages[i] else message_tokens(counter, c))
    copy_tokens = sum(t for _, t in copies.values())

    head_tokens = sum(tokens[:head_end])
    tail_tokens = sum(tokens[keep_from:])
    must_keep = base + head_tokens + copy_tokens + tail_tokens
    if must_keep + reserve > target:
        raise CompactionOverflow(
            f"{what}: the parts it must keep do not fit the target of {target:,} tokens: first message(s) "
            f"{head_tokens:,}, Durable results with their calls {copy_tokens:,}, protected tail "
            f"{tail_tokens:,}, fixed part (system prompt, tools) {base:,}"
            + (f", room for its own insert {reserve:,}" if reserve else "")
            + f" tokens; {must_keep + reserve:,} in all",
            tokens_before=before,
            tokens_after=must_keep + reserve,
            target=target,
        )
    # Grow the tail backwards over whole blocks (between allowed cuts) while it fits. Moving the cut back
    # never shrinks the result (a copy holds a subset of its message), so the best cut is found by binary
    # search over the allowed cuts, with prefix sums for the sizes.
    full = list(itertools.accumulate(tokens, initial=0))
    copy_at = [0] * (n + 1)
    for i, (_, t) in copies.items():
        copy_at[i + 1] = t
    copied = list(itertools.accumulate(copy_at))
    cuts = list(itertools.compress(range(head_end, keep_from + 1), layout.cut_ok[head_end : keep_from + 1]))

    def size_from(cut: int) -> int:
        return must_keep + (full[keep_from] - full[cut]) - (copied[keep_from] - copied[cut])

    lo, hi = 0, len(cuts) - 1  # cuts[hi] == keep_from always fits (it is must_keep)
    while lo < hi:
        mid = (lo + hi) // 2
        if size_from(cuts[mid]) + reserve <= target:
            hi = mid
        else:
            lo = mid + 1
    start = cuts[lo]
    kept = size_from(start)
    kept_copies = [copies[i][0] for i in bearing if i < start and i in copies]
    identical = sum(1 for i in bearing if i < start and i in copies and copies[i][0] is messages[i])
    dropped = identical < start - head_end
    return KeepPlan(head_end, start, kept_copies, before, kept, target - kept, dropped)
