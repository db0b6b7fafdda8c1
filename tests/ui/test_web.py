"""``loopctl web`` over HTTP: the first line is the URL, the page's security (Host check, the token and Origin
check on every POST, the CSP, no inline script), a non-local bind refused without a token, the chat as a UI
message stream, fork / export / search, and a run paused by another process approved from the page's API."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.ui.conftest import WebServer, sample_project


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    base = tmp_path_factory.mktemp("web")
    s = WebServer(sample_project(base / "project"), base / "sessions.db", "--model", "demo")
    yield s
    s.stop()


def page_token(server: WebServer) -> str:
    html = httpx.get(server.url).text
    found = re.search(r'<meta name="loopctl-token" content="([^"]+)">', html)
    assert found is not None, html
    return found.group(1)


def chat(server: WebServer, session: str, text: str, **headers: str) -> httpx.Response:
    body = {"id": session, "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}]}
    return httpx.post(server.url + "api/chat", json=body, headers=headers, timeout=120)


def chunks(response: httpx.Response) -> list[Any]:
    out = []
    for line in response.text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(orjson.loads(line[6:]))
    return out


def test_the_page_and_its_headers(server: WebServer) -> None:
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", server.url)
    r = httpx.get(server.url)
    assert r.status_code == 200
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
    # Every script is a file of the page's own (no inline script for the CSP to allow), and so is every style.
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", r.text, re.S)
    assert scripts and all('src="/assets/' in attrs and not body.strip() for attrs, body in scripts)
    assert "<style" not in r.text and " style=" not in r.text
    for asset in re.findall(r'(?:src|href)="(/assets/[^"]+)"', r.text):
        got = httpx.get(server.url.rstrip("/") + asset)
        assert got.status_code == 200 and got.headers["content-security-policy"] == csp


def test_dns_rebinding_host_is_refused(server: WebServer) -> None:
    port = server.url.rsplit(":", 1)[1].strip("/")
    r = httpx.get(server.url + "api/sessions", headers={"Host": f"attacker.example:{port}"})
    assert r.status_code == 421 and "attacker.example" in r.text
    assert httpx.get(server.url + "api/sessions", headers={"Host": f"localhost:{port}"}).status_code == 200


def test_cross_site_post_is_refused(server: WebServer) -> None:
    token = page_token(server)
    before = httpx.get(server.url + "api/sessions").json()
    no_token = chat(server, "csrf-1", "hello")
    assert no_token.status_code == 403 and "X-Loopctl-Token" in no_token.text
    wrong_origin = chat(server, "csrf-2", "hello", **{"X-Loopctl-Token": token, "Origin": "http://attacker.example"})
    assert wrong_origin.status_code == 403 and "cross-origin" in wrong_origin.text
    cross_site = chat(server, "csrf-3", "hello", **{"X-Loopctl-Token": token, "Sec-Fetch-Site": "cross-site"})
    assert cross_site.status_code == 403
    fork = httpx.post(server.url + f"api/sessions/{before[0]['id'] if before else 'x'}/fork", json={})
    assert fork.status_code == 403
    assert httpx.get(server.url + "api/sessions").json() == before  # nothing was created or forked


def test_chat_fork_export_and_search(server: WebServer, tmp_path: Path) -> None:
    token = page_token(server)
    r = chat(server, "web-api-1", "Summarize the TODOs.", **{"X-Loopctl-Token": token, "Origin": server.url[:-1]})
    assert r.status_code == 200 and r.headers["x-vercel-ai-ui-message-stream"] == "v1"
    seen = chunks(r)
    kinds = [c["type"] for c in seen]
    assert kinds[0] == "start" and kinds[-1] == "finish" and "tool-approval-request" in kinds
    # The demo writes TODO.md: the page is asked, and shown the diff of the change.
    [ask] = [c for c in seen if c["type"] == "tool-approval-request"]
    detail = httpx.get(server.url + "api/sessions/web-api-1").json()
    assert detail["outcome"] == "awaiting_approval"
    [pending] = detail["pending"]
    assert pending["id"] == ask["approvalId"] and pending["name"] == "write_file"
    assert pending["preview"]["path"] == "TODO.md" and "+## wordcount.py" in pending["preview"]["diff"]
    assert [t["turn"] for t in detail["runs"][0]["turns"]] == [1, 2, 3, 4]
    assert detail["traces"] and detail["traces"][0]["spans"][0]["name"].startswith("invoke_agent")
    # Search finds it by the text of its messages, and not by text it does not hold.
    hits = httpx.get(server.url + "api/sessions", params={"q": "summarize the todo"}).json()
    assert [h["id"] for h in hits] == ["web-api-1"]
    assert httpx.get(server.url + "api/sessions", params={"q": "no such words anywhere"}).json() == []
    # Fork at the first reply: a new session holding the first two messages, in the first one's fork tree.
    node = detail["messages"][1]["node"]
    forked = httpx.post(
        server.url + "api/sessions/web-api-1/fork", json={"at": node}, headers={"X-Loopctl-Token": token}
    ).json()
    child = httpx.get(server.url + f"api/sessions/{forked['id']}").json()
    # (The reply's call has no result there: the fork answers it, saying the session was forked.)
    assert len(child["messages"]) == 3 and child["metadata"]["loopctl.fork"]["index"] == 1
    assert child["messages"][2]["parts"][0]["output"] == "Not run: the session was forked here."
    assert child["tree"]["id"] == "web-api-1" and [c["id"] for c in child["tree"]["children"]] == [forked["id"]]
    # Export: a session file the CLI reads.
    exported = httpx.get(server.url + "api/sessions/web-api-1/export")
    assert "attachment" in exported.headers["content-disposition"]
    path = tmp_path / "s.json"
    path.write_bytes(exported.content)
    shown = subprocess.run(
        [sys.executable, "-m", "loopctl", "show", str(path)], capture_output=True, text=True, check=False
    )
    assert shown.returncode == 0 and "Summarize the TODOs." in shown.stdout


def test_a_run_paused_by_another_process_is_approved_here(server: WebServer) -> None:
    """A run paused on a write in this (test) process, stored in the server's store, is decided from the page's
    API: the server runs the approved call and goes on."""
    from loopctl import Agent
    from loopctl.cli.web import WebPermission
    from loopctl.message import Message, MessagePart, Role
    from loopctl.store import SQLiteStore
    from loopctl.testing import ScriptedClient
    from loopctl.tools.files import FileTools

    files = FileTools(server.root)
    write = Message.new(
        Role.ASSISTANT, [MessagePart.tool_call("w1", "write_file", {"path": "NOTE.md", "content": "hi\n"})]
    )
    agent = Agent(ScriptedClient([write]), tools=list(files), permission=WebPermission(files))
    with SQLiteStore(server.store) as store:
        run = agent.session("elsewhere-1", store=store).run_sync("Write a note.")
    assert run.outcome.kind.value == "awaiting_approval" and not (server.root / "NOTE.md").exists()
    detail = httpx.get(server.url + "api/sessions/elsewhere-1").json()
    assert [p["id"] for p in detail["pending"]] == ["w1"] and detail["pending"][0]["preview"]["action"] == "create"
    token = page_token(server)
    r = httpx.post(
        server.url + "api/sessions/elsewhere-1/approve",
        json={"decisions": {"w1": {"decision": "approve"}}},
        headers={"X-Loopctl-Token": token},
        timeout=120,
    )
    assert r.status_code == 200
    outputs = [c for c in chunks(r) if c["type"] == "tool-output-available" and c["toolCallId"] == "w1"]
    assert outputs and "created NOTE.md" in outputs[0]["output"]
    assert (server.root / "NOTE.md").read_text() == "hi\n"
    # A decision for a call that is not pending any more is refused before anything runs.
    again = httpx.post(
        server.url + "api/sessions/elsewhere-1/approve",
        json={"decisions": {"w1": {"decision": "approve"}}},
        headers={"X-Loopctl-Token": token},
    )
    assert again.status_code in (400, 409)


def run_web(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "loopctl", "web", "--model", "demo", *args],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_a_non_local_bind_needs_a_flag_and_a_token(tmp_path: Path) -> None:
    refused = run_web("--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == 2 and "--allow-remote" in refused.stderr and refused.stdout == ""
    no_token = run_web("--host", "0.0.0.0", "--port", "0", "--allow-remote", env={"LOOPCTL_WEB_TOKEN": ""})
    assert no_token.returncode == 2 and "token" in no_token.stderr
    short = run_web("--host", "0.0.0.0", "--port", "0", "--allow-remote", "--token", "short")
    assert short.returncode == 2


def test_a_remote_bind_with_a_token_asks_for_it(tmp_path: Path) -> None:
    s = WebServer(
        sample_project(tmp_path / "p"),
        tmp_path / "s.db",
        "--model",
        "demo",
        "--host",
        "0.0.0.0",
        "--allow-remote",
        "--token",
        "a-long-enough-secret-token",
    )
    try:
        assert s.url.endswith("/#token=a-long-enough-secret-token")
        base = s.url.split("#")[0].replace("0.0.0.0", "127.0.0.1")
        assert httpx.get(base + "api/info").status_code == 401
        auth = {"Authorization": "Bearer a-long-enough-secret-token"}
        ok = httpx.get(base + "api/info", headers=auth)
        assert ok.status_code == 200 and ok.json()["model"] == "demo"
        # Reached by any name (the machine's address on the network), the token is what guards the API.
        port = base.rsplit(":", 1)[1].strip("/")
        assert httpx.get(base + "api/info", headers={**auth, "Host": f"my-machine.lan:{port}"}).status_code == 200
        assert httpx.get(base + "api/info", headers={"Host": f"my-machine.lan:{port}"}).status_code == 401
    finally:
        s.stop()


def test_deny_and_modify_from_the_page(server: WebServer) -> None:
    """The page's other decisions: a write modified (it runs with the page's input) and one denied (it does not
    run; the model reads the reason)."""
    from loopctl import Agent
    from loopctl.cli.web import WebPermission
    from loopctl.message import Message, MessagePart, Role
    from loopctl.store import SQLiteStore
    from loopctl.testing import ScriptedClient
    from loopctl.tools.files import FileTools

    files = FileTools(server.root)
    calls = [
        MessagePart.tool_call("m1", "write_file", {"path": "A.md", "content": "model's\n"}),
        MessagePart.tool_call("m2", "write_file", {"path": "B.md", "content": "model's\n"}),
    ]
    agent = Agent(
        ScriptedClient([Message.new(Role.ASSISTANT, calls)]), tools=list(files), permission=WebPermission(files)
    )
    with SQLiteStore(server.store) as store:
        agent.session("elsewhere-2", store=store).run_sync("Write two notes.")
    token = page_token(server)
    decisions = {
        "m1": {"decision": "modify", "input": {"path": "A.md", "content": "the page's\n"}},
        "m2": {"decision": "deny", "reason": "not B"},
    }
    r = httpx.post(
        server.url + "api/sessions/elsewhere-2/approve",
        json={"decisions": decisions},
        headers={"X-Loopctl-Token": token},
        timeout=120,
    )
    assert r.status_code == 200
    assert (server.root / "A.md").read_text() == "the page's\n" and not (server.root / "B.md").exists()
    stored = httpx.get(server.url + "api/sessions/elsewhere-2").json()["messages"]
    results = {p["callId"]: p for m in stored for p in m["parts"] if p["type"] == "tool-result"}
    assert results["m2"]["isError"] and results["m2"]["output"] == "not B"
    assert not results["m1"]["isError"]
    bad = httpx.post(
        server.url + "api/sessions/elsewhere-2/approve",
        json={"decisions": {"m1": {"decision": "maybe"}}},
        headers={"X-Loopctl-Token": token},
    )
    assert bad.status_code == 400 and "approved" in bad.json()["error"]


PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"


def test_an_image_in_a_prompt_is_stored_and_shown(server: WebServer) -> None:
    token = page_token(server)
    parts = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "file", "mediaType": "image/png", "url": f"data:image/png;base64,{PIXEL}"},
    ]
    body = {"id": "web-image-1", "messages": [{"id": "u1", "role": "user", "parts": parts}]}
    r = httpx.post(server.url + "api/chat", json=body, headers={"X-Loopctl-Token": token}, timeout=120)
    assert r.status_code == 200
    first = httpx.get(server.url + "api/sessions/web-image-1").json()["messages"][0]
    assert [p["type"] for p in first["parts"]] == ["text", "image"]
    assert first["parts"][1]["url"] == f"data:image/png;base64,{PIXEL}"
    # A URL the server would have to fetch is refused, before anything runs.
    parts[1]["url"] = "http://127.0.0.1:9/cat.png"
    body = {"id": "web-image-2", "messages": [{"id": "u1", "role": "user", "parts": parts}]}
    refused = httpx.post(server.url + "api/chat", json=body, headers={"X-Loopctl-Token": token})
    assert refused.status_code == 400 and "data: URLs" in refused.json()["error"]


def test_a_huge_body_is_refused_before_it_is_read(server: WebServer) -> None:
    """A POST larger than the app reads (32 MiB) is answered 413 from its Content-Length, and a chunked one as it
    passes the limit: the server never holds it whole; nothing is stored."""
    limit = 32 * 1024 * 1024  # loopctl.ui._common.MAX_BODY_BYTES
    token = page_token(server)
    before = httpx.get(server.url + "api/sessions").json()
    big = b'{"id": "huge-1", "messages": [' + b" " * limit + b"]}"
    # Three times: the server closed the connection while the body still arrived, which reset it and lost the
    # answer for the client still sending (about one try in three: "peer closed connection without sending
    # complete message body"); it reads and drops the rest first now (server_limits.LINGER_SECONDS).
    for _ in range(3):
        r = httpx.post(server.url + "api/chat", content=big, headers={"X-Loopctl-Token": token}, timeout=60)
        assert r.status_code == 413 and str(limit) in r.json()["error"]

    def chunked() -> Iterator[bytes]:
        yield b'{"decisions": {"x": '
        for _ in range(limit // 1_000_000 + 2):
            yield b" " * 1_000_000

    r = httpx.post(
        server.url + "api/sessions/huge-2/approve", content=chunked(), headers={"X-Loopctl-Token": token}, timeout=60
    )
    assert r.status_code == 413
    assert httpx.get(server.url + "api/sessions").json() == before


def test_a_stale_decision_does_not_answer_a_later_wait_with_the_same_call_id(tmp_path: Path) -> None:
    """Call ids can repeat (a scripted or local model's ``call_0``): a decision the page made on what it read of one
    wait (``head``: the session's head then) is refused (409) once the session moved on and waits again, even on
    a call of the same id; nothing runs. A decision with the current head goes through."""
    import asyncio

    from loopctl import Agent
    from loopctl.cli.web import WebPermission
    from loopctl.message import Message, MessagePart, Role
    from loopctl.store import SQLiteStore
    from loopctl.testing import ScriptedClient
    from loopctl.tools.files import FileTools
    from loopctl.ui.web import WebSettings, create_app

    root = tmp_path / "root"
    root.mkdir()
    files = FileTools(root)

    def write(path: str) -> Message:
        return Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "write_file", {"path": path, "content": "x"})])

    agent = Agent(ScriptedClient([write("A.md"), "no A", write("B.md"), "B done"]), tools=list(files),
                  permission=WebPermission(files))  # fmt: skip
    store = SQLiteStore(tmp_path / "s.db")
    settings = WebSettings(allowed_hosts={"app"}, files=files)
    app = create_app(agent, store, settings)
    h = {"X-Loopctl-Token": settings.csrf_token}

    def prompt(text: str) -> dict[str, Any]:
        return {"id": "rep", "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": text}]}]}

    async def main() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://app") as c:
            assert (await c.post("/api/chat", json=prompt("A"), headers=h)).status_code == 200
            seen = (await c.get("/api/sessions/rep")).json()  # the stale tab reads the wait on A.md
            assert [p["input"]["path"] for p in seen["pending"]] == ["A.md"]
            denied = await c.post("/api/sessions/rep/approve", json={"decisions": {"c1": {"approved": False}},
                                  "head": seen["head"]}, headers=h)  # fmt: skip
            assert denied.status_code == 200
            assert (await c.post("/api/chat", json=prompt("B"), headers=h)).status_code == 200
            now = (await c.get("/api/sessions/rep")).json()
            assert [p["input"]["path"] for p in now["pending"]] == ["B.md"] and now["head"] != seen["head"]
            stale = {"decisions": {"c1": {"approved": True}}, "head": seen["head"]}
            refused = await c.post("/api/sessions/rep/approve", json=stale, headers=h)
            assert refused.status_code == 409 and "moved on" in refused.json()["error"]
            assert not (root / "B.md").exists()
            fresh = {"decisions": {"c1": {"approved": True}}, "head": now["head"]}
            assert (await c.post("/api/sessions/rep/approve", json=fresh, headers=h)).status_code == 200
            assert (root / "B.md").exists()
            bad = await c.post("/api/sessions/rep/approve", json={**fresh, "head": 5}, headers=h)
            assert bad.status_code == 400

    asyncio.run(main())
    store.close()


def test_a_session_id_ending_in_an_action_name_is_its_own(server: WebServer) -> None:
    """Session ids may hold ``/``: the page sends each id as one encoded path segment, and the server reads it so
    (``ab/export`` is that session, not the export of ``ab``; ``cd/fork`` is forked, not ``cd``)."""
    from urllib.parse import quote

    token = page_token(server)
    for sid in ("ab", "ab/export", "cd/fork"):
        assert chat(server, sid, "hi", **{"X-Loopctl-Token": token}).status_code == 200
    detail = httpx.get(server.url + "api/sessions/" + quote("ab/export", safe=""))
    assert detail.status_code == 200 and detail.json()["id"] == "ab/export"
    exported = httpx.get(server.url + "api/sessions/" + quote("ab/export", safe="") + "/export")
    assert exported.status_code == 200 and 'filename="ab_export.' in exported.headers["content-disposition"]
    forked = httpx.post(server.url + "api/sessions/" + quote("cd/fork", safe="") + "/fork", json={},
                        headers={"X-Loopctl-Token": token}).json()  # fmt: skip
    assert (
        httpx.get(server.url + f"api/sessions/{forked['id']}").json()["metadata"]["loopctl.fork"]["session"]
        == "cd/fork"
    )
    # An id sent unencoded, as before, is still read with its slashes.
    assert httpx.get(server.url + "api/sessions/cd/fork").json()["id"] == "cd/fork"


def test_a_token_given_on_a_loopback_bind_is_required_too() -> None:
    """``--token`` on 127.0.0.1 (a machine shared with other users, whose processes can read the page's own
    token from ``/``) is not ignored: the API asks for it, and the URL carries it, as on a remote bind."""
    from loopctl.cli.web import access

    assert access("127.0.0.1", 8700, None) == (
        {"127.0.0.1:8700", "localhost:8700", "[::1]:8700"},
        None,
        "http://127.0.0.1:8700/",
    )
    hosts, token, url = access("127.0.0.1", 8700, "a-long-enough-secret-token")
    assert hosts == {"127.0.0.1:8700", "localhost:8700", "[::1]:8700"} and token == "a-long-enough-secret-token"
    assert url == "http://127.0.0.1:8700/#token=a-long-enough-secret-token"
    assert access("::1", 9, None)[2] == "http://[::1]:9/"
    assert access("0.0.0.0", 9, "a-long-enough-secret-token")[:2] == (None, "a-long-enough-secret-token")
    short = run_web("--port", "0", "--token", "short")
    assert short.returncode == 2 and "16 characters" in short.stderr


UNREADABLE_WRITE = """
import os, sys
from pathlib import Path
from loopctl import Agent
from loopctl.cli.web import WebPermission
from loopctl.message import Message, MessagePart, Role
from loopctl.testing import ScriptedClient
from loopctl.tools.files import FileTools
root = Path(sys.argv[1]); p = root / "secret.cfg"; p.write_text("keep me\\n"); os.chmod(p, 0o200)
files = FileTools(root)
call = Message.new(Role.ASSISTANT, [MessagePart.tool_call("w1", "write_file", {"path": "secret.cfg", "content": "x"})])
run = Agent(ScriptedClient([call, "done"]), tools=list(files), permission=WebPermission(files)).run_sync("go")
os.chmod(p, 0o600)
print(run.outcome.kind.value, repr(p.read_text()))
"""


def test_a_write_the_preview_cannot_read_is_still_asked_about(tmp_path: Path) -> None:
    """Only a change the file tool refuses anyway (outside the root, a protected path) skips the approval: a write
    over a file the preview cannot read (mode 0200: the atomic replace needs no read) waits for the page, and so
    does a call whose preview fails for another reason."""
    import os
    import shutil
    import tempfile

    from loopctl.cli.web import WebPermission
    from loopctl.engine import Defer
    from loopctl.message import ToolCallPart
    from loopctl.tools.files import FileTools

    files = FileTools(tmp_path)
    ask = WebPermission(files)
    assert isinstance(ask(ToolCallPart(id="c", name="write_file", input={"path": "a.md", "content": 5})), Defer)
    assert ask(ToolCallPart(id="c", name="write_file", input={"path": "../a.md", "content": "x"})) is True
    assert ask(ToolCallPart(id="c", name="write_file", input={"path": ".git/config", "content": "x"})) is True
    # The real case needs a user whom permissions bind (not root): nobody, when the tests run as root.
    root = Path(tempfile.mkdtemp(prefix="loopctl-nobody-"))  # under /tmp: reachable by nobody
    argv = [sys.executable, "-c", UNREADABLE_WRITE, str(root)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        drop = [setpriv or "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        probe = [*drop, sys.executable, "-c", "import loopctl"]
        if setpriv is None or subprocess.run(probe, capture_output=True, check=False).returncode != 0:
            shutil.rmtree(root)
            return  # (the checks above stand; a checkout nobody cannot read cannot run the real case)
        shutil.chown(root, "nobody")
        argv = [*drop, *argv]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "awaiting_approval " + repr("keep me\n")
