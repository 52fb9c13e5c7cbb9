"""The incident ledger: one record per (kind, key), its state machine, indexes and counters."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from healer.core import gate
from healer.core.incidents import Ledger, Signal
from healer.core.store import FileStore
from healer.errors import UsageError


def ledger(tmp_path: Path) -> Ledger:
    return Ledger(FileStore(tmp_path / "state"))


def sig(key: str = "k1", kind: str = "code", **kw: Any) -> Signal:
    return Signal(kind=kind, key=key, source=kw.pop("source", "test"), **kw)


class TestIdentity:
    def test_batches_are_one_incident(self, tmp_path: Path) -> None:
        """The same key in batches of 1 and 2 is one incident with a count of 3."""
        book = ledger(tmp_path)
        first = book.receive(sig(count=1))
        again = book.receive(sig(count=2))
        assert (first.action, again.action) == ("opened", "duplicate")
        inc = book.find("code", "k1")
        assert inc is not None and inc["count"] == 3 and inc["id"] == "code-k1"
        assert inc["first_seen"] <= inc["last_seen"]
        assert book.list().total == 1

    def test_one_delivery_filed_twice_counts_once(self, tmp_path: Path) -> None:
        """An intake that files again after the store failed mid-way (the write may have
        landed) names the delivery: the second filing changes nothing; a new one counts."""
        book = ledger(tmp_path)
        assert book.receive(sig(count=3, delivery="d1")).action == "opened"
        assert book.receive(sig(count=3, delivery="d1")).action == "duplicate"
        book.receive(sig(count=2, delivery="d2"))
        book.receive(sig(count=2, delivery="d2"))
        inc = book.find("code", "k1")
        assert inc is not None and inc["count"] == 5

    def test_kinds_do_not_collide(self, tmp_path: Path) -> None:
        book = ledger(tmp_path)
        book.receive(sig("same", "code"))
        book.receive(sig("same", "fleet"))
        assert {i["kind"] for i in book.list().items} == {"code", "fleet"}

    @pytest.mark.parametrize("bad", [{"key": "../x"}, {"key": "a b"}, {"kind": "nope"},
                                     {"status": "maybe"}, {"severity": "urgent"}])
    def test_bad_signals_are_refused(self, bad: dict[str, Any]) -> None:
        with pytest.raises(UsageError):
            Signal(**{"kind": "code", "key": "k", "source": "t", **bad})

    def test_racing_processes_make_one_incident_and_start_one_run(
            self, backend: tuple[str, Any], tmp_path: Path,
            request: pytest.FixtureRequest) -> None:
        """Eight processes receiving one key and asking the gate at once (file store and
        JetStream): one incident counting 8, exactly one admitted run, seven joined."""
        name, factory = backend
        store = factory()
        if name == "file":
            spec: tuple[str, ...] = ("file", str(store.root))
        else:
            spec = ("jetstream", request.getfixturevalue("nats_server").url, store.bucket_name)
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        procs = [ctx.Process(target=_race_once, args=(spec, results)) for _ in range(8)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        assert all(p.exitcode == 0 for p in procs)
        reasons = sorted(results.get(timeout=5) for _ in procs)
        assert reasons == ["accepted"] + ["already_investigating"] * 7
        book = Ledger(store)
        inc = book.find("code", "raced")
        assert inc is not None and inc["count"] == 8 and inc["attempts"] == 1
        assert book.stats()["opened"] == {"code": 1}
        assert book.ids("healing") == ["code-raced"]


def _race_once(spec: tuple[str, ...], results: Any) -> None:
    from healer.core.store import Store

    store: Store
    if spec[0] == "file":
        store = FileStore(spec[1])
    else:
        from healer.testing.nats import jetstream_store

        store = jetstream_store(spec[1], spec[2])
    book = Ledger(store)
    sig = Signal(kind="code", key="raced", source="race")
    book.receive(sig)
    d = gate.admit(store, "raced", lambda: f"run-{id(store)}", 0.0, gate.Policy(),
                   lambda: True, record=lambda aid: book.started(sig.id, aid, "racing"))
    results.put(d.reason)
    store.close()


class TestStateMachine:
    def test_refusal_is_recorded_and_counted(self, tmp_path: Path) -> None:
        """A signal the gate turns down stays visible with the gate's reason."""
        book = ledger(tmp_path)
        no = gate.Decision(gate.NO_MODEL, "No model available")
        book.receive(sig(), decision=no)
        book.receive(sig(), decision=no)
        inc = book.find("code", "k1")
        assert inc is not None and inc["status"] == "open"
        assert inc["gate"]["reason"] == "no_model" and inc["rejections"] == {"no_model": 2}
        assert book.stats()["decisions"]["code"]["no_model"] == 2

    def test_attempt_fix_and_resolution(self, tmp_path: Path) -> None:
        book = ledger(tmp_path)
        iid = book.receive(sig()).id
        book.started(iid, "a1", "an agent works on it")
        inc = book.require(iid)
        assert (inc["status"], inc["attempts"], inc["doing"]) == ("healing", 1,
                                                                  "an agent works on it")
        book.attempt_ended(iid, "a1", "pr_open", status="fixed")
        book.resolve(iid, "fix merged")
        inc = book.require(iid)
        assert inc["status"] == "resolved" and inc["resolved_by"] == "fix merged"
        assert not inc.get("doing")
        assert book.ids("resolved") == [iid] and book.ids("open") == []
        assert book.stats()["status"]["code"] == {"open": 0, "healing": 0, "fixed": 0,
                                                  "resolved": 1}

    def test_resolved_signal_stops_a_running_attempt(self, tmp_path: Path) -> None:
        """A resolution during an attempt asks it to stop; its end does not reopen."""
        book = ledger(tmp_path)
        iid = book.receive(sig()).id
        book.started(iid, "a1", "healing")
        assert not book.should_stop(iid)
        assert book.receive(sig(status="resolved", source="sentry")).action == "resolved"
        assert book.should_stop(iid)
        book.attempt_ended(iid, "a1", "failed", status="open")
        assert book.require(iid)["status"] == "resolved"

    def test_an_attempt_starting_after_the_resolution_does_not_reopen(
            self, tmp_path: Path) -> None:
        """The source cleared it between the attempt's last check and its start (a busy
        machine): the incident stays resolved and the attempt is told to stop."""
        book = ledger(tmp_path)
        iid = book.receive(sig()).id
        book.resolve(iid, "cleared at the source")
        book.started(iid, "late", "a remediation that was already queued")
        inc = book.require(iid)
        assert (inc["status"], inc["attempts"]) == ("resolved", 1) and not inc.get("doing")
        assert book.should_stop(iid)
        book.attempt_ended(iid, "late", "failed", status="open")
        assert book.require(iid)["status"] == "resolved"

    def test_firing_again_reopens(self, tmp_path: Path) -> None:
        book = ledger(tmp_path)
        book.receive(sig())
        book.receive(sig(status="resolved"))
        again = book.receive(sig())
        assert again.action == "reopened" and again.status == "open"
        assert book.require("code-k1")["reopened"] == 1

    def test_resolution_of_the_unknown_is_ignored(self, tmp_path: Path) -> None:
        book = ledger(tmp_path)
        assert book.receive(sig(status="resolved")).action == "ignored"
        assert book.list().total == 0

    def test_escalation_keeps_the_seed_file(self, tmp_path: Path) -> None:
        book = ledger(tmp_path)
        iid = book.receive(sig()).id
        book.escalated(iid, seed_file="/x/human/seed.md", reason="UNFIXABLE: config")
        inc = book.require(iid)
        assert inc["status"] == "escalated"
        assert inc["escalation"]["seed_file"] == "/x/human/seed.md"
        assert book.stats()["escalations"] == {"code": 1}


