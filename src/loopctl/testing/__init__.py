"""Test doubles: a scripted model client (no network; priced if asked), :class:`TestModel` (calls every tool
with arguments valid for its schema, then answers), and a fake provider server speaking the real wire
formats over HTTP on 127.0.0.1 (:mod:`loopctl.testing.server`, encoders in :mod:`loopctl.testing.wire`),
plus the scripted demo model of ``loopctl run --model demo`` (:mod:`loopctl.testing.demo`)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # each name's module is imported when the name is first used (PEP 562)
    from loopctl.testing.models import TestModel
    from loopctl.testing.scripted import Delay, ScriptedClient, ScriptExhausted
    from loopctl.testing.server import (
        CutStream,
        FakeProviderServer,
        FakeServerError,
        RecordedRequest,
        Replay,
        Responder,
        StreamError,
    )
    from loopctl.testing.wire import ErrorReply
    from loopctl.testing.wire.local import LocalServer

__all__ = [
    "CutStream",
    "Delay",
    "ErrorReply",
    "FakeProviderServer",
    "FakeServerError",
    "LocalServer",
    "RecordedRequest",
    "Replay",
    "Responder",
    "ScriptExhausted",
    "ScriptedClient",
    "StreamError",
    "TestModel",
]

# Each name's module, imported on first use: ``loopctl run --model demo`` loads the fake server without the
# scripted clients and ``TestModel`` (docs/performance.md, section 2).
_MODULES = {
    "TestModel": "loopctl.testing.models",
    "Delay": "loopctl.testing.scripted",
    "ScriptedClient": "loopctl.testing.scripted",
    "ScriptExhausted": "loopctl.testing.scripted",
    "CutStream": "loopctl.testing.server",
    "FakeProviderServer": "loopctl.testing.server",
    "FakeServerError": "loopctl.testing.server",
    "RecordedRequest": "loopctl.testing.server",
    "Replay": "loopctl.testing.server",
    "Responder": "loopctl.testing.server",
    "StreamError": "loopctl.testing.server",
    "ErrorReply": "loopctl.testing.wire",
    "LocalServer": "loopctl.testing.wire.local",
}


if not TYPE_CHECKING:  # hidden from mypy, which checks the names as the imports above declare them

    def __getattr__(name: str) -> Any:
        module = _MODULES.get(name)
        if module is None:
            raise AttributeError(f"module 'loopctl.testing' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # looked up once
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
