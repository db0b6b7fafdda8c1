"""A loopctl :class:`~loopctl.agent.Agent` served as an A2A agent, on the official ``a2a-sdk`` (1.x).

:func:`a2a_app` gives a Starlette application: the agent card at ``/.well-known/agent-card.json`` and the
JSON-RPC endpoint (``message/send``, ``message/stream``, ``tasks/get``, ``tasks/list``, ``tasks/cancel``...) at
``/``, both the SDK's own routes over its ``DefaultRequestHandler``; :class:`AgentExecutor` is what runs the
agent for it. ``loopctl a2a serve --agent MODULE:ATTR`` serves one (``docs/a2a.md``).

How A2A maps to loopctl:

- a **context** (``contextId``) is a conversation with the agent: the session of that id in ``store`` (a
  :class:`~loopctl.store.SessionStore`), or, without one, a conversation held in memory (the newest
  :data:`MAX_CONTEXTS`). A context's tasks run one at a time, in order.
- a **task** is one run: ``submitted``, then ``working`` (a status message for each reply that goes on to call
  tools), then ``completed`` with the answer as the artifact ``answer`` (text, or a data part for typed
  output), ``failed`` (the status message says why), ``canceled`` (``tasks/cancel`` cancels the run: what it
  finished is kept), or ``input-required`` when the run paused for approval;
- **approvals**: an ``input-required`` status carries a text part asking, and a data part
  ``{"approvals": [{"id", "tool", "input", "agent", "reason"}]}``. The client answers on the same task with a
  data part ``{"approvals": {"<id>": "approve" | "deny" | {"deny": "<reason>"}}}`` (a call left out is denied),
  or with the text ``approve`` / ``deny`` for all of them; the paused run then goes on, no call repeated.
  Anything else is asked again.
- every status update of a finished run carries ``metadata["loopctl/usage"]``: ``input_tokens``,
  ``output_tokens``, ``requests``, ``tool_calls`` and ``cost`` (USD as a string, ``null`` when unknown), which
  :class:`~loopctl.a2a.A2AAgent` counts in the calling run.
- a W3C ``traceparent`` header makes the run's spans children of the caller's (with ``opentelemetry-api``).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from a2a.helpers.proto_helpers import get_data_parts, get_text_parts
from a2a.server.agent_execution import AgentExecutor as _SDKExecutor
from a2a.server.agent_execution import RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    ListTasksRequest,
    ListTasksResponse,
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from google.protobuf import json_format, struct_pb2
from starlette.applications import Starlette

from loopctl._lazy import LazyModule
from loopctl.agent import Agent
from loopctl.engine.events import TurnFinished
from loopctl.engine.machine import OutcomeKind
from loopctl.engine.permission import Approval, Approve, Deny, PendingApproval
from loopctl.engine.run import Run

if TYPE_CHECKING:
    import loopctl.store

else:  # the annotations' modules, imported when an annotation is read (loopctl._lazy)
    loopctl = LazyModule("loopctl")

__all__ = [
    "CANCELLED_ANSWER",
    "IDLE_TASK_TIMEOUT",
    "MAX_BODY_BYTES",
    "MAX_CONTEXTS",
    "MAX_TASKS",
    "USAGE_KEY",
    "AgentExecutor",
    "BoundedTaskStore",
    "a2a_app",
    "agent_card",
    "decisions_from",
    "usage_of",
]

MAX_BODY_BYTES = 32 * 1024 * 1024
"""The largest request body :func:`a2a_app` reads, by default (32 MiB); a larger one is answered ``413``."""

MAX_TASKS = 1000
"""Tasks :func:`a2a_app`'s default task store holds (:class:`BoundedTaskStore`; the most recently saved)."""

IDLE_TASK_TIMEOUT = 600.0
"""Seconds :func:`a2a_app`'s handler keeps a task waiting in ``input-required`` live in memory, by default; then
it is released, and an answer finds it again in the task store (the SDK's ``interrupted_task_timeout``)."""

