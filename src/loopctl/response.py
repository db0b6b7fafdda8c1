"""What a model call returns, whatever the provider: the assistant message, token usage and why it stopped.

Pure data: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from loopctl._frozen import dataclass, hot
from loopctl.message import Message

__all__ = ["InvalidToolCall", "ModelResponse", "StopReason", "Usage"]


class StopReason(enum.StrEnum):
    """Why the model stopped, normalized across providers (the raw value is kept beside it).

    ``END_TURN``: the model finished its answer. ``TOOL_CALL``: it wants tools run. ``MAX_TOKENS``: the
    output limit cut it off (a tool call in flight may be incomplete). ``STOP_SEQUENCE``: a stop sequence
    matched. ``REFUSAL``: content filtering or a safety stop.
    """

    END_TURN = "end_turn"
    TOOL_CALL = "tool_call"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    REFUSAL = "refusal"


_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def _plus(a: int | None, b: int | None) -> int | None:
    """A sum of counts, ``None`` (not reported) adding nothing: ``None + 5 == 5``, ``None + None is None``."""
    if a is None:
        return b
    if b is None:
        return a
    return a + b


@dataclass(frozen=True, slots=True)
@hot  # made every turn: the cheaper __init__ (loopctl._frozen.hot)
class Usage:
    """Token counts of one model call (or a sum of calls), in tokens; ``None`` where the provider did not report
    the count (an OpenAI-compatible server that sends no ``usage``, a stream cut before its usage chunk, a
    provider that has no cache counts). Unknown is not zero: telemetry leaves an unknown count out (the
    OpenTelemetry GenAI conventions: a count not obtained MUST NOT be reported) and a reply whose input or
    output count is unknown has no price.

    ``input_tokens`` is every prompt token, cached ones included (for Anthropic: ``input_tokens`` +
    ``cache_read_input_tokens`` + ``cache_creation_input_tokens``). ``output_tokens`` includes reasoning
    tokens. ``cache_read_tokens`` / ``cache_write_tokens`` are the parts of the input read from / written to
    the provider's prompt cache; ``reasoning_tokens`` the part of the output spent on reasoning.

    Adding usages (a run's total over its replies) adds the counts that were reported: ``None + 5 == 5``, and a
    sum is ``None`` only when no part reported that count. So ``Usage()`` (nothing reported) is the start of a
    sum, and a total is what the provider reported, never a guess for what it did not; :meth:`__add__`.
    Usage limits (``loopctl.engine.UsageLimits``) likewise count the reported tokens.

    ``cache_write_1h_tokens`` is the part of ``cache_write_tokens`` written for an hour (Anthropic's
    ``cache_creation.ephemeral_1h_input_tokens``), which costs more than a five-minute write; ``None`` when
    there were none (the codecs leave a reported 0 out, so conversations without hour-long writes keep their
    stored form).
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_write_1h_tokens: int | None = None

    @property
    def total_tokens(self) -> int | None:
        """``input_tokens + output_tokens``, adding the reported ones (``None`` when neither was reported)."""
        return _plus(self.input_tokens, self.output_tokens)

    @property
    def reported(self) -> bool:
        """Whether any count was reported."""
        return any(getattr(self, name) is not None for name in _COUNTS)

    def __add__(self, other: Usage) -> Usage:
        """The sum, count by count; a count not reported adds nothing (``None + 5 == 5``)."""
        if not isinstance(other, Usage):
            return NotImplemented
        # A sum with nothing reported is the other value itself (immutable): the common case of a call with no
        # failed attempts costs no new value (a frozen dataclass's constructor sets each field through
        # ``object.__setattr__``). A reported zero is not nothing: ``Usage() + Usage(0, 0)`` is ``Usage(0, 0)``.
        if (
            other.input_tokens is None
            and other.output_tokens is None
            and other.cache_read_tokens is None
            and other.cache_write_tokens is None
            and other.reasoning_tokens is None
            and other.cache_write_1h_tokens is None
        ):
            return self
        # _plus written out (a call per count was most of the sum's cost).
        a, b = self.input_tokens, other.input_tokens
        input_tokens = b if a is None else a if b is None else a + b
        a, b = self.output_tokens, other.output_tokens
        output_tokens = b if a is None else a if b is None else a + b
        a, b = self.cache_read_tokens, other.cache_read_tokens
        cache_read = b if a is None else a if b is None else a + b
        a, b = self.cache_write_tokens, other.cache_write_tokens
        cache_write = b if a is None else a if b is None else a + b
        a, b = self.reasoning_tokens, other.reasoning_tokens
        reasoning = b if a is None else a if b is None else a + b
        a, b = self.cache_write_1h_tokens, other.cache_write_1h_tokens
        cache_write_1h = b if a is None else a if b is None else a + b
        return Usage(input_tokens, output_tokens, cache_read, cache_write, reasoning, cache_write_1h)

    def to_dict(self) -> dict[str, int | None]:
        """The five counts as a JSON object (``null`` for a count not reported), and ``cache_write_1h_tokens``
        when it is not ``None`` (:meth:`from_dict` reads it back)."""
        out: dict[str, int | None] = {name: getattr(self, name) for name in _COUNTS}
        if self.cache_write_1h_tokens is not None:
            out["cache_write_1h_tokens"] = self.cache_write_1h_tokens
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        """The usage of :meth:`to_dict` (or of older versions, which wrote every count as a number): ``data``
        is the JSON object. A missing count is ``None``; other keys are ignored. Raises ``ValueError`` naming a
        count that is not a whole number >= 0 or ``null``."""
        counts: dict[str, int | None] = {}
        for name in (*_COUNTS, "cache_write_1h_tokens"):
            value = data.get(name)
            if value is not None and (type(value) is not int or value < 0):
                raise ValueError(f"usage.{name} must be a whole number >= 0 or null, got {value!r}")
            counts[name] = value
        return cls(**counts)


@dataclass(frozen=True, slots=True)
class InvalidToolCall:
    """A tool call whose streamed arguments are not valid JSON (typically cut off by ``max_tokens``).

    The message carries the call with ``input={}`` so the history stays valid; the raw text is kept here,
    and the engine answers the call with an error result instead of running it.
    """

    id: str
    name: str
    arguments: str
    error: str


@dataclass(frozen=True, slots=True)
@hot  # made every turn: the cheaper __init__ (loopctl._frozen.hot)
class ModelResponse:
    """One model reply: the assistant :class:`~loopctl.message.Message`, its :class:`Usage`, the normalized
    :class:`StopReason` with the provider's raw value, the model that answered and the response id."""

    message: Message
    usage: Usage = field(default_factory=Usage)
    stop_reason: StopReason = StopReason.END_TURN
    raw_stop_reason: str | None = None
    model: str | None = None
    id: str | None = None
    invalid_tool_calls: tuple[InvalidToolCall, ...] = ()
