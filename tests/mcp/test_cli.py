"""``loopctl run --mcp "COMMAND ARGS"`` and ``--mcp-url URL``: the CLI in a real process starts the test MCP
server as a subprocess and reaches another over streamable HTTP; the tools offered to the model are read from
the run's exported trace (``--otel`` with content capture, to a real OTLP receiver)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.mcp.conftest import ROOT, SERVER, HTTPServerProcess
from tests.telemetry.otlp_receiver import OTLPReceiver

FILE_TOOLS = ["list_files", "read_file", "search", "write_file", "edit_file"]
MCP_TOOLS = [
    "add", "echo", "picture", "fail", "hang", "crash", "pid", "slow", "header", "grow", "shadow", "burst", "traceparent",
    "forecast",
]  # fmt: skip


def test_mcp_servers_tools_are_offered_and_taken_names_get_a_prefix(
    tmp_path: Path, http_process: HTTPServerProcess
) -> None:
    project = tmp_path / "project"
    shutil.copytree(ROOT / "examples" / "sample-project", project)
    command = f"{sys.executable} {SERVER}"
    with OTLPReceiver() as receiver:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env |= {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
            "LOOPCTL_DEMO_DELAY": "0",
            "PYTHONPATH": str(ROOT / "src"),
        }
        done = subprocess.run(
            [sys.executable, "-m", "loopctl", "run", "collect the TODOs", "--model", "demo", "--root", str(project),
             "--yes", "--session", str(tmp_path / "s.json"), "--otel",
             "--mcp", command, "--mcp-url", http_process.url],
            capture_output=True, text=True, timeout=240, env=env, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        chat = next(attrs for name, attrs in receiver.spans() if name.startswith("chat "))
    offered = [d["name"] for d in json.loads(chat["gen_ai.tool.definitions"])]
    # The stdio server's tools come first, as they are; the HTTP server's take the same names, so it gets a prefix.
    assert offered == [*FILE_TOOLS, *MCP_TOOLS, *(f"mcp2_{n}" for n in MCP_TOOLS)]
    assert (project / "TODO.md").exists()  # the run itself did its job


def test_an_mcp_server_that_does_not_start_is_a_one_line_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loopctl", "run", "x", "--model", "demo", "--root", str(tmp_path),
         "--mcp", "/nonexistent/server --flag"],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("error: MCP server 'server --flag' could not be started or reached:")
