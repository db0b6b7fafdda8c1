"""Approval binding: a decision on a deferred call answers the one wait it was given for.

A durable run may wait for decisions several times (once per turn whose reply defers calls), and the same call
id comes back in later turns: an OpenAI-compatible server that sends no call ids gets ``call_chatcmpl_0``
every turn, Gemini's calls are ``gemini_0``... A decision keyed by call id alone would answer whichever wait
comes next with that id: a decision sent twice (a retried request) would approve a later call nobody saw. So
every wait and every decision carries an :class:`ApprovalKey`, **the binding key** ``(run, turn, call)``:

- ``run``: the durable run the wait belongs to. DBOS: the workflow id (one workflow is one run). Temporal:
  ``<run id>/<n>``, the Temporal run id of the workflow execution and the number of the loop run in it (a
  :class:`~loopctl.durable.temporal.LoopSession` runs several; a :class:`~loopctl.durable.temporal.LoopWorkflow`
  one, ``/1``).
- ``turn``: the run's model call, from 1, whose reply holds the call (``LoopMachine.turn`` while it waits).
- ``call``: the call's id.

A run that waits lists its calls with their keys (:class:`AwaitedCall`: ``DBOSLoop.pending``,
``temporal.pending_approvals``). A decision is taken only by the wait whose key it carries, while that call is
still undecided; any other (a repeat, one for an earlier turn or run, one without a key, one that does not fit
the tool's schema) is dropped and logged, and the run keeps waiting. ``approve(workflow_id, {call_id: ...})``
binds each call id to the wait the run is in when it is called; ``{key: ...}`` with the keys read from the
list binds to exactly the wait that was shown, so a request retried after the run moved on is refused rather
than taken by the next wait (``docs/durable.md``, "Approval binding").

The JSON forms (compatibility data): a key is ``{"run": ..., "turn": ..., "call": ...}``; an awaited call is
``{"call": <tool call>, "reason": ..., "run": ..., "turn": ...}``; a message of decisions is ``{call_id:
{"decision": ..., "run": ..., "turn": ...}}`` (the decision's own fields as ``_payloads.approvals_to_dict``
writes them, plus its wait). A sub-agent's call adds ``"path": [[turn, call id], ...]`` to each form (and
``"agent"`` to an awaited call); its call id is ``"<parent call>/<call>"``.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

from loopctl._frozen import dataclass
from loopctl.durable._payloads import approvals_from_dict, approvals_to_dict, pending_from_dict, pending_to_dict
from loopctl.engine.loop import check_decisions
from loopctl.engine.permission import Approval, PendingApproval
from loopctl.errors import ApprovalError
from loopctl.message import ToolCallPart
from loopctl.tool import ToolRegistry, ToolSpend

# AwaitedCall's __init__ (dataclasses writes it in this module) names the types of the fields it inherits:
# typing.get_type_hints reads them here.
_INHERITED_FIELD_TYPES = (ToolCallPart, ToolSpend)

__all__ = [
    "AFTER_TOOLS",
    "ApprovalKey",
    "AwaitedCall",
    "Entry",
    "admit",
    "awaited_from_dict",
    "awaited_to_dict",
    "awaiting",
    "bind",
    "bound_to_dict",
    "read_decisions",
]


@dataclass(frozen=True, slots=True)
class ApprovalKey:
    """The wait a decision answers: the durable ``run``, its ``turn`` (the model call, from 1, whose reply holds
    the call) and the ``call`` id (see the module docstring for what ``run`` is on each engine).

    A sub-agent's call (a sub-agent run inside the durable run, ``docs/durable.md``, "Sub-agents") has the
    ``path`` of the calls that run its agent, outermost first, each ``(turn, call id)`` in the run one level
    up; its ``turn`` is the sub-agent's own model call, and ``call`` the id a decision is keyed by,
    ``"<parent call>/<call>"`` (:attr:`PendingApproval.id <loopctl.engine.PendingApproval.id>`). ``()`` for
    the run's own calls."""

    run: str
    turn: int
    call: str
    path: tuple[tuple[int, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """``{"run": ..., "turn": ..., "call": ...}``, with ``"path": [[turn, call id], ...]`` for a sub-agent's
        call."""
        out: dict[str, Any] = {"run": self.run, "turn": self.turn, "call": self.call}
        if self.path:
            out["path"] = [[t, c] for t, c in self.path]
        return out

    @property
    def position(self) -> tuple[int, ...]:
        """Where the wait comes in its run, as a sortable tuple: the turns of :attr:`path`, the turn, then
        :data:`AFTER_TOOLS` (a turn's wait comes after its calls, a sub-agent's waits included)."""
        return (*(t for t, _ in self.path), self.turn, AFTER_TOOLS)

    @classmethod
    def from_dict(cls, data: Any) -> ApprovalKey:
        """The key of :meth:`to_dict`'s form; :class:`~loopctl.errors.ApprovalError` for another shape.

        ``data`` is the JSON value :meth:`to_dict` wrote.
        """
        if not isinstance(data, dict):
            raise ApprovalError(f"an approval key must be a JSON object, got {type(data).__name__}")
        run, turn, call = data.get("run"), data.get("turn"), data.get("call")
        path = _path(data.get("path"))
        if not isinstance(run, str) or not _is_turn(turn) or not isinstance(call, str) or path is None:
            raise ApprovalError(
                f"an approval key must be {{'run': str, 'turn': int, 'call': str[, 'path': [[int, str], ...]]}}, "
                f"got {data!r}"
            )
        return cls(run, turn, call, path)

    def __str__(self) -> str:
        if not self.path:
            return f"call {self.call!r} of turn {self.turn} of run {self.run!r}"
        via = " > ".join(f"call {c!r} (turn {t})" for t, c in self.path)
        return f"call {self.call!r} of turn {self.turn} of the sub-agent run by {via} of run {self.run!r}"


AFTER_TOOLS = 1 << 62
"""The last element of :attr:`ApprovalKey.position`: after any turn number."""


def _path(data: Any) -> tuple[tuple[int, str], ...] | None:
    """A key's ``path`` from its JSON form (absent: ``()``); ``None`` for another shape."""
    if data is None:
        return ()
    if not isinstance(data, list):
        return None
    out: list[tuple[int, str]] = []
    for item in data:
        if not (isinstance(item, list) and len(item) == 2 and _is_turn(item[0]) and isinstance(item[1], str)):
            return None
        out.append((item[0], item[1]))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class AwaitedCall(PendingApproval):
    """A call a durable run waits on (a :class:`~loopctl.engine.PendingApproval`: ``call``, ``reason``, ``id``,
    ``name``, ``input``) and the ``key`` of that wait: give the decision as ``{awaited.key: Approve()}`` to
    answer exactly this wait."""

    key: ApprovalKey = dataclasses.field(kw_only=True)


Entry = tuple[str, Approval, "ApprovalKey | None"]
"""One decision of a message: the call id, the decision, and its key (``None`` when it carries no wait)."""


def _is_turn(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def awaited_to_dict(awaited: AwaitedCall) -> dict[str, Any]:
    """An awaited call as ``{"call": ..., "reason": ..., "run": ..., "turn": ...}``; a sub-agent's call adds
    ``"path"`` (its key's) and ``"agent"`` (the agent path, ``"support > researcher"``)."""
    out = {**pending_to_dict(awaited), "run": awaited.key.run, "turn": awaited.key.turn}
    if awaited.key.path:
        out["path"] = [[t, c] for t, c in awaited.key.path]
        out["agent"] = awaited.agent
    return out


def awaited_from_dict(data: dict[str, Any]) -> AwaitedCall:
    """The :class:`AwaitedCall` of :func:`awaited_to_dict`'s form. A list written by an earlier release has no
    ``run`` and ``turn``: its key is ``("", 0, id)``, which no wait has (:func:`bind` refuses it with a
    message saying so).

    ``data`` is the JSON object :func:`awaited_to_dict` wrote.
    """
    pending = pending_from_dict(data)
    run, turn = data.get("run"), data.get("turn")
    if not isinstance(run, str) or not _is_turn(turn):
        run, turn = "", 0
    path = _path(data.get("path")) or ()
    agent = data.get("agent")
    via = tuple(c for _, c in path)
    call_id = "/".join((*via, pending.call.id))
    return AwaitedCall(
        pending.call,
        pending.reason,
        agent=agent if isinstance(agent, str) else "",
        via=via,
        key=ApprovalKey(run, turn, call_id, path),
    )


def awaiting(
    pending: Iterable[PendingApproval],
    run: str,
    turn: int,
    path: tuple[tuple[int, str], ...] = (),
    agents: Sequence[str] = (),
) -> tuple[AwaitedCall, ...]:
    """The calls ``pending`` of one wait, each with its key: the wait of turn ``turn`` of the durable run ``run``;
    for a sub-agent's wait, ``path`` is the calls that run the sub-agent (``(turn, call id)``, outermost first)
    and ``agents`` the agent path (``("support", "researcher")``), and each call is named
    ``"<parent call>/<call>"``."""
    via = tuple(c for _, c in path)
    agent = " > ".join(agents) if path else ""
    return tuple(
        AwaitedCall(
            p.call, p.reason, agent=agent, via=via, key=ApprovalKey(run, turn, "/".join((*via, p.call.id)), path)
        )
        for p in pending
    )


def bound_to_dict(decisions: Mapping[ApprovalKey, Approval]) -> dict[str, Any]:
    """Decisions bound to their waits as a message: ``{call_id: {"decision": ..., "run": ..., "turn": ...}}``
    (the keys of one message are of one wait, so their call ids differ). Raises
    :class:`~loopctl.errors.ApprovalError` for two keys with one call id, or a decision of another type.

    ``decisions`` maps each wait's key to its decision.
    """
    out: dict[str, Any] = {}
    for key, decision in decisions.items():
        if key.call in out:
            raise ApprovalError(f"two decisions for call {key.call!r} in one message")
        [item] = approvals_to_dict({key.call: decision}).values()
        out[key.call] = {**item, "run": key.run, "turn": key.turn}
        if key.path:
            out[key.call]["path"] = [[t, c] for t, c in key.path]
    return out


def read_decisions(data: Any) -> tuple[list[Entry], list[str]]:
    """The entries of a message of decisions (``{call_id: {"decision": ..., ["run": ..., "turn": ...]}}``, from
    anyone who can send one): each call id, its decision and its key (``None`` without ``run`` and ``turn``);
    and why each entry that is not a decision was left out.

    ``data`` is the message as received (any JSON value).
    """
    if not isinstance(data, dict):
        return [], [f"approvals must be a JSON object of call ids, got {type(data).__name__}"]
    entries: list[Entry] = []
    problems: list[str] = []
    for call_id, item in data.items():
        try:
            [(cid, decision)] = approvals_from_dict({call_id: item}).items()
        except ApprovalError as exc:
            problems.append(str(exc))
            continue
        run, turn, path = item.get("run"), item.get("turn"), _path(item.get("path"))
        if run is None and turn is None and item.get("path") is None:
            entries.append((cid, decision, None))
        elif isinstance(run, str) and _is_turn(turn) and path is not None:
            entries.append((cid, decision, ApprovalKey(run, turn, cid, path)))
        else:
            problems.append(f"the decision for call {cid!r} names no wait it can answer (run {run!r}, turn {turn!r})")
    return entries, problems


def bind(
    approvals: Mapping[str, Approval] | Mapping[ApprovalKey, Approval] | Mapping[str | ApprovalKey, Approval],
    awaited: Sequence[AwaitedCall],
    tools: ToolRegistry | None,
    run_name: str,
) -> dict[ApprovalKey, Approval]:
    """``approvals`` bound to the wait ``awaited`` (the calls run ``run_name`` waits on now): a call id is bound
    to that wait's key for it; a key must be one of that wait's. Raises :class:`~loopctl.errors.ApprovalError`,
    naming what the run awaits, for no decisions, a call id or key the wait does not have, two decisions for
    one call, and a decision that does not fit (``check_decisions``: its type, a ``Deny`` reason that is not a
    string, a ``Modify`` input that is not JSON or, with ``tools``, does not fit the tool's schema)."""
    if not approvals:
        raise ApprovalError("approvals is empty")
    by_id = {a.id: a for a in awaited}
    shown = ", ".join(f"{a.id} (turn {a.key.turn})" for a in awaited) or "no call"
    if any(a.key.turn == 0 for a in awaited):
        raise ApprovalError(
            f"the run {run_name!r} waits as an earlier release of loopctl wrote it, without its turn: a decision "
            "cannot be bound to that wait; cancel the run and continue its machine with run(approvals=...)"
        )
    bound: dict[ApprovalKey, Approval] = {}
    for given, decision in approvals.items():
        if isinstance(given, ApprovalKey):
            current = by_id.get(given.call)
            if current is None or current.key != given:
                raise ApprovalError(
                    f"the run {run_name!r} does not await {given} (it awaits {shown}): a decision answers only "
                    "the wait it was given for"
                )
        elif isinstance(given, str):
            current = by_id.get(given)
            if current is None:
                if not awaited:
                    raise ApprovalError(f"the run {run_name!r} awaits no approval now")
                raise ApprovalError(f"the run {run_name!r} does not await {given} (it awaits {shown})")
        else:
            raise ApprovalError(f"a decision is keyed by a call id (str) or an ApprovalKey, got {given!r}")
        if current.key in bound:
            raise ApprovalError(f"two decisions for call {current.id!r}")
        bound[current.key] = decision
    check_decisions({k.call: d for k, d in bound.items()}, list(awaited), tools or ToolRegistry())
    return bound


def admit(
    entries: Iterable[tuple[ApprovalKey, Approval]], awaited: Sequence[AwaitedCall], tools: ToolRegistry
) -> tuple[dict[str, Approval], list[str]]:
    """Workflow side: the decisions among ``entries`` that answer the wait ``awaited`` (the run's calls now): the
    entry's key is that wait's key for an undecided call, and the decision fits (``check_decisions``: a
    ``Modify`` that does not fit the tool's schema does not). The first such decision of a call counts. Returns
    them by call id, and why each other entry was dropped (to be logged: the run keeps waiting).

    ``tools`` are the loop's tools, which a ``Modify`` must fit.
    """
    keys = {a.key: a for a in awaited}
    decisions: dict[str, Approval] = {}
    dropped: list[str] = []
    for key, decision in entries:
        if key not in keys:
            dropped.append(f"a decision for {key} was dropped: the run does not await it (a repeat, or a stale one)")
            continue
        if key.call in decisions:
            dropped.append(f"a second decision for {key} was dropped (the first counts)")
            continue
        try:
            check_decisions({key.call: decision}, list(awaited), tools)
        except ApprovalError as exc:
            dropped.append(f"a decision for {key} was dropped: {exc}")
            continue
        decisions[key.call] = decision
    return decisions, dropped
