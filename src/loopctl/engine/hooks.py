"""Hooks: code of the application's that runs around each model call and each tool call of a run.

A hook is any object with some of these four methods (sync or ``async``); :class:`Hook` is a base class
whose methods do nothing, to override the ones needed. ``BareLoop(..., hooks=[a, b])`` runs them in the
order given, each method of each hook:

- ``before_model(request) -> ModelRequest | None``: before each model call (once per call, not per retry or
  fallback): return a changed :class:`~loopctl.providers.ModelRequest` to send instead (the next hook sees
  it), or ``None`` to send it as it is. The conversation the machine holds is not changed. A request whose
  fields are not of their types (a ``str`` among the messages, ``extra`` that is not JSON) fails the run
  (:func:`request_problem`).
- ``after_model(response) -> None``: after each reply the conversation keeps, before the machine reads it.
- ``before_tool(call) -> Block | None``: before each tool call, before the permission check; return
  :class:`Block` to stop the call, its ``message`` becoming the error result the model reads (the later
  hooks are not asked).
- ``after_tool(call, result) -> ToolResultPart | str | None``: after a tool ran (not for calls that were
  blocked, denied or answered by the machine): return a result (or the text of one) to give the model
  instead (the next hook sees it).

A hook that raises, or returns something else, fails the run with :class:`~loopctl.errors.HookFailed`
naming the hook and the method; its exception is the ``__cause__``.

Hooks and the permission callback (``BareLoop(permission=...)``) differ in purpose: hooks are the
application's code policy (rewrite a request, redact a result, block a call by rule), run for every call
and cannot pause a run; the permission callback is the *user's* decision on a call that is about to run
(approve, deny, modify, or :class:`~loopctl.engine.Defer` to decide later, which pauses the run). A call
goes through ``before_tool`` hooks first, then the permission check (``docs/guardrails.md``, "Hooks").
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from loopctl._frozen import dataclass
from loopctl.engine.permission import json_problem
from loopctl.errors import HookFailed
from loopctl.message import Message, ToolCallPart, ToolResultPart
from loopctl.providers.base import ModelRequest
from loopctl.response import ModelResponse
from loopctl.tool import ToolSchema

__all__ = ["Block", "Hook", "Hooks", "hook_name", "request_problem"]


@dataclass(frozen=True, slots=True)
class Block:
    """What ``before_tool`` returns to stop a call: the model reads ``message`` as the call's error result."""

    message: str


class Hook:
    """A base class for hooks: every method does nothing (see the module docstring for what each may return).
    Override any of them, as plain or ``async`` methods. ``name`` names the hook in errors (default: the
    class's name)."""

    name: str | None = None

    def before_model(self, request: ModelRequest) -> ModelRequest | Awaitable[ModelRequest | None] | None:
        """Before each model call: a changed request, or ``None``."""
        return None

    def after_model(self, response: ModelResponse) -> Awaitable[None] | None:
        """After each reply the conversation keeps.

        ``response`` is the reply (:class:`~loopctl.response.ModelResponse`); the hook may look, not change it.
        """
        return None

    def before_tool(self, call: ToolCallPart) -> Block | Awaitable[Block | None] | None:
        """Before each tool call: :class:`Block` to stop it, or ``None``."""
        return None

    def after_tool(
        self, call: ToolCallPart, result: ToolResultPart
    ) -> ToolResultPart | str | Awaitable[ToolResultPart | str | None] | None:
        """After a tool ran: a result (or its text) to use instead, or ``None``.

        ``call`` is the tool call and ``result`` the result it got.
        """
        return None


_METHODS = ("before_model", "after_model", "before_tool", "after_tool")


def hook_name(hook: object) -> str:
    """How errors name ``hook``: its ``name`` attribute when it is a string, else its class's name."""
    name = getattr(hook, "name", None)
    return name if isinstance(name, str) and name else type(hook).__qualname__


