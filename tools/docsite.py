"""The documentation site: the API reference pages generated from the code, the checks that make the build
strict, and the griffe extension that turns the docstrings' Sphinx roles into links the build checks.

Run by ``python3 make.py docs`` (inside the project's venv: it needs griffe and Zensical):

    python tools/docsite.py build [--strict] [--site-dir DIR]

``build`` writes one reference page per public package or module of ``loopctl`` into ``docs/reference/api/``
(generated, not committed), checks the public API (below), then runs ``zensical build`` (``--strict``: every
warning fails the build: a broken link or anchor, a cross-reference that resolves to nothing).

The public API checks (each failure names the object and what to do):

- every public module (a dotted path with no part starting with ``_``) has ``__all__``, and every name in it
  exists;
- every public name has a docstring, and so do the public methods and properties of a public class;
- every parameter of a public function or method is named in its docstring (the class docstring counts for
  ``__init__``), so a docstring cannot skip what goes in;
- every public name is documented on exactly one reference page (its *home*: the module that defines it, or
  the nearest public package that exports it when it is defined in a private module), and every other public
  module that exports it links there;
- every reference page is in the site's navigation (``zensical.toml``).

Sphinx roles in docstrings (``:class:`~loopctl.engine.BareLoop```, ``:meth:`run```) become autorefs
(``[`BareLoop`][loopctl.engine.loop.BareLoop]``) resolved against the loaded package: relative names are
looked up from the object outwards, as Sphinx does; a role naming nothing fails the strict build.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOCS = ROOT / "docs"
API_DIR = DOCS / "reference" / "api"
CONFIG = ROOT / "zensical.toml"
PACKAGE = "loopctl"

# --- Sphinx roles ---------------------------------------------------------------------------------------------

_ROLE = re.compile(r":(?:py:)?(?P<role>class|mod|func|meth|attr|data|exc|obj|const):`(?P<target>[^`]+)`")


def _lookup(root: griffe.Module, path: str) -> griffe.Object | griffe.Alias | None:
    """The object at dotted ``path`` under the package ``root`` (``loopctl.x.y``), or None."""
    if path == root.path:
        return root
    if not path.startswith(root.path + "."):
        return None
    try:
        found: griffe.Object | griffe.Alias = root[path[len(root.path) + 1 :]]
        return found
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def resolve_role(root: griffe.Module, obj: griffe.Object, target: str) -> griffe.Object | None:
    """The object ``target`` names, seen from ``obj`` (Sphinx's order: the object, its class, its module, then
    the package tree), aliases followed to what they name; None when it names nothing in the package."""
    target = target.lstrip("~.!").removesuffix("()")
    candidates = [target]
    scope: griffe.Object | None = obj
    while scope is not None:
        candidates.append(f"{scope.path}.{target}")
        scope = scope.parent
    for path in candidates:
        found = _lookup(root, path)
        if found is not None:
            try:
                final = found.final_target if isinstance(found, griffe.Alias) else found
            except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                continue
            if isinstance(final, griffe.Object) and final.path.split(".")[0] == root.path:
                return final
    return None


def anchor_for(anchors: dict[str, str], obj: griffe.Object) -> str | None:
    """The anchor of the page section documenting ``obj``: its own, or its class's (an attribute named only in
    the class docstring); None for what no page shows (a private helper), which is then shown as code."""
    scope: griffe.Object | None = obj
    while scope is not None:
        if scope.path in anchors:
            return anchors[scope.path]
        if isinstance(scope, griffe.Module):
            return None
        scope = scope.parent
    return None


def convert_roles(
    root: griffe.Module, anchors: dict[str, str], obj: griffe.Object, text: str, problems: list[str]
) -> str:
    """``text`` with each Sphinx role replaced by a Markdown autoref (or code, when it names something outside
    the package, such as ``pydantic.BaseModel``); a role naming nothing of ours is reported in ``problems``."""

    def replace(m: re.Match[str]) -> str:
        raw = m.group("target")
        titled = re.fullmatch(r"(?P<title>.+?)\s*<(?P<target>[^>]+)>", raw)  # Sphinx's "title <target>"
        if titled:
            raw, shown = titled.group("target"), titled.group("title")
        else:
            shown = raw.lstrip("!")
            if shown.startswith("~"):
                shown = shown[1:].rsplit(".", 1)[-1]
            shown = shown.lstrip(".")
            if m.group("role") in ("func", "meth") and not shown.endswith("()"):
                shown += "()"
        found = resolve_role(root, obj, raw)
        if found is None:
            bare = raw.lstrip("~.!")
            if bare.split(".")[0] != root.path and "." in bare:
                return f"`{shown}`"  # another library's name: shown as code, not linked
            problems.append(f"{obj.path}: {m.group(0)} names nothing in {root.path}")
            return f"`{shown}`"
        anchor = anchor_for(anchors, found)
        return f"`{shown}`" if anchor is None else f"[`{shown}`][{anchor}]"

    return _ROLE.sub(replace, text)


# reST's literal-block marker: "text::" then a blank line and an indented block. Markdown makes the indented
# block code by itself; the marker becomes ":" ("text:"), or goes when it stands alone on its line.
_LITERAL_AFTER_TEXT = re.compile(r"(?<=\S)::(?=\n[ \t]*\n)")
_LITERAL_ALONE = re.compile(r"(?m)^[ \t]*::\n(?=[ \t]*\n)")


def convert_literal_blocks(text: str) -> str:
    """``text`` with reST's ``::`` literal-block markers written as Markdown reads them (Sphinx's rule: the
    marker after text shows as one colon, a marker alone on its line shows nothing)."""
    return _LITERAL_ALONE.sub("", _LITERAL_AFTER_TEXT.sub(":", text))


class SphinxRoles(griffe.Extension):
    """A griffe extension: once the package is loaded, every docstring's Sphinx roles become autorefs, and its
    ``::`` literal-block markers colons."""

    def __init__(self, package: str = PACKAGE) -> None:
        super().__init__()
        self.package = package
        self.problems: list[str] = []

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.path != self.package:
            return
        anchors = public_api(pkg).anchors()
        for obj in _all_objects(pkg):
            if obj.docstring is not None:
                text = convert_roles(pkg, anchors, obj, obj.docstring.value, self.problems)
                obj.docstring.value = convert_literal_blocks(text)


def _all_objects(module: griffe.Module) -> Iterator[griffe.Object]:
    """Every object defined in ``module`` and its submodules (no aliases)."""
    yield module
    for member in module.members.values():
        if member.is_alias:
            continue
        assert isinstance(member, griffe.Object)
        if isinstance(member, griffe.Module):
            yield from _all_objects(member)
        else:
            yield member
            if isinstance(member, griffe.Class):
                yield from _class_objects(member)


def _class_objects(cls: griffe.Class) -> Iterator[griffe.Object]:
    for member in cls.members.values():
        if not member.is_alias:
            assert isinstance(member, griffe.Object)
            yield member
            if isinstance(member, griffe.Class):
                yield from _class_objects(member)


# --- the public API -------------------------------------------------------------------------------------------


class FrozenDataclasses(griffe.Extension):
    """A griffe extension: ``loopctl._frozen.dataclass`` is read as ``dataclasses.dataclass``, as mypy reads it
    (the module says so under ``TYPE_CHECKING``: at run time it only makes the same classes more cheaply), so a
    class it decorates gets the dataclass label and its fields' ``__init__`` in the reference."""

    def on_class_node(self, *, node: Any, agent: Any, **kwargs: Any) -> None:
        module = agent.current.module
        if module.imports.get("dataclass") != "loopctl._frozen.dataclass":
            return
        module.imports["dataclass"] = "dataclasses.dataclass"
        alias = module.members.get("dataclass")
        if alias is not None and alias.is_alias and alias.target_path == "loopctl._frozen.dataclass":
            module.set_member(
                "dataclass",
                griffe.Alias(
                    "dataclass",
                    "dataclasses.dataclass",
                    lineno=alias.alias_lineno,
                    endlineno=alias.alias_endlineno,
                    parent=module,
                ),
            )


