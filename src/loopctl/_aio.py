"""Small asyncio helpers shared by the engine and the clients."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["retrieve"]


def retrieve(future: asyncio.Future[Any]) -> None:
    """Read the exception of the finished ``future`` (none when it was cancelled), so that one raised after
    nobody waits on it any more is not logged by asyncio as "never retrieved". Fits ``add_done_callback``."""
    if not future.cancelled():
        future.exception()
