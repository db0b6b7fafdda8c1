"""The page shipped in the package (``src/loopctl/ui/static``) is the build of ``web/``: its stamp names the
sources' digest, and a fresh build from the committed sources and lockfile matches it byte for byte."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

from tests.ui.node_env import node_program, npm_ci

ROOT = Path(__file__).parents[2]
STATIC = ROOT / "src" / "loopctl" / "ui" / "static"


def make() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loopctl_make_assets", ROOT / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_stamp_names_the_sources() -> None:
    m = make()
    assert (STATIC / "source.sha256").read_text().strip() == m.web_sources_digest(), (
        "web/ changed since the page was built: run python3 make.py web and commit src/loopctl/ui/static"
    )


def test_a_fresh_build_matches_the_shipped_page(tmp_path: Path) -> None:
    web = npm_ci(ROOT / "web")
    out = tmp_path / "static"
    vite = web / "node_modules" / "vite" / "bin" / "vite.js"
    done = subprocess.run(
        [*node_program(), str(vite), "build", "--outDir", str(out), "--emptyOutDir"],
        cwd=web,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    shipped = files(STATIC)
    shipped.pop("source.sha256")
    built = files(out)
    assert sorted(built) == sorted(shipped)
    for name, data in built.items():
        assert data == shipped[name], f"{name} differs from a fresh build of web/: run python3 make.py web"


def test_the_page_has_no_inline_script_or_style() -> None:
    html = (STATIC / "index.html").read_text()
    assert '<meta name="loopctl-token" content="">' in html  # the server puts the page's token there
    assert "<script>" not in html and "<style" not in html and " style=" not in html