def load(package: str = PACKAGE, src: Path = SRC) -> griffe.Module:
    """The package as griffe sees it, docstrings as written (roles not converted)."""
    pkg = griffe.load(
        package,
        search_paths=[str(src)],
        docstring_parser="google",
        resolve_aliases=True,
        extensions=griffe.load_extensions(FrozenDataclasses()),
    )
    assert isinstance(pkg, griffe.Module)
    return pkg


def is_public_path(path: str) -> bool:
    return not any(part.startswith("_") for part in path.split("."))


def public_modules(pkg: griffe.Module) -> list[griffe.Module]:
    """Every public module and package of ``pkg``, ``pkg`` first, then in dotted-path order."""
    out: list[griffe.Module] = []

    def walk(m: griffe.Module) -> None:
        out.append(m)
        for sub in m.modules.values():
            if not sub.is_alias and is_public_path(sub.path) and sub.path == f"{m.path}.{sub.name}":
                assert isinstance(sub, griffe.Module)
                walk(sub)

    walk(pkg)
    return sorted(out, key=lambda m: (m.path != pkg.path, m.path))


@dataclass
class Api:
    """The public API: for each public module the names it exports, and for each exported object its home."""

    modules: list[griffe.Module]
    exports: dict[str, list[str]] = field(default_factory=dict)  # module path -> its __all__
    targets: dict[tuple[str, str], str] = field(default_factory=dict)  # (module, name) -> the object's path
    home: dict[str, tuple[str, str]] = field(default_factory=dict)  # object path -> (home module, name)
    objects: dict[str, griffe.Object] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def anchors(self) -> dict[str, str]:
        """Object path -> the anchor of its section on a reference page (modules, homed objects, and the
        documented public members of homed classes)."""
        out = {m.path: m.path for m in self.modules}
        for path, (module, name) in self.home.items():
            out[path] = f"{module}.{name}"
            obj = self.objects[path]
            if isinstance(obj, griffe.Class):
                _member_anchors(obj, out[path], out)
        return out


