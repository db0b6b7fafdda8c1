"""A deferred approval, saved and decided later (README, "Guardrails"): runs as is, no key needed."""

from __future__ import annotations

from loopctl.engine import Approve, BareLoop, LoopMachine, RunConfig, UsageLimits
from loopctl.message import Message, MessagePart, Role
from loopctl.testing import ScriptedClient
from loopctl.tool import tool


@tool(requires_approval=True)
async def send_email(to: str, body: str) -> str:
    """Send an email."""
    return f"sent to {to}"


email = MessagePart.tool_call("c1", "send_email", {"to": "ana@example.com", "body": "Hi"})
model = ScriptedClient([Message.new(Role.ASSISTANT, [email]), "Sent."])  # a scripted model: no key
loop = BareLoop(model, [send_email])
run = loop.run_sync("Email Ana hello.", RunConfig(limits=UsageLimits(requests=5)))
print(run.outcome.kind.value, [(p.id, p.name) for p in run.pending_approvals])
saved = loop.machine.to_json()  # keep it anywhere (or use a session store); this process may end here

later = BareLoop.from_machine(LoopMachine.from_json(saved), model, [send_email])
done = later.run_sync(approvals={"c1": Approve()})
print(done.outcome.kind.value, done.output, done.resumed_calls[0].result.output)