MAX_CONTEXTS = 1000
"""Contexts (conversations) held in memory when no store is given; the oldest is dropped first."""

CANCELLED_ANSWER = "Not run: the task was cancelled while it waited for approval."
"""What a call a cancelled ``input-required`` task waited on is answered (the model reads it next time)."""

USAGE_KEY = "loopctl/usage"
"""The metadata key of a finished run's usage on its status updates (see the module docstring)."""

_YES = {"approve", "approved", "yes", "y", "ok", "allow"}
_NO = {"deny", "denied", "no", "n", "refuse", "reject"}


def agent_card(agent: Agent[Any, Any], url: str, *, version: str = "1.0.0") -> AgentCard:
    """The A2A agent card of ``agent`` served at ``url`` (its JSON-RPC endpoint): its name, description, one
    skill, streaming, text in and text or JSON out; ``version`` is the card's version string."""
    description = agent.description or f"The loopctl agent {agent.name}."
    return AgentCard(
        name=agent.name,
        description=description,
        version=version,
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[AgentSkill(id=agent.name, name=agent.name, description=description, tags=["loopctl"])],
        supported_interfaces=[AgentInterface(protocol_binding="JSONRPC", protocol_version="1.0", url=url)],
    )


class AgentExecutor(_SDKExecutor):
    """Runs ``agent`` for the SDK's request handler (see the module docstring): each task a run on the
    conversation of its context, kept in ``store`` or in memory. ``deps``: what the agent's runs get as
    ``deps``. ``task_store``: the SDK handler's task store, read to learn that the task a paused run asked on
    was cancelled (when the handler cancelled it without calling :meth:`cancel`); :func:`a2a_app` passes it."""

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        store: loopctl.store.SessionStore | None = None,
        deps: Any = None,
        task_store: TaskStore | None = None,
    ) -> None:
        from loopctl.store.base import check_store

        check_store(store)
        self.agent = agent
        self.store = store
        self.deps = deps
        self.task_store = task_store
        self._contexts: OrderedDict[str, Any] = OrderedDict()
        self._running: dict[str, asyncio.Event] = {}
        # context id -> the task whose run paused for approval (in this process; the newest MAX_CONTEXTS)
        self._paused: OrderedDict[str, str] = OrderedDict()

    def conversation(self, context_id: str) -> Any:
        """The conversation of the context ``context_id``."""
        if self.store is not None:
            return self.agent.session(context_id, store=self.store, on_busy="wait")
        conv = self._contexts.get(context_id)
        if conv is None:
            conv = self._contexts[context_id] = self.agent.session(on_busy="wait")
        self._contexts.move_to_end(context_id)
        while len(self._contexts) > MAX_CONTEXTS:
            self._contexts.popitem(last=False)
        return conv

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Run the agent on the message of the request ``context`` (or continue its paused run with the
        approvals it gives), putting the task's status updates and artifacts on ``event_queue``."""
        task_id, context_id, message = context.task_id, context.context_id, context.message
        if not task_id or not context_id or message is None:
            return
        updater = TaskUpdater(event_queue, task_id, context_id)
        current = context.current_task
        if current is None:
            status = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)
            await event_queue.enqueue_event(Task(id=task_id, context_id=context_id, status=status, history=[message]))
        try:
            conv = self.conversation(context_id)
        except ValueError as exc:  # a context id that cannot name a session
            await updater.reject(updater.new_agent_message([Part(text=f"The context id cannot be used: {exc}")]))
            return
        prompt: str | None = None
        approvals: dict[str, Approval] | None = None
        waiting = self._paused.get(context_id)
        if current is not None and current.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            if waiting is not None and waiting != task_id:
                # The context's paused run is another task's: this answer cannot decide its calls.
                text = f"Task {task_id} no longer waits for an answer: the context's question is task {waiting}'s."
                await updater.reject(updater.new_agent_message([Part(text=text)]))
                return
            pending = await conv.pending_approvals()
            approvals = decisions_from(message, pending)
            if approvals is None:
                await updater.requires_input(_ask(updater, pending, again=True))
                return
        else:
            if waiting is not None and await self._was_cancelled(waiting, context):
                # The task that asked was cancelled (by a handler that did not call cancel() here): end its run.
                await self._end_paused(conv, context_id)
            if await conv.pending_approvals():
                # A new task while the context's run waits for approval: the question is answered on its own task.
                on = f"task {waiting}" if waiting is not None else "the task that asked"
                text = f"The context {context_id} waits for an approval: answer it on {on} (approve or deny) first."
                await updater.reject(updater.new_agent_message([Part(text=text)]))
                return
            prompt = _text_of(message)
        await updater.start_work()
        with _trace_parent(context.call_context.state.get("headers")):
            run = await self._run(conv, prompt, approvals, updater)
        if run.outcome.kind is OutcomeKind.AWAITING_APPROVAL:
            self._paused[context_id] = task_id
            self._paused.move_to_end(context_id)
            while len(self._paused) > MAX_CONTEXTS:
                self._paused.popitem(last=False)
        elif self._paused.get(context_id) == task_id:
            del self._paused[context_id]
        await self._finish(run, updater)

    async def _run(
        self, conv: Any, prompt: str | None, approvals: Mapping[str, Approval] | None, updater: TaskUpdater
    ) -> Run[Any]:
        deps = self.deps if self.agent.deps_type is not type(None) else None
        async with conv.stream(prompt, deps=deps, approvals=approvals) as stream:
            async for event in stream:
                if isinstance(event, TurnFinished) and event.message.tool_calls():
                    said = event.message.text_content().strip()
                    if said:
                        await updater.start_work(updater.new_agent_message([Part(text=said)]))
            run: Run[Any] = await stream.result()
        return run

    async def _finish(self, run: Run[Any], updater: TaskUpdater) -> None:
        meta = {USAGE_KEY: usage_of(run)}
        kind = run.outcome.kind
        if kind is OutcomeKind.AWAITING_APPROVAL:
            await updater.update_status(
                TaskState.TASK_STATE_INPUT_REQUIRED, _ask(updater, run.pending_approvals), metadata=meta
            )
        elif kind is OutcomeKind.COMPLETED:
            value = run.output
            part = Part(text=value) if isinstance(value, str) else Part(data=_json_value(value))
            await updater.add_artifact([part], name="answer", metadata=meta, last_chunk=True)
            await updater.update_status(TaskState.TASK_STATE_COMPLETED, metadata=meta)
        elif kind is OutcomeKind.CANCELLED:
            await updater.update_status(TaskState.TASK_STATE_CANCELED, metadata=meta)
        else:
            why = run.outcome.error or kind.value
            text = f"The agent {self.agent.name} did not finish its task ({kind.value}): {why}"
            await updater.update_status(
                TaskState.TASK_STATE_FAILED, updater.new_agent_message([Part(text=text)]), metadata=meta
            )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Mark the task of the request ``context`` cancelled on ``event_queue`` (the SDK has cancelled the task
        running :meth:`execute`: the run stops at its next await and keeps what it finished). A task waiting in
        ``input-required`` ends its paused run: the calls it asked about are answered "cancelled" (none runs),
        and the context takes new tasks again."""
        task_id, context_id = context.task_id, context.context_id
        if not task_id or not context_id:
            return
        current = context.current_task
        waiting = self._paused.get(context_id)
        asked = current is not None and current.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        if waiting == task_id or (waiting is None and asked):
            await self._end_paused(self.conversation(context_id), context_id)
        await TaskUpdater(event_queue, task_id, context_id).cancel()

    async def _end_paused(self, conv: Any, context_id: str) -> None:
        """End the paused run of the context ``context_id`` (its task was cancelled): every call it waits on is
        answered with :data:`CANCELLED_ANSWER` and the run ends ``cancelled`` without another model call."""
        pending = await conv.pending_approvals()
        if pending:
            stop = asyncio.Event()
            stop.set()
            deps = self.deps if self.agent.deps_type is not type(None) else None
            await conv.run(approvals={p.id: Deny(CANCELLED_ANSWER) for p in pending}, deps=deps, cancel=stop)
        self._paused.pop(context_id, None)

    async def _was_cancelled(self, task_id: str, context: RequestContext) -> bool:
        """Whether the task ``task_id`` is cancelled, or gone from the task store (dropped as the oldest):
        either way no answer can come on it."""
        if self.task_store is None:
            return False
        try:
            task = await self.task_store.get(task_id, context.call_context)
        except Exception:
            return False
        return task is None or task.status.state == TaskState.TASK_STATE_CANCELED


class BoundedTaskStore(TaskStore):
    """The SDK's in-memory task store, holding the ``max_tasks`` most recently saved tasks (default
    :data:`MAX_TASKS`): saving one more drops the task saved longest ago (a finished one, or one that waited
    in ``input-required`` all that time: its context's paused run then ends as if it was cancelled, at the
    context's next task)."""

    def __init__(self, max_tasks: int = MAX_TASKS) -> None:
        if max_tasks < 1:
            raise ValueError(f"BoundedTaskStore: max_tasks must be 1 or more, not {max_tasks}")
        self.max_tasks = max_tasks
        self._tasks = InMemoryTaskStore()
        self._order: OrderedDict[str, ServerCallContext] = OrderedDict()

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save ``task`` (as the SDK's store does, for the owner of ``context``), dropping the oldest past
        ``max_tasks``."""
        await self._tasks.save(task, context)
        self._order[task.id] = context
        self._order.move_to_end(task.id)
        while len(self._order) > self.max_tasks:
            old, owner = self._order.popitem(last=False)
            await self._tasks.delete(old, owner)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task ``task_id`` of the owner of ``context``, or ``None``."""
        return await self._tasks.get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The tasks ``params`` asks for, of the owner of ``context`` (the SDK's store's listing)."""
        return await self._tasks.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Delete the task ``task_id`` of the owner of ``context``."""
        self._order.pop(task_id, None)
        await self._tasks.delete(task_id, context)


def a2a_app(
    agent: Agent[Any, Any],
    url: str,
    *,
    store: loopctl.store.SessionStore | None = None,
    task_store: TaskStore | None = None,
    deps: Any = None,
    rpc_path: str = "/",
    max_body_bytes: int | None = MAX_BODY_BYTES,
    idle_task_timeout: float | None = IDLE_TASK_TIMEOUT,
) -> Starlette:
    """A Starlette application serving ``agent`` over A2A: its card (:func:`agent_card`, naming ``url`` as
    its endpoint) and the JSON-RPC endpoint at ``rpc_path``. ``store`` keeps the conversations (default: in
    memory); ``task_store`` the A2A tasks (default: a :class:`BoundedTaskStore`, the newest :data:`MAX_TASKS`
    in memory); ``deps`` is what the agent's runs get as ``deps``. ``idle_task_timeout``: seconds a task
    waiting in ``input-required`` is kept live in the SDK's handler (default :data:`IDLE_TASK_TIMEOUT`; then
    an answer finds it in the task store; ``None``: kept until answered; else above 0, or ``ValueError``).
    ``max_body_bytes``: the largest
    request body read (default 32 MiB); a larger one is answered ``413`` with a JSON ``{"error": ...}`` before
    it is read whole, and a body that comes too slowly ``408`` (:class:`~loopctl.server_limits.BodyLimit`);
    ``None``: no limit in the app (a server in front of it applies one, as ``loopctl a2a serve`` does)."""
    from starlette.middleware import Middleware

    from loopctl.server_limits import BodyLimit, ServerLimits

    if idle_task_timeout is not None and not idle_task_timeout > 0:  # nan included
        raise ValueError(f"a2a_app: idle_task_timeout must be seconds above 0 (or None), not {idle_task_timeout!r}")
    card = agent_card(agent, url)
    tasks = task_store or BoundedTaskStore()
    handler = DefaultRequestHandler(
        agent_executor=AgentExecutor(agent, store=store, deps=deps, task_store=tasks),
        task_store=tasks,
        agent_card=card,
        interrupted_task_timeout=idle_task_timeout,
    )
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url=rpc_path)]
    limits = [Middleware(BodyLimit, ServerLimits(max_body_bytes=max_body_bytes))] if max_body_bytes is not None else []
    return Starlette(routes=routes, middleware=limits)


