"""What crosses a durable step's boundary, as JSON: model replies, tool-call records, approvals and errors.

Both engines record each step's output (DBOS in its system database, Temporal in the workflow history) and
hand the recorded value back when the workflow is replayed. The values are written here as plain JSON (the
message model's wire form, ``docs/wire-format.md``) rather than pickled objects, so a history recorded by
one release of loopctl replays under the next, and any serializer the engine is configured with can carry
them.

Pure: no I/O.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pydantic_core
from pydantic import TypeAdapter

import loopctl.errors as errors_module
from loopctl.engine.config import RunConfig
from loopctl.engine.limits import LimitHit, UsageLimits
from loopctl.engine.machine import Outcome, OutcomeKind, OutputCheck
from loopctl.engine.permission import Approval, Approve, Deny, Modify, PendingApproval
from loopctl.engine.run import NO_OUTPUT, ModelReply, Run, ToolCallRecord, Turn
from loopctl.errors import ApprovalError, LoopError
from loopctl.message import Message, ToolCallPart, ToolResultPart
from loopctl.message.model import _dumps_bytes
from loopctl.response import InvalidToolCall, ModelResponse, StopReason, Usage
from loopctl.tool import ForceTool

__all__ = [
    "OutputValues",
    "approvals_from_dict",
    "approvals_to_dict",
    "loop_error_from_dict",
    "check_from_dict",
    "check_to_dict",
    "config_from_dict",
    "config_to_dict",
    "dumps",
    "loads",
    "error_from_dict",
    "error_to_dict",
    "pending_from_dict",
    "pending_to_dict",
    "record_from_dict",
    "record_to_dict",
    "reply_from_dict",
    "reply_to_dict",
    "response_from_dict",
    "response_to_dict",
    "run_from_dict",
    "run_to_dict",
    "usage_from_dict",
]


def dumps(value: Any) -> str:
    """``value`` (the JSON objects of this module) as compact JSON text, as the message model writes it:
    integers past 64 bits included (a tool call's input may hold one)."""
    return _dumps_bytes(value).decode()


def loads(text: str | bytes) -> Any:
    """The value of JSON ``text`` written by :func:`dumps`; integers of any size stay exact."""
    return pydantic_core.from_json(text)


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


def reply_to_dict(reply: ModelReply) -> dict[str, Any]:
    """A model call's :class:`~loopctl.engine.run.ModelReply` as a JSON object: ``response``
    (:func:`response_to_dict`), the ``provider`` and ``model`` that answered (a fallback chain's client) and
    the ``cost`` in USD as a decimal string (``null``: unknown), and the ``failed_usage`` of attempts that
    failed before it (``Usage.to_dict``)."""
    return {
        "response": response_to_dict(reply.response),
        "provider": reply.provider,
        "model": reply.model,
        "cost": None if reply.cost is None else str(reply.cost),
        "failed_usage": reply.failed_usage.to_dict(),
    }


def reply_from_dict(data: dict[str, Any]) -> ModelReply:
    """The :class:`~loopctl.engine.run.ModelReply` written by :func:`reply_to_dict`. A record from before
    replies were priced (no ``provider``, ``model`` or ``cost``) reads as the model the response names, no
    provider, and an unknown cost; one without ``failed_usage`` as none."""
    response = response_from_dict(data["response"])
    cost = data.get("cost")
    failed = data.get("failed_usage")
    return ModelReply(
        response,
        str(data.get("provider") or ""),
        str(data.get("model") or response.model or ""),
        None if cost is None else Decimal(str(cost)),
        usage_from_dict(failed) if isinstance(failed, dict) else Usage(),
    )


def pending_to_dict(pending: PendingApproval) -> dict[str, Any]:
    """A deferred call (:class:`~loopctl.engine.PendingApproval`) as a JSON object: ``call``, ``reason``."""
    return {"call": pending.call.to_dict(), "reason": pending.reason}


def pending_from_dict(data: dict[str, Any]) -> PendingApproval:
    """The :class:`~loopctl.engine.PendingApproval` written by :func:`pending_to_dict`."""
    reason = data.get("reason")
    return PendingApproval(ToolCallPart.model_validate(data["call"]), None if reason is None else str(reason))


def approvals_to_dict(approvals: Mapping[str, Approval]) -> dict[str, Any]:
    """Decisions on deferred calls, ``{call_id: Approve() | Deny(reason) | Modify(input)}``, as a JSON object
    ``{call_id: {"decision": "approve"} | {"decision": "deny", "reason": ...} | {"decision": "modify",
    "input": ...}}`` (the form the durable loops' approval messages and signals carry; ``Modify.input`` must
    be JSON). Raises :class:`~loopctl.errors.ApprovalError` for a decision of another type."""
    out: dict[str, Any] = {}
    for call_id, decision in approvals.items():
        if not isinstance(call_id, str):
            raise ApprovalError(f"a call id must be a str, got {call_id!r}")
        if isinstance(decision, Approve):
            out[call_id] = {"decision": "approve"}
        elif isinstance(decision, Deny):
            out[call_id] = {"decision": "deny", "reason": decision.reason}
        elif isinstance(decision, Modify):
            out[call_id] = {"decision": "modify", "input": decision.input}
        else:
            raise ApprovalError(
                f"the decision for call {call_id!r} is {decision!r}; expected Approve(), Deny(reason) or Modify(input)"
            )
    return out


def approvals_from_dict(data: Any) -> dict[str, Approval]:
    """The decisions written by :func:`approvals_to_dict`. Raises :class:`~loopctl.errors.ApprovalError` for
    data of another shape (it may come from outside: a message or a signal anyone can send)."""
    if not isinstance(data, dict):
        raise ApprovalError(f"approvals must be a JSON object of call ids, got {type(data).__name__}")
    out: dict[str, Approval] = {}
    for call_id, item in data.items():
        kind = item.get("decision") if isinstance(item, dict) else None
        if kind == "approve":
            out[str(call_id)] = Approve()
        elif kind == "deny":
            reason = item.get("reason")
            out[str(call_id)] = Deny(reason) if isinstance(reason, str) else Deny()
        elif kind == "modify" and "input" in item:
            out[str(call_id)] = Modify(item["input"])
        else:
            raise ApprovalError(
                f"the decision for call {call_id!r} must be {{'decision': 'approve' | 'deny' | 'modify'}}, got {item!r}"
            )
    return out


_JSON_SCALARS = (str, int, float, bool, type(None))


def _json_attr(value: Any) -> bool:
    return isinstance(value, _JSON_SCALARS) or (
        isinstance(value, (list, tuple)) and all(isinstance(v, _JSON_SCALARS) for v in value)
    )


def error_to_dict(error: BaseException) -> dict[str, Any]:
    """An exception as a JSON object: its class name, text, ``retryable`` and its attributes that are JSON
    scalars or lists of them (``status``, ``retry_after``, ``provider``, ``errors``...). A recorded failure
    replays as the same failure: the run's outcome names the same ``error_type`` and text."""
    attrs = {
        k: list(v) if isinstance(v, tuple) else v
        for k, v in vars(error).items()
        if k != "message" and not k.startswith("_") and _json_attr(v)
    }
    out: dict[str, Any] = {
        "type": type(error).__name__,
        "message": str(error),
        "retryable": bool(getattr(error, "retryable", False)),
        "attrs": attrs,
    }
    # (label, error) pairs, such as FallbackFailed.errors: each error recorded in the same form
    pairs = {k: [[label, error_to_dict(e)] for label, e in v] for k, v in vars(error).items() if _error_pairs(v)}
    if pairs:
        out["pairs"] = pairs
    return out


def _error_pairs(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and bool(value)
        and all(
            isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], BaseException)
            for v in value
        )
    )


