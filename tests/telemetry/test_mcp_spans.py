"""The MCP SDK's client span (``MCP send tools/call``) and the W3C ``traceparent`` it sends to the server nest
under the run's ``execute_tool`` span (``docs/telemetry.md``): a real MCP server process, the OpenTelemetry SDK
with an in-memory exporter as the global provider (in a process of its own: ``mcp_trace.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_mcp_calls_span_and_traceparent_nest_under_execute_tool(mode: str) -> None:
    # Before: the session's task never saw the caller's context, so the MCP span started a trace of its own
    # and the server was sent that trace's id.
    done = subprocess.run(
        [sys.executable, "-m", "tests.telemetry.mcp_trace", mode],
        capture_output=True, text=True, timeout=180, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["ok"]
    spans = {s["name"]: s for s in out["spans"]}
    root = spans["invoke_agent nesting"]
    tool = spans["execute_tool traceparent"]
    sent = spans["MCP send tools/call traceparent"]
    assert tool["parent_id"] == root["span_id"]
    assert (sent["trace_id"], sent["parent_id"]) == (root["trace_id"], tool["span_id"])
    # The server was told the MCP span is the caller of its request.
    version, trace_id, parent_id, flags = out["traceparent"].split("-")
    assert (version, trace_id, parent_id) == ("00", root["trace_id"], sent["span_id"])
    assert int(flags, 16) & 1  # sampled
