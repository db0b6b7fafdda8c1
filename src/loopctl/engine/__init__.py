"""The engine: the loop machine (the brain: pure, serializable) and the driver (the hands: model, tools).

``LoopMachine`` decides; ``BareLoop`` acts. See :mod:`loopctl.engine.machine` for the state table.
"""

from loopctl.engine.config import RunConfig, SessionConfig
from loopctl.engine.events import (
    CompactionFinished,
    CompactionStarted,
    LoopEvent,
    ModelCallFailed,
    ModelRetry,
    ModelStreamEvent,
    Observer,
    RunAborted,
    RunFinished,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
)
from loopctl.engine.loop import BareLoop
from loopctl.engine.machine import (
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
    Prune,
    Step,
    coherent_prefix,
)
from loopctl.engine.permission import Approve, Decision, Deny, Modify, PermissionCallback
from loopctl.engine.run import Run, ToolCallRecord, Turn

__all__ = [
    "MACHINE_FORMAT_VERSION",
    "Approve",
    "BareLoop",
    "CallLLM",
    "CallTools",
    "Compact",
    "CompactReason",
    "CompactionFinished",
    "CompactionStarted",
    "Decision",
    "Deny",
    "Done",
    "LoopEvent",
    "LoopMachine",
    "MachinePolicy",
    "MachineState",
    "ModelCallFailed",
    "ModelRetry",
    "ModelStreamEvent",
    "Modify",
    "Observer",
    "Outcome",
    "OutcomeKind",
    "PermissionCallback",
    "Prune",
    "Run",
    "RunAborted",
    "RunConfig",
    "RunFinished",
    "RunStarted",
    "SessionConfig",
    "Step",
    "ToolCallFinished",
    "ToolCallRecord",
    "ToolCallStarted",
    "Turn",
    "TurnFinished",
    "TurnStarted",
    "coherent_prefix",
]
