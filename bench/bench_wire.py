#!/usr/bin/env python3
"""The agent loop over real HTTP: loopctl against pydantic-ai, the OpenAI Agents SDK and LangGraph, each
through its usual OpenAI (or Anthropic) client, and two floors, measured in one run against one local server.

The server (``bench/wire_server.py``) runs in its own process and derives each reply from the request, so it
holds no state: before turn N a streamed call of the ``echo`` tool (a 200-character argument the tool
returns), then a streamed final text. The history grows to about 2N messages. Every framework streams.

Drivers (OpenAI Chat Completions format):

- ``limit``: a hand-written loop on httpx2 + orjson, no SDK (the cost of the bytes: dump the history, send,
  read the SSE lines);
- ``openai_sdk``: a hand-written loop on the raw ``openai`` SDK (``chat.completions.create(stream=True)``);
- ``loopctl``: ``BareLoop`` + ``OpenAIChatClient``;
- ``pydantic_ai``: ``Agent`` + ``OpenAIChatModel`` (``run_stream``... through ``iter``, streaming each
  model request);
- ``openai_agents``: ``Runner.run_streamed`` + ``OpenAIChatCompletionsModel``;
- ``langgraph``: ``create_react_agent`` + ``langchain_openai.ChatOpenAI(streaming=True)``.

Anthropic Messages format: ``anthropic_limit`` (httpx2 + orjson), ``anthropic_sdk`` (raw ``anthropic``
``messages.create(stream=True)``), ``loopctl_anthropic`` (``AnthropicClient``) and ``pydantic_ai_anthropic``
(``AnthropicModel``).

OpenAI Responses format, with the stateful modes (``--stateful`` runs only these): ``responses_limit``
(httpx2 + orjson, the whole input every call), ``responses_limit_ws`` (``websockets`` by hand, one connection,
each call only the new input and ``previous_response_id``), ``loopctl_responses`` (``OpenAIResponsesClient``),
``loopctl_responses_chain`` (``OpenAIResponsesClient(stateful=True)``: ``previous_response_id`` over HTTP),
``loopctl_responses_ws`` (``OpenAIResponsesWebSocketClient``), ``openai_agents_responses`` (the Agents SDK's
``OpenAIResponsesModel`` over HTTP) and ``openai_agents_ws`` (its WebSocket transport with
``auto_previous_response_id=True``, the SDK's stateful mode). For these the bytes each call sends matter as
much as the time: the server counts them (an HTTP request's head and body, a WebSocket message's frames).

Reported: ms per model call (wall / calls) at each N, bytes sent per model call, each driver's ratio to the
limit, loopctl's ratio to
each peer, the mean time of a call over the first and the last 10% of the calls of the run (from the
server's arrival times: is a call at the end as cheap as one at the start?), and C(K): K concurrent W(5)
runs on one event loop, one client shared, wall time. Each measurement is a fresh process after a W(2)
warm-up; peers whose projected time at a large N exceeds ``--max-run-s`` are not run there (said in the
output). Telemetry is off everywhere.

    python3 make.py bench bench/bench_wire.py
    .venv-bench/bin/python bench/bench_wire.py [--ns 10,100,300,1000] [--k 200] [--drivers loopctl,limit]
    .venv-bench/bin/python bench/bench_wire.py --stateful [--smoke]   # the Responses modes; --smoke: tiny sizes
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# LOOPCTL_SRC: another checkout's src folder, for the "loopctl@before" driver (--before-src): measured in the
# same run as this checkout, against the same server.
sys.path.insert(0, os.environ.get("LOOPCTL_SRC") or str(HERE.parent / "src"))

import _smoke  # noqa: E402  (bench/, the script's folder, is on the path)

for _name, _value in {
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGSMITH_OTEL_ENABLED": "false",
    "OPENAI_AGENTS_DISABLE_TRACING": "1",
    "LOGFIRE_IGNORE_NO_CONFIG": "1",
}.items():
    os.environ.setdefault(_name, _value)

PAYLOAD = ("The quick brown fox jumps over the lazy dog. " * 5)[:200]
FINAL = "done"
SYSTEM = "You are a test agent."
KEY = "sk-bench-not-used"
TOOL_CALLS = 0
RunOnce = Callable[[], Awaitable[str]]

OPENAI_DRIVERS = ["limit", "openai_sdk", "loopctl", "pydantic_ai", "openai_agents", "langgraph"]
ANTHROPIC_DRIVERS = ["anthropic_limit", "anthropic_sdk", "loopctl_anthropic", "pydantic_ai_anthropic"]

RESPONSES_DRIVERS = [
    "responses_limit",
    "responses_limit_ws",
    "loopctl_responses",
    "loopctl_responses_chain",
    "loopctl_responses_ws",
    "openai_agents_responses",
    "openai_agents_ws",
]
STATEFUL = {"responses_limit_ws", "loopctl_responses_chain", "loopctl_responses_ws", "openai_agents_ws"}

# The modules a driver imports beyond loopctl's dev install: without them it is skipped (said in the output).
NEEDS = {
    "pydantic_ai": ("pydantic_ai",),
    "pydantic_ai_anthropic": ("pydantic_ai",),
    "openai_agents": ("agents",),
    "openai_agents_responses": ("agents",),
    "openai_agents_ws": ("agents", "websockets"),
    "langgraph": ("langgraph", "langchain_openai"),
}
LIMIT_OF = (
    dict.fromkeys([*OPENAI_DRIVERS, "loopctl@before"], "limit")
    | dict.fromkeys(ANTHROPIC_DRIVERS, "anthropic_limit")
    | {d: "responses_limit_ws" if d in STATEFUL else "responses_limit" for d in RESPONSES_DRIVERS}
)
BEFORE_SRC = ""


def _echo_count() -> None:
    global TOOL_CALLS
    TOOL_CALLS += 1


ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


# --- the floors ---------------------------------------------------------------------------------------------------


def setup_limit(n: int, base: str) -> RunOnce:
    """Chat Completions by hand: httpx2 and orjson, the history a list of dicts, SSE read line by line."""
    import httpx2
    import orjson

    http = httpx2.AsyncClient(limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=100), timeout=600)
    url = f"{base}/v1/chat/completions"
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    tools = [{"type": "function", "function": {"name": "echo", "description": "Echo the input text back.",
                                               "parameters": ECHO_SCHEMA}}]  # fmt: skip

    async def run_once() -> str:
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "go"}]
        while True:
            body = {"model": f"w{n}", "messages": messages, "tools": tools, "stream": True,
                    "stream_options": {"include_usage": True}}  # fmt: skip
            text: list[str] = []
            calls: dict[int, dict[str, Any]] = {}
            async with http.stream("POST", url, content=orjson.dumps(body), headers=headers) as r:
                buf = b""
                async for chunk in r.aiter_bytes():
                    buf += chunk
                    *events, buf = buf.split(b"\n\n")
                    for event in events:
                        data = event.removeprefix(b"data: ")
                        if data == b"[DONE]":
                            continue
                        for choice in orjson.loads(data)["choices"]:
                            delta = choice["delta"]
                            if delta.get("content"):
                                text.append(delta["content"])
                            for tc in delta.get("tool_calls") or ():
                                call = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
                                call["id"] = tc.get("id") or call["id"]
                                fn = tc.get("function") or {}
                                call["name"] = fn.get("name") or call["name"]
                                call["arguments"] += fn.get("arguments") or ""
            if not calls:
                return "".join(text)
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls.values()]})  # fmt: skip
            for c in calls.values():
                _echo_count()
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": orjson.loads(c["arguments"])["text"]})

    return run_once


def setup_openai_sdk(n: int, base: str) -> RunOnce:
    """Chat Completions by hand on the raw openai SDK (its typed request and stream)."""
    import openai

    client = openai.AsyncOpenAI(api_key=KEY, base_url=f"{base}/v1", max_retries=0)
    tools: Any = [{"type": "function", "function": {"name": "echo", "description": "Echo the input text back.",
                                                    "parameters": ECHO_SCHEMA}}]  # fmt: skip

    async def run_once() -> str:
        messages: list[Any] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "go"}]
        while True:
            stream = await client.chat.completions.create(
                model=f"w{n}", messages=messages, tools=tools, stream=True, stream_options={"include_usage": True}
            )
            text: list[str] = []
            calls: dict[int, dict[str, Any]] = {}
            async for chunk in stream:
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta.content:
                        text.append(delta.content)
                    for tc in delta.tool_calls or ():
                        call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                        call["id"] = tc.id or call["id"]
                        if tc.function:
                            call["name"] = tc.function.name or call["name"]
                            call["arguments"] += tc.function.arguments or ""
            if not calls:
                return "".join(text)
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls.values()]})  # fmt: skip
            for c in calls.values():
                _echo_count()
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": json.loads(c["arguments"])["text"]})

    return run_once


def setup_anthropic_limit(n: int, base: str) -> RunOnce:
    """Anthropic Messages by hand: httpx2 and orjson."""
    import httpx2
    import orjson

    http = httpx2.AsyncClient(limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=100), timeout=600)
    url = f"{base}/v1/messages"
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "content-type": "application/json"}
    tools = [{"name": "echo", "description": "Echo the input text back.", "input_schema": ECHO_SCHEMA}]

    async def run_once() -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        while True:
            body = {"model": f"w{n}", "max_tokens": 1024, "system": SYSTEM, "messages": messages, "tools": tools,
                    "stream": True}  # fmt: skip
            blocks: dict[int, dict[str, Any]] = {}
            args: dict[int, str] = {}
            async with http.stream("POST", url, content=orjson.dumps(body), headers=headers) as r:
                buf = b""
                async for chunk in r.aiter_bytes():
                    buf += chunk
                    *events, buf = buf.split(b"\n\n")
                    for event in events:
                        data = orjson.loads(event.split(b"data: ", 1)[1])
                        kind = data["type"]
                        if kind == "content_block_start":
                            blocks[data["index"]] = dict(data["content_block"])
                        elif kind == "content_block_delta":
                            d = data["delta"]
                            if d["type"] == "text_delta":
                                blocks[data["index"]]["text"] += d["text"]
                            elif d["type"] == "input_json_delta":
                                args[data["index"]] = args.get(data["index"], "") + d["partial_json"]
            for i, raw in args.items():
                blocks[i]["input"] = orjson.loads(raw)
            content = [blocks[i] for i in sorted(blocks)]
            uses = [b for b in content if b["type"] == "tool_use"]
            if not uses:
                return "".join(b["text"] for b in content if b["type"] == "text")
            messages.append({"role": "assistant", "content": content})
            results = []
            for u in uses:
                _echo_count()
                results.append({"type": "tool_result", "tool_use_id": u["id"], "content": u["input"]["text"]})
            messages.append({"role": "user", "content": results})

    return run_once


def setup_anthropic_sdk(n: int, base: str) -> RunOnce:
    """Anthropic Messages by hand on the raw anthropic SDK (its typed request and stream)."""
    import anthropic

    client = anthropic.AsyncAnthropic(api_key=KEY, base_url=base, max_retries=0)
    tools: Any = [{"name": "echo", "description": "Echo the input text back.", "input_schema": ECHO_SCHEMA}]

    async def run_once() -> str:
        messages: list[Any] = [{"role": "user", "content": "go"}]
        while True:
            stream = await client.messages.create(
                model=f"w{n}", max_tokens=1024, system=SYSTEM, messages=messages, tools=tools, stream=True
            )
            blocks: dict[int, dict[str, Any]] = {}
            args: dict[int, str] = {}
            async for event in stream:
                if event.type == "content_block_start":
                    blocks[event.index] = event.content_block.model_dump()
                elif event.type == "content_block_delta":
                    if event.delta.type == "text_delta":
                        blocks[event.index]["text"] += event.delta.text
                    elif event.delta.type == "input_json_delta":
                        args[event.index] = args.get(event.index, "") + event.delta.partial_json
            for i, raw in args.items():
                blocks[i]["input"] = json.loads(raw)
            content = [{k: v for k, v in blocks[i].items() if v is not None} for i in sorted(blocks)]
            uses = [b for b in content if b["type"] == "tool_use"]
            if not uses:
                return "".join(b["text"] for b in content if b["type"] == "text")
            messages.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": u["id"], "name": u["name"], "input": u["input"]} for u in uses]})  # fmt: skip
            results = []
            for u in uses:
                _echo_count()
                results.append({"type": "tool_result", "tool_use_id": u["id"], "content": u["input"]["text"]})
            messages.append({"role": "user", "content": results})

    return run_once


RESPONSES_TOOLS = [{"type": "function", "name": "echo", "description": "Echo the input text back.",
                    "parameters": ECHO_SCHEMA, "strict": False}]  # fmt: skip


def _responses_turn(output: list[dict[str, Any]], items: list[dict[str, Any]]) -> str | None:
    """After a Responses reply's ``output``: its text when it is the last one, else ``None`` with the tool
    results appended to ``items``."""
    calls = [o for o in output if o["type"] == "function_call"]
    if not calls:
        return "".join(c["text"] for o in output if o["type"] == "message" for c in o["content"])
    for c in calls:
        _echo_count()
        items.append({"type": "function_call_output", "call_id": c["call_id"],
                      "output": json.loads(c["arguments"])["text"]})  # fmt: skip
    return None


def setup_responses_limit(n: int, base: str) -> RunOnce:
    """Responses by hand: httpx2 and orjson, the whole input every call, SSE read until response.completed."""
    import httpx2
    import orjson

    http = httpx2.AsyncClient(limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=100), timeout=600)
    url = f"{base}/v1/responses"
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}

    async def run_once() -> str:
        items: list[dict[str, Any]] = [{"role": "developer", "content": SYSTEM}, {"role": "user", "content": "go"}]
        while True:
            body = {"model": f"w{n}", "input": items, "tools": RESPONSES_TOOLS, "stream": True}
            done: dict[str, Any] = {}
            async with http.stream("POST", url, content=orjson.dumps(body), headers=headers) as r:
                buf = b""
                async for chunk in r.aiter_bytes():
                    buf += chunk
                    *events, buf = buf.split(b"\n\n")
                    for event in events:
                        data = orjson.loads(event.split(b"data: ", 1)[1])
                        if data["type"] == "response.completed":
                            done = data["response"]
            items.extend(done["output"])
            text = _responses_turn(done["output"], items)
            if text is not None:
                return text

    return run_once


def setup_responses_limit_ws(n: int, base: str) -> RunOnce:
    """The Responses WebSocket mode by hand on ``websockets``: one connection, each call a ``response.create``
    with only the new input and ``previous_response_id``."""
    import orjson
    from websockets.asyncio.client import connect

    url = base.replace("http://", "ws://") + "/v1/responses"
    sockets: list[Any] = []

    async def run_once() -> str:
        if not sockets:
            sockets.append(await connect(url, additional_headers={"authorization": f"Bearer {KEY}"}, max_size=None))
        ws = sockets[0]
        new: list[dict[str, Any]] = [{"role": "developer", "content": SYSTEM}, {"role": "user", "content": "go"}]
        previous: str | None = None
        while True:
            frame: dict[str, Any] = {"type": "response.create", "model": f"w{n}", "input": new,
                                     "tools": RESPONSES_TOOLS}  # fmt: skip
            if previous is not None:
                frame["previous_response_id"] = previous
            await ws.send(orjson.dumps(frame).decode())
            while True:
                data = orjson.loads(await ws.recv())
                if data["type"] == "response.completed":
                    done = data["response"]
                    break
            previous, new = done["id"], []
            text = _responses_turn(done["output"], new)
            if text is not None:
                return text

    return run_once


# --- loopctl ------------------------------------------------------------------------------------------------------


def _loopctl(client: Any) -> RunOnce:
    from loopctl.engine import BareLoop, RunConfig, SessionConfig
    from loopctl.tool import tool

    @tool
    async def echo(text: str) -> str:
        """Echo the input text back.

        Args:
            text: the text
        """
        _echo_count()
        return text

    # A 1M-token window keeps compaction out of a workload the peers run without any; the server calls echo
    # with the same input every turn, so loop detection (which the peers do not have) is off.
    config = SessionConfig(system_prompt=SYSTEM, context_window=1_000_000)
    run_config = RunConfig(max_turns=100_000, stream=True, max_retries=0, loop_detection=None)

    async def run_once() -> str:
        run = await BareLoop(client, [echo], config).run("go", run_config)
        assert run.outcome.kind == "completed", run.outcome
        return run.output or ""

    return run_once


def setup_loopctl(n: int, base: str) -> RunOnce:
    """loopctl's BareLoop through OpenAIChatClient."""
    from loopctl.transport import OpenAIChatClient

    return _loopctl(OpenAIChatClient(f"w{n}", api_key=KEY, base_url=f"{base}/v1"))


