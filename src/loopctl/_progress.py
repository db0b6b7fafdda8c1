"""Progress reports of one tool call, passed on at a bounded rate (a remote server may send them by the
thousand): :class:`ProgressGate`, used by the A2A and MCP clients (``progress_interval``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["PROGRESS_INTERVAL", "ProgressGate"]

PROGRESS_INTERVAL = 0.25
"""Seconds between two progress reports of a call passed on to the run's observers, by default (the A2A and MCP
clients' ``progress_interval``): a remote may send them by the thousand."""

Deliver = Callable[[float, float | None, str | None], None]
"""Where a report goes: ``(progress, total, message)``, as :meth:`~loopctl.tool.ToolContext.report_progress`."""


class ProgressGate:
    """Passes a call's progress reports to ``deliver`` at most one every ``interval`` seconds (``0``: each
    one). A report that comes sooner is held, replacing the one held before; the held one is passed on once
    the interval has passed (a timer on the running loop, even if nothing follows it) or by :meth:`flush`
    (the call's end), so the newest report always arrives. :meth:`close` stops the timer (the call ended);
    :meth:`stop` drops the held report and passes on nothing more (the call was given up on)."""

    __slots__ = ("_deliver", "_held", "_interval", "_last", "_stopped", "_timer")

    def __init__(self, deliver: Deliver, interval: float) -> None:
        self._deliver = deliver
        self._interval = interval
        self._last = float("-inf")
        self._held: tuple[float, float | None, str | None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._stopped = False

    def report(self, progress: float, total: float | None, message: str | None) -> None:
        """Pass on ``(progress, total, message)`` now if the interval has passed since the last one, else
        hold it (in place of the one held) until it has."""
        if self._stopped:
            return
        self._held = (progress, total, message)
        now = time.monotonic()
        if now - self._last >= self._interval:
            self.flush()
        elif self._timer is None:  # the loop's clock is time.monotonic()
            self._timer = asyncio.get_running_loop().call_later(self._last + self._interval - now, self.flush)

    def flush(self) -> None:
        """Pass on the held report, if any."""
        self.close()
        if self._held is not None:
            held, self._held = self._held, None
            self._last = time.monotonic()
            self._deliver(*held)

    def close(self) -> None:
        """Stop the timer (what is held stays held, for :meth:`flush`)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def stop(self) -> None:
        """Drop the held report and pass on nothing more."""
        self._stopped = True
        self._held = None
        self.close()