class Hooks:
    """The hooks of a loop, each method's list made once (methods a :class:`Hook` subclass does not override
    are skipped). Calling one runs its hooks in order and raises :class:`~loopctl.errors.HookFailed` for a
    hook that raises or returns what it may not."""

    __slots__ = ("_lists", "active")

    def __init__(self, hooks: Sequence[object] = ()) -> None:
        lists: dict[str, list[tuple[str, Callable[..., Any]]]] = {m: [] for m in _METHODS}
        for hook in hooks:
            found = False
            for method in _METHODS:
                fn = getattr(hook, method, None)
                if fn is None:
                    continue
                if not callable(fn):
                    raise TypeError(f"hook {hook_name(hook)}: {method} is not callable")
                found = True
                if isinstance(hook, Hook) and getattr(type(hook), method) is getattr(Hook, method):
                    continue  # the base class's no-op
                lists[method].append((hook_name(hook), fn))
            if not found:
                raise TypeError(f"{hook!r} is not a hook: it has none of {', '.join(_METHODS)}")
        self._lists = lists
        self.active: frozenset[str] = frozenset(m for m, found in lists.items() if found)
        """The methods some hook has (``"before_tool" in hooks.active``: :meth:`has` as a set lookup)."""

    def __bool__(self) -> bool:
        return any(self._lists.values())

    def has(self, method: str) -> bool:
        """Whether any hook has ``method``."""
        return bool(self._lists[method])

    async def before_model(self, request: ModelRequest) -> ModelRequest:
        """``request`` as the hooks leave it."""
        for name, fn in self._lists["before_model"]:
            out = await _call(name, "before_model", fn, request)
            if out is not None:
                if not isinstance(out, ModelRequest):
                    raise HookFailed(name, "before_model", f"returned {type(out).__name__}, not a ModelRequest or None")
                problem = request_problem(out)
                if problem is not None:
                    raise HookFailed(name, "before_model", f"returned a request that cannot be sent: {problem}")
                request = out
        return request

    async def after_model(self, response: ModelResponse) -> None:
        """Tell every hook of ``response``."""
        for name, fn in self._lists["after_model"]:
            out = await _call(name, "after_model", fn, response)
            if out is not None:
                raise HookFailed(name, "after_model", f"returned {type(out).__name__}; after_model returns None")

    async def before_tool(self, call: ToolCallPart) -> Block | None:
        """The first :class:`Block` a hook returns for ``call``, or ``None``."""
        for name, fn in self._lists["before_tool"]:
            out = await _call(name, "before_tool", fn, call)
            if out is None:
                continue
            if isinstance(out, Block) and isinstance(out.message, str):
                return out
            raise HookFailed(name, "before_tool", f"returned {type(out).__name__}, not Block(message) or None")
        return None

    async def after_tool(self, call: ToolCallPart, result: ToolResultPart) -> ToolResultPart:
        """``result`` as the hooks leave it (always answering ``call``)."""
        for name, fn in self._lists["after_tool"]:
            out = await _call(name, "after_tool", fn, call, result)
            if out is None:
                continue
            if isinstance(out, str):
                out = ToolResultPart(call_id=call.id, name=call.name, output=out, is_error=result.is_error)
            elif not isinstance(out, ToolResultPart):
                problem = f"returned {type(out).__name__}, not a ToolResultPart, str or None"
                raise HookFailed(name, "after_tool", problem)
            elif out.call_id != call.id:
                raise HookFailed(name, "after_tool", f"returned the result of call {out.call_id!r}, not {call.id!r}")
            result = out
        return result


def request_problem(request: ModelRequest) -> str | None:
    """What makes ``request`` one no codec can send (``None`` when nothing does): each field of the type it
    is declared with. Checked for a request a ``before_model`` hook returns, so that the run fails with
    ``HookFailed`` naming the hook rather than an error from inside a codec."""
    messages = request.messages
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        return f"messages must be a sequence of Message, not {type(messages).__name__}"
    for i, m in enumerate(messages):
        if not isinstance(m, Message):
            return f"messages[{i}] is a {type(m).__name__}, not a Message"
    if request.system is not None and not isinstance(request.system, str):
        return f"system must be a str or None, not {type(request.system).__name__}"
    if isinstance(request.tools, (str, bytes)) or not isinstance(request.tools, Sequence):
        return f"tools must be a sequence of ToolSchema, not {type(request.tools).__name__}"
    for i, t in enumerate(request.tools):
        if not isinstance(t, ToolSchema):
            return f"tools[{i}] is a {type(t).__name__}, not a ToolSchema"
    for key in ("max_tokens",):
        value = getattr(request, key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            return f"{key} must be a whole number >= 1 or None, not {value!r}"
    temperature = request.temperature
    if temperature is not None and (not isinstance(temperature, (int, float)) or isinstance(temperature, bool)):
        return f"temperature must be a number or None, not {temperature!r}"
    stop = request.stop
    if stop is not None and (
        isinstance(stop, (str, bytes)) or not isinstance(stop, Sequence) or not all(isinstance(x, str) for x in stop)
    ):
        return f"stop must be a sequence of str or None, not {stop!r}"
    if not isinstance(request.extra, Mapping):
        return f"extra must be a mapping, not {type(request.extra).__name__}"
    return json_problem(dict(request.extra), "extra")


async def _call(name: str, method: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        out = fn(*args)
        if inspect.isawaitable(out):
            out = await out
    except HookFailed:
        raise
    except Exception as exc:
        try:
            text = str(exc)
        except Exception:
            text = "<its text cannot be read>"
        raise HookFailed(name, method, f"{type(exc).__name__}: {text}") from exc
    return out