_UNKNOWN: dict[str, type[LoopError]] = {}


def error_from_dict(data: dict[str, Any]) -> BaseException:
    """The error written by :func:`error_to_dict`: an instance of the same :mod:`loopctl.errors` class (so
    ``except ContextOverflow`` still matches) or built-in exception class (``ValueError``), or, for a class
    from elsewhere (a custom client's, an output validator's), an instance of a
    :class:`~loopctl.errors.LoopError` subclass of the same name. Its text and attributes are the recorded
    ones; no constructor of ours runs."""
    name = str(data["type"])
    message = str(data["message"])
    builtin = getattr(builtins, name, None)
    if isinstance(builtin, type) and issubclass(builtin, Exception) and not issubclass(builtin, LoopError):
        plain = builtin(message)
        plain.__dict__.update(data.get("attrs", {}))
        return plain
    found = getattr(errors_module, name, None)
    cls: type[LoopError]
    if isinstance(found, type) and issubclass(found, LoopError):
        cls = found
    else:
        cls = _UNKNOWN.get(name) or _UNKNOWN.setdefault(
            name, type(name, (LoopError,), {"__module__": __name__, "__doc__": "A recorded error of a custom class."})
        )
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(data.get("attrs", {}))
    for key, pairs in data.get("pairs", {}).items():
        error.__dict__[key] = tuple((str(label), error_from_dict(e)) for label, e in pairs)
    error.message = message
    if bool(data.get("retryable")) != cls.retryable:
        error.retryable = bool(data.get("retryable"))
    return error


