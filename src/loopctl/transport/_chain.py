"""Stateful Responses: which response (or conversation) of the server each conversation continues.

The engine sends the whole conversation with every call; a stateful client sends only what the server does not
hold yet. After each reply it records the request's messages and the reply (the server now holds all of them,
under the reply's id); a request that starts with exactly those messages (the same objects: messages are
immutable, so identity is equality) continues that response, with only the messages after them sent
(``previous_response_id``, or a ``conversation`` id). Anything else (an edited history, a compaction, a fork)
is sent whole, and starts a new chain. Pure bookkeeping: no I/O.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from loopctl.errors import ProviderError
from loopctl.message import Message

__all__ = ["Chains", "Link", "lost_state"]


@dataclass(slots=True)
class Link:
    """What the server holds of one conversation: ``messages`` (the last request's messages and its reply),
    under ``response_id`` (the reply's id) or ``conversation`` (a Conversations API id)."""

    messages: list[Message]
    response_id: str | None = None
    conversation: str | None = None


class Chains:
    """The links of the conversations a client serves, keyed by the first message object (at most ``limit``,
    least recently used dropped)."""

    __slots__ = ("_links", "limit")

    def __init__(self, limit: int = 256) -> None:
        self._links: OrderedDict[int, Link] = OrderedDict()
        self.limit = limit

    def find(self, messages: Sequence[Message]) -> Link | None:
        """The link ``messages`` continue: its messages are the first of ``messages``, and at least one new
        message follows them. ``None`` otherwise."""
        if not messages:
            return None
        link = self._links.get(id(messages[0]))
        if link is None:
            return None
        held = link.messages
        n = len(held)
        if n >= len(messages) or held[0] is not messages[0]:
            return None
        if not all(map(operator.is_, held, messages[:n])):
            return None
        self._links.move_to_end(id(messages[0]))
        return link

    def conversation_of(self, messages: Sequence[Message]) -> str | None:
        """The Conversations API id this conversation was given, whatever it holds now (a conversation id stays
        valid after an edit: the server keeps its items, and a request that does not continue them starts a
        new conversation instead, see :meth:`record`)."""
        link = self._links.get(id(messages[0])) if messages else None
        return link.conversation if link is not None and link.messages[0] is messages[0] else None

    def record(
        self, messages: Sequence[Message], reply: Message, *, response_id: str | None, conversation: str | None = None
    ) -> None:
        """The server now holds ``messages`` and ``reply`` (under ``response_id`` / in ``conversation``)."""
        if not messages:
            return
        key = id(messages[0])
        self._links[key] = Link([*messages, reply], response_id, conversation)
        self._links.move_to_end(key)
        while len(self._links) > self.limit:
            self._links.popitem(last=False)

    def forget(self, messages: Sequence[Message]) -> None:
        """Drop the link of the conversation ``messages`` belong to (its server state is gone)."""
        if messages:
            self._links.pop(id(messages[0]), None)


def lost_state(error: BaseException) -> bool:
    """True for the server's "I no longer have what you refer to": ``previous_response_not_found`` (a 400 or a
    404; a WebSocket ``error`` event), a conversation not found. The request is then sent whole, once."""
    if not isinstance(error, ProviderError):
        return False
    body = error.body
    inner = body.get("error") if isinstance(body, dict) else None
    code = inner.get("code") if isinstance(inner, dict) else None
    param = inner.get("param") if isinstance(inner, dict) else None
    if code in ("previous_response_not_found", "conversation_not_found"):
        return True
    text = (error.provider_message or "").lower()
    if error.status == 404 or (error.status is not None and 400 <= error.status < 500):
        if param in ("previous_response_id", "conversation"):
            return True
        return ("previous response" in text or "conversation" in text) and "not found" in text
    return False
