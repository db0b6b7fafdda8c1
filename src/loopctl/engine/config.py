"""Configuration of a loop: :class:`SessionConfig` once per session, :class:`RunConfig` per run.

Pure data.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import field
from typing import Any, Literal, TypeAlias, Union

from loopctl._frozen import dataclass
from loopctl.compact import Compactor, ContextBudget, SummarizingCompactor
from loopctl.compact.provider import ProviderCompaction
from loopctl.engine.limits import UsageLimits
from loopctl.engine.machine import DEFAULT_LOOP_DETECTION, check_loop_detection
from loopctl.providers.base import ReasoningEffort
from loopctl.tool import RunContext, ToolChoice, check_tool_choice

__all__ = ["Instructions", "RunConfig", "SessionConfig"]

Instructions: TypeAlias = Union[str, Callable[[RunContext[Any]], Union[str, Awaitable[str]]]]
"""Instructions: a string, or a callable (sync or async) that takes the run's
:class:`~loopctl.tool.RunContext` and returns one."""


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """Settings that hold for the whole session.

    ``system_prompt``: standing guidance, routed by each provider codec to where it belongs.
    ``instructions``: more of it, a string or a callable ``(ctx: RunContext) -> str`` (sync or async) called
    once at the start of each run, never per turn, so every request of a run starts with the same bytes and
    the provider's prompt cache hits within the run. The text sent is ``system_prompt``, then the
    instructions, joined by a blank line. Instructions that differ between runs change the request's first
    bytes, so the next run starts with a cache miss (``docs/agent.md``, "Instructions").
    ``context_window``: the model's window in tokens (default ``None``: the window its provider publishes for
    the client's model, :func:`loopctl.model_limits.published`, else 200,000). ``compact_threshold``: compaction
    starts strictly above this fraction of the window (default 0.80) when ``auto_compact`` is on; emergency
    compaction at 95% is always on. ``budget`` optionally replaces these numbers with a full
    :class:`~loopctl.compact.ContextBudget` (lines, target, token counter); ``compactor`` is the compaction
    pass to run (default: the truncating compactor), or a provider-side strategy
    (:mod:`loopctl.compact.provider`: ``AnthropicCompaction()``, ``AnthropicClearToolUses()``,
    ``OpenAICompaction()``, ``OpenAICompactEndpoint()``; ``docs/compaction.md``, "Provider-side compaction").
    """

    system_prompt: str | None = None
    instructions: Instructions | None = None
    context_window: int | None = None
    compact_threshold: float = 0.80
    auto_compact: bool = True
    budget: ContextBudget | None = None
    compactor: Compactor | SummarizingCompactor | ProviderCompaction | None = None


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Settings for one run.

    ``max_turns``: model calls per run (default 200). ``tool_dispatch``: run a turn's tool calls in
    ``"parallel"`` (at most ``max_concurrency`` at once) or ``"sequential"`` order. ``tool_timeout``: seconds a
    tool may run before its call becomes an error result (``None``: no limit). ``max_tool_output_chars``: a
    tool's text output longer than this (characters; about 25,000 tokens by default) is cut in the middle
    with a note saying how much was cut (``None``: no limit). ``stream``: stream the model's
    reply (observers see deltas). Generation settings passed to the codec: ``max_tokens`` (tokens),
    ``temperature``, ``reasoning_effort``, ``tool_choice``, ``stop``, and ``extra`` (merged into the provider's
    request body). Retries: a retryable error (rate limit, overload, server error, dropped stream) is retried
    up to ``max_retries`` times, waiting the provider's ``retry_after`` when given, else exponential backoff
    with jitter from ``retry_initial_delay`` up to ``retry_max_delay`` seconds. ``output_retries``: with typed
    output (``output_type=``), how many invalid answers go back to the model before the run ends with
    ``OUTPUT_INVALID`` (default 1: one retry).

    Guardrails (``docs/guardrails.md``): ``limits`` are the run's :class:`~loopctl.engine.UsageLimits`
    (requests, tool calls, tokens, cost; ``None``: none), kept with the run's state so a resumed run keeps
    counting. ``loop_detection`` is ``k``: the same tool call (name and input) ``k`` times in a row gets an
    error result telling the model so, and once more ends the run with ``LOOP_DETECTED`` (default 3;
    ``None``: off). A run continued with approvals keeps the loop detection it started with; ``limits``,
    when given then, replace its limits.

    ``raise_tool_errors``: a tool that raises is the model's to read by default (its error result says so;
    the exception is on the :class:`~loopctl.engine.ToolCallRecord` and the
    :class:`~loopctl.engine.ToolCallFinished` event, and logged by ``loopctl.engine.loop`` with its
    traceback). With ``True`` it is raised out of ``run()`` instead, the run ending failed with it (its turn
    kept, as a failure keeps it): for tests, where a tool's bug should fail the test. Input that does not fit
    the tool's schema, a timeout and a denial stay the model's to read either way.

    Raises ``ValueError`` for a ``loop_detection`` that is not an ``int`` of at least 2 or ``None`` (``3.0``
    too), ``limits`` that are not a :class:`~loopctl.engine.UsageLimits`, a ``tool_choice`` that is not a
    :data:`~loopctl.tool.ToolChoice`, and a ``max_turns`` or
    ``max_concurrency`` below 1 or ``max_retries`` or ``output_retries`` below 0 (or not an ``int``).
    """

    max_turns: int = 200
    tool_dispatch: Literal["parallel", "sequential"] = "parallel"
    max_concurrency: int = 8
    tool_timeout: float | None = 120.0
    max_tool_output_chars: int | None = 100_000
    stream: bool = True
    max_tokens: int | None = None
    temperature: float | None = None
    reasoning_effort: ReasoningEffort | None = None
    tool_choice: ToolChoice | None = None
    stop: Sequence[str] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    max_retries: int = 4
    retry_initial_delay: float = 1.0
    retry_max_delay: float = 60.0
    output_retries: int = 1
    limits: UsageLimits | None = None
    loop_detection: int | None = DEFAULT_LOOP_DETECTION
    raise_tool_errors: bool = False

    def __post_init__(self) -> None:
        # What the run saves with its machine is checked here, so that nothing a run accepts makes a file its
        # loader refuses (a float ``loop_detection`` from a config file, a dict for ``limits``).
        check_loop_detection(self.loop_detection)
        check_tool_choice(self.tool_choice)
        if self.limits is not None and not isinstance(self.limits, UsageLimits):
            raise ValueError(f"RunConfig.limits must be a UsageLimits or None, got {type(self.limits).__name__}")
        for name, least in (("max_turns", 1), ("max_concurrency", 1), ("max_retries", 0), ("output_retries", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"RunConfig.{name} must be a whole number >= {least}, got {value!r}")
