#!/usr/bin/env python3
"""The web protocols under load: loopctl's AG-UI and AI SDK apps against pydantic-ai's AG-UI adapter, on the same
scripted model (``bench/_web_apps.py``: no tools, one reply of ``--deltas`` streamed text deltas), each app
served by uvicorn in a process of its own, measured in one run; and the time from a prompt to the first token
on the page of ``loopctl web`` in a real browser.

Figures:

- **events/s for 100 concurrent streams**: ``--streams`` clients POST at once, each reads its whole SSE
  stream; every SSE event counted, over the wall time from the first request to the last stream's end. The
  content events (one per text delta) are reported too: the protocols frame a run with a different number of
  other events (loopctl's AG-UI adds STEP_STARTED/STEP_FINISHED per model call).
- **time to first token over HTTP**: one request at a time; from sending the POST to reading the first text
  delta event (median of ``--ttft-runs``).
- **time to first token on the page**: ``loopctl web --model demo`` (``LOOPCTL_DEMO_DELAY=0``) in Debian's
  chromium: from pressing Enter to the first text of the reply shown (the page's own clock, median of a few
  prompts). pydantic-ai's page (``clai web``) loads its front end from a CDN, which this closed network cannot
  reach: no peer figure.

The client runs in this process on the same two cores as the server, alike for every app, so compare the
ratios of one run. ``--smoke`` runs tiny sizes: a check that the script works, not a measurement.

    python3 make.py bench bench/bench_web.py
    python bench/bench_web.py [--smoke] [--streams 100] [--deltas 200] [--reps 3]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))

FAILURES: list[str] = []


def importable(*modules: str) -> bool:
    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except (ImportError, ValueError):
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Served:
    """``BENCH_APP`` served by uvicorn in a child process on a free port of 127.0.0.1."""

    def __init__(self, app: str, deltas: int) -> None:
        self.port = free_port()
        env = {
            **os.environ,
            "BENCH_APP": app,
            "BENCH_DELTAS": str(deltas),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        }
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "bench._web_apps:make_app",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
                "--no-access-log",
                "--lifespan",
                "off",
            ],
            env=env,
            cwd=ROOT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{app}: the server exited ({self.proc.returncode})") from None
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{app}: the server did not listen in 60 s")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def body(app: str) -> dict[str, Any]:
    if app.endswith("aisdk"):
        text = {"id": "u", "role": "user", "parts": [{"type": "text", "text": "go"}]}
        return {"id": f"c-{uuid.uuid4().hex}", "messages": [text], "trigger": "submit-message"}
    return {
        "threadId": f"t-{uuid.uuid4().hex}",
        "runId": f"r-{uuid.uuid4().hex}",
        "messages": [{"id": "u", "role": "user", "content": "go"}],
        "state": None,
        "tools": [],
        "context": [],
        "forwardedProps": None,
    }


CONTENT = (b'"TEXT_MESSAGE_CONTENT"', b'"text-delta"')


async def one_stream(client: Any, url: str, app: str, first: list[float] | None = None) -> tuple[int, int]:
    """POST one run and read its stream: (events, content events). ``first`` gets the seconds to the first
    content event."""
    events = content = 0
    started = time.perf_counter()
    headers = {"accept": "text/event-stream"}
    async with client.stream("POST", url, json=body(app), headers=headers) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{app}: HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            events += 1
            if any(c in line.encode() for c in CONTENT):
                if content == 0 and first is not None:
                    first.append(time.perf_counter() - started)
                content += 1
    return events, content


async def throughput(url: str, app: str, streams: int) -> tuple[float, float, int]:
    """(events/s, content events/s, events per stream) for ``streams`` concurrent streams."""
    import httpx

    limits = httpx.Limits(max_connections=streams + 10, max_keepalive_connections=streams + 10)
    async with httpx.AsyncClient(limits=limits, timeout=300) as client:
        await one_stream(client, url, app)  # warm-up
        started = time.perf_counter()
        results = await asyncio.gather(*(one_stream(client, url, app) for _ in range(streams)))
        elapsed = time.perf_counter() - started
    events = sum(e for e, _ in results)
    content = sum(c for _, c in results)
    return events / elapsed, content / elapsed, results[0][0]


async def ttft(url: str, app: str, runs: int) -> float:
    import httpx

    firsts: list[float] = []
    async with httpx.AsyncClient(timeout=60) as client:
        await one_stream(client, url, app)
        for _ in range(runs):
            await one_stream(client, url, app, firsts)
    return statistics.median(firsts)


def page_ttft(prompts: int) -> float | None:
    """Seconds from Enter to the first token shown by ``loopctl web --model demo`` in chromium (median)."""
    exe = shutil.which("chromium")
    if exe is None or not importable("playwright"):
        print("skipped: the page's time to first token (chromium or playwright not installed)", flush=True)
        return None
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="bench-web-"))
    shutil.copytree(ROOT / "examples" / "sample-project", work / "project")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loopctl",
            "web",
            "--model",
            "demo",
            "--port",
            "0",
            "--root",
            str(work / "project"),
            "--store",
            str(work / "s.db"),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "LOOPCTL_DEMO_DELAY": "0", "PYTHONPATH": str(ROOT / "src")},
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        args = [
            "--no-sandbox",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-quic",
        ]
        times = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=exe, args=args)
            page = browser.new_page()
            for _ in range(prompts):
                page.goto(url)
                page.wait_for_selector("textarea[name=prompt]")
                page.fill("textarea[name=prompt]", "Collect the TODO comments.")
                # The page's clock: from the keydown to the first text in the live reply.
                page.evaluate(
                    """() => {
                        window.__first = null;
                        document.querySelector("textarea").addEventListener("keydown", () => {
                            window.__t0 = performance.now();
                        }, { once: true });
                        new MutationObserver((_, obs) => {
                            const md = document.querySelector(".msg.live .md");
                            if (md && md.textContent.length > 0 && window.__first === null) {
                                window.__first = performance.now() - window.__t0;
                                obs.disconnect();
                            }
                        }).observe(document.body, { childList: true, subtree: true, characterData: true });
                    }"""
                )
                page.keyboard.press("Enter")
                page.wait_for_function("() => window.__first !== null", timeout=60_000)
                times.append(page.evaluate("window.__first") / 1000)
                page.wait_for_selector(".approval", timeout=60_000)  # the run paused: the next prompt is a new chat
            browser.close()
        return statistics.median(times)
    finally:
        proc.kill()
        proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that the script runs (CI)")
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--deltas", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--ttft-runs", type=int, default=30)
    parser.add_argument("--page-prompts", type=int, default=5)
    a = parser.parse_args()
    if a.smoke:
        a.streams, a.deltas, a.reps, a.ttft_runs, a.page_prompts = 5, 10, 1, 2, 1
    apps = ["loopctl-agui", "loopctl-aisdk"]
    if importable("pydantic_ai", "ag_ui", "starlette"):
        apps.append("pydantic-agui")
    else:
        print("skipped: pydantic-ai's AG-UI adapter (pydantic_ai, ag_ui, starlette not installed; bench/requirements.txt)")
    rows: dict[str, dict[str, float]] = {}
    for app in apps:
        try:
            served = Served(app, a.deltas)
        except RuntimeError as exc:
            FAILURES.append(str(exc))
            print(f"FAILED: {exc}", flush=True)
            continue
        try:
            best: tuple[float, float, int] = (0.0, 0.0, 0)
            for _ in range(a.reps):
                got = asyncio.run(throughput(served.url, app, a.streams))
                best = max(best, got)
            first = asyncio.run(ttft(served.url, app, a.ttft_runs))
            rows[app] = {"events": best[0], "content": best[1], "per_stream": best[2], "ttft": first}
        except Exception as exc:  # a framework that fails is recorded, the others still run
            FAILURES.append(f"{app}: {exc!r}")
            print(f"FAILED: {app}: {exc!r}", flush=True)
        finally:
            served.stop()
    base = rows.get("pydantic-agui")
    print(
        f"\n{a.streams} concurrent streams, {a.deltas} text deltas each; best of {a.reps}; "
        f"time to first token: median of {a.ttft_runs} sequential requests\n"
    )
    print("| app | events/stream | events/s | text deltas/s | vs pydantic-ai | TTFT (HTTP) | vs pydantic-ai |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for app, r in rows.items():
        ratio = f"{r['content'] / base['content']:.2f}×" if base else "-"
        t_ratio = f"{r['ttft'] / base['ttft']:.2f}×" if base else "-"
        print(
            f"| {app} | {r['per_stream']:.0f} | {r['events']:,.0f} | {r['content']:,.0f} | {ratio} | "
            f"{r['ttft'] * 1000:.1f} ms | {t_ratio} |"
        )
    try:
        shown = page_ttft(a.page_prompts)
    except Exception as exc:
        FAILURES.append(f"page: {exc!r}")
        print(f"FAILED: page: {exc!r}")
        shown = None
    if shown is not None:
        print(
            f"\nloopctl web (chromium): time from Enter to the first token on the page: {shown * 1000:.0f} ms "
            f"(median of {a.page_prompts}; demo model, no delay)"
        )
    if FAILURES:
        print(f"\n{len(FAILURES)} part(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
