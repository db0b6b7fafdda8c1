"""The install extras the README and the docs' home page list are the ones pyproject.toml defines."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _all_extras() -> set[str]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (line,) = extras["all"]
    found = re.fullmatch(r"pyloopctl\[(.+)\]", line)
    assert found is not None, line
    return set(found.group(1).split(","))


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_pages_name_every_extra_of_all(page: str) -> None:
    # README.md left out [a2a] (and said [all] was without it); docs/index.md left out [a2a], [web], [gemini].
    text = (ROOT / page).read_text()
    named = set(re.findall(r"`\[([a-z0-9]+)\]`", text))
    missing = _all_extras() - named
    assert not missing, f"{page} does not name the extras {sorted(missing)}"
