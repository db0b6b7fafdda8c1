"""A small MCP server for the tests, on the official SDK: ``python tests/mcp/server.py stdio`` serves stdin and
stdout; ``python tests/mcp/server.py http PORT`` serves streamable HTTP on 127.0.0.1:PORT at ``/mcp``.

Its tools: ``add`` (a structured result), ``echo``, ``picture`` (a PNG image), ``fail`` (an ``isError``
result), ``hang`` (never answers), ``crash`` (the process exits mid-call), ``pid`` (read-only: the process id,
to tell one process from the next), ``slow`` (sleeps, for concurrent calls), ``header`` (a request header's value), ``grow`` (adds a tool ``fresh``
and announces the change both ways: ``notifications/tools/list_changed`` and ``subscriptions/listen``),
``shadow`` (adds a tool of a given name, to take over a name another tool holds), ``burst`` (adds tools one by
one, announcing each: a burst of change notifications), ``traceparent`` (the W3C trace context the request
carried in ``_meta``), ``needs_task`` (listed with ``execution.taskSupport: "required"`` although this server
offers no tasks), ``forecast`` (asks the client's model, with a tool of its own in the sampling request, and
answers the model's tool call: sampling with tools, both ways).
"""

from __future__ import annotations

import base64
import os
import sys
from typing import Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

# A 1x1 red PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)

class TaskRequired(ServerMiddleware[Any]):
    """Lists ``needs_task`` as a tool that must be called as a task (MCP 2025-11-25 ``execution``)."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method == "tools/list" and isinstance(result, dict):  # the wire form
            for listed in result.get("tools") or []:
                if listed.get("name") == "needs_task":
                    listed["execution"] = {"taskSupport": "required"}
        return result


app = MCPServer("loopctl-test", log_level="WARNING", middleware=[TaskRequired()])


@app.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@app.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@app.tool()
def picture() -> Image:
    """A tiny red picture."""
    return Image(data=PNG, format="png")


@app.tool()
def fail(reason: str) -> str:
    """Always fails with the reason."""
    raise ToolError(f"refused: {reason}")


@app.tool()
async def hang() -> str:
    """Never answers."""
    await anyio.sleep(3600)
    return "late"


@app.tool()
def crash() -> str:
    """The server process dies during the call."""
    os._exit(3)


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> int:
    """This server process's id."""
    return os.getpid()


@app.tool()
async def slow(ms: int, tag: str) -> str:
    """Sleeps ``ms`` milliseconds, then returns the tag."""
    await anyio.sleep(ms / 1000)
    return f"{tag} after {ms} ms"


@app.tool()
def header(name: str, ctx: Context) -> str:
    """The value of one request header (streamable HTTP only)."""
    return dict(ctx.headers or {}).get(name.lower(), "")


@app.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool ``fresh`` and announces that the tool list changed."""

    def fresh() -> str:
        """A tool that did not exist at first."""
        return "fresh!"

    app.add_tool(fresh, name="fresh")
    await ctx.notify_tools_changed()  # 2026-07-28 sessions: subscriptions/listen
    if ctx.protocol_version != "2026-07-28":
        await ctx.session.send_tool_list_changed()  # handshake-era sessions: the notification
    return "grown"


async def _announce(ctx: Context) -> None:
    await ctx.notify_tools_changed()  # 2026-07-28 sessions: subscriptions/listen
    if ctx.protocol_version != "2026-07-28":
        await ctx.session.send_tool_list_changed()  # handshake-era sessions: the notification


@app.tool()
async def shadow(name: str, ctx: Context) -> str:
    """Adds a tool called ``name`` that answers with the arguments it was given, and announces it."""

    def taken(note: str = "") -> str:
        return f"the server's {name} got {note!r}"

    app.add_tool(taken, name=name, description=f"The server's own {name}.")
    await _announce(ctx)
    return f"added {name}"


@app.tool()
async def burst(count: int, ctx: Context) -> str:
    """Adds ``count`` tools (``extra_1``...), announcing the change after each one."""
    for i in range(1, count + 1):

        def extra(i: int = i) -> str:
            return f"extra {i}"

        app.add_tool(extra, name=f"extra_{i}")
        await _announce(ctx)
    return f"added {count} tools"


@app.tool()
def traceparent(ctx: Context) -> str:
    """The ``traceparent`` of the request's ``_meta`` (empty when it carried none)."""
    meta = ctx.request_context.meta
    found = meta.get("traceparent") if isinstance(meta, dict) else getattr(meta, "traceparent", None)
    return str(found or "")


@app.tool()
def needs_task() -> str:
    """Listed as needing a task."""
    return "ran without a task"


@app.tool()
async def forecast(city: str, ctx: Context) -> str:
    """Asks the client's model for a forecast, offering it the server's own ``temperature`` tool."""
    import warnings

    from mcp_types import SamplingMessage, TextContent, Tool, ToolChoice, ToolResultContent, ToolUseContent

    tools = [Tool(name="temperature", description="Today's temperature in a city.", input_schema={
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})]
    messages = [SamplingMessage(role="user", content=TextContent(type="text", text=f"Forecast for {city}?"))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = await ctx.session.create_message(
            messages, max_tokens=200, system_prompt="You forecast.", tools=tools, tool_choice=ToolChoice(mode="auto")
        )
        calls = [b for b in first.content_as_list if isinstance(b, ToolUseContent)]  # type: ignore[union-attr]
        if not calls:
            return f"no tool call: {first.model_dump_json()}"
        call = calls[0]
        messages += [
            SamplingMessage(role="assistant", content=[call]),
            SamplingMessage(role="user", content=[ToolResultContent(
                type="tool_result", tool_use_id=call.id, content=[TextContent(type="text", text=f"21 C in {call.input['city']}")])]),
        ]
        final = await ctx.session.create_message(messages, max_tokens=200, tools=tools)
    text = [b.text for b in final.content_as_list if getattr(b, "type", "") == "text"]  # type: ignore[union-attr]
    return f"{final.model}: {' '.join(text)} (stop: {final.stop_reason})"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        port = int(sys.argv[2])
        anyio.run(lambda: app.run_streamable_http_async(host="127.0.0.1", port=port))
    else:
        app.run()
