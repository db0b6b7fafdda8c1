"""The type variables of :class:`~loopctl.agent.Agent` (their own module: the agent and its conversations
both use them)."""

from __future__ import annotations

from typing_extensions import TypeVar

__all__ = ["AgentDepsT", "AgentOutputT"]

AgentDepsT = TypeVar("AgentDepsT", default=None, contravariant=True)  # noqa: PLC0105 - the public name
"""The type of the ``deps`` an agent's runs take (``deps_type=``; ``None`` when it takes none)."""

AgentOutputT = TypeVar("AgentOutputT", default=str, covariant=True)  # noqa: PLC0105 - the public name
"""The type of an agent's output (``output_type=``; ``str`` by default)."""
