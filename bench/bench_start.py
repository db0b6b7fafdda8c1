#!/usr/bin/env python3
"""Cold start: what a fresh process pays before loopctl does any work, each case in its own process.

Cases (each a fresh interpreter, bytecode cached as an installed package has it; median of ``--reps``):

- ``import loopctl``: the package alone;
- ``Message.user``: ``from loopctl import Message`` and the first message built (the model's validators are
  built on first use);
- ``import engine``: ``from loopctl.engine import BareLoop`` (the loop, the machine, the message model);
- ``clients``: the four clients made (OpenAI Chat and Responses, Anthropic, Gemini): the HTTP libraries the
  process loaded, and its peak RSS;
- ``loopctl --help``;
- ``run --model demo``: ``loopctl run TASK --model demo`` from the moment the process is started to its first
  request (the client's ``connect`` to the demo's local server, seen by an audit hook).

CPU is the process's own (user + system), wall is from start to exit; for the demo run both are to its first request.
``--src DIR[,DIR...]`` measures other checkouts' ``src`` folders too, in alternation, in the same run (the
"before" of a change).

    python3 make.py bench bench/bench_start.py
    .venv-bench/bin/python bench/bench_start.py [--reps 7] [--src /path/to/old/src]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

_REPORT = (
    "import json, resource, sys\n"
    "u = resource.getrusage(resource.RUSAGE_SELF)\n"
    "hwm = next((int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')), 0)\n"
    "print('RESULT ' + json.dumps({'cpu': u.ru_utime + u.ru_stime, 'rss_kb': hwm, "
    "'http': sorted(m for m in ('httpx', 'httpx2') if m in sys.modules), "
    "'pydantic': 'pydantic' in sys.modules}))\n"
)

CASES: dict[str, str] = {
    "import loopctl": "import loopctl\n",
    "Message.user": "from loopctl import Message\nMessage.user('hi')\n",
    "import engine": "from loopctl.engine import BareLoop\n",
    "clients": (
        "from loopctl.transport import AnthropicClient, GeminiClient, OpenAIChatClient, OpenAIResponsesClient\n"
        "OpenAIChatClient('m', api_key='k'); OpenAIResponsesClient('m', api_key='k')\n"
        "AnthropicClient('m', api_key='k'); GeminiClient('m', api_key='k')\n"
    ),
    "loopctl --help": (
        "import sys\nsys.argv = ['loopctl', '--help']\nimport io, contextlib\n"
        "from loopctl.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        main()\n    except SystemExit:\n        pass\n"
    ),
}

_DEMO = (
    "import os, resource, sys, time\n"
    "def _hook(event, args):\n"
    "    if event == 'socket.connect' and not os.environ.get('_FIRST'):\n"
    "        os.environ['_FIRST'] = '1'\n"
    "        u = resource.getrusage(resource.RUSAGE_SELF)\n"
    "        print('FIRST %r %r' % (time.time(), u.ru_utime + u.ru_stime), file=sys.stderr, flush=True)\n"
    "sys.addaudithook(_hook)\n"
    "sys.argv = ['loopctl', 'run', 'List the files.', '--model', 'demo', '--root', sys.argv[1], '--yes']\n"
    "from loopctl.cli import main\n"
    "main()\n"
)


def _env(src: Path, cache: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env.update(PYTHONPATH=str(src), PYTHONPYCACHEPREFIX=cache, LOOPCTL_DEMO_DELAY="0")
    return env


def measure(src: Path, case: str, cache: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", CASES[case] + _REPORT], capture_output=True, text=True, env=_env(src, cache)
    )
    wall = time.perf_counter() - t0
    line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{case} failed:\n{p.stderr[-2000:]}")
    return {"wall": wall, **json.loads(line[7:])}


def measure_demo(src: Path, cache: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as root:
        Path(root, "notes.txt").write_text("TODO: a note\n")
        t0 = time.time()
        p = subprocess.run(
            [sys.executable, "-c", _DEMO, root], capture_output=True, text=True, env=_env(src, cache), timeout=120
        )
    first = next((x.split()[1:] for x in p.stderr.splitlines() if x.startswith("FIRST ")), None)
    if first is None:
        raise RuntimeError(f"the demo run made no request:\n{p.stderr[-2000:]}")
    return {"wall": float(first[0]) - t0, "cpu": float(first[1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--src", default="", help="other src folders to measure too (the 'before'), comma-separated")
    ap.add_argument("--smoke", action="store_true", help="one repetition of each case (CI)")
    a = ap.parse_args()
    reps = 1 if a.smoke else a.reps
    srcs = [SRC, *(Path(s) for s in a.src.split(",") if s)]
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as cache:
        # Warm-up: the bytecode written once, as an installed package has it (a smoke run measures nothing,
        # so it skips it: its one repetition compiles).
        for src in srcs if not a.smoke else ():
            for case in CASES:
                measure(src, case, cache)
        for _ in range(reps):
            for src in srcs:
                for case in CASES:
                    rows.setdefault((str(src), case), []).append(measure(src, case, cache))
                rows.setdefault((str(src), "run --model demo"), []).append(measure_demo(src, cache))
    med = statistics.median
    print(f"load average {os.getloadavg()[0]:.1f}; median of {reps} fresh processes; ms")
    print(f"{'case':<20}{'src':<28}{'wall':>9}{'CPU':>9}{'peak RSS KB':>13}  HTTP libraries loaded")
    for (src, case), got in rows.items():
        cpu = med([g["cpu"] for g in got]) * 1e3 if "cpu" in got[0] else float("nan")
        rss = med([g["rss_kb"] for g in got]) if "rss_kb" in got[0] else float("nan")
        http = ",".join(got[0].get("http", [])) or "-"
        label = "this checkout" if src == str(SRC) else src[-27:]
        print(f"{case:<20}{label:<28}{med([g['wall'] for g in got]) * 1e3:>9.1f}{cpu:>9.1f}{rss:>13.0f}  {http}")


if __name__ == "__main__":
    main()