def setup_loopctl_anthropic(n: int, base: str) -> RunOnce:
    """loopctl's BareLoop through AnthropicClient."""
    from loopctl.transport import AnthropicClient

    return _loopctl(AnthropicClient(f"w{n}", api_key=KEY, base_url=base))


def setup_loopctl_responses(n: int, base: str) -> RunOnce:
    """loopctl's BareLoop through OpenAIResponsesClient: the whole conversation every call."""
    from loopctl.transport import OpenAIResponsesClient

    return _loopctl(OpenAIResponsesClient(f"w{n}", api_key=KEY, base_url=f"{base}/v1"))


def setup_loopctl_responses_chain(n: int, base: str) -> RunOnce:
    """loopctl's BareLoop through OpenAIResponsesClient(stateful=True): previous_response_id over HTTP."""
    from loopctl.transport import OpenAIResponsesClient

    return _loopctl(OpenAIResponsesClient(f"w{n}", api_key=KEY, base_url=f"{base}/v1", stateful=True))


def setup_loopctl_responses_ws(n: int, base: str) -> RunOnce:
    """loopctl's BareLoop through OpenAIResponsesWebSocketClient (one connection, previous_response_id)."""
    from loopctl.transport import OpenAIResponsesWebSocketClient

    return _loopctl(OpenAIResponsesWebSocketClient(f"w{n}", api_key=KEY, base_url=f"{base}/v1"))


