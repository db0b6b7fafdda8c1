#!/usr/bin/env python3
"""Set up and run loopctl's jobs on a fresh machine (Python 3.11+ and pip are all it needs).

    python3 make.py demo    # make .venv, install loopctl, run the main job (no API key needed)
    python3 make.py test    # make .venv, install loopctl and its dev tools, run ruff, mypy and pytest
    python3 make.py bench   # the benchmarks (installs the peer libraries into .venv-bench)

Every job creates its own virtual environment in the checkout (``.venv``) and installs into it only when
``pyproject.toml`` changed since the last install.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def _digest(spec: str, extra: list[str] | None) -> str:
    inputs = (ROOT / "pyproject.toml").read_bytes() + spec.encode() + " ".join(extra or []).encode()
    for prev, arg in zip([""] + (extra or []), extra or []):
        if prev == "-r":  # a requirements file: its contents, so an edit reinstalls
            inputs += Path(arg).read_bytes()
    return hashlib.sha256(inputs).hexdigest()


def _venv(name: str, spec: str, extra: list[str] | None = None, *, or_else: str | None = None) -> Path:
    """The venv ``name`` with ``spec`` installed (or ``or_else``, a spec that includes it, already there)."""
    env_dir = ROOT / name
    py = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if not py.exists():
        print(f"make.py: creating {name}", flush=True)
        venv.EnvBuilder(with_pip=True).create(env_dir)
    stamp = env_dir / ".loopctl-installed"
    digest = _digest(spec, extra)
    current = stamp.read_text() if stamp.exists() else ""
    if current != digest and not (or_else and current == _digest(or_else, extra)):
        print(f"make.py: installing {spec} into {name}", flush=True)
        _run([str(py), "-m", "pip", "install", "-q", "--upgrade", "pip"])
        _run([str(py), "-m", "pip", "install", "-q", "-e", spec, *(extra or [])])
        stamp.write_text(digest)
    return py


def _run(cmd: list[str]) -> None:
    result = subprocess.run(cmd, check=False, cwd=ROOT)
    if result.returncode != 0:
        sys.exit(result.returncode)


def demo(args: list[str]) -> None:
    py = _venv(".venv", ".[all]", or_else=".[dev]")  # the test job's install includes everything the demo needs
    # Work on a copy, so the demo can be run again and the sample stays as shipped.
    work = ROOT / ".loopctl" / "demo-project"
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(ROOT / "examples" / "sample-project", work)
    task = "Find the TODO comments in this project and write a summary of them to TODO.md."
    loopctl = py.parent / ("loopctl.exe" if os.name == "nt" else "loopctl")
    _run([str(loopctl), "run", task, "--model", "demo", "--root", str(work), "--yes", *args])
    print(f"\nmake.py: the demo worked on a copy of examples/sample-project in {work}; see {work / 'TODO.md'}")


def test(args: list[str]) -> None:
    py = _venv(".venv", ".[dev]")
    print("make.py: ruff (lint)", flush=True)
    _run([str(py), "-m", "ruff", "check", "src", "tests", "bench"])
    print("make.py: mypy --strict", flush=True)
    _run([str(py), "-m", "mypy"])
    print("make.py: pytest", flush=True)
    _run([str(py), "-m", "pytest", *args])


def bench(args: list[str]) -> None:
    py = _venv(".venv-bench", ".[dev]", ["-r", str(ROOT / "bench" / "requirements.txt")])
    scripts = args or sorted(str(p) for p in (ROOT / "bench").glob("bench_*.py"))
    for script in scripts:
        _run([str(py), script])


JOBS = {"demo": demo, "test": test, "bench": bench}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in JOBS:
        print(__doc__)
        sys.exit(2)
    JOBS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
