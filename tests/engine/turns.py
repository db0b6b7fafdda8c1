"""What the tests of the per-turn shortcuts share (``test_turn_direct_path``, ``test_turn_fast_paths``,
``test_turn_shortcuts``): tools of each kind a batch meets, a loop whose batches take the general path, and a
run's turns as comparable values."""

from __future__ import annotations

from typing import Any

from loopctl.engine import BareLoop
from loopctl.tool import ApprovalRequired, ToolContext, tool


@tool
async def echo(text: str) -> str:
    """Echo."""
    return text


@tool
async def fails(text: str) -> str:
    """Raises."""
    raise ValueError(f"no {text}")


@tool
async def defers(text: str) -> str:
    """Defers its own call."""
    raise ApprovalRequired(f"ask about {text}")


@tool
async def numbers(text: str) -> dict[str, Any]:
    """A result that is not text."""
    return {"n": len(text)}


@tool(requires_approval=True)
async def guarded(text: str) -> str:
    """Needs approval."""
    return text


@tool
async def with_context(ctx: ToolContext[Any], text: str) -> str:
    """Reads its context."""
    return f"{ctx.call_id} {ctx.turn} {text}"


class GeneralBatches(BareLoop):
    """The same loop with a batch method of its own (as a durable engine has): every batch goes through
    ``_run_tools``, ``_run_one``, ``_run_checked`` and ``_execute``, never the direct path."""

    async def _run_one(self, *args: Any, **kwargs: Any) -> Any:
        return await super()._run_one(*args, **kwargs)


def turn_records(run: Any) -> list[Any]:
    """The turns of ``run`` as plain values: index, input, output, each call's record (call, result, whether it
    ran, what it spent, its error's type and text), usage, stop reason, model, provider, cost."""
    return [
        (
            t.index,
            [m.to_dict() for m in t.input],
            t.output.to_dict(),
            [(r.call.to_dict(), r.result.to_dict(), r.ran, r.spent, type(r.error), str(r.error)) for r in t.tool_calls],
            t.usage,
            t.stop_reason,
            t.model,
            t.provider,
            t.cost,
        )
        for t in run.turns
    ]