def _member_anchors(cls: griffe.Class, anchor: str, out: dict[str, str]) -> None:
    for name, member in cls.members.items():
        if member.is_alias or name.startswith("_") or not member.docstring:
            continue
        assert isinstance(member, griffe.Object)
        out[member.path] = f"{anchor}.{name}"
        if isinstance(member, griffe.Class):
            _member_anchors(member, out[member.path], out)


def public_api(pkg: griffe.Module) -> Api:
    api = Api(public_modules(pkg))
    exporters: dict[str, list[tuple[str, str]]] = {}
    for module in api.modules:
        if module.exports is None:
            api.problems.append(f"{module.path}: a public module without __all__ (list its public names, or [])")
            continue
        names = [n if isinstance(n, str) else n.name for n in module.exports]
        api.exports[module.path] = names
        for name in names:
            member = module.members.get(name)
            if member is None:
                api.problems.append(f"{module.path}.__all__ names {name!r}, which the module does not have")
                continue
            try:
                target = member.final_target if member.is_alias else member  # type: ignore[union-attr]
            except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                continue  # a name imported from another library (exported for convenience): not ours to document
            if isinstance(target, griffe.Module) or target.path.split(".")[0] != pkg.path:
                continue
            assert isinstance(target, griffe.Object)
            api.targets[(module.path, name)] = target.path
            api.objects[target.path] = target
            exporters.setdefault(target.path, []).append((module.path, name))
    for path, where in exporters.items():
        defining = path.rsplit(".", 1)[0]
        own = [w for w in where if w[0] == defining]
        if own:
            api.home[path] = own[0]
            continue
        # Defined in a private module (or not exported where defined): the nearest public package exporting it.
        ancestors = [w for w in where if defining.startswith(w[0] + ".")]
        api.home[path] = max(ancestors, key=lambda w: len(w[0])) if ancestors else min(where)
    return api


def _named(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text) is not None


def _public_members(cls: griffe.Class) -> Iterator[griffe.Object]:
    for name, member in cls.members.items():
        if member.is_alias or (name.startswith("_") and name != "__init__"):
            continue
        assert isinstance(member, griffe.Object)
        yield member


