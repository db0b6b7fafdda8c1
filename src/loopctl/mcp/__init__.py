"""Tools from MCP servers (``docs/mcp.md``): :class:`MCPServerStdio` and :class:`MCPServerHTTP`, each an async
context manager whose tools a ``BareLoop`` runs (``tools=[my_tool, server]``).

Needs the ``[mcp]`` extra (the official ``mcp`` SDK, version 2). See :mod:`loopctl.mcp.servers` for what the
servers do about timeouts, tool-list changes, dropped connections and tasks, and :mod:`loopctl.mcp.convert`
for how results map to tool output.
"""

from loopctl.mcp.servers import BaseMCPServer, MCPConnectionError, MCPServerHTTP, MCPServerStdio, MCPTool

__all__ = ["BaseMCPServer", "MCPConnectionError", "MCPServerHTTP", "MCPServerStdio", "MCPTool"]
