"""pydantic-ai's durable integrations on the workload of bench_durable.py (a module of its own: Temporal's
sandbox re-imports the module a workflow is defined in, which cannot be a script's ``__main__``).

The agent answers from a ``FunctionModel``: ``TURNS`` replies with one ``echo`` tool call (a 200-character
argument the tool returns), then ``done``, the reply derived from the number of replies so far.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

PAYLOAD = ("The quick brown fox jumps over the lazy dog. " * 5)[:200]
TURNS = int(os.environ.get("BENCH_DURABLE_TURNS", "50"))
UNLIMITED = UsageLimits(request_limit=None)  # pydantic-ai stops at 50 requests by default


def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The scripted model: ``TURNS`` tool calls, then the answer."""
    n = sum(1 for m in messages if isinstance(m, ModelResponse))
    if n < TURNS:
        return ModelResponse(parts=[ToolCallPart("echo", {"text": PAYLOAD}, tool_call_id=f"call-{n}")])
    return ModelResponse(parts=[TextPart("done")])


def dbos_agent(wrap_tool: bool) -> tuple[Agent[None, str], Any]:
    """An agent with ``DBOSDurability`` and the workflow running it. ``wrap_tool``: make the tool a DBOS step
    (pydantic-ai leaves function tools unrecorded unless the user does this), for the same durability as a
    loopctl run, where every tool call is a step."""
    from dbos import DBOS
    from pydantic_ai.durable_exec.dbos import DBOSDurability

    agent: Agent[None, str] = Agent(FunctionModel(reply), name="pai_bench", capabilities=[DBOSDurability()])

    def echo(text: str) -> str:
        """Return the text."""
        return text

    agent.tool_plain(DBOS.step(name="pai_bench.echo")(echo) if wrap_tool else echo)

    @DBOS.workflow(name="pai_bench.run")
    async def run(prompt: str) -> str:
        result = await agent.run(prompt, usage_limits=UNLIMITED)
        return result.output

    return agent, run


try:  # the Temporal side is defined at import time, as Temporal's sandbox re-imports this module
    from pydantic_ai.durable_exec.temporal import PydanticAIWorkflow, TemporalDurability
    from temporalio import workflow

    temporal_agent: Agent[None, str] = Agent(
        FunctionModel(reply), name="pai_bench_t", capabilities=[TemporalDurability()]
    )

    @temporal_agent.tool_plain
    def echo(text: str) -> str:
        """Return the text."""
        return text

    @workflow.defn(name="pai_bench.workflow")
    class PeerWorkflow(PydanticAIWorkflow):
        """Runs the agent once."""

        __pydantic_ai_agents__ = (temporal_agent,)

        @workflow.run
        async def run(self, prompt: str) -> str:
            """Run the agent on ``prompt``."""
            result = await temporal_agent.run(prompt, usage_limits=UNLIMITED)
            return result.output

except ImportError:  # pydantic-ai or temporalio missing: bench_durable.py says so and skips these cases
    pass
