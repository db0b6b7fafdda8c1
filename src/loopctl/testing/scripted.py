"""A model client that answers from a script: no network, no keys, deterministic.

Pure apart from ``asyncio``: it never sleeps unless a step asks it to (``Delay``).
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import Any, TypeAlias, Union

from loopctl._frozen import dataclass
from loopctl.errors import LoopError
from loopctl.message import Message, MessageView, Role, TextPart, ThinkingPart, ToolCallPart
from loopctl.providers._common import check_pairing
from loopctl.providers.base import EventCallback, ModelRequest
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.stream import (
    PartStarted,
    ResponseFinished,
    ResponseStarted,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ThinkingSignature,
    UsageReported,
)

__all__ = ["Delay", "ScriptExhausted", "ScriptStep", "ScriptedClient", "stream_events"]


class ScriptExhausted(LoopError):
    """The model was called more times than the script has replies."""


@dataclass(frozen=True, slots=True)
class Delay:
    """Wait ``seconds`` before answering with ``then`` (to test timeouts and cancellation)."""

    seconds: float
    then: Any


ScriptStep: TypeAlias = Union[Message, ModelResponse, str, BaseException, Delay, Callable[[ModelRequest], Any]]
"""One scripted reply: an assistant ``Message``, a full ``ModelResponse``, plain text (an assistant text
message), an exception to raise, a :class:`Delay`, or a callable that takes the request and returns any of
these."""


class ScriptedClient:
    """A :class:`~loopctl.providers.ModelClient` whose replies are given up front.

    ``script`` is a list of :data:`ScriptStep` (used in order) or one callable used for every call.
    Every request is kept in :attr:`requests`. ``usage`` is reported with each reply unless a step gives a
    ``ModelResponse`` of its own. With ``stream=True`` and an ``on_event`` callback, the reply is replayed as
    stream events (one delta per text or thinking part). ``price`` (USD per million input and output tokens)
    makes each reply priced (``Turn.cost``, ``Run.cost``), so cost limits can be tried offline.

    ``model`` is the name the client reports (:attr:`model`, and each reply's model); ``keep_requests=False`` keeps
    no request (for long benchmark runs).

    A request is checked first against the tool-call pairing rules every codec applies before it sends one
    (:func:`~loopctl.providers._common.check_pairing`: a result answers a call of the reply before it, once;
    every call is answered before the next reply or new input), so a conversation no provider would take
    fails here as it would with a real client: :class:`~loopctl.errors.UnsupportedContent`, naming the part,
    before the request is kept or a step is used.
    """

    provider = "scripted"

    def __init__(
        self,
        script: Iterable[ScriptStep] | Callable[[ModelRequest], Any],
        *,
        model: str = "scripted",
        usage: Usage | None = None,
        keep_requests: bool = True,
        price: tuple[Decimal | str, Decimal | str] | None = None,
    ) -> None:
        self.model = model
        self.price = None if price is None else (Decimal(str(price[0])), Decimal(str(price[1])))
        self._fn: Callable[[ModelRequest], Any] | None = script if callable(script) else None
        self._script: list[Any] = [] if callable(script) else list(script)
        self._next = 0
        self._usage = usage or Usage()
        self._keep = keep_requests
        self.requests: list[ModelRequest] = []
        self.calls = 0
        # The last request checked, as far as it is known sound: its messages up to its last reply (or the
        # machine's view it was), and how many of them that is.
        self._sound: object = None
        self._sound_len = 0

    async def generate(
        self, request: ModelRequest, *, stream: bool = True, on_event: EventCallback | None = None
    ) -> ModelResponse:
        """Answer ``request`` with the next scripted step. Raises ``UnsupportedContent`` for a request that
        breaks the pairing rules (see the class docstring).

        ``stream=True`` with an ``on_event`` callback replays the reply as stream events (one delta per text or
        thinking part) before returning it; otherwise the reply comes whole.
        """
        self._check(request.messages)
        self.calls += 1
        if self._keep:
            self.requests.append(request)
        if self._fn is not None:
            step = self._fn(request)
        else:
            if self._next >= len(self._script):
                raise ScriptExhausted(f"the script has {len(self._script)} replies; call {self.calls} has none")
            step = self._script[self._next]
            self._next += 1
        response = step if type(step) is ModelResponse else await self._resolve(step, request)
        if stream and on_event is not None:
            for event in stream_events(response):
                on_event(event)
        return response

    def _check(self, messages: Sequence[Message]) -> None:
        """The codecs' pairing check, incremental as theirs is: the messages up to the last reply of a request
        that passed are not checked again while the next request continues them. A request made from a
        :class:`~loopctl.engine.LoopMachine` (a :class:`~loopctl.message.MessageView`) continues the last one
        when it :meth:`~loopctl.message.MessageView.extends` it, an O(1) test; any other sequence when it
        starts with the same message objects (one identity comparison per message). A view that continues a
        view whose last reply had a message after it, with a reply next, is checked from that reply: the
        pairing check starts afresh at a reply whose previous reply's calls were all answered, as they were."""
        n = self._sound_len
        sound = self._sound
        view = messages if type(messages) is MessageView else None
        start = 0
        length = len(messages)
        if n and length >= n:
            if view is not None:
                continues = view.extends(sound)
                # The view before (``sound``, a snapshot) had a message after its last reply, so that reply's
                # calls were all found answered: a reply right after it starts the pairing afresh there.
                before = len(sound) if continues else 0  # type: ignore[arg-type]  # a MessageView: extends says so
                if n < before < length and messages[before].role is Role.ASSISTANT:
                    n = before + 1
            else:
                continues = isinstance(sound, list) and all(map(operator.is_, messages[:n], sound))
            start = n - 1 if continues else 0
        # The last reply: at or after ``start``, which is the last reply of the sound part when there is one.
        last = check_pairing(messages, "ScriptedClient, as every provider,", start)
        if view is not None:
            self._sound = view  # a snapshot: its first ``last + 1`` messages are the sound ones
        else:
            kept = messages[: last + 1] if last >= 0 else []
            self._sound = kept if isinstance(kept, list) else list(kept)
        self._sound_len = last + 1

    async def _resolve(self, step: Any, request: ModelRequest) -> ModelResponse:
        while True:
            if isinstance(step, Delay):
                await asyncio.sleep(step.seconds)
                step = step.then
            elif isinstance(step, BaseException):
                raise step
            elif callable(step) and not isinstance(step, (Message, ModelResponse)):
                step = step(request)
            else:
                break
        if isinstance(step, ModelResponse):
            return step
        if isinstance(step, str):
            step = Message.assistant(step)
        if not isinstance(step, Message) or step.role is not Role.ASSISTANT:
            raise TypeError(f"a scripted reply must be an assistant Message, got {step!r}")
        stop = StopReason.TOOL_CALL if step.tool_calls() else StopReason.END_TURN
        return ModelResponse(message=step, usage=self._usage, stop_reason=stop, model=self.model)

    def price_usage(self, usage: Usage, model: str | None) -> Decimal | None:
        """The price of ``usage`` at :attr:`price` (``None`` without one, or when the usage's input or output
        count is unknown): the engine prices replies with it.

        ``model`` is the reply's model (not used: one price for all).
        """
        if self.price is None or usage.input_tokens is None or usage.output_tokens is None:
            return None  # no price, or usage not reported: not known
        per_in, per_out = self.price
        return (per_in * usage.input_tokens + per_out * usage.output_tokens) / Decimal(1_000_000)

    async def aclose(self) -> None:
        """Nothing to release."""


def stream_events(response: ModelResponse) -> list[StreamEvent]:
    """The stream events a provider would send for ``response``: one delta per text or thinking part."""
    events: list[StreamEvent] = [ResponseStarted(response.id, response.model)]
    for i, part in enumerate(response.message.parts):
        if isinstance(part, TextPart):
            events.append(PartStarted(i, TextPart(text="")))
            events.append(TextDelta(i, part.text))
        elif isinstance(part, ThinkingPart):
            events.append(PartStarted(i, part.model_copy(update={"text": "", "signature": None})))
            events.append(ThinkingDelta(i, part.text))
            if part.signature is not None:
                events.append(ThinkingSignature(i, part.signature))
        elif isinstance(part, ToolCallPart):
            events.append(PartStarted(i, part))
        else:
            events.append(PartStarted(i, part))
    events.append(UsageReported(response.usage))
    events.append(ResponseFinished(response.stop_reason, response.raw_stop_reason))
    return events
