"""Local model servers refusing a prompt too long for their context: llama.cpp, vLLM and Ollama, each played by the
fake provider server with its own error body (``loopctl.testing.wire.local``, which cites their sources), and a
real client.

llama.cpp's 400 ``exceed_context_size_error`` ("request (12010 tokens) exceeds the available context size (8192
tokens)"), on the Chat and the Anthropic-compatible endpoint, streamed or not, was read as ``InvalidRequest``, so
the emergency compaction never ran (issue 18, item 22); vLLM's "'max_tokens' ... is too large" and Ollama's "the
prompt is longer than the context length" were not recognised either.
"""

from __future__ import annotations

from typing import Any

import pytest

from loopctl.engine import BareLoop, CompactionFinished, OutcomeKind, RunConfig, SessionConfig
from loopctl.errors import ContextOverflow, overflow_counts
from loopctl.message import Message, MessagePart, Role, check_conversation
from loopctl.providers import ModelRequest, from_string
from loopctl.testing import FakeProviderServer, LocalServer
from loopctl.tool import tool

BIG = "lorem ipsum dolor sit amet " * 40  # ~1,080 characters


def _client(server: FakeProviderServer, api: str) -> Any:
    if api == "anthropic":
        return from_string("anthropic:local-model", base_url=server.base_url, api_key="none")
    return from_string("openai:local-model", base_url=server.openai_base_url, api_key="none")


def _long_request(tokens: int, **kw: Any) -> ModelRequest:
    return ModelRequest(messages=[Message.user("x " * (2 * tokens))], **kw)


@pytest.mark.parametrize("api", ["openai-chat", "anthropic"])
@pytest.mark.parametrize("stream", [False, True])
async def test_llama_cpp_overflow_is_a_context_overflow_with_its_numbers(api: str, stream: bool) -> None:
    with FakeProviderServer([], local=LocalServer("llama.cpp", context_window=8192)) as server:
        client = _client(server, api)
        try:
            with pytest.raises(ContextOverflow) as caught:
                await client.generate(_long_request(12_000, max_tokens=512), stream=stream)
        finally:
            await client.aclose()
    error = caught.value
    n = error.prompt_tokens
    assert n is not None and n > 12_000
    assert error.context_window == 8192
    assert error.status == 400
    assert error.provider_message == (
        f"request ({n} tokens) exceeds the available context size (8192 tokens), try increasing it"
    )
    assert not error.retryable


@pytest.mark.parametrize("stream", [False, True])
async def test_vllm_overflows_of_the_prompt_and_of_max_tokens_are_context_overflows(stream: bool) -> None:
    with FakeProviderServer([], local=LocalServer("vllm", context_window=4096)) as server:
        client = _client(server, "openai-chat")
        try:
            with pytest.raises(ContextOverflow) as prompt_too_long:
                await client.generate(_long_request(5_000), stream=stream)
            with pytest.raises(ContextOverflow) as output_too_long:
                await client.generate(_long_request(3_000, max_tokens=2_000), stream=stream)
        finally:
            await client.aclose()
    n = prompt_too_long.value.prompt_tokens
    assert n is not None and n > 5_000
    assert prompt_too_long.value.context_window == 4096
    assert (prompt_too_long.value.provider_message or "").startswith(
        f"This model's maximum context length is 4096 tokens. However, your request has {n} input tokens."
    )
    n = output_too_long.value.prompt_tokens
    assert n is not None and 3_000 < n < 4096
    assert output_too_long.value.context_window == 4096 - 2_000  # the room the prompt had
    assert (output_too_long.value.provider_message or "").startswith(
        "'max_tokens' or 'max_completion_tokens' is too large: 2000."
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_ollama_overflow_is_a_context_overflow(stream: bool) -> None:
    with FakeProviderServer([], local=LocalServer("ollama", context_window=2048, model="llama3.2:3b")) as server:
        client = from_string("openai:llama3.2:3b", base_url=server.openai_base_url, api_key="none")
        try:
            with pytest.raises(ContextOverflow) as caught:
                await client.generate(_long_request(3_000), stream=stream)
        finally:
            await client.aclose()
    assert (caught.value.provider_message or "").startswith(
        "the prompt is longer than the context length currently available to the model"
    )
    assert (caught.value.prompt_tokens, caught.value.context_window) == (None, None)  # Ollama gives no numbers


@pytest.mark.parametrize(
    ("message", "counts"),
    [
        ("prompt is too long: 208310 tokens > 200000 maximum", (208_310, 200_000)),
        ("input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000", (188_240, 200_000 - 21_333)),
        (
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens.",
            (130_532, 128_000),
        ),
        (
            "This model's maximum context length is 8192 tokens. However, you requested 9224 tokens (1224 in the "
            "messages, 8000 in the completion). Please reduce the length of the messages or completion.",
            (1_224, 192),
        ),
        (
            "You passed 9000 input tokens and requested 1000 output tokens. However, the model's context length is "
            "only 8192 tokens, resulting in a maximum input length of 7192 tokens. Please reduce the length of the "
            "input prompt.",
            (9_000, 7_192),
        ),
        (
            "This model's maximum context length is 32768 tokens. However, you requested 1000 output tokens and your "
            "prompt contains at least 32000 input tokens, for a total of at least 33000 tokens.",
            (32_000, 31_768),
        ),
        (
            "The input token count (1572864) exceeds the maximum number of tokens allowed (1048576).",
            (1_572_864, 1_048_576),
        ),
        ("input length (9000 tokens) exceeds the model's maximum context length (8192 tokens)", (9_000, 8_192)),
        ("the prompt is longer than the context length currently available to the model", None),
    ],
)
def test_the_numbers_of_each_providers_overflow_are_read(message: str, counts: tuple[int, int] | None) -> None:
    assert overflow_counts(message) == counts


# --- the run: the emergency compaction answers a local server's refusal ---------------------------------------


@tool
async def grep(n: int) -> str:
    """An untagged search."""
    return f"hits {n}: {BIG}"


def _agent(turns: int) -> Any:
    """A model that calls ``grep`` once per turn, ``turns`` times, then answers."""

    calls = {"n": 0}  # the calls the server let through (it refuses a prompt too long before the model runs)

    def reply(body: dict[str, Any]) -> Message:
        done = calls["n"]
        calls["n"] += 1
        if done >= turns:
            return Message.assistant("all done")
        return Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"c{done}", "grep", {"n": done})])

    return reply


@pytest.mark.parametrize("kind", ["llama.cpp", "vllm"])
async def test_a_run_past_a_local_servers_context_compacts_and_finishes(kind: str) -> None:
    # The session thinks its window is 200,000 tokens; the server's is 4,096: its refusal, once recognised,
    # triggers the emergency compaction, and the retried call fits.
    passes: list[CompactionFinished] = []

    def watch(event: object) -> None:
        if isinstance(event, CompactionFinished):
            passes.append(event)

    with FakeProviderServer(_agent(20), local=LocalServer(kind, context_window=4096)) as server:  # type: ignore[arg-type]
        client = _client(server, "openai-chat")
        loop = BareLoop(client, [grep], SessionConfig(), observers=[watch])
        try:
            result = await loop.run("search twenty times", RunConfig(stream=False, max_turns=40))
        finally:
            await client.aclose()
        refused = [r for r in server.requests if r.api is not None and len(r.raw) // 4 >= 4096]
    assert result.outcome.kind is OutcomeKind.COMPLETED, result.outcome
    assert result.output == "all done"
    assert refused  # the server did refuse a request
    assert [p.reason for p in passes] == ["emergency"] * len(refused)
    assert check_conversation(list(loop.history)) == []
