"""The engine: the loop machine (the brain: pure, serializable) and the driver (the hands: model, tools).

``LoopMachine`` decides; ``BareLoop`` acts. See :mod:`loopctl.engine.machine` for the state table, and
``docs/guardrails.md`` for usage limits, cost, fallback models, hooks, loop detection and approvals.
"""

from loopctl.engine.config import Instructions, RunConfig, SessionConfig
from loopctl.engine.events import (
    AgentHandoff,
    CompactionFinished,
    CompactionStarted,
    LoopEvent,
    ModelCallFailed,
    ModelCallRetry,
    ModelFallback,
    ModelStreamEvent,
    Observer,
    OutputRetry,
    PromptCacheBust,
    ReplyDiscarded,
    RunAborted,
    RunFinished,
    RunStarted,
    SubAgentEvent,
    ToolCallDeferred,
    ToolCallFinished,
    ToolCallStarted,
    ToolProgress,
    TurnFinished,
    TurnStarted,
)
from loopctl.engine.hooks import Block, Hook
from loopctl.engine.limits import LimitHit, RunUsage, UsageLimits
from loopctl.engine.loop import BareLoop
from loopctl.engine.machine import (
    DEFAULT_LOOP_DETECTION,
    MACHINE_FORMAT_VERSION,
    CallLLM,
    CallTools,
    Compact,
    CompactReason,
    Done,
    LoopMachine,
    MachinePolicy,
    MachineState,
    Outcome,
    OutcomeKind,
    OutputCheck,
    Prune,
    Step,
    coherent_prefix,
)
from loopctl.engine.permission import (
    Approval,
    Approve,
    Decision,
    Defer,
    Deny,
    Modify,
    PendingApproval,
    PermissionCallback,
)
from loopctl.engine.run import ModelReply, Run, ToolCallRecord, Turn
from loopctl.engine.streaming import RunStream
from loopctl.tool import RunContext, ToolContext

__all__ = [
    "DEFAULT_LOOP_DETECTION",
    "AgentHandoff",
    "MACHINE_FORMAT_VERSION",
    "Approval",
    "Approve",
    "BareLoop",
    "Block",
    "CallLLM",
    "CallTools",
    "Compact",
    "CompactReason",
    "CompactionFinished",
    "CompactionStarted",
    "Decision",
    "Defer",
    "Deny",
    "Done",
    "Hook",
    "Instructions",
    "LimitHit",
    "LoopEvent",
    "LoopMachine",
    "MachinePolicy",
    "MachineState",
    "ModelCallFailed",
    "ModelFallback",
    "ModelReply",
    "ModelCallRetry",
    "ModelStreamEvent",
    "Modify",
    "Observer",
    "Outcome",
    "OutcomeKind",
    "OutputCheck",
    "OutputRetry",
    "PendingApproval",
    "PermissionCallback",
    "Prune",
    "ReplyDiscarded",
    "Run",
    "RunAborted",
    "RunConfig",
    "RunContext",
    "RunFinished",
    "RunStarted",
    "RunStream",
    "RunUsage",
    "SessionConfig",
    "Step",
    "SubAgentEvent",
    "ToolCallDeferred",
    "ToolCallFinished",
    "ToolProgress",
    "ToolCallRecord",
    "ToolCallStarted",
    "ToolContext",
    "Turn",
    "TurnFinished",
    "TurnStarted",
    "PromptCacheBust",
    "UsageLimits",
    "coherent_prefix",
]


def __getattr__(name: str) -> object:
    if name == "ModelRetry":  # the event's name before 0.2: a deprecated alias of ModelCallRetry
        from loopctl.engine import events

        return events._deprecated_alias(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