# --- the peers ------------------------------------------------------------------------------------------------------


def _pydantic_ai(model: Any) -> RunOnce:
    from pydantic_ai import Agent
    from pydantic_ai.usage import UsageLimits

    agent = Agent(model, instructions=SYSTEM)

    @agent.tool_plain
    async def echo(text: str) -> str:
        """Echo the input text back."""
        _echo_count()
        return text

    limits = UsageLimits(request_limit=None)

    async def run_once() -> str:
        # Each model request streamed (agent.iter + node.stream), tool calls run by the graph.
        async with agent.iter("go", usage_limits=limits) as run:
            async for node in run:
                if Agent.is_model_request_node(node):
                    async with node.stream(run.ctx) as events:
                        async for _ in events:
                            pass
        assert run.result is not None
        return str(run.result.output)

    return run_once


def setup_pydantic_ai(n: int, base: str) -> RunOnce:
    """pydantic-ai: Agent + OpenAIChatModel."""
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    return _pydantic_ai(OpenAIChatModel(f"w{n}", provider=OpenAIProvider(base_url=f"{base}/v1", api_key=KEY)))


def setup_pydantic_ai_anthropic(n: int, base: str) -> RunOnce:
    """pydantic-ai: Agent + AnthropicModel."""
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    return _pydantic_ai(AnthropicModel(f"w{n}", provider=AnthropicProvider(base_url=base, api_key=KEY)))


