"""Usage limits of a run: what a run may spend, what it has spent, and which limit ended it.

:class:`UsageLimits` is set per run (``RunConfig(limits=...)``); the :class:`~loopctl.engine.LoopMachine`
keeps it with the run, counts what the run spends (:class:`RunUsage`) and decides when a limit ends the run
(outcome ``LIMIT_REACHED``, with a :class:`LimitHit` saying which). The rules (``docs/guardrails.md``,
"Usage limits"):

- ``requests`` and ``tool_calls`` are checked *before* the step that would pass them: a limit of 3 requests
  allows 3 model calls, and the run ends before a 4th; a turn's batch of tool calls that would take the count
  past ``tool_calls`` does not start at all.
- ``input_tokens``, ``output_tokens``, ``total_tokens`` and ``cost`` are checked *after* each reply (a reply's
  size is known only once it came): the run ends once a reply took the count past the limit, unless that
  reply finished the run anyway (an answer is never thrown away for a limit nothing more would spend).
  Spending exactly the limit is allowed.

Pure data: no I/O.
"""

from __future__ import annotations

from dataclasses import fields
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, TypeAlias

from loopctl._frozen import dataclass, hot
from loopctl.response import Usage

__all__ = ["LimitDimension", "LimitHit", "RunUsage", "UsageLimits", "remaining"]

LimitDimension: TypeAlias = Literal["requests", "tool_calls", "input_tokens", "output_tokens", "total_tokens", "cost"]
"""The name of one limit (a field of :class:`UsageLimits`)."""

_DIMENSIONS: tuple[LimitDimension, ...] = (
    "requests",
    "tool_calls",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cost",
)


@dataclass(frozen=True, slots=True)
class UsageLimits:
    """What one run may spend; ``None`` (the default for each) is no limit.

    ``requests``: model calls (a call's retries and fallbacks are one call). ``tool_calls``: tool calls the
    run asks to run (calls the machine answers itself, such as unknown tools or the output tool's, are not
    counted; a call denied or blocked is). ``input_tokens``, ``output_tokens``, ``total_tokens``: tokens as
    the provider reports them (``input_tokens`` includes cached ones; a count a reply did not report adds
    nothing). ``cost``: USD, as priced by
    :mod:`loopctl.pricing`; a run with a cost limit whose reply cannot be priced fails rather than run on
    unchecked. A ``float`` cost is read through its ``str`` (``0.1`` is ``Decimal("0.1")``).

    Raises ``ValueError`` for a negative limit or a cost that is not a number.
    """

    requests: int | None = None
    tool_calls: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cost: Decimal | None = None

    def __post_init__(self) -> None:
        for name in _DIMENSIONS[:-1]:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ValueError(f"UsageLimits.{name} must be a whole number >= 0 or None, got {value!r}")
        if self.cost is not None:
            object.__setattr__(self, "cost", _decimal(self.cost, "UsageLimits.cost"))

    def to_dict(self) -> dict[str, Any]:
        """The limits as a JSON object (``cost`` as a decimal string), for machine files."""
        doc: dict[str, Any] = {name: getattr(self, name) for name in _DIMENSIONS[:-1]}
        doc["cost"] = None if self.cost is None else str(self.cost)
        return doc

    @classmethod
    def from_dict(cls, doc: Any) -> UsageLimits:
        """Read :meth:`to_dict`'s object. Raises ``ValueError`` for one of the wrong shape.

        ``doc`` is the JSON value :meth:`to_dict` wrote.
        """
        if not isinstance(doc, dict):
            raise ValueError("limits must be an object")
        unknown = set(doc) - set(_DIMENSIONS)
        if unknown:
            raise ValueError(f"limits has unknown keys: {', '.join(sorted(unknown))}")
        cost = doc.get("cost")
        if cost is not None and not isinstance(cost, str):
            raise ValueError(f"limits.cost must be a decimal string or null, got {cost!r}")
        return cls(
            **{name: doc.get(name) for name in _DIMENSIONS[:-1]},
            cost=None if cost is None else _decimal(cost, "limits.cost"),
        )


