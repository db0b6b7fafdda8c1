"""Fallback models: one model client made of several, tried in order when a call fails.

``FallbackClient(primary, *fallbacks, fallback_on=...)`` is a :class:`~loopctl.providers.ModelClient` (import
it from :mod:`loopctl.providers`). In a loop, each model call goes to ``primary`` first; the engine retries
a client by the run's retry policy (``RunConfig.max_retries``), and moves the call to the next client when
the client's call failed:

- with a retryable error (rate limit, overload, server error, connection, timeout, dropped stream) that
  outlived the retries;
- with an error of a class named in ``fallback_on`` (say ``InvalidRequest`` for a 400 one provider gives and
  another may not), at once, without retries;
- after its reply began to stream (a stream that fails before it finished: cut off, a mid-stream error
  event, a malformed event), once its retries, if the error is retryable, are spent.

A context overflow (:class:`~loopctl.errors.ContextOverflow`) moves on only when ``fallback_on`` names it or
one of its subclasses: by default the loop answers it by compacting the conversation and calling again.
Other errors (a bad key, a 400 not named) end the call as they would without fallbacks. Every call starts at
``primary`` again. When the last client fails in a way that would move the call on, the call fails with
:class:`~loopctl.errors.FallbackFailed` listing each client's error, and the run ends with outcome
``FALLBACK_EXHAUSTED``.

Observers see :class:`~loopctl.engine.ModelFallback` when a call moves on, preceded by
:class:`~loopctl.engine.ReplyDiscarded` when the failed attempt had streamed anything (its partial reply is
void: the next client answers afresh). ``Turn.model`` and ``Turn.provider`` name the client that answered;
thinking from another provider in the conversation is sent or left out by the replay policy of
``docs/providers.md``, so a switch mid-conversation is safe.

Pure composition: this module does no I/O of its own (the clients do), so the engine imports it without the
transport (``docs/guardrails.md``, "Fallback models").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from loopctl.errors import ContextOverflow, FallbackFailed, LoopError
from loopctl.providers.base import EventCallback, ModelClient, ModelRequest
from loopctl.response import ModelResponse

__all__ = ["FallbackClient", "client_label"]


def client_label(client: ModelClient) -> str:
    """``"provider:model"`` of a client, as errors and events name it."""
    return f"{getattr(client, 'provider', '') or '?'}:{getattr(client, 'model', '') or '?'}"


class FallbackClient:
    """A model client that tries ``primary``, then each of ``fallbacks`` in turn (see the module docstring).

    ``fallback_on`` is a sequence of exception classes, or a callable taking the error and returning whether
    to move on (it is asked only about errors that would not move on anyway). :attr:`provider` and
    :attr:`model` are the primary's; :attr:`clients` all of them, in order.

    Used on its own (``await client.generate(...)``, outside a loop) each client is tried once, without
    retries; stream events of a failed attempt have already reached ``on_event`` by then. Raises
    ``TypeError`` for a ``fallback_on`` entry that is not an exception class and ``ValueError`` without
    fallbacks.
    """

    def __init__(
        self,
        primary: ModelClient,
        *fallbacks: ModelClient,
        fallback_on: Iterable[type[BaseException]] | Callable[[LoopError], bool] = (),
    ) -> None:
        if not fallbacks:
            raise ValueError("FallbackClient needs at least one fallback client after the primary")
        self.clients: tuple[ModelClient, ...] = (primary, *fallbacks)
        self.provider: str = primary.provider
        self.model: str = primary.model
        if callable(fallback_on) and not isinstance(fallback_on, type):
            self._predicate: Callable[[LoopError], bool] | None = fallback_on
            self.fallback_on: tuple[type[BaseException], ...] = ()
        else:
            classes = tuple(fallback_on)  # type: ignore[arg-type]
            for c in classes:
                if not (isinstance(c, type) and issubclass(c, BaseException)):
                    raise TypeError(f"fallback_on takes exception classes, got {c!r}")
            self._predicate = None
            self.fallback_on = classes

    def falls_back(self, error: LoopError, *, streamed: bool) -> bool:
        """Whether a client's call that ended with ``error`` (its retries spent, if it is retryable) moves on
        to the next client. ``streamed``: the reply had begun to stream."""
        if isinstance(error, ContextOverflow):
            return any(issubclass(c, ContextOverflow) for c in self.fallback_on) or self._asked(error)
        if error.retryable or streamed or isinstance(error, self.fallback_on):
            return True
        return self._asked(error)

    def _asked(self, error: LoopError) -> bool:
        return self._predicate is not None and bool(self._predicate(error))

    async def generate(
        self, request: ModelRequest, *, stream: bool = True, on_event: EventCallback | None = None
    ) -> ModelResponse:
        """Send ``request`` to each client in turn (once each) until one answers; raises the error of a client
        that does not move on, or :class:`~loopctl.errors.FallbackFailed` when the last one fails and would.

        ``stream`` and ``on_event`` are passed to each client as they are
        (:meth:`~loopctl.providers.ModelClient.generate`); a client that fails after it streamed part of a reply is
        moved past without its text reaching ``on_event`` twice.
        """
        tried: list[tuple[str, LoopError]] = []
        for client in self.clients:
            events = 0

            def counted(event: Any, _forward: EventCallback | None = on_event) -> None:
                nonlocal events
                events += 1
                if _forward is not None:
                    _forward(event)

            try:
                return await client.generate(request, stream=stream, on_event=counted if stream else on_event)
            except LoopError as exc:
                if not self.falls_back(exc, streamed=events > 0):
                    raise
                tried.append((client_label(client), exc))
        raise FallbackFailed(tried)

    async def aclose(self) -> None:
        """Close every client (each once, all of them even when one fails; the first failure is raised)."""
        first: BaseException | None = None
        seen: set[int] = set()
        for client in self.clients:
            if id(client) in seen:
                continue
            seen.add(id(client))
            try:
                await client.aclose()
            except Exception as exc:
                first = first or exc
        if first is not None:
            raise first

    def __repr__(self) -> str:
        return f"FallbackClient({', '.join(client_label(c) for c in self.clients)})"
