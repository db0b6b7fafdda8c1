"""A loop machine kept in a stored session: loaded once, then saved as it changes.

:class:`SessionBinding` remembers the chain it last saw (the messages and their node ids) and the head it
last wrote. Saving compares the machine's messages with that chain, object by object: what is new since
goes on top of the head; when a compaction or a prune pass rewrote earlier messages, the new tail hangs from
the last message they still share (so the old chain stays readable). Every save is a compare-and-swap on the
head and the session's revision (a state saved at the same head by another writer counts as a move): a
binding whose head another writer moved gets :class:`~loopctl.errors.ConcurrentUpdate`, writes
nothing, and stays *stale* (every later save refuses the same way) until :meth:`SessionBinding.load` is
called again.

A save cancelled while its write runs (:meth:`SessionBinding.asave` writes on a worker thread, which a cancel
cannot stop) is not lost track of: the write is awaited and adopted before the cancel goes on, and when even
that wait is cut short, the next save (or load) first settles it, reading the session back if it must, so
the binding's own write never counts as another writer's.
"""

from __future__ import annotations

import asyncio
import contextlib
import operator
from collections.abc import Mapping, Sequence
from typing import Any

from loopctl.engine.machine import LoopMachine, MachineState
from loopctl.errors import ConcurrentUpdate, SessionNotFound, StoreError
from loopctl.message import Message
from loopctl.store.base import Appended, SessionStore, StoredSession
from loopctl.store.state import SessionState

__all__ = ["SessionBinding", "bind"]


