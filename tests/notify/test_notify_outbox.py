"""The outbox as store records, on the file store (a one-replica install): a newer notice
replaces a pending one, retries back off and are bounded, given-up deliveries are kept for a
person (the oldest dropped), ``done`` removes only the notice that was sent, and an upgrade
moves an older healer's outbox files into the store without losing one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from healer.core.notify.base import Notice
from healer.core.notify.outbox import FAILED, OUTBOX, Outbox, item_key
from healer.core.store import FileStore


def notice(incident: str = "code-KeyError", state: str = "escalated", at: float = 1.0
           ) -> Notice:
    return Notice(incident=incident, kind="code", state=state, severity="critical",
                  title=f"{incident} {state}", at=at)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def box(state: Path, **kw: Any) -> Outbox:
    return Outbox(FileStore(state), **kw)


def test_a_newer_notice_replaces_the_pending_one_of_its_incident_and_target(state: Path
                                                                            ) -> None:
    b = box(state, backoff_s=10)
    b.put("slack", notice(state="investigating"), now=100.0)
    [first] = b.items()
    b.failed(first, "503", retryable=True, now=100.0)
    b.put("slack", notice(state="escalated"), now=200.0)
    b.put("pagerduty", notice(state="escalated"), now=200.0)
    items = {i.target: i for i in b.items()}
    assert set(items) == {"slack", "pagerduty"}
    assert items["slack"].notice.state == "escalated"
    assert (items["slack"].tries, items["slack"].next_at) == (0, 200.0)  # a fresh start


def test_a_retryable_failure_backs_off_doubling_up_to_the_cap(state: Path) -> None:
    b = box(state, backoff_s=10, max_backoff_s=30, max_attempts=10)
    b.put("slack", notice(), now=1000.0)
    waits = []
    for _ in range(4):
        [item] = b.items()
        assert b.failed(item, "HTTP 503", retryable=True, now=1000.0)
        waits.append(b.items()[0].next_at - 1000.0)
    assert waits == [10.0, 20.0, 30.0, 30.0]
    assert b.due(now=1029.0) == [] and len(b.due(now=1030.0)) == 1
    [item] = b.items()
    assert (item.tries, item.last_error) == (4, "HTTP 503")


def test_after_max_attempts_the_delivery_is_failed_and_shown(state: Path) -> None:
    b = box(state, backoff_s=1, max_attempts=3)
    b.put("slack", notice(), now=0.0)
    kept = []
    for t in range(3):
        [item] = b.items()
        kept.append(b.failed(item, "HTTP 502", retryable=True, now=float(t)))
    assert kept == [True, True, False] and b.items() == []
    [f] = b.failures()
    assert f == {"target": "slack", "incident": "code-KeyError", "state": "escalated",
                 "tries": 3, "error": "HTTP 502", "failed_at": 2.0}


def test_a_final_error_fails_at_once(state: Path) -> None:
    b = box(state)
    b.put("slack", notice(), now=0.0)
    [item] = b.items()
    assert not b.failed(item, "invalid_auth", retryable=False, now=5.0)
    assert b.items() == [] and b.failures()[0]["tries"] == 1


def test_failed_keeps_at_most_max_failed_the_oldest_dropped(state: Path) -> None:
    b = box(state, max_failed=3)
    for n in range(5):
        b.put("slack", notice(incident=f"code-e{n}"), now=0.0)
    for item in sorted(b.items(), key=lambda i: i.notice.incident):
        b.failed(item, "no", retryable=False, now=float(item.notice.incident[-1]))
    assert [f["incident"] for f in b.failures()] == ["code-e4", "code-e3", "code-e2"]


def test_done_removes_only_the_notice_that_was_read(state: Path) -> None:
    b = box(state)
    b.put("slack", notice(state="investigating"), now=0.0)
    [listed] = b.items()
    sent = b.claim(listed, "n1", until=60.0, now=0.0)
    assert sent is not None
    b.put("slack", notice(state="escalated"), now=1.0)  # while the first was being sent
    assert not b.done(sent)
    [newer] = b.due(now=1.0)
    assert newer.notice.state == "escalated"
    assert b.done(newer) and b.items() == []


def test_of_two_senders_with_one_listing_one_claims_it(state: Path) -> None:
    """A paused leader and its successor (or a listing older than the last send) hold the
    same item: the claim is compare-and-set on the revision listed, so one of them sends."""
    b = box(state)
    b.put("slack", notice(), now=0.0)
    [mine] = b.due(now=0.0)
    [theirs] = b.due(now=0.0)
    claimed = b.claim(theirs, "n2", until=60.0, now=0.0)
    assert claimed is not None and (claimed.claimed_by, claimed.claimed_until) == ("n2", 60.0)
    assert b.claim(mine, "n1", until=60.0, now=0.0) is None
    assert b.due(now=0.0) == []  # being sent: nobody lists it to send
    assert b.claim(claimed, "n1", until=90.0, now=10.0) is None  # claimed still
    assert b.done(claimed) and b.claim(mine, "n1", until=60.0, now=0.0) is None


def test_a_claim_that_ran_out_is_abandoned_not_due(state: Path) -> None:
    b = box(state)
    b.put("slack", notice(), now=0.0)
    [item] = b.due(now=0.0)
    assert b.claim(item, "n1", until=60.0, now=0.0) is not None
    items = b.items()
    assert b.abandoned(items, now=59.0) == [] and b.due(now=59.0) == []
    assert [i.claimed_by for i in b.abandoned(items, now=60.0)] == ["n1"]
    assert b.due(now=1e12) == []  # it is not sent again by being listed


def test_a_retry_of_a_replaced_notice_leaves_the_newer_one_as_it_is(state: Path) -> None:
    b = box(state, backoff_s=60)
    b.put("slack", notice(state="investigating"), now=0.0)
    [old] = b.items()
    b.put("slack", notice(state="healed"), now=1.0)
    assert b.failed(old, "HTTP 503", retryable=True, now=1.0)
    [item] = b.items()
    assert (item.notice.state, item.tries, item.next_at) == ("healed", 0, 1.0)


def test_names_are_checked_and_a_long_key_stays_a_store_key(state: Path) -> None:
    b = box(state)
    for target, incident in [("sl--ack", "code-x"), ("../slack", "code-x"),
                             ("slack", "code/../../x")]:
        with pytest.raises(ValueError, match="unsafe outbox name"):
            b.put(target, notice(incident=incident))
    long_a, long_b = "code-" + "a" * 123, "code-" + "a" * 122 + "b"
    keys = {item_key("pagerduty", long_a), item_key("pagerduty", long_b)}
    assert len(keys) == 2 and all(len(k) <= 128 for k in keys)
    b.put("pagerduty", notice(incident=long_a), now=0.0)
    assert [i.notice.incident for i in b.items()] == [long_a]


def write_old(path: Path, data: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_an_upgrade_moves_the_outbox_files_into_the_store(state: Path) -> None:
    """An older healer's ``<state>/notify/outbox/`` and ``notify/failed/`` files, as it wrote
    them, become records; the pending one keeps its tries and time, a record already in the
    store (newer) stays, and a file that is not a delivery is left for a person."""
    old = state / "notify"
    write_old(old / "outbox" / "slack--code-a.json",
              {"target": "slack", "notice": notice("code-a").as_dict(), "tries": 2,
               "next_at": 500.0, "last_error": "HTTP 503"})
    write_old(old / "outbox" / "webhook--code-b.json",
              {"target": "webhook", "notice": notice("code-b", "investigating").as_dict(),
               "tries": 0, "next_at": 1.0, "last_error": ""})
    write_old(old / "failed" / "pagerduty--code-c.json",
              {"target": "pagerduty", "notice": notice("code-c").as_dict(), "tries": 8,
               "last_error": "HTTP 400", "failed_at": 42.0})
    write_old(old / "outbox" / "mail--code-d.json", {"what": "not a delivery"})
    b = box(state)
    b.put("webhook", notice("code-b", "healed"), now=7.0)  # queued since: the newer one

    assert b.adopt_files(state) == 3
    items = {i.target: i for i in b.items()}
    assert set(items) == {"slack", "webhook"}
    assert (items["slack"].tries, items["slack"].next_at, items["slack"].last_error) == (
        2, 500.0, "HTTP 503")
    assert items["webhook"].notice.state == "healed"
    assert [(f["target"], f["failed_at"]) for f in b.failures()] == [("pagerduty", 42.0)]
    assert sorted(p.name for p in old.rglob("*") if p.is_file()) == ["mail--code-d.json"]
    assert not (old / "failed").exists()
    assert b.adopt_files(state) == 0  # once: nothing moved twice


def test_an_upgrade_keeps_a_failed_files_time_when_it_has_none(state: Path) -> None:
    path = state / "notify" / "failed" / "slack--code-a.json"
    write_old(path, {"target": "slack", "notice": notice("code-a").as_dict(), "tries": 1})
    os.utime(path, (1234.0, 1234.0))
    b = box(state)
    assert b.adopt_files(state) == 1
    assert b.failures()[0]["failed_at"] == 1234.0
    assert not (state / "notify").exists()


def test_the_records_are_in_the_store_not_in_a_local_folder(state: Path) -> None:
    store = FileStore(state)
    b = Outbox(store)
    b.put("slack", notice(), now=0.0)
    [item] = b.items()
    b.failed(item, "no", retryable=False, now=0.0)
    b.put("slack", notice(state="healed"), now=0.0)
    assert store.keys(OUTBOX) == store.keys(FAILED) == ["slack--code-KeyError"]
    assert not (state / "notify").exists()
