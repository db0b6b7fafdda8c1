"""Agents in web apps (``docs/web.md``): the AG-UI protocol and the Vercel AI SDK's UI message stream as ASGI
apps, and ``loopctl web``, a local chat and session browser.

- :class:`AGUIApp` (:mod:`loopctl.ui.ag_ui`; ``agent.to_ag_ui()``): AG-UI events over SSE for a
  ``RunAgentInput`` POST.
- :class:`AISDKApp` (:mod:`loopctl.ui.ai_sdk`; ``agent.to_ai_sdk()``): the UI message stream for ``useChat``.
- :mod:`loopctl.ui.web`: the app behind ``loopctl web``.

Needs the ``[web]`` extra (Starlette, uvicorn, ``ag-ui-protocol``). ``import loopctl`` never imports this
package, and importing it imports neither Starlette nor the protocol packages until a name is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loopctl.ui.ag_ui import AGUIApp
    from loopctl.ui.ai_sdk import AISDKApp

__all__ = ["AGUIApp", "AISDKApp"]


def __getattr__(name: str) -> Any:
    if name == "AGUIApp":
        from loopctl.ui.ag_ui import AGUIApp

        return AGUIApp
    if name == "AISDKApp":
        from loopctl.ui.ai_sdk import AISDKApp

        return AISDKApp
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
