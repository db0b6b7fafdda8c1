"""loopctl's tools and agents served over MCP: :class:`ToolServer`, an ``MCPServer`` of the official ``mcp`` SDK
(version 2) whose tools are loopctl :class:`~loopctl.tool.Tool` values (``@tool`` functions, ``FileTools``
with their confinement, tool providers) and :class:`~loopctl.agent.Agent` values (each one tool that runs
the agent). It speaks stdio (``server.run()``) and streamable HTTP (``server.run("streamable-http",
host=..., port=...)``, or ``server.streamable_http_app()`` to mount), as any ``MCPServer`` does::

    from loopctl.mcp.server import ToolServer
    from loopctl.tools.files import FileTools

    ToolServer([*FileTools("./project"), support_agent], name="loopctl").run()

``loopctl mcp serve`` is the command line for it (``docs/mcp.md``, "Serving tools and agents").

Approvals. A call that needs approval (the tool's ``requires_approval``, an agent's call paused for
approval, or a ``permission`` callback's ``Defer``) is put to the client as an MCP elicitation: a form with one
boolean, ``approve``, and an optional ``reason``. ``accept`` with ``approve: true`` runs the call;
``approve: false``, ``decline`` and ``cancel`` deny it (the caller reads why). On a 2025-11-25 (handshake)
session the question is an ``elicitation/create`` request sent during the call; on a 2026-07-28 session it is
an ``InputRequiredResult`` the client answers by calling the tool again (the SDK's client does this by
itself), with the paused agent run kept in between (its conversation id travels in the sealed
``request_state``). A client that declared no elicitation capability cannot be asked: the call is denied,
and the result says so.

Agents. An agent's tool takes ``{"input": "<task>"}`` and, optionally, ``"conversation": "<id>"`` to go on
with an earlier conversation (its id is in each result's ``structuredContent``); conversations are sessions
of ``store`` when one is given, else held in memory (the newest :data:`MAX_CONVERSATIONS`). Progress
notifications follow its turns and tool calls when the client asks for progress; cancelling the request
cancels the run. The run's usage and cost are in the result's ``_meta`` (``loopctl/usage``).

Results. A tool's text becomes a ``text`` block, its images ``image`` blocks, ``is_error`` the result's
``isError``; a JSON object result is also the ``structuredContent``.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import mcp_types
import orjson
from mcp.server.mcpserver import Context, MCPServer
from mcp_types.version import is_version_at_least

from loopctl._frozen import dataclass
from loopctl._lazy import LazyModule
from loopctl.agent import Agent
from loopctl.agent._tools import safe_tool_name
from loopctl.engine.events import ToolCallStarted, TurnFinished
from loopctl.engine.machine import OutcomeKind
from loopctl.engine.permission import (
    Approval,
    Approve,
    Defer,
    Deny,
    Modify,
    PendingApproval,
    PermissionCallback,
    deny_reason,
)
from loopctl.engine.run import Run
from loopctl.message import ImagePart, ToolCallPart
from loopctl.response import Usage
from loopctl.tool import ApprovalRequired, ModelRetry, Tool, ToolContext, ToolInputError, ToolOutput, ToolProvider
from loopctl.tool import to_tool_output as normalize

if TYPE_CHECKING:
    import loopctl.store
else:  # the annotations' modules, imported when an annotation is read (loopctl._lazy)
    loopctl = LazyModule("loopctl")

__all__ = ["APPROVAL_SCHEMA", "MAX_CONVERSATIONS", "USAGE_META_KEY", "ToolServer"]

MAX_CONVERSATIONS = 1000
"""Conversations with served agents held in memory when no store is given (the oldest is dropped first)."""

USAGE_META_KEY = "loopctl/usage"
"""The ``_meta`` key of an agent's result: ``{"input_tokens", "output_tokens", "requests", "tool_calls",
"cost"}`` (``cost`` in USD as a string, or ``null`` when unknown; a token count is ``null`` when no model call
of the run reported it: unknown is not zero, as in :class:`~loopctl.response.Usage`)."""

APPROVAL_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve", "description": "Run this call", "default": True},
        "reason": {"type": "string", "title": "Reason", "description": "Why not (when refusing)"},
    },
    "required": ["approve"],
}
"""The form of an approval question (MCP elicitation, form mode)."""

_MODERN = "2026-07-28"  # the protocol version whose server-to-client questions are InputRequiredResult rounds
_STATE_KIND = "loopctl.approval"


@dataclass(frozen=True, slots=True)
class _Ask:
    """One approval question: its key in ``input_requests`` and the pending call it decides."""

    key: str
    pending_id: str
    message: str


class _NotAsked(Exception):
    """The client cannot be asked (no elicitation capability, or no channel for it)."""


class ToolServer(MCPServer[Any]):
    """An MCP server (``mcp.server.mcpserver.MCPServer``) of loopctl tools and agents.

    ``tools``: :class:`~loopctl.tool.Tool` values, iterables of them (``FileTools(root)``), tool providers (an
    MCP client's server, whose list is read at each ``tools/list``) and :class:`~loopctl.agent.Agent` values
    (one tool each, named after the agent; see the module docstring). Tools registered with the SDK's own
    ``@server.tool()`` are served beside them.

    ``permission``: decides each call of a plain tool before it runs (a
    :data:`~loopctl.engine.PermissionCallback`: ``Approve``, ``Deny``, ``Modify``, or ``Defer`` to ask the
    client); by default a tool with ``requires_approval`` is asked about and every other call runs.
    ``require_approval``: names of tools whose every call is asked about (before ``permission``).
    ``annotations``: MCP tool annotations by tool name (``readOnlyHint``, ``destructiveHint``...).
    ``deps``: the deps tools and agents run with. ``store``: where agents' conversations are kept (a
    :class:`~loopctl.store.SessionStore`; default: in memory). ``timeout``: seconds one plain tool call may
    take (``None``: no limit). ``options``: the other keyword arguments, passed to ``MCPServer``
    (``instructions``, ``log_level``...).

    Raises ``ValueError`` for two tools of one name, ``TypeError`` for a value that is none of those.
    """

    def __init__(
        self,
        tools: Iterable[Tool | ToolProvider | Agent[Any, Any] | Iterable[Tool]] = (),
        *,
        name: str = "loopctl",
        permission: PermissionCallback | None = None,
        require_approval: Iterable[str] = (),
        annotations: Mapping[str, mcp_types.ToolAnnotations] | None = None,
        deps: Any = None,
        store: loopctl.store.SessionStore | None = None,
        timeout: float | None = None,
        **options: Any,
    ) -> None:
        options.setdefault("log_level", "WARNING")
        super().__init__(name, **options)
        self._entries: list[Tool | ToolProvider | _AgentEntry] = []
        for item in tools:
            if isinstance(item, Agent):
                self._entries.append(_AgentEntry(self, item))
            elif isinstance(item, Tool) or (isinstance(item, ToolProvider) and not callable(item.tools)):
                self._entries.append(item)
            elif isinstance(item, Iterable) and not isinstance(item, (str, bytes)):
                for inner in item:
                    if not isinstance(inner, Tool):
                        raise TypeError(f"{inner!r} is not a tool")
                    self._entries.append(inner)
            else:
                raise TypeError(f"{item!r} is not a tool, a tool provider or an agent")
        self.permission = permission
        self.require_approval = frozenset(require_approval)
        self.tool_annotations = dict(annotations or {})
        self.deps = deps
        self.store = store
        self.timeout = timeout
        self._conversations: OrderedDict[str, Any] = OrderedDict()
        self._served()  # two tools of one name: refused now, not at the first tools/list

    # --- the tool list ----------------------------------------------------------------------------------------

    def _served(self) -> dict[str, Tool | _AgentEntry]:
        out: dict[str, Tool | _AgentEntry] = {}
        for entry in self._entries:
            group: Sequence[Any]
            if isinstance(entry, (_AgentEntry, Tool)):
                group = (entry,)
            else:
                group = entry.tools
            for t in group:
                if t.name in out:
                    raise ValueError(f"two tools are named {t.name!r}")
                out[t.name] = t
        return out

    async def list_tools(self) -> list[mcp_types.Tool]:
        """The SDK's own tools, then loopctl's, in the order given."""
        own = await super().list_tools()
        taken = {t.name for t in own}
        listed = list(own)
        for name, t in self._served().items():
            if name in taken:
                continue
            annotations = self.tool_annotations.get(name)
            listed.append(
                mcp_types.Tool(
                    name=name,
                    description=t.description,
                    input_schema=dict(t.input_schema),
                    annotations=annotations,
                )
            )
        return listed

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        found = self._served().get(name)
        if found is not None:
            return dict(found.input_schema)
        return super()._tool_input_schema(name)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        """Run the tool ``name`` on ``arguments`` (the SDK's own tools first), in the request ``context`` (the
        SDK's, for elicitation and progress; ``None`` outside a request). Every failure of a loopctl tool is an
        error result; an approval question is an elicitation or, on a 2026-07-28 session, an
        ``InputRequiredResult``."""
        served = self._served()
        if name not in served or self._tool_manager.get_tool(name) is not None:
            return await super().call_tool(name, arguments, context)
        ctx = context if context is not None else Context(mcp_server=self)
        entry = served[name]
        if isinstance(entry, _AgentEntry):
            return await entry.call(arguments, ctx)
        return await self._call_plain(entry, arguments, ctx)

    # --- plain tools ------------------------------------------------------------------------------------------

    async def _call_plain(
        self, t: Tool, arguments: dict[str, Any], ctx: Context[Any, Any]
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        call_id = _request_id(ctx)
        decision = await self._decide(t, ToolCallPart(id=call_id, name=t.name, input=arguments))
        for _ in range(2):  # a tool that raises ApprovalRequired is asked about once, then run again
            if isinstance(decision, Defer):
                message = _question(t.name, arguments, decision.reason)
                answered = await _ask(ctx, [_Ask("approve", call_id, message)], {"tool": t.name, "args": arguments})
                if isinstance(answered, mcp_types.InputRequiredResult):
                    return answered
                decision = answered.get(call_id, Deny("The call was not approved."))
            if isinstance(decision, Deny):
                return _result(ToolOutput(deny_reason(decision), is_error=True))
            given = decision.input if isinstance(decision, Modify) else arguments
            try:
                return _result(await self._run_tool(t, given, call_id))
            except ApprovalRequired as exc:
                decision = Defer(exc.reason)
        return _result(ToolOutput(f"Tool {t.name!r} still requires approval after it was approved.", is_error=True))

    async def _decide(self, t: Tool, call: ToolCallPart) -> Approve | Deny | Modify | Defer:
        if t.name in self.require_approval:
            return Defer()
        if self.permission is None:
            return Defer() if getattr(t, "requires_approval", False) else Approve()
        made = self.permission(call)
        if asyncio.iscoroutine(made) or isinstance(made, asyncio.Future):
            made = await made
        if made is True:
            return Approve()
        if made is False:
            return Deny()
        if isinstance(made, (Approve, Deny, Modify, Defer)):
            return made
        return Deny(f"The permission callback returned {type(made).__name__}, which is no decision.")

    async def _run_tool(self, t: Tool, arguments: Any, call_id: str) -> ToolOutput:
        context: ToolContext[Any] = ToolContext(call_id=call_id, name=t.name, deps=self.deps)
        try:
            if self.timeout is None:
                value = await t.call(arguments, context)
            else:
                value = await asyncio.wait_for(t.call(arguments, context), self.timeout)
        except ApprovalRequired:
            raise
        except TimeoutError:
            context.request_stop()
            return ToolOutput(f"Tool {t.name!r} timed out after {self.timeout:g} s", is_error=True)
        except ToolInputError as exc:
            return ToolOutput(f"Invalid input for tool {t.name!r}: {exc}", is_error=True)
        except ModelRetry as exc:
            return ToolOutput(exc.message, is_error=True)
        except Exception as exc:
            return ToolOutput(f"Tool {t.name!r} failed: {type(exc).__name__}: {exc}", is_error=True)
        return normalize(value)

    # --- conversations ----------------------------------------------------------------------------------------

    def _conversation(self, agent: Agent[Any, Any], conversation_id: str | None) -> Any:
        if self.store is not None:
            return agent.session(conversation_id, store=self.store, on_busy="wait")
        if conversation_id is not None and conversation_id in self._conversations:
            self._conversations.move_to_end(conversation_id)
            return self._conversations[conversation_id]
        conv = agent.session(on_busy="wait")
        conv.session_id = conversation_id or uuid.uuid4().hex
        self._conversations[conv.session_id] = conv
        while len(self._conversations) > MAX_CONVERSATIONS:
            self._conversations.popitem(last=False)
        return conv


class _AgentEntry:
    """An agent as one served tool."""

    def __init__(self, server: ToolServer, agent: Agent[Any, Any]) -> None:
        self.server = server
        self.agent = agent
        self.name = safe_tool_name(agent.name)
        self.description = agent.description or f"Ask the agent {agent.name} to do a task and give its answer."
        self.input_schema: Mapping[str, Any] = {
            "type": "object",
            "properties": {
                "input": {"type": "string", "description": "The task or question for the agent, in full."},
                "conversation": {
                    "type": "string",
                    "description": "The id of an earlier conversation with the agent to go on with (optional).",
                },
            },
            "required": ["input"],
            "additionalProperties": False,
        }

    async def call(
        self, arguments: dict[str, Any], ctx: Context[Any, Any]
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        prompt = arguments.get("input")
        wanted = arguments.get("conversation")
        if not isinstance(prompt, str) or (wanted is not None and not isinstance(wanted, str)):
            return _result(ToolOutput('invalid input: expected {"input": "<task>", "conversation": "<id>"}', True))
        if set(arguments) - {"input", "conversation"}:
            extra = ", ".join(sorted(set(arguments) - {"input", "conversation"}))
            return _result(ToolOutput(f"invalid input: unknown field(s) {extra}", is_error=True))
        state = _ask_state(ctx)
        approvals: dict[str, Approval] | None = None
        spent = _Spent()
        if state is not None and state.get("conversation"):
            # A later round of a 2026-07-28 approval: the paused run's conversation, and the client's answers.
            wanted = str(state["conversation"])
            spent = _Spent.load(state.get("carry"))
            answered = await _ask(ctx, _asks(state), {"conversation": wanted}, spent.dump())
            if isinstance(answered, mcp_types.InputRequiredResult):
                return answered
            approvals = dict(answered)
        conv = self.server._conversation(self.agent, wanted)
        try:
            run = await self._drive(conv, None if approvals is not None else prompt, approvals, ctx)
            spent = spent.plus(run)
            while run.outcome.kind is OutcomeKind.AWAITING_APPROVAL:
                asks = [_Ask(f"approve{i}", p.id, _pending_question(p)) for i, p in enumerate(run.pending_approvals)]
                answered = await _ask(ctx, asks, {"conversation": conv.session_id}, spent.dump())
                if isinstance(answered, mcp_types.InputRequiredResult):
                    return answered
                run = await self._drive(conv, None, dict(answered), ctx)
                spent = spent.plus(run)
        except Exception as exc:  # a conversation that cannot run (busy elsewhere, approvals that do not fit)
            return _result(ToolOutput(f"The agent {self.agent.name} could not run: {exc}", is_error=True))
        return _agent_result(self.agent.name, run, conv.session_id, spent)

    async def _drive(
        self, conv: Any, prompt: str | None, approvals: Mapping[str, Approval] | None, ctx: Context[Any, Any]
    ) -> Run[Any]:
        """One run of the conversation, its turns and tool calls reported as progress."""
        deps = self.server.deps if self.agent.deps_type is not type(None) else None
        async with conv.stream(prompt, deps=deps, approvals=approvals) as stream:
            async for event in stream:
                if isinstance(event, TurnFinished):
                    await _progress(ctx, event.turn, f"turn {event.turn} done")
                elif isinstance(event, ToolCallStarted):
                    await _progress(ctx, event.turn, f"calling {event.call.name}")
            run: Run[Any] = await stream.result()
        return run


# --- asking the client ------------------------------------------------------------------------------------------


async def _ask(
    ctx: Context[Any, Any], asks: Sequence[_Ask], binding: Mapping[str, Any], carry: Any = None
) -> dict[str, Approval] | mcp_types.InputRequiredResult:
    """The client's decision on each question (by pending id), or, on a 2026-07-28 session whose client has not
    answered yet, the ``InputRequiredResult`` that asks. ``binding`` ties the answers to the call: the tool
    and arguments, or the paused conversation (sealed in ``request_state`` by the SDK)."""
    if not asks:
        return {}
    try:
        _check_capability(ctx)
    except _NotAsked as exc:
        return {a.pending_id: Deny(f"The call needs approval, and {exc}.") for a in asks}
    version = ctx.protocol_version
    if version is not None and is_version_at_least(version, _MODERN):
        state = _ask_state(ctx)
        responses = ctx.input_responses or {}
        digest = _digest(binding)
        if state is not None and state.get("binding") == digest and all(a.key in responses for a in asks):
            return {a.pending_id: _decision(responses[a.key]) for a in asks}
        requests: dict[str, Any] = {
            a.key: mcp_types.ElicitRequest(
                params=mcp_types.ElicitRequestFormParams(message=a.message, requested_schema=dict(APPROVAL_SCHEMA))
            )
            for a in asks
        }
        sealed = {
            "kind": _STATE_KIND,
            "binding": digest,
            "asks": [[a.key, a.pending_id, a.message] for a in asks],
            **({"conversation": binding["conversation"]} if "conversation" in binding else {}),
            **({"carry": carry} if carry is not None else {}),
        }
        return mcp_types.InputRequiredResult(input_requests=requests, request_state=orjson.dumps(sealed).decode())
    out: dict[str, Approval] = {}
    for a in asks:
        try:
            answer = await ctx.session.elicit_form(
                message=a.message, requested_schema=dict(APPROVAL_SCHEMA), related_request_id=ctx.request_id
            )
        except Exception as exc:  # no back-channel (a stateless HTTP request), or the client failed
            out[a.pending_id] = Deny(f"The call needs approval, and the client could not be asked ({exc}).")
            continue
        out[a.pending_id] = _decision(answer)
    return out


def _check_capability(ctx: Context[Any, Any]) -> None:
    caps = ctx.client_capabilities
    elicitation = caps.elicitation if caps is not None else None
    if elicitation is None or (elicitation.form is None and elicitation.url is not None):
        raise _NotAsked("the client cannot be asked (it declared no form elicitation capability)")


def _ask_state(ctx: Context[Any, Any]) -> dict[str, Any] | None:
    """The approval state a 2026-07-28 client echoed back (``None``: none, or not ours)."""
    raw = ctx.request_state
    if not raw:
        return None
    try:
        state = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return state if isinstance(state, dict) and state.get("kind") == _STATE_KIND else None


def _asks(state: Mapping[str, Any]) -> list[_Ask]:
    return [_Ask(str(k), str(p), str(m)) for k, p, m in state.get("asks", [])]


def _decision(answer: Any) -> Approval:
    action = getattr(answer, "action", None)
    if action == "accept":
        content = getattr(answer, "content", None) or {}
        if content.get("approve", True) is True:
            return Approve()
        reason = content.get("reason")
        return Deny(reason if isinstance(reason, str) and reason.strip() else "The user refused the call.")
    if action == "decline":
        return Deny("The user declined the call.")
    return Deny("The user cancelled the approval request; the call did not run.")


def _digest(binding: Mapping[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(binding, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()[:32]


def _question(name: str, arguments: Any, reason: str | None) -> str:
    args = orjson.dumps(arguments, default=str).decode()
    if len(args) > 2000:
        args = args[:2000] + "…"
    why = f" ({reason})" if reason else ""
    return f"Allow the tool {name} to run{why}? Arguments: {args}"


def _pending_question(p: PendingApproval) -> str:
    who = f"The agent {p.agent}" if p.agent else "The agent"
    args = orjson.dumps(p.input, default=str).decode()
    if len(args) > 2000:
        args = args[:2000] + "…"
    why = f" ({p.reason})" if p.reason else ""
    return f"{who} wants to call {p.name}{why}. Arguments: {args}. Allow it?"


async def _progress(ctx: Context[Any, Any], value: int, message: str) -> None:
    try:
        await ctx.report_progress(value, None, message)
    except Exception:  # no request to report on (a direct call_tool), or the client went away
        return


def _request_id(ctx: Context[Any, Any]) -> str:
    try:
        return f"mcp-{ctx.request_id}"
    except ValueError:
        return f"mcp-{uuid.uuid4().hex[:12]}"


# --- results ---------------------------------------------------------------------------------------------------


def _result(output: ToolOutput, meta: Mapping[str, Any] | None = None) -> mcp_types.CallToolResult:
    """A :class:`~loopctl.tool.ToolOutput` as a ``CallToolResult``."""
    root = output.tool_content().root
    blocks: list[mcp_types.ContentBlock] = []
    structured: Any = None
    if isinstance(root, str):
        blocks.append(mcp_types.TextContent(type="text", text=root))
        if root.startswith("{") and not output.is_error:
            try:
                value = orjson.loads(root)
            except orjson.JSONDecodeError:
                value = None
            structured = value if isinstance(value, dict) else None
    else:
        for part in root:
            if isinstance(part, ImagePart):
                src = part.source
                blocks.append(mcp_types.ImageContent(type="image", data=src.data, mime_type=src.media_type))
            else:
                blocks.append(mcp_types.TextContent(type="text", text=part.text))
    return mcp_types.CallToolResult(
        content=blocks, structured_content=structured, is_error=output.is_error, _meta=dict(meta) if meta else None
    )


@dataclass(frozen=True, slots=True)
class _Spent:
    """What an agent's tool call spent over its runs (a run continued after approvals is another run)."""

    input_tokens: int | None = None  # None: not reported by any model call (Usage's rule)
    output_tokens: int | None = None
    requests: int = 0
    tool_calls: int = 0
    cost: Decimal | None = Decimal(0)

    def plus(self, run: Run[Any]) -> _Spent:
        cost = None if self.cost is None or run.cost is None else self.cost + run.cost
        tokens = Usage(self.input_tokens, self.output_tokens) + run.usage
        return _Spent(
            tokens.input_tokens,
            tokens.output_tokens,
            self.requests + len(run.turns),
            self.tool_calls + sum(len(t.tool_calls) for t in run.turns),
            cost,
        )

    def dump(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "requests": self.requests,
            "tool_calls": self.tool_calls,
            "cost": str(self.cost) if self.cost is not None else None,
        }

    @classmethod
    def load(cls, data: Any) -> _Spent:
        if not isinstance(data, dict):
            return cls()
        cost = data.get("cost")
        def count(n: Any) -> int | None:
            return n if type(n) is int else None

        return cls(
            count(data.get("input_tokens")),
            count(data.get("output_tokens")),
            int(data.get("requests", 0)),
            int(data.get("tool_calls", 0)),
            Decimal(cost) if isinstance(cost, str) else None,
        )


def _agent_result(name: str, run: Run[Any], conversation: str | None, spent: _Spent) -> mcp_types.CallToolResult:
    meta = {USAGE_META_KEY: spent.dump()}
    kind = run.outcome.kind
    if kind is not OutcomeKind.COMPLETED:
        why = run.outcome.error or kind.value
        text = f"The agent {name} did not finish its task ({kind.value}): {why}"
        return _result(ToolOutput(text, is_error=True), meta)
    value = run.output
    shown = value if isinstance(value, str) else normalize(value).tool_content().root
    text = shown if isinstance(shown, str) else str(shown)
    result = _result(ToolOutput(text), meta)
    structured: dict[str, Any] = {"output": value if isinstance(value, str) else orjson.loads(text)}
    structured["conversation"] = conversation
    return result.model_copy(update={"structured_content": structured})
