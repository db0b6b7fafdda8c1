"""The CLI's transcript: an observer of the loop's events that prints to the terminal with rich.

Text streams as it comes (a reply that was not streamed is shown whole when it arrives); thinking is dimmed;
tool calls and results are shown on one line each, a result labelled with its call's tool and main argument
(``✓ read_file(wordcount.py): ...``; the main argument is the call's first, so parallel calls that finish out
of order stay told apart); a tool the provider ran itself (web search, code execution...) gets one line when
its result arrives (``⌁ web_search(…) at anthropic: …``); a spinner runs while the model is working. Every string
that came from the model, a tool or a provider goes through :func:`~loopctl.cli.inert.inert` first, so none
of it can move the cursor, hide text or reach the clipboard.
"""

from __future__ import annotations

import functools
import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import orjson

from loopctl._lazy import LazyModule
from loopctl.cli.inert import expand_tabs, inert
from loopctl.engine.events import (
    CompactionFinished,
    LoopEvent,
    ModelCallRetry,
    ModelFallback,
    ModelStreamEvent,
    RunFinished,
    ToolCallDeferred,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
)
from loopctl.message import ServerToolCallPart, ServerToolResultPart, TextPart, ThinkingPart, ToolResultPart
from loopctl.stream import PartStarted, PartUpdated, TextDelta, ThinkingDelta

if TYPE_CHECKING:  # rich is imported when the transcript first prints (the spinner's module by Console.status,
    # when a terminal shows one): a run whose output is not a terminal has printed nothing by its first request
    import rich.console
    import rich.text
    from rich.status import Status
else:
    rich = LazyModule("rich")

__all__ = ["Transcript", "dollars", "message_text"]


def dollars(cost: Decimal) -> str:
    """A cost in USD for a summary line: four decimals, six below a hundredth of a cent (``$0.0123``,
    ``$0.000045``)."""
    return f"${cost:.4f}" if cost == 0 or cost >= Decimal("0.0001") else f"${cost:.6f}"


def _json(value: Any) -> str:
    """``value`` as compact JSON text; integers past 64 bits (which orjson cannot write) and any other value
    JSON has no form for are written by the standard library (``str()`` for the latter)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _short(value: Any, limit: int = 80) -> str:
    """``value`` (text, or any JSON value) on one line, made inert, cut to ``limit`` characters; a newline is
    shown as ``⏎`` and a tab as ``⇥`` (a line that stands for many has no columns to align)."""
    text = value if isinstance(value, str) else _json(value)
    text = inert(text.replace("\n", "⏎").replace("\t", "⇥"), one_line=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def message_text(message: Any) -> str:
    """A message as ``loopctl show`` and ``loopctl sessions show`` print it: its display (one chunk per part,
    ``docs/wire-format.md``), made inert, with each tab expanded from the start of its own line of content
    (:func:`~loopctl.cli.inert.expand_tabs`); a tool result of several lines starts on a line of its own, so
    its columns line up as in the file it read."""
    chunks: list[str] = []
    for part in message.parts:
        if isinstance(part, ToolResultPart):
            output, _ = expand_tabs(inert(str(part.output)))
            chunks.append(f"[Tool Result:\n{output}]" if "\n" in output else f"[Tool Result: {output}]")
            continue
        chunk = part.display()
        if chunk is not None:
            chunks.append(expand_tabs(inert(chunk))[0])
    return "\n".join(chunks)


def _label(name: str, arguments: Any) -> str:
    """A tool call named for a result line: the tool and its main argument (the value of the first one the
    model gave, as ``path`` for ``read_file``), ``read_file(wordcount.py)``; ``name()`` without arguments.
    Inert like the call line's; an argument past 40 characters keeps its end (a path's file name), as
    ``read_file(…/project/src/wordcount.py)``."""
    main = (next(iter(arguments.values())) if arguments else "") if isinstance(arguments, dict) else arguments
    text = _short(main, 1 << 30)
    if len(text) > 40:
        text = "…" + text[-39:]
    return f"{_short(name, 80)}({text})"


def _args(value: Any) -> str:
    """A tool call's input on one line, inert: ``key=value, ...`` for an object, else the value."""
    if isinstance(value, dict):
        return ", ".join(f"{_short(k, 40)}={_short(v, 40)}" for k, v in value.items())
    return _short(value)


