"""The per-client throttle and the dashboard's session records, with time passed in.

The throttle promises: free failures cost nothing, then the wait doubles up to a cap; a
waiting client is refused until its wait ends and nobody else ever waits; the memory is
bounded by ``max_clients``; a quiet client starts afresh. Sessions promise: ended means
ended (also for a late "last seen" write), an expired or forged cookie proves nothing, the
list never shows a secret, and the count is bounded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from healer.api.dashboard.sessions import KIND, TOUCH_S, Sessions
from healer.api.throttle import Throttle, ThrottlePolicy, address_key, retry_after_header
from healer.core.store import FileStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


POLICY = ThrottlePolicy(free_failures=3, base_delay_s=1.0, max_delay_s=8.0,
                        forget_after_s=100.0, max_clients=16)


def test_free_failures_cost_nothing_then_the_wait_doubles_up_to_the_cap() -> None:
    clock = Clock()
    t = Throttle(POLICY, clock=clock)
    waits = []
    for _ in range(8):
        assert t.retry_after("a") == 0
        waits.append(t.failed("a"))
        clock.now += waits[-1]  # the client waits it out exactly
    assert waits == [0, 0, 0, 1, 2, 4, 8, 8]


def test_a_waiting_client_is_refused_until_its_wait_ends() -> None:
    clock = Clock()
    t = Throttle(POLICY, clock=clock)
    for _ in range(5):
        t.failed("a")
    assert t.retry_after("a") == 2
    clock.now += 1.5
    assert t.retry_after("a") == pytest.approx(0.5)
    clock.now += 0.5
    assert t.retry_after("a") == 0


def test_nobody_else_waits() -> None:
    t = Throttle(POLICY, clock=Clock())
    for _ in range(50):
        t.failed("attacker")
    assert t.retry_after("attacker") > 0
    assert t.retry_after("operator") == 0


def test_a_quiet_client_starts_afresh() -> None:
    clock = Clock()
    t = Throttle(POLICY, clock=clock)
    for _ in range(4):
        t.failed("a")
    clock.now += 101
    assert t.retry_after("a") == 0
    assert t.failed("a") == 0, "its old failures were forgotten"


def test_a_spray_of_addresses_is_bounded() -> None:
    t = Throttle(POLICY, clock=Clock())
    for i in range(1000):
        t.failed(f"10.0.{i // 256}.{i % 256}")
    assert t.remembered == POLICY.max_clients


def test_huge_failure_counts_stay_at_the_cap() -> None:
    assert POLICY.delay(10_000) == POLICY.max_delay_s


def test_retry_after_is_whole_seconds_and_never_zero() -> None:
    assert retry_after_header(0.01) == {"Retry-After": "1"}
    assert retry_after_header(4.2) == {"Retry-After": "5"}


@pytest.mark.parametrize(("host", "key"), [
    ("127.0.0.2", "127.0.0.2"),
    ("::1", "::1"),
    ("::ffff:192.0.2.7", "192.0.2.7"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),  # one host's /64 counts as one client
    ("", "unknown"),
])
def test_client_keys(host: str, key: str) -> None:
    assert address_key(host) == key


# -- sessions ---------------------------------------------------------------------------


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sessions(tmp_path: Path, clock: Clock) -> Sessions:
    return Sessions(FileStore(tmp_path), "tok-0123456789abcdef", ttl_s=3600, max_sessions=3,
                    clock=clock)


def test_a_session_proves_itself_until_it_is_ended(sessions: Sessions) -> None:
    sid, cookie = sessions.create("127.0.0.1", "curl/8")
    assert sessions.check(cookie) == sid
    assert sessions.end(sid)
    assert sessions.check(cookie) == ""
    assert not sessions.end(sid)


def test_forged_and_expired_cookies_prove_nothing(sessions: Sessions, clock: Clock) -> None:
    sid, cookie = sessions.create("127.0.0.1", "")
    secret = cookie.split(".")[1]
    assert sessions.check(f"{sid}.{'0' * 64}") == ""
    assert sessions.check(f"{'0' * 16}.{secret}") == ""
    assert sessions.check("garbage") == ""
    clock.now += 3600
    assert sessions.check(cookie) == ""
    assert sessions.list() == []


def test_another_token_ends_every_session(tmp_path: Path, sessions: Sessions) -> None:
    _, cookie = sessions.create("127.0.0.1", "")
    other = Sessions(FileStore(tmp_path), "another-token-0123456789")
    assert other.check(cookie) == ""


def test_the_list_and_the_state_dir_hold_no_secret(tmp_path: Path, sessions: Sessions,
                                                   clock: Clock) -> None:
    _, first = sessions.create("127.0.0.1", "Firefox")
    clock.now += 5
    _, second = sessions.create("127.0.0.2", "Chromium\x1b[31m")
    listed = [s.to_json() for s in sessions.list()]
    assert [(s["client"], s["agent"]) for s in listed] == [("127.0.0.2", "Chromium[31m"),
                                                           ("127.0.0.1", "Firefox")]
    stored = "".join(p.read_text() for p in tmp_path.rglob("*.json"))
    for cookie in (first, second):
        secret = cookie.split(".")[1]
        assert secret not in json.dumps(listed) and secret not in stored


def test_last_seen_moves_but_never_revives_an_ended_session(sessions: Sessions,
                                                            clock: Clock) -> None:
    sid, cookie = sessions.create("127.0.0.1", "")
    clock.now += TOUCH_S + 1
    assert sessions.check(cookie) == sid
    assert sessions.list()[0].last_seen == clock.now
    stale = sessions.store.get(KIND, sid)
    assert stale is not None
    sessions.end(sid)
    clock.now += TOUCH_S + 1
    sessions._touch(stale, clock.now)  # a request that read the record just before the end
    assert sessions.store.get(KIND, sid) is None


def test_the_number_of_sessions_is_bounded(sessions: Sessions, clock: Clock) -> None:
    cookies = []
    for _ in range(5):
        clock.now += 1
        cookies.append(sessions.create("127.0.0.1", "")[1])
    assert len(sessions.list()) == 3
    assert [bool(sessions.check(c)) for c in cookies] == [False, False, True, True, True]
