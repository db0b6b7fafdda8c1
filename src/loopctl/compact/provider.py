"""Provider-side compaction: the strategies that let the provider compact the conversation on its side,
chosen in :class:`~loopctl.engine.SessionConfig` (``compactor=``) next to the local compactors.

Two kinds (``docs/compaction.md``, "Provider-side compaction"):

- request-side strategies ride on every request and the provider applies them when its own trigger passes:
  :class:`AnthropicCompaction` (the ``compact_20260112`` edit), :class:`AnthropicClearToolUses`
  (``clear_tool_uses_20250919`` context editing) and :class:`OpenAICompaction` (Responses
  ``context_management``). The engine turns its own threshold compaction off for them (pruning and the
  emergency line stay), counts the conversation as the provider reads it (from its last compaction on:
  :func:`window_start`) and, when a local pass has to run anyway, first drops what the provider no longer
  reads;
- :class:`OpenAICompactEndpoint`: at the threshold the engine sends the conversation to OpenAI's
  ``POST /v1/responses/compact`` and replaces it with the compacted window it returns (the user's messages
  and one opaque ``compaction`` item), the ``Durable`` tool results kept after it.

A provider's compaction block (a :class:`~loopctl.message.CompactionPart`) is kept in the conversation
(saved, resumed), replayed verbatim to its provider and never sent to another one.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar, Union

from loopctl._frozen import dataclass
from loopctl.compact.structure import durable_copy, scan
from loopctl.message import CompactionPart, Message, Retention, Role, TextPart, ToolResultPart

__all__ = [
    "ANTHROPIC_COMPACTION_BETA",
    "ANTHROPIC_CONTEXT_EDITING_BETA",
    "ANTHROPIC_MIN_TRIGGER",
    "COMPACTED_PLACEHOLDER",
    "AnthropicClearToolUses",
    "AnthropicCompaction",
    "OpenAICompactEndpoint",
    "OpenAICompaction",
    "ProviderCompaction",
    "RequestCompaction",
    "WindowCounter",
    "durable_after",
    "durable_tool_names",
    "is_request_side",
    "provider_window",
    "resolve",
    "window_start",
]

ANTHROPIC_COMPACTION_BETA = "compact-2026-01-12"
"""The ``anthropic-beta`` flag of the ``compact_20260112`` edit (platform.claude.com/docs/en/build-with-claude/
compaction)."""

ANTHROPIC_CONTEXT_EDITING_BETA = "context-management-2025-06-27"
"""The ``anthropic-beta`` flag of the ``clear_tool_uses_20250919`` edit (platform.claude.com/docs/en/
build-with-claude/context-editing)."""

ANTHROPIC_MIN_TRIGGER = 50_000
"""The smallest ``trigger`` Anthropic's compaction takes, in input tokens (default 150,000)."""

COMPACTED_PLACEHOLDER = Message(
    role=Role.USER, parts=(TextPart(text="(The conversation before this point was compacted by the provider.)"),)
)
"""The user message sent before a compaction block when the request would otherwise open with the
assistant's: the API drops every block before the compaction block, this one too, and a first message in the
user's role is what every Anthropic endpoint (Bedrock, Vertex) takes."""


def _positive(value: int | None, name: str, minimum: int = 1) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
        raise ValueError(f"{name} must be an int of at least {minimum:,}, got {value!r}")


