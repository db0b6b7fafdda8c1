"""A hostile client against ``loopctl a2a serve`` (the served process of ``tests/a2a/conftest.py``): a new task
in a context whose run waits for approval is rejected with a message saying where to answer (it was an internal
error), and an answer can only decide its own task's question."""

from __future__ import annotations

import uuid

from a2a.client import create_client
from a2a.helpers.proto_helpers import get_text_parts
from a2a.types import Part, TaskState

from tests.a2a.test_a2a import COMPLETED, INPUT_REQUIRED, collect, data, message

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
        final = second[-1].status_update if second[-1].WhichOneof("payload") == "status_update" else second[-1].task
        assert final.status.state == REJECTED
        said = get_text_parts(list(final.status.message.parts))[0]
        assert f"answer it on task {waiting}" in said
        # The first task's question is still open, and its own answer decides it.
        _, done = await collect(client, message(data({"approvals": {"d1": "deny"}}), context=context, task=waiting))
        assert done[-1].status_update.status.state == COMPLETED
    finally:
        await client.close()