def loop_error_from_dict(data: dict[str, Any]) -> LoopError:
    """:func:`error_from_dict` for a recorded :class:`~loopctl.errors.LoopError` (a model call's failure)."""
    error = error_from_dict(data)
    if not isinstance(error, LoopError):  # pragma: no cover - only LoopErrors are recorded as model failures
        raise TypeError(f"the recorded {type(error).__name__} is not a LoopError")
    return error


def usage_from_dict(data: dict[str, Any]) -> Usage:
    """The :class:`~loopctl.response.Usage` of ``Usage.to_dict`` (``null`` for a count not reported; payloads
    of earlier versions hold every count as a number)."""
    return Usage.from_dict(data)


class OutputValues:
    """How a run's typed output value crosses a step or workflow boundary: as JSON, dumped and validated again
    by pydantic's ``TypeAdapter`` of the output type (``output_type``: a type or an
    :mod:`loopctl.output` mode; ``None`` or ``str`` for text). A value validated once is rebuilt the same
    way from the record every time the run is replayed, so a replayed run holds an equal value."""

    __slots__ = ("_adapter",)

    def __init__(self, output_type: Any) -> None:
        from loopctl.output import resolve

        mode = resolve(output_type)
        self._adapter: TypeAdapter[Any] | None = None if mode is None else TypeAdapter(mode.type)

    def dump(self, value: Any) -> Any:
        """``value`` as JSON data (``None`` for no output)."""
        if value is NO_OUTPUT:
            return None
        if self._adapter is None:
            return value
        return self._adapter.dump_python(value, mode="json")

    def load(self, data: Any) -> Any:
        """The value of JSON ``data`` written by :meth:`dump`."""
        if self._adapter is None:
            return data
        return self._adapter.validate_python(data)


_TEXT = OutputValues(None)


def check_to_dict(check: OutputCheck | None, value: Any, problems: list[str], values: OutputValues) -> dict[str, Any]:
    """A reply's verdict as the run's typed output (``BareLoop._check_reply``) as a JSON object."""
    return {
        "check": None if check is None else dataclasses.asdict(check),
        "value": None if value is NO_OUTPUT else values.dump(value),
        "valid": value is not NO_OUTPUT,
        "problems": list(problems),
    }


def check_from_dict(data: dict[str, Any], values: OutputValues) -> tuple[OutputCheck | None, Any, list[str]]:
    """The verdict written by :func:`check_to_dict`, its value validated again from JSON."""
    check = None if data["check"] is None else OutputCheck(**data["check"])
    value = values.load(data["value"]) if data["valid"] else NO_OUTPUT
    return check, value, [str(p) for p in data["problems"]]


