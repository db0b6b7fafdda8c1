"""The clients type-check from ``loopctl.providers`` (where the README imports them), under ``mypy --strict``:
the lazy ``__getattr__`` that keeps the import cheap must not make them ``object`` (nor ``Any``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

GOOD = '''
import asyncio

from loopctl.message import Message
from loopctl.providers import (
    AnthropicClient,
    GeminiClient,
    ModelClient,
    ModelRequest,
    OpenAIChatClient,
    OpenAIResponsesClient,
    from_string,
)

client = from_string("openai:gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="k")
chat: OpenAIChatClient = OpenAIChatClient("gpt-4o", api_key="k", timeout=30.0)
responses = OpenAIResponsesClient("gpt-5", api_key="k", codec_options={"store": False})
claude = AnthropicClient("claude-sonnet-4-5", api_key="k", default_headers={"anthropic-beta": "x"})
gemini = GeminiClient("gemini-3-pro", api_key="k", api_version="v1beta")
clients: list[ModelClient] = [client, chat, responses, claude, gemini]


async def ask(c: ModelClient) -> str:
    reply = await c.generate(ModelRequest(messages=[Message.user("hi")]), stream=True)
    await c.aclose()
    return reply.message.text_content()


name: str = client.model
body: bytes = chat.encode(ModelRequest(messages=[Message.user("hi")]), True)


async def ask_all() -> list[str]:
    return list(await asyncio.gather(*(ask(c) for c in clients)))
'''

# Each line must be an error: were the names Any, mypy would accept them all.
BAD = '''
from loopctl.providers import AnthropicClient, GeminiClient, OpenAIChatClient, OpenAIResponsesClient, from_string

a: int = from_string("openai:gpt-4o")
b: int = OpenAIChatClient("gpt-4o").model
c: str = OpenAIResponsesClient("gpt-5").generate
d: int = AnthropicClient("claude")
e: int = GeminiClient("gemini-3-pro", timeout="soon")
'''


@pytest.mark.xdist_group("mypy")  # one worker runs mypy, on a warm cache (tests/conftest.py)
def test_the_clients_type_check_from_loopctl_providers(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(GOOD)
    bad.write_text(BAD)
    # Run from the checkout so mypy reads its config (strict, the pydantic plugin) and its warm cache.
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(good), str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert not [e for e in errors if "good.py" in e], result.stdout
    lines = sorted({int(e.split(":")[1]) for e in errors if "bad.py" in e})
    assert lines == [4, 5, 6, 7, 8], result.stdout