def setup_openai_agents(n: int, base: str) -> RunOnce:
    """The OpenAI Agents SDK: Runner.run_streamed + OpenAIChatCompletionsModel."""
    import openai
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    client = openai.AsyncOpenAI(api_key=KEY, base_url=f"{base}/v1", max_retries=0)

    @function_tool
    async def echo(text: str) -> str:
        """Echo the input text back."""
        _echo_count()
        return text

    model = OpenAIChatCompletionsModel(model=f"w{n}", openai_client=client)
    cfg = RunConfig(tracing_disabled=True)

    async def run_once() -> str:
        # One Agent per run: a shared one makes concurrent runs compare tool lists with each other
        # (see ../shared/bench/anchors_overhead.py).
        agent = Agent(name="bench", instructions=SYSTEM, model=model, tools=[echo])
        result = Runner.run_streamed(agent, "go", max_turns=n + 5, run_config=cfg)
        async for _ in result.stream_events():
            pass
        return str(result.final_output)

    return run_once


def _openai_agents_responses(n: int, base: str, *, websocket: bool) -> RunOnce:
    from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
    from agents.models.multi_provider import MultiProvider

    set_tracing_disabled(True)
    # The SDK's own wiring of the WebSocket transport (what responses_websocket_session() builds): one provider,
    # so one connection, shared by the runs.
    provider = MultiProvider(openai_api_key=KEY, openai_base_url=f"{base}/v1", openai_use_responses=True,
                             openai_use_responses_websocket=websocket)  # fmt: skip
    cfg = RunConfig(model_provider=provider, tracing_disabled=True)

    @function_tool
    async def echo(text: str) -> str:
        """Echo the input text back."""
        _echo_count()
        return text

    async def run_once() -> str:
        agent = Agent(name="bench", instructions=SYSTEM, model=f"w{n}", tools=[echo])
        result = Runner.run_streamed(agent, "go", max_turns=n + 5, run_config=cfg, auto_previous_response_id=websocket)
        async for _ in result.stream_events():
            pass
        return str(result.final_output)

    return run_once


