"""What the DBOS and Temporal adapters share: the rule for a loop's name, the stable names of its effects,
and the settings a durable loop holds for its effects.

Pure: no I/O.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterable, Sequence

from loopctl.engine.config import SessionConfig
from loopctl.engine.events import Observer
from loopctl.engine.permission import PermissionCallback
from loopctl.providers.base import ModelClient
from loopctl.tool import Tool, ToolRegistry

__all__ = ["NAME_RULE", "DurableLoop", "EffectNames", "with_own_budget"]

NAME_RULE = re.compile(r"[A-Za-z0-9_-]{1,200}")
"""A durable loop's name: 1-200 letters, digits, ``_`` or ``-`` (no ``.``: it separates the parts of the
names derived from it)."""


class EffectNames:
    """The stable names of a loop's effects (compatibility data: ``docs/durable.md``): ``model``
    (``<name>.model``), ``summarize`` (``<name>.summarize``) and :meth:`tool` (``<name>.tool.<tool>``).
    Raises ``ValueError`` for a name that breaks :data:`NAME_RULE`."""

    __slots__ = ("model", "name", "summarize")

    def __init__(self, name: str) -> None:
        if not NAME_RULE.fullmatch(name):
            raise ValueError(
                "a durable loop's name must be 1-200 letters, digits, '_' or '-' (it prefixes the stable names "
                f"of its steps and activities), got {name!r}"
            )
        self.name = name
        self.model = f"{name}.model"
        self.summarize = f"{name}.summarize"

    def tool(self, tool_name: str) -> str:
        """The name of a call to the tool ``tool_name``."""
        return f"{self.name}.tool.{tool_name}"


class DurableLoop:
    """The settings of a durable loop, as :class:`~loopctl.engine.BareLoop` takes them: the model
    ``client``, the ``tools``, the session ``config``, the ``observers`` and the ``permission`` callback."""

    def __init__(
        self,
        client: ModelClient,
        tools: ToolRegistry | Iterable[Tool],
        config: SessionConfig | None,
        observers: Sequence[Observer],
        permission: PermissionCallback | None,
    ) -> None:
        self.client = client
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.config = config or SessionConfig()
        self.observers = list(observers)
        self.permission = permission


def with_own_budget(config: SessionConfig) -> SessionConfig:
    """``config`` with a private copy of its budget. The token counter calibrates itself as replies come in;
    a run that starts from a copy counts (and so prunes and compacts) the same way each time it is run again
    against its records."""
    if config.budget is None:
        return config
    return dataclasses.replace(config, budget=copy.deepcopy(config.budget))
