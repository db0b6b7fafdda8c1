"""The servers ``bench_web.py`` measures, one per process (``uvicorn --factory bench._web_apps:make_app``).

``BENCH_APP`` picks the app: ``loopctl-agui`` (``agent.to_ag_ui()``), ``loopctl-aisdk`` (``agent.to_ai_sdk()``)
or ``pydantic-agui`` (pydantic-ai's ``AGUIAdapter.dispatch_request`` in a Starlette route). Each serves an agent without tools whose model
streams ``BENCH_DELTAS`` text deltas (``"word "``), yielding to the event loop after each as a network
stream does, and ends: the same scripted model in both
frameworks (loopctl: a ``ModelClient`` emitting stream events; pydantic-ai: a ``FunctionModel`` stream
function), so what is measured is the framework's run and the protocol encoding over SSE.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

WORD = "word "


def _deltas() -> int:
    return int(os.environ.get("BENCH_DELTAS", "200"))


def loopctl_agent() -> Any:
    from loopctl import Agent
    from loopctl.message import Message, TextPart
    from loopctl.response import ModelResponse, StopReason, Usage
    from loopctl.stream import PartFinished, PartStarted, ResponseFinished, ResponseStarted, TextDelta, UsageReported

    n = _deltas()
    usage = Usage(input_tokens=10, output_tokens=n)
    reply = ModelResponse(Message.assistant(WORD * n), usage, StopReason.END_TURN, model="scripted")

    class Streaming:
        provider = "scripted"
        model = "scripted"

        async def generate(self, request: Any, *, stream: bool = True, on_event: Any = None) -> Any:
            if stream and on_event is not None:
                on_event(ResponseStarted(None, "scripted"))
                on_event(PartStarted(0, TextPart(text="")))
                for _ in range(n):
                    on_event(TextDelta(0, WORD))
                    await asyncio.sleep(0)  # a provider's stream arrives chunk by chunk
                on_event(PartFinished(0))
                on_event(UsageReported(usage))
                on_event(ResponseFinished(StopReason.END_TURN))
            return reply

        def price_usage(self, usage: Any, model: Any) -> None:
            return None

        async def aclose(self) -> None:
            return None

    return Agent(Streaming(), name="bench")  # type: ignore[arg-type]


def pydantic_agent() -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    n = _deltas()

    async def stream(messages: Any, info: AgentInfo) -> AsyncIterator[str]:
        for _ in range(n):
            yield WORD
            await asyncio.sleep(0)

    return Agent(FunctionModel(stream_function=stream), name="bench")


def make_app() -> Any:
    which = os.environ.get("BENCH_APP", "loopctl-agui")
    if which == "loopctl-agui":
        return loopctl_agent().to_ag_ui()
    if which == "loopctl-aisdk":
        return loopctl_agent().to_ai_sdk()
    if which == "pydantic-agui":
        from pydantic_ai.ui.ag_ui import AGUIAdapter
        from starlette.applications import Starlette
        from starlette.routing import Route

        agent = pydantic_agent()

        async def run(request: Any) -> Any:  # its documented Starlette/FastAPI endpoint
            return await AGUIAdapter.dispatch_request(request, agent=agent)

        return Starlette(routes=[Route("/", run, methods=["POST"])])
    raise ValueError(f"unknown BENCH_APP {which!r}")
