"""One HTTP stack (issue 23): the official SDKs send through httpx2 (openai 3, anthropic 2, mcp, google-genai),
and so do loopctl's clients, the Gemini one included, so a process that uses them loads and pools one HTTP
library. A pool of httpx (of the same API) handed in still gets its errors typed."""

from __future__ import annotations

import ast
import socket
import subprocess
import sys

import pytest

from loopctl.errors import ConnectionFailed
from loopctl.message import Message
from loopctl.providers import ModelRequest
from loopctl.transport import GeminiClient


def loaded_after(code: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh Python process has imported once it has run ``code``, sorted."""
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {modules!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return list(ast.literal_eval(out.splitlines()[-1]))


def test_a_process_with_every_client_loads_httpx2_and_not_httpx() -> None:
    code = (
        "from loopctl.transport import AnthropicClient, GeminiClient, OpenAIChatClient, OpenAIResponsesClient\n"
        "OpenAIChatClient('m', api_key='k'); OpenAIResponsesClient('m', api_key='k')\n"
        "AnthropicClient('m', api_key='k'); GeminiClient('m', api_key='k')"
    )
    assert loaded_after(code, ("httpx", "httpx2")) == ["httpx2"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_refused_connection_is_typed_on_loopctls_own_pool() -> None:
    client = GeminiClient("m", api_key="k", base_url=f"http://127.0.0.1:{_closed_port()}", timeout=5)
    with pytest.raises(ConnectionFailed):
        await client.generate(ModelRequest(messages=[Message.user("hi")]), stream=True)
    await client.aclose()


async def test_a_refused_connection_is_typed_on_an_httpx_pool_handed_in() -> None:
    httpx = pytest.importorskip("httpx")  # not a dependency any more; an older SDK or the caller may bring it
    async with httpx.AsyncClient(timeout=5) as pool:
        client = GeminiClient("m", api_key="k", base_url=f"http://127.0.0.1:{_closed_port()}", http_client=pool)
        with pytest.raises(ConnectionFailed):
            await client.generate(ModelRequest(messages=[Message.user("hi")]), stream=True)
