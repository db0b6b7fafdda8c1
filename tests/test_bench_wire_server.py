"""The wire benchmark's server (``bench/wire_server.py``) speaks the Responses API's stateful modes as the
clients the benchmark measures use them: ``previous_response_id`` over HTTP and the WebSocket mode. It keeps
nothing, so a chained request says its turn by the id it continues; it counts the bytes each model request
took, which is what the stateful modes save."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopctl.engine import BareLoop, RunConfig, SessionConfig
from loopctl.tool import tool
from loopctl.transport import OpenAIResponsesClient, OpenAIResponsesWebSocketClient

SERVER = Path(__file__).resolve().parent.parent / "bench" / "wire_server.py"


@pytest.fixture
def base() -> Iterator[str]:
    server = subprocess.Popen([sys.executable, str(SERVER)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        yield f"http://127.0.0.1:{int(server.stdout.readline().split()[1])}"
    finally:
        server.kill()
        server.wait()


def _read(base: str, path: str) -> list[float]:
    with urllib.request.urlopen(f"{base}{path}", data=b"{}") as r:
        out: list[float] = json.loads(r.read())
        return out


@tool
async def echo(text: str) -> str:
    """Echo the input text back."""
    return text


@pytest.mark.parametrize("mode", ["whole", "chain", "websocket"])
async def test_every_mode_runs_the_workload_and_the_stateful_ones_send_a_flat_size(base: str, mode: str) -> None:
    if mode == "websocket":
        client: OpenAIResponsesClient = OpenAIResponsesWebSocketClient("w6", api_key="k", base_url=f"{base}/v1")
    else:
        client = OpenAIResponsesClient("w6", api_key="k", base_url=f"{base}/v1", stateful=mode == "chain")
    try:
        run = await BareLoop(client, [echo], SessionConfig(system_prompt="s")).run(
            "go", RunConfig(loop_detection=None, max_retries=0)
        )
    finally:
        await client.aclose()
    assert run.output == "done" and len(run.turns) == 7
    sizes = _read(base, "/_bytes")
    assert len(sizes) == len(_read(base, "/_marks")) == 7
    if mode == "whole":
        assert sizes[-1] > 2 * sizes[1]  # the whole history every call
    else:
        assert max(sizes[1:]) - min(sizes[1:]) <= 8  # only the new tool result (ids grow by a digit at most)
