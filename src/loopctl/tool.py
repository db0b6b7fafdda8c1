"""Tools: what the model may call.

This module starts with :class:`ToolSchema`, the provider-neutral description of a tool that the request
builders convert to each provider's dialect. (The engine issue adds the ``Tool`` protocol, the ``@tool``
decorator, ``ToolOutput`` and ``ToolRegistry`` here.)

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, Union

__all__ = ["ForceTool", "ToolChoice", "ToolSchema"]


@dataclass(frozen=True, slots=True)
class ToolSchema:
    """A tool as the model sees it: ``name``, a ``description`` and a JSON Schema for its input.

    ``input_schema`` is a JSON Schema object (``{"type": "object", "properties": {...}, "required": [...]}``)
    in full JSON Schema; each request builder converts it to its provider's dialect.
    """

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(frozen=True, slots=True)
class ForceTool:
    """A ``tool_choice`` that makes the model call the tool ``name``."""

    name: str


ToolChoice: TypeAlias = Union[Literal["auto", "none", "required"], ForceTool]
"""``"auto"`` (the model decides), ``"none"`` (no tool calls), ``"required"`` (at least one call, any tool),
or :class:`ForceTool` (that tool)."""