class TestListing:
    def test_active_first_then_recent_and_paging(self, tmp_path: Path) -> None:
        book = ledger(tmp_path)
        for i in range(30):
            iid = book.receive(sig(f"k{i}", "play" if i % 2 else "code")).id
            if i < 25:
                book.resolve(iid, "test")
        page = book.list(limit=10)
        assert page.total == 30 and len(page.items) == 10 and page.next_offset == 10
        assert [i["status"] for i in page.items[:5]] == ["open"] * 5
        rest = book.list(limit=10, offset=10).items + book.list(limit=10, offset=20).items
        ids = [i["id"] for i in page.items + rest]
        assert len(set(ids)) == 30
        only = book.list(kind="play", status="resolved", limit=50)
        assert only.total == 12 and {i["kind"] for i in only.items} == {"play"}

    def test_bad_filters_are_usage_errors(self, tmp_path: Path) -> None:
        with pytest.raises(UsageError):
            ledger(tmp_path).list(kind="nope")
        with pytest.raises(UsageError):
            ledger(tmp_path).list(status="nope")


@pytest.mark.parametrize("text", ["Bn..3.tool_mismatch", "..", "a b/c", "-x-", "y" * 300,
                                  "\x00\udcff"])
def test_every_text_gives_a_usable_key(text: str) -> None:
    """Whatever an intake derives a key from (a play id with '..', a path, control
    characters), the key is a safe name and the same text always gives the same key."""
    from healer.core.incidents import digest

    key = digest(text)
    assert Signal(kind="play", key=key, source="t").key == key == digest(text)
