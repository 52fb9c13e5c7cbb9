"""The dashboard in a real browser, against a real `healer serve` working on a real local fleet.

The state is made the way it is in production: a report_error (hostile: script tags,
``javascript:`` links, a 1 MB line), a play whose agent misses a tool, a result file the bus
rejects, escalation files in the human inbox, and a fault injected into the fleet while a page
is open. Every page load is watched for Content-Security-Policy violations, script errors and
dialogs: any of them fails the test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.core import seeds
from healer.fleet.diagnosis import incident_id
from healer.testing.api import ServeProcess
from healer.testing.fleet import LocalFleet, nats_server_binary, sshd_binary
from healer.testing.wait import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

TOKEN = "dash-token-0123456789abcdef"
PLAY = "play-dash-1"
MEGA = 1 << 20
DAEMON_DOWN = incident_id("n2", ["daemon"])
# Whether the row ``sel`` is on the page with another text than ``before``.
CHANGED = """([sel, before]) => {
  const row = document.querySelector(sel);
  return row !== null && row.innerText !== before;
}"""
HOSTILE = ('<script>window.__pwned = 1</script><img src=x onerror="window.__pwned=2"> '
           'see <a href="javascript:window.__pwned=3">here</a> javascript:alert(1)')
SEED_BODY = f"""# Fix by hand

{HOSTILE}

