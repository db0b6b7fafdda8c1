"""``loopctl web --model demo`` in a real browser (Debian's chromium, driven by Playwright): a prompt, its text
streamed and its tool calls shown, a file write approved in the page, the session found again after a reload,
forked; a prompt injection in a tool result that must stay text; a cross-site form POST refused.

``LOOPCTL_WEB_SCREENSHOT=path.png`` saves the page, once the run is done, for the README."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import httpx
import pytest

from tests.ui.conftest import AppServer, WebServer, sample_project

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.xdist_group("ui-browser")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    base = tmp_path_factory.mktemp("browser")
    s = WebServer(
        sample_project(base / "project"), base / "sessions.db", "--model", "demo", env={"LOOPCTL_DEMO_DELAY": "0.01"}
    )
    yield s
    s.stop()


def test_chat_stream_approve_reload_and_fork(page: Any, server: WebServer) -> None:
    from playwright.sync_api import expect

    page.goto(server.url)
    page.fill("textarea[name=prompt]", "Collect the TODO comments, please.")
    page.keyboard.press("Enter")
    # The text streams in: shown in the live reply while the run still runs.
    live = page.locator(".msg.live")
    expect(live.locator(".spinner")).to_be_visible()
    expect(live.locator(".md").first).to_contain_text("scripted demo model", timeout=60_000)
    # Tool calls as they start and finish: the listing, then the three reads of one turn.
    expect(page.locator('.tool[data-tool="list_files"]').first).to_be_visible(timeout=60_000)
    expect(page.locator('.tool[data-tool="read_file"]')).to_have_count(3, timeout=60_000)
    # The write waits for a decision, shown with its diff; approved, it runs and the run ends.
    approval = page.locator(".approval")
    expect(approval).to_contain_text("write_file", timeout=60_000)
    expect(approval.locator(".diff")).to_contain_text("+## wordcount.py")
    assert not (server.root / "TODO.md").exists()
    approval.locator("button.approve").click()
    expect(page.locator(".msg-assistant").last).to_contain_text("Done. TODO.md lists", timeout=60_000)
    expect(page.locator(".msg.live")).to_have_count(0, timeout=30_000)
    assert "wordcount.py" in (server.root / "TODO.md").read_text()
    sid = unquote(page.url.split("#/s/")[1])
    # Per turn: usage, cost, latency; the run's spans as a waterfall.
    expect(page.locator(".turn-row")).to_have_count(5)
    page.locator("button.tab", has_text="spans").click()
    expect(page.locator(".span-row").first).to_contain_text("invoke_agent")
    if os.environ.get("LOOPCTL_WEB_SCREENSHOT"):
        page.locator('.tool[data-tool="write_file"] .tool-diff').first.scroll_into_view_if_needed()
        page.screenshot(path=os.environ["LOOPCTL_WEB_SCREENSHOT"])
    # Reloaded, the page finds the session in the list and shows it from the store.
    page.reload()
    expect(page.locator(f'li[data-session="{sid}"]')).to_be_visible()
    expect(page.locator(".msg-user").first).to_contain_text("Collect the TODO comments")
    expect(page.locator('.tool[data-tool="write_file"]')).to_contain_text("created TODO.md")
    # Fork: a new session, listed, in the first one's fork tree.
    page.locator(".chat-actions button", has_text="Fork").click()
    page.wait_for_function("(sid) => !location.hash.endsWith(encodeURIComponent(sid))", arg=sid)
    forked = unquote(page.url.split("#/s/")[1])
    assert forked != sid
    expect(page.locator(f'li[data-session="{forked}"]')).to_be_visible()
    page.locator("button.tab", has_text="tree").click()
    expect(page.locator(".tree a.current")).to_have_count(1)
    expect(page.locator(".tree a")).to_have_count(2)
    # Fork at a message: back to the first session, "fork here" on its second message.
    page.locator(f'li[data-session="{sid}"] a').click()
    expect(page.locator(f'li.current[data-session="{sid}"]')).to_be_visible()
    second = page.locator('.msg[data-index="1"]')
    fork_here = second.locator("button.fork-here")
    # The button shows on hover; the page scrolls to the conversation's end when the session has loaded,
    # which can move the message from under the pointer after it was hovered: hover until it shows.
    for _ in range(50):
        second.hover()
        if fork_here.is_visible():
            break
        page.wait_for_timeout(100)
    fork_here.click()
    page.wait_for_function(
        "(ids) => !ids.some((i) => location.hash.endsWith(encodeURIComponent(i)))", arg=[sid, forked]
    )
    at_message = unquote(page.url.split("#/s/")[1])
    expect(page.locator(".msg")).to_have_count(2)
    page.locator("button.tab", has_text="tree").click()
    expect(page.locator(".tree a")).to_have_count(3)
    # Search narrows the list.
    page.fill("input.search", forked)
    expect(page.locator(".sessions li")).to_have_count(1)
    assert at_message != forked
    assert page.page_errors == []


INJECTION = "<img src=x onerror=alert(1)>[go](javascript:alert(2))![p](http://127.0.0.1:9/p.png)"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    """A project whose files hold a prompt injection: the demo reads them and quotes the first line."""
    base = tmp_path_factory.mktemp("hostile")
    root = base / "project"
    root.mkdir()
    (root / "README.md").write_text(
        f"{INJECTION}\n<script>alert(3)</script>\n"
        '<a href="javascript:alert(4)">click</a> <img src="http://127.0.0.1:9/leak.png">\n'
        "TODO: <img src=x onerror=alert(5)> escape this\n"
    )
    (root / "app.py").write_text("# TODO: <script>alert(6)</script>\nprint('hi')\n")
    s = WebServer(root, base / "sessions.db", "--model", "demo")
    yield s
    s.stop()


def test_a_prompt_injection_in_a_tool_result_stays_text(page: Any, hostile: WebServer) -> None:
    from playwright.sync_api import expect

    dialogs: list[str] = []
    requests: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(hostile.url)
    page.fill("textarea[name=prompt]", "Collect the TODO comments.")
    page.keyboard.press("Enter")
    approval = page.locator(".approval")
    expect(approval).to_contain_text("write_file", timeout=60_000)
    # The model quoted the first line: as sanitized Markdown, no image, no javascript: link.
    quoted = page.locator(".msg-assistant .md", has_text="README.md starts with")
    expect(quoted).to_have_count(1)
    assert quoted.locator("img").count() == 0
    assert page.locator(".md a[href^='javascript']").count() == 0
    # The tool results show the file as it is, as text.
    expect(page.locator('.tool[data-tool="read_file"] .tool-result pre').first).to_contain_text(
        "<script>alert(3)</script>"
    )
    expect(page.locator(".tool-result pre", has_text="<img src=x onerror=alert(1)>").first).to_be_visible()
    # Click what would have been the link, and open everything folded.
    links = page.locator(".md a", has_text="go")
    if links.count():
        links.first.click()
    for summary in page.locator("summary").all():
        summary.click()
    approval.locator("button.approve").click()
    expect(page.locator(".msg-assistant").last).to_contain_text("Done.", timeout=60_000)
    page.reload()
    expect(page.locator(".msg-user").first).to_be_visible()
    assert dialogs == []
    assert page.evaluate("document.querySelectorAll('script:not([src])').length") == 0
    origin = hostile.url.rstrip("/")
    assert [u for u in requests if not (u.startswith((origin, "data:")))] == []


def test_a_cross_site_form_post_is_refused(page: Any, server: WebServer, app_server: AppServer) -> None:
    """A page of another origin posts a chat request to the server (a form: no custom header, no preflight):
    refused, and no session is made."""
    target = server.url + "api/chat"
    body = (
        "<!doctype html><form method=POST enctype=text/plain action='" + target + "'>"
        '<input name=\'{"id":"csrf-browser","messages":[{"id":"u","role":"user","parts":[{"type":"text","text":"hi'
        "' value='\"}]}]}'></form><script>document.forms[0].submit()</script>"
    ).encode()

    async def attacker(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": body})

    url = app_server.mount("attacker", attacker)
    with page.expect_navigation(url=target):
        page.goto(url)
    assert "refused" in page.content()
    assert httpx.get(server.url + "api/sessions/csrf-browser").status_code == 404
    # And a script's fetch from that origin (no-cors) is refused the same way.
    page.goto(url.replace("attacker/", "attacker/again"))
    status = page.evaluate(
        """async (target) => {
            try { await fetch(target, {method: "POST", mode: "no-cors", body: "{}"}); return "sent"; }
            catch (e) { return "blocked"; }
        }""",
        target,
    )
    assert status in ("sent", "blocked")
    assert httpx.get(server.url + "api/sessions/csrf-browser").status_code == 404


def test_screenshot_tooling(tmp_path: Path) -> None:
    """The README's screenshot is made by this module (LOOPCTL_WEB_SCREENSHOT): the file it names exists."""
    shot = Path(__file__).parents[2] / "docs" / "images" / "loopctl-web.png"
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


