"""Durable runs: an agent run on an existing durable-execution engine survives a crash without repeating a
tool call that completed.

- :mod:`loopctl.durable.dbos` (extra ``pyloopctl[dbos]``): each run a DBOS workflow, each model call and each
  tool call a step; SQLite by default, PostgreSQL for several workers.
- :mod:`loopctl.durable.temporal` (extra ``pyloopctl[temporal]``): each run a Temporal workflow, each model
  call and each tool call an activity.
- :mod:`loopctl.durable.approvals`: the approval binding both share: a decision on a deferred call answers
  only the wait it was given for (:class:`~loopctl.durable.approvals.ApprovalKey`: run, turn, call).

**Assume any unit may run twice**: an engine records a step's output when it returns, so a model call or a
tool call that was running when the worker died runs again after recovery; one that completed never does.

The machine (:class:`~loopctl.engine.LoopMachine`) is pure, serializable data whose effects are explicit
steps, which is what a workflow engine wants: the adapters drive it in workflow code with the same driver as
:class:`~loopctl.engine.BareLoop` and make each effect a step. ``docs/durable.md`` has the mapping, the
determinism rules and the compatibility promise for step and activity names.

Importing this package imports neither engine.
"""

__all__: list[str] = []  # the modules are the API: import from them
