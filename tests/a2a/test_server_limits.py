"""What a client can make :func:`loopctl.a2a.a2a_app` hold, against the app served by uvicorn on a real socket
and driven by the ``a2a-sdk``'s own client: request bodies are bounded (``413``), the task store keeps the newest
tasks only, and a task waiting for approval that was released from memory, then cancelled or dropped, no longer
holds its context (a new task there runs)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import uvicorn
from a2a.client import create_client
from a2a.helpers.proto_helpers import get_artifact_text
from a2a.types import CancelTaskRequest, GetTaskRequest, ListTasksRequest, Part

from loopctl.a2a.server import CANCELLED_ANSWER, BoundedTaskStore, a2a_app
from tests.a2a.test_a2a import CANCELED, COMPLETED, INPUT_REQUIRED, collect, data, final, message
from tests.mcp.served import agent


@asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[str]:
    """``a2a_app(agent, ...)`` (``tests/mcp/served.py``'s agent) served by uvicorn on a free port; its URL."""
    holder: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await holder["app"](scope, receive, send)

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}/"
        holder["app"] = a2a_app(agent, url, **options)
        yield url
    finally:
        server.should_exit = True
        await task


async def test_a_body_over_the_apps_limit_is_refused_before_it_is_read() -> None:
    # Before: the SDK's JSON-RPC route read a body of any size whole (request.json()).
    async with serving(max_body_bytes=10_000) as url, httpx.AsyncClient() as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x" * 20_000}}
        refused = await http.post(url, json=body)
        assert refused.status_code == 413 and "10000 bytes" in refused.json()["error"]
        small = await http.post(url, json={**body, "params": {"id": "nope"}})
        assert small.status_code == 200 and "error" in small.json()  # the SDK's own answer: no such task


async def test_a_released_waiting_task_can_be_answered_and_once_cancelled_frees_its_context() -> None:
    # Before: a task released from the handler's memory and then cancelled was marked canceled in the store
    # without the executor hearing of it, so the context's run stayed paused and every new task was rejected.
    async with serving(idle_task_timeout=0.2) as url:
        client = await create_client(url)
        try:
            context = uuid.uuid4().hex
            _, first = await collect(client, message(Part(text="delete a.txt"), context=context))
            assert final(first).status.state == INPUT_REQUIRED
            await asyncio.sleep(0.6)  # released
            _, done = await collect(client, message(data({"approvals": {"d1": "approve"}}), context=context,
                                                    task=final(first).task_id))  # fmt: skip
            assert final(done).status.state == COMPLETED

            context = uuid.uuid4().hex
            _, second = await collect(client, message(Part(text="delete b.txt"), context=context))
            waiting = final(second).task_id
            await asyncio.sleep(0.6)
            cancelled = await client.cancel_task(CancelTaskRequest(id=waiting))
            assert cancelled.status.state == CANCELED
            _, after = await collect(client, message(Part(text="hello"), context=context))
            assert final(after).status.state == COMPLETED
            assert get_artifact_text(after[-2].artifact_update.artifact) == "seen 2: hello"
        finally:
            await client.close()


async def test_the_task_store_keeps_the_newest_tasks_and_a_dropped_question_frees_its_context() -> None:
    async with serving(task_store=BoundedTaskStore(3)) as url:
        client = await create_client(url)
        try:
            paused_context = uuid.uuid4().hex
            _, first = await collect(client, message(Part(text="delete c.txt"), context=paused_context))
            asked = final(first).task_id
            ids = []
            for i in range(4):
                _, events = await collect(client, message(Part(text=f"hi {i}"), context=uuid.uuid4().hex))
                ids.append(final(events).task_id)
            listed = await client.list_tasks(ListTasksRequest())
            assert sorted(t.id for t in listed.tasks) == sorted(ids[-3:])
            with pytest.raises(Exception, match=r"(?i)not found"):
                await client.get_task(GetTaskRequest(id=asked))
            # The question was dropped with its task: the context's paused run ends, the new task runs.
            _, after = await collect(client, message(Part(text="hello"), context=paused_context))
            assert final(after).status.state == COMPLETED
            assert get_artifact_text(after[-2].artifact_update.artifact) == "seen 2: hello"
        finally:
            await client.close()


def test_a_task_store_needs_room_for_one() -> None:
    with pytest.raises(ValueError, match="max_tasks"):
        BoundedTaskStore(0)
    assert CANCELLED_ANSWER.startswith("Not run")


@pytest.mark.parametrize("size", [0, -1])
def test_a_body_limit_of_zero_or_less_is_refused_not_read_as_no_limit(size: int) -> None:
    # Before: max_body_bytes=0 was taken as None (no limit in the app at all): a body of any size was read.
    with pytest.raises(ValueError, match=f"max_body_bytes must be a positive number, not {size}"):
        a2a_app(agent, "http://127.0.0.1:1/", max_body_bytes=size)


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan")])
def test_an_idle_task_timeout_not_above_zero_is_refused_by_its_name(timeout: float) -> None:
    # Before: 0 and below were refused by the SDK under its own name (interrupted_task_timeout), nan not at all.
    expected = rf"a2a_app: idle_task_timeout must be seconds above 0 \(or None\), not {timeout}"
    with pytest.raises(ValueError, match=expected):
        a2a_app(agent, "http://127.0.0.1:1/", idle_task_timeout=timeout)
