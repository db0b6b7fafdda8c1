"""A run as a stream of events for applications: ``async with loop.stream(task) as stream``.

:class:`RunStream` starts the run when its block is entered and hands out the events observers get, in the
order the driver emits them, ending with :class:`~loopctl.engine.RunFinished`. Nothing waits for a slow
reader: events queue up. Leaving the block before the run finished sets the run's cancel signal, so the run
ends as a cancelled one (the machine keeps the coherent prefix) and the history can be continued.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, Generic

from loopctl.engine.events import LoopEvent, ModelStreamEvent, Observer, RunFinished
from loopctl.engine.run import OutputT, Run
from loopctl.message import TextPart
from loopctl.stream import PartStarted, StreamEvent, TextDelta

__all__ = ["RunStream", "text_of"]


def text_of(event: StreamEvent) -> str:
    """The reply text a stream event carries: a :class:`~loopctl.stream.TextDelta`'s, or the text a text part
    starts with (Gemini sends its first piece that way); ``""`` for any other event."""
    if isinstance(event, TextDelta):
        return event.text
    if isinstance(event, PartStarted) and isinstance(event.part, TextPart):
        return event.part.text
    return ""


_DONE: Any = object()


class RunStream(Generic[OutputT]):
    """One streamed run (made by :meth:`loopctl.engine.BareLoop.stream`).

    ``async for event in stream`` yields each :data:`~loopctl.engine.LoopEvent` (run and turn start, text and
    thinking deltas inside :class:`~loopctl.engine.ModelStreamEvent`, tool calls started and finished with
    their results, retries, compaction passes, output retries, and :class:`~loopctl.engine.RunFinished`
    last); :meth:`text` yields only the text deltas of the model's replies; :meth:`result` waits for the
    :class:`~loopctl.engine.Run`. The events can be read once, by one reader. An error that escapes the run
    (an observer's bug, a bad output type) is raised by the iteration and by :meth:`result`.
    """

    def __init__(self, start: Callable[[Observer, asyncio.Event], Awaitable[Run[Any]]]) -> None:
        self._start = start
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._cancel = asyncio.Event()
        self._task: asyncio.Task[Run[Any]] | None = None
        self._finished = False

    async def __aenter__(self) -> RunStream[OutputT]:
        if self._task is not None:
            raise RuntimeError("a RunStream is entered once")
        self._task = asyncio.ensure_future(self._start(self._queue.put_nowait, self._cancel))
        self._task.add_done_callback(lambda _: self._queue.put_nowait(_DONE))
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        task = self._task
        if task is None or task.done():
            if task is not None and kind is None:
                task.result()  # an error the run raised is not lost when nobody asked for the result
            return
        # Left early: cancel the run cleanly and wait for it to end, so the machine is consistent on return.
        self._cancel.set()
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            task.cancel()
            raise
        except Exception:
            if kind is None:
                raise

    def __aiter__(self) -> AsyncIterator[LoopEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[LoopEvent]:
        if self._task is None:
            raise RuntimeError("iterate a RunStream inside its 'async with' block")
        while not self._finished:
            event = await self._queue.get()
            if event is _DONE:
                self._finished = True
                self._task.result()  # the run raised: so does the iteration
                return
            yield event
            if isinstance(event, RunFinished):
                self._finished = True

    async def text(self) -> AsyncIterator[str]:
        """The text of the model's replies, as it arrives (thinking, tool calls and the other events are
        skipped). A reply that goes on to call tools may start with text. Text streamed before a model call
        failed and was sent again (a retry, a fallback to another model) is void: the events say so
        (:class:`~loopctl.engine.ReplyDiscarded`, with the text to erase), this plain text cannot, so a reader
        that must never show it twice reads the events instead; the run's final text (``run.text``, the
        history) never holds it."""
        async for event in self:
            if isinstance(event, ModelStreamEvent):
                text = text_of(event.event)
                if text:
                    yield text

    async def result(self) -> Run[OutputT]:
        """The :class:`~loopctl.engine.Run`, once the run ended (events not read yet stay unread)."""
        if self._task is None:
            raise RuntimeError("await result() inside the RunStream's 'async with' block")
        return await asyncio.shield(self._task)

    def cancel(self) -> None:
        """Cancel the run (as leaving the block early does); it ends with outcome ``CANCELLED``."""
        self._cancel.set()
