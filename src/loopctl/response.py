"""What a model call returns, whatever the provider: the assistant message, token usage and why it stopped.

Pure data: no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

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


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one model call (or a sum of calls), in tokens.

    ``input_tokens`` is every prompt token, cached ones included (for Anthropic: ``input_tokens`` +
    ``cache_read_input_tokens`` + ``cache_creation_input_tokens``). ``output_tokens`` includes reasoning
    tokens. ``cache_read_tokens`` / ``cache_write_tokens`` are the parts of the input read from / written to
    the provider's prompt cache; ``reasoning_tokens`` the part of the output spent on reasoning.
    ``cache_write_1h_tokens`` is the part of ``cache_write_tokens`` written for an hour (Anthropic's
    ``cache_creation.ephemeral_1h_input_tokens``), which costs more than a five-minute write.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_1h_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """``input_tokens + output_tokens``."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        # A sum with nothing is the other value itself (immutable): the common case of a call with no failed
        # attempts costs no new value (a frozen dataclass's constructor sets each field through
        # ``object.__setattr__``).
        if not (
            other.input_tokens
            or other.output_tokens
            or other.cache_read_tokens
            or other.cache_write_tokens
            or other.reasoning_tokens
        ):
            return self
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.cache_write_1h_tokens + other.cache_write_1h_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        """The five counts as a JSON object, and ``cache_write_1h_tokens`` when not 0 (``Usage(**d)`` reads
        it back)."""
        out = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }
        if self.cache_write_1h_tokens:
            out["cache_write_1h_tokens"] = self.cache_write_1h_tokens
        return out


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
