"""What crosses a durable step's boundary, as JSON: model replies, tool-call records and errors.

Both engines record each step's output (DBOS in its system database, Temporal in the workflow history) and
hand the recorded value back when the workflow is replayed. The values are written here as plain JSON (the
message model's wire form, ``docs/wire-format.md``) rather than pickled objects, so a history recorded by
one release of loopctl replays under the next, and any serializer the engine is configured with can carry
them.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import loopctl.errors as errors_module
from loopctl.engine.config import RunConfig
from loopctl.engine.machine import Outcome, OutcomeKind
from loopctl.engine.run import Run, ToolCallRecord, Turn
from loopctl.errors import LoopError
from loopctl.message import Message, ToolCallPart, ToolResultPart
from loopctl.response import InvalidToolCall, ModelResponse, StopReason, Usage
from loopctl.tool import ForceTool

__all__ = [
    "config_from_dict",
    "config_to_dict",
    "error_from_dict",
    "error_to_dict",
    "record_from_dict",
    "record_to_dict",
    "response_from_dict",
    "response_to_dict",
    "run_from_dict",
    "run_to_dict",
    "usage_from_dict",
]


def response_to_dict(response: ModelResponse) -> dict[str, Any]:
    """A :class:`~loopctl.response.ModelResponse` as a JSON object (read back by :func:`response_from_dict`)."""
    return {
        "message": response.message.to_dict(),
        "usage": response.usage.to_dict(),
        "stop_reason": response.stop_reason.value,
        "raw_stop_reason": response.raw_stop_reason,
        "model": response.model,
        "id": response.id,
        "invalid_tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments, "error": c.error}
            for c in response.invalid_tool_calls
        ],
    }


def response_from_dict(data: dict[str, Any]) -> ModelResponse:
    """The :class:`~loopctl.response.ModelResponse` written by :func:`response_to_dict`."""
    return ModelResponse(
        message=Message.from_dict(data["message"]),
        usage=usage_from_dict(data["usage"]),
        stop_reason=StopReason(data["stop_reason"]),
        raw_stop_reason=data.get("raw_stop_reason"),
        model=data.get("model"),
        id=data.get("id"),
        invalid_tool_calls=tuple(InvalidToolCall(**c) for c in data.get("invalid_tool_calls", ())),
    )


def record_to_dict(record: ToolCallRecord) -> dict[str, Any]:
    """A :class:`~loopctl.engine.ToolCallRecord` as a JSON object (durations in seconds)."""
    return {
        "call": record.call.to_dict(),
        "result": record.result.to_dict(),
        "duration": record.duration,
        "ran": record.ran,
    }


def record_from_dict(data: dict[str, Any]) -> ToolCallRecord:
    """The :class:`~loopctl.engine.ToolCallRecord` written by :func:`record_to_dict`."""
    return ToolCallRecord(
        call=ToolCallPart.model_validate(data["call"]),
        result=ToolResultPart.model_validate(data["result"]),
        duration=float(data["duration"]),
        ran=bool(data["ran"]),
    )


_JSON_SCALARS = (str, int, float, bool, type(None))


def error_to_dict(error: LoopError) -> dict[str, Any]:
    """A :class:`~loopctl.errors.LoopError` as a JSON object: its class name, text, ``retryable`` and its
    scalar attributes (``status``, ``retry_after``, ``provider``...). A recorded failure replays as the same
    failure: the run's outcome names the same ``error_type`` and text."""
    attrs = {
        k: v
        for k, v in vars(error).items()
        if k != "message" and not k.startswith("_") and isinstance(v, _JSON_SCALARS)
    }
    return {
        "type": type(error).__name__,
        "message": str(error),
        "retryable": bool(error.retryable),
        "attrs": attrs,
    }


_UNKNOWN: dict[str, type[LoopError]] = {}


