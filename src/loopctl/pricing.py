"""What a model call cost, in USD: a reply's :class:`~loopctl.response.Usage` priced by pydantic's
``genai-prices`` (``pip install 'pyloopctl[prices]'``).

:func:`price` looks up the model in the price data that ships with ``genai-prices`` (no network: the package's
optional background updater, ``genai_prices.UpdatePrices``, is never started by loopctl) and prices every
count of the usage at its own rate: uncached input, cache reads, cache writes, output (reasoning tokens are
output tokens, and are passed as such for models that price them apart). Where the price is not known, the
answer is ``None``, never a guess:

- ``genai-prices`` is not installed;
- the provider is not one ``genai-prices`` prices (the test doubles' ``"scripted"``), or the client talks to
  a server of its own (an OpenAI-compatible server at a ``base_url`` other than the provider's own API:
  the same model name there is not the provider's price; at ``localhost`` or an IP address this is known
  without loading the price data);
- the model is not in the price data;
- the provider did not report the input or the output tokens (``None`` in the usage); cache counts it did not
  report are taken as no cache use;
- the usage is one ``genai-prices`` refuses as inconsistent: cache reads (or, for Anthropic, cache reads and
  writes) above the input tokens, as a client that reports input without its cached tokens gives.

The engine prices each reply (``Turn.cost``, ``Run.cost``) with the provider, model and API URL of the client
that answered. Pure apart from reading the package's data once, on the first call (about 0.4 s to import).
"""

from __future__ import annotations

import ipaddress
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from loopctl.response import Usage

__all__ = ["PROVIDER_IDS", "available", "price"]

PROVIDER_IDS: dict[str, str] = {
    "openai": "openai",
    "openai-responses": "openai",
    "anthropic": "anthropic",
    "gemini": "google",
}
"""``genai-prices``' provider id for each :attr:`ModelClient.provider <loopctl.providers.ModelClient>`."""


@lru_cache(maxsize=1)
def _prices() -> Any:
    try:
        import genai_prices
    except ImportError:
        return None
    return genai_prices


def available() -> bool:
    """Whether prices can be looked up (``genai-prices`` is installed)."""
    return _prices() is not None


def price(
    usage: Usage,
    model: str | None,
    *,
    provider: str,
    api_url: str | None = None,
    at: datetime | None = None,
) -> Decimal | None:
    """The price in USD of one model call that used ``usage``, on ``model`` of ``provider`` (a
    ``ModelClient.provider`` name), or ``None`` when it is not known (see the module docstring).

    ``api_url`` is the URL the client sends to, when it has one: it must be the provider's own API (as
    ``genai-prices`` matches it: ``https://api.openai.com``, ``https://api.anthropic.com``,
    ``https://…googleapis.com``) for the provider's price to apply. ``at`` is when the call was made, for
    prices that changed over time (default: now).
    """
    provider_id = PROVIDER_IDS.get(provider)
    if provider_id is None or not model:
        return None
    if api_url is not None and _own_server(api_url):
        return None  # decided without loading the price data (about 44,000 objects, a quarter of a second)
    lib = _prices()
    if lib is None:
        return None
    if api_url is not None and _api_provider(lib, api_url) != provider_id:
        return None
    if usage.input_tokens is None or usage.output_tokens is None:
        return None  # the provider did not say what was used: the price is not known (not $0)
    counts = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens or 0,  # not reported: no cache was used
        "cache_write_tokens": usage.cache_write_tokens or 0,
    }
    if usage.cache_write_1h_tokens:
        # Writes kept for an hour have their own rate (Anthropic: 2x the input price, against 1.25x for five
        # minutes); genai-prices takes the split as cache_write_5m_tokens / cache_write_1h_tokens.
        written = usage.cache_write_tokens or 0
        hour = min(usage.cache_write_1h_tokens, written)
        counts["cache_write_1h_tokens"] = hour
        counts["cache_write_5m_tokens"] = written - hour
    if usage.reasoning_tokens:
        counts["output_reasoning_tokens"] = usage.reasoning_tokens
    try:
        calculation = lib.calc_price(lib.Usage(**counts), model, provider_id=provider_id, genai_request_timestamp=at)
    except LookupError:  # a model the price data does not list
        return None
    except ValueError:
        # Usage genai-prices finds inconsistent (cache reads above the input tokens, or reads and writes above
        # them for Anthropic): a client or gateway that counts input without the cached tokens. Its price
        # cannot be known; a guess would be wrong either way.
        return None
    total: Decimal = calculation.total_price
    return total


@lru_cache(maxsize=64)
def _own_server(api_url: str) -> bool:
    """Whether ``api_url`` names a server of one's own: its host is ``localhost`` (or a name under it) or an IP
    address, which no provider's API is (``genai-prices`` matches every provider's API by its domain name), so
    the provider's price never applies there: a local llama.cpp, Ollama or vLLM server, a test server."""
    host = urlsplit(api_url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@lru_cache(maxsize=64)
def _api_provider(lib: Any, api_url: str) -> str | None:
    """The ``genai-prices`` provider whose API is at ``api_url``, or ``None``."""
    from genai_prices.data_snapshot import get_snapshot

    try:
        found = get_snapshot().find_provider(None, None, api_url)
    except LookupError:
        return None
    return str(found.id)