def setup_openai_agents_responses(n: int, base: str) -> RunOnce:
    """The OpenAI Agents SDK: Runner.run_streamed + OpenAIResponsesModel over HTTP (the whole input)."""
    return _openai_agents_responses(n, base, websocket=False)


def setup_openai_agents_ws(n: int, base: str) -> RunOnce:
    """The OpenAI Agents SDK's WebSocket transport with auto_previous_response_id=True."""
    return _openai_agents_responses(n, base, websocket=True)


def setup_langgraph(n: int, base: str) -> RunOnce:
    """LangGraph: create_react_agent + langchain_openai.ChatOpenAI(streaming=True)."""
    import warnings

    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    warnings.filterwarnings("ignore")
    from langgraph.prebuilt import create_react_agent

    llm = ChatOpenAI(model=f"w{n}", base_url=f"{base}/v1", api_key=KEY, streaming=True, max_retries=0)  # type: ignore[arg-type]

    @tool
    async def echo(text: str) -> str:
        """Echo the input text back."""
        _echo_count()
        return text

    graph = create_react_agent(llm, [echo], prompt=SYSTEM)
    config: Any = {"recursion_limit": 2 * n + 10}

    async def run_once() -> str:
        r = await graph.ainvoke({"messages": [("user", "go")]}, config=config)
        return str(r["messages"][-1].content)

    return run_once


SETUP: dict[str, Callable[[int, str], RunOnce]] = {
    "limit": setup_limit,
    "openai_sdk": setup_openai_sdk,
    "loopctl": setup_loopctl,
    "loopctl@before": setup_loopctl,  # another checkout's loopctl (LOOPCTL_SRC)
    "pydantic_ai": setup_pydantic_ai,
    "openai_agents": setup_openai_agents,
    "langgraph": setup_langgraph,
    "anthropic_limit": setup_anthropic_limit,
    "anthropic_sdk": setup_anthropic_sdk,
    "loopctl_anthropic": setup_loopctl_anthropic,
    "pydantic_ai_anthropic": setup_pydantic_ai_anthropic,
    "responses_limit": setup_responses_limit,
    "responses_limit_ws": setup_responses_limit_ws,
    "loopctl_responses": setup_loopctl_responses,
    "loopctl_responses_chain": setup_loopctl_responses_chain,
    "loopctl_responses_ws": setup_loopctl_responses_ws,
    "openai_agents_responses": setup_openai_agents_responses,
    "openai_agents_ws": setup_openai_agents_ws,
}


# --- worker (a fresh process per measurement) --------------------------------------------------------------------


def _marks(base: str) -> list[float]:
    with urllib.request.urlopen(f"{base}/_marks", data=b"{}") as r:  # a POST: the server reads one body per request
        marks: list[float] = json.loads(r.read())
        return marks


def _sizes(base: str) -> list[int]:
    """The bytes each model request took on the wire since the last call (and forget them)."""
    with urllib.request.urlopen(f"{base}/_bytes", data=b"{}") as r:
        sizes: list[int] = json.loads(r.read())
        return sizes


