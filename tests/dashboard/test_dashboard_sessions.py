"""Sessions and throttles through a real `healer serve`, reached from several loopback
addresses (Linux routes all of 127/8 locally, so a client bound to 127.0.0.2 is a second
client).

Promises: wrong logins and wrong bearer tokens slow down only the address that sent them (429
with ``Retry-After``) and never the operator elsewhere; ``X-Forwarded-For`` counts only from a
trusted proxy; logging out and ending a session revoke its cookie at once and across a
restart, while a session nobody ended survives one; every login makes a new session; the
session list shows who is logged in and never a secret.

The wait is set to minutes, so the tests see 429s without waiting any of them out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from healer.testing.api import ServeProcess
from healer.testing.loop import healer_env

pytestmark = pytest.mark.e2e

TOKEN = "dash-sessions-token-0123456789abcdef"
PROXY = "127.0.0.50"  # the one address whose X-Forwarded-For is believed
FREE = 5


def _serve(root: Path) -> ServeProcess:
    env = healer_env(root / "state", root / "results", root / "fleet",
                     HEALER_EXECUTOR="playbook", HEALER__SELFHEAL__ENABLED="false",
                     HEALER__CONTEXT__ENABLED="false", HEALER__API__TOKEN=TOKEN,
                     HEALER__API__TRUSTED_PROXIES=PROXY,
                     HEALER__API__THROTTLE__FREE_FAILURES=str(FREE),
                     HEALER__API__THROTTLE__BASE_DELAY_S="300",
                     HEALER__API__THROTTLE__MAX_DELAY_S="600")
    return ServeProcess(env)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    s = _serve(tmp_path_factory.mktemp("sessions"))
    yield s
    s.close()


def _client(server: ServeProcess, source: str = "127.0.0.1", **kw: object) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=10,
                        transport=httpx.HTTPTransport(local_address=source), **kw)  # type: ignore[arg-type]


def _login(client: httpx.Client) -> str:
    r = client.post("/ui/login", data={"token": TOKEN, "next": "/ui/healer"})
    assert r.status_code == 303 and r.headers["location"] == "/ui/healer", r.text
    return client.cookies["healer_session"]


def _with_cookie(server: ServeProcess, cookie: str) -> httpx.Client:
    return _client(server, cookies={"healer_session": cookie})


def _logged_in(client: httpx.Client) -> bool:
    r = client.get("/ui/human")
    assert r.status_code in (200, 303), r.status_code
    return r.status_code == 200


def _csrf(client: httpx.Client) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/ui/healer").text)
    assert found
    return found.group(1)


def _sid(cookie: str) -> str:
    return cookie.split(".")[0]


# -- throttles ---------------------------------------------------------------------------


def test_a_flood_of_wrong_logins_never_locks_out_the_operator(server: ServeProcess) -> None:
    with closing(_client(server, "127.0.0.2")) as attacker:
        codes = []
        for i in range(12):
            r = attacker.post("/ui/login", data={"token": f"guess-{i}"})
            codes.append(r.status_code)
            if r.status_code == 429:
                assert int(r.headers["retry-after"]) > 0 and "try again in" in r.text
                assert "set-cookie" not in r.headers
        assert codes[:FREE + 1] == [401] * (FREE + 1) and set(codes[FREE + 1:]) == {429}
        # Waiting means waiting: the right token is not even looked at from there ...
        assert attacker.post("/ui/login", data={"token": TOKEN}).status_code == 429
        # ... and a forwarded-for header from an untrusted peer changes nothing.
        r = attacker.post("/ui/login", data={"token": TOKEN},
                          headers={"x-forwarded-for": "127.0.0.9"})
        assert r.status_code == 429
    with closing(_client(server, "127.0.0.1")) as operator:
        _login(operator)
        assert _logged_in(operator)


def test_wrong_bearer_tokens_slow_only_their_sender(server: ServeProcess) -> None:
    with closing(_client(server, "127.0.0.3")) as attacker, \
            closing(_client(server, "127.0.0.1")) as operator:
        codes = []
        for i in range(300):
            r = attacker.get("/api/v1/incidents", headers={"authorization": f"Bearer x{i}"})
            codes.append(r.status_code)
            if i == 150:  # meanwhile, the right token from elsewhere works at once
                ok = operator.get("/api/v1/incidents",
                                  headers={"authorization": f"Bearer {TOKEN}"})
                assert ok.status_code == 200
        assert codes[:FREE + 1] == [401] * (FREE + 1)
        assert codes.count(429) == 300 - FREE - 1
        r = attacker.get("/api/v1/incidents", headers={"authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
        # The pages take bearer tokens too: same bucket, so no way around the wait.
        r = attacker.get("/ui/healer", headers={"authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
        # A wrong login is another bucket: the API flood does not block logging in.
        assert attacker.post("/ui/login", data={"token": TOKEN}).status_code == 303


def test_wrong_tokens_on_the_pages_count_like_the_api(server: ServeProcess) -> None:
    with closing(_client(server, "127.0.0.4")) as attacker:
        codes = [attacker.get("/ui/healer", headers={"authorization": f"Bearer y{i}"}
                              ).status_code for i in range(FREE + 3)]
        assert codes[:FREE + 1] == [303] * (FREE + 1) and set(codes[FREE + 1:]) == {429}
        r = attacker.get("/api/v1/incidents", headers={"authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 429


def test_forwarded_for_counts_only_from_a_trusted_proxy(server: ServeProcess) -> None:
    with closing(_client(server, PROXY)) as proxy:
        def login(client_ip: str, token: str) -> int:
            return proxy.post("/ui/login", data={"token": token},
                              headers={"x-forwarded-for": client_ip}).status_code

        codes = [login("198.51.100.7", f"g{i}") for i in range(FREE + 3)]
        assert set(codes[FREE + 1:]) == {429}
        # Another client behind the same proxy is not slowed, nor the proxy itself.
        assert login("198.51.100.8", TOKEN) == 303
        assert proxy.post("/ui/login", data={"token": TOKEN}).status_code == 303


# -- sessions ----------------------------------------------------------------------------


def test_every_login_makes_a_new_session_and_ends_the_one_presented(
        server: ServeProcess) -> None:
    with closing(_client(server)) as browser:
        first = _login(browser)
        second = _login(browser)  # presents the first cookie
        assert _sid(first) != _sid(second)
        with closing(_with_cookie(server, first)) as old:
            assert not _logged_in(old)
        assert _logged_in(browser)
    with closing(_client(server)) as a, closing(_client(server)) as b:
        assert _sid(_login(a)) != _sid(_login(b))
        assert _logged_in(a) and _logged_in(b)


def test_the_list_shows_two_logins_without_secrets_and_ending_one_is_immediate(
        server: ServeProcess) -> None:
    with closing(_client(server, "127.0.0.1", headers={"user-agent": "ops-laptop/1"})) as a, \
            closing(_client(server, "127.0.0.6", headers={"user-agent": "ops-phone/2"})) as b:
        ca, cb = _login(a), _login(b)
        listing = a.get("/ui/sessions")
        assert listing.status_code == 200
        rows = {s["id"]: s for s in listing.json()["sessions"]}
        assert {_sid(ca), _sid(cb)} <= set(rows)
        assert (rows[_sid(cb)]["client"], rows[_sid(cb)]["agent"]) == ("127.0.0.6",
                                                                       "ops-phone/2")
        assert rows[_sid(ca)]["current"] and not rows[_sid(cb)]["current"]
        assert {"created", "last_seen", "expires"} <= set(rows[_sid(ca)])
        page = a.get("/ui/healer").text
        assert f'id="session-{_sid(cb)}"' in page and "ops-phone/2" in page
        for cookie in (ca, cb):
            secret = cookie.split(".")[1]
            assert secret not in listing.text and secret not in page

        end = f"/ui/sessions/{_sid(cb)}/end"
        assert a.post(end, data={"csrf": "0" * 64}).status_code == 403
        assert a.post(end, data={"csrf": _csrf(a)},
                      headers={"origin": "https://evil.example"}).status_code == 403
        assert _logged_in(b)
        r = a.post(end, data={"csrf": _csrf(a)})
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/healer?ended=")
        assert not _logged_in(b), "its cookie stopped working at once"
        assert _logged_in(a)
        assert _sid(cb) not in {s["id"] for s in a.get("/ui/sessions").json()["sessions"]}
        assert a.post(end, data={"csrf": _csrf(a)}).status_code == 404


def test_the_session_list_needs_read_access(server: ServeProcess) -> None:
    with closing(_client(server, "127.0.0.7")) as anonymous:
        assert anonymous.get("/ui/sessions").status_code == 303
        r = anonymous.get("/ui/sessions", headers={"authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200 and "sessions" in r.json()


def test_logout_revokes_also_across_a_restart(tmp_path: Path) -> None:
    server = _serve(tmp_path)
    try:
        with closing(_client(server)) as a, closing(_client(server)) as b:
            gone, kept = _login(a), _login(b)
            assert a.post("/ui/logout", data={"csrf": _csrf(a)}).status_code == 303
        with closing(_with_cookie(server, gone)) as old:
            assert not _logged_in(old), "a logged-out cookie is refused at once"
    finally:
        server.close()
    server = _serve(tmp_path)  # same state dir
    try:
        with closing(_with_cookie(server, gone)) as old:
            assert not _logged_in(old), "and stays refused after a restart"
        with closing(_with_cookie(server, kept)) as alive:
            assert _logged_in(alive), "a session nobody ended survives the restart"
    finally:
        server.close()
