#!/usr/bin/env python3
"""The Agent's own cost: ``Agent.run`` against ``BareLoop.run``, and a sub-agent call against a plain tool call,
with the same workloads through pydantic-ai's and the OpenAI Agents SDK's agents-as-tools, in one run.

Workloads (an instant scripted model, no network, telemetry off; each framework's own test double):

- ``run(N)``: one run of N tool-calling turns (an ``echo`` tool returning its 200-character argument), then an
  answer. loopctl runs it on a fresh ``BareLoop`` and through ``Agent.run`` (which makes that loop itself);
  the goal is an ``Agent.run`` within 5% of the ``BareLoop.run``.
- ``tool(N)`` and ``sub(N)``: a parent run of N turns, each calling one tool: a plain tool (``echo``), or a
  sub-agent whose own model answers at once (one model call, no tools). The difference per call is what a
  sub-agent costs over a plain tool: a conversation of its own, its run, its usage counted in the parent's.
  loopctl: ``researcher.as_tool()``; pydantic-ai: a tool that awaits ``child.run(text, usage=ctx.usage)`` (its
  documented delegation); Agents SDK: ``child.as_tool(...)``.

Each figure is CPU time per run, the median over ``--reps`` repetitions of ``--runs`` runs, after a warm-up; every framework
runs in this one process, one after the other, so the ratios compare like with like on a noisy machine.

    python3 make.py bench bench/bench_agent.py            # .venv-bench has the peers
    python bench/bench_agent.py [--smoke] [--ns 1,10] [--runs 200] [--reps 5]

``--smoke`` runs tiny sizes (N=1, a few runs) and checks every workload's answer: a test that the script
works, not a measurement. Peers that are not installed are left out.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

PAYLOAD = ("The quick brown fox jumps over the lazy dog. " * 5)[:200]
FINAL = "done"
CHILD = "child answer"

Runner = Callable[[], Awaitable[str]]


# --- loopctl ------------------------------------------------------------------------------------------------


def loopctl_setups(n: int) -> dict[str, Runner]:
    from loopctl import Agent
    from loopctl.engine import BareLoop, RunConfig, SessionConfig
    from loopctl.message import Message, Role, ToolCallPart
    from loopctl.response import ModelResponse, StopReason, Usage
    from loopctl.testing import ScriptedClient
    from loopctl.tool import tool

    usage = Usage(input_tokens=100, output_tokens=20)
    final = ModelResponse(Message.assistant(FINAL), usage, StopReason.END_TURN)
    child_final = ModelResponse(Message.assistant(CHILD), usage, StopReason.END_TURN)

    def script(tool_name: str, args: dict[str, Any]) -> Callable[[Any], ModelResponse]:
        def reply(request: Any) -> ModelResponse:
            turn = (len(request.messages) - 1) // 2  # [user] -> [user, call, result] -> ...
            if turn < n:
                call = ToolCallPart(id=f"call_{turn}", name=tool_name, input=args)
                return ModelResponse(Message(role=Role.ASSISTANT, parts=(call,)), usage, StopReason.TOOL_CALL)
            return final

        return reply

    @tool
    async def echo(text: str) -> str:
        """Echo the input text back."""
        return text

    config = SessionConfig(system_prompt="You are a test agent.", context_window=1_000_000)
    run_config = RunConfig(max_turns=n + 5, stream=False, loop_detection=None)
    echo_script = script("echo", {"text": PAYLOAD})
    sub_script = script("researcher", {"input": PAYLOAD})

    async def bare() -> str:
        loop = BareLoop(ScriptedClient(echo_script, keep_requests=False), [echo], config)
        return (await loop.run("go", run_config)).output

    agent = Agent(
        ScriptedClient(echo_script, keep_requests=False),
        tools=[echo],
        system_prompt="You are a test agent.",
        session_config=config,
        run_config=run_config,
    )

    async def agent_run() -> str:
        return (await agent.run("go")).output

    researcher = Agent(
        ScriptedClient(lambda _: child_final, keep_requests=False),
        name="researcher",
        description="Answers at once.",
        run_config=RunConfig(stream=False),
    )
    parent = Agent(
        ScriptedClient(sub_script, keep_requests=False),
        tools=[researcher],
        system_prompt="You are a test agent.",
        session_config=config,
        run_config=run_config,
    )

    async def sub() -> str:
        return (await parent.run("go")).output

    return {"run/BareLoop": bare, "run/Agent": agent_run, "tool": agent_run, "sub": sub}


# --- pydantic-ai ---------------------------------------------------------------------------------------------


def pydantic_ai_setups(n: int) -> dict[str, Runner]:
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage, UsageLimits

    globals()["RunContext"] = RunContext  # pydantic-ai reads the tool's (string) annotations in this module

    def model(tool_name: str, args: dict[str, Any]) -> FunctionModel:
        args_json = json.dumps(args)

        async def fake(messages: list[Any], info: AgentInfo) -> ModelResponse:
            turn = (len(messages) - 1) // 2
            usage = RequestUsage(input_tokens=100, output_tokens=20)
            if turn < n:
                return ModelResponse(
                    parts=[ToolCallPart(tool_name=tool_name, args=args_json, tool_call_id=f"call_{turn}")], usage=usage
                )
            return ModelResponse(parts=[TextPart(FINAL)], usage=usage)

        return FunctionModel(fake)

    async def child_fake(messages: list[Any], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(CHILD)], usage=RequestUsage(input_tokens=100, output_tokens=20))

    limits = UsageLimits(request_limit=None)
    plain = Agent(model("echo", {"text": PAYLOAD}), instructions="You are a test agent.")

    @plain.tool_plain
    async def echo(text: str) -> str:
        """Echo the input text back."""
        return text

    child = Agent(FunctionModel(child_fake), instructions="You answer at once.")
    parent = Agent(model("researcher", {"text": PAYLOAD}), instructions="You are a test agent.")

    @parent.tool
    async def researcher(ctx: RunContext[None], text: str) -> str:
        """Ask the researcher."""
        r = await child.run(text, usage=ctx.usage, usage_limits=limits)
        return r.output

    async def tool_run() -> str:
        return (await plain.run("go", usage_limits=limits)).output

    async def sub_run() -> str:
        return (await parent.run("go", usage_limits=limits)).output

    return {"tool": tool_run, "sub": sub_run}


# --- OpenAI Agents SDK ---------------------------------------------------------------------------------------


def openai_agents_setups(n: int) -> dict[str, Runner]:
    from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    set_tracing_disabled(True)

    def text(value: str) -> Any:
        return ResponseOutputMessage(
            id="msg", type="message", role="assistant", status="completed",
            content=[ResponseOutputText(type="output_text", text=value, annotations=[], logprobs=[])],
        )  # fmt: skip

    class Scripted(Model):
        def __init__(self, tool_name: str | None, args: dict[str, Any]) -> None:
            self.tool_name, self.args = tool_name, json.dumps(args)

        async def get_response(self, system_instructions: Any, input: Any, *a: Any, **k: Any) -> Any:  # noqa: A002
            usage = Usage(requests=1, input_tokens=100, output_tokens=20, total_tokens=120)
            if self.tool_name is None:
                return ModelResponse(output=[text(CHILD)], usage=usage, response_id=None)
            turn = (len(input) - 1) // 2 if isinstance(input, list) else 0
            if turn < n:
                call = ResponseFunctionToolCall(
                    id=f"fc_{turn}", call_id=f"call_{turn}", type="function_call", name=self.tool_name,
                    arguments=self.args, status="completed",
                )  # fmt: skip
                return ModelResponse(output=[call], usage=usage, response_id=None)
            return ModelResponse(output=[text(FINAL)], usage=usage, response_id=None)

        def stream_response(self, *a: Any, **k: Any) -> Any:
            raise NotImplementedError

    @function_tool
    async def echo(text: str) -> str:
        """Echo the input text back."""
        return text

    cfg = RunConfig(tracing_disabled=True)
    plain = Agent(name="bench", instructions="You are a test agent.", model=Scripted("echo", {"text": PAYLOAD}), tools=[echo])
    child = Agent(name="researcher", instructions="You answer at once.", model=Scripted(None, {}))
    parent = Agent(
        name="bench",
        instructions="You are a test agent.",
        model=Scripted("researcher", {"input": PAYLOAD}),
        tools=[child.as_tool(tool_name="researcher", tool_description="Answers at once.")],
    )

    async def tool_run() -> str:
        return str((await Runner.run(plain, "go", max_turns=n + 5, run_config=cfg)).final_output)

    async def sub_run() -> str:
        return str((await Runner.run(parent, "go", max_turns=n + 5, run_config=cfg)).final_output)

    return {"tool": tool_run, "sub": sub_run}


SETUPS: dict[str, Callable[[int], dict[str, Runner]]] = {
    "loopctl": loopctl_setups,
    "pydantic_ai": pydantic_ai_setups,
    "openai_agents": openai_agents_setups,
}


# --- measuring -------------------------------------------------------------------------------------------------


async def time_runs(run: Runner, runs: int) -> float:
    """CPU seconds of this process per run, over ``runs`` runs one after the other (CPU time, not wall time:
    the work is all in this process, and other processes on a shared machine do not count)."""
    gc.collect()
    t0 = time.process_time()
    for _ in range(runs):
        out = await run()
        assert out == FINAL, out
    return (time.process_time() - t0) / runs


async def measure(frameworks: list[str], ns: list[int], runs: int, reps: int) -> dict[str, dict[str, float]]:
    """``{f"{framework} {workload}({n})": seconds per run}``: the median of ``reps``, the frameworks' runs
    interleaved repetition by repetition."""
    setups: dict[str, Runner] = {}
    for n in ns:
        for fw in frameworks:
            for workload, run in SETUPS[fw](n).items():
                setups[f"{fw} {workload}({n})"] = run
    for run in setups.values():  # warm-up, and a check that each answers
        await time_runs(run, 2)
    # What the imports and setups left on the heap is moved out of the collector's sight: a full collection
    # would otherwise walk it, at times that fall on one workload or another by chance.
    gc.collect()
    gc.freeze()
    samples: dict[str, list[float]] = {name: [] for name in setups}
    for _ in range(reps):
        for name, run in setups.items():
            samples[name].append(await time_runs(run, runs))
    return {name: statistics.median(values) for name, values in samples.items()}


def report(res: dict[str, dict[str, float]] | dict[str, float], frameworks: list[str], ns: list[int]) -> str:
    got: dict[str, float] = res  # type: ignore[assignment]
    lines = ["| workload | framework | ms per run | per call (µs) | ratio to loopctl |", "|---|---|---|---|---|"]
    for n in ns:
        bare, agent = got[f"loopctl run/BareLoop({n})"], got[f"loopctl run/Agent({n})"]
        lines.append(f"| run({n}) | loopctl BareLoop.run | {bare * 1e3:.3f} | | |")
        lines.append(f"| run({n}) | loopctl Agent.run | {agent * 1e3:.3f} | | {agent / bare:.3f}× of BareLoop.run |")
        base = (got[f"loopctl sub({n})"] - got[f"loopctl tool({n})"]) / max(n, 1)
        for fw in frameworks:
            tool, sub = got[f"{fw} tool({n})"], got[f"{fw} sub({n})"]
            extra = (sub - tool) / max(n, 1)
            ratio = "" if fw == "loopctl" else f"{extra / base:.2f}×" if base > 0 else ""
            lines.append(f"| tool({n}) | {fw} | {tool * 1e3:.3f} | | |")
            lines.append(f"| sub({n}) | {fw} | {sub * 1e3:.3f} | {extra * 1e6:.0f} over a tool call | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that every workload runs")
    parser.add_argument("--ns", default="1,10", help="turns per run (comma-separated)")
    parser.add_argument("--runs", type=int, default=200, help="runs per repetition")
    parser.add_argument("--reps", type=int, default=5, help="repetitions (the median is reported)")
    parser.add_argument("--peers", default="pydantic_ai,openai_agents")
    args = parser.parse_args()
    ns = [1] if args.smoke else [int(x) for x in args.ns.split(",")]
    runs, reps = (3, 1) if args.smoke else (args.runs, args.reps)
    frameworks = ["loopctl"]
    for peer in [p for p in args.peers.split(",") if p]:
        try:
            SETUPS[peer](1)
        except ImportError as exc:
            print(f"{peer}: not installed ({exc.name}); left out", file=sys.stderr)
            continue
        frameworks.append(peer)
    res = asyncio.run(measure(frameworks, ns, runs, reps))
    print(f"python {sys.version.split()[0]}; {runs} runs x {reps} repetitions (median); frameworks: {', '.join(frameworks)}")
    print(report(res, frameworks, ns))


if __name__ == "__main__":
    main()