@dataclass(frozen=True, slots=True)
class AnthropicClearToolUses:
    """Anthropic context editing: once the prompt passes ``trigger_tokens`` input tokens (or
    ``trigger_tool_uses`` tool uses), the API replaces the oldest tool results with a placeholder, keeping
    the last ``keep_tool_uses``, and only when at least ``clear_at_least_tokens`` can go. ``exclude_tools``
    are never cleared; the engine adds every tool whose results are ``Durable``. ``clear_tool_inputs``
    clears the calls' inputs too (``True``, or the names of the tools whose inputs go). Your conversation
    keeps everything: the clearing happens on the provider's side, on every request.

    Encoded as the ``clear_tool_uses_20250919`` edit of ``context_management.edits`` with the
    ``context-management-2025-06-27`` beta (platform.claude.com/docs/en/build-with-claude/context-editing;
    anthropic-sdk-python ``BetaClearToolUses20250919EditParam``). Unset fields take the API's defaults
    (trigger 100,000 input tokens, keep 3 tool uses).
    """

    trigger_tokens: int | None = None
    trigger_tool_uses: int | None = None
    keep_tool_uses: int | None = None
    clear_at_least_tokens: int | None = None
    exclude_tools: tuple[str, ...] = ()
    clear_tool_inputs: bool | tuple[str, ...] = False
    provider: ClassVar[str] = "anthropic"

    def __post_init__(self) -> None:
        if self.trigger_tokens is not None and self.trigger_tool_uses is not None:
            raise ValueError("give trigger_tokens or trigger_tool_uses, not both")
        _positive(self.trigger_tokens, "trigger_tokens")
        _positive(self.trigger_tool_uses, "trigger_tool_uses")
        _positive(self.keep_tool_uses, "keep_tool_uses", 0)
        _positive(self.clear_at_least_tokens, "clear_at_least_tokens")
        object.__setattr__(self, "exclude_tools", tuple(self.exclude_tools))
        if not isinstance(self.clear_tool_inputs, bool):
            object.__setattr__(self, "clear_tool_inputs", tuple(self.clear_tool_inputs))

    def edit(self) -> dict[str, Any]:
        """The ``clear_tool_uses_20250919`` edit."""
        edit: dict[str, Any] = {"type": "clear_tool_uses_20250919"}
        if self.trigger_tokens is not None:
            edit["trigger"] = {"type": "input_tokens", "value": self.trigger_tokens}
        elif self.trigger_tool_uses is not None:
            edit["trigger"] = {"type": "tool_uses", "value": self.trigger_tool_uses}
        if self.keep_tool_uses is not None:
            edit["keep"] = {"type": "tool_uses", "value": self.keep_tool_uses}
        if self.clear_at_least_tokens is not None:
            edit["clear_at_least"] = {"type": "input_tokens", "value": self.clear_at_least_tokens}
        if self.exclude_tools:
            edit["exclude_tools"] = list(self.exclude_tools)
        if self.clear_tool_inputs:
            edit["clear_tool_inputs"] = (
                True if self.clear_tool_inputs is True else list(self.clear_tool_inputs)  # type: ignore[arg-type]
            )
        return edit


@dataclass(frozen=True, slots=True)
class AnthropicCompaction:
    """Anthropic server-side compaction: once the input passes ``trigger_tokens`` (at least 50,000; the
    engine's default is its threshold line, ``compact_threshold`` times ``context_window``, else the API's
    150,000), the API summarizes the conversation into a ``compaction`` block at the start of its reply and
    reads nothing before that block on later requests. ``instructions`` replace the API's summarization
    prompt. ``clear_tool_uses`` adds context editing (:class:`AnthropicClearToolUses`) to the same request.

    Encoded as the ``compact_20260112`` edit of ``context_management.edits`` with the ``compact-2026-01-12``
    beta (platform.claude.com/docs/en/build-with-claude/compaction; anthropic-sdk-python
    ``BetaCompact20260112EditParam``). Compaction runs on the models the docs list (Claude Opus 4.6 and
    Sonnet 4.6 when written); another model answers with the API's error. The API's
    ``pause_after_compaction`` is not offered: the engine continues the turn itself.
    """

    trigger_tokens: int | None = None
    instructions: str | None = None
    clear_tool_uses: AnthropicClearToolUses | None = None
    provider: ClassVar[str] = "anthropic"

    def __post_init__(self) -> None:
        _positive(self.trigger_tokens, "trigger_tokens", ANTHROPIC_MIN_TRIGGER)
        if self.instructions is not None and not self.instructions.strip():
            raise ValueError("instructions must not be empty (leave them unset for the API's own prompt)")

    def edits(self) -> list[dict[str, Any]]:
        """The ``context_management.edits`` list: context editing first, then compaction."""
        edits = [self.clear_tool_uses.edit()] if self.clear_tool_uses is not None else []
        edit: dict[str, Any] = {"type": "compact_20260112"}
        if self.trigger_tokens is not None:
            edit["trigger"] = {"type": "input_tokens", "value": self.trigger_tokens}
        if self.instructions is not None:
            edit["instructions"] = self.instructions
        edits.append(edit)
        return edits


@dataclass(frozen=True, slots=True)
class OpenAICompaction:
    """OpenAI Responses server-side compaction: once the rendered input passes ``threshold_tokens`` (the
    engine's default: its threshold line), the server compacts the context and the reply carries an opaque
    ``compaction`` item, which later requests send back (items before the latest one may be left out, and
    are).

    Encoded as ``context_management: [{"type": "compaction", "compact_threshold": N}]``
    (developers.openai.com/api/docs/guides/compaction, "Server-side compaction"; openai-python
    ``response_create_params.ContextManagement``).
    """

    threshold_tokens: int | None = None
    provider: ClassVar[str] = "openai"

    def __post_init__(self) -> None:
        _positive(self.threshold_tokens, "threshold_tokens")

    def entries(self) -> list[dict[str, Any]]:
        """The ``context_management`` list."""
        entry: dict[str, Any] = {"type": "compaction"}
        if self.threshold_tokens is not None:
            entry["compact_threshold"] = self.threshold_tokens
        return [entry]


