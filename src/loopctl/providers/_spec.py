"""Model strings (``"provider:model"``): parsed and checked without importing a client or reading a key."""

from __future__ import annotations

from loopctl.errors import InvalidModelSpec

PREFIXES = ("openai", "openai-responses", "openai-responses-ws", "anthropic", "gemini")
"""The providers a model string may name, in the order errors list them."""

EXAMPLES = {
    "openai": "openai:gpt-5",
    "openai-responses": "openai-responses:gpt-5",
    "openai-responses-ws": "openai-responses-ws:gpt-5",
    "anthropic": "anthropic:claude-sonnet-4-5",
    "gemini": "gemini:gemini-2.5-flash",
}
"""A model string of each provider, for messages."""

DEMO_IN_CODE = (
    "'demo' is the scripted model of the command line (loopctl run --model demo), not a model string of the "
    "library: in code, loopctl.testing's TestModel() or ScriptedClient([...]) plays the model with no key "
    "(docs/guides/testing.md)"
)
"""What :func:`parse_model_spec` says of ``"demo"``, which only the command line takes."""

# Other frameworks' provider prefixes (pydantic-ai's ``google-gla:``, ``openai-chat:``...) that mean one of ours.
_ALIASES = {
    "openai-chat": "openai",
    "chat": "openai",
    "responses": "openai-responses",
    "google": "gemini",
    "google-gla": "gemini",
    "google-vertex": "gemini",
    "claude": "anthropic",
}

# The first word of a bare model name (``gpt-5``, as the OpenAI Agents SDK takes it) and its provider.
_FAMILIES = (
    ("gpt", "openai"),
    ("chatgpt", "openai"),
    ("o1", "openai"),
    ("o3", "openai"),
    ("o4", "openai"),
    ("claude", "anthropic"),
    ("gemini", "gemini"),
)


def parse_model_spec(spec: str) -> tuple[str, str]:
    """``(provider, model)`` from ``"provider:model"``; the model keeps any colons of its own
    (``openai:org/model:tag``).

    Raises :class:`~loopctl.errors.InvalidModelSpec` for a provider that is not one of :data:`PREFIXES` or
    an empty model name (and for ``"demo"``, saying what plays the model in code), with a suggestion where
    the string is another framework's spelling of one of ours (``"gpt-5"`` → ``"openai:gpt-5"``,
    ``"google-gla:gemini-2.5-flash"`` → ``"gemini:gemini-2.5-flash"``).
    """
    known = tuple(f"{p}:MODEL" for p in PREFIXES)
    prefix, sep, model = spec.partition(":")
    if sep and prefix in PREFIXES:
        if not model.strip():
            problem = f"model spec {spec!r} has no model name (for example {EXAMPLES[prefix]})"
            raise InvalidModelSpec(spec, problem, known=known)
        return prefix, model
    if spec.strip().lower() == "demo":
        raise InvalidModelSpec(spec, DEMO_IN_CODE, known=known)
    raise InvalidModelSpec(spec, f"unknown model spec {spec!r}", known=known, suggestion=_suggest(spec))


def _suggest(spec: str) -> str | None:
    prefix, sep, model = spec.partition(":")
    if sep:
        provider = _ALIASES.get(prefix.strip().lower())
        return f"{provider}:{model}" if provider is not None and model.strip() else None
    name = spec.strip()
    first = name.lower().split("-", 1)[0]
    for family, provider in _FAMILIES:
        if first == family or (family == "gpt" and first.startswith("gpt")):
            return f"{provider}:{name}"
    return None
