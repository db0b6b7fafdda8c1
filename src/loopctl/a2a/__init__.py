"""Agents over the Agent2Agent (A2A) protocol, on the official ``a2a-sdk`` (``docs/a2a.md``): a loopctl
:class:`~loopctl.agent.Agent` served as an A2A agent (:func:`a2a_app`, :class:`AgentExecutor`,
:func:`agent_card`; ``loopctl a2a serve``), and remote A2A agents called as tools or sub-agents
(:class:`A2AAgent`).

Needs the ``[a2a]`` extra. Names are imported on first use, so ``import loopctl.a2a`` is cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loopctl.a2a.client import A2AAgent, A2AError, A2ALimitExceeded
    from loopctl.a2a.server import AgentExecutor, a2a_app, agent_card

__all__ = ["A2AAgent", "A2AError", "A2ALimitExceeded", "AgentExecutor", "a2a_app", "agent_card"]

_WHERE = {
    "A2AAgent": "loopctl.a2a.client",
    "A2AError": "loopctl.a2a.client",
    "A2ALimitExceeded": "loopctl.a2a.client",
    "AgentExecutor": "loopctl.a2a.server",
    "a2a_app": "loopctl.a2a.server",
    "agent_card": "loopctl.a2a.server",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'loopctl.a2a' has no attribute {name!r}")
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("a2a", "uvicorn", "starlette", "sse_starlette"):
            raise
        raise ImportError(f"loopctl.a2a needs the A2A SDK: pip install 'pyloopctl[a2a]' ({exc})") from exc
    return getattr(loaded, name)
