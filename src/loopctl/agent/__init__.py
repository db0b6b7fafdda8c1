"""The agent: a frozen definition (model, tools, instructions, output type, deps type) that serves any number
of conversations at once, with sub-agents and handoffs (``docs/agent.md``).

``Agent`` is the definition; ``agent.run(prompt)`` runs it on a fresh conversation, ``agent.session(id,
store=...)`` gives a :class:`Conversation` kept in a session store. Each run drives a
:class:`~loopctl.engine.BareLoop` (the per-conversation driver) over the conversation's
:class:`~loopctl.engine.LoopMachine`.
"""

from loopctl.agent._agent import Agent
from loopctl.agent._conversation import PARENT_KEY, Conversation
from loopctl.agent._tools import AgentTool, Handoff, HandoffTool, InputFilter
from loopctl.agent._types import AgentDepsT, AgentOutputT

__all__ = [
    "PARENT_KEY",
    "Agent",
    "AgentDepsT",
    "AgentOutputT",
    "AgentTool",
    "Conversation",
    "Handoff",
    "HandoffTool",
    "InputFilter",
]
