"""Who may read and act on the dashboard, through a real `healer serve` (no browser needed).

Without the token nothing is shown and no action moves a file; a session cookie is HttpOnly
and SameSite=Strict; every action needs its CSRF token; a foreign Origin, a JSON body or a
cross-site form are refused before the handler; without a token configured the pages are
read-only on loopback and there are no actions at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from healer.core import seeds
from healer.testing.api import ServeProcess
from healer.testing.loop import healer_env

pytestmark = pytest.mark.e2e

TOKEN = "dash-auth-token-0123456789abcdef"
FORM = {"content-type": "application/x-www-form-urlencoded"}
PAGES = ["/", "/ui/incidents", "/ui/human", "/ui/fleet", "/ui/plays", "/ui/healer",
         "/ui/events", "/ui/incidents/code-abc"]


def _serve(root: Path, **extra: str) -> ServeProcess:
    env = healer_env(root / "state", root / "results", root / "fleet",
                     HEALER_EXECUTOR="playbook", HEALER__SELFHEAL__ENABLED="false",
                     HEALER__CONTEXT__ENABLED="false", **extra)
    s = ServeProcess(env)
    s.fleet = root / "fleet"  # type: ignore[attr-defined]
    return s


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    s = _serve(tmp_path_factory.mktemp("auth"), HEALER__API__TOKEN=TOKEN)
    yield s
    s.close()


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    s = _serve(tmp_path_factory.mktemp("open"))
    yield s
    s.close()


def _seed(server: ServeProcess, subject: str = "disk full") -> Path:
    return seeds.write(server.fleet, seeds.Seed(  # type: ignore[attr-defined]
        sender="n1", to=seeds.HUMAN, subject=subject, body="Free some space.",
        severity="high"))


def _login(server: ServeProcess) -> httpx.Client:
    client = httpx.Client(base_url=server.url, timeout=10)
    r = client.post("/ui/login", data={"token": TOKEN, "next": "/ui/human"})
    assert r.status_code == 303 and r.headers["location"] == "/ui/human", r.text
    return client


def _csrf(client: httpx.Client) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/ui/human").text)
    assert found
    return found.group(1)


class TestWithToken:
    @pytest.mark.parametrize("path", PAGES)
    def test_pages_need_a_login(self, server: ServeProcess, path: str) -> None:
        r = server.http.get(path)
        assert r.status_code == 303
        assert r.headers["location"].startswith("/ui/login?next=")

    def test_bearer_token_reads_pages(self, server: ServeProcess) -> None:
        r = server.http.get("/ui/healer", headers={"authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200 and "Health of healer itself" in r.text

    def test_the_session_cookie_is_httponly_and_strict(self, server: ServeProcess) -> None:
        r = server.http.post("/ui/login", data={"token": TOKEN})
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
        assert TOKEN.lower() not in cookie

    def test_a_wrong_token_is_refused(self, server: ServeProcess) -> None:
        r = server.http.post("/ui/login", data={"token": "guess"})
        assert r.status_code == 401 and "wrong token" in r.text
        assert "set-cookie" not in r.headers

    def test_login_sends_only_to_local_paths(self, server: ServeProcess) -> None:
        r = server.http.post("/ui/login", data={"token": TOKEN,
                                                "next": "//evil.example/x"})
        assert r.status_code == 303 and r.headers["location"] == "/"

    def test_actions_without_a_session_move_nothing(self, server: ServeProcess) -> None:
        path = _seed(server)
        for action in ("handled", "heal-again"):
            r = server.http.post(f"/ui/human/{path.name}/{action}", data={"csrf": "x"})
            assert r.status_code == 403, r.text
            r = server.http.post(f"/ui/human/{path.name}/{action}", data={"csrf": "x"},
                                 headers={"authorization": f"Bearer {TOKEN}"})
            assert r.status_code == 403, "a bearer token reads; only a session acts"
        assert path.is_file()

    def test_actions_need_the_csrf_token(self, server: ServeProcess) -> None:
        path = _seed(server, "csrf")
        with closing(_login(server)) as client:
            for data in ({"note": "no csrf field"}, {"csrf": "0" * 64}):
                r = client.post(f"/ui/human/{path.name}/handled", data=data)
                assert r.status_code == 403 and "CSRF" in r.text
            assert path.is_file()
            r = client.post(f"/ui/human/{path.name}/handled", data={"csrf": _csrf(client)})
            assert r.status_code == 303
        assert not path.exists() and (path.parent / "archive" / path.name).is_file()

    def test_cross_site_and_non_form_requests_are_refused(self, server: ServeProcess) -> None:
        path = _seed(server, "cross-site")
        with closing(_login(server)) as client:
            token = _csrf(client)
            url = f"/ui/human/{path.name}/handled"
            r = client.post(url, data={"csrf": token}, headers={"origin": "https://evil.example"})
            assert r.status_code == 403
            r = client.post(url, data={"csrf": token}, headers={"sec-fetch-site": "cross-site"})
            assert r.status_code == 403
            r = client.post(url, json={"csrf": token})
            assert r.status_code == 415
            r = client.post(url, data={"csrf": token}, headers={"host": "evil.example"})
            assert r.status_code == 421
        assert path.is_file()

    def test_names_that_are_not_seed_files_are_400(self, server: ServeProcess) -> None:
        with closing(_login(server)) as client:
            token = _csrf(client)
            for name in ("..%2F..%2Fetc%2Fpasswd", "x.md", "20260101-000000-from-n1.md"):
                r = client.post(f"/ui/human/{name}/handled", data={"csrf": token})
                assert r.status_code in (400, 404), (name, r.status_code)
                assert "Traceback" not in r.text

    def test_logout_ends_the_session_cookie(self, server: ServeProcess) -> None:
        with closing(_login(server)) as client:
            r = client.post("/ui/logout", data={"csrf": _csrf(client)})
            assert r.status_code == 303
            assert 'healer_session=""' in r.headers["set-cookie"] or \
                "max-age=0" in r.headers["set-cookie"].lower()

    def test_every_answer_carries_the_security_headers(self, server: ServeProcess) -> None:
        with closing(_login(server)) as client:
            for path in ("/", "/ui/human", "/ui/login", "/ui/static/htmx.min.js",
                         "/ui/incidents?kind=nope"):
                r = client.get(path)
                csp = r.headers["content-security-policy"]
                assert "script-src 'self'" in csp and "unsafe-inline" not in csp, path
                assert r.headers["x-frame-options"] == "DENY"
                assert r.headers["x-content-type-options"] == "nosniff"
            assert client.get("/ui/incidents?kind=nope").status_code == 400

    def test_the_api_keeps_its_paths_and_the_pages_stay_out_of_openapi(
            self, server: ServeProcess) -> None:
        doc = server.http.get("/openapi.json").json()
        assert "/api/v1/incidents" in doc["paths"]
        assert not [p for p in doc["paths"] if p == "/" or p.startswith("/ui/")]
        assert server.http.get("/api/v1/incidents").status_code == 401  # still a bearer route


class TestWithoutToken:
    def test_pages_are_readable_on_loopback(self, open_server: ServeProcess) -> None:
        r = open_server.http.get("/ui/human")
        assert r.status_code == 200 and "Needs a person" in r.text
        assert "Mark handled" not in r.text

    def test_there_are_no_actions(self, open_server: ServeProcess) -> None:
        path = _seed(open_server)
        assert "Mark handled" not in open_server.http.get("/ui/human").text
        r = open_server.http.post(f"/ui/human/{path.name}/handled", data={"csrf": "x"})
        assert r.status_code == 403 and "api.token" in r.text
        r = open_server.http.post("/ui/login", data={"token": "anything"})
        assert r.status_code == 400
        assert path.is_file()
