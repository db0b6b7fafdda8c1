"""Pricing: recorded replies priced at the price table's rates for each count of their usage, ``None`` where
the price is unknown, and the data that ships with genai-prices (never fetched)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import genai_prices
import pytest
from genai_prices.data_snapshot import get_snapshot
from genai_prices.types import TieredPrices

from loopctl.engine import BareLoop, RunConfig
from loopctl.message import Message, MessagePart, Role
from loopctl.pricing import price
from loopctl.providers import anthropic, gemini, openai_chat, openai_responses
from loopctl.response import ModelResponse, Usage
from loopctl.testing import ScriptedClient
from loopctl.tool import tool
from tests.transport.test_one_stack import loaded_after

TRAFFIC = Path(__file__).parent / "fixtures" / "provider-traffic"
MILLION = Decimal(1_000_000)


def _rate(value: Any) -> Decimal:
    """A per-million rate of the table (the base rate of a tiered one: these replies are under every tier)."""
    if value is None:
        return Decimal(0)
    return value.base if isinstance(value, TieredPrices) else Decimal(value)


def table_price(usage: Usage, model: str, provider_id: str) -> Decimal:
    """The price from the table's own rates: uncached input, cache reads and writes, output (reasoning included)."""
    _, info = get_snapshot().find_provider_model(model, None, provider_id, None)
    rates = info.prices if not isinstance(info.prices, list) else info.prices[-1].prices
    read, written = usage.cache_read_tokens or 0, usage.cache_write_tokens or 0  # not reported: none
    assert usage.input_tokens is not None and usage.output_tokens is not None
    uncached = usage.input_tokens - read - written
    return (
        uncached * _rate(rates.input_mtok)
        + read * _rate(rates.cache_read_mtok)
        + written * _rate(rates.cache_write_mtok)
        + usage.output_tokens * _rate(rates.output_mtok)
    ) / MILLION


RECORDED = [
    # (codec, recording, provider, genai-prices provider, what the usage holds)
    (anthropic, "anthropic/cache-creation-and-read", "anthropic", "anthropic", "cache reads and writes"),
    (openai_chat, "openai/chat-cached-tokens", "openai", "openai", "cache reads"),
    (openai_chat, "openai/chat-o3-mini-reasoning-usage", "openai", "openai", "reasoning tokens"),
    (openai_responses, "openai/responses-reasoning-tool", "openai", "openai", "reasoning tokens"),
    (gemini, "gemini/implicit-cache-usage", "gemini", "google", "cache reads and thoughts"),
]


@pytest.mark.parametrize(("codec", "recording", "provider", "provider_id", "what"), RECORDED)
def test_a_recorded_reply_costs_the_price_tables_value_for_its_usage(
    codec: Any, recording: str, provider: str, provider_id: str, what: str
) -> None:
    reply: ModelResponse = codec.parse_response(json.loads((TRAFFIC / f"{recording}.response.json").read_text()))
    assert reply.model is not None
    cost = price(reply.usage, reply.model, provider=provider)
    assert cost is not None and cost > 0
    assert cost == table_price(reply.usage, reply.model, provider_id)


def test_the_recorded_anthropic_reply_in_dollars() -> None:
    # 3 uncached input tokens at $3/MTok, 4597 cache reads at $0.30, 598 cache writes at $3.75, 350 output at $15.
    body = json.loads((TRAFFIC / "anthropic/cache-creation-and-read.response.json").read_text())
    reply = anthropic.parse_response(body)
    assert reply.usage == Usage(5198, 350, 4597, 598)
    expected = (3 * Decimal(3) + 4597 * Decimal("0.3") + 598 * Decimal("3.75") + 350 * Decimal(15)) / MILLION
    assert price(reply.usage, reply.model, provider="anthropic") == expected == Decimal("0.0088806")


def test_cached_tokens_are_cheaper_than_uncached_ones() -> None:
    cold = price(Usage(10_000, 100), "gpt-4o", provider="openai")
    warm = price(Usage(10_000, 100, cache_read_tokens=8_000), "gpt-4o", provider="openai")
    assert cold is not None and warm is not None
    assert cold - warm == 8_000 * (Decimal("2.5") - Decimal("1.25")) / MILLION


@pytest.mark.parametrize(
    ("model", "provider", "api_url"),
    [
        ("no-such-model-7b", "openai", None),  # not in the price data
        ("gpt-4o", "scripted", None),  # a provider genai-prices does not price
        ("gpt-4o", "openai", "http://127.0.0.1:8000/v1/chat/completions"),  # a server of one's own, not OpenAI
        (None, "openai", None),  # no model named
    ],
)
def test_an_unknown_price_is_none_never_a_guess(model: str | None, provider: str, api_url: str | None) -> None:
    assert price(Usage(1000, 100), model, provider=provider, api_url=api_url) is None


LOCAL_URLS = [
    "http://127.0.0.1:8080/v1/chat/completions",
    "http://localhost:11434/v1/chat/completions",
    "http://[::1]:8000/v1/messages",
    "https://10.0.0.5/v1/responses",
    "http://llm.localhost/v1/chat/completions",
]


