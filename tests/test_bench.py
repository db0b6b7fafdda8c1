"""Every benchmark in ``bench/`` runs, in its smoke mode (``--smoke``: tiny sizes, a few seconds), so a script
that breaks fails the suite instead of rotting unseen (``bench_engine.py`` and ``bench_telemetry.py`` both did
when loop detection came on by default). A smoke run is checked for completing (exit 0: a part of loopctl that
fails, or a peer that is installed and fails, makes the script exit 1) and for printing its table; its figures
are not looked at (performance is measured by ``python3 make.py bench``, never in tests). A peer that is not
installed is skipped by the script with a printed line, which must name modules that are indeed missing."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"

# A line of the table each script prints last (a script whose table needs a missing peer prints why instead).
TABLES = {
    "bench_agent.py": "| workload | framework | ms per run |",
    "bench_anthropic_codec.py": "request building: ",
    "bench_compact.py": "count_cold=",
    "bench_durable.py": "Durable overhead, W(2)",
    "bench_engine.py": "C(5): 5 concurrent W(5) runs",
    "bench_gemini_codec.py": "Request building: ",
    "bench_http2.py": "| protocol | N (body KB) |",
    "bench_message_json.py": "--- where the time goes",
    "bench_openai_chat_codec.py": "request building: ",
    "bench_openai_responses_codec.py": "Request building: ",
    "bench_sse.py": "recorded streams x",
    "bench_start.py": "HTTP libraries loaded",
    "bench_store.py": "Totals over the whole growth:",
    "bench_telemetry.py": "OTelObserver, SDK + content",
    "bench_web.py": "| app | events/stream | events/s |",
    "bench_wire.py": "# bench_wire: ms per model call over HTTP",
}
# The peers without which a script prints no table at all (it says so and exits 0).
TABLE_NEEDS = {"bench_http2.py": ("h2",)}
SKIPPED = re.compile(r"^skipped: .* \((?P<modules>[\w., ]+) not installed; bench/requirements.txt\)$", re.M)
TIMEOUT = 300  # seconds: a smoke run takes a few, but CI runs it beside the rest of the suite on 2 cores


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def test_every_bench_script_has_a_smoke_run() -> None:
    assert sorted(p.name for p in BENCH.glob("bench_*.py")) == sorted(TABLES)


@pytest.mark.parametrize("script", sorted(TABLES), ids=lambda s: s.removesuffix(".py"))
def test_a_bench_script_runs_in_smoke_mode_and_prints_its_table(script: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--smoke"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=BENCH.parent,
        env=env,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, f"{script} --smoke exited {done.returncode}:\n{out[-4000:]}\n{done.stderr[-4000:]}"
    if all(_installed(m) for m in TABLE_NEEDS.get(script, ())):
        assert TABLES[script] in out, f"{script} --smoke printed no table:\n{out[-4000:]}"
    for skipped in SKIPPED.finditer(out):
        modules = [m.strip() for m in skipped["modules"].split(",")]
        assert not all(_installed(m) for m in modules), f"{script} skipped an installed peer: {skipped[0]}"
