"""The context budget: the policy numbers the loop machine compacts by, and the verdict on each pass.

A :class:`ContextBudget` turns a window size and four fractions into token counts (prune line, compaction
threshold, emergency line, target after a pass), measures conversations with its one counter, and
re-measures what a pass returned (:meth:`ContextBudget.assess`), so that the same counter decides both
when to compact and whether compacting worked (``docs/compaction.md``, "The budget").

Pure: no I/O, no clock. The budget itself is a frozen value; its counter carries the calibration state.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import field
from typing import TYPE_CHECKING

from loopctl._frozen import dataclass
from loopctl._lazy import LazyModule
from loopctl.compact.counting import HeuristicTokenCounter, TokenCounter
from loopctl.errors import CompactionOverflow
from loopctl.message import Message

if TYPE_CHECKING:
    import loopctl.compact.truncate
else:  # the annotations' modules, imported when an annotation is read (loopctl._lazy)
    loopctl = LazyModule("loopctl")

__all__ = ["ContextBudget", "PassOutcome", "PassReport", "Pressure"]


class Pressure(enum.IntEnum):
    """How full the context is, in increasing order; what the machine should ask the driver for.

    ``NONE``: below or at the prune line. ``PRUNE``: above the prune line, at or below the threshold.
    ``COMPACT``: strictly above the threshold. ``EMERGENCY``: at or above the emergency line (compact now,
    before the next model call, with a pass that needs no model call).
    """

    NONE = 0
    PRUNE = 1
    COMPACT = 2
    EMERGENCY = 3


class PassOutcome(enum.StrEnum):
    """The verdict on one pass, from re-measuring its result with the budget's counter.

    ``COMPACTED``: the result is smaller than the input. ``NO_CHANGE``: it is not (the pass saved nothing,
    or a summary call failed and the conversation was left untouched). ``OVERFLOW``: the pass raised
    :class:`~loopctl.errors.CompactionOverflow`, because the parts it must keep alone exceed the target.
    """

    COMPACTED = "compacted"
    NO_CHANGE = "no_change"
    OVERFLOW = "overflow"


@dataclass(frozen=True, slots=True)
class PassReport:
    """What :meth:`ContextBudget.assess` found: the outcome, the sizes in tokens, and the messages to use.

    ``messages`` is the pass's result for ``COMPACTED``, else ``None`` (keep the conversation as it was).
    ``error`` is the :class:`~loopctl.errors.CompactionOverflow` for ``OVERFLOW``. ``fits`` says whether
    ``tokens_after`` is at or under ``target``.
    """

    outcome: PassOutcome
    tokens_before: int
    tokens_after: int
    target: int
    messages: list[Message] | None = None
    error: CompactionOverflow | None = None

    @property
    def fits(self) -> bool:
        """``tokens_after <= target``."""
        return self.tokens_after <= self.target


@dataclass(frozen=True, slots=True)
class ContextBudget:
    """The compaction policy of a session, in fractions of the context window (``docs/compaction.md``, "The budget").

    ``window``: the model's context window, in tokens (default 200,000). ``threshold``: compact when the
    conversation is strictly above this fraction (0.80). ``emergency``: at or above this fraction (0.95),
    compact at once with a pass that makes no model call. ``prune_line``: above this fraction (0.60), run the
    prune pass. ``target_ratio``: a pass aims for this fraction of the threshold line (0.70, i.e. 56% of the
    window by default). ``protected_tail``: tokens at the end of the conversation that no pass touches
    (2,000). ``counter``: the one :class:`~loopctl.compact.TokenCounter` all of these are measured with.

    Raises ``ValueError`` unless ``0 < prune_line <= threshold <= emergency <= 1``, ``0 < target_ratio <= 1``,
    ``window > 0`` and ``protected_tail >= 0``.
    """

    window: int = 200_000
    threshold: float = 0.80
    emergency: float = 0.95
    prune_line: float = 0.60
    target_ratio: float = 0.70
    protected_tail: int = 2_000
    counter: TokenCounter = field(default_factory=HeuristicTokenCounter)

    def __post_init__(self) -> None:
        if self.window <= 0:
            raise ValueError(f"ContextBudget.window must be a positive number of tokens, got {self.window}")
        if not 0 < self.prune_line <= self.threshold <= self.emergency <= 1:
            raise ValueError(
                "ContextBudget needs 0 < prune_line <= threshold <= emergency <= 1, got "
                f"prune_line={self.prune_line}, threshold={self.threshold}, emergency={self.emergency}"
            )
        if not 0 < self.target_ratio <= 1:
            raise ValueError(f"ContextBudget.target_ratio must be in (0, 1], got {self.target_ratio}")
        if self.protected_tail < 0:
            raise ValueError(f"ContextBudget.protected_tail must be >= 0 tokens, got {self.protected_tail}")

    @classmethod
    def for_provider(cls, provider: str, **options: object) -> ContextBudget:
        """A budget whose counter uses ``provider``'s preset (see :data:`~loopctl.compact.PRESETS`);
        ``options`` are the other fields (``window=...``)."""
        return cls(counter=HeuristicTokenCounter(provider), **options)  # type: ignore[arg-type]

    # --- the policy numbers, in tokens --------------------------------------------------------------

    @property
    def threshold_tokens(self) -> int:
        """``window * threshold``: compaction starts strictly above this many tokens."""
        return int(self.window * self.threshold)

    @property
    def emergency_tokens(self) -> int:
        """``window * emergency``: at or above this many tokens the context is in emergency."""
        return int(self.window * self.emergency)

    @property
    def prune_tokens(self) -> int:
        """``window * prune_line``: the prune pass runs strictly above this many tokens."""
        return int(self.window * self.prune_line)

    @property
    def target_tokens(self) -> int:
        """``threshold_tokens * target_ratio``: the size a pass aims for, in tokens."""
        return int(self.threshold_tokens * self.target_ratio)

    # --- measuring ----------------------------------------------------------------------------------

    def measure(self, messages: Sequence[Message]) -> int:
        """The size of ``messages`` in tokens, by the budget's counter."""
        return self.counter.count(messages)

    def pressure(self, tokens: int) -> Pressure:
        """Which line ``tokens`` has crossed: the emergency line (``>=``), the threshold (``>``), the prune
        line (``>``), or none."""
        if tokens >= self.emergency_tokens:
            return Pressure.EMERGENCY
        if tokens > self.threshold_tokens:
            return Pressure.COMPACT
        if tokens > self.prune_tokens:
            return Pressure.PRUNE
        return Pressure.NONE

    def room_needed(self, tokens: int) -> int:
        """How many tokens a pass must free to bring ``tokens`` down to the target (0 when already there)."""
        return max(0, tokens - self.target_tokens)

    # --- running the passes that need no model call ---------------------------------------------------

    def prune(self, messages: list[Message], needed: int | None = None) -> list[Message]:
        """Run the prune pass (:func:`~loopctl.compact.prune`) with this budget's counter and protected tail.

        ``needed``: tokens to free (the machine's ``Prune.needed``; default :meth:`room_needed` of the
        current size). Returns ``messages`` itself (the same list object) when nothing was pruned, else a
        new list of the same length.
        """
        from loopctl.compact.prune import prune

        if needed is None:
            needed = self.room_needed(self.measure(messages))
        out = prune(messages, need=needed, counter=self.counter, protected_tail=self.protected_tail)
        return messages if all(a is b for a, b in zip(out, messages, strict=True)) else out

    def compact(
        self, messages: Sequence[Message], compactor: loopctl.compact.truncate.Compactor | None = None
    ) -> list[Message] | None:
        """Run a compactor that needs no model call (default :class:`~loopctl.compact.TruncatingCompactor`)
        down to :attr:`target_tokens`. Returns the new list, or ``None`` when the pass saved nothing
        (feed ``compaction_noop``). Raises :class:`~loopctl.errors.CompactionOverflow` when what must be kept
        exceeds the target. A :class:`~loopctl.compact.SummarizingCompactor` needs the driver to send its
        request, so it is refused here with ``TypeError`` (use ``start`` and ``SummaryPlan.finish``).

        ``messages`` is the conversation to compact; ``compactor`` the pass to run.
        """
        from loopctl.compact.truncate import TruncatingCompactor

        compactor = compactor if compactor is not None else TruncatingCompactor()
        if not callable(getattr(compactor, "compact", None)):
            raise TypeError(
                f"{type(compactor).__name__} needs a model call: run compactor.start(messages, budget), send "
                "plan.request, then plan.finish(reply)"
            )
        before = self.measure(messages)
        out = compactor.compact(messages, self)
        return out if self.measure(out) < before else None

    def assess(self, tokens_before: int, result: Sequence[Message] | CompactionOverflow) -> PassReport:
        """Re-measure what a pass returned and classify it.

        ``result`` is the pass's new message list, or the :class:`~loopctl.errors.CompactionOverflow` it
        raised. The driver feeds the machine ``compaction_result(report.messages, report.tokens_before,
        report.tokens_after)`` for ``COMPACTED`` and ``compaction_noop(report.tokens_before,
        report.tokens_after)`` for ``NO_CHANGE``; ``OVERFLOW`` carries the error with its numbers.
        """
        target = self.target_tokens
        if isinstance(result, CompactionOverflow):
            after = result.tokens_after if result.tokens_after is not None else tokens_before
            return PassReport(PassOutcome.OVERFLOW, tokens_before, after, target, error=result)
        after = self.measure(result)
        if after < tokens_before:
            return PassReport(PassOutcome.COMPACTED, tokens_before, after, target, messages=list(result))
        return PassReport(PassOutcome.NO_CHANGE, tokens_before, after, target)