def check_docstrings(api: Api) -> list[str]:
    """The documentation each public object lacks: a docstring, or a parameter its docstring never names."""
    problems: list[str] = []
    for path, obj in sorted(api.objects.items()):
        if not obj.docstring or not obj.docstring.value.strip():
            if not (isinstance(obj, griffe.Attribute) and _is_literal(obj.value)):
                problems.append(f"{path}: no docstring")  # a constant's literal value says what it is
            continue
        funcs: list[tuple[griffe.Function, str]] = []
        if isinstance(obj, griffe.Function):
            funcs.append((obj, obj.docstring.value))
        elif isinstance(obj, griffe.Class):
            for member in _public_members(obj):
                if isinstance(member, griffe.Function):
                    own = member.docstring.value if member.docstring else ""
                    if member.name == "__init__":
                        # What a subclass passes on to its base is documented there (an error's ``message``).
                        inherited = "\n".join(b.docstring.value for b in _bases(obj) if b.docstring)
                        funcs.append((member, "\n".join((obj.docstring.value, own, inherited))))
                    elif not own.strip():
                        base_doc = _inherited_doc(obj, member.name)
                        if base_doc is None:
                            problems.append(f"{member.path}: no docstring")
                        else:
                            funcs.append((member, base_doc))
                    else:
                        funcs.append((member, own + "\n" + _twin_doc(obj, member, own)))
                elif isinstance(member, griffe.Attribute) and "property" in member.labels and not member.docstring:
                    problems.append(f"{member.path}: a property with no docstring")
        for func, doc in funcs:
            if any("click." in str(d.value) or ".command" in str(d.value) for d in func.decorators):
                continue  # a click command: its options are documented by the command-line reference
            params = [
                p.name
                for p in func.parameters
                if p.name not in ("self", "cls")
                and not p.name.startswith("_")
                # ``**kw`` of a subclass's constructor: the base class's keywords, passed on
                and not (func.name == "__init__" and p.kind is griffe.ParameterKind.var_keyword and _bases(obj))
            ]
            missing = [p for p in params if not _named(p, doc)]
            if missing and not (func.name == "__init__" and _is_generated_init(obj)):
                problems.append(f"{func.path}: the docstring does not say what {', '.join(missing)} is")
    return problems


def _is_literal(value: object) -> bool:
    """Whether an attribute's value is written as a literal string or number (``GEN_AI_REQUEST_MODEL =
    "gen_ai.request.model"``): shown on the page, it documents itself."""
    text = str(value) if value is not None else ""
    return bool(re.fullmatch(r"""(["']).*\1|-?\d[\d_.]*""", text))


def _twin_doc(cls: griffe.Class, method: griffe.Function, doc: str) -> str:
    """The docstring of the method whose twin ``method`` says it is (an async ``aload`` documented as
    ":meth:`load`, off the event loop"), when ``method`` takes none of its own parameters; else empty."""
    for name in re.findall(r":meth:`~?\.?(\w+)`", doc):
        twin = cls.members.get(name)
        if (
            isinstance(twin, griffe.Function)
            and twin.docstring
            and ({p.name for p in method.parameters} <= {p.name for p in twin.parameters})
        ):
            return twin.docstring.value
    return ""