class Transcript:
    """Prints a run as it happens. Call it with each :data:`~loopctl.engine.LoopEvent`.

    ``console`` is where it prints (a new one on stdout when ``None``); ``show_thinking=False`` leaves the model's
    reasoning out (``--hide-thinking``).
    """

    def __init__(self, console: rich.console.Console | None = None, *, show_thinking: bool = True) -> None:
        if console is None:
            from rich.console import Console

            console = Console(highlight=False, soft_wrap=True)
        self.console = console
        self.show_thinking = show_thinking
        self._status: Status | None = None
        self._mode: str | None = None  # "text" or "thinking" while a stream is being printed
        self._column = 0  # where the streamed text stands on its line, so its tabs expand as one text
        self._streamed = False  # whether this turn's reply was shown as it streamed
        self._server_calls: dict[str, ServerToolCallPart] = {}  # this turn's provider-side calls, by id

    def __call__(self, event: LoopEvent) -> None:
        # rich's Text is imported by the branches that print: the events before the first model call (the run's
        # and the turn's start) print nothing but a terminal's spinner (docs/performance.md, section 12)
        c = self.console
        if isinstance(event, TurnStarted):
            self._streamed = False
            self._spin("thinking…")
        elif isinstance(event, ModelStreamEvent):
            e = event.event
            # A part may start with text of its own (Gemini's first piece), then deltas follow.
            if isinstance(e, (PartStarted, PartUpdated)) and isinstance(e.part, ServerToolCallPart):
                self._server_calls[e.part.id] = e.part
            elif isinstance(e, PartStarted) and isinstance(e.part, ServerToolResultPart):
                self._streamed = True
                self._server_result(e.part)
            elif isinstance(e, PartStarted):
                if isinstance(e.part, TextPart):
                    self._text(e.part.text)
                elif isinstance(e.part, ThinkingPart):
                    self._thinking(e.part.text)
            elif isinstance(e, TextDelta):
                self._text(e.text)
            elif isinstance(e, ThinkingDelta):
                self._thinking(e.text)
        elif isinstance(event, ModelCallRetry):
            from rich.text import Text

            self._stop_spin()
            printed = self._mode is not None
            self._end_line()
            void = "; the partial reply above is discarded" if printed else ""
            c.print(
                Text(
                    f"↻ {type(event.error).__name__}: {_short(str(event.error), 300)} — "
                    f"retrying in {event.delay:.1f} s "
                    f"(attempt {event.attempt}){void}",
                    style="yellow",
                )
            )
        elif isinstance(event, ModelFallback):
            from rich.text import Text

            self._stop_spin()
            printed = self._mode is not None
            self._end_line()
            void = "; the partial reply above is discarded" if printed else ""
            to = _short(f"{event.to_provider}:{event.to_model}", 100)
            c.print(
                Text(
                    f"↪ {type(event.error).__name__}: {_short(str(event.error), 300)} — trying {to}{void}",
                    style="yellow",
                )
            )
        elif isinstance(event, ToolCallDeferred):
            from rich.text import Text

            self._stop_spin()
            self._end_line()
            why = f" ({_short(event.reason, 100)})" if event.reason else ""
            line = f"⏸ {_short(event.call.name, 60)} awaits approval{why}: {_short(event.call.input)}"
            c.print(Text(line, style="yellow"))
        elif isinstance(event, TurnFinished):
            self._stop_spin()
            if not self._streamed:  # a reply that was not streamed (--no-stream): show it whole now
                for part in event.message.parts:
                    if isinstance(part, TextPart):
                        self._text(part.text)
                    elif isinstance(part, ThinkingPart):
                        self._thinking(part.text)
                    elif isinstance(part, ServerToolCallPart):
                        self._server_calls[part.id] = part
                    elif isinstance(part, ServerToolResultPart):
                        self._server_result(part)
            self._server_calls = {}
            self._end_line()
        elif isinstance(event, ToolCallStarted):
            from rich.text import Text

            self._stop_spin()
            self._end_line()
            args = _args(event.input)  # what runs: a modified call's new input, not the model's
            name = _short(event.call.name, 80)
            c.print(Text.assemble(("→ ", "cyan"), (name, "bold cyan"), (f"({args})", "cyan")))
            if event.modified:
                c.print(Text(f"  (input modified; the model asked for ({_args(event.call.input)}))", style="dim"))
            self._spin(f"running {name}…")
        elif isinstance(event, ToolCallFinished):
            from rich.text import Text

            self._stop_spin()
            r = event.result
            mark, style = ("✗", "red") if r.is_error else ("✓", "green")
            text = str(r.output)
            lines = text.count("\n") + 1 if text else 0
            count = f"{lines} line" if lines == 1 else f"{lines} lines"
            label = _label(event.call.name, event.call.input)
            c.print(Text(f"  {mark} {label}: {_short(text, 100)}  [{count}]", style=style))
        elif isinstance(event, CompactionFinished):
            from rich.text import Text

            self._stop_spin()
            self._end_line()
            c.print(
                Text(
                    f"⇣ {event.kind} ({event.reason}): {event.tokens_before:,} → {event.tokens_after:,} tokens",
                    style="magenta",
                )
            )
        elif isinstance(event, RunFinished):
            self._stop_spin()
            self._end_line()

    def _server_result(self, result: ServerToolResultPart) -> None:
        """One line for a tool the provider ran: its call (when seen) and the start of what it returned."""
        from rich.text import Text

        self._stop_spin()
        self._end_line()
        call = self._server_calls.get(result.call_id)
        label = _label(call.name, call.input) if call is not None else f"{_short(result.name, 80)}()"
        where = f" on {_short(call.server, 60)}" if call is not None and call.server else ""
        mark, style = ("✗", "red") if result.failed() else ("⌁", "blue")
        text = f"{mark} {label}{where} at {_short(result.provider, 30)}: {_short(result.output, 100)}"
        self.console.print(Text(text, style=style))

    @functools.cached_property
    def _stream_text(self) -> type[rich.text.Text]:
        """rich's ``Text``, imported once the transcript first prints a stream's text (read per delta: not an
        import statement each time)."""
        from rich.text import Text

        return Text

    def _text(self, text: str) -> None:
        self._streamed = True
        if not text:
            return
        self._stop_spin()
        if self._mode != "text":
            self._end_line()
            self._mode = "text"
        shown, self._column = expand_tabs(inert(text), self._column)
        self.console.print(self._stream_text(shown), end="")

    def _thinking(self, text: str) -> None:
        self._streamed = True
        if not text or not self.show_thinking:
            return
        self._stop_spin()
        if self._mode != "thinking":
            self._end_line()
            self._mode = "thinking"
        shown, self._column = expand_tabs(inert(text), self._column)
        self.console.print(self._stream_text(shown, style="dim italic"), end="")

    def _spin(self, label: str) -> None:
        if not self.console.is_terminal:
            return
        self._stop_spin()
        self._status = self.console.status(label, spinner="dots")
        self._status.start()

    def _stop_spin(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def _end_line(self) -> None:
        if self._mode is not None:
            self.console.print()
            self._mode = None
        self._column = 0

    def close(self) -> None:
        """Stop any spinner and finish the current line."""
        self._stop_spin()
        self._end_line()
