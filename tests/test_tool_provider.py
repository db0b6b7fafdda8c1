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
