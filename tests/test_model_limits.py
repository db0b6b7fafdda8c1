"""A model's context window and output limit, learnt from where they are known (issue 18, items 23 and 24): the
window was 200,000 tokens for every model, and ``loopctl run`` asked a local server for no output limit at all.

The local servers are the fake provider server playing llama.cpp, vLLM and Ollama (``LocalServer``), asked by
:func:`loopctl.model_limits.probe` over real HTTP.
"""

from __future__ import annotations

import socket

import pytest

from loopctl.engine import BareLoop
from loopctl.model_limits import (
    DEFAULT_CONTEXT_WINDOW,
    OLLAMA_DEFAULT_CONTEXT,
    ModelLimits,
    default_max_tokens,
    input_window,
    is_local,
    probe,
    published,
)
from loopctl.providers import from_string
from loopctl.testing import FakeProviderServer, LocalServer, ScriptedClient

# --- published limits -------------------------------------------------------------------------------------------


def test_the_window_comes_from_genai_prices_and_the_output_limit_from_the_table() -> None:
    found = published("openai", "gpt-4o-mini")
    assert found == ModelLimits(128_000, 16_384, "genai-prices + table")
    found = published("anthropic", "claude-sonnet-4-5-20250929")
    assert found == ModelLimits(200_000, 64_000, "genai-prices + table")


def test_a_window_genai_prices_lacks_comes_from_the_table() -> None:
    assert published("gemini", "gemini-2.5-pro") == ModelLimits(1_048_576, 65_536, "table")


def test_the_longest_prefix_of_the_table_wins() -> None:
    opus_41 = published("anthropic", "claude-opus-4-1-20250805")
    opus_45 = published("anthropic", "claude-opus-4-5")
    assert opus_41 is not None and opus_45 is not None
    assert (opus_41.max_output_tokens, opus_45.max_output_tokens) == (32_000, 64_000)


def test_a_model_nobody_knows_has_no_published_limits() -> None:
    assert published("openai", "my-finetune-of-something") is None
    assert published("scripted", "gpt-4o") is None  # not a provider's model


def test_the_loop_takes_the_models_published_window() -> None:
    client = from_string("gemini:gemini-2.5-flash", api_key="k")
    assert BareLoop(client)._budget.window == 1_048_576
    assert BareLoop(ScriptedClient([]))._budget.window == DEFAULT_CONTEXT_WINDOW  # unknown: as before


# --- the output limit asked for ---------------------------------------------------------------------------------


def test_the_default_output_limit_follows_the_model() -> None:
    assert default_max_tokens(ModelLimits(128_000, 16_384, "table")) == 16_384
    assert default_max_tokens(ModelLimits(200_000, 64_000, "table")) == 32_000  # capped
    assert default_max_tokens(None) == 8_192
    # A local server: a quarter of its context, at most 8,192; half of that when it reports nothing.
    assert default_max_tokens(ModelLimits(8_192, None, "llama.cpp /props", local=True)) == 2_048
    assert default_max_tokens(ModelLimits(131_072, None, "vLLM /v1/models", local=True)) == 8_192
    assert default_max_tokens(None, local=True) == 4_096
    assert input_window(8_192, 2_048) == 6_144
    assert input_window(8_192, 8_000) == 4_096  # never less than half


def test_only_the_providers_own_hosts_are_not_local() -> None:
    assert not is_local("https://api.openai.com/v1/chat/completions")
    assert not is_local("https://api.anthropic.com/v1/messages")
    assert not is_local("https://generativelanguage.googleapis.com/v1beta/models/x:generateContent")
    assert is_local("http://127.0.0.1:8080/v1/chat/completions")
    assert is_local("https://openrouter.ai/api/v1/chat/completions")


# --- asking a local server --------------------------------------------------------------------------------------


async def test_llama_cpp_reports_the_context_of_a_slot_not_the_trained_one() -> None:
    local = LocalServer("llama.cpp", context_window=8192, trained_window=131_072)
    with FakeProviderServer([], local=local) as server:
        found = await probe(server.openai_base_url, "local-model")
    assert found == ModelLimits(8192, None, "llama.cpp /props", local=True)
    assert [r.path for r in server.requests] == ["/v1/models", "/props"]


async def test_vllm_reports_max_model_len() -> None:
    with FakeProviderServer([], local=LocalServer("vllm", context_window=32_768, model="Qwen/Qwen3-8B")) as server:
        found = await probe(server.base_url, "Qwen/Qwen3-8B", api_key="secret")
    assert found == ModelLimits(32_768, None, "vLLM /v1/models", local=True)
    assert server.requests[0].headers["authorization"] == "Bearer secret"


async def test_ollama_reports_the_context_of_the_loaded_model() -> None:
    local = LocalServer("ollama", context_window=32_768, model="llama3.2:3b")
    with FakeProviderServer([], local=local) as server:
        found = await probe(server.openai_base_url, "llama3.2:3b")
    assert found == ModelLimits(32_768, None, "Ollama /api/ps", local=True)


async def test_an_ollama_model_not_loaded_is_loaded_then_asked() -> None:
    local = LocalServer("ollama", context_window=16_384, model="llama3.2:3b", loaded=False)
    with FakeProviderServer([], local=local) as server:
        found = await probe(server.openai_base_url, "llama3.2:3b")
    assert found == ModelLimits(16_384, None, "Ollama /api/ps", local=True)
    load = [r for r in server.requests if r.path == "/api/generate"]
    assert [r.body for r in load] == [{"model": "llama3.2:3b"}]


async def test_ollama_unloadable_falls_back_to_num_ctx_then_to_its_smallest_default() -> None:
    local = LocalServer("ollama", context_window=16_384, model="m:latest", loaded=False, num_ctx=12_000, loadable=False)
    with FakeProviderServer([], local=local) as server:
        found = await probe(server.openai_base_url, "other")  # not a model it has
        assert found is None
        local.model = "other"
        found = await probe(server.openai_base_url, "other")
    assert found == ModelLimits(12_000, None, "Ollama /api/show", local=True)


async def test_a_server_that_reports_nothing_gives_none() -> None:
    with FakeProviderServer([]) as server:  # a plain OpenAI-compatible server: every question is a 404
        assert await probe(server.openai_base_url, "m") is None
    with socket.socket() as s:  # nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert await probe(f"http://127.0.0.1:{port}/v1", "m", timeout=1.0) is None


@pytest.mark.parametrize("trained", [2_048, 131_072])
async def test_ollama_without_any_report_gets_its_smallest_default(trained: int) -> None:
    local = LocalServer("ollama", model="m", loaded=False, trained_window=trained, loadable=False)
    with FakeProviderServer([], local=local) as server:
        found = await probe(server.openai_base_url, "m")
    assert found == ModelLimits(min(trained, OLLAMA_DEFAULT_CONTEXT), None, "Ollama's default", local=True)
