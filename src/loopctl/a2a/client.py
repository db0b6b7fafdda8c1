"""A remote A2A agent as a tool (a sub-agent) of a loopctl agent, on the official ``a2a-sdk`` (1.x).

:class:`A2AAgent` is a :class:`~loopctl.tool.Tool`: the model calls it with ``{"input": "<task>"}``, the task
goes to the remote agent as an A2A message (streamed), and the model reads its answer (the text of the task's
artifacts, or of its reply message). Inside an agent's run it behaves as a local sub-agent does
(``docs/agent.md``, "Sub-agents"; ``docs/a2a.md``):

- **usage and cost**: what the remote run reports (``metadata["loopctl/usage"]``, as loopctl's A2A server
  sends it) counts in the calling run's usage, cost and usage limits;
- **approvals**: a remote task that stops in ``input-required`` with loopctl's approval data pauses the
  calling run; ``run.pending_approvals`` lists each remote call as ``"<call id>/<remote call id>"`` with the
  agent path ``"boss > remote"``, and ``conv.run(approvals={...})`` sends the decisions to the same remote
  task, which goes on where it stopped;
- **cancellation**: a cancelled call (the run cancelled, a tool timeout) cancels the remote task
  (``tasks/cancel``); cancelled before the remote named its task (the server chooses the id), the call waits
  up to :data:`FIRST_EVENT_WAIT` seconds for the remote's first event to learn it. A run that ends without
  calling the tool again for a call paused on a remote approval (cancelled, failed, or the call denied)
  cancels the remote task that waited (:meth:`A2AAgent.cancel_paused`);
- **progress**: the remote's ``working`` status messages reach the run's observers as
  :class:`~loopctl.engine.ToolProgress` (through :meth:`~loopctl.tool.ToolContext.report_progress`), at most
  one every ``progress_interval`` seconds: a burst is coalesced into its newest message, sent once the
  interval has passed;
- **limits**: nothing a remote agent sends grows without bound. Each response is read up to
  ``max_response_bytes`` (default 32 MiB), a call takes at most ``max_events`` stream events (default 10,000)
  and ``max_parts`` artifact parts (default 1,000); past any of them the call fails with
  :class:`A2ALimitExceeded`, naming the agent and the limit (the model reads it as the call's error, and the
  remote task is cancelled). The answer handed to the model is kept to ``max_result_chars`` (default 100,000,
  as :attr:`~loopctl.engine.RunConfig.max_tool_output_chars`): a longer answer is cut in the middle with a
  note saying how much was cut, its text (only its head and tail are held while it arrives) or, for an answer
  of data parts, their JSON text (the data as is when it fits);
- **spans**: the request carries the current trace context (W3C ``traceparent``, with ``opentelemetry-api``),
  so the remote run's spans join the caller's trace under its ``execute_tool`` span.

A remote task that fails, is rejected or cancelled is an error result the model reads. Each call is a task in
a context of its own (``<session id>/<call id>`` under a stored conversation), so a continued call finds its
task again, in this process or another.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import httpx
import orjson
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.client.client import Client
from a2a.helpers.proto_helpers import get_data_parts, get_text_parts
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)
from google.protobuf import json_format, struct_pb2

from loopctl._aio import retrieve
from loopctl._progress import PROGRESS_INTERVAL, ProgressGate
from loopctl.agent._tools import safe_tool_name
from loopctl.compact.textcut import clip, clip_known_ends, clip_middle
from loopctl.engine.permission import Approval, Approve, Deny, PendingApproval, deny_reason
from loopctl.errors import LoopError
from loopctl.message import ToolCallPart
from loopctl.response import Usage
from loopctl.tool import ApprovalRequired, ToolContext, ToolInputError, ToolOutput

__all__ = [
    "FIRST_EVENT_WAIT",
    "MAX_DESCRIPTION_CHARS",
    "MAX_EVENTS",
    "MAX_PARTS",
    "MAX_RESPONSE_BYTES",
    "MAX_RESULT_CHARS",
    "PROGRESS_INTERVAL",
    "A2AAgent",
    "A2AError",
    "A2ALimitExceeded",
]

USAGE_KEY = "loopctl/usage"

MAX_RESULT_CHARS = 100_000
"""The characters of a remote agent's answer handed to the model, by default (as
:attr:`~loopctl.engine.RunConfig.max_tool_output_chars`, about 25,000 tokens): a longer one is cut in the middle."""

MAX_RESPONSE_BYTES = 32 * 1024 * 1024
"""The bytes of one HTTP response from a remote agent read, by default (32 MiB: what loopctl's own servers accept
as a request); past it the call fails with :class:`A2ALimitExceeded`."""

MAX_EVENTS = 10_000
"""The stream events (status updates, artifact updates, messages) one call takes, by default."""

MAX_PARTS = 1_000
"""The artifact parts (text or data) one call takes, by default."""

FIRST_EVENT_WAIT = 2.0
"""Seconds a call cancelled before the remote named its task waits for the remote's first event, to learn the task
id that ``tasks/cancel`` needs (the server chooses it: a client cannot name a new task)."""

MAX_CONTEXT_IDS = 10_000
"""The A2A context ids of calls in conversations without a store, and the paused remote tasks, remembered in this
process (the newest)."""

MAX_DESCRIPTION_CHARS = 4_000
"""The characters of a remote agent card's description :meth:`A2AAgent.connect` makes the tool's description
(the model reads it with every request that offers the tool); a longer one is cut at the end."""

_MAX_PROGRESS_CHARS = 1_000  # a progress message's text, at most (a status message may be long)

_INPUT_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The task or question for the agent, in full."}},
    "required": ["input"],
    "additionalProperties": False,
}

_FINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
}


class A2AError(LoopError):
    """A remote A2A agent could not be reached, or its card could not be read. The text names the URL."""

    retryable = True


class A2ALimitExceeded(A2AError):
    """A remote A2A agent sent more than :class:`A2AAgent` takes: ``limit`` names the limit (``max_events``,
    ``max_parts``, ``max_response_bytes``) and ``value`` its value; ``agent`` is the tool's name; ``what``
    says what the agent sent, in the message. Raised from the call (the model reads it as the call's error);
    the remote task is cancelled."""

    retryable = False

    def __init__(self, agent: str, limit: str, value: int, what: str) -> None:
        super().__init__(f"the remote agent {agent} sent {what} (the limit {limit}={value}): the call was stopped")
        self.agent = agent
        self.limit = limit
        self.value = value


@dataclass(slots=True)
class _Paused:
    """A remote task waiting on approvals."""

    task_id: str
    context_id: str
    pending: tuple[PendingApproval, ...]


class _Text:
    """Text joined from pieces, held up to ``limit`` characters: its head and its tail (each up to ``limit``
    characters) once it is longer, the middle counted, not kept. :meth:`value` is the text, or its head and
    tail around a note saying how many characters were cut (as :func:`~loopctl.compact.textcut.clip_middle`)."""

    __slots__ = ("_head", "_limit", "_pieces", "_size", "_tail")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._head = ""
        self._tail = ""
        self._size = 0
        self._pieces = 0

    def __bool__(self) -> bool:
        return self._pieces > 0

    def add(self, piece: str) -> None:
        """Add ``piece``, on a line of its own after the first (as ``"\\n".join`` of the pieces)."""
        if self._pieces:
            self._add("\n")
        self._pieces += 1
        self._add(piece)

    def _add(self, piece: str) -> None:
        self._size += len(piece)
        room = self._limit - len(self._head)
        if room > 0:
            self._head += piece[:room]
            piece = piece[room:]
        if piece:
            self._tail = (self._tail + piece)[-self._limit :]

    def value(self) -> str:
        if self._size <= self._limit:
            return self._head + self._tail
        return clip_known_ends(self._head, self._tail, self._size, self._limit)


@dataclass(slots=True)
class _Outcome:
    limit: int = MAX_RESULT_CHARS
    state: int = TaskState.TASK_STATE_UNSPECIFIED
    task_id: str = ""
    context_id: str = ""
    texts: _Text = field(init=False)
    data: list[Any] = field(default_factory=list)
    said: str = ""
    status_data: list[Any] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    parts: int = 0
    events: int = 0

    def __post_init__(self) -> None:
        self.texts = _Text(self.limit)


class _Progress(ProgressGate):
    """The progress reports of one call (the remote's ``working`` status messages), numbered, at most one every
    ``interval`` seconds (:class:`~loopctl._progress.ProgressGate`)."""

    __slots__ = ("_count",)

    def __init__(self, context: ToolContext[Any], interval: float) -> None:
        super().__init__(context.report_progress, interval)
        self._count = 0

    def say(self, message: str) -> None:
        self._count += 1
        self.report(self._count, None, message)


class A2AAgent:
    """A remote A2A agent at ``url`` (its base URL: the card is read from
    ``/.well-known/agent-card.json``) as a tool named ``name`` (default: the card's name, made a tool name).

    Make one with :meth:`connect` (reads the card: name and description from it), or with ``A2AAgent(url,
    name=..., description=...)`` (the card is read at the first call). ``headers`` go with every request
    (an ``Authorization`` header...; never shown in ``repr``). ``timeout``: seconds one HTTP read may take.
    Close it with :meth:`aclose` (or ``async with``).

    Limits on what the remote agent sends (module docstring; ``docs/a2a.md``, "Limits"):
    ``max_result_chars`` (characters of the answer handed to the model, its text or its data parts' JSON text,
    cut in the middle past it; default
    :data:`MAX_RESULT_CHARS`), ``max_response_bytes`` (bytes of one HTTP response; :data:`MAX_RESPONSE_BYTES`),
    ``max_events`` (stream events per call; :data:`MAX_EVENTS`), ``max_parts`` (artifact parts per call;
    :data:`MAX_PARTS`), and ``progress_interval`` (seconds between two progress reports forwarded to the run;
    :data:`PROGRESS_INTERVAL`). Past ``max_response_bytes``, ``max_events`` or ``max_parts`` the call raises
    :class:`A2ALimitExceeded`. Each must be positive (``ValueError``).
    """

    runs_sub_agent = True
    """Marks a tool whose calls run another agent (its approvals are listed as a sub-agent's)."""

    def __init__(
        self,
        url: str,
        *,
        name: str,
        description: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 300.0,
        card: AgentCard | None = None,
        max_result_chars: int = MAX_RESULT_CHARS,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        max_events: int = MAX_EVENTS,
        max_parts: int = MAX_PARTS,
        progress_interval: float = PROGRESS_INTERVAL,
    ) -> None:
        for option, value in (
            ("max_result_chars", max_result_chars),
            ("max_response_bytes", max_response_bytes),
            ("max_events", max_events),
            ("max_parts", max_parts),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"A2AAgent({url!r}): {option} must be a positive whole number, not {value!r}")
        if not progress_interval >= 0:
            raise ValueError(f"A2AAgent({url!r}): progress_interval must be 0 or more seconds, not {progress_interval}")
        self.url = url
        self.name = safe_tool_name(name)
        self.description = description or f"Ask the remote agent {name} to do a task and give its answer."
        self.input_schema = _INPUT_SCHEMA
        self.requires_approval = False
        self.repeatable = False
        self.card = card
        self._headers = dict(headers or {})
        self._timeout = timeout
        self.max_result_chars = max_result_chars
        self.max_response_bytes = max_response_bytes
        self.max_events = max_events
        self.max_parts = max_parts
        self.progress_interval = progress_interval
        self._http: httpx.AsyncClient | None = None
        self._client: Client | None = None
        self._connecting = asyncio.Lock()  # the first calls, when they come at once, make one client
        self._paused: OrderedDict[tuple[object, str], _Paused] = OrderedDict()  # the newest MAX_CONTEXT_IDS

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        name: str | None = None,
        description: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 300.0,
        max_result_chars: int = MAX_RESULT_CHARS,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        max_events: int = MAX_EVENTS,
        max_parts: int = MAX_PARTS,
        progress_interval: float = PROGRESS_INTERVAL,
    ) -> A2AAgent:
        """Read the agent card at ``url`` (the remote agent's base URL) and make the tool: named ``name`` and
        described by ``description`` when given, else by the card; ``headers`` are sent with every request
        (authorization), and ``timeout`` is the seconds one call may wait for the remote task. The limits,
        ``max_result_chars``, ``max_response_bytes``, ``max_events``, ``max_parts`` and ``progress_interval``,
        are the constructor's. Raises :class:`A2AError` when the card cannot be read."""
        made = cls(
            url,
            name=name or "remote",
            description=description,
            headers=headers,
            timeout=timeout,
            max_result_chars=max_result_chars,
            max_response_bytes=max_response_bytes,
            max_events=max_events,
            max_parts=max_parts,
            progress_interval=progress_interval,
        )
        card = await made._card()
        made.name = safe_tool_name(name or card.name)
        # The card's text goes to the model with every request that offers the tool: kept to a description's size.
        made.description = description or clip(card.description, MAX_DESCRIPTION_CHARS) or made.description
        return made

    def __repr__(self) -> str:
        return f"A2AAgent({self.url!r}, name={self.name!r})"

    async def __aenter__(self) -> A2AAgent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    # --- the connection -------------------------------------------------------------------------------------

    def _http_client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                headers=self._headers,
                timeout=httpx.Timeout(30.0, read=self._timeout),
                # A hook, not a transport of its own: the client keeps its proxies from the environment.
                event_hooks={"request": [_inject_trace], "response": [self._cap_response]},
            )
        return self._http

    async def _cap_response(self, response: httpx.Response) -> None:
        """The HTTP client's response hook (before the body is read): the body is read through a
        :class:`_CappedStream`, up to ``max_response_bytes``."""
        stream = response.stream
        if isinstance(stream, httpx.AsyncByteStream):
            response.stream = _CappedStream(stream, self)

    async def _card(self) -> AgentCard:
        if self.card is None:
            try:
                self.card = await A2ACardResolver(self._http_client(), self.url).get_agent_card()
            except Exception as exc:
                raise A2AError(f"the A2A agent at {self.url} could not be reached: {_describe(exc)}") from exc
        return self.card

    async def _sdk(self) -> Client:
        if self._client is None:
            async with self._connecting:
                if self._client is None:
                    card = await self._card()
                    config = ClientConfig(httpx_client=self._http_client())
                    self._client = await create_client(card, client_config=config)
        return self._client

    # --- the tool -------------------------------------------------------------------------------------------

    def check_input(self, input: Any) -> None:  # noqa: A002 - the Tool protocol's name
        """Refuse input that is not ``{"input": "<text>"}`` (:class:`~loopctl.tool.ToolInputError`)."""
        _prompt(input)

    async def call(self, input: Any, context: ToolContext[Any]) -> Any:  # noqa: A002
        """Send the task ``input`` (``{"input": "<task>"}``) for the call ``context`` describes (or the decisions
        on its paused remote task) and give the answer: the remote agent's text or JSON, or an error output.
        Raises :class:`~loopctl.tool.ApprovalRequired` when the remote task waits on approvals inside an
        agent's run."""
        from loopctl.agent._conversation import scope_of

        prompt = _prompt(input)
        scope = scope_of(context)
        owner: object = scope.conversation if scope is not None else None
        decisions = scope.nested.get(context.call_id) if scope is not None else None
        key = (_owner_key(owner), context.call_id)
        try:
            client = await self._sdk()
        except A2AError as exc:
            return ToolOutput(str(exc), is_error=True)
        resumed = ""  # the remote task the decisions go to (cancelled with the call, before it says a word)
        if decisions is not None:
            paused = self._paused.get(key) or await self._find_paused(client, owner, context.call_id)
            if paused is None:
                return ToolOutput(f"The remote agent {self.name} has no paused task to continue.", is_error=True)
            message = _decisions_message(paused, decisions)
            resumed = paused.task_id
        else:
            context_id = _context_id(owner, context.call_id)
            message = Message(
                message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=prompt)], context_id=context_id
            )
        outcome = _Outcome(self.max_result_chars)
        progress = _Progress(context, self.progress_interval)
        named = asyncio.Event()  # the remote named its task (its first event)
        # The stream is read by a task of its own, so that a call cancelled before the remote named its task
        # can still read the first event for the task id to cancel (the protocol has the server choose it).
        reader = asyncio.ensure_future(self._read(client, message, outcome, progress, named))
        reader.add_done_callback(retrieve)  # it may fail after the call gave it up
        try:
            await asyncio.shield(reader)
        except asyncio.CancelledError:
            await asyncio.shield(self._give_up(client, reader, outcome, progress, named, resumed))
            raise
        except Exception as exc:
            over = _limit_in(exc)
            if over is not None:
                if outcome.task_id and outcome.state not in _FINAL:
                    await _cancel_remote(client, outcome.task_id)
                raise over from None
            return ToolOutput(f"The remote agent {self.name} failed: {_describe(exc)}", is_error=True)
        finally:
            reader.cancel()
            progress.close()
            self._paused.pop(key, None)
        progress.flush()
        _record(context, outcome.usage)
        state = outcome.state
        if state == TaskState.TASK_STATE_INPUT_REQUIRED:
            pending = _pending_of(outcome.status_data, call=context.call_id)
            if scope is None or not pending:
                said = outcome.said or "the remote agent asks for input"
                said = _clip_text(said, self.max_result_chars)
                return ToolOutput(f"The remote agent {self.name} needs input that cannot be given here: {said}", True)
            self._remember(key, _Paused(outcome.task_id, outcome.context_id, pending))
            names = ", ".join(f"{p.name} ({context.call_id}/{p.id})" for p in pending)
            raise ApprovalRequired(f"the remote agent {self.name} awaits approval of {names}")
        if state == TaskState.TASK_STATE_COMPLETED or (state == TaskState.TASK_STATE_UNSPECIFIED and outcome.said):
            if outcome.texts:
                return outcome.texts.value()
            if outcome.data:
                return _bounded_data(outcome.data[0] if len(outcome.data) == 1 else outcome.data, self.max_result_chars)
            return _clip_text(outcome.said, self.max_result_chars)
        what = TaskState.Name(state).removeprefix("TASK_STATE_").lower().replace("_", "-")
        why = f": {_clip_text(outcome.said, self.max_result_chars)}" if outcome.said else ""
        return ToolOutput(f"The remote agent {self.name} did not finish its task ({what}){why}", is_error=True)

    async def _read(
        self, client: Client, message: Message, outcome: _Outcome, progress: _Progress, named: asyncio.Event
    ) -> None:
        """Send ``message`` and take the streamed events into ``outcome``; ``named`` is set once the remote has
        named the task."""
        async for event in client.send_message(SendMessageRequest(message=message)):
            self._absorb(outcome, event, progress)
            if outcome.task_id:
                named.set()

    async def _give_up(
        self,
        client: Client,
        reader: asyncio.Future[None],
        outcome: _Outcome,
        progress: _Progress,
        named: asyncio.Event,
        resumed: str,
    ) -> None:
        """The call was cancelled: stop reading and cancel the remote task (``tasks/cancel``) unless it ended.
        When the remote has not named its task yet, its first event is awaited for up to
        :data:`FIRST_EVENT_WAIT` seconds (the reader goes on, reporting nothing more), for the task id."""
        progress.stop()
        try:
            if not (outcome.task_id or resumed) and not reader.done():
                first = asyncio.ensure_future(named.wait())
                try:
                    await asyncio.wait((first, reader), timeout=FIRST_EVENT_WAIT, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    first.cancel()
        finally:
            reader.cancel()
        task_id = outcome.task_id or resumed
        if task_id and outcome.state not in _FINAL:
            await _cancel_remote(client, task_id)

    async def cancel_paused(self, owner: object, call_id: str) -> None:
        """Cancel the remote task that the paused call ``call_id`` of the conversation ``owner`` waits on
        (``tasks/cancel``): the calling run ended without calling this tool again (it was cancelled or failed
        first, or the call was denied), so nothing will answer the task. Nothing when no task waits (found
        as :meth:`nested_pending` finds it); a failure is ignored (the remote may have dropped the task)."""
        key = (_owner_key(owner), call_id)
        paused = self._paused.pop(key, None)
        try:
            client = await self._sdk()
            if paused is None:
                paused = await self._find_paused(client, owner, call_id)
                self._paused.pop(key, None)
        except Exception:
            return
        if paused is not None:
            await _cancel_remote(client, paused.task_id)

    def _absorb(self, outcome: _Outcome, event: Any, progress: _Progress) -> None:
        """Take one stream event into ``outcome``; a ``working`` status message goes to ``progress``. Raises
        :class:`A2ALimitExceeded` past ``max_events`` or ``max_parts``."""
        outcome.events += 1
        if outcome.events > self.max_events:
            raise A2ALimitExceeded(self.name, "max_events", self.max_events, f"more than {self.max_events:,} events")
        kind = event.WhichOneof("payload")
        if kind == "message":
            outcome.said = "\n".join(get_text_parts(list(event.message.parts)))
            return
        if kind == "task":
            held = outcome.parts
            self._count_parts(outcome, sum(len(a.parts) for a in event.task.artifacts), reset=True)
            if not _take_task(outcome, event.task):  # no artifacts: the parts held are still held
                outcome.parts = held
            return
        if kind == "status_update":
            update = event.status_update
            outcome.task_id, outcome.context_id = update.task_id, update.context_id
            outcome.state = update.status.state
            if update.status.HasField("message"):
                outcome.said = "\n".join(get_text_parts(list(update.status.message.parts)))
                outcome.status_data = get_data_parts(list(update.status.message.parts))
                if outcome.state == TaskState.TASK_STATE_WORKING and outcome.said:
                    progress.say(_clip_text(outcome.said, _MAX_PROGRESS_CHARS))
            _take_usage(outcome, update.metadata)
        elif kind == "artifact_update":
            artifact = event.artifact_update.artifact
            self._count_parts(outcome, len(artifact.parts))
            for text in get_text_parts(list(artifact.parts)):
                outcome.texts.add(text)
            outcome.data.extend(get_data_parts(list(artifact.parts)))
            _take_usage(outcome, artifact.metadata)

    def _count_parts(self, outcome: _Outcome, parts: int, *, reset: bool = False) -> None:
        outcome.parts = parts if reset else outcome.parts + parts
        if outcome.parts > self.max_parts:
            raise A2ALimitExceeded(
                self.name, "max_parts", self.max_parts, f"more than {self.max_parts:,} artifact parts"
            )

    def _remember(self, key: tuple[object, str], paused: _Paused) -> None:
        self._paused[key] = paused
        self._paused.move_to_end(key)
        while len(self._paused) > MAX_CONTEXT_IDS:  # an older one is found again by its context (_find_paused)
            self._paused.popitem(last=False)

    async def nested_pending(self, owner: object, call_id: str) -> tuple[PendingApproval, ...]:
        """The remote calls the paused call ``call_id`` of the conversation ``owner`` waits on (for
        ``run.pending_approvals``); empty when none, or when the remote agent cannot be reached."""
        paused = self._paused.get((_owner_key(owner), call_id))
        if paused is None:
            try:
                paused = await self._find_paused(await self._sdk(), owner, call_id)
            except Exception:
                return ()
        return paused.pending if paused is not None else ()

    async def _find_paused(self, client: Client, owner: object, call_id: str) -> _Paused | None:
        """The remote task of call ``call_id`` still waiting on input (after a restart: by its context id)."""
        context_id = _context_id(owner, call_id, new=False)
        if context_id is None:
            return None
        found = await client.list_tasks(
            ListTasksRequest(context_id=context_id, status=TaskState.TASK_STATE_INPUT_REQUIRED)
        )
        for task in found.tasks:
            pending = _pending_of(_status_data(task), call=call_id)
            if pending:
                paused = _Paused(task.id, task.context_id, pending)
                self._remember((_owner_key(owner), call_id), paused)
                return paused
        return None


# --- helpers ------------------------------------------------------------------------------------------------------


def _prompt(input: Any) -> str:  # noqa: A002
    if not isinstance(input, dict) or not isinstance(input.get("input"), str) or set(input) - {"input"}:
        raise ToolInputError('invalid input: expected {"input": "<the task, as text>"}')
    text: str = input["input"]
    return text


def _owner_key(owner: object) -> object:
    session = getattr(owner, "session_id", None)
    store = getattr(owner, "store", None)
    return (id(store), session) if store is not None and session else id(owner)


_CONTEXTS: OrderedDict[tuple[object, str], str] = OrderedDict()


def _context_id(owner: object, call_id: str, *, new: bool = True) -> str | None:
    """The A2A context of a call: ``<session id>/<call id>`` under a stored conversation (found again by
    another process), else a fresh id remembered in this process."""
    session = getattr(owner, "session_id", None)
    if getattr(owner, "store", None) is not None and session:
        return f"{session}/{call_id}"
    key = (_owner_key(owner), call_id)
    if key not in _CONTEXTS:
        if not new:
            return None
        _CONTEXTS[key] = uuid.uuid4().hex
        while len(_CONTEXTS) > MAX_CONTEXT_IDS:
            _CONTEXTS.popitem(last=False)
    _CONTEXTS.move_to_end(key)
    return _CONTEXTS[key]


def _clip_text(text: str, limit: int) -> str:
    held = _Text(limit)
    held.add(text)
    return held.value()


def _bounded_data(value: Any, limit: int) -> Any:
    """The data parts of an answer, ``value`` (a JSON value), as the model reads them within ``limit``
    characters: ``value`` itself when its compact JSON text (what :func:`~loopctl.tool.to_tool_output` makes of
    it) fits, else that text cut in the middle with a note saying how much was cut (as the answer's text is)."""
    text = orjson.dumps(value).decode()
    return value if len(text) <= limit else clip_middle(text, limit)


async def _cancel_remote(client: Client, task_id: str) -> None:
    """Cancel the remote task ``task_id`` (``tasks/cancel``), shielded from the caller's own cancellation; a
    failure is ignored (the task may have ended meanwhile)."""
    with contextlib.suppress(Exception):
        await asyncio.shield(client.cancel_task(CancelTaskRequest(id=task_id)))


def _limit_in(exc: BaseException) -> A2ALimitExceeded | None:
    """The :class:`A2ALimitExceeded` behind ``exc`` (the SDK may wrap what the transport raised)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, A2ALimitExceeded):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class _CappedStream(httpx.AsyncByteStream):
    """A response body read up to the tool's ``max_response_bytes`` (then :class:`A2ALimitExceeded`)."""

    def __init__(self, inner: httpx.AsyncByteStream, tool: A2AAgent) -> None:
        self._inner = inner
        self._tool = tool

    async def __aiter__(self) -> AsyncIterator[bytes]:
        limit = self._tool.max_response_bytes
        read = 0
        async for chunk in self._inner:
            read += len(chunk)
            if read > limit:
                what = f"a response of more than {limit:,} bytes"
                raise A2ALimitExceeded(self._tool.name, "max_response_bytes", limit, what)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def _take_task(outcome: _Outcome, task: Task) -> bool:
    """Take the task's state, status message, artifacts and usage into ``outcome``; whether its artifacts (any
    text or data) replaced the ones held."""
    outcome.task_id, outcome.context_id = task.id, task.context_id
    outcome.state = task.status.state
    if task.status.HasField("message"):
        outcome.said = "\n".join(get_text_parts(list(task.status.message.parts)))
        outcome.status_data = _status_data(task)
    texts = _Text(outcome.limit)
    data: list[Any] = []
    for artifact in task.artifacts:
        for text in get_text_parts(list(artifact.parts)):
            texts.add(text)
        data.extend(get_data_parts(list(artifact.parts)))
        _take_usage(outcome, artifact.metadata)
    replaced = bool(texts or data)
    if replaced:
        outcome.texts, outcome.data = texts, data
    _take_usage(outcome, task.metadata)
    return replaced


def _status_data(task: Task) -> list[Any]:
    return get_data_parts(list(task.status.message.parts)) if task.status.HasField("message") else []


def _take_usage(outcome: _Outcome, metadata: struct_pb2.Struct) -> None:
    if metadata is None or USAGE_KEY not in metadata:
        return
    value = json_format.MessageToDict(metadata).get(USAGE_KEY)
    if isinstance(value, dict):
        outcome.usage = value


def _record(context: ToolContext[Any], usage: Mapping[str, Any] | None) -> None:
    if not usage:
        return
    cost = usage.get("cost")
    context.record_usage(
        Usage(input_tokens=_count(usage.get("input_tokens")), output_tokens=_count(usage.get("output_tokens"))),
        cost=Decimal(cost) if isinstance(cost, str) else None,
        requests=_count(usage.get("requests")) or 0,
        tool_calls=_count(usage.get("tool_calls")) or 0,
    )


def _count(value: Any) -> int | None:
    """A count of the remote's usage (a JSON number, a float once it crossed a protobuf ``Struct``), or
    ``None`` when it is missing or ``null``: the remote did not know it (unknown is not zero, as in
    :class:`~loopctl.response.Usage`)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return int(value)


def _pending_of(status_data: list[Any], *, call: str) -> tuple[PendingApproval, ...]:
    out: list[PendingApproval] = []
    for data in status_data:
        items = data.get("approvals") if isinstance(data, dict) else None
        if not isinstance(items, list):
            continue
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("id"), str):
                continue
            tool = item.get("tool") if isinstance(item.get("tool"), str) else "?"
            reason = item.get("reason") if isinstance(item.get("reason"), str) else None
            agent = str(item.get("agent") or "")
            part = ToolCallPart(id=item["id"].rsplit("/", 1)[-1], name=tool, input=_ints(item.get("input")))
            via = tuple(item["id"].split("/")[:-1])
            out.append(PendingApproval(part, reason, agent=agent, via=via))
    return tuple(out)


def _ints(value: Any) -> Any:
    """JSON numbers that came back as floats through ``google.protobuf.Value``, whole ones as ints again."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


def _decisions_message(paused: _Paused, decisions: Mapping[str, Approval]) -> Message:
    given: dict[str, Any] = {}
    for p in paused.pending:
        decision = decisions.get(p.id)
        if isinstance(decision, Approve):
            given[p.id] = "approve"
        elif isinstance(decision, Deny):
            given[p.id] = {"deny": deny_reason(decision)}
        else:  # Modify cannot be sent over A2A: refused with a reason the remote model reads
            given[p.id] = {"deny": "The call was modified by the user, which a remote agent cannot run."}
    data = struct_pb2.Value()
    json_format.ParseDict({"approvals": given}, data)
    return Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[Part(data=data)],
        task_id=paused.task_id,
        context_id=paused.context_id,
    )


async def _inject_trace(request: httpx.Request) -> None:
    """Add the current trace context to a request (W3C ``traceparent``), when OpenTelemetry is there."""
    try:
        from opentelemetry import propagate
    except ImportError:
        return
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    for k, v in carrier.items():
        request.headers.setdefault(k, v)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
