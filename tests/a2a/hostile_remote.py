"""A hostile A2A agent on the ``a2a-sdk``'s own server (its ``DefaultRequestHandler`` and JSON-RPC routes, under
uvicorn): what it sends back is what the message it gets asks for, so the tests can make it send too much.

    python -m tests.a2a.hostile_remote PORT [DESCRIPTION_CHARS]

Messages (the text of the user's message):

- ``big N``: one artifact of ``N`` characters (``"<head>"``, then ``x``, then ``"<tail>"``), then ``completed``;
- ``data N``: one artifact of one data part, ``{"blob": ...}`` with a string of ``N`` characters (``"<head>"``,
  then ``x``, then ``"<tail>"``), then ``completed``;
- ``artifacts N``: ``N`` artifact updates of one short part each, then waits (until cancelled);
- ``status N``: ``N`` ``working`` status updates with a message ``"step i"``, as fast as it can, then
  ``completed`` with the artifact ``"done"``;
- ``resets N``: ``N`` artifact updates of ten parts, each followed by the task itself (no artifacts), then
  ``completed`` with the artifact ``"done"``;
- ``burst N``: ``N`` ``working`` status updates at once, then nothing until ``POST /release`` (at most 60 s),
  then ``completed`` (``"done"``);
- ``late N``: nothing for ``N`` milliseconds, then the task (its first event), then ``working``, then waits
  (until cancelled);
- ``silent``: nothing at all, not even the task, until it is cancelled;
- ``ask``: ``input-required`` (a question the caller cannot answer);
- ``approve``: ``input-required`` asking for an approval, with the data part loopctl's server sends;
- an answer on a task in ``input-required``: nothing at all, until the task is cancelled;
- anything else: the artifact ``"ok"``.

Cancelled tasks are recorded: ``GET /cancelled`` lists their ids. ``POST /release`` ends the silence of a
``burst`` (the next one's, when none waits yet).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

import uvicorn
from a2a.helpers.proto_helpers import get_text_parts
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, Task, TaskState, TaskStatus
from google.protobuf import json_format, struct_pb2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

CANCELLED: list[str] = []
RELEASED = asyncio.Event()
"""Set by ``POST /release``: a ``burst`` waiting in silence completes (and clears it)."""


class Hostile(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id, message = context.task_id, context.context_id, context.message
        assert task_id and context_id and message is not None
        updater = TaskUpdater(event_queue, task_id, context_id)
        words = " ".join(get_text_parts(list(message.parts))).split()
        if context.current_task is None and words[:1] == ["late"]:  # nothing at all for N ms, then as usual
            await asyncio.sleep(int(words[1]) / 1000)
        if context.current_task is None and get_text_parts(list(message.parts)) != ["silent"]:
            status = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)
            await event_queue.enqueue_event(Task(id=task_id, context_id=context_id, status=status, history=[message]))
        if (
            context.current_task is not None
            and context.current_task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        ):
            await asyncio.Event().wait()  # an answer: taken, and nothing said (until the task is cancelled)
        what, n = (words[0], int(words[1])) if len(words) == 2 else ((words or ["ok"])[0], 0)
        if what == "silent":  # nothing at all (not even the task) until cancelled
            await asyncio.Event().wait()
        await updater.start_work()
        if what == "big":
            text = "<head>" + "x" * (n - 12) + "<tail>"
            await updater.add_artifact([Part(text=text)], name="answer", last_chunk=True)
            await updater.complete()
        elif what == "data":
            data = struct_pb2.Value()
            json_format.ParseDict({"blob": "<head>" + "x" * (n - 12) + "<tail>"}, data)
            await updater.add_artifact([Part(data=data)], name="answer", last_chunk=True)
            await updater.complete()
        elif what == "artifacts":
            for i in range(n):
                await updater.add_artifact([Part(text=f"part {i}")], name=f"a{i}", last_chunk=True)
            await asyncio.Event().wait()
        elif what == "status":
            for i in range(n):
                await updater.start_work(updater.new_agent_message([Part(text=f"step {i}")]))
            await updater.add_artifact([Part(text="done")], name="answer", last_chunk=True)
            await updater.complete()
        elif what == "resets":  # n artifacts of 10 parts, each followed by the task without artifacts
            for i in range(n):
                await updater.add_artifact([Part(text=f"p{i}.{j}") for j in range(10)], name=f"a{i}", last_chunk=True)
                status = TaskStatus(state=TaskState.TASK_STATE_WORKING)
                await event_queue.enqueue_event(Task(id=task_id, context_id=context_id, status=status))
            await updater.add_artifact([Part(text="done")], name="answer", last_chunk=True)
            await updater.complete()
        elif what == "burst":  # n status updates at once, then nothing until released, then completed
            for i in range(n):
                await updater.start_work(updater.new_agent_message([Part(text=f"step {i}")]))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(RELEASED.wait(), 60)
            RELEASED.clear()
            await updater.add_artifact([Part(text="done")], name="answer", last_chunk=True)
            await updater.complete()
        elif what == "late":
            await asyncio.Event().wait()
        elif what == "ask":
            await updater.requires_input(updater.new_agent_message([Part(text="Which one?")]))
        elif what == "approve":  # asks as loopctl's server does; the answer is never answered (nor acknowledged)
            item = {"id": "d1", "tool": "delete", "input": {"path": "x"}, "agent": "hostile", "reason": None}
            data = struct_pb2.Value()
            json_format.ParseDict({"approvals": [item]}, data)
            await updater.requires_input(updater.new_agent_message([Part(text="Approve?"), Part(data=data)]))
        else:
            await updater.add_artifact([Part(text="ok")], name="answer", last_chunk=True)
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        CANCELLED.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def app(url: str, description: str = "Sends back more than asked.") -> Starlette:
    card = AgentCard(
        name="hostile",
        description=description,
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text"],
        default_output_modes=["text"],
        skills=[AgentSkill(id="hostile", name="hostile", description="floods", tags=["test"])],
    )
    handler = DefaultRequestHandler(agent_executor=Hostile(), task_store=InMemoryTaskStore(), agent_card=card)

    async def cancelled(request: Request) -> JSONResponse:
        return JSONResponse(CANCELLED)

    async def release(request: Request) -> JSONResponse:
        RELEASED.set()
        return JSONResponse(True)

    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, rpc_url="/"),
        Route("/cancelled", cancelled),
        Route("/release", release, methods=["POST"]),
    ]
    return Starlette(routes=routes)


if __name__ == "__main__":
    port = int(sys.argv[1])
    described = {"description": "d" * int(sys.argv[2])} if len(sys.argv) > 2 else {}  # a card this long
    uvicorn.run(app(f"http://127.0.0.1:{port}/", **described), host="127.0.0.1", port=port, log_level="warning")