@dataclass(frozen=True, slots=True)
@hot  # made every turn: the cheaper __init__ (loopctl._frozen.hot)
class RunUsage:
    """What a run has spent so far, as the machine counts it for its limits.

    ``requests``: model calls answered. ``tool_calls``: calls asked to run. Token counts as in
    :class:`~loopctl.response.Usage`, of the replies that reported them (a count a provider did not report
    adds nothing: a limit counts what is known). ``cost``: USD, ``None`` once a reply of the run could not be priced
    (the total is then unknown, never guessed).
    """

    requests: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal | None = Decimal(0)

    @property
    def total_tokens(self) -> int:
        """``input_tokens + output_tokens``."""
        return self.input_tokens + self.output_tokens

    def with_reply(self, usage: Usage, cost: Decimal | None) -> RunUsage:
        """This usage after one more reply that used ``usage`` and cost ``cost`` (``None``: unknown)."""
        total = None if cost is None or self.cost is None else self.cost + cost
        return RunUsage(
            self.requests + 1,
            self.tool_calls,
            self.input_tokens + (usage.input_tokens or 0),  # tokens not reported cannot be counted
            self.output_tokens + (usage.output_tokens or 0),
            total,
        )

    def with_tool_calls(self, n: int) -> RunUsage:
        """This usage after ``n`` more tool calls."""
        return RunUsage(self.requests, self.tool_calls + n, self.input_tokens, self.output_tokens, self.cost)

    def plus(self, other: RunUsage) -> RunUsage:
        """This usage and ``other``'s together (a sub-agent's spend counted in its parent's run)."""
        cost = None if self.cost is None or other.cost is None else self.cost + other.cost
        return RunUsage(
            self.requests + other.requests,
            self.tool_calls + other.tool_calls,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            cost,
        )

    def spent(self, dimension: LimitDimension) -> int | Decimal | None:
        """The count of ``dimension``."""
        value: int | Decimal | None = self.total_tokens if dimension == "total_tokens" else getattr(self, dimension)
        return value

    def to_dict(self) -> dict[str, Any]:
        """The counts as a JSON object (``cost`` as a decimal string, or ``null`` when unknown)."""
        return {
            "requests": self.requests,
            "tool_calls": self.tool_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": None if self.cost is None else str(self.cost),
        }

    @classmethod
    def from_dict(cls, doc: Any) -> RunUsage:
        """Read :meth:`to_dict`'s object. Raises ``ValueError`` for one of the wrong shape.

        ``doc`` is the JSON value :meth:`to_dict` wrote.
        """
        if not isinstance(doc, dict):
            raise ValueError("usage must be an object")
        counts: dict[str, int] = {}
        for f in fields(cls)[:-1]:
            value = doc.get(f.name, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"usage.{f.name} must be a whole number >= 0, got {value!r}")
            counts[f.name] = value
        cost = doc.get("cost", "0")
        if cost is not None and not isinstance(cost, str):
            raise ValueError(f"usage.cost must be a decimal string or null, got {cost!r}")
        return cls(**counts, cost=None if cost is None else _decimal(cost, "usage.cost"))