def _bases(cls: griffe.Object) -> list[griffe.Class]:
    """The classes of this package ``cls`` derives from, nearest first (not ``cls`` itself)."""
    if not isinstance(cls, griffe.Class):
        return []
    try:
        return [b for b in cls.mro() if b.path.split(".")[0] == cls.path.split(".")[0]]
    except (ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return []


def _inherited_doc(cls: griffe.Class, name: str) -> str | None:
    """The docstring a base class of ``cls`` (ours) gives ``name``: an override keeps the base's meaning."""
    for base in _bases(cls):
        member = base.members.get(name)
        if member is not None and not member.is_alias and member.docstring:
            return str(member.docstring.value)
    return None


def _is_generated_init(obj: griffe.Object) -> bool:
    """A dataclass's or pydantic model's ``__init__``: its parameters are the fields, documented as fields."""
    if "dataclass" in obj.labels or "pydantic-model" in obj.labels:
        return True
    return isinstance(obj, griffe.Class) and any(
        str(b).split("[")[0].rsplit(".", 1)[-1] in ("BaseModel", "RootModel") for b in obj.bases
    )


# --- the pages ------------------------------------------------------------------------------------------------


def top_level(path: str) -> str:
    """The top-level package or module a dotted path belongs to (``loopctl.engine.loop`` -> ``loopctl.engine``)."""
    parts = path.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def page_of(top: str) -> str:
    """The reference page of a top-level package or module, relative to ``docs/``."""
    return "reference/api/index.md" if "." not in top else f"reference/api/{top.split('.', 1)[1]}.md"


def render_pages(api: Api) -> dict[str, str]:
    """The reference pages: path relative to ``docs/`` -> Markdown."""
    by_top: dict[str, list[griffe.Module]] = {}
    for module in api.modules:
        by_top.setdefault(top_level(module.path), []).append(module)
    homed: dict[str, list[str]] = {}
    for home_module, name in api.home.values():
        homed.setdefault(home_module, []).append(name)
    pages: dict[str, str] = {}
    for top, modules in by_top.items():
        lines = [
            "<!-- Generated by tools/docsite.py from the code's __all__ and docstrings: edit those, not this. -->",
            "",
        ]
        for module in modules:
            own = [n for n in api.exports.get(module.path, []) if n in homed.get(module.path, [])]
            elsewhere = [
                n for n in api.exports.get(module.path, []) if (module.path, n) in api.targets and n not in own
            ]
            lines += [
                f"::: {module.path}",
                "    options:",
                "      show_root_heading: true",
                f"      members: {own if own else 'false'}",
                f"      heading_level: {1 if module.path == top else 2}",
                "",
            ]
            if elsewhere:
                links = ", ".join(f"[`{n}`][{api.targets[(module.path, n)]}]" for n in elsewhere)
                lines += [f"Also importable from `{module.path}`: {links}.", ""]
        pages[page_of(top)] = "\n".join(lines)
    return pages


# --- the command line's reference ------------------------------------------------------------------------------

CLI_PAGE = "reference/cli.md"


def cli_reference() -> tuple[str, list[str]]:
    """The command line's reference page, generated from the click commands (every command, its usage, its
    arguments and options with their types, defaults and environment variables), and the options that have
    no help text (each a problem: an undocumented option)."""
    import click

    from loopctl.cli import main

    lines = [
        "# The `loopctl` command",
        "",
        "<!-- Generated by tools/docsite.py from the click commands: edit their help, not this. -->",
        "",
        "Every command and option, as `loopctl COMMAND --help` prints them; how to use them: [the command line]"
        "(../guides/cli.md).",
        "",
    ]
    problems: list[str] = []

    def cell(text: str) -> str:
        return " ".join(text.split()).replace("|", "\\|")

    def walk(cmd: click.Command, path: list[str], parent: click.Context | None) -> None:
        ctx = click.Context(cmd, info_name=path[-1], parent=parent)
        name = " ".join(path)
        lines.extend([f"## `{name}`" if len(path) > 1 else f"## `{name}` (the group)", ""])
        if cmd.help:
            lines.extend([click.unstyle(cmd.help).replace("\b\n", ""), ""])
        usage = " ".join([name, *cmd.collect_usage_pieces(ctx)])
        lines.extend(["```text", f"Usage: {usage}", "```", ""])
        rows = []
        for param in cmd.get_params(ctx):
            if param.name == "help":
                continue  # every command has it
            if isinstance(param, click.Argument):
                required = "required" if param.required else ""
                rows.append((f"`{param.human_readable_name}`", "argument", "", "", required))
                continue
            assert isinstance(param, click.Option)
            names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
            if param.is_flag:
                kind = "flag"
            elif isinstance(param.type, click.Choice):
                kind = " \\| ".join(f"`{c}`" for c in param.type.choices)
            else:
                kind = param.metavar or param.type.name.upper()
            default = param.default
            shown = ""
            if default not in (None, False, ()) and not callable(default) and repr(default) != "Sentinel.UNSET":
                shown = f"`{default}`"  # click 8.3 marks "no default" with a sentinel
            envvar = f"`{param.envvar}`" if isinstance(param.envvar, str) else ""
            help_text = cell(click.unstyle(param.help or ""))
            if not help_text:
                problems.append(f"{name} {param.opts[0]}: an option with no help text")
            rows.append((names, kind, shown, envvar, help_text))
        if rows:
            lines.extend(["| option | takes | default | environment | what it does |", "|---|---|---|---|---|"])
            lines.extend(f"| {' | '.join(r)} |" for r in rows)
            lines.append("")
        if isinstance(cmd, click.Group):
            for sub_name in sorted(cmd.list_commands(ctx)):
                sub = cmd.get_command(ctx, sub_name)
                if sub is not None and not sub.hidden:
                    walk(sub, [*path, sub_name], ctx)

    walk(main, ["loopctl"], None)
    return "\n".join(lines), problems


def nav_pages(config: Path = CONFIG) -> set[str]:
    """Every page path in the site's navigation."""
    nav = tomllib.loads(config.read_text())["project"]["nav"]
    found: set[str] = set()

    def walk(item: object) -> None:
        if isinstance(item, str):
            found.add(item)
        elif isinstance(item, dict):
            for v in item.values():
                walk(v)
        elif isinstance(item, list):
            for v in item:
                walk(v)

    walk(nav)
    return found


def check_nav(pages: dict[str, str]) -> list[str]:
    in_nav = nav_pages()
    problems = [f"{p}: a reference page not in the nav of zensical.toml" for p in pages if p not in in_nav]
    problems += [
        f"{p}: in the nav of zensical.toml but no such page"
        for p in sorted(in_nav - set(pages))
        if not (DOCS / p).exists()
    ]
    return problems


def check_api(package: str = PACKAGE, src: Path = SRC, *, nav: bool = True) -> tuple[dict[str, str], list[str]]:
    """The reference pages, and every problem with the public API's documentation (and, with ``nav``, with
    the site's navigation)."""
    pkg = load(package, src)
    api = public_api(pkg)
    docstrings = check_docstrings(api)  # on the docstrings as written, before the roles become links
    roles = SphinxRoles(package)
    roles.on_package(pkg=pkg, loader=None)  # type: ignore[arg-type]
    pages = render_pages(api)
    problems = api.problems + docstrings + roles.problems
    if nav:  # the site's own pages: the command line's reference, and the navigation
        pages[CLI_PAGE], cli_problems = cli_reference()
        problems += cli_problems + check_nav(pages)
    return pages, problems


def write_pages(pages: dict[str, str]) -> None:
    if API_DIR.exists():
        shutil.rmtree(API_DIR)
    (DOCS / CLI_PAGE).unlink(missing_ok=True)
    for rel, text in pages.items():
        path = DOCS / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def build(*, strict: bool, site_dir: Path | None = None) -> int:
    started = time.perf_counter()
    pages, problems = check_api()
    write_pages(pages)
    if problems:
        print(f"docs: {len(problems)} problems with the public API's documentation:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        if strict:
            return 1
    cmd = [str(Path(sys.executable).parent / "zensical"), "build", "--clean", "-f", str(CONFIG)]
    if strict:
        cmd.append("--strict")
    config = CONFIG
    if site_dir is not None:
        text = CONFIG.read_text().replace('site_dir = "site"', f"site_dir = {str(site_dir)!r}", 1)
        config = ROOT / ".zensical.site.toml"
        config.write_text(text)
        cmd[cmd.index(str(CONFIG))] = str(config)
    try:
        done = subprocess.run(cmd, cwd=ROOT, check=False)
    finally:
        if config != CONFIG:
            config.unlink()
    remote = remote_assets(site_dir or ROOT / "site") if done.returncode == 0 else []
    for found in remote:
        print(f"docs: {found}", file=sys.stderr)
    print(f"docs: built in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return done.returncode or (1 if remote and strict else 0)


_REMOTE = re.compile(
    r"""<(?:script|img|iframe)[^>]*\ssrc=["']?(?:https?:)?//|<link[^>]*rel=["']?(?:stylesheet|preload|icon)[^>]*"""
    r"""href=["']?(?:https?:)?//|@import\s+(?:url\()?["']?(?:https?:)?//|@font-face[^}]*url\(["']?(?:https?:)?//""",
    re.IGNORECASE,
)


def remote_assets(site: Path) -> list[str]:
    """The pages and stylesheets of the built site that load something from another host when viewed (a
    font, a script, a stylesheet): the site must work offline."""
    found = []
    for path in sorted([*site.glob("**/*.html"), *site.glob("**/*.css")]):
        m = _REMOTE.search(path.read_text(errors="replace"))
        if m:
            found.append(f"{path.relative_to(site)} loads from another host: {m.group(0)[:80]}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="generate the reference pages, check the API docs, build the site")
    b.add_argument("--strict", action="store_true", help="fail on any warning or documentation problem")
    b.add_argument("--site-dir", type=Path, help="where the site goes (default: site/)")
    sub.add_parser("check", help="only check the public API's documentation")
    args = parser.parse_args(argv)
    if args.command == "check":
        _, problems = check_api()
        for p in problems:
            print(p)
        return 1 if problems else 0
    return build(strict=args.strict, site_dir=args.site_dir)


if __name__ == "__main__":
    sys.exit(main())
