"""``require_program`` until ``tests/servers.py`` (the per-worker server helpers) is on this branch."""

from __future__ import annotations

import os
import shutil

import pytest


def require_program(name: str) -> str:
    """The path of the program ``name``. When it is missing the test fails in CI (``CI=true``: ``make.py test``
    installs it from its table of system packages) and is skipped elsewhere, saying what to install."""
    found = shutil.which(name)
    if found is not None:
        return found
    message = f"{name} is not installed (python3 make.py test installs it as root; see make.py)"
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)
