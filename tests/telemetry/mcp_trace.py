"""Run by ``test_mcp_spans.py`` in a process of its own (it installs a global tracer provider, which a process
can do once): a run whose model calls an MCP tool, with the OpenTelemetry SDK as the global provider (the MCP
SDK traces through the global one) and ``OTelObserver`` on the same provider. Prints the finished spans and what
the MCP server saw as JSON on stdout."""

from __future__ import annotations

import asyncio
import json
import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopctl.engine import BareLoop, RunConfig
from loopctl.telemetry import OTelObserver
from loopctl.testing import FakeProviderServer
from tests.fake_clients import make_client
from tests.mcp.conftest import calls, stdio_server


async def main(mode: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    script = [calls(("t1", "traceparent", {})), "done"]
    async with stdio_server(mode=mode) as server:  # connected before the run, outside any span
        with FakeProviderServer(script) as fake:
            client = make_client("openai", fake)
            loop = BareLoop(client, [server], observers=[OTelObserver(provider, agent_name="nesting")])
            run = await loop.run("go", RunConfig(retry_initial_delay=0.001))
            await client.aclose()
    (result,) = loop.history[2].tool_results()
    spans = [
        {
            "name": s.name,
            "trace_id": f"{s.context.trace_id:032x}",
            "span_id": f"{s.context.span_id:016x}",
            "parent_id": f"{s.parent.span_id:016x}" if s.parent is not None else None,
        }
        for s in exporter.get_finished_spans()
    ]
    json.dump({"ok": run.ok, "traceparent": str(result.output), "spans": spans}, sys.stdout)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
