"""The command line's options and errors: --base-url for any OpenAI-compatible server, one error style for
click's errors and ours, a model spec with no model name, the version and the distribution's name."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import pytest

from loopctl import __version__
from loopctl.cli.report import CommandError
from loopctl.cli.run import build_client
from loopctl.message import Message, MessagePart, Role
from loopctl.session import Session
from loopctl.testing import FakeProviderServer, LocalServer
from loopctl.testing.server import RecordedRequest
from tests.cli.test_cli import SAMPLE, lines, loopctl

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "sample-project"
    shutil.copytree(SAMPLE, root)
    return root


def test_base_url_reaches_an_openai_compatible_server_with_no_key_and_resume_keeps_it(
    project: Path, tmp_path: Path
) -> None:
    reply = Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "read_file", {"path": "notes.txt"})])
    with FakeProviderServer([reply, "It is a notes file.", "Still a notes file."]) as server:
        url = server.openai_base_url
        session = tmp_path / "s.json"
        args = ["run", "What is notes.txt?", "--model", "openai:local-llama", "--base-url", server.openai_base_url,
                "--root", str(project), "--session", str(session)]  # fmt: skip
        done = loopctl(*args, cwd=tmp_path)  # no OPENAI_API_KEY in the environment
        assert (done.returncode, lines(done.stderr)) == (0, [
            "warning: stdin is not a terminal, so file changes will be refused; pass --yes to allow them"
        ])  # fmt: skip
        assert "It is a notes file." in done.stdout
        again = loopctl("run", "And now?", "--resume", str(session), cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert "Still a notes file." in again.stdout
    calls = [r for r in server.requests if r.api is not None]
    assert [(r.api, r.body["model"], r.path) for r in calls] == [
        ("openai-chat", "local-llama", "/v1/chat/completions")
    ] * 3
    # Before each run the server was asked its context (it answers none of the questions: a plain server).
    probes = [r.path for r in server.requests if r.api is None]
    assert probes == ["/v1/models", "/props", "/api/ps"] * 2
    assert [r.body["max_tokens"] for r in calls] == [4096] * 3  # a server that reports nothing: half of 8,192
    assert Session.load(session).metadata["cli"]["base_url"] == url


@pytest.mark.parametrize(
    ("local", "max_tokens"),
    [
        (LocalServer("llama.cpp", context_window=8192, model="local-llama"), 2048),
        (LocalServer("vllm", context_window=16_384, model="local-llama"), 4096),
        (LocalServer("ollama", context_window=131_072, model="local-llama"), 8192),
    ],
    ids=["llama.cpp", "vllm", "ollama"],
)
def test_run_asks_a_local_server_for_an_output_limit_that_fits_its_context(
    local: LocalServer, max_tokens: int, project: Path, tmp_path: Path
) -> None:
    # Issue 18, items 23 and 24: `loopctl run` sent no output limit (a local server generated for 164 s until
    # its context was full) and took every model's window to be 200,000 tokens. The window is learnt from the
    # server, and the limit (a quarter of it, at most 8,192) fits; --max-tokens still decides.
    with FakeProviderServer(["Hello.", "Hello again."], local=local) as server:
        base = ["run", "Say hello.", "--model", "openai:local-llama", "--base-url", server.openai_base_url,
                "--root", str(project), "--session"]  # fmt: skip
        done = loopctl(*base, str(tmp_path / "a.json"), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        done = loopctl(*base, str(tmp_path / "b.json"), "--max-tokens", "100", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    calls = [r for r in server.requests if r.api is not None]
    assert [r.body["max_tokens"] for r in calls] == [max_tokens, 100]
    assert all("max_completion_tokens" not in r.body for r in calls)  # Ollama reads only max_tokens


async def test_the_window_a_run_fills_is_the_models_less_a_replys_room() -> None:
    from loopctl.cli.run import model_sizes
    from loopctl.providers import from_string

    with FakeProviderServer([], local=LocalServer("llama.cpp", context_window=8192, model="m")) as server:
        client = from_string("openai:m", base_url=server.openai_base_url)
        assert await model_sizes(client, "openai:m", None, None) == (8192 - 2048, 2048)
        assert await model_sizes(client, "openai:m", 20_000, 1_000) == (19_000, 1_000)
        await client.aclose()
    client = from_string("openai:gpt-4o-mini", api_key="k")
    assert await model_sizes(client, "openai:gpt-4o-mini", None, None) == (128_000 - 16_384, 16_384)
    await client.aclose()
    client = from_string("anthropic:some-future-model", api_key="k")
    assert await model_sizes(client, "anthropic:some-future-model", None, None) == (200_000 - 8_192, 8_192)
    await client.aclose()


def test_base_url_does_not_apply_to_the_demo(project: Path, tmp_path: Path) -> None:
    done = loopctl("run", "x", "--model", "demo", "--base-url", "http://127.0.0.1:9", "--root", str(project),
                   cwd=tmp_path)  # fmt: skip
    assert (done.returncode, lines(done.stderr)) == (
        2,
        ["error: --base-url does not apply to --model demo (it starts its own server)"],
    )


@pytest.mark.parametrize("spec", ["anthropic:", "openai: ", "gemini:"])
def test_a_provider_with_no_model_name_says_so(spec: str, project: Path, tmp_path: Path) -> None:
    # It said "unknown model spec 'anthropic:'": the prefix is known, the model name is missing.
    done = loopctl("run", "x", "--model", spec, "--root", str(project), cwd=tmp_path)
    prefix = spec.split(":", maxsplit=1)[0]
    # The example is the provider's own (it was anthropic's for every provider).
    example = {"anthropic": "anthropic:claude-sonnet-4-5", "openai": "openai:gpt-5", "gemini": "gemini:gemini-2.5-flash"}
    assert (done.returncode, lines(done.stderr)) == (
        2,
        [f"error: --model {spec} has no model name: write {prefix}:MODEL (for example {example[prefix]})"],
    )


@pytest.mark.parametrize(
    ("spec", "base_url", "variables", "message"),
    [
        ("openai:llama3", "localhost:11434/v1", {}, "--base-url 'localhost:11434/v1' is not an http:// or https:// "
         "URL; did you mean 'http://localhost:11434/v1'?"),
        ("anthropic:claude", "ftp://gateway/v1", {}, "--base-url 'ftp://gateway/v1' is not an http:// or https:// URL"),
        ("openai:llama3", None, {"OPENAI_BASE_URL": "127.0.0.1:8000/v1"}, "OPENAI_BASE_URL '127.0.0.1:8000/v1' is not "
         "an http:// or https:// URL; did you mean 'http://127.0.0.1:8000/v1'?"),
        ("gemini:gemini-2.5-flash", None, {"GEMINI_BASE_URL": "http://"}, "GEMINI_BASE_URL 'http://' is not an "
         "http:// or https:// URL"),
    ],
)  # fmt: skip
def test_a_base_url_that_is_not_an_http_url_is_refused_before_any_request(
    spec: str, base_url: str | None, variables: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It went to the client: every request failed as "cannot reach the provider (Request URL is missing an
    # 'http://' or 'https://' protocol.)", retried four times, about 9 s before the run failed (exit 1).
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GEMINI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GEMINI_API_KEY", "k")

    async def client() -> None:
        async with build_client(spec, base_url):
            pass

    with pytest.raises(CommandError) as caught:
        asyncio.run(client())
    assert caught.value.message == message


@pytest.mark.parametrize(
    ("spec", "problem", "hint"),
    [
        ("dmeo", "unknown model spec 'dmeo'", "; did you mean 'demo'?"),
        ("demo2", "unknown model spec 'demo2'", "; did you mean 'demo'?"),
        ("Demo", "unknown model spec 'Demo'", "; did you mean 'demo'?"),  # not the library's word on "demo"
        ("mode", "unknown model spec 'mode'", ""),
    ],
)
def test_a_model_spec_close_to_demo_suggests_it(spec: str, problem: str, hint: str) -> None:
    # A typo of "demo" got the list of providers and no suggestion.
    async def client() -> None:
        async with build_client(spec):
            pass

    with pytest.raises(CommandError) as caught:
        asyncio.run(client())
    known = "openai:MODEL, openai-responses:MODEL, openai-responses-ws:MODEL, anthropic:MODEL, gemini:MODEL"
    assert caught.value.message == f'{problem}; expected one of {known}, or "demo"{hint}'


@pytest.mark.parametrize(
    ("args", "message", "where"),
    [
        (["run"], "Missing argument 'TASK'.", "loopctl run"),
        (
            ["run", "x", "--max-turns", "0"],
            "Invalid value for '--max-turns': 0 is not in the range x>=1.",
            "loopctl run",
        ),
        (["run", "x", "--frobnicate"], "No such option '--frobnicate'.", "loopctl run"),
        (["frob"], "No such command 'frob'.", "loopctl"),
    ],
)
def test_click_errors_come_in_our_style(args: list[str], message: str, where: str, tmp_path: Path) -> None:
    # click printed its usage banner and "Error: ..." while ours were one "error: ..." line: two styles.
    done = loopctl(*args, cwd=tmp_path)
    assert (done.returncode, done.stdout, lines(done.stderr)) == (2, "", [f"error: {message}", f"(see {where} --help)"])


def test_version_names_the_distribution(tmp_path: Path) -> None:
    done = loopctl("--version", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, f"loopctl {__version__} (pyloopctl)\n")


def test_the_installed_distribution_is_pyloopctl_and_its_version_is_the_packages() -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("pyloopctl")
    except PackageNotFoundError:
        pytest.skip("loopctl runs from a checkout without being installed")
    assert installed == __version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^name = "pyloopctl"', pyproject, re.MULTILINE)


def test_every_install_hint_names_our_distribution_not_the_stranger_on_pypi() -> None:
    # PyPI's "loopctl" is someone else's project: `pip install 'loopctl[all]'` installed a stranger's code.
    wrong = re.compile(r"pip install[^\n`]*?(?<![\w/-])loopctl(?:\[|\b(?![-./\w]))")
    # An extra named with the import name: docstrings said "extra ``loopctl[postgres]``". (A checkout's path,
    # "/path/to/loopctl[all]", is right.)
    extra = re.compile(r"(?<![\w/.-])loopctl\[")
    found = []
    for path in [ROOT / "README.md", ROOT / "make.py", ROOT / "pyproject.toml", *ROOT.glob("docs/**/*.md"),
                 *ROOT.glob("src/**/*.py"), *ROOT.glob("examples/**/*")]:  # fmt: skip
        if path.is_file():
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if wrong.search(line) or extra.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []
    assert "pip install 'pyloopctl[all]" in (ROOT / "README.md").read_text()


class HookWriter:
    """A model that writes a git hook, then answers."""

    def respond(self, request: RecordedRequest) -> Message:
        if len(request.body["messages"]) > 3:
            return Message.assistant("done")
        call = MessagePart.tool_call("c1", "write_file", {"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"})
        return Message.new(Role.ASSISTANT, [call])


@pytest.mark.parametrize("allow", [False, True])
def test_writes_under_git_need_allow_protected_writes_even_with_yes(
    allow: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from loopctl.cli import main

    project = tmp_path / "p"
    (project / ".git" / "hooks").mkdir(parents=True)
    monkeypatch.setattr("loopctl.testing.demo.DemoScript", HookWriter)
    monkeypatch.chdir(tmp_path)
    args = ["run", "go", "--model", "demo", "--root", str(project), "--yes", *(["--allow-protected-writes"] * allow)]
    done = CliRunner().invoke(main, args, env={"COLUMNS": "400"})
    assert done.exit_code == 0, done.output
    assert (project / ".git" / "hooks" / "pre-commit").exists() is allow
    if not allow:
        assert "  ✗ write_file(.git/hooks/pre-commit): Refused: '.git/hooks/pre-commit' is under .git, where a file can make tools run" in (
            done.output
        )


@pytest.mark.parametrize("command", [["mcp", "serve"], ["a2a", "serve"]])
def test_the_servers_store_help_says_no_store_means_memory(command: list[str]) -> None:
    # Their --store help said "(default: $LOOPCTL_STORE, else .loopctl/sessions.db)", as run's does, while
    # they keep the conversations in memory when no store is named (their own description says so).
    from click.testing import CliRunner

    from loopctl.cli import main

    done = CliRunner().invoke(main, [*command, "--help"], env={"COLUMNS": "400"})
    assert done.exit_code == 0
    text = " ".join(done.output.split())  # unwrapped
    assert text.split("--store STORE ", 1)[1].split(" -h, --help")[0] == (
        "The session store of the served agents' conversations: a SQLite file, or a PostgreSQL URL or DSN "
        "(default: $LOOPCTL_STORE, else none: kept in memory)."
    )


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        ([], 'loopctl run "..." --resume s-1'),
        (["--store", "my store.db"], "loopctl run \"...\" --resume s-1 --store 'my store.db'"),
        (["--store", "postgresql://app@db.internal/loopctl"], 'loopctl run "..." --resume s-1 --store postgresql://app@db.internal/loopctl'),
        (["--store", "postgresql://app:s3cret@db.internal/loopctl"], 'loopctl run "..." --resume s-1 --store STORE'),
        (["--store", "host=db password=s3cret dbname=x"], 'loopctl run "..." --resume s-1 --store STORE'),
    ],
)
def test_the_resume_hint_names_the_store_it_was_given(args: list[str], hint: str) -> None:
    import click
    from click.testing import CliRunner

    from loopctl.cli.options import resume_command, store_option

    @click.command()
    @store_option
    def cmd() -> None:
        click.echo(resume_command("s-1"))

    done = CliRunner().invoke(cmd, args, env={"LOOPCTL_STORE": "elsewhere.db"})  # the variable still applies
    assert (done.exit_code, done.output) == (0, hint + "\n")


def test_a_run_with_store_says_how_to_continue_it_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # It said "continue with: loopctl run "..." --resume ID", which then looked in .loopctl/sessions.db: "no session".
    from click.testing import CliRunner

    from loopctl.cli import main

    shutil.copytree(SAMPLE, tmp_path / "p")
    monkeypatch.chdir(tmp_path)
    args = ["run", "go", "--model", "demo", "--root", "p", "--store", "s.db"]
    done = CliRunner().invoke(main, args, env={"COLUMNS": "400", "LOOPCTL_DEMO_DELAY": "0"})
    assert done.exit_code == 0, done.output
    hint = " ".join(done.output.split()).split("continue with: ")[1]
    sid = hint.split("--resume ")[1].split()[0]
    assert hint == f'loopctl run "..." --resume {sid} --store s.db'
    again = CliRunner().invoke(main, ["run", "more", "--resume", sid, "--store", "s.db"], env={"LOOPCTL_DEMO_DELAY": "0"})
    assert again.exit_code == 0, again.output
