"""Tools and client features of MCP servers (``docs/mcp.md``): :class:`MCPServerStdio` and :class:`MCPServerHTTP`,
each an async context manager whose tools a ``BareLoop`` runs (``tools=[my_tool, server]``), and which answers
the server's requests: sampling (:mod:`loopctl.mcp.sampling`), elicitation (:mod:`loopctl.mcp.elicitation`),
roots; with progress, logs, resources and prompts (:mod:`loopctl.mcp.resources`).

Needs the ``[mcp]`` extra (the official ``mcp`` SDK, version 2). See :mod:`loopctl.mcp.servers` for what the
servers do about timeouts, tool-list changes, dropped connections and tasks, and :mod:`loopctl.mcp.convert`
for how results map to tool output.
"""

try:
    import mcp as _mcp_sdk  # noqa: F401  (the official SDK: every module here uses it)
except ModuleNotFoundError as exc:
    raise ImportError(f"loopctl.mcp needs the MCP SDK: pip install 'pyloopctl[mcp]' ({exc})") from exc

from loopctl.mcp.elicitation import Accept, Cancel, Decline, Elicitation, ElicitationAnswer, ElicitationHandler, Field
from loopctl.mcp.resources import MCPPrompt
from loopctl.mcp.sampling import SamplingHandler, SamplingRequest
from loopctl.mcp.servers import (
    BaseMCPServer,
    MCPConnectionError,
    MCPRequestError,
    MCPResourceTool,
    MCPServerHTTP,
    MCPServerStdio,
    MCPTool,
    Root,
    mcp_instructions,
)

__all__ = [
    "Accept",
    "BaseMCPServer",
    "Cancel",
    "Decline",
    "Elicitation",
    "ElicitationAnswer",
    "ElicitationHandler",
    "Field",
    "MCPConnectionError",
    "MCPPrompt",
    "MCPRequestError",
    "MCPResourceTool",
    "MCPServerHTTP",
    "MCPServerStdio",
    "MCPTool",
    "Root",
    "SamplingHandler",
    "SamplingRequest",
    "mcp_instructions",
]