def run_to_dict(run: Run[Any], values: OutputValues = _TEXT) -> dict[str, Any]:
    """A :class:`~loopctl.engine.Run` as a JSON object (read back by :func:`run_from_dict`); ``values``
    dumps a typed output. Costs are decimal strings (``null``: unknown)."""
    o = run.outcome
    output = run._output  # NO_OUTPUT must not raise here
    return {
        "outcome": {
            "kind": o.kind.value,
            "error": o.error,
            "error_type": o.error_type,
            "retryable": o.retryable,
            "limit": None if o.limit is None else o.limit.to_dict(),
        },
        "output": values.dump(output),
        "has_output": output is not NO_OUTPUT,
        "text": run.text,
        "error": None if run.error is None else error_to_dict(run.error),
        "turns": [
            {
                "index": t.index,
                "input": [m.to_dict() for m in t.input],
                "output": t.output.to_dict(),
                "tool_calls": [record_to_dict(r) for r in t.tool_calls],
                "usage": t.usage.to_dict(),
                "stop_reason": t.stop_reason.value,
                "duration": t.duration,
                "model": t.model,
                "provider": t.provider,
                "cost": None if t.cost is None else str(t.cost),
            }
            for t in run.turns
        ],
        "usage": run.usage.to_dict(),
        "duration": run.duration,
        "pending_approvals": [pending_to_dict(p) for p in run.pending_approvals],
        "resumed_calls": [record_to_dict(r) for r in run.resumed_calls],
    }


def run_from_dict(data: dict[str, Any], values: OutputValues = _TEXT) -> Run[Any]:
    """The :class:`~loopctl.engine.Run` written by :func:`run_to_dict`; ``values`` validates a typed output
    again (without it, the output is the JSON value). Fields added later (a turn's model and cost, the
    outcome's limit, approvals) are optional."""
    o = data["outcome"]
    output = values.load(data["output"]) if data.get("has_output", True) else NO_OUTPUT
    error = data.get("error")
    limit = o.get("limit")
    return Run(
        Outcome(
            OutcomeKind(o["kind"]),
            o.get("error"),
            o.get("error_type"),
            bool(o.get("retryable")),
            None if limit is None else LimitHit.from_dict(limit),
        ),
        output,
        tuple(
            Turn(
                index=int(t["index"]),
                input=tuple(Message.from_dict(m) for m in t["input"]),
                output=Message.from_dict(t["output"]),
                tool_calls=tuple(record_from_dict(r) for r in t["tool_calls"]),
                usage=usage_from_dict(t["usage"]),
                stop_reason=StopReason(t["stop_reason"]),
                duration=float(t["duration"]),
                model=str(t.get("model") or ""),
                provider=str(t.get("provider") or ""),
                cost=None if t.get("cost") is None else Decimal(str(t["cost"])),
            )
            for t in data["turns"]
        ),
        usage_from_dict(data["usage"]),
        float(data["duration"]),
        None if error is None else error_from_dict(error),
        text=str(data.get("text", data["output"] if isinstance(data["output"], str) else "")),
        pending_approvals=tuple(pending_from_dict(p) for p in data.get("pending_approvals", ())),
        resumed_calls=tuple(record_from_dict(r) for r in data.get("resumed_calls", ())),
    )


def config_to_dict(config: RunConfig) -> dict[str, Any]:
    """A :class:`~loopctl.engine.RunConfig` as a JSON object (``tool_choice`` a string or
    ``{"tool": name}``; ``limits`` as ``UsageLimits.to_dict``; ``extra`` must itself be JSON)."""
    data = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    choice = config.tool_choice
    data["tool_choice"] = {"tool": choice.name} if isinstance(choice, ForceTool) else choice
    data["stop"] = None if config.stop is None else list(config.stop)
    data["extra"] = dict(config.extra)
    data["limits"] = None if config.limits is None else config.limits.to_dict()
    return data


def config_from_dict(data: dict[str, Any]) -> RunConfig:
    """The :class:`~loopctl.engine.RunConfig` written by :func:`config_to_dict`."""
    values = dict(data)
    choice = values.get("tool_choice")
    if isinstance(choice, dict):
        values["tool_choice"] = ForceTool(str(choice["tool"]))
    if values.get("stop") is not None:
        values["stop"] = tuple(values["stop"])
    if values.get("limits") is not None:
        values["limits"] = UsageLimits.from_dict(values["limits"])
    known = {f.name for f in dataclasses.fields(RunConfig)}
    return RunConfig(**{k: v for k, v in values.items() if k in known})
