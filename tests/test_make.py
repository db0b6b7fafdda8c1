"""``make.py``'s PostgreSQL step: what it runs on a fresh CI machine (root, apt-get, no PostgreSQL), checked with
a recording runner so the test never installs or removes anything; and the demo job's last lines."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from loopctl.message import Message
from loopctl.store import SQLiteStore

ROOT = Path(__file__).resolve().parent.parent


def make() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loopctl_make", ROOT / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Recorder:
    def __init__(self, returncode: int = 0, installs: list[Path] | None = None) -> None:
        self.calls: list[tuple[list[str], dict[str, Any]]] = []
        self.returncode = returncode
        self.installs = installs

    def __call__(self, cmd: list[str], **kw: Any) -> Any:
        self.calls.append((cmd, kw))
        if cmd[:2] == ["apt-get", "install"] and self.installs is not None:
            self.installs.append(Path("/usr/lib/postgresql/99/bin"))
        return SimpleNamespace(returncode=self.returncode)


@pytest.fixture(autouse=True)
def _no_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOPCTL_SKIP_POSTGRES", raising=False)


def test_a_fresh_root_machine_installs_postgresql_with_apt_get() -> None:
    found: list[Path] = []
    run = Recorder(installs=found)
    ok = make().ensure_postgres(find=lambda: found[0] if found else None, run=run, is_root=True, has_apt=True)
    assert ok
    assert [cmd for cmd, _ in run.calls] == [
        ["apt-get", "update"],
        [
            "apt-get",
            "install",
            "-y",
            "--no-install-recommends",
            "-o",
            "Dpkg::Options::=--force-unsafe-io",
            "postgresql",
        ],
    ]
    assert all(kw["env"]["DEBIAN_FRONTEND"] == "noninteractive" for _, kw in run.calls)


def test_an_installed_postgresql_is_left_alone() -> None:
    run = Recorder()
    assert make().ensure_postgres(find=lambda: Path("/usr/lib/postgresql/15/bin"), run=run, is_root=True, has_apt=True)
    assert run.calls == []


def test_without_root_nothing_is_run_and_it_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    run = Recorder()
    assert not make().ensure_postgres(find=lambda: None, run=run, is_root=False, has_apt=True)
    assert run.calls == []
    assert "LOOPCTL_SKIP_POSTGRES=1" in capsys.readouterr().out


def test_a_failed_apt_get_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    run = Recorder(returncode=100)
    assert not make().ensure_postgres(find=lambda: None, run=run, is_root=True, has_apt=True)
    assert [cmd for cmd, _ in run.calls] == [["apt-get", "update"]]
    assert "apt-get update failed (exit 100)" in capsys.readouterr().out


def test_the_opt_out_skips_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPCTL_SKIP_POSTGRES", "1")
    run = Recorder()
    assert not make().ensure_postgres(find=lambda: None, run=run, is_root=True, has_apt=True)
    assert run.calls == []


def test_postgresql_is_found_where_debian_puts_it(tmp_path: Path) -> None:
    from loopctl.testing.postgres import find_bindir

    for version in ("13", "15"):
        b = tmp_path / version / "bin"
        b.mkdir(parents=True)
        (b / "initdb").write_text("")
        (b / "pg_ctl").write_text("")
    (tmp_path / "empty").mkdir()
    assert (
        find_bindir([tmp_path / "empty", tmp_path / "15" / "bin", tmp_path / "13" / "bin"]) == tmp_path / "15" / "bin"
    )
    assert find_bindir([tmp_path / "empty"]) is None
    assert make()._find_pg_bindir() == find_bindir()  # make.py looks where the tests look


@pytest.mark.skipif(os.name == "nt", reason="the stand-in venv is shell scripts")
@pytest.mark.parametrize("from_root", [True, False], ids=["from-the-checkout", "from-elsewhere"])
def test_the_demo_ends_with_a_command_that_runs_as_printed(
    from_root: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The last line said `continue with: loopctl run "..." --resume ID`, but make.py puts loopctl in .venv only:
    # on a fresh clone, `loopctl` is not a command.
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "examples" / "sample-project", root / "examples" / "sample-project")
    bin_dir = root / ".venv" / "bin"  # a stand-in for the venv: this test's interpreter, which has loopctl
    bin_dir.mkdir(parents=True)
    for name, cmd in [("python", sys.executable), ("loopctl", f"{sys.executable} -m loopctl")]:
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {cmd} "$@"\n')
        (bin_dir / name).chmod(0o755)
    m = make()
    monkeypatch.setattr(m, "ROOT", root)
    monkeypatch.setattr(m, "_venv", lambda *a, **k: bin_dir / "python")
    monkeypatch.chdir(root if from_root else tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    monkeypatch.setenv("LOOPCTL_DEMO_DELAY", "0")
    m.demo([])
    hint = capsys.readouterr().out.splitlines()[-2:]

    with SQLiteStore(root / ".loopctl" / "sessions.db") as store:
        (session,) = store.sessions()
    here = "" if from_root else f"cd {root} && "
    assert hint == [
        "make.py: the command is .venv/bin/loopctl (in .venv, not on your PATH; or `source .venv/bin/activate` "
        "first); continue the session with:",
        f'  {here}.venv/bin/loopctl run "..." --resume {session.id}',
    ]
    # Typed as printed, it continues the session.
    command = hint[1].strip().replace('"..."', '"Anything left?"')
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    with SQLiteStore(root / ".loopctl" / "sessions.db") as store:
        assert [s.id for s in store.sessions()] == [session.id]
        assert store.load(session.id).messages[-2] == Message.user("Anything left?")


def test_missing_system_tools_are_installed_with_one_apt_get_install() -> None:
    m = make()
    installed: set[str] = set()

    def run(cmd: list[str], **kw: Any) -> Any:
        if cmd[:2] == ["apt-get", "install"]:
            installed.update(cmd[4:])
        return SimpleNamespace(returncode=0)

    tools = {
        "browser": m.SystemTool(lambda: "chromium" in installed or None, ("chromium",)),
        "postgresql": m.SystemTool(lambda: "postgresql" in installed or None, ("postgresql",)),
        "node": m.SystemTool(lambda: "/usr/bin/node", ("nodejs",)),  # there already
    }
    calls: list[list[str]] = []
    found = m.ensure_system(
        tools, run=lambda cmd, **kw: (calls.append(cmd), run(cmd, **kw))[1], is_root=True, has_apt=True
    )
    assert found == {"browser": True, "postgresql": True, "node": True}
    assert calls == [
        ["apt-get", "update"],
        [
            "apt-get",
            "install",
            "-y",
            "--no-install-recommends",
            "-o",
            "Dpkg::Options::=--force-unsafe-io",
            "chromium",
            "postgresql",
        ],
    ]


def test_a_tool_still_missing_after_the_install_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    m = make()
    tools = {"browser": m.SystemTool(lambda: None, ("chromium",))}
    found = m.ensure_system(tools, run=Recorder(), is_root=True, has_apt=True)
    assert found == {"browser": False}
    assert "chromium installed, but browser is still not found" in capsys.readouterr().out


def test_pytest_runs_on_workers_unless_the_arguments_choose(monkeypatch: pytest.MonkeyPatch) -> None:
    m = make()
    monkeypatch.delenv("LOOPCTL_TEST_WORKERS", raising=False)
    assert m._pytest_args(["tests/store"]) == ["-n", str(m.DEFAULT_WORKERS), "tests/store"]
    assert m._pytest_args(["-n", "0", "tests/store"]) == ["-n", "0", "tests/store"]
    assert m._pytest_args(["-n2"]) == ["-n2"]
    monkeypatch.setenv("LOOPCTL_TEST_WORKERS", "3")
    assert m._pytest_args([]) == ["-n", "3"]


def test_chromium_is_a_system_tool_for_the_browser_tests() -> None:
    """The browser tests' chromium (tests/ui/test_browser.py) comes from Debian's package, installed by the one
    apt-get install of make.py test when it is missing; LOOPCTL_SKIP_BROWSER=1 leaves it out."""
    m = make()
    row = m.SYSTEM_TOOLS["chromium"]
    assert row.packages == ("chromium",) and row.skip_var == "LOOPCTL_SKIP_BROWSER"
    calls: list[list[str]] = []

    def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    tools = {"chromium": row._replace(find=lambda: None)}
    m.ensure_system(tools, run=run, is_root=True, has_apt=True, log=lambda line: None)
    assert calls[-1] == [
        "apt-get",
        "install",
        "-y",
        "--no-install-recommends",
        "-o",
        "Dpkg::Options::=--force-unsafe-io",
        "chromium",
    ]


def test_the_page_is_built_when_its_sources_change(tmp_path: Path) -> None:
    """make.py test rebuilds the page when web/ changed: the digest covers the sources, not node_modules or
    hidden files."""
    m = make()
    web = tmp_path / "web"
    (web / "src").mkdir(parents=True)
    (web / "src" / "main.js").write_text("a")
    (web / "node_modules").mkdir()
    before = m.web_sources_digest(web)
    (web / "node_modules" / "x.js").write_text("ignored")
    (web / ".npm-install.lock").write_text("")
    assert m.web_sources_digest(web) == before
    (web / "src" / "main.js").write_text("b")
    assert m.web_sources_digest(web) != before


# --- Node.js and the MCP reference servers ---------------------------------------------------------------------


def test_node_is_a_system_tool_installed_with_the_others() -> None:
    tool = make().SYSTEM_TOOLS["node"]
    assert tool.packages == ("nodejs", "npm") and tool.skip_var is None


def test_valgrind_is_a_system_tool_for_the_bench_s_instruction_counts() -> None:
    """``bench/bench_engine.py --instructions`` (and its smoke run in CI) counts under valgrind's cachegrind."""
    tool = make().SYSTEM_TOOLS["valgrind"]
    assert tool.packages == ("valgrind",) and tool.skip_var is None


def test_the_reference_servers_are_installed_with_npm_ci_once_per_lock_file(tmp_path: Path) -> None:
    run = Recorder()
    m = make()
    assert m.ensure_mcp_servers(tmp_path / "servers", run=run, npm="npm")
    assert [(cmd, kw["cwd"]) for cmd, kw in run.calls] == [
        (["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], tmp_path / "servers")
    ]
    assert (tmp_path / "servers" / "package-lock.json").read_bytes() == (
        ROOT / "tests" / "mcp" / "reference" / "package-lock.json"
    ).read_bytes()
    assert m.ensure_mcp_servers(tmp_path / "servers", run=run, npm="npm")  # the same lock file: nothing to do
    assert len(run.calls) == 1
    assert not m.ensure_mcp_servers(tmp_path / "other", run=Recorder(returncode=1), npm="npm")
