"""The command line the way a newcomer runs it: ``python -m loopctl run ... --model demo`` in a subprocess on
a fresh copy of the sample project, then ``--resume``, ``show`` and ``check`` on the session it saved; write
tools refused without ``--yes``; a missing key; Ctrl-C; and a model that tries to leave the project root."""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from loopctl.cli import DEMO_DELAY_VAR, main
from loopctl.engine import MachineState, OutcomeKind
from loopctl.message import Message, MessagePart, Role, TextPart, ToolResultPart, check_conversation
from loopctl.session import Session
from loopctl.testing import FakeProviderServer
from loopctl.testing.demo import DemoScript
from loopctl.testing.server import RecordedRequest
from tests.testing.test_demo import EXPECTED_TODO_MD

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "sample-project"
TASK = "Find the TODO comments in this project and write a summary of them to TODO.md."
KEY_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "GOOGLE_API_KEY",
            "GEMINI_API_KEY", "GEMINI_BASE_URL")  # fmt: skip


def env(**extra: str) -> dict[str, str]:
    """The environment of a fresh clone: ``src`` importable (loopctl is not installed), no keys, unbuffered
    output (so a test can read it as it comes), and a wide terminal (so rich does not wrap lines)."""
    out = {k: v for k, v in os.environ.items() if k not in KEY_VARS and k != DEMO_DELAY_VAR}
    out["PYTHONPATH"] = str(ROOT / "src")
    out["PYTHONUNBUFFERED"] = "1"
    out["COLUMNS"] = "400"
    out.update(extra)
    return out


def env_playing(tmp_path: Path, model: str, **extra: str) -> dict[str, str]:
    """:func:`env` for a child ``python -m loopctl run --model demo`` whose demo model is ``model``
    (``"module:Class"``, a :class:`~loopctl.testing.Responder` of these tests) instead of the demo's."""
    module, name = model.split(":")
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nimport loopctl.testing.demo as d\n"
        f"from {module} import {name}\nd.DemoScript = {name}\n"
    )
    out = env(**extra)
    out["PYTHONPATH"] = f"{site}{os.pathsep}{out['PYTHONPATH']}"
    return out


