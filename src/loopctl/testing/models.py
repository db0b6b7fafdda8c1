"""Model doubles for tests of agents: :class:`TestModel` calls every tool it is offered with arguments valid for
the tool's schema, then answers (typed output included), with no script to write.

Like every model double here it refuses a conversation that breaks the pairing rules every provider enforces
(:func:`loopctl.providers._common.check_pairing`: a call answered once, before the next reply), so a test on it
fails where a real provider would. Pure apart from ``asyncio``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import orjson

from loopctl.message import Message, MessagePart, Role, ToolResultPart
from loopctl.providers._common import check_pairing
from loopctl.providers.base import EventCallback, ModelRequest
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.testing.scripted import stream_events
from loopctl.tool import ForceTool

__all__ = ["TestModel", "example_for"]


class TestModel:
    """A :class:`~loopctl.providers.ModelClient` that exercises an agent's tools without a script.

    At the first request of a run (a user message last) it calls every tool the request offers, or those
    named in ``call_tools``, each once, with arguments made from the tool's JSON Schema (:func:`example_for`:
    valid for it, ``minimum`` and ``minLength`` honoured). When the results come back it answers: with a call
    of the output tool (typed output, ``OutputTool``) holding a value valid for its schema, with JSON valid for
    the requested ``output_format`` (``NativeOutput``), or with ``text`` (default: the tools' results as a
    JSON object, ``{"tool name": "its result"}``; ``"success (no tool calls)"`` when it called none).

    ``usage`` is reported with each reply; ``price`` (USD per million input and output tokens) makes each
    reply priced, for cost limits offline. Every request is kept in :attr:`requests`. Refuses a conversation
    whose tool calls and results do not pair (``UnsupportedContent``), as the providers' APIs do.

    ``model`` is the name the model reports in each reply.
    """

    __test__ = False  # not a pytest test class, whatever its name
    provider = "test"

    def __init__(
        self,
        *,
        call_tools: Iterable[str] | None = None,
        text: str | None = None,
        usage: Usage | None = None,
        price: tuple[Decimal | str, Decimal | str] | None = None,
        model: str = "test",
    ) -> None:
        self.model = model
        self.call_tools = None if call_tools is None else tuple(call_tools)
        self.text = text
        self.usage = usage or Usage(input_tokens=50, output_tokens=10)
        self.price = None if price is None else (Decimal(str(price[0])), Decimal(str(price[1])))
        self.requests: list[ModelRequest] = []
        self._ids = itertools.count(1)

    def price_usage(self, usage: Usage, model: str | None) -> Decimal | None:
        """The price of ``usage`` at :attr:`price` (``None`` without one): the engine prices replies with it.

        ``model`` is the reply's model (not used: one price for all).
        """
        if self.price is None:
            return None
        per_in, per_out = self.price
        return (per_in * usage.input_tokens + per_out * usage.output_tokens) / Decimal(1_000_000)

    async def generate(
        self, request: ModelRequest, *, stream: bool = True, on_event: EventCallback | None = None
    ) -> ModelResponse:
        """Answer ``request`` (see the class docstring).

        ``stream=True`` with an ``on_event`` callback replays the reply as stream events before returning it.
        """
        check_pairing(request.messages, "test")
        self.requests.append(request)
        message = self._reply(request)
        stop = StopReason.TOOL_CALL if message.tool_calls() else StopReason.END_TURN
        response = ModelResponse(message=message, usage=self.usage, stop_reason=stop, model=self.model)
        if stream and on_event is not None:
            for event in stream_events(response):
                on_event(event)
        return response

    def _reply(self, request: ModelRequest) -> Message:
        last = request.messages[-1] if request.messages else None
        results = [p for p in last.parts if isinstance(p, ToolResultPart)] if last is not None else []
        output_tool = _output_tool(request)
        if not results:
            names = {t.name for t in request.tools}
            if self.call_tools is not None:
                missing = sorted(set(self.call_tools) - names)
                if missing:
                    raise ValueError(f"TestModel: call_tools names tools the request does not offer: {missing}")
            only = self.call_tools
            wanted = [t for t in request.tools if t.name != output_tool and (only is None or t.name in only)]
            calls = [
                MessagePart.tool_call(f"test_{next(self._ids)}", t.name, example_for(t.input_schema)) for t in wanted
            ]
            if calls:
                return Message.new(Role.ASSISTANT, calls)
        return self._answer(request, results, output_tool)

    def _answer(self, request: ModelRequest, results: Sequence[ToolResultPart], output_tool: str | None) -> Message:
        final = next((t for t in request.tools if t.name == output_tool), None)
        if final is not None:
            call = MessagePart.tool_call(f"test_{next(self._ids)}", final.name, example_for(final.input_schema))
            return Message.new(Role.ASSISTANT, [call])
        if request.output_format is not None:
            return Message.assistant(orjson.dumps(example_for(request.output_format.schema)).decode())
        if self.text is not None:
            return Message.assistant(self.text)
        if not results:
            return Message.assistant("success (no tool calls)")
        done = {r.name or r.call_id: str(r.output) for r in results}
        return Message.assistant(orjson.dumps(done).decode())

    async def aclose(self) -> None:
        """Nothing to release."""


def _output_tool(request: ModelRequest) -> str | None:
    """The output tool of a typed run: the forced tool, or, when any tool is required, the last one offered
    (the engine offers the output tool after the agent's own)."""
    if isinstance(request.tool_choice, ForceTool):
        return request.tool_choice.name
    if request.tool_choice == "required" and request.tools:
        return request.tools[-1].name
    return None


def example_for(schema: Mapping[str, Any], defs: Mapping[str, Any] | None = None) -> Any:
    """A JSON value valid for the JSON Schema ``schema`` (a plain one: what pydantic writes for a tool's input):
    its ``default``, ``const`` or first ``enum`` value when it has one, the first branch of ``anyOf`` /
    ``oneOf``, every property an object requires (each made the same way), ``minItems`` items of an array,
    ``minLength`` letters of a string, ``minimum`` (or ``exclusiveMinimum`` + 1) of a number. ``$ref`` is read
    from ``$defs``."""
    defs = dict(defs or {}) | dict(schema.get("$defs", {}) or {})
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return example_for(defs[name], defs)
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            branches = [b for b in schema[key] if b.get("type") != "null"] or schema[key]
            return example_for(branches[0], defs)
    if schema.get("allOf"):
        return example_for(schema["allOf"][0], defs)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties", {}) or {}
        return {name: example_for(props[name], defs) for name in schema.get("required", []) if name in props}
    if kind == "array":
        items = schema.get("items", {}) or {}
        return [example_for(items, defs) for _ in range(int(schema.get("minItems", 0)))]
    if kind == "string":
        fmt = schema.get("format")
        if fmt == "date":
            return "2024-01-01"
        if fmt == "date-time":
            return "2024-01-01T00:00:00Z"
        return "a" * max(1, int(schema.get("minLength", 1)))
    if kind in ("integer", "number"):
        low = schema.get("minimum")
        if low is None and "exclusiveMinimum" in schema:
            low = schema["exclusiveMinimum"] + 1
        value = low if low is not None else 0
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return {}
