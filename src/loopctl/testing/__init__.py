"""Test doubles: a scripted model client (no network; priced if asked), :class:`TestModel` (calls every tool
with arguments valid for its schema, then answers), and a fake provider server speaking the real wire
formats over HTTP on 127.0.0.1 (:mod:`loopctl.testing.server`, encoders in :mod:`loopctl.testing.wire`),
plus the scripted demo model of ``loopctl run --model demo`` (:mod:`loopctl.testing.demo`)."""

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
