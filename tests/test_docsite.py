"""The strict documentation build's own checks (tools/docsite.py), on a small package made for each test: an
undocumented public name, a parameter no docstring names, a Sphinx role naming nothing and a module without
``__all__`` each fail; what is documented passes; a re-exported name is documented once, at its home."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import docsite  # noqa: E402


def package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "pkgx" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


GOOD = {
    "__init__.py": '''
        """A package."""
        from pkgx.core import Thing, make

        __all__ = ["Thing", "make"]
    ''',
    "core.py": '''
        """The core: :class:`Thing` and :func:`make`."""

        __all__ = ["Thing", "make"]


        class Thing:
            """A thing of ``size`` bytes."""

            def __init__(self, size: int) -> None:
                self.size = size

            def grow(self, by: int) -> int:
                """The size after growing ``by`` bytes; raises ``ValueError`` for a negative ``by``."""
                return self.size + by


        def make(size: int = 0) -> Thing:
            """A :class:`Thing` of ``size`` bytes."""
            return Thing(size)
    ''',
}


def problems(tmp_path: Path, files: dict[str, str]) -> list[str]:
    src = package(tmp_path, files)
    _, found = docsite.check_api("pkgx", src, nav=False)
    return found


def test_a_documented_package_passes_and_each_name_has_one_home(tmp_path: Path) -> None:
    src = package(tmp_path, GOOD)
    pages, found = docsite.check_api("pkgx", src, nav=False)
    assert found == []
    api = docsite.public_api(docsite.load("pkgx", src))
    assert api.home == {"pkgx.core.Thing": ("pkgx.core", "Thing"), "pkgx.core.make": ("pkgx.core", "make")}
    # Rendered once, on the page of the module that defines them; the package links there.
    assert pages["reference/api/core.md"].count("members: ['Thing', 'make']") == 1
    assert "members: false" in pages["reference/api/index.md"]
    assert "Also importable from `pkgx`: [`Thing`][pkgx.core.Thing], [`make`][pkgx.core.make]." in (
        pages["reference/api/index.md"]
    )


def test_an_undocumented_public_name_fails(tmp_path: Path) -> None:
    files = dict(GOOD, **{"core.py": GOOD["core.py"].replace('"""A :class:`Thing` of ``size`` bytes."""', "")})
    assert problems(tmp_path, files) == ["pkgx.core.make: no docstring"]


def test_a_parameter_the_docstring_never_names_fails(tmp_path: Path) -> None:
    files = dict(GOOD, **{"core.py": GOOD["core.py"].replace("growing ``by`` bytes; raises ``ValueError`` for a negative ``by``", "growing")})
    assert problems(tmp_path, files) == ["pkgx.core.Thing.grow: the docstring does not say what by is"]


def test_a_role_naming_nothing_fails(tmp_path: Path) -> None:
    files = dict(GOOD, **{"core.py": GOOD["core.py"].replace(":func:`make`", ":func:`mkae`")})
    assert problems(tmp_path, files) == ["pkgx.core: :func:`mkae` names nothing in pkgx"]


def test_a_public_module_without_all_fails(tmp_path: Path) -> None:
    files = dict(GOOD, **{"extra.py": '"""More."""\n\ndef helper() -> None:\n    """Help."""\n'})
    assert problems(tmp_path, files) == ["pkgx.extra: a public module without __all__ (list its public names, or [])"]


@pytest.mark.parametrize(("role", "link"), [(":class:`Thing`", "[`Thing`][pkgx.core.Thing]"),
                                            (":meth:`Thing.grow`", "[`Thing.grow()`][pkgx.core.Thing.grow]"),
                                            (":class:`~pkgx.Thing`", "[`Thing`][pkgx.core.Thing]"),
                                            (":class:`pydantic.BaseModel`", "`pydantic.BaseModel`"),
                                            (":meth:`grow <pkgx.Thing.grow>`", "[`grow`][pkgx.core.Thing.grow]")])
def test_roles_become_links_to_where_the_object_is_documented(tmp_path: Path, role: str, link: str) -> None:
    src = package(tmp_path, GOOD)
    pkg = docsite.load("pkgx", src)
    anchors = docsite.public_api(pkg).anchors()
    found: list[str] = []
    assert docsite.convert_roles(pkg, anchors, pkg["core"], role, found) == link
    assert found == []


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("For example::\n\n    run()\n", "For example:\n\n    run()\n"),  # it showed "For example::"
        ("Like this:\n\n::\n\n    run()\n", "Like this:\n\n\n    run()\n"),
        ("A role :class:`X` and a mapping {a::b} stay.\n", "A role :class:`X` and a mapping {a::b} stay.\n"),
        ("Ends with a::\nno blank line after\n", "Ends with a::\nno blank line after\n"),
    ],
)
def test_rest_literal_block_markers_become_markdown(text: str, shown: str) -> None:
    assert docsite.convert_literal_blocks(text) == shown