@pytest.mark.parametrize("api_url", LOCAL_URLS)
def test_a_server_of_ones_own_is_known_without_loading_the_price_data(api_url: str) -> None:
    # A run against a local server (llama.cpp, Ollama, a test server) loaded genai-prices and its whole price
    # data (about 44,000 objects, a quarter of a second) to find that no provider's API is at that URL.
    code = (
        "from loopctl.pricing import price\n"
        "from loopctl.response import Usage\n"
        f"assert price(Usage(1000, 100), 'gpt-4o', provider='openai', api_url={api_url!r}) is None"
    )
    assert loaded_after(code, ("genai_prices",)) == []


@pytest.mark.parametrize("api_url", LOCAL_URLS)
def test_the_price_data_itself_has_no_provider_at_a_local_host(api_url: str) -> None:
    # The rule the shortcut above relies on: genai-prices finds a provider's API by its domain name
    # (each provider's api_pattern), so no provider is found at localhost or an IP address.
    with pytest.raises(LookupError):
        get_snapshot().find_provider(None, None, api_url)


def test_a_host_that_is_no_ip_address_is_looked_up_in_the_price_data() -> None:
    code = (
        "from loopctl.pricing import price\n"
        "from loopctl.response import Usage\n"
        "assert price(Usage(1000, 100), 'gpt-4o', provider='openai', api_url='https://gw.example.com/v1') is None\n"
        "assert price(Usage(1000, 100), 'gpt-4o', provider='openai', api_url='https://api.openai.com/v1') > 0"
    )
    assert loaded_after(code, ("genai_prices",)) == ["genai_prices"]


def test_the_providers_own_api_keeps_its_price() -> None:
    usage = Usage(1000, 100)
    direct = price(usage, "claude-sonnet-4-5", provider="anthropic")
    assert direct is not None
    assert price(usage, "claude-sonnet-4-5", provider="anthropic", api_url="https://api.anthropic.com/v1/messages") == (
        direct
    )


def test_prices_come_from_the_data_that_ships_with_the_package() -> None:
    price(Usage(10, 10), "gpt-4o", provider="openai")
    snapshot = genai_prices.data_snapshot.get_snapshot()
    assert snapshot.from_auto_update is False  # no UpdatePrices was started: nothing was fetched


@tool
async def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


class PricedScript(ScriptedClient):
    """A scripted client that says it is Anthropic's, so its replies are priced."""

    provider = "anthropic"


async def test_each_turn_and_the_run_carry_their_cost() -> None:
    usage = Usage(2_000, 300, cache_read_tokens=1_500)
    client = PricedScript(
        [Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "add", {"a": 2, "b": 40})]), "42"],
        model="claude-sonnet-4-5",
        usage=usage,
    )
    run = await BareLoop(client, [add]).run("2 + 40?", RunConfig(stream=False))
    one = price(usage, "claude-sonnet-4-5", provider="anthropic")
    assert one == (500 * 3 + 1500 * Decimal("0.3") + 300 * 15) / MILLION
    assert [t.cost for t in run.turns] == [one, one]
    assert [(t.provider, t.model) for t in run.turns] == [("anthropic", "claude-sonnet-4-5")] * 2
    assert run.cost == 2 * one


async def test_a_run_with_a_reply_of_unknown_price_has_no_cost() -> None:
    run = await BareLoop(ScriptedClient(["hi"], model="no-such-model")).run("hello")
    assert run.turns[0].cost is None and run.cost is None


@pytest.mark.parametrize(
    ("usage", "provider", "model"),
    [
        (Usage(10, 5, cache_read_tokens=100), "openai", "gpt-4o"),
        (Usage(100, 5, cache_read_tokens=80, cache_write_tokens=80), "anthropic", "claude-sonnet-4-5"),
    ],
)
def test_usage_the_price_data_refuses_as_inconsistent_has_no_price(usage: Usage, provider: str, model: str) -> None:
    # genai-prices raises ValueError for cache reads (and writes, for Anthropic) above the input tokens: a
    # client that counts input without its cached tokens. The price is unknown, never a guess, never an error.
    with pytest.raises(ValueError, match="Invalid usage data"):
        genai_prices.calc_price(
            genai_prices.Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
            ),
            model,
            provider_id=provider,
        )
    assert price(usage, model, provider=provider) is None


async def test_a_reply_whose_usage_cannot_be_priced_leaves_the_run_going_or_stops_a_cost_limit() -> None:
    from loopctl.engine import UsageLimits
    from loopctl.errors import CostUnknown

    bad = Usage(10, 5, cache_read_tokens=100)
    reply = Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "add", {"a": 2, "b": 40})])
    run = await BareLoop(PricedScript([reply, "42"], model="claude-sonnet-4-5", usage=bad), [add]).run("2 + 40?")
    assert run.ok and run.output == "42" and [t.cost for t in run.turns] == [None, None] and run.cost is None
    limited = BareLoop(PricedScript([reply, "42"], model="claude-sonnet-4-5", usage=bad), [add])
    run = await limited.run("2 + 40?", RunConfig(limits=UsageLimits(cost=Decimal("1"))))
    assert run.outcome.error_type == "CostUnknown" and isinstance(run.error, CostUnknown)