async def _series(
    driver: str, base: str, ns: list[int], max_run_s: float, batch_runs: int = 0
) -> list[dict[str, Any]]:
    """W(n) for each n in this one process (after a W(2) warm-up); a size whose projected time from the
    previous one (per-call cost growing linearly with n) is over ``max_run_s`` is skipped, and so are the
    larger ones. ``batch_runs``: timed runs per size (0: enough for about 100 model calls: at N=10 nine runs, whose
    median holds where two runs' swung by half with the machine)."""
    warm = SETUP[driver](2, base)
    assert await warm() == FINAL
    rows: list[dict[str, Any]] = []
    for n in ns:
        if rows:
            prev = rows[-1]
            projected = prev["wall"] / prev["calls"] * (n + 1) / (prev["n"] + 1) * (n + 1)
            if projected > max_run_s:
                rows.append({"driver": driver, "n": n, "skipped": projected})
                break
        run_once = SETUP[driver](n, base)
        batch = batch_runs or max(1, 100 // (n + 1))
        if n <= 100:  # a fresh client's first run opens its connection and fills its caches: not timed
            assert await run_once() == FINAL
        _marks(base)
        _sizes(base)
        c0 = TOOL_CALLS
        walls, cpus, first, last, sent, sent_last = [], [], [], [], [], []
        for _ in range(batch):
            gc.collect()  # as ../shared/bench/anchors_overhead.py does: no run pays for the garbage of another
            w0, p0 = time.perf_counter(), time.process_time()
            out = await run_once()
            w1, p1 = time.perf_counter(), time.process_time()
            assert out == FINAL, out
            marks = _marks(base)
            assert len(marks) == n + 1, (len(marks), n + 1)
            sizes = _sizes(base)
            sent.append(statistics.fmean(sizes))
            sent_last.append(sizes[-1])
            gaps = [b - a for a, b in zip(marks, marks[1:], strict=False)]
            k = max(1, len(gaps) // 10)
            walls.append(w1 - w0)
            cpus.append(p1 - p0)
            first.append(statistics.fmean(gaps[:k]))
            last.append(statistics.fmean(gaps[-k:]))
        assert TOOL_CALLS - c0 == batch * n
        rows.append({"driver": driver, "n": n, "calls": n + 1, "batch": batch, "wall": statistics.median(walls),
                     "cpu": statistics.median(cpus), "first": statistics.median(first),
                     "last": statistics.median(last), "bytes": statistics.median(sent),
                     "bytes_last": statistics.median(sent_last)})  # fmt: skip
    return rows


async def _conc(driver: str, k: int, n: int, base: str) -> dict[str, Any]:
    warm = SETUP[driver](2, base)
    assert await warm() == FINAL
    run_once = SETUP[driver](n, base)  # one client, one agent setup, shared by the K runs
    assert await run_once() == FINAL
    _marks(base)
    c0 = TOOL_CALLS
    gc.collect()
    w0, p0 = time.perf_counter(), time.process_time()
    outs = await asyncio.gather(*(run_once() for _ in range(k)))
    w1, p1 = time.perf_counter(), time.process_time()
    _marks(base)
    assert all(o == FINAL for o in outs)
    assert TOOL_CALLS - c0 == k * n
    return {"driver": driver, "k": k, "n": n, "wall": w1 - w0, "cpu": p1 - p0}


def worker(argv: list[str]) -> None:
    """``--worker series DRIVER[,DRIVER...] BASE N,N,... MAX_RUN_S [BATCH_RUNS]`` or ``--worker conc DRIVER K N
    BASE``: print one JSON result (several drivers, one after the other in this process: the smoke run's
    shortcut)."""
    task, driver = argv[0], argv[1]
    res: Any
    if task == "series":
        ns, max_run_s = [int(x) for x in argv[3].split(",")], float(argv[4])
        batch_runs = int(argv[5]) if len(argv) > 5 else 0
        res = [row for d in driver.split(",") for row in asyncio.run(_series(d, argv[2], ns, max_run_s, batch_runs))]
    else:
        res = asyncio.run(_conc(driver, int(argv[2]), int(argv[3]), argv[4]))
    print(json.dumps(res))


def _run_worker(args: list[str], timeout: float) -> Any:
    cmd = [sys.executable, __file__, "--worker", *args]
    env = dict(os.environ, LOOPCTL_SRC=BEFORE_SRC) if args[1] == "loopctl@before" else None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env)
    except subprocess.TimeoutExpired:
        print(f"  {' '.join(args[:3])}: over {timeout:.0f} s, stopped", flush=True)
        return None
    if out.returncode != 0:
        print(f"  {' '.join(args[:3])}: failed\n{out.stderr[-2000:]}", flush=True)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- the report -------------------------------------------------------------------------------------------------------


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for dist in ("openai", "anthropic", "httpx2", "pydantic-ai-slim", "openai-agents", "langgraph",
                 "langchain-openai"):  # fmt: skip
        with contextlib.suppress(PackageNotFoundError):
            out.append(f"{dist} {version(dist)}")
    return ", ".join(out)


def main() -> None:
    """Run the plan and print the tables."""
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ns", default="10,100,300,1000")
    ap.add_argument("--drivers", default=",".join(OPENAI_DRIVERS + ANTHROPIC_DRIVERS))
    ap.add_argument("--k", type=int, default=200, help="concurrent W(5) runs for C(K) (0: skip)")
    ap.add_argument("--conc-drivers", default="limit,openai_sdk,loopctl,pydantic_ai,openai_agents,langgraph")
    ap.add_argument("--max-run-s", type=float, default=75.0,
                    help="skip a driver at an N whose projected time for one run is over this (seconds)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (fresh processes) of the small sizes")
    ap.add_argument("--rep-max-n", type=int, default=100, help="sizes up to this are repeated --reps times")
    ap.add_argument("--json", default="", help="also write the results here")
    ap.add_argument("--before-src", default="", help="also run loopctl from this src folder (driver loopctl@before)")
    ap.add_argument("--stateful", action="store_true",
                    help="the OpenAI Responses drivers only (stateless and stateful modes); no C(K)")  # fmt: skip
    _smoke.add_flag(ap)
    a = ap.parse_args()
    if a.stateful:
        a.drivers = ",".join(RESPONSES_DRIVERS) if a.drivers == ap.get_default("drivers") else a.drivers
        a.k = 0
    if a.smoke:
        a.ns, a.k, a.reps = "3", 0 if a.stateful else 3, 1
        if not a.stateful and a.drivers == ap.get_default("drivers"):  # the smoke run covers every driver
            a.drivers += "," + ",".join(RESPONSES_DRIVERS)
    global BEFORE_SRC
    BEFORE_SRC = a.before_src
    ns = [int(x) for x in a.ns.split(",") if x]
    drivers = [d for d in a.drivers.split(",") if d and not _smoke.peer_missing(d, *NEEDS.get(d, ()))]
    if a.before_src and "loopctl@before" not in drivers:
        drivers.insert(drivers.index("loopctl") + 1 if "loopctl" in drivers else len(drivers), "loopctl@before")
    # C(K) runs the drivers' W(N) set-ups, which the series run: a smoke run checks C(K) on loopctl's only.
    conc_drivers = [d for d in a.conc_drivers.split(",") if d in drivers and (d == "loopctl" or not a.smoke)]
    t_start = time.perf_counter()
    server = subprocess.Popen([sys.executable, str(HERE / "wire_server.py")], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        base = f"http://127.0.0.1:{int(server.stdout.readline().split()[1])}"
        print(f"machine: {_machine()}\nversions: {_versions()}\nserver: {base} (bench/wire_server.py, own process)")
        got: dict[tuple[str, int], list[dict[str, Any]]] = {}
        paired: dict[tuple[str, int], list[tuple[dict[str, Any], dict[str, Any]]]] = {}  # (driver's, floor's)
        notes: list[str] = []
        # Repetitions go round the drivers (the machine's load drifts); sizes up to --rep-max-n are repeated
        # --reps times, larger ones run long enough to be measured once.
        for rep in range(a.reps):
            sizes = ns if rep == 0 else [n for n in ns if n <= a.rep_max_n]
            if not sizes:  # --ns "": C(K) only
                continue
            # A smoke run measures nothing: every driver in one process, which saves a process start each, and
            # two timed runs per size, not seven (in that one process each run's gc.collect() took 0.25 s: 20 s
            # of the smoke run's 27 went to them).
            # Each driver's floor is measured again just before it, in a process of its own: the ratio is then
            # of two runs seconds apart. The machine's speed drifts by up to half over the minutes a round takes,
            # which moved the ratio of two medians by as much.
            plan = [[",".join(drivers), ""]] if a.smoke else [
                step for d in drivers for step in
                ([[LIMIT_OF[d], d], [d, ""]] if LIMIT_OF[d] != d and LIMIT_OF[d] in drivers else [[d, ""]])
            ]  # fmt: skip
            floors: dict[int, dict[str, Any]] = {}
            for batch, floor_for in plan:
                args = ["series", batch, base, ",".join(map(str, sizes)), str(a.max_run_s)]
                res = _run_worker([*args, "2"] if a.smoke else args,
                                  timeout=a.max_run_s * 2 * len(sizes) + 120)  # fmt: skip
                if res is None:
                    _smoke.fail(f"{batch}: W({','.join(map(str, sizes))})")
                for r in res or ():
                    driver = r["driver"]
                    if "skipped" in r:
                        if rep == 0 and not floor_for:
                            notes.append(f"{driver}: W({r['n']}) and larger not run: projected {r['skipped']:.0f} s "
                                         f"for one run (over --max-run-s {a.max_run_s:.0f})")  # fmt: skip
                        continue
                    got.setdefault((driver, r["n"]), []).append(r)
                    if floor_for:
                        floors[r["n"]] = r
                    elif LIMIT_OF[driver] != driver and r["n"] in floors:
                        paired.setdefault((driver, r["n"]), []).append((r, floors[r["n"]]))
                    label = f"{driver} (before {floor_for})" if floor_for else driver
                    print(f"  rep {rep + 1} {label:34s} W({r['n']:4d}) {r['wall'] / r['calls'] * 1e3:8.2f} ms/call "
                          f"(CPU {r['cpu'] / r['calls'] * 1e3:7.2f})  first {r['first'] * 1e3:6.2f} last "
                          f"{r['last'] * 1e3:6.2f}  {r['bytes']:9.0f} B/call  "
                          f"[{time.perf_counter() - t_start:4.0f} s]", flush=True)  # fmt: skip
                if not floor_for:
                    floors = {}
        rows = {key: _median_row(rs) for key, rs in got.items()}
        conc: dict[str, dict[str, Any]] = {}
        if a.k:
            for driver in conc_drivers:
                r = _run_worker(["conc", driver, str(a.k), "5", base], timeout=300)
                if r is None:
                    _smoke.fail(f"{driver}: C({a.k})")
                else:
                    conc[driver] = r
                    print(f"  {driver:22s} C({a.k}) {r['wall']:6.2f} s  [{time.perf_counter() - t_start:4.0f} s]",
                          flush=True)  # fmt: skip
    finally:
        server.kill()
        server.wait()
    report = _report(rows, paired, conc, drivers, ns, a.k, notes, time.perf_counter() - t_start)
    print("\n" + report)
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": [rows[k] for k in rows], "conc": conc, "notes": notes}, indent=1))
    _smoke.finish()


def _median_row(rs: list[dict[str, Any]]) -> dict[str, Any]:
    row = dict(rs[0])
    for key in ("wall", "cpu", "first", "last", "bytes", "bytes_last"):
        row[key] = statistics.median(r[key] for r in rs)
    row["reps"] = len(rs)
    return row


def _ms(r: dict[str, Any] | None, key: str = "wall") -> float | None:
    return r[key] / r["calls"] * 1e3 if r else None


def _ratio(
    rows: dict[tuple[str, int], dict[str, Any]],
    paired: dict[tuple[str, int], list[tuple[dict[str, Any], dict[str, Any]]]],
    d: str,
    n: int,
    key: str,
) -> float | None:
    """``d``'s time over its floor's at ``n``: the median of each repetition's ratio to the floor measured just
    before it, or (no such pairs: a smoke run, or no floor asked for) the ratio of the two medians."""
    if pairs := paired.get((d, n)):
        return float(statistics.median(mine[key] / floor[key] for mine, floor in pairs))
    ms, lim = _ms(rows.get((d, n)), key), _ms(rows.get((LIMIT_OF[d], n)), key)
    return ms / lim if ms is not None and lim else None


def _report(
    rows: dict[tuple[str, int], dict[str, Any]],
    paired: dict[tuple[str, int], list[tuple[dict[str, Any], dict[str, Any]]]],
    conc: dict[str, dict[str, Any]],
    drivers: list[str],
    ns: list[int],
    k: int,
    notes: list[str],
    elapsed: float,
) -> str:
    out = [f"# bench_wire: ms per model call over HTTP ({time.strftime('%Y-%m-%d')}, {_machine()})", ""]
    for key, title in (("wall", "wall time"), ("cpu", "CPU time of the client process")):
        out += [f"ms per model call, {title} (median of the repetitions; × limit: the driver over the no-SDK "
                "floor of its format at the same N, the median of each repetition's ratio to the floor run just "
                "before it):", ""]  # fmt: skip
        head = " | ".join(f"N={n}" for n in ns)
        flat = " | call @end / @start (largest N) |" if key == "wall" else " |"
        out.append(f"| driver | {head} | × limit at each N{flat}")
        out.append("|---|" + "---:|" * len(ns) + ("---|---:|" if key == "wall" else "---|"))
        for d in drivers:
            cells, ratios = [], []
            for n in ns:
                ms, over = _ms(rows.get((d, n)), key), _ratio(rows, paired, d, n, key)
                cells.append(f"{ms:.2f}" if ms is not None else "–")
                ratios.append(f"{over:.1f}" if over is not None else "–")
            line = f"| {d} | " + " | ".join(cells) + f" | {' / '.join(ratios)} |"
            if key == "wall":
                big = max((n for n in ns if (d, n) in rows), default=None)
                ends = ""
                if big is not None and rows[d, big]["first"]:
                    ends = f"{rows[d, big]['last'] / rows[d, big]['first']:.2f} (N={big})"
                line += f" {ends} |"
            out.append(line)
        out.append("")
    out += ["bytes sent per model call (mean over the run / the last call; the server's count):", ""]
    out.append("| driver | " + " | ".join(f"N={n}" for n in ns) + " |")
    out.append("|---|" + "---:|" * len(ns))
    for d in drivers:
        cells = [f"{rows[d, n]['bytes']:,.0f} / {rows[d, n]['bytes_last']:,.0f}" if (d, n) in rows else "–" for n in ns]
        out.append(f"| {d} | " + " | ".join(cells) + " |")
    out.append("")
    for ours, peers in (("loopctl", ["openai_sdk", "pydantic_ai", "openai_agents", "langgraph"]),
                        ("loopctl_anthropic", ["anthropic_sdk", "pydantic_ai_anthropic"]),
                        ("loopctl_responses", ["openai_agents_responses"]),
                        ("loopctl_responses_ws", ["openai_agents_ws"])):  # fmt: skip
        if ours not in drivers:
            continue
        line = []
        for p in peers:
            got = [f"N={n} {_ms(rows[p, n]) / _ms(rows[ours, n]):.1f}×" for n in ns  # type: ignore[operator]
                   if (p, n) in rows and (ours, n) in rows]  # fmt: skip
            if got:
                line.append(f"{p}: " + ", ".join(got))
        if line:
            out.append(f"{ours} is faster than " + "; ".join(line))
    if conc:
        out += ["", f"C({k}): {k} concurrent W(5) runs, one client, wall s (ratio to loopctl):", ""]
        mine = conc.get("loopctl", {}).get("wall")
        for d, r in conc.items():
            ratio = f" ({r['wall'] / mine:.1f}×)" if mine else ""
            out.append(f"- {d}: {r['wall']:.2f} s, CPU {r['cpu']:.2f} s{ratio}")
    if notes:
        out += ["", "Not run:"] + [f"- {x}" for x in notes]
    out += ["", f"({elapsed:.0f} s in all; versions: {_versions()}; \"call @end / @start\": mean time between "
            "two requests reaching the server over the last and the first 10% of the run)"]
    return "\n".join(out)


if __name__ == "__main__":
    main()
