#!/usr/bin/env python3
"""Set up and run loopctl's jobs on a fresh machine (Python 3.11+ and pip are all it needs).

    python3 make.py demo    # make .venv, install loopctl, run the main job (no API key needed)
    python3 make.py test    # make .venv, install loopctl and its dev tools, run ruff, mypy and pytest
                            # (installs PostgreSQL, and Node.js for the MCP reference servers, with apt-get
                            # when they are missing and we are root; LOOPCTL_SKIP_POSTGRES=1 skips PostgreSQL
                            # and its tests; the reference servers go to .loopctl/mcp-servers with npm ci)
    python3 make.py bench   # the benchmarks (installs the peer libraries into .venv-bench)

Every job creates its own virtual environment in the checkout (``.venv``) and installs into it only when
``pyproject.toml`` changed since the last install.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import venv
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    for line in _demo_hint(py, loopctl, args):
        print(line)


# Run by the venv's python in ROOT: the id of the session the demo just saved to the CLI's default store.
_NEWEST_SESSION = """
from loopctl.store import SQLiteStore
with SQLiteStore(".loopctl/sessions.db") as store:
    sessions = store.sessions()
print(sessions[0].id if sessions else "")
"""


def _demo_hint(py: Path, loopctl: Path, args: list[str]) -> list[str]:
    """What to type next: the command as it is installed (``.venv/bin/loopctl``: make.py puts it in .venv,
    not on the PATH; the CLI's own hint says plain ``loopctl``) and the demo's session id, run from ROOT,
    where the default store is."""
    sid = ""
    if not {"--store", "--session", "--resume"} & {a.split("=", 1)[0] for a in args}:
        found = subprocess.run([str(py), "-c", _NEWEST_SESSION], cwd=ROOT, capture_output=True, text=True, check=False)
        sid = found.stdout.strip() if found.returncode == 0 else ""
    command = loopctl.relative_to(ROOT).as_posix()
    here = "" if Path.cwd().resolve() == ROOT else f"cd {shlex.quote(str(ROOT))} && "
    return [
        f"make.py: the command is {command} (in .venv, not on your PATH; or `source .venv/bin/activate` first);"
        " continue the session with:",
        f'  {here}{command} run "..." --resume {sid or "<the session id above>"}',
    ]


PG_SKIP_VAR = "LOOPCTL_SKIP_POSTGRES"


def _find_pg_bindir() -> Path | None:
    """``loopctl.testing.postgres.find_bindir``, loaded from its file (it is standard library only), so the
    tests and this script look for PostgreSQL in the same places."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_loopctl_pg", ROOT / "src" / "loopctl" / "testing" / "postgres.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: Path | None = module.find_bindir()
    return found


def ensure_postgres(
    *,
    find: Callable[[], Path | None] = _find_pg_bindir,
    run: Callable[..., Any] = subprocess.run,
    is_root: bool | None = None,
    has_apt: bool | None = None,
) -> bool:
    """Make sure PostgreSQL's server programs are installed, for the tests that start a real server: when
    ``initdb``/``pg_ctl`` are missing and this runs as root on a machine with apt-get (CI), install the
    ``postgresql`` package. Returns whether they are there. ``LOOPCTL_SKIP_POSTGRES=1`` skips the check (and
    the tests skip themselves). The keyword arguments replace the checks and the command runner, for tests."""
    if os.environ.get(PG_SKIP_VAR) == "1":
        print(f"make.py: {PG_SKIP_VAR}=1: PostgreSQL is not checked and its tests are skipped", flush=True)
        return False
    if find() is not None:
        return True
    if is_root is None:
        is_root = os.name == "posix" and os.geteuid() == 0
    if has_apt is None:
        has_apt = shutil.which("apt-get") is not None
    if not (is_root and has_apt):
        print(
            "make.py: PostgreSQL (initdb, pg_ctl) is not installed and cannot be installed from here (that needs "
            f"root and apt-get); the PostgreSQL tests will fail. Install it, or set {PG_SKIP_VAR}=1 to skip them.",
            flush=True,
        )
        return False
    print("make.py: installing PostgreSQL (apt-get install postgresql)", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "postgresql"]):
        result = run(cmd, check=False, env=env)
        if result.returncode != 0:
            print(f"make.py: {' '.join(cmd)} failed (exit {result.returncode}); the PostgreSQL tests will fail")
            return False
    if find() is None:
        print("make.py: the postgresql package is installed but initdb/pg_ctl are still not found", flush=True)
        return False
    return True


MCP_SERVERS_SPEC = ROOT / "tests" / "mcp" / "reference"
"""``package.json`` and ``package-lock.json`` of the MCP reference servers the tests start (npm packages)."""
MCP_SERVERS_DIR = ROOT / ".loopctl" / "mcp-servers"
"""Where ``npm ci`` installs them (``tests/mcp/reference.py`` looks there)."""


def ensure_node(
    *,
    which: Callable[[str], str | None] = shutil.which,
    run: Callable[..., Any] = subprocess.run,
    is_root: bool | None = None,
    has_apt: bool | None = None,
) -> bool:
    """Make sure ``node`` and ``npm`` are installed, for the MCP reference servers the tests start: when they
    are missing and this runs as root on a machine with apt-get (CI), install Debian's ``nodejs`` and ``npm``.
    Returns whether both are there. The keyword arguments replace the checks and the runner, for tests."""
    if which("node") and which("npm"):
        return True
    if is_root is None:
        is_root = os.name == "posix" and os.geteuid() == 0
    if has_apt is None:
        has_apt = shutil.which("apt-get") is not None
    if not (is_root and has_apt):
        print(
            "make.py: Node.js (node, npm) is not installed and cannot be installed from here (that needs root and "
            "apt-get); the tests against the MCP reference servers will fail. Install Node.js 18 or newer.",
            flush=True,
        )
        return False
    print("make.py: installing Node.js (apt-get install nodejs npm)", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "nodejs", "npm"]):
        result = run(cmd, check=False, env=env)
        if result.returncode != 0:
            print(f"make.py: {' '.join(cmd)} failed (exit {result.returncode}); the MCP reference servers will not run")
            return False
    return bool(which("node") and which("npm"))


def ensure_mcp_servers(
    target: Path = MCP_SERVERS_DIR, *, run: Callable[..., Any] = subprocess.run, npm: str | None = None
) -> bool:
    """Install the MCP reference servers of ``tests/mcp/reference/package-lock.json`` into ``target`` with
    ``npm ci`` (the exact versions locked), when the lock file changed since the last install. Returns whether
    they are installed. ``run`` and ``npm`` replace the runner and the npm command, for tests."""
    npm = npm or shutil.which("npm")
    lock = (MCP_SERVERS_SPEC / "package-lock.json").read_bytes()
    digest = hashlib.sha256(lock + (MCP_SERVERS_SPEC / "package.json").read_bytes()).hexdigest()
    stamp = target / ".loopctl-installed"
    if stamp.exists() and stamp.read_text() == digest:
        return True
    if npm is None:
        return False
    target.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(MCP_SERVERS_SPEC / name, target / name)
    shown = target.relative_to(ROOT) if target.is_relative_to(ROOT) else target
    print(f"make.py: installing the MCP reference servers into {shown} (npm ci)", flush=True)
    result = run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], check=False, cwd=target)
    if result.returncode != 0:
        print(f"make.py: npm ci failed (exit {result.returncode}); the MCP reference server tests will fail")
        return False
    stamp.write_text(digest)
    return True


def test(args: list[str]) -> None:
    py = _venv(".venv", ".[dev]")
    ensure_postgres()
    if ensure_node():
        ensure_mcp_servers()
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