class SessionBinding:
    """Keeps :class:`~loopctl.engine.LoopMachine` state in the session ``session_id`` of ``store``.

    ``model``, ``root``, ``system_prompt`` and ``metadata`` are the session's settings, saved with every
    state; ``None`` keeps what the stored session has (after :meth:`load`).
    """

    def __init__(
        self,
        store: SessionStore,
        session_id: str,
        *,
        model: str | None = None,
        root: str | None = None,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self.store = store
        self.session_id = session_id
        self.model, self.root, self.system_prompt = model, root, system_prompt
        self.metadata: dict[str, Any] | None = dict(metadata) if metadata is not None else None
        self.head: str | None = None
        """The head this binding last read or wrote (hex; ``None`` for a session not yet written)."""
        self.revision: int | None = None
        """The session's revision when this binding last read or wrote it (``None``: not yet written); every
        save expects it, so a state saved by another writer at the same head is seen too."""
        self.stale: ConcurrentUpdate | None = None
        """The refusal that made this binding stale, or ``None``."""
        self._messages: list[Message] = []
        self._ids: list[str] = []
        self._state: bytes | None = None
        # A write whose caller was cancelled before it was adopted: the write, and what it writes.
        self._inflight: tuple[asyncio.Future[Appended], list[Message], int, SessionState] | None = None

    # --- loading -------------------------------------------------------------------------------------------

    def load(self) -> LoopMachine | None:
        """The stored machine, or ``None`` when the session does not exist yet. A machine saved mid-run (its
        writer stopped before the run ended) is cancelled back to its coherent prefix, every tool call
        answered, as ``loopctl run --resume`` does; the next save records that. A run paused for approvals
        (``awaiting_approval``) is not in flight: it is loaded as it is, to be continued with its decisions."""
        try:
            stored = self.store.load(self.session_id)
        except SessionNotFound:
            self._reset(None)
            return None
        return self._adopt(stored)

    async def aload(self) -> LoopMachine | None:
        """:meth:`load`, off the event loop (after a write still in flight ended: it is part of what loads)."""
        with contextlib.suppress(StoreError):
            await self._settle()
        try:
            stored = await self.store.aload(self.session_id)
        except SessionNotFound:
            self._reset(None)
            return None
        return self._adopt(stored)

    def _reset(self, stored: StoredSession | None) -> None:
        self.stale = None
        self._inflight = None
        if stored is None:
            self.head, self.revision, self._messages, self._ids, self._state = None, None, [], [], None
            return
        self.head = stored.head
        self.revision = stored.revision
        self._messages = list(stored.messages)
        self._ids = list(stored.node_ids)
        st = stored.state
        self._state = st.to_bytes()
        self.model = self.model if self.model is not None else st.model
        self.root = self.root if self.root is not None else st.root
        self.system_prompt = self.system_prompt if self.system_prompt is not None else st.system_prompt
        self.metadata = self.metadata if self.metadata is not None else dict(st.metadata)

    def _adopt(self, stored: StoredSession) -> LoopMachine:
        self._reset(stored)
        machine: LoopMachine = stored.machine()
        if machine.state not in (MachineState.START, MachineState.TERMINAL, MachineState.AWAITING_APPROVAL):
            machine.cancel()
        return machine

    # --- saving --------------------------------------------------------------------------------------------

    def state_of(self, machine: LoopMachine) -> SessionState:
        """The state document ``machine`` is saved with (its messages left out), with this binding's
        settings."""
        return SessionState(
            SessionState.of(machine).machine, self.model, self.root, self.system_prompt, self.metadata or {}
        )

    def _plan(self, machine: LoopMachine) -> tuple[list[Message], int, SessionState] | None:
        """``(current, shared, state)``: the machine's messages, how many of them the saved chain shares, and
        its state; ``None`` when nothing changed since the last save. O(1) Python steps in the history's
        length (the comparison of the two lists runs in C)."""
        view = machine.full_history()[:]  # a slice copies in C; iterating the view would not
        current = view if isinstance(view, list) else list(view)
        known = self._messages
        n = min(len(current), len(known))
        same = list(map(operator.is_, current[:n], known[:n]))
        shared = same.index(False) if False in same else n
        state = self.state_of(machine)
        if shared == len(known) == len(current) and state.to_bytes() == self._state:
            return None
        return current, shared, state

    def _refuse_if_stale(self) -> None:
        if self.stale is not None:
            raise ConcurrentUpdate(self.session_id, self.stale.expected, self.stale.actual)

    def _adopt_append(self, current: list[Message], shared: int, state: SessionState, done: Appended) -> None:
        self.head = done.head
        self.revision = done.revision
        self._messages = current
        self._ids = self._ids[:shared] + list(done.node_ids)
        self._state = state.to_bytes()

    def save(self, machine: LoopMachine) -> bool:
        """Write what changed in ``machine`` since the last load or save; ``False`` when nothing had. Raises
        :class:`~loopctl.errors.ConcurrentUpdate` (nothing written; the binding becomes stale) when another
        writer moved the head (or saved a state at it), and ``StoreError`` when the database fails."""
        self._settle_lost()
        self._refuse_if_stale()
        plan = self._plan(machine)
        if plan is None:
            return False
        current, shared, state = plan
        parent = self._ids[shared - 1] if shared else None
        try:
            done = self.store.append(
                self.session_id,
                current[shared:],
                expected_head=self.head,
                parent=parent,
                state=state,
                expected_revision=self.revision,
            )
        except ConcurrentUpdate as exc:
            self.stale = exc
            raise
        self._adopt_append(current, shared, state, done)
        return True

    async def asave(self, machine: LoopMachine) -> bool:
        """:meth:`save`, off the event loop (the machine must not change until it returns).

        The write runs on a worker thread, which a cancel of the caller cannot stop: cancelled, this waits for
        the write to end and adopts it before the cancel goes on (cancelled again meanwhile, the next save or
        load settles it), so the binding never takes its own write for another writer's."""
        await self._settle()
        self._refuse_if_stale()
        plan = self._plan(machine)
        if plan is None:
            return False
        current, shared, state = plan
        parent = self._ids[shared - 1] if shared else None
        write = asyncio.ensure_future(
            self.store.aappend(
                self.session_id,
                current[shared:],
                expected_head=self.head,
                parent=parent,
                state=state,
                expected_revision=self.revision,
            )
        )
        self._inflight = (write, current, shared, state)
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            with contextlib.suppress(StoreError):  # the cancel is what goes on; a refusal still marks us stale
                await self._settle()
            raise
        except Exception:  # the write's error: _settle reads it and raises it
            pass
        await self._settle()
        return True

    async def _settle(self) -> None:
        """Adopt the write in flight (:attr:`_inflight`), waiting for it when it runs on this event loop.
        Raises what it raised (``ConcurrentUpdate`` makes the binding stale)."""
        inflight = self._inflight
        if inflight is None:
            return
        write, current, shared, state = inflight
        if not write.done() and write.get_loop() is asyncio.get_running_loop():
            with contextlib.suppress(Exception):
                await asyncio.shield(write)  # its outcome is read below
        if not write.done() or write.cancelled():
            await asyncio.to_thread(self._settle_lost)
            return
        self._inflight = None
        error = write.exception()
        if isinstance(error, ConcurrentUpdate):
            self.stale = error
        if error is not None:
            raise error
        self._adopt_append(current, shared, state, write.result())

    def _settle_lost(self) -> None:
        """Settle a write whose outcome was lost (its event loop closed before it was adopted; the thread that
        ran it has ended): read the session back. Holding exactly what the write wrote, it is adopted; at
        the revision this binding knows, nothing was written; anything else is another writer's (stale)."""
        inflight = self._inflight
        if inflight is None:
            return
        write, current, shared, state = inflight
        if write.done() and not write.cancelled():  # it ended after all: read its outcome
            self._inflight = None
            error = write.exception()
            if isinstance(error, ConcurrentUpdate):
                self.stale = error
            if error is None:
                self._adopt_append(current, shared, state, write.result())
            return
        self._inflight = None
        try:
            stored = self.store.load(self.session_id)
        except SessionNotFound:
            return  # nothing was written
        if stored.revision == self.revision and stored.head == self.head:
            return  # nothing was written
        if stored.state.to_bytes() == state.to_bytes() and list(stored.messages) == current:
            self.head, self.revision, self._messages = stored.head, stored.revision, current
            self._ids, self._state = list(stored.node_ids), state.to_bytes()
            return
        self.stale = ConcurrentUpdate(self.session_id, self.head, stored.head)

    @property
    def node_ids(self) -> Sequence[str]:
        """The node ids (hex) of the saved chain, oldest first."""
        return tuple(self._ids)

    # --- the driver's two calls ----------------------------------------------------------------------------

    async def save_turn(self, machine: LoopMachine) -> bool:
        """Save before a model call (the turn before it is complete: its reply and every tool result, or the
        run's input). A save that fails, stale or not, ends the run (``machine.fail``: ``ConcurrentUpdate`` or
        ``StoreError`` as its error) rather than go on with work that cannot be kept; returns ``True`` then."""
        from loopctl.errors import StoreError

        try:
            await self.asave(machine)
        except StoreError as exc:
            machine.fail(exc)
            return True
        return False

    async def save_end(self, machine: LoopMachine, *, failing: bool) -> None:
        """Save when a run is over (completed, failed, cancelled, salvaged). Raises ``ConcurrentUpdate`` or
        ``StoreError`` when the save fails, unless the run is already ``failing`` (an exception is on its way
        out, and stays the one raised) or the binding is stale (the run's refusal is its outcome).

        ``machine`` is the run's machine, saved with its new messages and state.
        """
        from loopctl.errors import StoreError

        if self.stale is not None:
            return
        try:
            await self.asave(machine)
        except StoreError:
            if not failing:
                raise


def bind(
    store: SessionStore, session_id: str | None, machine: LoopMachine | None, *, system_prompt: str | None = None
) -> tuple[SessionBinding, LoopMachine | None]:
    """A binding to ``session_id`` (a new id when ``None``) and the machine to run: the stored one when the
    session exists, else ``machine``. Raises ``ValueError`` when both a stored session and ``machine`` are
    there (which one should win is the caller's decision).

    ``store`` is the session store; ``system_prompt`` is kept in a new session's settings.
    """
    from loopctl.store.base import new_session_id

    binding = SessionBinding(store, session_id or new_session_id(), system_prompt=system_prompt)
    loaded = binding.load()
    if loaded is None:
        return binding, machine
    if machine is not None:
        raise ValueError(f"session {binding.session_id!r} exists in the store; pass either it or a machine, not both")
    return binding, loaded
