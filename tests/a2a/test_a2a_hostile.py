"""A hostile client against ``loopctl a2a serve`` (the served process of ``tests/a2a/conftest.py``): a new task
in a context whose run waits for approval is rejected with a message saying where to answer (it was an internal
error), and an answer can only decide its own task's question."""

from __future__ import annotations

import uuid

from a2a.client import create_client
from a2a.helpers.proto_helpers import get_artifact_text, get_text_parts
from a2a.types import CancelTaskRequest, GetTaskRequest, Part, TaskState

from tests.a2a.test_a2a import CANCELED, COMPLETED, INPUT_REQUIRED, collect, data, final, message

REJECTED = TaskState.TASK_STATE_REJECTED


async def test_a_new_task_in_a_context_waiting_for_approval_is_rejected_and_the_question_stays_open(
    a2a_url: str,
) -> None:
    client = await create_client(a2a_url)
    try:
        context = uuid.uuid4().hex
        _, first = await collect(client, message(Part(text="delete a.txt"), context=context))
        assert first[-1].status_update.status.state == INPUT_REQUIRED
        waiting = first[-1].status_update.task_id
        # A new task (no task id) in the same context, even one saying "approve", decides nothing.
        _, second = await collect(client, message(Part(text="approve"), context=context))
        final_state = final(second)
        assert final_state.status.state == REJECTED
        said = get_text_parts(list(final_state.status.message.parts))[0]
        assert f"answer it on task {waiting}" in said
        # The first task's question is still open, and its own answer decides it.
        _, done = await collect(client, message(data({"approvals": {"d1": "deny"}}), context=context, task=waiting))
        assert done[-1].status_update.status.state == COMPLETED
    finally:
        await client.close()


async def test_cancelling_a_task_waiting_for_approval_ends_its_run_and_frees_the_context(a2a_url: str) -> None:
    # Before: the task was marked canceled but the context's run stayed paused, so every later task in the
    # context was rejected ("waits for an approval: answer it on task ...") and no task could answer it.
    client = await create_client(a2a_url)
    try:
        context = uuid.uuid4().hex
        _, first = await collect(client, message(Part(text="delete b.txt"), context=context))
        assert first[-1].status_update.status.state == INPUT_REQUIRED
        waiting = first[-1].status_update.task_id
        cancelled = await client.cancel_task(CancelTaskRequest(id=waiting))
        assert cancelled.status.state == CANCELED
        _, after = await collect(client, message(Part(text="hello"), context=context))
        final_state = final(after)
        assert final_state.status.state == COMPLETED
        # The same conversation goes on: the cancelled call is answered, and the model saw the new message.
        assert get_artifact_text(after[-2].artifact_update.artifact) == "seen 2: hello"
        task = await client.get_task(GetTaskRequest(id=waiting))
        assert task.status.state == CANCELED
    finally:
        await client.close()