[click me](javascript:window.__pwned=4) · [docs](https://example.com/runbook)

<script>window.__pwned = 5</script>

```
healer fleet heal n3
```
"""
# Records every CSP violation in the page itself (init scripts are not subject to the CSP).
WATCH = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', e => window.__csp.push(
  e.violatedDirective + ' ' + e.blockedURI));
"""


# The elements wider than the window that are not inside a scrolling box.
WIDER = """[...document.querySelectorAll('body *')].filter(e =>
  e.getBoundingClientRect().right > window.innerWidth + 1 &&
  !e.parentElement.closest('.scroll')).slice(0, 8).map(e => e.tagName + '.' + e.className +
  ' ' + Math.round(e.getBoundingClientRect().right)).join(', ')"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A local fleet, `healer serve` on it with a token, and state of every kind."""
    if not nats_server_binary() or not sshd_binary():
        pytest.skip("the local fleet needs nats-server and OpenSSH")
    root = tmp_path_factory.mktemp("dash")
    fleet = LocalFleet(root / "fleet").start()
    server = None
    try:
        env = fleet.loop_env(**{"api.token": TOKEN, "fleet.heal_interval_s": 1.0,
                                "fleet.watchdog_start_s": 600, "api.max_body_bytes": 3 << 20,
                                "selfheal.enabled": "true"})
        server = ServeProcess(env)
        auth = {"authorization": f"Bearer {TOKEN}"}
        http = server.http
        # A report_error: hostile text, and a 1 MB line in its traceback.
        report = {"error_type": "KeyError", "error_message": HOSTILE,
                  "call_site": "src/app/tools.py:lookup",
                  "traceback": "Traceback:\n" + "<script>x</script>" * (MEGA // 17) + "\nEND"}
        r = http.post("/api/v1/errors", json=report, headers=auth)
        assert r.status_code == 200, r.text
        fingerprint = r.json()["fingerprint"]
        # A play whose agent lacks a declared tool: a pre-flight issue.
        start = {"play_id": PLAY, "repository": "5dlabs/cto", "cto_config": {"agents": {
            "rex": {"tools": {"remote": ["brave_search", "github_create_pr"]}}}}}
        assert http.post("/api/v1/session/start", json=start, headers=auth).status_code == 200
        inv = {"agent": "rex", "tools": ["brave_search"]}
        assert http.post(f"/api/v1/session/{PLAY}/inventory", json=inv,
                         headers=auth).status_code == 200
        # A result file the bus rejects.
        (fleet.results_dir / "heal-daemon-n9-1.json").write_text("<script>not json</script>")
        human = fleet.fleet_dir / seeds.HUMAN
        hostile_seed = seeds.write(fleet.fleet_dir, seeds.Seed(
            sender="testnode", to=seeds.HUMAN, subject=f"hostile {HOSTILE}", body=SEED_BODY,
            severity="high", incident=f"code-{fingerprint}"))
        wait_for(lambda: (fleet.results_dir / "rejected").is_dir(), 30)
        wait_for(lambda: _fleet_probed(http, auth), 60)
        yield {"fleet": fleet, "server": server, "url": server.url, "auth": auth,
               "fingerprint": fingerprint, "human": human, "hostile_seed": hostile_seed}
    finally:
        if server is not None:
            server.close()
        fleet.stop()


def _fleet_probed(http: Any, auth: dict[str, str]) -> bool:
    peers = http.get("/api/v1/fleet", headers=auth).json().get("peers") or {}
    return bool(peers) and all((p.get("probe") or {}).get("ok") for p in peers.values())


@pytest.fixture(scope="module")
def context(browser: Any, world: dict[str, Any]) -> Iterator[Any]:
    """One logged-in browser context for the module (logged in through the form)."""
    ctx = browser.new_context(base_url=world["url"], viewport={"width": 1280, "height": 900})
    ctx.add_init_script(WATCH)
    page = ctx.new_page()
    page.goto("/")
    assert "/ui/login" in page.url  # a token is set: nothing without logging in
    page.fill("#token", TOKEN)
    page.click("#login")
    page.wait_for_url(lambda u: "/ui/login" not in u)
    page.close()
    yield ctx
    ctx.close()


@pytest.fixture
def page(context: Any) -> Iterator[Any]:
    """A page whose CSP violations, script errors and dialogs fail the test."""
    p = context.new_page()
    problems: list[str] = []
    p.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    p.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    p.on("console", lambda m: problems.append(f"console {m.type}: {m.text} {m.location}")
         if m.type == "error" else None)
    yield p
    if not p.is_closed():
        problems += [f"CSP violation: {v}" for v in p.evaluate("window.__csp || []")]
        assert p.evaluate("window.__pwned") is None, "a script from the data ran"
    p.close()
    assert problems == [], "\n".join(problems)


def _live(page: Any) -> None:
    page.wait_for_selector('#live-state[data-state="live"]', timeout=15_000)


class TestViews:
    def test_every_view_renders_the_real_state(self, page: Any, world: dict[str, Any],
                                               shots: Path) -> None:
        """Incidents, an incident, the inbox, the fleet, the plays and healer's health all
        show what the pipeline recorded; a screenshot of each is taken."""
        page.goto("/")
        _live(page)
        code_row = page.locator(f'tr[data-id="code-{world["fingerprint"]}"]')
        assert "KeyError in src/app/tools.py:lookup" in code_row.inner_text()
        assert page.locator("tr[data-id^='play-']").count() >= 1
        page.screenshot(path=str(shots / "incidents.png"), full_page=True)

        page.select_option("#f-kind", "code")
        page.click("#filter")
        page.wait_for_url("**/ui/incidents?kind=code**")
        assert page.locator("tbody tr[data-id]").count() == 1

        page.click(f'a[href="/ui/incidents/code-{world["fingerprint"]}"]')
        page.wait_for_selector("#h-report")
        assert page.locator("#h-timeline").is_visible()
        assert "opened" in page.locator("table.timeline").inner_text()
        page.screenshot(path=str(shots / "incident.png"), full_page=False)

        page.goto("/ui/human")
        assert page.locator("article.seed").count() >= 1
        page.screenshot(path=str(shots / "human.png"), full_page=True)

        page.goto("/ui/fleet")
        rows = page.locator("table.matrix tbody tr[data-node]")
        assert rows.count() == 3
        assert page.locator("th abbr", has_text="P1").count() == 1
        assert page.locator("td.cell[data-state='ok']").count() >= 3
        assert "ago" in rows.first.inner_text()  # heartbeat age
        page.screenshot(path=str(shots / "fleet.png"), full_page=True)

        page.goto("/ui/plays")
        play = page.locator(f"#play-{PLAY}")
        assert "github_create_pr" in play.inner_text()
        assert play.locator(".checklist li").count() >= 1
        assert "tool_mismatch" in play.locator("table.issues").inner_text()
        page.screenshot(path=str(shots / "plays.png"), full_page=True)

        page.goto("/ui/healer")
        assert int(page.inner_text("#bus-rejected")) >= 1
        rejected = page.locator("table.rejected")
        assert "heal-daemon-n9-1.json" in rejected.inner_text()
        assert "<script>" not in rejected.inner_html()
        assert page.locator(".b-closed, .b-open, .b-half-open").count() == 3
        page.screenshot(path=str(shots / "healer.png"), full_page=True)

        page.set_viewport_size({"width": 380, "height": 800})
        page.goto("/ui/fleet")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 400, f"the page scrolls sideways in a narrow window ({width} px): " \
            + page.evaluate(WIDER)
        page.screenshot(path=str(shots / "fleet-narrow.png"), full_page=True)
        page.set_viewport_size({"width": 1280, "height": 900})

    def test_keyboard_reaches_the_views(self, page: Any) -> None:
        """Tab goes to the skip link first, then through the views; Enter follows a link."""
        page.goto("/")
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.className") == "skip"
        page.keyboard.press("Tab")  # Incidents
        page.keyboard.press("Tab")  # Needs a person
        assert page.evaluate("document.activeElement.getAttribute('href')") == "/ui/human"
        page.keyboard.press("Enter")
        page.wait_for_url("**/ui/human")

    def test_pages_read_without_javascript(self, browser: Any, context: Any,
                                           world: dict[str, Any]) -> None:
        """With scripts off the pages still show everything (live updates need JS)."""
        ctx = browser.new_context(base_url=world["url"], java_script_enabled=False)
        ctx.add_cookies(context.cookies())
        try:
            p = ctx.new_page()
            p.goto("/")
            assert p.locator(f'tr[data-id="code-{world["fingerprint"]}"]').count() == 1
            p.goto("/ui/fleet")
            assert p.locator("table.matrix tbody tr[data-node]").count() == 3
        finally:
            ctx.close()


class TestHostileContent:
    def test_report_renders_escaped_and_cut(self, page: Any, world: dict[str, Any],
                                            shots: Path) -> None:
        """Script tags, event handlers and javascript: links show as text; the 1 MB line
        arrives cut; no script from the data runs and the CSP reports nothing."""
        page.goto(f"/ui/incidents/code-{world['fingerprint']}")
        report = page.locator("dl.report")
        text = report.inner_text()
        assert "<script>window.__pwned = 1</script>" in text
        assert "more characters cut" in text
        assert page.locator("dl.report script, dl.report img").count() == 0
        assert page.locator("a[href^='javascript:' i]").count() == 0
        size = len(page.content())
        assert size < 200_000, f"the 1 MB line was not cut ({size} characters)"
        page.screenshot(path=str(shots / "hostile-incident.png"))

    def test_seed_markdown_keeps_no_html_and_no_script_links(self, page: Any) -> None:
        page.goto("/ui/human")
        article = page.locator("article.seed", has_text="hostile")
        body = article.locator(".markdown")
        assert "<script>window.__pwned = 5</script>" in body.inner_text()
        assert body.locator("script, img").count() == 0
        assert body.locator("a[href^='javascript:' i]").count() == 0
        assert body.locator("a[href='https://example.com/runbook']").count() == 1
        assert body.locator("pre code").count() == 1


class TestLive:
    def test_a_fleet_fault_appears_without_a_reload(self, page: Any,
                                                    world: dict[str, Any]) -> None:
        """The page is open; a node's daemon is killed; the fleet incident shows up through
        the live stream (the page is never reloaded)."""
        page.goto("/ui/incidents?kind=fleet")
        _live(page)
        page.evaluate("window.__same_page = 'yes'")
        # A slow probe on a busy machine may have opened (and healed) an n2 incident earlier:
        # the kill's incident is the one whose row appears, or changes, after it.
        row = f"tr[data-id='{DAEMON_DOWN}']"
        before = page.locator(row).all_inner_texts()
        world["fleet"].kill_daemon("n2")
        page.wait_for_function(CHANGED, arg=[row, before[0] if before else ""],
                               timeout=45_000)
        assert page.evaluate("window.__same_page") == "yes"

    def test_a_new_escalation_file_appears_live(self, page: Any, world: dict[str, Any]
                                                ) -> None:
        page.goto("/ui/human")
        _live(page)
        page.evaluate("window.__same_page = 'yes'")
        path = seeds.write(world["fleet"].fleet_dir, seeds.Seed(
            sender="n3", to=seeds.HUMAN, subject="disk full on n3", body="Free some space.",
            severity="high"), clock=time.time() + 5)
        page.wait_for_selector(f"#seed-{path.name.replace('.', chr(92) + '.')}",
                               timeout=15_000)
        assert page.evaluate("window.__same_page") == "yes"
        badge = page.locator("#nav .badge")
        wait_for(lambda: badge.count() == 1 and int(badge.inner_text()) >= 2, 10)


class TestActions:
    def test_mark_handled_moves_the_file_to_archive(self, page: Any,
                                                    world: dict[str, Any]) -> None:
        human: Path = world["human"]
        path = seeds.write(world["fleet"].fleet_dir, seeds.Seed(
            sender="n2", to=seeds.HUMAN, subject="handle me", body="Then mark it handled.",
            severity="info"), clock=time.time() + 10)
        page.goto("/ui/human")
        page.click(f'button.handled[data-file="{path.name}"]')
        page.wait_for_selector(".notice")
        assert path.name in page.inner_text(".notice")
        assert not path.exists()
        assert (human / "archive" / path.name).is_file()
        assert page.locator(f'button.handled[data-file="{path.name}"]').count() == 0

    def test_heal_again_reopens_the_incident(self, page: Any, world: dict[str, Any]) -> None:
        """The hostile escalation names the code incident: healing it again archives the
        file and puts the incident back to open, with the person's request on its trail."""
        seed: Path = world["hostile_seed"]
        page.goto("/ui/human")
        page.click(f'button.heal-again[data-file="{seed.name}"]')
        page.wait_for_selector(".notice")
        assert not seed.exists()
        assert (world["human"] / "archive" / seed.name).is_file()
        r = world["server"].http.get(f"/api/v1/incidents/code-{world['fingerprint']}",
                                     headers=world["auth"])
        body = r.json()
        assert body["incident"]["status"] == "open"
        assert any(e["event"] == "heal_again" for e in body["audit"]), json.dumps(body)[:500]