def loopctl(
    *args: str, cwd: Path, stdin: int | None = subprocess.DEVNULL, **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopctl", *args],
        check=False,
        cwd=cwd,
        env=env(**extra),
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh copy of ``examples/sample-project``."""
    root = tmp_path / "sample-project"
    shutil.copytree(SAMPLE, root)
    return root


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def shape(messages: Sequence[Message]) -> list[tuple[str, list[str]]]:
    return [(m.role.value, [p.type for p in m.parts]) for m in messages]


DEMO_SHAPE = [
    ("user", ["text"]),
    ("assistant", ["text", "tool_call"]),
    ("user", ["tool_result"]),
    ("assistant", ["text", "tool_call", "tool_call", "tool_call"]),
    ("user", ["tool_result", "tool_result", "tool_result"]),
    ("assistant", ["text", "tool_call"]),
    ("user", ["tool_result"]),
    ("assistant", ["text", "tool_call"]),
    ("user", ["tool_result"]),
    ("assistant", ["text"]),
]

DONE = (
    "Done. TODO.md lists the 5 TODO comments I found in config.toml, docs/usage.md, textutils.py and "
    "wordcount.py, grouped by file."
)


# --- the main job, then resume, show and check --------------------------------------------------------------


def test_the_demo_runs_end_to_end_then_resumes_and_the_session_checks_out(project: Path, tmp_path: Path) -> None:
    session = tmp_path / "demo-session.json"
    done = loopctl(
        "run", TASK, "--model", "demo", "--root", str(project), "--yes", "--session", str(session), cwd=tmp_path
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert (project / "TODO.md").read_text() == EXPECTED_TODO_MD
    out = lines(done.stdout)
    # The transcript: one line per tool call and per result, the model's text as it streamed, a summary.
    calls = [line for line in out if line.startswith("→ ")]
    assert calls == [
        "→ list_files(path=.)",
        "→ read_file(path=README.md)",
        "→ read_file(path=textutils.py)",
        "→ read_file(path=wordcount.py)",
        "→ search(pattern=TODO, path=.)",
        "→ write_file(path=TODO.md, content=# TODO⏎⏎5 TODO comments found in 4 file…)",
    ]
    # Each result names its call: the tool and its main argument.
    assert "  ✓ list_files(.): README.md⏎config.toml⏎docs/⏎notes.txt⏎textutils.py⏎wordcount.py  [6 lines]" in out
    assert "  ✓ write_file(TODO.md): created TODO.md (409 bytes)  [1 line]" in out
    assert [line for line in out if line.startswith("  ✗")] == []
    assert out[-4] == DONE
    assert out[-3] == "● completed"
    assert re.fullmatch(r"  5 turns · [\d,]+ tokens in \(0 cached\) · [\d,]+ out · \d+\.\d s", out[-2])
    assert out[-1] == f'  session saved to {session}; continue with: loopctl run "..." --resume {session}'

    saved = Session.load(session)
    assert (saved.model, saved.root) == ("demo", str(project.resolve()))
    assert saved.machine.state is MachineState.TERMINAL
    assert saved.machine.outcome.kind is OutcomeKind.COMPLETED
    history = list(saved.machine.history)
    assert check_conversation(history) == []
    assert shape(history) == DEMO_SHAPE
    assert history[0] == Message.user(TASK)
    assert history[-1] == Message.assistant(DONE)

    # --resume from elsewhere: the model, the root and the conversation come from the session.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = loopctl("run", "Anything left to do?", "--resume", str(session), "--yes", cwd=elsewhere)
    assert (again.returncode, again.stderr) == (0, "")
    resumed = list(Session.load(session).machine.history)
    assert resumed[: len(history)] == history  # the saved conversation continues unchanged
    assert resumed[len(history) :] == [Message.user("Anything left to do?"), Message.assistant(DONE)]
    assert lines(again.stdout)[-3:-1] == ["● completed", lines(again.stdout)[-2]]
    assert lines(again.stdout)[-2].startswith("  1 turn · ")
    assert not (elsewhere / ".loopctl").exists()  # saved back to the resumed file, not a new one

    checked = loopctl("check", str(session), cwd=tmp_path)
    assert (checked.returncode, checked.stdout) == (0, "12 messages, 0 problems\n")
    shown = loopctl("show", str(session), cwd=tmp_path)
    assert shown.returncode == 0
    shown_lines = lines(shown.stdout)
    # The session's facts first: the usage is the sum of both runs' (as their summaries said).
    counts = [
        re.search(r"· ([\d,]+) tokens in \(0 cached\) · ([\d,]+) out", lines(r.stdout)[-2]) for r in (done, again)
    ]
    tokens_in, tokens_out = (sum(int(m.group(g).replace(",", "")) for m in counts if m) for g in (1, 2))
    assert shown_lines[:6] == [
        "model    demo",
        f"root     {project.resolve()}",
        "outcome  completed",
        f"usage    {tokens_in:,} tokens in (0 cached) · {tokens_out:,} out",
        "messages 12",
        "",
    ]
    assert tokens_in > 1000 and tokens_out > 100
    shown_lines = shown_lines[6:]
    assert [line for line in shown_lines if line.startswith("── ")] == ["── user", "── assistant"] * 6
    assert shown_lines[:2] == ["── user", TASK]
    assert shown_lines[-2:] == ["── assistant", DONE]
    assert '[Tool: write_file with input: {"content":"# TODO\\n\\n5 TODO comments found' in shown.stdout


def test_with_no_stream_each_reply_shows_whole(project: Path, tmp_path: Path) -> None:
    done = loopctl("run", TASK, "--model", "demo", "--root", str(project), "--yes", "--no-stream", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    out = lines(done.stdout)
    assert out[0].startswith("I'm loopctl's scripted demo model (no API key needed).")
    assert out[-4:-2] == [DONE, "● completed"]
    assert (project / "TODO.md").read_text() == EXPECTED_TODO_MD


def test_the_demo_in_a_folder_without_todos_says_so_and_writes_nothing(tmp_path: Path) -> None:
    # The search's "no match for 'TODO'" was read as a TODO without a place: the demo wrote a TODO.md of one
    # item under "## (unknown file)".
    project = tmp_path / "tidy"
    project.mkdir()
    (project / "README.md").write_text("# tidy\n\nNothing left to do here.\n")
    (project / "app.py").write_text("print('done')\n")
    done = loopctl("run", TASK, "--model", "demo", "--root", str(project), "--yes", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    out = lines(done.stdout)
    assert [line for line in out if line.startswith("→ ")][-1] == "→ search(pattern=TODO, path=.)"
    assert "The search found no TODO comments, so there is nothing to write." in out
    assert out[-3] == "● completed"
    assert sorted(p.name for p in project.iterdir()) == ["README.md", "app.py"]


def test_check_reports_a_broken_conversation_with_exit_code_1(tmp_path: Path) -> None:
    from loopctl.message import save_conversation

    path = tmp_path / "broken.json"
    dangling = Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "read_file", {"path": "a"})])
    save_conversation(path, [Message.user("hi"), dangling, Message.user("and?"), Message.assistant("x")])
    checked = loopctl("check", str(path), cwd=tmp_path)
    assert checked.returncode == 1
    assert lines(checked.stdout) == [
        "messages[1].parts[0]: tool call 'c1' has no result before the next assistant message "
        "(messages[3]) [tool_call_answered_before_next_assistant]",
        "4 messages, 1 problem",
    ]


def test_python_dash_m_loopctl_is_the_loopctl_command(tmp_path: Path) -> None:
    shown = loopctl("--help", cwd=tmp_path)
    assert shown.returncode == 0
    assert shown.stdout.startswith("Usage: loopctl [OPTIONS] COMMAND [ARGS]...")
    assert {"run", "show", "check"} <= set(re.findall(r"^  (\w+)", shown.stdout, re.MULTILINE))


# --- approval -----------------------------------------------------------------------------------------------


def test_without_yes_and_no_terminal_writes_are_refused_naming_yes(project: Path, tmp_path: Path) -> None:
    session = tmp_path / "s.json"
    done = loopctl(
        "run", TASK, "--model", "demo", "--root", str(project), "--session", str(session), cwd=tmp_path,
        **{DEMO_DELAY_VAR: "0"},  # no need to watch it stream
    )  # fmt: skip
    assert (done.returncode, lines(done.stderr)) == (
        0,
        ["warning: stdin is not a terminal, so file changes will be refused; pass --yes to allow them"],
    )
    assert not (project / "TODO.md").exists()
    refusal = "write_file was not approved: the CLI cannot ask (stdin is not a terminal); run with --yes"
    out = lines(done.stdout)
    # The summary says the run completed without the change it wanted to make ("completed" alone hid it).
    assert out[-4:-1] == ["● completed · 1 file change refused", out[-3], f"  refused: {refusal}"]
    assert out[-3].startswith("  5 turns · ")
    assert f"  ✗ write_file(TODO.md): {refusal}  [1 line]" in out
    # Reading tools need no approval; the model reads the refusal and says so. (The parallel reads finish in
    # any order; each result line names the file it read.)
    done_calls = [line.split(":")[0] for line in out if line.startswith("  ✓")]
    assert [done_calls[0], sorted(done_calls[1:4]), done_calls[4]] == [
        "  ✓ list_files(.)",
        ["  ✓ read_file(README.md)", "  ✓ read_file(textutils.py)", "  ✓ read_file(wordcount.py)"],
        "  ✓ search(TODO)",
    ]
    assert out[-5] == f"I could not write TODO.md ({refusal}). It would have listed 5 TODO comments."
    history = list(Session.load(session).machine.history)
    assert check_conversation(history) == []
    (result,) = [p for p in history[-2].parts if isinstance(p, ToolResultPart)]
    assert (result.name, str(result.output), result.is_error) == ("write_file", refusal, True)


def on_a_terminal(
    args: Sequence[str], *, answer: bytes, cwd: Path, child_env: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """Run ``python -m loopctl ARGS`` on a pseudo-terminal, typing ``answer`` at the approval prompt.
    Returns the exit code and everything the terminal was sent, as it was sent."""
    import pty  # POSIX only
    import select

    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once, nothing else
        os.chdir(cwd)
        os.execve(sys.executable, [sys.executable, "-m", "loopctl", *args], child_env or env(**{DEMO_DELAY_VAR: "0"}))
    shown = b""
    answered = False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if not ready:
            continue
        try:
            data = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        shown += data
        if not answered and b"[y/N]: " in shown:
            os.write(fd, answer + b"\n")
            answered = True
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), shown


def plain(shown: bytes) -> str:
    """What a terminal shows as text: escape codes stripped, CR LF as LF."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode()).replace("\r\n", "\n")


def in_a_terminal(args: Sequence[str], *, answer: bytes, cwd: Path) -> tuple[int, str]:
    """:func:`on_a_terminal`, with the escape codes stripped from what it showed."""
    code, shown = on_a_terminal(args, answer=answer, cwd=cwd)
    return code, plain(shown)


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
@pytest.mark.parametrize("answer", [b"y", b"n"])
def test_in_a_terminal_a_write_asks_first(answer: bytes, project: Path, tmp_path: Path) -> None:
    session = tmp_path / "s.json"
    args = ["run", TASK, "--model", "demo", "--root", str(project), "--session", str(session)]
    code, shown = in_a_terminal(args, answer=answer, cwd=tmp_path)
    assert code == 0, shown
    assert "Allow write_file on TODO.md? [y/N]: " in shown
    if answer == b"y":
        assert (project / "TODO.md").read_text() == EXPECTED_TODO_MD
        assert DONE in shown
    else:
        assert not (project / "TODO.md").exists()
        assert "  ✗ write_file(TODO.md): The user did not allow write_file on TODO.md.  [1 line]" in shown
        assert "I could not write TODO.md (The user did not allow write_file on TODO.md.)." in shown
    assert check_conversation(list(Session.load(session).machine.history)) == []


# --- a missing key ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "variable", "url_variable"),
    [
        ("anthropic:claude-x", "ANTHROPIC_API_KEY", None),
        ("openai:gpt-4o", "OPENAI_API_KEY", None),
        ("openai-responses:gpt-5", "OPENAI_API_KEY", None),
        ("gemini:gemini-3-pro", "GOOGLE_API_KEY or GEMINI_API_KEY", "GEMINI_BASE_URL"),
    ],
)
def test_a_missing_key_exits_2_naming_the_variable_without_touching_the_network(
    spec: str, variable: str, url_variable: str | None, project: Path, tmp_path: Path
) -> None:
    # The provider's base URL points at a server that records any request (OPENAI_BASE_URL and
    # ANTHROPIC_BASE_URL lift the need for a key, so OpenAI and Anthropic go to their real defaults, which no
    # request reaches either).
    with FakeProviderServer([]) as server:
        extra = {url_variable: server.base_url} if url_variable else {}
        done = loopctl("run", "hello", "--model", spec, "--root", str(project), cwd=tmp_path, **extra)
    assert server.requests == []
    assert done.returncode == 2
    provider = spec.split(":", maxsplit=1)[0].replace("openai-responses", "openai")
    assert lines(done.stderr) == [
        f"error: {provider}: no API key: set the {variable} environment variable",
        'Or try the whole stack with no key: loopctl run "TASK" --model demo --root DIR',
    ]
    assert done.stdout == ""
    assert not (tmp_path / ".loopctl").exists()  # no session saved