HOSTILE_MARKDOWN = (
    """Look: <img src=x onerror=alert(11)> <svg onload=alert(12)><circle r=5 /></svg>
<iframe src="javascript:alert(13)"></iframe><style>body{display:none}</style><form action="http://evil.test/f"><button>go</button></form>

[a](javascript:alert(14)) [b](JaVaScRiPt:alert(15)) [c](data:text/html,<script>alert(16)</script>) [d]( javascript:alert(17))
<a href="&#106;avascript:alert(18)">e</a> <javascript:alert(19)> ![img](http://evil.test/pixel.png) [ok](https://example.com)
<details open ontoggle=alert(20)>x</details> <object data="http://evil.test/o"></object> <math><mi xlink:href="javascript:alert(21)">m</mi></math>
\u202eeulav gnol"""
    + " long" * 2000
)


def test_hostile_text_in_every_field_of_a_stored_session_stays_inert(page: Any, server: WebServer) -> None:
    """A session written by another process, with hostile text in the model's Markdown, its thinking, a tool's
    name, arguments and result, a file path a pending write names: the page shows it as text and sanitized
    Markdown, no dialog, no request leaves it, no script, frame, style, form or image is made of it."""
    from playwright.sync_api import expect

    from loopctl.engine import LoopMachine
    from loopctl.message import Message, MessagePart, Role, ThinkingPart
    from loopctl.session import Session
    from loopctl.store import SQLiteStore

    evil = "<img src=x onerror=alert(1)><script>alert(2)</script>"
    messages = [
        Message.new(Role.USER, [MessagePart.text(f"hello {evil}")]),
        Message.new(
            Role.ASSISTANT,
            [
                ThinkingPart(text=f"thinking {evil} [x](javascript:alert(3))"),
                MessagePart.text(HOSTILE_MARKDOWN),
                MessagePart.tool_call("c<1>", f"tool{evil}", {"path": f"../{evil}", "\u202ekey": evil}),
            ],
        ),
        Message.new(Role.USER, [MessagePart.tool_result("c<1>", f"tool{evil}", f"result {evil}", is_error=True)]),
        Message.new(Role.ASSISTANT, [MessagePart.text("end")]),
    ]
    sid = "hostile-'\"<b>x</b>&amp;"
    with SQLiteStore(server.store) as store:
        store.import_session(Session(LoopMachine(messages)), session_id=sid)
    dialogs: list[str] = []
    requests: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(server.url + "#/s/" + quote(sid, safe=""))
    expect(page.locator(".msg-assistant .md", has_text="Look:")).to_have_count(1, timeout=30_000)
    for summary in page.locator("summary").all():
        summary.click()
    md = page.locator(".md")
    for tag in ("img", "svg", "iframe", "style", "form", "object", "details", "math", "script", "button"):
        assert md.locator(tag).count() == 0, tag
    hrefs = [a.get_attribute("href") or "" for a in md.locator("a").all()]
    assert "https://example.com/" in [a.evaluate("a => a.href") for a in md.locator("a").all()]
    assert all(h == "" or h.startswith(("https:", "http:", "mailto:", "#")) for h in hrefs), hrefs
    # The rest is text: the tool's name, input and result, the thinking, the session id.
    expect(page.locator(".tool .tool-name").first).to_have_text(f"tool{evil}")
    expect(page.locator(".tool-result pre").first).to_contain_text(f"result {evil}")
    expect(page.locator(".reasoning-text").first).to_contain_text(f"thinking {evil}")
    assert page.locator("body img, body iframe, body object, body form:not(.composer)").count() == 0
    assert page.evaluate("document.querySelectorAll('script:not([src])').length") == 0
    assert page.evaluate("document.styleSheets.length") == 1  # the page's own
    assert dialogs == []
    origin = server.url.rstrip("/")
    assert [u for u in requests if not u.startswith((origin, "data:"))] == []
