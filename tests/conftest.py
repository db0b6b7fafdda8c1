"""Shared test helpers: the recorded provider traffic (copied from ../shared/fixtures, see its INDEX.md), a real
PostgreSQL server (:mod:`tests.postgres`), and the settings every property test runs with.

The suite runs in parallel: ``python3 make.py test`` starts several pytest-xdist worker processes
(``--dist loadgroup``), each running a share of the tests. Servers the tests start follow one pattern:

* **A session-scoped fixture is one per worker.** Each worker process instantiates it on first use and tears
  it down when that worker ends, so a server started there belongs to one worker and is never shared. Start it
  lazily inside the fixture (never at import: a worker that runs none of its tests starts nothing). Put its
  files under ``tmp_path_factory.mktemp(...)`` (a folder of the worker's own) and bind it to
  ``127.0.0.1`` port 0, or to :func:`free_port`, retrying on a port taken meanwhile (``tests.servers``
  shows how: :class:`tests.servers.ServerProcess`). The PostgreSQL server (:mod:`tests.postgres`: a Unix
  socket in its own folder) and the Temporal dev server (``tests/durable/conftest.py``) are built that way;
  a browser, a node-based protocol client or an MCP reference server from npm is added the same way::

      @pytest.fixture(scope="session")
      def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
          exe = require_program("chromium")  # fails in CI when missing; skips elsewhere (tests.servers)
          server = ServerProcess(
              lambda port: [exe, "--headless", f"--remote-debugging-port={port}", ...],
              log=tmp_path_factory.mktemp("chromium") / "chromium.log",
          )
          yield server
          server.stop()

  The program comes from a Debian package: add a row to ``SYSTEM_TOOLS`` in ``make.py`` (the program and its
  packages) and ``make.py test`` installs it with apt-get in CI, while the venv installs.
* **Tests that must not run at the same time share a group**: ``@pytest.mark.xdist_group("name")`` puts them
  on one worker, one after the other (for something that cannot be had per worker: a fixed port, a global
  file). Prefer a resource per worker.
* **A module whose tests share a module-scoped server runs on one worker** when it is listed in
  :data:`ONE_WORKER_MODULES` (its tests get the group of their module): spread over the workers, each worker
  started the module's servers again (``--dist loadgroup`` sends each other test on its own).
* **Tests that run mypy share the group "mypy"** (``@pytest.mark.xdist_group("mypy")``): one worker runs them,
  one after the other, on the checkout's ``.mypy_cache``, so loopctl and its libraries are type-checked from a
  cold cache once, not by every worker at the same time (the docs blocks' check first: the longest).
* ``worker_id`` (pytest-xdist's fixture: ``"gw0"``, ``"gw1"``..., ``"master"`` without workers) names
  per-worker things that must not collide across processes (a database, a queue).

Property tests (hypothesis) run with no deadline and without the "too slow" health check: with several
workers on two cores, one example can take ten times its usual time, which says nothing about the code (speed
is measured in ``bench/``); each test's own ``@settings`` still choose its examples.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.postgres import postgres_database, postgres_dsn, postgres_server

__all__ = ["postgres_database", "postgres_dsn", "postgres_server"]  # fixtures for every test module

settings.register_profile("loopctl", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("loopctl")

HYPOTHESIS_SCALE_VAR = "LOOPCTL_HYPOTHESIS_SCALE"
"""Environment variable: a factor on every property test's number of examples (``max_examples``, its own or
the default 100; at least 10). ``make.py test`` sets 0.5 unless it is set (CI's time budget); ``1`` runs each
as written, and a larger factor searches longer."""


# The slowest tests (tens of seconds each: the bench smoke runs, the incremental-request properties, the
# killed writers, the durable engines' crash tests) go first, so that with pytest-xdist they run while the
# many short tests fill the other workers, instead of making the suite's tail.
SLOW_FIRST = (
    "tests/test_docs_examples.py::test_docs_python_passes_mypy_strict",  # the "mypy" group: mypy from a cold cache
    "tests/test_bench.py",
    "tests/providers/test_incremental.py",
    "tests/providers/test_openai_responses_properties.py",
    "tests/store/test_concurrency.py",
    "tests/durable/",
    "tests/cli/test_autosave.py",
)


# Modules whose module-scoped fixtures start servers (a process or a thread each: 2-6 s apiece on a loaded
# machine), so that they start once, not once per worker (with four workers, four times).
ONE_WORKER_MODULES = (
    "tests/a2a/test_a2a.py",  # a2a_url
    "tests/a2a/test_a2a_hostile.py",  # a2a_url
    "tests/a2a/test_client_limits.py",  # hostile_url
    "tests/cli/test_server_limits.py",  # served: web, a2a and mcp, three processes
    "tests/durable/test_temporal.py",  # scenarios
    "tests/mcp/test_everything.py",  # everything_http
    "tests/mcp/test_hostile.py",  # hostile
    "tests/ui/test_web.py",  # server
)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks (loadgroup)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return next((i for i, prefix in enumerate(SLOW_FIRST) if item.nodeid.startswith(prefix)), len(SLOW_FIRST))

    items.sort(key=rank)  # stable: within a rank, tests keep their order
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        if module in ONE_WORKER_MODULES:
            item.add_marker(pytest.mark.xdist_group(module))
    scale = float(os.environ.get(HYPOTHESIS_SCALE_VAR) or 1)
    if scale == 1:
        return
    done: set[int] = set()
    for item in items:
        test = getattr(item, "obj", None)
        test = getattr(test, "__func__", test)  # a method's function
        current = getattr(test, "_hypothesis_internal_use_settings", None)
        if current is None or not hasattr(test, "hypothesis") or id(test) in done:
            continue
        done.add(id(test))
        test._hypothesis_internal_use_settings = settings(  # type: ignore[union-attr]
            current, max_examples=max(10, round(current.max_examples * scale))
        )

class _XdistGroupIds:
    """``--dist loadgroup`` keeps the tests of one ``xdist_group`` on one worker by the group's name at the end
    of their node ids (``...@name``, read by the scheduler). pytest-xdist 3.8 writes it to ``item._nodeid``,
    which pytest 9 no longer reads (a node's id is ``item._id``): no group kept its tests together (the browser
    tests started chromium on every worker). Runs after pytest-xdist's hook and adds the name where it is
    missing."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not getattr(config.option, "loadgroup", False):  # set on the workers of --dist loadgroup
            return
        for item in items:
            marks = item.iter_markers("xdist_group")
            names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})
            if not names or item.nodeid.endswith(suffix := "@" + "_".join(names)):
                continue
            if hasattr(item, "_id"):  # pytest 9
                from _pytest.nodeid import NodeId

                item._id = NodeId.parse(item.nodeid + suffix)
            else:
                item._nodeid = item.nodeid + suffix


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_XdistGroupIds(), "loopctl-xdist-group-ids")


