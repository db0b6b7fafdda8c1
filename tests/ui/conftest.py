"""Fixtures of the web tests: an HTTP server per xdist worker serving the apps a test mounts on it (uvicorn in a
thread of the worker), and node with the protocols' client packages (``tests/ui/node_env.py``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ui.node_env import NODE_DIR, npm_ci


class AppServer:
    """uvicorn serving, on ``127.0.0.1`` and a free port, the ASGI apps mounted with :meth:`mount` (each under
    ``/<name>``; the names are unique per test, so the tests of one worker share the server)."""

    def __init__(self) -> None:
        import uvicorn

        self.apps: dict[str, Any] = {}
        config = uvicorn.Config(
            self._route, host="127.0.0.1", port=0, log_level="warning", lifespan="off", interface="asgi3"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn-tests", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]

    async def _route(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "/")
        name, _, rest = path.lstrip("/").partition("/")
        app = self.apps.get(name)
        if app is None:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b"no such app"})
            return
        await app({**scope, "path": "/" + rest, "root_path": scope.get("root_path", "") + "/" + name}, receive, send)

    def mount(self, name: str, app: Any) -> str:
        """Serve ``app`` under ``/<name>/``; returns its URL."""
        self.apps[name] = app
        return f"http://127.0.0.1:{self.port}/{name}/"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="session")
def app_server() -> Iterator[AppServer]:
    server = AppServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def node_clients() -> Path:
    """``tests/ui/node`` with its packages installed (``npm ci``, once per lockfile)."""
    return npm_ci(NODE_DIR)


class WebServer:
    """``loopctl web`` started as a user starts it (``--port 0``); :attr:`url` is the first line it printed."""

    def __init__(self, root: Path, store: Path, *args: str, env: dict[str, str] | None = None) -> None:
        import os
        import subprocess
        import sys

        self.root = root
        self.store = store
        self.log = store.with_suffix(".log")
        command = [sys.executable, "-m", "loopctl", "web", "--port", "0", "--root", str(root), "--store", str(store)]
        with self.log.open("wb") as err:
            self.proc = subprocess.Popen(
                [*command, *args],
                stdout=subprocess.PIPE,
                stderr=err,
                env={**os.environ, "LOOPCTL_DEMO_DELAY": "0.005", **(env or {})},
                text=True,
            )
        assert self.proc.stdout is not None
        import select

        ready, _, _ = select.select([self.proc.stdout], [], [], 120)
        self.url = self.proc.stdout.readline().strip() if ready else ""
        if not self.url.startswith("http://"):
            self.stop()
            raise RuntimeError(f"loopctl web printed {self.url!r}:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def sample_project(into: Path) -> Path:
    """A copy of ``examples/sample-project`` (the demo model's task: its TODO comments)."""
    import shutil

    shutil.copytree(Path(__file__).parents[2] / "examples" / "sample-project", into)
    return into


# --- a real browser ---------------------------------------------------------------------------------------------

SCREENSHOTS = Path(__file__).parents[2] / ".loopctl" / "test-screenshots"
"""Where a failed browser test leaves its screenshot (the path is printed with the failure)."""

CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root
    # A closed network: nothing of the browser's own reaches out.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-features=Translate,OptimizationHints,MediaRouter",
]


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Debian's chromium driven by Playwright (``executable_path``: Playwright downloads no browser), one per
    test module, with a profile of its own."""
    from tests.servers import require_program

    exe = require_program("chromium")
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=exe,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900},
        )
        yield context
        context.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A new tab; its screenshot is saved to :data:`SCREENSHOTS` when the test fails."""
    tab = browser.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    tab.page_errors = errors
    yield tab
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{request.node.name}.png"
        tab.screenshot(path=str(path), full_page=True)
        print(f"\nscreenshot of the failed test: {path}")
    tab.close()


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist registers it; without xdist the mark is a no-op, not an unknown mark
    config.addinivalue_line("markers", "xdist_group(name): run the tests of one group on one xdist worker")
