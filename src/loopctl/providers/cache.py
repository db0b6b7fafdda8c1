"""Prompt caching across providers: the OpenAI cache fields, and watching that each request extends the one
before it (a request that does not re-reads, or re-writes, what the provider had cached: a cache bust).

Providers cache the longest prefix a request shares with an earlier one: Anthropic up to the ``cache_control``
breakpoints (platform.claude.com/docs/en/build-with-claude/prompt-caching), OpenAI automatically, routed by
``prompt_cache_key`` (platform.openai.com/docs/guides/prompt-caching), Gemini implicitly and through explicit
cached contents (ai.google.dev/gemini-api/docs/caching). The prefix is the tools, then the system prompt, then
the messages in order: a request whose tools or system text changed, or whose messages do not start with the
previous request's, starts again from the first difference.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from loopctl._frozen import dataclass
from loopctl.errors import UnsupportedContent
from loopctl.message import Message, MessageView
from loopctl.message.model import _dumps_bytes

__all__ = ["CacheBust", "PrefixWatch", "openai_cache_fields", "prompt_cache_key"]

PromptCacheRetention = Literal["in_memory", "24h"]
"""OpenAI's ``prompt_cache_retention`` values (openai-python ``ResponseCreateParams``)."""


def prompt_cache_key(messages: Sequence[Message], system: str | None) -> str:
    """A key stable for one conversation: ``loopctl-`` and 32 hex digits of the SHA-256 of the system prompt
    and the first message. Every request of a session shares them (a compaction keeps the first message), so
    OpenAI routes them to the machines that hold their prefix; two sessions that open alike share it too,
    which is what the key is for (requests with long common prefixes).

    ``messages`` is the conversation; ``system`` its system prompt.
    """
    digest = hashlib.sha256()
    digest.update((system or "").encode("utf-8", "surrogatepass"))
    digest.update(b"\x00")
    if messages:
        digest.update(_dumps_bytes(messages[0].to_dict()))
    return "loopctl-" + digest.hexdigest()[:32]


def openai_cache_fields(
    messages: Sequence[Message],
    system: str | None,
    *,
    key: str | None,
    retention: PromptCacheRetention | None,
    options: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The cache fields of an OpenAI request (Chat Completions and Responses take the same ones):
    ``prompt_cache_key`` (``key``; ``"auto"``: :func:`prompt_cache_key`), ``prompt_cache_retention``
    (``"in_memory"`` or ``"24h"``) and ``prompt_cache_options`` (sent as given: ``mode``, ``ttl``...). Raises
    :class:`~loopctl.errors.UnsupportedContent` for a retention the API does not take.

    ``messages`` and ``system`` are the request's conversation and system prompt (what ``"auto"`` derives the key
    from); ``options`` the value of the ``prompt_cache_options`` codec option, or ``None``.
    """
    out: dict[str, Any] = {}
    if key is not None:
        out["prompt_cache_key"] = prompt_cache_key(messages, system) if key == "auto" else key
    if retention is not None:
        if retention not in ("in_memory", "24h"):
            raise UnsupportedContent(f"prompt_cache_retention must be 'in_memory' or '24h', not {retention!r}")
        out["prompt_cache_retention"] = retention
    if options:
        out["prompt_cache_options"] = dict(options)
    return out


@dataclass(frozen=True, slots=True)
class CacheBust:
    """A request that does not extend the one before it: ``what`` changed (``"tools"``, ``"system"``,
    ``"messages"``), from message ``index`` on (``None`` for tools and system), and a readable ``reason``
    (``"messages[3] (user) changed"``)."""

    what: Literal["tools", "system", "messages"]
    index: int | None
    reason: str


class PrefixWatch:
    """Compares each request with the one before it (tools, system prompt, messages) and tells when it does
    not extend it. Messages are compared by identity first (the engine keeps the same objects), by value
    only when the objects differ, so a long conversation costs about one comparison per message; a request
    whose messages :meth:`~loopctl.message.MessageView.extends` the request before's (the engine's requests
    are such views) continues it by construction and costs O(1)."""

    __slots__ = ("_messages", "_system", "_tools")

    def __init__(self) -> None:
        # The last request's messages: a MessageView as it came (a snapshot), anything else copied to a list.
        self._messages: Sequence[Message] | None = None
        self._system: str | None = None
        self._tools: tuple[Any, ...] = ()

    def check(self, messages: Sequence[Message], system: str | None, tools: Sequence[Any]) -> CacheBust | None:
        """The bust ``messages`` (with ``system`` and ``tools``) makes against the request seen before, or
        ``None`` when it extends it (or is the first); remembers this request for the next check."""
        previous = self._messages
        before_system, before_tools = self._system, self._tools
        view = messages if type(messages) is MessageView else None
        self._messages = messages if view is not None else list(messages)
        self._system = system
        if tools is not before_tools:
            self._tools = tools if type(tools) is tuple else tuple(tools)
        if previous is None:
            return None
        if tools is not before_tools and (
            len(before_tools) != len(tools)
            or any(a is not b and a != b for a, b in zip(before_tools, tools, strict=False))
        ):
            names = {getattr(t, "name", type(t).__name__) for t in tools}
            old = {getattr(t, "name", type(t).__name__) for t in before_tools}
            detail = (
                ", ".join([*(f"+{n}" for n in sorted(names - old)), *(f"-{n}" for n in sorted(old - names))])
                or "a tool's definition"
            )
            return CacheBust("tools", None, f"the tools changed ({detail})")
        if system != before_system:
            return CacheBust("system", None, "the system prompt changed")
        if view is not None and view.extends(previous):
            return None  # the same append-only list, no shorter: the previous messages are its first items
        n = len(messages)
        shared = min(len(previous), n)
        head = messages[:shared]
        if not all(map(operator.is_, previous[:shared], head)):  # C speed while the objects are the same
            for i, (a, b) in enumerate(zip(previous, head, strict=False)):
                if a is not b and a != b:
                    return CacheBust("messages", i, f"messages[{i}] ({a.role.value}) changed")
        if n < len(previous):
            return CacheBust("messages", n, f"the conversation lost messages from messages[{n}] on")
        return None
