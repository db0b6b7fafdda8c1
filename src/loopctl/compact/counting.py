"""Token counting for compaction: the counter protocol, the default heuristic and its calibration.

The budget (``budget.py``) decides when to prune or compact, and whether a pass succeeded, with one counter.
A counter only has to answer ``count(messages) -> int``; :class:`HeuristicTokenCounter` is the default. It
estimates without a tokenizer (characters divided by a per-provider ratio, images at a fixed price) and
then corrects itself from the input tokens the provider reports after each reply
(:meth:`HeuristicTokenCounter.calibrate`).

Pure: no I/O, no clock. The counter holds state (its calibration and a per-message cache), so it is not a
value object; one counter belongs to one session.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import repeat
from operator import is_
from typing import Any, Protocol, runtime_checkable

import orjson

from loopctl._frozen import dataclass
from loopctl.message import (
    CompactionPart,
    ImagePart,
    Message,
    Role,
    ServerToolCallPart,
    ServerToolResultPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
)
from loopctl.message.view import MessageView
from loopctl.tool import ToolSchema

__all__ = [
    "PRESETS",
    "CounterPreset",
    "HeuristicTokenCounter",
    "TokenCounter",
    "message_tokens",
]


@runtime_checkable
class TokenCounter(Protocol):
    """Anything that estimates the size of a conversation in tokens.

    ``count(messages)`` returns the tokens the conversation occupies in the model's context window (an
    ``int`` >= 0). The compaction passes also count single messages through it (``count([m]) -
    count([])``), so a counter should be additive over messages, as a tokenizer is.
    """

    def count(self, messages: Sequence[Message]) -> int:
        """The estimated size of ``messages``, in tokens."""
        ...


@dataclass(frozen=True, slots=True)
class CounterPreset:
    """The constants of the heuristic for one provider.

    ``chars_per_token``: characters per token of ordinary text (non-ASCII text is measured in UTF-8 bytes,
    see :meth:`HeuristicTokenCounter.units`). ``message_overhead``: characters each message costs for its
    framing (role markers, separators). ``part_overhead``: characters each tool call or tool result costs
    for its framing (block type, keys). ``id_weight``: how many characters each character of a tool-call id
    counts for (provider ids are random base62, which tokenizes at about 2 characters per token instead of
    4). ``image_tokens``: the fixed price of one image, in tokens, whatever its base64 length.
    ``result_name``: whether a tool result's tool name is on the wire (Gemini's ``functionResponse.name``;
    Anthropic and OpenAI send only the call id). ``count_final_thinking``: whether thinking in an assistant
    message *without* tool calls (a final answer) takes window space on later requests.
    """

    name: str
    chars_per_token: float = 4.0
    message_overhead: int = 16
    part_overhead: int = 16
    id_weight: float = 2.0
    result_name: bool = True
    image_tokens: int = 1600
    count_final_thinking: bool = True


PRESETS: dict[str, CounterPreset] = {
    # OpenAI's rule of thumb: characters / 4; images at Anthropic's ceiling (below), the most expensive of
    # the three, because under-counting is what gets a request refused for length.
    "default": CounterPreset("default"),
    # "A token approximately represents 3.5 English characters" (Anthropic glossary, docs.anthropic.com).
    # Images cost about width*height/750 tokens, about 1,600 at the ~1.15 megapixel resize ceiling
    # (Anthropic "Vision" guide). Thinking of earlier turns is stripped from the context window
    # (docs.anthropic.com/en/docs/build-with-claude/context-windows: "previous thinking blocks are
    # automatically stripped from the context window calculation"); only thinking inside the running tool
    # loop counts. Claude Opus 4.5 and later keep earlier thinking: use count_final_thinking=True there.
    "anthropic": CounterPreset(
        "anthropic", chars_per_token=3.5, result_name=False, image_tokens=1600, count_final_thinking=False
    ),
    # "One token is roughly 4 characters of English text" (OpenAI help center). A high-detail image costs
    # 85 + 170 per 512-px tile; 765 for a 1024x1024 image (OpenAI "Images and vision" guide). Reasoning is
    # discarded after each turn except inside a function-calling loop (OpenAI "Reasoning models" guide).
    # Chat Completions: a role=tool message is counted without its tool_call_id (recorded traffic:
    # openai/chat-tools-parallel-stream-followup); Responses counts the call_id of function_call_output.
    "openai": CounterPreset("openai", id_weight=0.0, result_name=False, image_tokens=765, count_final_thinking=False),
    "openai-responses": CounterPreset(
        "openai-responses", result_name=False, image_tokens=765, count_final_thinking=False
    ),
    # "For Gemini models, a token is equivalent to about 4 characters" (ai.google.dev/gemini-api/docs/tokens).
    # An image costs 258 tokens per 768x768 tile; 1,032 for a typical 2x2-tile screenshot. Thought summaries
    # are not sent back; only their signatures are.
    # Gemini 2.x sends no call ids (functionResponse is matched by name).
    "gemini": CounterPreset("gemini", id_weight=0.0, image_tokens=1032, count_final_thinking=False),
}
"""The ratio presets, by provider name as :class:`~loopctl.errors.ProviderError` names them (``"openai"``
is Chat Completions, ``"openai-responses"`` the Responses API)."""


def _text_units(text: str) -> int:
    # ASCII text: one unit per character. Anything else: its UTF-8 length, because byte-level BPE
    # tokenizers spend about one token per CJK character, not a quarter of one. isascii() is O(1).
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _json_units(value: Any) -> int:
    if isinstance(value, str):
        return _text_units(value) + 2
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):
        return len(repr(value))


def _content_units(output: ToolContent) -> tuple[int, int]:
    root = output.root
    if isinstance(root, str):
        return _text_units(root), 0
    units = images = 0
    for sub in root:
        if isinstance(sub, TextPart):
            units += _text_units(sub.text)
        else:
            images += 1
    return units, images


@dataclass(slots=True)  # not frozen: made twice a turn, and a frozen init costs a call per field; never changed
class _Units:
    """What one message weighs before the ratio is applied (characters, weighted, and images), or its
    measured size in tokens when calibration learned it from the provider (``measured``); ``weight`` is its
    estimate before the calibrated scale (``chars / chars_per_token + images * image_tokens`` of the counter's
    preset), worked out once."""

    chars: int
    images: int
    measured: int | None = None
    weight: float = 0.0


class HeuristicTokenCounter:
    """The default counter: characters of text, thinking, tool inputs and outputs plus a per-message overhead,
    divided by the provider's characters-per-token ratio; an image costs a fixed number of tokens.

    ``preset`` names a :data:`PRESETS` entry (``"default"``, ``"anthropic"``, ``"openai"``, ``"gemini"``) or
    is a :class:`CounterPreset`. ``system`` and ``tools`` are the parts of every request that are not
    messages (the system prompt and the tool schemas); they are counted with every conversation
    (:meth:`set_request` changes them).

    Calibration: after each model reply, :meth:`calibrate` takes the messages that were sent and the input
    tokens the provider reported (and, optionally, the reply and its output tokens). The counter then
    predicts ``scale * heuristic + offset``: ``offset`` absorbs what the heuristic cannot see (the
    provider's hidden tool-use prompt, message framing, its error on the conversation so far), so that the
    estimate of the same conversation, and of the next request of it, lands near the reported count;
    ``scale`` is refitted once observations span a wide enough range of sizes.

    Per-message weights are cached by message identity (messages are immutable), so counting a long history
    after every turn costs one dictionary lookup per message.
    """

    #: How many recent observations the scale fit uses.
    HISTORY = 8
    #: Fit a scale only when the observed sizes differ by at least this many heuristic tokens; smaller
    #: spans are dominated by fixed overheads and would extrapolate badly.
    MIN_SPAN = 4096
    #: The fitted scale is kept within these bounds.
    SCALE_BOUNDS = (0.67, 1.5)

    def __init__(
        self,
        preset: str | CounterPreset = "default",
        *,
        system: str | None = None,
        tools: Sequence[ToolSchema] = (),
    ) -> None:
        if isinstance(preset, str):
            preset = self.preset_for(preset)
        if preset.chars_per_token <= 0:
            raise ValueError(f"chars_per_token must be positive, got {preset.chars_per_token}")
        self._preset: CounterPreset = preset
        self.scale: float = 1.0
        self.offset: int = 0
        self._observations: list[tuple[float, int]] = []
        self._cache: dict[int, tuple[Message, _Units]] = {}
        # The last list counted and its per-message tokens: the engine's history grows by appending, so the
        # next count usually starts with the same objects (by identity: an equal message that is another object
        # is not the one a calibration measured), known in O(1) when both are views of the machine's list
        # (``_last_view``, the view it was copied from, or None), else checked at C speed, instead of one
        # dictionary lookup per message.
        self._last: list[Message] = []
        self._last_tokens: list[int] = []
        self._last_view: MessageView | None = None
        # The same for calibration: the last list calibrated on, with the sum of its estimated size (heuristic
        # tokens, unscaled) and of its measured replies' sizes, so a calibration costs O(new messages).
        self._calibrated: list[Message] = []
        self._calibrated_sums: tuple[float, int] = (0.0, 0)
        self._calibrated_view: MessageView | None = None
        self._system: str | None = None
        self._tools: tuple[ToolSchema, ...] = ()
        self._fixed_units = 0
        self.set_request(system=system, tools=tools)

    @property
    def preset(self) -> CounterPreset:
        """The constants in use (read-only: make a new counter with :meth:`with_preset`)."""
        return self._preset

    def __repr__(self) -> str:
        return f"HeuristicTokenCounter(preset={self.preset.name!r}, scale={self.scale:.3f}, offset={self.offset})"

    # --- configuration -------------------------------------------------------------------------------

    def set_request(self, *, system: str | None = None, tools: Sequence[ToolSchema] = ()) -> None:
        """Set the system prompt and tool schemas counted with every conversation (in tokens, like the
        messages). The engine calls this once per session, and again if either changes.

        ``system`` is the system prompt and ``tools`` the tool schemas offered.
        """
        self._system = system
        self._tools = tuple(tools)
        units = _text_units(system) + self.preset.message_overhead if system else 0
        for tool in self._tools:
            units += _text_units(tool.name) + _text_units(tool.description) + _json_units(dict(tool.input_schema))
            units += self.preset.part_overhead
        self._fixed_units = units

    # --- counting --------------------------------------------------------------------------------------

    def units(self, message: Message) -> tuple[int, int]:
        """``(characters, images)`` that ``message`` weighs before the ratio is applied.

        Characters: text and thinking text (non-ASCII counted as UTF-8 bytes); a redacted thinking payload;
        a tool call's name and compact-JSON input; a tool result's name and text output; tool-call ids
        weighted by ``id_weight``; ``part_overhead`` per call or result and ``message_overhead`` per message.
        Thinking signatures are opaque and not counted (calibration absorbs what the provider charges for
        them). Thinking in an assistant message without tool calls is skipped when the preset says final
        thinking is stripped. Images (user images and images inside tool results) are counted separately.
        A provider-side tool call counts as a call (name, input), its result by its readable text, a
        compaction by its summary; their opaque ``raw`` blocks are not counted (as signatures are not).
        """
        u = self._units(message)
        return u.chars, u.images

    def _units(self, message: Message) -> _Units:
        cached = self._cache.get(id(message))
        if cached is not None and cached[0] is message:
            return cached[1]
        u = self._measure(message)
        self._cache[id(message)] = (message, u)
        return u

    def _measure(self, message: Message) -> _Units:
        p = self._preset
        chars = p.message_overhead
        images = 0
        thinking = 0
        has_calls = False
        for part in message.parts:
            if isinstance(part, TextPart):
                chars += _text_units(part.text)
            elif isinstance(part, ToolResultPart):
                root = part.output.root
                if type(root) is str:  # _content_units of the text form, written out
                    out, imgs = (len(root) if root.isascii() else len(root.encode("utf-8", "surrogatepass"))), 0
                else:
                    out, imgs = _content_units(part.output)
                chars += out + int(len(part.call_id) * p.id_weight) + p.part_overhead
                if p.result_name:
                    chars += _text_units(part.name)
                images += imgs
            elif isinstance(part, ToolCallPart):
                has_calls = True
                chars += _text_units(part.name) + _json_units(part.input)
                chars += int(len(part.id) * p.id_weight) + p.part_overhead
            elif isinstance(part, ThinkingPart):
                thinking += _text_units(part.text) + (len(part.redacted) if part.redacted else 0)
            elif isinstance(part, ImagePart):
                images += 1
            elif isinstance(part, ServerToolCallPart):
                chars += _text_units(part.name) + _json_units(part.input) + p.part_overhead
            elif isinstance(part, ServerToolResultPart):
                chars += _text_units(part.output) + p.part_overhead
            elif isinstance(part, CompactionPart):
                chars += _text_units(part.summary) + p.part_overhead
        if thinking and (has_calls or p.count_final_thinking or message.role is not Role.ASSISTANT):
            chars += thinking
        return _Units(chars, images, None, chars / p.chars_per_token + images * p.image_tokens)

    def _tokens(self, u: _Units) -> int:
        if u.measured is not None:
            return u.measured
        return int(u.weight * self.scale + 0.5)

    def message_tokens(self, message: Message) -> int:
        """The tokens ``message`` adds to a conversation (calibrated scale applied, no fixed part); for a
        reply whose size calibration learned from the provider, that size."""
        # _tokens(_units(message)) written out: the engine asks it twice a turn.
        cached = self._cache.get(id(message))
        if cached is not None and cached[0] is message:
            u = cached[1]
        else:
            u = self._measure(message)
            self._cache[id(message)] = (message, u)
        if u.measured is not None:
            return u.measured
        return int(u.weight * self.scale + 0.5)

    def measure(self, message: Message) -> int:
        """:meth:`message_tokens` of ``message`` computed afresh, without the cache (for messages a pass is
        trying out, which may never be kept)."""
        return self._tokens(self._measure(message))

    def fixed_tokens(self) -> int:
        """The tokens every request carries besides its messages: system prompt and tools (scaled) plus the
        calibrated offset. May be negative when calibration found the heuristic too high; ``count`` never
        returns less than 0."""
        return self._scaled_fixed() + self.offset

    def _scaled_fixed(self) -> int:
        return int(self._fixed_units / self.preset.chars_per_token * self.scale + 0.5)

    def count(self, messages: Sequence[Message]) -> int:
        """The estimated size of ``messages`` with the system prompt and tools, in tokens:
        :meth:`fixed_tokens` plus :meth:`message_tokens` of each message (so it is exactly additive), and
        never less than 0."""
        return max(0, self.fixed_tokens() + sum(self.tokens_each(messages)))

    def tokens_each(self, messages: Sequence[Message]) -> list[int]:
        """:meth:`message_tokens` of each message, in order. A list that starts with the messages of the
        previous call reuses their counts; any other message costs one cache lookup."""
        msgs = messages if isinstance(messages, list) else list(messages)
        last = self._last
        k = len(last)
        view = messages if type(messages) is MessageView else None
        if k and len(msgs) >= k and _starts_with(msgs, view, last, self._last_view):
            out = self._last_tokens + self._lookup(msgs[k:])
        else:
            out = self._lookup(msgs)
        self._last = msgs[:]
        self._last_tokens = out
        self._last_view = view
        self._trim_cache(len(msgs), msgs)
        return out

    def _lookup(self, messages: Sequence[Message]) -> list[int]:
        out: list[int] = []
        append = out.append
        get = self._cache.get
        cache = self._cache
        measure = self._measure
        # _tokens(u) written out, the same arithmetic (calibration makes this pass over the whole history when
        # the scale changed)
        scale = self.scale
        for m in messages:
            cached = get(id(m))
            if cached is not None and cached[0] is m:
                u = cached[1]
            else:
                u = measure(m)
                cache[id(m)] = (m, u)
            measured = u.measured
            append(measured if measured is not None else int(u.weight * scale + 0.5))
        return out

    def _trim_cache(self, live: int, messages: Sequence[Message]) -> None:
        # The cache holds strong references (pydantic models hash by value, and tool inputs are unhashable
        # dicts, so a WeakKeyDictionary is not an option). Once it grows well past the conversation just
        # counted, keep only that conversation's entries: older ones belong to messages a pass replaced. The
        # replies calibration measured are kept whatever was counted (a pass's candidate, a short list): their
        # size is known only from their report, and the conversation they are in may be counted next (one per
        # calibration: few).
        if len(self._cache) > 2 * live + 4096:
            keep = {id(m) for m in messages}
            self._cache = {k: v for k, v in self._cache.items() if k in keep or v[1].measured is not None}

    # --- calibration -----------------------------------------------------------------------------------

    def calibrate(
        self,
        messages: Sequence[Message],
        input_tokens: int,
        *,
        reply: Message | None = None,
        output_tokens: int | None = None,
    ) -> None:
        """Learn from one model call: ``messages`` were sent (with the current system prompt and tools) and the
        provider reported ``input_tokens`` (every prompt token, cached ones included:
        :attr:`loopctl.response.Usage.input_tokens`).

        Afterwards ``count(messages)`` equals ``input_tokens``. If the ``reply`` (the assistant message the
        call returned, the same object that is appended to the conversation) and its ``output_tokens`` are
        given, the reply counts as ``output_tokens`` from then on, so ``count(messages + [reply])`` equals
        ``input_tokens + output_tokens``: reasoning that the heuristic cannot see (encrypted, or summarized
        for display) is counted at its real size while the tool loop runs. That is skipped when the reply
        carries thinking the preset says is stripped on the next request (a final answer), because
        ``output_tokens`` includes it.
        """
        if input_tokens < 0:
            raise ValueError(f"input_tokens must be >= 0, got {input_tokens}")
        msgs = messages if isinstance(messages, list) else list(messages)
        view = messages if type(messages) is MessageView else None
        done = self._calibrated
        k = len(done)
        if k and len(msgs) >= k and _starts_with(msgs, view, done, self._calibrated_view):
            h, measured = self._calibrated_sums
        else:
            k, h, measured = 0, 0.0, 0
        cache = self._cache
        added: list[_Units] = []  # the units of msgs[k:], in order
        for m in msgs[k:]:  # _units(m) written out: calibration passes over every message added since the last
            cached = cache.get(id(m))
            if cached is not None and cached[0] is m:
                u = cached[1]
            else:
                u = self._measure(m)
                cache[id(m)] = (m, u)
            added.append(u)
            if u.measured is None:
                h += u.weight
            else:
                measured += u.measured
        # Kept as the last list counted too (below): both are only ever replaced, never changed.
        calibrated = self._calibrated = msgs[:]
        self._calibrated_sums = (h, measured)
        self._calibrated_view = view
        h += self._fixed_units / self.preset.chars_per_token
        # The scale is fitted on the estimated part only; replies measured earlier are exact.
        self._observations = [*self._observations[-(self.HISTORY - 1) :], (h, input_tokens - measured)]
        scale = self.scale
        self._refit_scale()
        if self.scale == scale and k and self._last is done:
            # Nothing was counted since the last calibration, whose counts (``_last_tokens``) hold for msgs[:k] at
            # this scale: ``tokens_each(msgs)`` is those and the added messages' (the units just read).
            tokens = self._last_tokens + [
                u.measured if u.measured is not None else int(u.weight * scale + 0.5) for u in added
            ]
            self._last_tokens = tokens
            self._trim_cache(len(msgs), msgs)
        else:
            if self.scale != scale:
                self._forget_last()
            tokens = self.tokens_each(msgs)
        self._last = calibrated
        self._last_view = view
        self.offset = input_tokens - self._scaled_fixed() - sum(tokens)
        if reply is not None and output_tokens is not None and self._counts_reply_thinking(reply):
            u = self._units(reply)
            self._cache[id(reply)] = (reply, _Units(u.chars, u.images, max(0, output_tokens), u.weight))
            if _holds(calibrated, reply):
                # The reply is one of the messages sent too (the same object sent again, as a script that gives
                # one reply twice does): it counts at its new size there as well, so the offset is worked out
                # again, for ``count(messages)`` to be the report (and ``count([*messages, reply])`` the report
                # plus the reply, which the engine takes without a count).
                self._calibrated = []
                self._calibrated_view = None
                self._forget_last()
                self.offset = input_tokens - self._scaled_fixed() - sum(self.tokens_each(msgs))

    def _counts_reply_thinking(self, reply: Message) -> bool:
        has_thinking = any(isinstance(p, ThinkingPart) for p in reply.parts)
        has_calls = any(isinstance(p, ToolCallPart) for p in reply.parts)
        return not has_thinking or has_calls or self.preset.count_final_thinking

    def _refit_scale(self) -> None:
        obs = self._observations
        n = len(obs)
        if n < 2:
            return
        hs = [h for h, _ in obs]
        if max(hs) - min(hs) < self.MIN_SPAN:
            return
        # The sums over lists, not generators (the same values summed in the same order: the same result).
        mean_h = sum(hs) / n
        mean_r = sum([r for _, r in obs]) / n
        var = sum([(h - mean_h) ** 2 for h in hs])
        slope = sum([(h - mean_h) * (r - mean_r) for h, r in obs]) / var
        low, high = self.SCALE_BOUNDS
        self.scale = min(high, max(low, slope))

    def _forget_last(self) -> None:
        self._last = []
        self._last_tokens = []
        self._last_view = None

    def reset_calibration(self) -> None:
        """Forget every observation: scale 1, offset 0 (for example after switching models)."""
        self._forget_last()
        self.scale = 1.0
        self.offset = 0
        self._observations = []

    def with_preset(self, preset: str | CounterPreset) -> HeuristicTokenCounter:
        """A fresh, uncalibrated counter with another preset and the same system prompt and tools."""
        return HeuristicTokenCounter(preset, system=self._system, tools=self._tools)

    @staticmethod
    def preset_for(provider: str, **changes: Any) -> CounterPreset:
        """The preset of ``provider`` with ``changes`` applied, e.g. ``preset_for("anthropic",
        count_final_thinking=True)`` for Claude Opus 4.5 and later."""
        key = {"openai-chat": "openai"}.get(provider, provider)
        if key not in PRESETS:
            raise ValueError(f"unknown counter preset {provider!r}; expected one of {sorted(PRESETS)}")
        return replace(PRESETS[key], **changes) if changes else PRESETS[key]


def _starts_with(
    msgs: list[Message], view: MessageView | None, earlier: list[Message], earlier_view: MessageView | None
) -> bool:
    """Whether ``msgs`` (at least as long as ``earlier``) starts with ``earlier``'s message objects: in O(1) when
    ``msgs`` was copied from a view (``view``) that :meth:`~loopctl.message.MessageView.extends` the one
    ``earlier`` was copied from (``earlier_view``), else one identity test per message, at C speed. Not list
    equality: an equal message that is another object may count otherwise (a calibrated reply counts at its
    measured size, an equal copy of it at its estimate)."""
    if view is not None and earlier_view is not None and view.extends(earlier_view):
        return True
    return all(map(is_, msgs, earlier))


def _holds(messages: list[Message], message: Message) -> bool:
    """Whether ``message`` itself (not an equal message) is in ``messages``: one identity test per item, at C
    speed (calibration asks it of the whole history)."""
    return any(map(is_, messages, repeat(message)))


def message_tokens(counter: TokenCounter, message: Message) -> int:
    """The tokens ``message`` adds to a conversation under ``counter``: :meth:`HeuristicTokenCounter.
    message_tokens` when available, else ``count([message]) - count([])``."""
    if isinstance(counter, HeuristicTokenCounter):
        return counter.message_tokens(message)
    return counter.count([message]) - counter.count([])
