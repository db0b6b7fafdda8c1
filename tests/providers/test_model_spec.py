"""Model strings: a typo, or another framework's spelling, is refused with a typed error and a suggestion."""

from __future__ import annotations

import pytest

from loopctl import Agent
from loopctl.errors import InvalidModelSpec
from loopctl.providers import from_string
from loopctl.providers._spec import DEMO_IN_CODE, PREFIXES, parse_model_spec

KNOWN = "expected one of openai:MODEL, openai-responses:MODEL, openai-responses-ws:MODEL, anthropic:MODEL, gemini:MODEL"


@pytest.mark.parametrize(
    ("spec", "suggestion"),
    [
        ("gpt-4o", "openai:gpt-4o"),  # the OpenAI Agents SDK's bare model names
        ("gpt-5", "openai:gpt-5"),
        ("o3-mini", "openai:o3-mini"),
        ("claude-sonnet-4-5", "anthropic:claude-sonnet-4-5"),
        ("gemini-2.5-flash", "gemini:gemini-2.5-flash"),
        ("google-gla:gemini-2.5-flash", "gemini:gemini-2.5-flash"),  # pydantic-ai's provider names
        ("google-vertex:gemini-2.5-pro", "gemini:gemini-2.5-pro"),
        ("openai-chat:gpt-5", "openai:gpt-5"),
        ("mistral:large", None),
        ("llama3", None),
        ("", None),
    ],
)
def test_a_bad_spec_is_typed_and_suggests_what_it_likely_meant(spec: str, suggestion: str | None) -> None:
    with pytest.raises(InvalidModelSpec) as caught:
        from_string(spec, api_key="k")
    err = caught.value
    assert isinstance(err, ValueError)  # what from_string raised before: callers catching it still do
    assert err.spec == spec
    assert err.suggestion == suggestion
    hint = f"; did you mean {suggestion!r}?" if suggestion else ""
    assert str(err) == f"unknown model spec {spec!r}; {KNOWN}{hint}"


@pytest.mark.parametrize(
    ("spec", "example"),
    [("openai:", "openai:gpt-5"), ("anthropic: ", "anthropic:claude-sonnet-4-5"), ("gemini:", "gemini:gemini-2.5-flash")],
)
def test_a_spec_with_no_model_name_says_so(spec: str, example: str) -> None:
    with pytest.raises(InvalidModelSpec) as caught:
        parse_model_spec(spec)
    assert str(caught.value) == f"model spec {spec!r} has no model name (for example {example}); {KNOWN}"


def test_the_model_keeps_its_own_colons() -> None:
    assert parse_model_spec("openai:org/model:tag") == ("openai", "org/model:tag")
    assert [parse_model_spec(f"{p}:m")[0] for p in PREFIXES] == list(PREFIXES)


def test_an_agent_refuses_a_bad_model_string_when_it_is_made() -> None:
    # It was accepted, and the first run raised a plain ValueError.
    with pytest.raises(InvalidModelSpec, match="did you mean 'openai:gpt-4o'"):
        Agent("gpt-4o")
    Agent("openai:gpt-4o")  # no key needed to make one: the client is made on first use


@pytest.mark.parametrize("spec", ["demo", "Demo"])
def test_the_command_lines_demo_in_code_says_what_plays_the_model(spec: str) -> None:
    # Agent("demo"), after `loopctl run --model demo`, said only "unknown model spec 'demo'".
    with pytest.raises(InvalidModelSpec) as caught:
        Agent(spec)
    assert (caught.value.problem, caught.value.suggestion) == (DEMO_IN_CODE, None)
    assert str(caught.value) == (
        "'demo' is the scripted model of the command line (loopctl run --model demo), not a model string of the "
        "library: in code, loopctl.testing's TestModel() or ScriptedClient([...]) plays the model with no key "
        f"(docs/guides/testing.md); {KNOWN}"
    )
