"""What every bench script shares: the ``--smoke`` flag, peers that may be missing, and failures that fail the
script.

``--smoke`` runs a script at tiny sizes in a few seconds: ``tests/test_bench.py`` runs every ``bench_*.py``
that way in CI, so a benchmark that breaks fails the suite instead of rotting. A smoke run checks that the
script completes and prints its table; its figures mean nothing.

A peer (LangGraph, pydantic-ai, the OpenAI Agents SDK, ... from ``bench/requirements.txt``) is measured when
it can be imported and skipped with a printed line when it cannot (:func:`peer_missing`). A part of loopctl
that fails, or a peer that is installed and fails, is recorded with :func:`fail`; :func:`finish` (the last
call of ``main``) exits 1 when anything failed, after the table is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

SMOKE_HELP = "tiny sizes, a few seconds: check that the script runs and prints its table (CI runs this)"

FAILURES: list[str] = []


def add_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--smoke`` to ``parser``."""
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)


def smoke_requested() -> bool:
    """Whether ``--smoke`` is on the command line (for scripts without an argument parser)."""
    return "--smoke" in sys.argv[1:]


def peer_missing(name: str, *modules: str) -> bool:
    """Whether the peer ``name`` cannot run because one of ``modules`` is not installed; prints a line saying
    so (``skipped: <name> (... not installed)``)."""
    absent = [m for m in modules if not _importable(m)]
    if absent:
        print(f"skipped: {name} ({', '.join(absent)} not installed; bench/requirements.txt)", flush=True)
        return True
    return False


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing
        return False


def fail(what: str) -> None:
    """Record that ``what`` failed (printed now; :func:`finish` exits 1)."""
    print(f"FAILED: {what}", flush=True)
    FAILURES.append(what)


def finish() -> None:
    """Exit 1, naming what failed, when :func:`fail` was called; else return."""
    if FAILURES:
        print(f"\n{len(FAILURES)} part(s) failed: " + "; ".join(f.splitlines()[0] for f in FAILURES), flush=True)
        sys.exit(1)