def test_a_bad_model_spec_exits_2(project: Path, tmp_path: Path) -> None:
    done = loopctl("run", "hello", "--model", "gpt-4o", "--root", str(project), cwd=tmp_path)
    assert done.returncode == 2
    assert lines(done.stderr) == [
        "error: unknown model spec 'gpt-4o'; expected one of openai:MODEL, openai-responses:MODEL, "
        'openai-responses-ws:MODEL, anthropic:MODEL, gemini:MODEL, or "demo"; did you mean \'openai:gpt-4o\'?'
    ]


def test_a_bad_demo_delay_exits_2_naming_the_variable(project: Path, tmp_path: Path) -> None:
    done = loopctl("run", TASK, "--model", "demo", "--root", str(project), cwd=tmp_path, **{DEMO_DELAY_VAR: "fast"})
    assert done.returncode == 2
    assert "LOOPCTL_DEMO_DELAY must be a number of seconds from 0 to 60, got 'fast'" in done.stderr


# --- Ctrl-C -------------------------------------------------------------------------------------------------


READING = "Reading the files, slowly."


class LongReads(DemoScript):
    """The demo model, whose second reply (the reads) starts with the line :data:`READING`, then streams 600
    more lines (1,200 events, a minute at 0.05 s an event) before its calls: a Ctrl-C sent once that line
    shows lands while the reply streams, however late a loaded machine lets the test send it."""

    def respond(self, request: RecordedRequest) -> Message:
        message = super().respond(request)
        if "read_file" not in [call.name for call in message.tool_calls()]:
            return message
        lines = [TextPart(text=READING + "\n"), *(TextPart(text=f"still reading ({i})\n") for i in range(600))]
        return Message.new(Role.ASSISTANT, [*lines, *message.parts])


