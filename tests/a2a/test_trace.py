"""A remote agent's spans nest as a local sub-agent's do: ``loopctl a2a serve --otel`` in a real process
exports its run's spans over OTLP (to a real receiver here), and the ``traceparent`` the calling
:class:`~loopctl.a2a.A2AAgent` sends makes the remote ``invoke_agent`` span a child of the caller's
``execute_tool`` span, in the caller's trace."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopctl import Agent
from loopctl.a2a import A2AAgent
from loopctl.message import Message, MessagePart, Role
from loopctl.telemetry import OTelObserver
from loopctl.testing import ScriptedClient
from tests.a2a.conftest import ROOT, free_port, wait_for_port
from tests.telemetry.otlp_receiver import OTLPReceiver


async def test_the_remote_run_is_a_child_of_the_callers_execute_tool_span(tmp_path: Path) -> None:
    port = free_port()
    with OTLPReceiver() as receiver:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "remote"}
        server = subprocess.Popen(
            [sys.executable, "-m", "loopctl", "a2a", "serve", "--agent", "tests.mcp.served:agent",
             "--port", str(port), "--otel"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            wait_for_port(server, port)
            exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            remote = await A2AAgent.connect(f"http://127.0.0.1:{port}/")
            script = [Message.new(Role.ASSISTANT, [MessagePart.tool_call("p1", "helper", {"input": "hi"})]), "ok"]
            boss = Agent(ScriptedClient(script), tools=[remote], name="boss", observers=[OTelObserver(provider)])
            run = await boss.run("Ask the helper.")
            await remote.aclose()
            assert run.output == "ok"
        finally:
            server.send_signal(signal.SIGTERM)  # a graceful stop: the last spans are flushed
            _, err = server.communicate(timeout=30)
        assert server.returncode == 0, err
        spans = receiver.span_records()
    mine = {s.name: s for s in exporter.get_finished_spans()}
    tool = mine["execute_tool helper"]
    assert tool.context is not None
    [remote_run] = [s for s in spans if s["name"] == "invoke_agent helper"]
    assert remote_run["trace_id"] == format(tool.context.trace_id, "032x")
    assert remote_run["parent_id"] == format(tool.context.span_id, "016x")
    assert receiver.service_names() == {"remote"}
    # The remote run's model call is in the same trace, under its run.
    [chat] = [s for s in spans if s["name"].startswith("chat ")]
    assert (chat["trace_id"], chat["parent_id"]) == (remote_run["trace_id"], remote_run["span_id"])