def error_from_dict(data: dict[str, Any]) -> LoopError:
    """The error written by :func:`error_to_dict`: an instance of the same :mod:`loopctl.errors` class (so
    ``except ContextOverflow`` still matches), or, for a class from outside loopctl (a custom client's), an
    instance of a :class:`~loopctl.errors.LoopError` subclass of the same name. Its text and attributes are
    the recorded ones; no constructor runs."""
    name = str(data["type"])
    found = getattr(errors_module, name, None)
    cls: type[LoopError]
    if isinstance(found, type) and issubclass(found, LoopError):
        cls = found
    else:
        cls = _UNKNOWN.get(name) or _UNKNOWN.setdefault(
            name, type(name, (LoopError,), {"__module__": __name__, "__doc__": "A recorded error of a custom class."})
        )
    error = cls.__new__(cls)
    message = str(data["message"])
    Exception.__init__(error, message)
    error.__dict__.update(data.get("attrs", {}))
    error.message = message
    if bool(data.get("retryable")) != cls.retryable:
        error.retryable = bool(data.get("retryable"))
    return error


def usage_from_dict(data: dict[str, Any]) -> Usage:
    """The :class:`~loopctl.response.Usage` of ``Usage.to_dict``."""
    return Usage(**{k: int(v) for k, v in data.items()})


def run_to_dict(run: Run) -> dict[str, Any]:
    """A :class:`~loopctl.engine.Run` as a JSON object (read back by :func:`run_from_dict`)."""
    o = run.outcome
    return {
        "outcome": {"kind": o.kind.value, "error": o.error, "error_type": o.error_type, "retryable": o.retryable},
        "output": run.output,
        "turns": [
            {
                "index": t.index,
                "input": [m.to_dict() for m in t.input],
                "output": t.output.to_dict(),
                "tool_calls": [record_to_dict(r) for r in t.tool_calls],
                "usage": t.usage.to_dict(),
                "stop_reason": t.stop_reason.value,
                "duration": t.duration,
            }
            for t in run.turns
        ],
        "usage": run.usage.to_dict(),
        "duration": run.duration,
    }


def run_from_dict(data: dict[str, Any]) -> Run:
    """The :class:`~loopctl.engine.Run` written by :func:`run_to_dict`."""
    o = data["outcome"]
    return Run(
        outcome=Outcome(OutcomeKind(o["kind"]), o.get("error"), o.get("error_type"), bool(o.get("retryable"))),
        output=str(data["output"]),
        turns=tuple(
            Turn(
                index=int(t["index"]),
                input=tuple(Message.from_dict(m) for m in t["input"]),
                output=Message.from_dict(t["output"]),
                tool_calls=tuple(record_from_dict(r) for r in t["tool_calls"]),
                usage=usage_from_dict(t["usage"]),
                stop_reason=StopReason(t["stop_reason"]),
                duration=float(t["duration"]),
            )
            for t in data["turns"]
        ),
        usage=usage_from_dict(data["usage"]),
        duration=float(data["duration"]),
    )


def config_to_dict(config: RunConfig) -> dict[str, Any]:
    """A :class:`~loopctl.engine.RunConfig` as a JSON object (``tool_choice`` a string or
    ``{"tool": name}``; ``extra`` must itself be JSON)."""
    data = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    choice = config.tool_choice
    data["tool_choice"] = {"tool": choice.name} if isinstance(choice, ForceTool) else choice
    data["stop"] = None if config.stop is None else list(config.stop)
    data["extra"] = dict(config.extra)
    return data


def config_from_dict(data: dict[str, Any]) -> RunConfig:
    """The :class:`~loopctl.engine.RunConfig` written by :func:`config_to_dict`."""
    values = dict(data)
    choice = values.get("tool_choice")
    if isinstance(choice, dict):
        values["tool_choice"] = ForceTool(str(choice["tool"]))
    if values.get("stop") is not None:
        values["stop"] = tuple(values["stop"])
    known = {f.name for f in dataclasses.fields(RunConfig)}
    return RunConfig(**{k: v for k, v in values.items() if k in known})
