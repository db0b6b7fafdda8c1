"""Durable runs on DBOS: each run is a DBOS workflow, each model call and each tool call a DBOS step.

**Assume any unit may run twice.** DBOS records a step's output once the step returns; a step that was
running when the process died (a tool halfway through, a model call in flight) runs again, from its start,
when the workflow is recovered. A step that completed never runs again: its recorded output is used. Tools
with side effects should therefore be idempotent or tolerate a repeat of an interrupted call; a completed
call is never repeated.

The mapping (``docs/durable.md`` has the whole of it):

- ``DBOSLoop(client, tools, config, name="support")`` registers the workflow ``support.run`` and runs each
  step under a stable name: ``support.start``, ``support.model`` (one model call, with the run's retry
  policy inside it), ``support.tool.<tool name>`` (one tool call, the permission check included),
  ``support.summarize`` (a summarizing compaction's model call). The names are compatibility data: DBOS
  checks them on recovery, so renaming a loop or a tool strands its pending runs.
- The :class:`~loopctl.engine.LoopMachine` is the workflow's own state. Workflow code is the same driver as
  :class:`~loopctl.engine.BareLoop`'s, so a durable run decides exactly what a plain run decides; the
  machine, the prune and truncation passes and the token counter are pure, so a recovered workflow takes the
  same steps again with the recorded outputs.
- Steps are numbered by DBOS in the order they start. A turn's tool calls reserve their step numbers in call
  order before any of them starts, so parallel calls replay against the right records however they
  finished.
- Observers see each event once: events of a step are emitted while it runs, never when its recorded output
  is replayed during recovery.
- The system database is DBOS's choice: SQLite by default (``sqlite:///<name>.sqlite``, embedded), or a
  PostgreSQL URL for several workers sharing one database (:func:`recover` hands a dead worker's runs to a
  live one).

Build the loop after ``DBOS(config=...)`` and before ``DBOS.launch()``: DBOS must know every workflow before
it recovers pending ones at launch.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Coroutine, Iterable, Sequence
from contextlib import nullcontext
from typing import Any, TypeVar

import orjson
from dbos import DBOS, SetWorkflowID

from loopctl.compact import SummarizingCompactor
from loopctl.durable._common import DurableLoop, EffectNames, with_own_budget
from loopctl.durable._payloads import (
    error_from_dict,
    error_to_dict,
    record_from_dict,
    record_to_dict,
    response_from_dict,
    response_to_dict,
)
from loopctl.engine.config import RunConfig, SessionConfig
from loopctl.engine.events import LoopEvent, Observer
from loopctl.engine.loop import BareLoop, _Cancelled, _race
from loopctl.engine.machine import CallTools, LoopMachine
from loopctl.engine.permission import PermissionCallback
from loopctl.engine.run import Run, ToolCallRecord
from loopctl.errors import LoopError
from loopctl.message import Message, ToolCallPart
from loopctl.providers.base import ModelClient
from loopctl.response import ModelResponse
from loopctl.tool import Tool, ToolRegistry

__all__ = ["CANCEL_POLL_INTERVAL", "MACHINE_EVENT", "DBOSLoop", "StepNames", "cancel_marker_id", "recover"]

CANCEL_POLL_INTERVAL = 1.0
"""Seconds between two looks for a cancel request while a model or tool step runs (each is one read of the
system database; a step that finishes sooner costs none, and each model call looks once before it starts)."""

MACHINE_EVENT = "loopctl.machine"
"""The DBOS event a finished run sets to its machine (``LoopMachine.to_json`` text): the conversation after
the run, for whoever continues it."""

_T = TypeVar("_T")

# Set while a step's body runs in this execution (not replayed): events emitted there reach observers.
_LIVE_STEP: contextvars.ContextVar[bool] = contextvars.ContextVar("loopctl_dbos_live_step", default=False)


class StepNames(EffectNames):
    """The stable names of a loop's DBOS workflow and steps (compatibility data: ``docs/durable.md``).

    ``workflow``: ``<name>.run``; ``start``: ``<name>.start``; ``model``: ``<name>.model``;
    ``summarize``: ``<name>.summarize``; :meth:`tool`: ``<name>.tool.<tool name>``; ``cancel``:
    ``<name>.cancel`` (the workflow a cancel request is).
    """

    __slots__ = ("cancel", "start", "workflow")

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.workflow = f"{name}.run"
        self.start = f"{name}.start"
        self.cancel = f"{name}.cancel"


class DBOSLoop(DurableLoop):
    """A loop whose runs are DBOS workflows (see the module docstring for the mapping and its rules).

    ``client``, ``tools``, ``config``, ``observers`` and ``permission`` are those of
    :class:`~loopctl.engine.BareLoop`. ``name`` prefixes the workflow and step names; it must be the same in
    every process that may recover the loop's runs. The conversation lives in :attr:`machine`; successive
    :meth:`run` calls continue it, as with ``BareLoop``. Build it after ``DBOS(config=...)`` and before
    ``DBOS.launch()``.
    """

    def __init__(
        self,
        client: ModelClient,
        tools: ToolRegistry | Iterable[Tool] = (),
        config: SessionConfig | None = None,
        *,
        name: str,
        observers: Sequence[Observer] = (),
        permission: PermissionCallback | None = None,
        machine: LoopMachine | None = None,
    ) -> None:
        super().__init__(client, tools, config, observers, permission)
        self.names = StepNames(name)
        self.name = name
        self._machine = machine or LoopMachine()
        self._workflow = DBOS.workflow(name=self.names.workflow)(self._make_workflow())
        self._cancel_workflow = DBOS.workflow(name=self.names.cancel)(_cancel_request)

    # --- sessions ------------------------------------------------------------------------------------------

    @property
    def machine(self) -> LoopMachine:
        """The machine holding the conversation (as of the last finished :meth:`run`)."""
        return self._machine

    @property
    def history(self) -> Sequence[Message]:
        """The committed conversation."""
        return self._machine.history

    # --- running -------------------------------------------------------------------------------------------

    async def run(
        self,
        input: str | Message,  # noqa: A002 - BareLoop's name
        config: RunConfig | None = None,
        *,
        workflow_id: str | None = None,
    ) -> Run:
        """Run the loop on ``input`` as one DBOS workflow (id ``workflow_id``, or one DBOS makes up) and
        return its :class:`~loopctl.engine.Run`; the loop's :attr:`machine` then holds the conversation after
        the run. Starting a ``workflow_id`` that already ran returns its recorded run. Errors end the run
        (``run.outcome``) as with ``BareLoop``; a cancelled run (:meth:`cancel`) ends ``CANCELLED`` with the
        coherent prefix of its conversation kept."""
        doc = input if isinstance(input, str) else input.to_dict()
        with SetWorkflowID(workflow_id) if workflow_id is not None else nullcontext():
            handle = await DBOS.start_workflow_async(self._workflow, self._machine.to_json(), doc, config)
        run: Run = await handle.get_result()
        machine = await DBOS.get_event_async(handle.get_workflow_id(), MACHINE_EVENT, timeout_seconds=5)
        if isinstance(machine, str):
            self._machine = LoopMachine.from_json(machine)
        return run

    async def cancel(self, workflow_id: str) -> None:
        """Ask the run ``workflow_id`` to stop, from any process sharing the system database. The run ends
        ``CANCELLED`` as a cancelled ``BareLoop`` run does, keeping the coherent prefix of its conversation:
        at once if a model call or a tool call is running (it is stopped within
        :data:`CANCEL_POLL_INTERVAL` seconds), else before its next model call. The request is itself a tiny
        workflow (id :func:`cancel_marker_id`), so it is durable and asking twice is harmless."""
        with SetWorkflowID(cancel_marker_id(workflow_id)):
            handle = await DBOS.start_workflow_async(self._cancel_workflow)
        await handle.get_result()

    # --- the workflow --------------------------------------------------------------------------------------

    def _make_workflow(self) -> Any:
        loop = self

        async def run_workflow(machine: str, input: str | dict[str, Any], config: RunConfig | None) -> Run:  # noqa: A002
            return await loop._execute(machine, input, config)

        run_workflow.__name__ = run_workflow.__qualname__ = f"run_{self.name.replace('-', '_')}"
        return run_workflow

    async def _execute(self, machine: str, input: str | dict[str, Any], config: RunConfig | None) -> Run:  # noqa: A002
        """The workflow body: a fresh driver over the recorded machine, run to the end."""
        fresh = False

        async def start() -> None:
            nonlocal fresh
            fresh = True

        await DBOS.run_step_async({"name": self.names.start}, start)
        driver = _Driver(self, LoopMachine.from_json(machine), live=fresh)
        message = input if isinstance(input, str) else Message.from_dict(input)
        run = await driver._run(message, config or RunConfig(), None)
        await DBOS.set_event_async(MACHINE_EVENT, driver.machine.to_json())
        return run


class _Driver(BareLoop):
    """BareLoop's driver with each effect a DBOS step; one per workflow execution."""

    def __init__(self, owner: DBOSLoop, machine: LoopMachine, *, live: bool) -> None:
        super().__init__(
            owner.client,
            owner.tools,
            with_own_budget(owner.config),
            observers=owner.observers,
            permission=owner.permission,
            machine=machine,
        )
        self._names = owner.names
        self._live = live  # False while the steps so far were replayed from their records
        self._reserved: dict[str, Any] = {}
        self._cancel_id = cancel_marker_id(DBOS.workflow_id or "")
        self._elapsed = 0.0  # the run's clock: the recorded durations of its steps so far

    def _clock(self) -> float:
        # Inside a step's body: real time (the step records what it measured). In workflow code: the sum of
        # the recorded durations, so a run replayed from its records reads the same durations.
        return time.perf_counter() if _LIVE_STEP.get() else self._elapsed

    def _emit(self, event: LoopEvent) -> None:
        if self._live or _LIVE_STEP.get():
            super()._emit(event)

    async def _cancel_requested(self) -> bool:
        return await DBOS.get_workflow_status_async(self._cancel_id) is not None

    async def _watch_cancel(self, event: asyncio.Event) -> None:
        while not await self._cancel_requested():
            await asyncio.sleep(CANCEL_POLL_INTERVAL)
        event.set()

    async def _cancellable(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """``coro``'s result, or :class:`_Cancelled` once a cancel request is seen (checked every
        :data:`CANCEL_POLL_INTERVAL` seconds while it runs)."""
        event = asyncio.Event()
        watcher = asyncio.ensure_future(self._watch_cancel(event))
        try:
            return await _race(coro, event)
        finally:
            watcher.cancel()

    async def _call_model(self, turn: int, cfg: RunConfig, cancel: asyncio.Event | None, emit: Any) -> ModelResponse:
        ran = False

        async def model_step() -> str:
            nonlocal ran
            ran = True
            token = _LIVE_STEP.set(True)
            try:
                if await self._cancel_requested():
                    return _dumps({"cancelled": True})
                t0 = time.perf_counter()
                response = await self._cancellable(BareLoop._call_model(self, turn, cfg, None, emit))
                return _dumps({"response": response_to_dict(response), "duration": time.perf_counter() - t0})
            except _Cancelled:
                return _dumps({"cancelled": True})
            except LoopError as exc:  # recorded as the step's output, so a replay fails the run the same way
                return _dumps({"error": error_to_dict(exc)})
            finally:
                _LIVE_STEP.reset(token)

        out = orjson.loads(await DBOS.run_step_async({"name": self._names.model}, model_step))
        self._live = ran
        if "cancelled" in out:
            raise _Cancelled
        if "error" in out:
            raise error_from_dict(out["error"])
        self._elapsed += float(out.get("duration", 0.0))
        return response_from_dict(out["response"])

    async def _run_tools(
        self, step: CallTools, cfg: RunConfig, cancel: asyncio.Event | None, emit: Any
    ) -> list[ToolCallRecord]:
        # Step numbers in call order, before any call starts: DBOS numbers steps as they start, and parallel
        # calls would otherwise start in whatever order the concurrency limit lets them.
        self._reserved = {call.id: DBOS.reserve_step() for call in step.calls}
        records = await super()._run_tools(step, cfg, None, emit)
        self._elapsed += max((r.duration for r in records), default=0.0)
        return records

    async def _run_one(self, turn: int, call: ToolCallPart, cfg: RunConfig, emit: Any) -> ToolCallRecord:
        reservation = self._reserved.pop(call.id)

        async def tool_step() -> str:
            token = _LIVE_STEP.set(True)
            try:
                record = await self._cancellable(BareLoop._run_one(self, turn, call, cfg, emit))
                return _dumps(record_to_dict(record))
            except _Cancelled:
                return _dumps({"cancelled": True})
            finally:
                _LIVE_STEP.reset(token)

        out = orjson.loads(await reservation.run_async({"name": self._names.tool(call.name)}, tool_step))
        if "cancelled" in out:
            raise _Cancelled
        return record_from_dict(out)

    async def _summarize(self, compactor: SummarizingCompactor, messages: list[Message]) -> list[Message] | None:
        async def summarize_step() -> str:
            token = _LIVE_STEP.set(True)
            try:
                out = await BareLoop._summarize(self, compactor, messages)
                return _dumps(None if out is None else [m.to_dict() for m in out])
            finally:
                _LIVE_STEP.reset(token)

        data = orjson.loads(await DBOS.run_step_async({"name": self._names.summarize}, summarize_step))
        return None if data is None else [Message.from_dict(m) for m in data]


async def recover(executor_ids: Sequence[str]) -> list[str]:
    """Hand the pending runs of the DBOS executors ``executor_ids`` (workers that died; their
    ``executor_id`` in ``DBOSConfig``) to this process's executor, which resumes each from its last recorded
    step. Returns the workflow ids resumed. For several workers sharing a PostgreSQL system database, where
    no DBOS Conductor watches them (DBOS docs, "Workflow Recovery": each executor recovers only its own
    workflows when it restarts)."""
    pending = await DBOS.list_workflows_async(
        status="PENDING", executor_id=list(executor_ids), load_input=False, load_output=False
    )
    ids = [w.workflow_id for w in pending]
    for workflow_id in ids:
        await DBOS.resume_workflow_async(workflow_id)
    return ids


def cancel_marker_id(workflow_id: str) -> str:
    """The id of the cancel request of the run ``workflow_id``: ``<workflow_id>.cancel``."""
    return f"{workflow_id}.cancel"


async def _cancel_request() -> None:
    """A cancel request: its existence is the request."""


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()
