"""A read-only view of a conversation that only grows: what :meth:`loopctl.engine.LoopMachine.full_history`
returns, and what a request's ``messages`` are when the engine makes it.

A :class:`MessageView` shows the first ``n`` messages of a list whose owner only ever appends to it (any other
change, a compaction, a prune, a salvage, is made on a new list). It costs O(1) to make, and it lets a reader
that saw an earlier request know in O(1) that the next one continues it (:meth:`MessageView.extends`): the
prompt-cache watch (:mod:`loopctl.providers.cache`) and the incremental pairing check
(:class:`loopctl.testing.ScriptedClient`) read a long conversation's new messages only.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from typing import overload

from loopctl.message.model import Message

__all__ = ["MessageView"]


class MessageView(Sequence[Message]):
    """The first ``n`` messages of ``items``, a list its owner only appends to, as a read-only sequence.

    Indexing, slicing (a new ``list``), iteration, ``len`` and equality (with any sequence of equal messages)
    behave as for the list of those messages; appends to ``items`` after the view was made are not in it.
    Made in O(1); ``n`` must be at most ``len(items)``.
    """

    __slots__ = ("_items", "_n")

    def __init__(self, items: list[Message], n: int) -> None:
        self._items = items
        self._n = n

    def extends(self, earlier: object) -> bool:
        """Whether ``earlier`` is a view of the same list as this one and no longer: its messages are then this
        view's first ``len(earlier)`` messages, known in O(1) without comparing any (the list only grows).
        ``False`` says nothing either way: compare the messages to know."""
        return type(earlier) is MessageView and earlier._items is self._items and earlier._n <= self._n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            if index.step is None or index.step == 1:  # one copy, of the range asked for only
                start, stop, _ = index.indices(self._n)
                return self._items[start:stop]
            return self._items[: self._n][index]
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError("message index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[Message]:
        return islice(self._items, self._n)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return len(other) == self._n and all(a == b for a, b in zip(self, other, strict=False))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"<{self._n} messages>"
