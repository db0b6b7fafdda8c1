"""What a model can take and give: its context window and its output-token limit, from where they are known.

Three sources, the first that knows winning:

1. **The server itself**, for a model served locally (:func:`probe`): llama.cpp's ``llama-server`` reports
   the context of a slot at ``GET /props`` (``default_generation_settings.n_ctx``; its ``/v1/models`` gives
   only ``meta.n_ctx_train``, the context the model was trained for, not the one it runs with); vLLM lists
   each model's ``max_model_len`` at ``GET /v1/models``; Ollama lists the ``context_length`` a loaded model
   runs with at ``GET /api/ps``, and ``POST /api/show`` gives a Modelfile's ``num_ctx``. (The sources, and
   the fake server that plays each: :mod:`loopctl.testing.wire.local`.)
2. **The provider's published context window**, from the price data of ``genai-prices`` (the ``prices``
   extra; ``ModelInfo.context_window``, kept current by its maintainers and shipped with the package: no
   network), for the providers :mod:`loopctl.pricing` prices.
3. **The table below** (:data:`PUBLISHED`), for the output limits (which ``genai-prices`` does not carry) and
   for the windows it lacks, each row from its provider's model pages: platform.openai.com/docs/models,
   docs.claude.com/en/docs/about-claude/models/overview, ai.google.dev/gemini-api/docs/models.

A model none of them knows keeps the engine's default window, :data:`DEFAULT_CONTEXT_WINDOW` (200,000).

:func:`default_max_tokens` is the output limit ``loopctl run`` sends when ``--max-tokens`` is not given (a
local server, asked for nothing, generates until its context is full). :func:`input_window` is the window the
conversation may fill: the context less the reply's room, since every provider counts the reply in the
context too.

Pure apart from :func:`probe` (HTTP) and reading ``genai-prices``' data once.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, TypeGuard
from urllib.parse import urlsplit

from loopctl._frozen import dataclass

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MAX_TOKENS",
    "LOCAL_MAX_TOKENS",
    "MAX_TOKENS_CAP",
    "OFFICIAL_HOSTS",
    "OLLAMA_DEFAULT_CONTEXT",
    "PUBLISHED",
    "ModelLimits",
    "default_max_tokens",
    "input_window",
    "is_local",
    "probe",
    "published",
    "server_root",
]

DEFAULT_CONTEXT_WINDOW = 200_000
"""The window, in tokens, of a model nothing knows (the engine's default)."""

DEFAULT_MAX_TOKENS = 8_192
"""The output limit sent for a provider's model whose own limit is not known (Anthropic's codec default)."""

LOCAL_MAX_TOKENS = 8_192
"""The most a local server is asked to generate by default; it gets at most a quarter of its context, so the
conversation keeps three quarters. A server that reports nothing gets half of this."""

MAX_TOKENS_CAP = 32_000
"""The most any model is asked to generate by default, whatever its own limit (a reasoning model's thinking
counts in it)."""

OLLAMA_DEFAULT_CONTEXT = 4_096
"""The context Ollama gives a model when nothing else says: the smallest of its defaults ("4k/32k/256k based on
VRAM", envconfig/config.go ``OLLAMA_CONTEXT_LENGTH``). Ollama drops the oldest messages of a prompt longer than
that without a word (server/prompt.go ``chatPrompt``), so the smallest is the safe guess."""

OFFICIAL_HOSTS = frozenset({"api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com"})
"""The providers' own API hosts: a client sending anywhere else talks to a server of its own, which
:func:`probe` asks."""


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """A model's ``context_window`` (tokens in and out of one call, together) and ``max_output_tokens`` (the
    most one reply may hold), each ``None`` when not known, and where they were learnt (``source``: ``"llama.cpp
    /props"``, ``"vLLM /v1/models"``, ``"Ollama /api/ps"``, ``"Ollama /api/show"``, ``"genai-prices"``,
    ``"table"``, or two of them joined by ``" + "``)."""

    context_window: int | None
    max_output_tokens: int | None
    source: str
    local: bool = False
    """Whether the limits come from a server of one's own (its context holds the prompt and the reply)."""


# --- published limits -------------------------------------------------------------------------------------------

PUBLISHED: Mapping[str, Mapping[str, tuple[int, int]]] = {
    # platform.openai.com/docs/models (each model's page: "context window", "max output tokens").
    "openai": {
        "gpt-5": (400_000, 128_000),
        "gpt-4.1": (1_047_576, 32_768),
        "gpt-4o": (128_000, 16_384),
        "gpt-4-turbo": (128_000, 4_096),
        "gpt-4": (8_192, 8_192),
        "gpt-3.5-turbo": (16_385, 4_096),
        "o1": (200_000, 100_000),
        "o3": (200_000, 100_000),
        "o4-mini": (200_000, 100_000),
    },
    # docs.claude.com/en/docs/about-claude/models/overview and each model's page ("Context window", "Max output").
    "anthropic": {
        "claude-opus-5": (1_000_000, 128_000),
        "claude-opus-4-5": (200_000, 64_000),
        "claude-opus-4-1": (200_000, 32_000),
        "claude-opus-4": (200_000, 32_000),
        "claude-sonnet-4-5": (200_000, 64_000),
        "claude-sonnet-4": (200_000, 64_000),
        "claude-haiku-4-5": (200_000, 64_000),
        "claude-3-7-sonnet": (200_000, 64_000),
        "claude-3-5-sonnet": (200_000, 8_192),
        "claude-3-5-haiku": (200_000, 8_192),
        "claude-3-opus": (200_000, 4_096),
        "claude-3-haiku": (200_000, 4_096),
    },
    # ai.google.dev/gemini-api/docs/models ("Input token limit", "Output token limit").
    "gemini": {
        "gemini-2.5-pro": (1_048_576, 65_536),
        "gemini-2.5-flash": (1_048_576, 65_536),
        "gemini-2.0-flash": (1_048_576, 8_192),
        "gemini-1.5-pro": (2_097_152, 8_192),
        "gemini-1.5-flash": (1_048_576, 8_192),
    },
}
"""Per provider family (``openai``, ``anthropic``, ``gemini``), a model name prefix and its ``(context window,
max output tokens)`` as the provider publishes them. The longest prefix that starts the model name wins
(``claude-opus-4-1-20250805`` is ``claude-opus-4-1``; ``gpt-4o-mini`` is ``gpt-4o``)."""

_FAMILY = {"openai": "openai", "openai-responses": "openai", "anthropic": "anthropic", "gemini": "gemini"}


def published(provider: str, model: str) -> ModelLimits | None:
    """The published limits of ``model`` at ``provider`` (a ``ModelClient.provider`` name): the context window
    from ``genai-prices`` when it is installed and knows the model, else from :data:`PUBLISHED`, and the output
    limit from :data:`PUBLISHED`. ``None`` when neither knows the model."""
    family = _FAMILY.get(provider)
    if family is None or not model:
        return None
    name = model.lower().removeprefix("models/")
    row = _table_row(family, name)
    window = _genai_prices_window(provider, name)
    if window is None and row is None:
        return None
    if window is not None:
        source = "genai-prices" if row is None else "genai-prices + table"
        return ModelLimits(window, row[1] if row else None, source)
    assert row is not None
    return ModelLimits(row[0], row[1], "table")


def _table_row(family: str, name: str) -> tuple[int, int] | None:
    rows = PUBLISHED[family]
    best = max((p for p in rows if name.startswith(p)), key=len, default=None)
    return rows[best] if best is not None else None


@lru_cache(maxsize=256)
def _genai_prices_window(provider: str, model: str) -> int | None:
    from loopctl import pricing

    provider_id = pricing.PROVIDER_IDS.get(provider)
    if provider_id is None or not pricing.available():
        return None
    from genai_prices.data_snapshot import get_snapshot

    try:
        _, info = get_snapshot().find_provider_model(model, None, provider_id, None)
    except LookupError:
        return None
    window = getattr(info, "context_window", None)
    return window if isinstance(window, int) and window > 0 else None


# --- what a run asks for ----------------------------------------------------------------------------------------


def default_max_tokens(limits: ModelLimits | None, *, local: bool = False) -> int:
    """The output limit to send when the caller set none, in tokens: for a server of one's own (``local``, or
    limits it reported), a quarter of its context and at most :data:`LOCAL_MAX_TOKENS` (half of that when its
    context is not known); for a provider's model, its own limit, at most :data:`MAX_TOKENS_CAP`, else
    :data:`DEFAULT_MAX_TOKENS`."""
    local = local or (limits is not None and limits.local)
    window = limits.context_window if limits is not None else None
    out = limits.max_output_tokens if limits is not None else None
    if local:
        most = LOCAL_MAX_TOKENS // 2 if window is None else max(256, min(LOCAL_MAX_TOKENS, window // 4))
        return min(most, out) if out is not None else most
    if out is not None:
        return min(out, MAX_TOKENS_CAP)
    return DEFAULT_MAX_TOKENS if window is None else min(DEFAULT_MAX_TOKENS, max(256, window // 4))


def input_window(context_window: int, max_tokens: int | None) -> int:
    """The tokens a conversation may hold when each reply may take ``max_tokens`` of ``context_window``: the
    difference, and never less than half the window."""
    if max_tokens is None:
        return context_window
    return max(context_window - max_tokens, context_window // 2)


# --- asking a server ------------------------------------------------------------------------------------------


def is_local(api_url: str | None) -> bool:
    """Whether ``api_url`` is a server of one's own (any host but the providers' :data:`OFFICIAL_HOSTS`)."""
    if not api_url:
        return False
    host = urlsplit(api_url).hostname or ""
    return host not in OFFICIAL_HOSTS and not host.endswith(".googleapis.com")


# Compiled when first used (the re module's cache): a run that probes no local server does not compile them.
_ENDPOINTS = r"(/v1)?/(chat/completions|responses|messages)$|/v1beta/models/.*$|/v1(beta)?$"


def server_root(api_url: str) -> str:
    """The root of the server ``api_url`` (a client's ``api_url``) is on: the URL without the API's endpoint
    and version (``http://127.0.0.1:8080/v1/chat/completions`` is ``http://127.0.0.1:8080``; a prefix before
    them stays)."""
    return re.sub(_ENDPOINTS, "", api_url.rstrip("/"))


_NUM_CTX = r"^\s*num_ctx\s+(\d+)\s*$"


async def probe(
    base_url: str,
    model: str,
    *,
    api_key: str | None = None,
    timeout: float = 3.0,
    load_timeout: float = 120.0,
    http: Any = None,
) -> ModelLimits | None:
    """Ask the server at ``base_url`` (its API root, with or without the ``/v1`` of an OpenAI-compatible URL)
    how big ``model``'s context is: vLLM's ``GET /v1/models`` (``max_model_len``), llama.cpp's ``GET /props``
    (``default_generation_settings.n_ctx``), then Ollama's ``GET /api/ps`` (the ``context_length`` a loaded
    model runs with). An Ollama model not loaded yet is loaded first, as Ollama's own launcher does (``POST
    /api/generate`` with only the model, waiting at most ``load_timeout`` seconds), since the context it gets
    depends on the machine; failing that, a Modelfile's ``num_ctx`` (``POST /api/show``), else Ollama's
    smallest default, :data:`OLLAMA_DEFAULT_CONTEXT`. ``api_key`` is sent as a bearer token (vLLM's and
    llama.cpp's ``--api-key``). Each question waits at most ``timeout`` seconds; a server that answers none of
    them (a gateway, a server that is down) gives ``None``, never an error. ``http``: an
    ``httpx.AsyncClient`` to send with (default: a new one)."""
    import httpx

    base = base_url.rstrip("/")
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    owned = http is None
    client: httpx.AsyncClient = http if http is not None else httpx.AsyncClient(timeout=timeout)

    async def get_json(method: str, url: str, body: Any = None, *, wait: float = timeout) -> Any:
        try:
            request = client.request(method, url, json=body, headers=headers, timeout=wait)
            reply = await asyncio.wait_for(request, wait)
        except (TimeoutError, httpx.HTTPError, OSError):
            return None
        if reply.status_code != 200:
            return None
        try:
            return reply.json()
        except ValueError:
            return None

    try:
        listed = await get_json("GET", f"{root}/v1/models")
        for card in _cards(listed, model):
            n = card.get("max_model_len")
            if _positive(n):
                return ModelLimits(n, None, "vLLM /v1/models", local=True)
        props = await get_json("GET", f"{root}/props")
        if isinstance(props, dict):
            settings = props.get("default_generation_settings")
            n = settings.get("n_ctx") if isinstance(settings, dict) else None
            if _positive(n):
                return ModelLimits(n, None, "llama.cpp /props", local=True)
        running = await get_json("GET", f"{root}/api/ps")
        if not (isinstance(running, dict) and isinstance(running.get("models"), list)):
            return None
        n = _loaded_context(running, model)
        if n is not None:
            return ModelLimits(n, None, "Ollama /api/ps", local=True)
        shown = await get_json("POST", f"{root}/api/show", {"model": model})
        if not isinstance(shown, dict):
            return None  # a model this Ollama does not have: the run's first call says so
        # Not loaded: load it as Ollama's own launcher does (an empty generate request loads the model and
        # returns; cmd/launch/muse.go), and read the context it was loaded with.
        await get_json("POST", f"{root}/api/generate", {"model": model}, wait=load_timeout)
        n = _loaded_context(await get_json("GET", f"{root}/api/ps"), model)
        if n is not None:
            return ModelLimits(n, None, "Ollama /api/ps", local=True)
        found = re.search(_NUM_CTX, str(shown.get("parameters") or ""), re.MULTILINE)
        if found is not None:
            return ModelLimits(int(found.group(1)), None, "Ollama /api/show", local=True)
        trained = _trained_context(shown)
        window = OLLAMA_DEFAULT_CONTEXT if trained is None else min(trained, OLLAMA_DEFAULT_CONTEXT)
        return ModelLimits(window, None, "Ollama's default", local=True)
    finally:
        if owned:
            with contextlib.suppress(Exception):
                await client.aclose()


def _cards(listed: Any, model: str) -> list[dict[str, Any]]:
    """The model cards of a ``/v1/models`` reply that are ``model`` (all of them when the server serves one)."""
    data = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(data, list):
        return []
    cards = [c for c in data if isinstance(c, dict)]
    named = [c for c in cards if c.get("id") == model]
    return named or (cards if len(cards) == 1 else [])


def _loaded_context(running: Any, model: str) -> int | None:
    """The ``context_length`` Ollama's ``/api/ps`` reply gives ``model``, or ``None``."""
    entries = running.get("models") if isinstance(running, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and _same_model(model, entry.get("name"), entry.get("model")):
            n = entry.get("context_length")
            if _positive(n):
                return n
    return None


def _trained_context(shown: Mapping[str, Any]) -> int | None:
    """The ``<architecture>.context_length`` of Ollama's ``/api/show`` ``model_info``, or ``None``."""
    info = shown.get("model_info")
    if not isinstance(info, dict):
        return None
    n = info.get(f"{info.get('general.architecture')}.context_length")
    return n if _positive(n) else None


def _same_model(model: str, *names: Any) -> bool:
    """Whether one of ``names`` is ``model``, an Ollama tag of ``:latest`` being the same as none."""
    want = model.removesuffix(":latest")
    return any(isinstance(n, str) and n.removesuffix(":latest") == want for n in names)


def _positive(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