def run_until_reading(project: Path, tmp_path: Path, session: Path) -> tuple[subprocess.Popen[str], list[str]]:
    """``loopctl run --model demo`` in a process, its second reply streaming (:class:`LongReads`): the process
    and the lines it printed up to :data:`READING`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopctl", "run", TASK, "--model", "demo", "--root", str(project), "--yes",
         "--session", str(session)],
        cwd=tmp_path,
        env=env_playing(tmp_path, "tests.cli.test_cli:LongReads", **{DEMO_DELAY_VAR: "0.05"}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    seen: list[str] = []
    started = time.monotonic()
    for line in proc.stdout:
        seen.append(line.rstrip())
        if line.startswith(READING):
            break
        assert time.monotonic() - started < 120, seen  # a hang guard (process starts are slow on a loaded machine)
    assert seen[-1:] == [READING], seen  # the process ended before its second reply streamed
    return proc, seen


def test_ctrl_c_cancels_with_exit_130_and_saves_a_coherent_session(project: Path, tmp_path: Path) -> None:
    # Before: Ctrl-C was sent once the first tool's line showed, while the demo's second reply streamed (about a
    # second at 0.05 s an event); on a loaded machine it came after that reply had ended. Now it is sent once the
    # second reply's first line shows, and that reply streams for a minute.
    session = tmp_path / "s.json"
    proc, seen = run_until_reading(project, tmp_path, session)
    proc.send_signal(signal.SIGINT)  # the second model call is streaming now
    rest, err = proc.communicate(timeout=30)
    out = seen + lines(rest)
    assert (proc.returncode, err) == (130, "")
    assert "⏹ cancelling… (Ctrl-C again to stop at once)" in out
    assert "● cancelled" in out
    assert not (project / "TODO.md").exists()
    saved = Session.load(session)
    assert saved.machine.outcome.kind is OutcomeKind.CANCELLED
    history = list(saved.machine.history)
    assert check_conversation(history) == []
    # The finished exchange is kept; the reply that was streaming when Ctrl-C came is dropped.
    assert shape(history) == DEMO_SHAPE[:3]

    # The cancelled session resumes and finishes the task.
    done = loopctl("run", "Please go on.", "--resume", str(session), "--yes", cwd=tmp_path, **{DEMO_DELAY_VAR: "0"})
    assert (done.returncode, done.stderr) == (0, "")
    assert (project / "TODO.md").read_text() == EXPECTED_TODO_MD
    finished = list(Session.load(session).machine.history)
    assert check_conversation(finished) == []
    assert finished[:3] == history


# --- a model that tries to leave the root -------------------------------------------------------------------


class Escaper:
    """A model that reads and writes outside the project (``..``, an absolute path, a symlink out of it),
    then answers."""

    def __init__(self, outside: Path) -> None:
        self.outside = outside

    def respond(self, request: RecordedRequest) -> Message:
        if len(request.body["messages"]) > 3:  # system, user, and the first exchange
            return Message.assistant("I stayed inside.")
        attempts = [
            ("read_file", {"path": "../secret.txt"}),
            ("read_file", {"path": str(self.outside / "secret.txt")}),
            ("read_file", {"path": "link/secret.txt"}),
            ("write_file", {"path": "../escaped.txt", "content": "out"}),
            ("edit_file", {"path": "link/secret.txt", "old": "TOP", "new": "NO"}),
            ("list_files", {"path": ".."}),
            ("search", {"pattern": "SECRET", "path": "link"}),
        ]
        return Message.new(
            Role.ASSISTANT, [MessagePart.tool_call(f"call_{i}", name, args) for i, (name, args) in enumerate(attempts)]
        )


def test_a_path_that_escapes_the_root_is_refused(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In process: the demo's server and client as `loopctl run --model demo` builds them, playing a custom
    # script instead of the demo's.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET")
    (project / "link").symlink_to(outside, target_is_directory=True)
    monkeypatch.setattr("loopctl.testing.demo.DemoScript", lambda: Escaper(outside))
    monkeypatch.chdir(tmp_path)
    session = tmp_path / "s.json"
    args = ["run", "Look around.", "--model", "demo", "--root", str(project), "--yes", "--session", str(session)]
    done = CliRunner().invoke(main, args, env={"COLUMNS": "400"})
    assert done.exit_code == 0, done.output
    assert (outside / "secret.txt").read_text() == "TOP SECRET"
    assert not (tmp_path / "escaped.txt").exists()
    assert "TOP SECRET" not in done.output
    history = list(Session.load(session).machine.history)
    assert check_conversation(history) == []
    results = [(r.name, str(r.output), r.is_error) for r in history[2].parts if isinstance(r, ToolResultPart)]
    only = "is outside the project root; only paths inside it are allowed"
    assert results == [
        ("read_file", f"Refused: '../secret.txt' {only}", True),
        ("read_file", f"Refused: '{outside / 'secret.txt'}' {only}", True),
        ("read_file", f"Refused: 'link/secret.txt' {only}", True),
        ("write_file", f"Refused: '../escaped.txt' {only}", True),
        ("edit_file", f"Refused: 'link/secret.txt' {only}", True),
        ("list_files", f"Refused: '..' {only}", True),
        ("search", f"Refused: 'link' {only}", True),
    ]
    # The transcript shows each refusal as it finishes (parallel calls: in any order), cut to 100 characters.
    refused = sorted(line for line in lines(done.output) if line.startswith("  ✗"))
    main_args = [next(iter(c.input.values())) for c in history[1].tool_calls()]
    main_args = [a if len(a) <= 40 else "…" + a[-39:] for a in main_args]  # a long path keeps its file name
    assert refused == sorted(
        f"  ✗ {name}({arg}): {text if len(text) <= 100 else text[:99] + '…'}  [1 line]"
        for (name, text, _), arg in zip(results, main_args, strict=True)
    )
    assert history[-1] == Message.assistant("I stayed inside.")


# --- bad sessions and paths ----------------------------------------------------------------------------------


def test_resuming_a_session_whose_root_folder_is_gone_is_a_clear_error(project: Path, tmp_path: Path) -> None:
    # FileTools raised FileNotFoundError out of the command: a traceback.
    session = tmp_path / "s.json"
    done = loopctl("run", TASK, "--model", "demo", "--root", str(project), "--yes", "--session", str(session),
                   cwd=tmp_path, **{DEMO_DELAY_VAR: "0"})  # fmt: skip
    assert done.returncode == 0
    shutil.rmtree(project)
    again = loopctl("run", "more", "--resume", str(session), cwd=tmp_path)
    assert again.returncode == 2
    assert lines(again.stderr) == [
        f"error: the root folder {str(project)!r} cannot be used (No such file or directory); pass --root"
    ]


def test_a_session_path_that_cannot_be_written_is_refused_before_the_run(project: Path, tmp_path: Path) -> None:
    # The run went ahead, and saving at the end raised a traceback: the whole run was lost.
    (tmp_path / "a-file").write_text("x")
    session = tmp_path / "a-file" / "s.json"
    done = loopctl("run", TASK, "--model", "demo", "--root", str(project), "--yes", "--session", str(session),
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2
    assert lines(done.stderr) == [f"error: cannot save the session to {str(session)!r} (File exists: {session.parent})"]
    assert done.stdout == ""  # no model call was made
    assert not (project / "TODO.md").exists()


def test_a_second_ctrl_c_stops_at_once_with_exit_130_and_still_saves_a_coherent_session(
    project: Path, tmp_path: Path
) -> None:
    # It exited 1 with click's "Aborted!", and the session file kept the last autosave (a run stopped in the
    # middle of its tools), not the salvaged conversation.
    session = tmp_path / "s.json"
    proc, _ = run_until_reading(project, tmp_path, session)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    # The second press stops the run at once; when the first had already stopped it and the session is saved,
    # it changes nothing, or (pressed while the process shuts down) ends it as SIGINT does, which a shell
    # also reports as 130.
    assert (proc.returncode, lines(err)) in [
        (130, [f"⏹ stopped; the session is saved to {session}"]),
        (130, []),
        (-signal.SIGINT, []),
    ], f"exit {proc.returncode}, stderr:\n{err}"  # the whole traceback, where the comparison cuts it short
    saved = Session.load(session)
    assert saved.machine.state is MachineState.TERMINAL
    assert check_conversation(list(saved.machine.history)) == []


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("command", ["show", "check"])
def test_show_and_check_of_a_file_that_cannot_be_read_is_a_clear_error(command: str, tmp_path: Path) -> None:
    # /proc/self/mem exists and is a file, and reading it fails with EIO: an OSError traceback.
    done = loopctl(command, "/proc/self/mem", cwd=tmp_path)
    assert done.returncode == 2
    assert lines(done.stderr) == ["error: /proc/self/mem: cannot read the file (Input/output error)"]


def test_a_missing_provider_sdk_is_a_one_line_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import loopctl.providers

    def no_sdk(spec: str, **options: object) -> None:
        raise ImportError("the anthropic SDK is not installed: pip install 'pyloopctl[anthropic]'")

    monkeypatch.setattr(loopctl.providers, "from_string", no_sdk)  # where the CLI imports it from
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", "x", "--model", "anthropic:claude", "--root", str(tmp_path)])
    assert result.exit_code == 2
    assert "error: the anthropic SDK is not installed: pip install 'pyloopctl[anthropic]'" in result.output
    assert "Traceback" not in result.output


class Backtracker:
    """A model that searches with a pattern that backtracks catastrophically on every line."""

    def respond(self, request: RecordedRequest) -> Message:
        if len(request.body["messages"]) > 3:
            return Message.assistant("gave up")
        return Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "search", {"pattern": "(a|aa)+$"})])


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) the process ``pid`` has used so far, from Linux's ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_ctrl_c_stops_a_run_stuck_in_a_catastrophic_search(tmp_path: Path) -> None:
    # re held the GIL while it backtracked: the event loop froze, Ctrl-C could not fire, and the process went
    # on for as long as the search did.
    project = tmp_path / "p"
    project.mkdir()
    (project / "a.txt").write_text(("a" * 26 + "!\n") * 200)  # about 40 s of matching, 0.2 s a line
    session = tmp_path / "s.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopctl", "run", "go", "--model", "demo", "--root", str(project), "--session",
         str(session)],
        cwd=tmp_path, env=env_playing(tmp_path, "tests.cli.test_cli:Backtracker", **{DEMO_DELAY_VAR: "0"}),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    for line in proc.stdout:
        if line.startswith("→ search"):
            break
    # Well inside the search: it has matched for 0.5 s of CPU (a fixed 0.5 s of wall time was not, on a loaded
    # machine). Read in CPU time too, what it used after Ctrl-C: a loaded machine stretches the wall time.
    searching = cpu_seconds(proc.pid)
    deadline = time.monotonic() + 60
    while (sent := cpu_seconds(proc.pid)) - searching < 0.5:
        assert time.monotonic() < deadline and proc.poll() is None, "the search did not run"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    try:
        rest, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()  # still matching after a minute: not left running (nothing once it has ended)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = used.ru_utime + used.ru_stime - children.ru_utime - children.ru_stime
    assert total - sent < 10  # not the 40 s of matching
    assert proc.returncode == 130
    assert "● cancelled" in rest
    saved = Session.load(session).machine
    assert saved.outcome.kind is OutcomeKind.CANCELLED
    assert check_conversation(list(saved.history)) == []
