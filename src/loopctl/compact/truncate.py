"""The truncating compactor (the default): keep the first message and a recent tail, drop the middle.

No model call. The rules (``docs/compaction.md``, "The passes"; ``docs/compaction.md``, "Retention classes"):

- keep the first message (after any leading system messages, which are kept too) and a recent tail that
  holds at least the protected tail and grows while the result fits the budget's target;
- never separate a tool call from its result: cuts fall only where no call is waiting for a result
  (the cut moves instead), so no result is kept whose call was dropped;
- never separate a thinking block from the tool call it belongs to (messages are kept or dropped whole;
  a ``Durable`` call kept from the middle keeps its thinking, and loses its provider item id when the part
  before it in the reply is not kept with it: ``structure.durable_copy``);
- pull ``Durable`` results and their calls out of the dropped middle into the kept side, in order;
- never create an empty message and never return an empty conversation;
- if the parts that must be kept alone exceed the target, raise
  :class:`~loopctl.errors.CompactionOverflow` with the numbers.

A short user message (:data:`TRUNCATION_NOTICE`) tells the model that earlier messages were removed; it is
left out when it alone would tip the result over the target.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from loopctl.compact.budget import ContextBudget
from loopctl.compact.counting import message_tokens
from loopctl.compact.keep import KeepPlan, plan_keep
from loopctl.compact.structure import base_tokens, per_message_tokens, scan
from loopctl.errors import CompactionOverflow
from loopctl.message import Message, Role

__all__ = ["TRUNCATION_NOTICE", "Compactor", "TruncatingCompactor", "first_kept_index"]

TRUNCATION_NOTICE = (
    "[Earlier messages of this conversation were removed to fit the context window. Tool results marked "
    "durable were kept. Ask again or re-run a tool call if you need something that is gone.]"
)
"""The text of the user message inserted where the middle of the conversation was dropped."""


class Compactor(Protocol):
    """A compaction pass that needs no model call: messages in, messages out.

    ``compact(messages, budget)`` returns the new list (the input list's contents when nothing could go)
    and raises :class:`~loopctl.errors.CompactionOverflow` when the parts it must keep exceed
    ``budget.target_tokens``.
    """

    def compact(self, messages: Sequence[Message], budget: ContextBudget) -> list[Message]:
        """The compacted conversation.

        ``messages`` is the conversation; ``budget`` the :class:`~loopctl.compact.ContextBudget` whose target it
        must fit.
        """
        ...


def first_kept_index(messages: Sequence[Message]) -> int:
    """The index just past the first message that is not a system message (``len(messages)`` if none):
    the head a truncation keeps is ``messages[:first_kept_index(messages)]``, before cut alignment."""
    for i, m in enumerate(messages):
        if m.role is not Role.SYSTEM:
            return i + 1
    return len(messages)


class TruncatingCompactor:
    """Keep the first message and a recent tail; drop the middle except its ``Durable`` results with their
    calls (see the module docstring for every rule).

    ``notice``: the text of the user message inserted after the head when something was dropped
    (:data:`TRUNCATION_NOTICE`; ``None`` inserts nothing). The protected tail and the target come from the
    :class:`~loopctl.compact.ContextBudget` given to :meth:`compact`.
    """

    def __init__(self, *, notice: str | None = TRUNCATION_NOTICE) -> None:
        self.notice = notice

    def __repr__(self) -> str:
        return f"TruncatingCompactor(notice={'on' if self.notice else 'off'})"

    def compact(self, messages: Sequence[Message], budget: ContextBudget) -> list[Message]:
        """``messages`` truncated to ``budget.target_tokens`` (measured by ``budget.counter``).

        Returns the input's contents unchanged when they already fit the target or nothing may go; raises
        :class:`~loopctl.errors.CompactionOverflow` (``tokens_before``, ``tokens_after`` = what must be
        kept, ``target``) when the first message(s), the ``Durable`` results with their calls and the
        protected tail alone exceed the target.
        """
        if not messages:
            return []
        counter = budget.counter
        target = budget.target_tokens
        tokens = per_message_tokens(counter, messages)
        if base_tokens(counter) + sum(tokens) <= target:
            return list(messages)
        layout = scan(messages)
        notice = Message.user(self.notice) if self.notice else None

        def plan(reserve: int) -> KeepPlan:
            return plan_keep(
                messages,
                counter=counter,
                target=target,
                protected_tail=budget.protected_tail,
                head_end=first_kept_index(messages),
                keep_thinking=True,
                reserve=reserve,
                what="truncation",
                layout=layout,
                tokens=tokens,
            )

        try:
            kept = plan(message_tokens(counter, notice) if notice is not None else 0)
        except CompactionOverflow:
            if notice is None:
                raise
            notice = None  # the notice alone tipped it over: go without
            kept = plan(0)
        if not kept.dropped:
            return list(messages)
        return kept.assemble(messages, [notice] if notice is not None else [])
