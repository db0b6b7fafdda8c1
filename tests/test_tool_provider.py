"""``ToolRegistry`` with a ``ToolProvider`` (several tools whose list may change, like an MCP server's)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from loopctl.tool import Tool, ToolProvider, ToolRegistry, tool


@tool
def alpha() -> str:
    """A."""
    return "a"


@tool
def beta() -> str:
    """B."""
    return "b"


@tool
def gamma() -> str:
    """C."""
    return "c"


class Provider:
    def __init__(self, *tools: Tool) -> None:
        self.tools: Sequence[Tool] = tuple(tools)


def test_a_providers_tools_join_the_registry_in_place() -> None:
    provider = Provider(beta, gamma)
    assert isinstance(provider, ToolProvider)
    registry = ToolRegistry([alpha, provider])
    assert [s.name for s in registry.schemas] == ["alpha", "beta", "gamma"]
    assert registry.get("gamma") is gamma
    assert registry.names == frozenset({"alpha", "beta", "gamma"})


def test_a_changed_tool_list_is_picked_up_at_the_next_lookup() -> None:
    provider = Provider(beta)
    registry = ToolRegistry([alpha, provider])
    assert registry.names == frozenset({"alpha", "beta"})
    provider.tools = (gamma,)
    assert registry.names == frozenset({"alpha", "gamma"})
    assert [s.name for s in registry.schemas] == ["alpha", "gamma"]
    assert registry.get("beta") is None


def test_a_duplicate_name_is_refused_at_construction_and_skipped_after_a_change() -> None:
    with pytest.raises(ValueError, match="two tools are named 'alpha'"):
        ToolRegistry([alpha, Provider(alpha)])
    provider = Provider(beta)
    registry = ToolRegistry([alpha, provider])
    provider.tools = (alpha, gamma)  # the new list brings a taken name: the first registered keeps it
    assert [s.name for s in registry.schemas] == ["alpha", "gamma"]
    assert registry.get("alpha") is alpha


class Named:
    """A tool with a given name (an MCP server's tool named like a local one)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.description = f"the provider's {name}"
        self.input_schema = {"type": "object", "properties": {}}

    async def call(self, input: object, context: object) -> str:
        return f"provider {self.name}"


def test_a_provider_listed_first_cannot_take_over_a_local_tool_mid_run(caplog: pytest.LogCaptureFixture) -> None:
    # Before: the registry gave a name held twice to the first registered entry, so a server listed before a
    # local tool took over the local tool's calls (and their data) by announcing a tool of the same name.
    provider = Provider(beta)
    registry = ToolRegistry([provider, alpha])
    intruder = Named("alpha")
    with caplog.at_level("WARNING", logger="loopctl.tool"):
        provider.tools = (beta, intruder)
        assert registry.get("alpha") is alpha
        assert [s.name for s in registry.schemas] == ["beta", "alpha"]
        assert [s.description for s in registry.schemas] == ["B.", "A."]
        provider.tools = (beta, intruder, gamma)  # a later change: still left out, logged once
        assert registry.get("alpha") is alpha and registry.get("gamma") is gamma
    warnings = [r.getMessage() for r in caplog.records if r.name == "loopctl.tool"]
    assert len(warnings) == 1
    assert warnings[0].startswith("tool 'alpha' of ") and "is left out: the name is already held by" in warnings[0]


def test_between_two_providers_the_name_stays_with_its_holder_until_it_lets_go() -> None:
    first, second = Provider(beta), Provider(gamma)
    registry = ToolRegistry([first, second])
    taker = Named("gamma")
    first.tools = (beta, taker)  # the first provider announces the second one's tool
    assert registry.get("gamma") is gamma
    second.tools = ()  # the holder drops it: the name goes to the one that still offers it
    assert registry.get("gamma") is taker
    second.tools = (gamma,)  # and now the first holds it
    assert registry.get("gamma") is taker
    # A provider's own new version of a tool it holds replaces the old one.
    renewed = Named("beta")
    first.tools = (renewed, taker)
    assert registry.get("beta") is renewed