TRAFFIC = Path(__file__).parent / "fixtures" / "provider-traffic"


class Recording:
    """One recorded exchange: ``<provider>/<name>.*`` files."""

    def __init__(self, provider: str, name: str) -> None:
        self.provider = provider
        self.name = name
        self.base = TRAFFIC / provider

    def _path(self, suffix: str) -> Path:
        return self.base / f"{self.name}.{suffix}"

    @property
    def meta(self) -> dict[str, Any]:
        return json.loads(self._path("meta.json").read_text())

    @property
    def request(self) -> dict[str, Any]:
        return json.loads(self._path("request.json").read_text())

    def has(self, suffix: str) -> bool:
        return self._path(suffix).exists()

    @property
    def response_json(self) -> Any:
        return json.loads(self._path("response.json").read_text())

    @property
    def response_sse(self) -> bytes:
        """The streamed body, byte-exact."""
        if self.has("response.sse"):
            return self._path("response.sse").read_bytes()
        # The one response-only fixture stores one SSE data payload per line, framing not recorded.
        lines = self._path("response.chunks.jsonl").read_text().splitlines()
        return b"".join(b"data: " + line.encode() + b"\n\n" for line in lines if line.strip())


def recordings(provider: str, prefix: str = "") -> list[str]:
    """Names of the recordings of ``provider`` whose names start with ``prefix``."""
    return sorted(p.name[: -len(".meta.json")] for p in (TRAFFIC / provider).glob(f"{prefix}*.meta.json"))


@pytest.fixture
def traffic() -> type[Recording]:
    return Recording
