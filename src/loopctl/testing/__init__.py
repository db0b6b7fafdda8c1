"""Test doubles: a scripted model client (no network) and, in :mod:`loopctl.testing.server`, a fake provider
server speaking the real wire formats over HTTP on 127.0.0.1."""

from loopctl.testing.scripted import ScriptedClient, ScriptExhausted

__all__ = ["ScriptExhausted", "ScriptedClient"]