# --- approvals --------------------------------------------------------------------------------------------------


def _ask(updater: TaskUpdater, pending: Sequence[PendingApproval], *, again: bool = False) -> Any:
    listed = "; ".join(f"{p.name} {_json_text(p.input)} (id {p.id})" for p in pending)
    head = "Please answer with approve or deny. " if again else ""
    text = f"{head}Approval needed for: {listed}."
    data = {
        "approvals": [
            {"id": p.id, "tool": p.name, "input": p.input, "agent": p.agent, "reason": p.reason} for p in pending
        ]
    }
    return updater.new_agent_message([Part(text=text), Part(data=_json_value(data))])


def decisions_from(message: Any, pending: Sequence[PendingApproval]) -> dict[str, Approval] | None:
    """The decisions an A2A message gives on ``pending`` (by id), or ``None`` when it gives none: a data part
    ``{"approvals": {id: "approve" | "deny" | {"deny": reason}}}`` (a call it leaves out is denied), or the
    text ``approve`` or ``deny`` alone for every call."""
    ids = [p.id for p in pending]
    for data in get_data_parts(list(message.parts)):
        given = data.get("approvals") if isinstance(data, dict) else None
        if isinstance(given, dict):
            return {i: _one(given.get(i)) for i in ids}
    words = " ".join(get_text_parts(list(message.parts))).strip().lower().rstrip(".!")
    if words in _YES:
        return dict.fromkeys(ids, Approve())
    if words in _NO:
        return {i: Deny("The user denied this tool call.") for i in ids}
    return None


