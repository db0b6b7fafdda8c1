"""The engine: the loop machine (the brain: pure, serializable) and the driver (the hands: model, tools).

``LoopMachine`` decides; ``BareLoop`` acts. See :mod:`loopctl.engine.machine` for the state table.
"""

from loopctl.engine.config import Instructions, RunConfig, SessionConfig
from loopctl.engine.events import (
    CompactionFinished,
    CompactionStarted,
    LoopEvent,
    ModelCallFailed,
    ModelRetry,
    ModelStreamEvent,
    Observer,
    OutputRetry,
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
    OutputCheck,
    Prune,
    Step,
    coherent_prefix,
)
from loopctl.engine.permission import Approve, Decision, Deny, Modify, PermissionCallback
from loopctl.engine.run import Run, ToolCallRecord, Turn
from loopctl.engine.streaming import RunStream
from loopctl.tool import RunContext, ToolContext

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
    "Instructions",
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
    "OutputCheck",
    "OutputRetry",
    "PermissionCallback",
    "Prune",
    "Run",
    "RunAborted",
    "RunConfig",
    "RunContext",
    "RunFinished",
    "RunStarted",
    "RunStream",
    "SessionConfig",
    "Step",
    "ToolCallFinished",
    "ToolCallRecord",
    "ToolCallStarted",
    "ToolContext",
    "Turn",
    "TurnFinished",
    "TurnStarted",
    "coherent_prefix",
]
