"""Duties on a shared store with a fake clock: take, renew, lose, stop before expiry, fence,
release — on the file store and on JetStream (the ``backend`` fixture)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from healer.core.duties import Duties, fenced_update, read_leaders
from healer.core.store import Store
from healer.errors import ConflictError, StoreError
from healer.loop.leading import Leading

TTL = 15.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Flaky(Store):
    """A store handle whose writes fail while ``down`` (the network to the store is cut)."""

    def __init__(self, inner: Store):
        self.inner, self.down = inner, False

    def get(self, kind: str, key: str) -> Any:
        if self.down:
            raise StoreError("store unreachable")
        return self.inner.get(kind, key)

    def put(self, kind: str, key: str, data: dict[str, Any], **kw: Any) -> Any:
        if self.down:
            raise StoreError("store unreachable")
        return self.inner.put(kind, key, data, **kw)

    def delete(self, kind: str, key: str, **kw: Any) -> bool:
        return self.inner.delete(kind, key, **kw)

    def keys(self, kind: str) -> list[str]:
        return self.inner.keys(kind)

    def add_member(self, set_name: str, key: str) -> None:
        self.inner.add_member(set_name, key)

    def remove_member(self, set_name: str, key: str) -> None:
        self.inner.remove_member(set_name, key)

    def members(self, set_name: str) -> list[str]:
        return self.inner.members(set_name)


@pytest.fixture
def pair(backend: tuple[str, Any]) -> tuple[Duties, Duties, Clock]:
    """Two replicas (a, b) of one duty ``watch`` on one store, on one fake clock."""
    _name, factory = backend
    clock = Clock()
    a = Duties(Flaky(factory()), "n1/a", TTL, clock=clock)
    b = Duties(factory(), "n2/b", TTL, clock=clock)
    for d in (a, b):
        d.add("watch")
    return a, b, clock


class TestDuties:
    def test_one_replica_takes_a_duty(self, pair: tuple[Duties, Duties, Clock]) -> None:
        a, b, clock = pair
        assert a.tick() == {"watch": True}
        assert b.tick() == {"watch": False}
        rows = a.leaders()
        assert [(r["duty"], r["owner"], r["since"], r["mine"]) for r in rows] == [
            ("watch", "n1/a", clock.now, True)]
        assert b.leaders()[0]["mine"] is False
        assert a.fence("watch") > 0
        with pytest.raises(ConflictError):
            b.fence("watch")

    def test_renewal_keeps_the_duty_and_its_token(self, pair: tuple[Duties, Duties,
                                                                     Clock]) -> None:
        a, b, clock = pair
        a.tick()
        token = a.fence("watch")
        for _ in range(10):  # far past the first ttl, renewed every ttl/3
            clock.now += TTL / 3
            assert a.tick() == {"watch": True}
            assert b.tick() == {"watch": False}
        assert a.fence("watch") == token

    def test_a_replica_that_cannot_renew_stops_before_the_lease_expires(
            self, pair: tuple[Duties, Duties, Clock]) -> None:
        a, b, clock = pair
        a.tick()
        taken = clock.now
        a.store.down = True  # type: ignore[attr-defined]
        clock.now = taken + TTL / 3
        a.tick()  # fails, logged
        assert a.holds("watch")
        clock.now = taken + TTL - TTL / 3 - 0.01
        assert a.holds("watch")
        clock.now = taken + TTL - TTL / 3
        assert not a.holds("watch")  # stopped a third of the ttl before expiry ...
        assert b.tick() == {"watch": False}  # ... while nobody else could take it yet
        clock.now = taken + TTL
        assert b.tick() == {"watch": True}

    def test_a_paused_leader_loses_the_duty_and_its_fence(
            self, pair: tuple[Duties, Duties, Clock]) -> None:
        a, b, clock = pair
        a.tick()
        old = a.fence("watch")
        clock.now += TTL + 1  # a was paused (SIGSTOP, a long GC): no renewal
        assert b.tick() == {"watch": True}
        new = b.fence("watch")
        assert new > old
        with pytest.raises(ConflictError):
            a.fence("watch")
        assert a.tick() == {"watch": False}  # renew finds another owner
        assert [r["owner"] for r in a.leaders()] == ["n2/b"]

    def test_fence_rereads_the_lease(self, pair: tuple[Duties, Duties, Clock]) -> None:
        """A replica whose clock says it still holds the duty (clocks disagree) is refused
        once the record shows another owner."""
        a, b, clock = pair
        a.tick()
        skewed = Duties(b.store, "n3/c", TTL, clock=lambda: clock.now + TTL + 1)
        skewed.add("watch")
        assert skewed.tick() == {"watch": True}
        assert a.holds("watch")
        with pytest.raises(ConflictError):
            a.fence("watch")
        assert not a.holds("watch")

    def test_release_hands_over_at_once(self, pair: tuple[Duties, Duties, Clock]) -> None:
        a, b, _clock = pair
        a.tick()
        old = a.fence("watch")
        a.release()
        assert not a.holds("watch")
        assert [r["owner"] for r in read_leaders(b.store, clock=_clock)] == [None]
        assert b.tick() == {"watch": True}  # no wait for the ttl
        assert b.fence("watch") > old  # released, not deleted: tokens only grow
        b.release()
        assert a.tick() == {"watch": False}  # a renewal late after the release takes nothing

    def test_a_late_write_under_an_old_token_is_refused(
            self, pair: tuple[Duties, Duties, Clock]) -> None:
        a, b, clock = pair
        a.tick()
        old = a.fence("watch")

        def note(who: str) -> Any:
            return lambda cur: {**(cur or {}), "by": who}

        fenced_update(a.store, "shared", "r1", note("a"), duty="watch", token=old)
        clock.now += TTL + 1
        b.tick()
        new = b.fence("watch")
        fenced_update(b.store, "shared", "r1", note("b"), duty="watch", token=new)
        with pytest.raises(ConflictError):
            fenced_update(a.store, "shared", "r1", note("a"), duty="watch", token=old)
        assert b.store.require("shared", "r1").data["by"] == "b"
        with pytest.raises(ConflictError):
            a.check("watch", old)

    def test_names_are_checked(self, pair: tuple[Duties, Duties, Clock]) -> None:
        from healer.errors import UnsafeNameError

        with pytest.raises(UnsafeNameError):
            pair[0].add("../etc")


class Recorder:
    name = "watcher"

    def __init__(self) -> None:
        self.events: list[str] = []

    async def start(self) -> None:
        self.events.append("start")

    async def stop(self) -> None:
        self.events.append("stop")


class TestLeading:
    async def test_services_and_jobs_follow_the_duty(
            self, pair: tuple[Duties, Duties, Clock]) -> None:
        """The led service starts when the duty is taken and stops, with the job in flight
        cancelled, once the duty can no longer be renewed; release frees it at once."""
        a, b, clock = pair
        leading = Leading(a)
        svc = Recorder()
        led = leading.wrap("watch", svc)
        await led.start()
        assert svc.events == []  # not leading yet
        await leading.tick()
        assert svc.events == ["start"]

        started = asyncio.Event()

        async def long_job() -> None:
            started.set()
            await asyncio.Event().wait()

        job = asyncio.ensure_future(leading.run_job("watch", long_job()))
        await started.wait()
        a.store.down = True  # type: ignore[attr-defined]
        clock.now += TTL - TTL / 3
        await leading.apply()
        await asyncio.wait_for(job, 5)  # cancelled, returns quietly
        assert svc.events == ["start", "stop"]

        a.store.down = False  # type: ignore[attr-defined]
        await leading.tick()  # still ours in the store: taken again
        assert svc.events == ["start", "stop", "start"]
        await leading.release()
        assert svc.events[-1] == "stop"
        assert b.tick() == {"watch": True}