def _one(value: Any) -> Approval:
    if value == "approve" or value is True:
        return Approve()
    if isinstance(value, dict) and isinstance(value.get("deny"), str):
        return Deny(value["deny"])
    return Deny("The user denied this tool call.")


# --- helpers ----------------------------------------------------------------------------------------------------


def usage_of(run: Run[Any]) -> dict[str, Any]:
    """A run's usage as ``metadata["loopctl/usage"]``."""
    cost: Decimal | None = run.cost
    return {
        "input_tokens": run.usage.input_tokens,
        "output_tokens": run.usage.output_tokens,
        "requests": len(run.turns),
        "tool_calls": sum(len(t.tool_calls) for t in run.turns),
        "cost": str(cost) if cost is not None else None,
    }


def _text_of(message: Any) -> str:
    """The prompt a message gives: its text parts, and its data parts as JSON text, in order."""
    out: list[str] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            out.append(part.text)
        elif kind == "data":
            out.append(_json_text(json_format.MessageToDict(part.data)))
        elif kind == "url":
            out.append(f"[file: {part.url}]")
    return "\n".join(out)


def _json_value(value: Any) -> struct_pb2.Value:
    import orjson

    out = struct_pb2.Value()
    json_format.Parse(orjson.dumps(value, default=_default), out)
    return out


def _json_text(value: Any) -> str:
    import orjson

    return orjson.dumps(value, default=_default).decode()


def _default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if dump is not None:
        return dump(mode="json")
    return str(value)


@contextlib.contextmanager
def _trace_parent(headers: Mapping[str, str] | None) -> Iterator[None]:
    """Make the caller's trace context (a ``traceparent`` header) current, when OpenTelemetry is there."""
    if not headers or "traceparent" not in {k.lower() for k in headers}:
        yield
        return
    try:
        from opentelemetry import context, propagate
    except ImportError:
        yield
        return
    token = context.attach(propagate.extract(dict(headers)))
    try:
        yield
    finally:
        context.detach(token)


def new_id() -> str:
    """A fresh id for a message, task or context."""
    return uuid.uuid4().hex