@dataclass(frozen=True, slots=True)
class LimitHit:
    """The limit that ended a run (``Outcome.limit``): its ``dimension``, what the run had ``spent`` of it,
    and the ``limit``. For ``requests`` and ``tool_calls`` ``spent`` is what was spent before the step that
    would have passed the limit (``needed`` more was asked for); for tokens and cost it is past the limit."""

    dimension: LimitDimension
    spent: int | Decimal
    limit: int | Decimal
    needed: int = 0

    def describe(self) -> str:
        """A sentence for the run's outcome, such as ``"the requests limit (3) was reached: 3 spent"``."""
        name = self.dimension.replace("_", " ")
        unit = " USD" if self.dimension == "cost" else ""
        if self.needed:
            return (
                f"the {name} limit ({self.limit}{unit}) would be passed: {self.spent} spent, the next step needs "
                f"{self.needed} more"
            )
        if self.spent > self.limit:
            return f"the {name} limit ({self.limit}{unit}) was passed: {self.spent}{unit} spent"
        return f"the {name} limit ({self.limit}{unit}) was reached: {self.spent}{unit} spent"

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object (decimals as strings)."""
        return {
            "dimension": self.dimension,
            "spent": str(self.spent) if isinstance(self.spent, Decimal) else self.spent,
            "limit": str(self.limit) if isinstance(self.limit, Decimal) else self.limit,
            "needed": self.needed,
        }

    @classmethod
    def from_dict(cls, doc: Any) -> LimitHit:
        """Read :meth:`to_dict`'s object. Raises ``ValueError`` for one of the wrong shape.

        ``doc`` is the JSON value :meth:`to_dict` wrote.
        """
        if not isinstance(doc, dict) or doc.get("dimension") not in _DIMENSIONS:
            raise ValueError(f"limit must name a dimension ({', '.join(_DIMENSIONS)})")
        dimension: LimitDimension = doc["dimension"]
        values: list[int | Decimal] = []
        for key in ("spent", "limit"):
            value = doc.get(key)
            if dimension == "cost" and isinstance(value, str):
                values.append(_decimal(value, f"limit.{key}"))
            elif dimension != "cost" and isinstance(value, int) and not isinstance(value, bool):
                values.append(value)
            else:
                raise ValueError(f"limit.{key} of {dimension} has the wrong type: {value!r}")
        needed = doc.get("needed", 0)
        if not isinstance(needed, int) or isinstance(needed, bool) or needed < 0:
            raise ValueError(f"limit.needed must be a whole number >= 0, got {needed!r}")
        return cls(dimension, values[0], values[1], needed)


def after_turn(spent: RunUsage, usage: Usage, cost: Decimal | None, tool_calls: int) -> RunUsage:
    """``spent.with_reply(usage, cost).with_tool_calls(tool_calls)`` as one value: the spend after a reply
    that used ``usage``, cost ``cost`` (``None``: unknown) and asked for ``tool_calls`` calls to run."""
    return RunUsage(
        spent.requests + 1,
        spent.tool_calls + tool_calls,
        spent.input_tokens + (usage.input_tokens or 0),  # tokens not reported cannot be counted
        spent.output_tokens + (usage.output_tokens or 0),
        None if cost is None or spent.cost is None else spent.cost + cost,
    )


def remaining(limits: UsageLimits | None, spent: RunUsage) -> UsageLimits | None:
    """What is left of ``limits`` once ``spent`` is spent (each dimension at least 0; a cost limit with an
    unknown spend stays as it was, and the run it is given to checks its own prices): the limits of a sub-agent's
    run, so that it cannot spend past its parent's. ``None`` for no limits."""
    if limits is None:
        return None

    def left(dimension: LimitDimension) -> Any:
        limit = getattr(limits, dimension)
        value = spent.spent(dimension)
        if limit is None or value is None:
            return limit
        return max(limit - value, 0)

    return UsageLimits(*(left(d) for d in _DIMENSIONS))


def passed_after_reply(limits: UsageLimits, spent: RunUsage) -> LimitHit | None:
    """The first token or cost limit that ``spent`` is past (checked after a reply), or ``None``. A cost limit
    with an unknown cost is not decided here (see :func:`cost_unknown`)."""
    dimensions: tuple[LimitDimension, ...] = ("input_tokens", "output_tokens", "total_tokens", "cost")
    for dimension in dimensions:
        limit = getattr(limits, dimension)
        value = spent.spent(dimension)
        if limit is not None and value is not None and value > limit:
            return LimitHit(dimension, value, limit)
    return None


def cost_unknown(limits: UsageLimits, spent: RunUsage) -> bool:
    """Whether a cost limit is set and the run's cost is unknown (a reply could not be priced)."""
    return limits.cost is not None and spent.cost is None


def _decimal(value: Any, what: str) -> Decimal:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number of USD, got {value!r}")
    try:
        d = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise ValueError(f"{what} must be a number of USD, got {value!r}") from None
    if not d.is_finite() or d < 0:
        raise ValueError(f"{what} must be a finite number of USD >= 0, got {value!r}")
    return d