@dataclass(frozen=True, slots=True)
class OpenAICompactEndpoint:
    """Compaction by OpenAI's standalone endpoint: when the conversation passes the session's threshold, the
    engine sends it to ``POST /v1/responses/compact`` and replaces it with the compacted window returned
    (every user message, then one opaque ``compaction`` item; developers.openai.com/api/docs/guides/
    compaction, "Standalone compact endpoint"), followed by the ``Durable`` tool results (with their calls).
    ``instructions`` go with the request (default: the session's system text). Needs an
    :class:`~loopctl.transport.OpenAIResponsesClient`; a failed call falls back to local truncation.
    """

    instructions: str | None = None
    provider: ClassVar[str] = "openai"


RequestCompaction = Union[AnthropicCompaction, AnthropicClearToolUses, OpenAICompaction]
"""The strategies that ride on each request."""

ProviderCompaction = Union[AnthropicCompaction, AnthropicClearToolUses, OpenAICompaction, OpenAICompactEndpoint]
"""Every provider-side strategy :class:`~loopctl.engine.SessionConfig` takes as ``compactor``."""

_REQUEST_SIDE = (AnthropicCompaction, AnthropicClearToolUses, OpenAICompaction)


def resolve(
    strategy: RequestCompaction, *, threshold_tokens: int, durable_tools: Sequence[str] = ()
) -> RequestCompaction:
    """``strategy`` as the engine sends it: an unset trigger set to ``threshold_tokens`` (the session's
    threshold line; for Anthropic's compaction at least :data:`ANTHROPIC_MIN_TRIGGER`), and
    ``durable_tools`` (the names of the tools whose results are ``Durable``) added to a context edit's
    ``exclude_tools``."""
    if isinstance(strategy, OpenAICompaction):
        if strategy.threshold_tokens is None:
            return replace(strategy, threshold_tokens=max(1, threshold_tokens))
        return strategy
    if isinstance(strategy, AnthropicClearToolUses):
        return _exclude(strategy, durable_tools)
    clear = _exclude(strategy.clear_tool_uses, durable_tools) if strategy.clear_tool_uses is not None else None
    trigger = strategy.trigger_tokens
    if trigger is None:
        trigger = max(ANTHROPIC_MIN_TRIGGER, threshold_tokens)
    if clear is strategy.clear_tool_uses and trigger == strategy.trigger_tokens:
        return strategy
    return replace(strategy, trigger_tokens=trigger, clear_tool_uses=clear)


def _exclude(edit: AnthropicClearToolUses, names: Sequence[str]) -> AnthropicClearToolUses:
    extra = [n for n in names if n not in edit.exclude_tools]
    return replace(edit, exclude_tools=(*edit.exclude_tools, *extra)) if extra else edit


def durable_tool_names(messages: Sequence[Message]) -> list[str]:
    """The names of the tools whose results in ``messages`` are ``Durable``, in first-seen order."""
    names: dict[str, None] = {}
    for message in messages:
        if message.role is not Role.USER:
            continue
        for part in message.parts:
            if isinstance(part, ToolResultPart) and part.retention is Retention.DURABLE and part.name:
                names[part.name] = None
    return list(names)


def window_start(messages: Sequence[Message], provider: str) -> tuple[int, int]:
    """Where ``provider`` starts reading ``messages``: ``(message index, part index)`` of its last
    :class:`~loopctl.message.CompactionPart`, or ``(0, 0)`` when there is none. Anthropic "drops all message
    blocks prior to the compaction block" and OpenAI lets a client leave out "items that came before the most
    recent compaction item" (the compaction guides of both).

    Asked on every request, so a conversation that grew by appending is scanned only from where the last
    scan of it stopped (:data:`_SCANS`: the same first and last-scanned message objects), O(new messages)."""
    if not messages:
        return 0, 0
    key = (id(messages[0]), provider)
    memo = _SCANS.get(key)
    n = len(messages)
    start, found = 0, (0, 0)
    if memo is not None:
        first, upto, last, at, holder = memo
        if (
            first is messages[0]
            and upto <= n
            and messages[upto - 1] is last
            and (holder is None or messages[at[0]] is holder)
        ):
            start, found = upto, at
    scanned = _scan(messages, provider, start)
    if scanned is not None:
        found = scanned
    if len(_SCANS) >= _SCANS_KEPT and key not in _SCANS:
        del _SCANS[next(iter(_SCANS))]
    _SCANS[key] = (messages[0], n, messages[n - 1], found, messages[found[0]] if found != (0, 0) else None)
    return found


