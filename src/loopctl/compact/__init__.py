"""Compaction that honours retention classes: token counting, the budget, pruning, truncation, summaries.

Sans-IO like the loop machine: every pass takes messages and returns messages; the summarizing compactor
returns the model request it wants sent and builds the new conversation from the reply the driver hands
back. The retention classes (``docs/compaction.md``, "Retention classes") decide what each pass may do with a tool
result: untagged results go first, ``Requery`` results next and only with a marker naming the call,
``Durable`` results are never pruned and are kept verbatim through truncation and summaries.

Modules, one per concept: ``counting`` (the counter protocol, the heuristic and its calibration),
``budget`` (the policy numbers and the verdict on a pass), ``prune``, ``truncate``, ``summarize``, ``provider``
(provider-side strategies); with
``structure`` (where a conversation may be cut), ``keep`` (what a compaction keeps) and ``textcut`` (cutting
text without breaking a character). See ``docs/compaction.md``.

Pure: no I/O, no clock.
"""

from loopctl.compact.budget import ContextBudget, PassOutcome, PassReport, Pressure
from loopctl.compact.counting import PRESETS, CounterPreset, HeuristicTokenCounter, TokenCounter, message_tokens
from loopctl.compact.provider import (
    AnthropicClearToolUses,
    AnthropicCompaction,
    OpenAICompactEndpoint,
    OpenAICompaction,
    ProviderCompaction,
)
from loopctl.compact.prune import PRUNE_MARKER, prune, prune_marker
from loopctl.compact.summarize import (
    REQUERY_OMITTED,
    SUMMARY_HEADER,
    SUMMARY_INSTRUCTIONS,
    SUMMARY_SYSTEM_PROMPT,
    SummarizingCompactor,
    SummaryPlan,
    transcript,
)
from loopctl.compact.textcut import clip, clip_middle, safe_cut_index
from loopctl.compact.truncate import TRUNCATION_NOTICE, Compactor, TruncatingCompactor

__all__ = [
    "PRESETS",
    "PRUNE_MARKER",
    "REQUERY_OMITTED",
    "SUMMARY_HEADER",
    "SUMMARY_INSTRUCTIONS",
    "SUMMARY_SYSTEM_PROMPT",
    "TRUNCATION_NOTICE",
    "AnthropicClearToolUses",
    "AnthropicCompaction",
    "Compactor",
    "ContextBudget",
    "CounterPreset",
    "HeuristicTokenCounter",
    "OpenAICompactEndpoint",
    "OpenAICompaction",
    "PassOutcome",
    "PassReport",
    "ProviderCompaction",
    "Pressure",
    "SummarizingCompactor",
    "SummaryPlan",
    "TokenCounter",
    "TruncatingCompactor",
    "clip",
    "clip_middle",
    "message_tokens",
    "prune",
    "prune_marker",
    "safe_cut_index",
    "transcript",
]