def _scan(messages: Sequence[Message], provider: str, start: int) -> tuple[int, int] | None:
    # ``type(...) is``: a pydantic model's isinstance goes through the ABC machinery, several times slower.
    assistant = Role.ASSISTANT
    for i in range(len(messages) - 1, start - 1, -1):
        message = messages[i]
        if message.role is not assistant:
            continue
        parts = message.parts
        for j in range(len(parts) - 1, -1, -1):
            part = parts[j]
            if type(part) is CompactionPart and part.provider == provider:
                return i, j
    return None


_SCANS: dict[tuple[int, str], tuple[Message, int, Message, tuple[int, int], Message | None]] = {}
"""(id of a conversation's first message, provider) -> (that message, how many messages were scanned, the
last of them, what was found, the message it was found in): where :func:`window_start` goes on from. The
objects are held, so an id is never reused while its entry lives."""

_SCANS_KEPT = 256


def provider_window(
    messages: Sequence[Message], provider: str, *, lead: bool = False, user_run: bool = False
) -> Sequence[Message]:
    """What ``provider`` reads of ``messages``: from its last compaction part on (:func:`window_start`),
    system messages before it kept (they are the system prompt, which compaction keeps), and, with ``lead``,
    :data:`COMPACTED_PLACEHOLDER` first when the window would otherwise open with the assistant's message.
    With ``user_run``, a compaction that opens its message keeps the plain user messages right before it:
    the window OpenAI's compact endpoint returns (the user's messages, then the compaction item) is passed on
    whole ("Do not prune the compact response": the compaction guide). ``messages`` itself when the
    provider has compacted nothing."""
    i, j = window_start(messages, provider)
    if i == 0 and j == 0:
        return messages
    first = messages[i]
    if j:
        first = first.model_copy(update={"parts": first.parts[j:]})
    start = i
    if user_run and not j:
        while start > 0 and _plain_user(messages[start - 1]):
            start -= 1
    if start == 0 and not j:
        return messages
    head = [m for m in messages[:start] if m.role is Role.SYSTEM]
    if start < i:
        return [*head, *messages[start:]]
    if lead and first.role is not Role.USER:
        head.append(COMPACTED_PLACEHOLDER)
    return [*head, first, *messages[i + 1 :]]


def _plain_user(message: Message) -> bool:
    return message.role is Role.USER and not any(isinstance(p, ToolResultPart) for p in message.parts)


def durable_after(dropped: Sequence[Message]) -> list[Message]:
    """The ``Durable`` tool results of ``dropped`` with their calls (``structure.durable_copy``), in order:
    what a compaction by the provider, which keeps only the user's messages, is followed by."""
    layout = scan(dropped)
    copies: list[Message] = []
    for index, message in enumerate(dropped):
        copy = durable_copy(message, index, layout, keep_thinking=False)
        if copy is not None:
            copies.append(copy)
    return copies


@dataclass(slots=True)
class WindowCounter:
    """A token counter that counts what ``provider`` reads (:func:`provider_window`) through ``inner``: the
    engine's view of the context once the provider compacts on its side. Calibration sees the same window;
    anything else is ``inner``'s."""

    inner: Any
    provider: str

    def count(self, messages: Sequence[Message]) -> int:
        """Tokens of what the provider reads of ``messages`` (the conversation): from its last compaction on."""
        count: int = self.inner.count(provider_window(messages, self.provider))
        return count

    def calibrate(self, sent: Sequence[Message], reported: int, **kwargs: Any) -> None:
        """Calibrate ``inner`` (when it can be) on what the provider read of ``sent`` (the conversation a
        request carried) against ``reported``, the input tokens the provider counted; ``kwargs`` go to
        ``inner.calibrate`` unchanged."""
        calibrate = getattr(self.inner, "calibrate", None)
        if calibrate is not None:
            calibrate(provider_window(sent, self.provider), reported, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def is_request_side(strategy: object) -> bool:
    """Whether ``strategy`` rides on each request (rather than being a pass of its own)."""
    return isinstance(strategy, _REQUEST_SIDE)
