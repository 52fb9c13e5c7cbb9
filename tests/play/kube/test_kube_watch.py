"""The watcher's view of the cluster survives what API servers do: watches that expire
(410 Gone) mid-stream, a server that restarts, lists that come in pages."""

from __future__ import annotations

from typing import Any

from healer.testing.kube import crash_loop, pod
from healer.testing.wait import until

LABELS = {"workflow": "play-task-7-x", "agent": "rex"}


def _pods(rig: Any, *names: str) -> None:
    for name in names:
        rig.kube.objects.create("pods", pod(name, labels=LABELS, started=rig.clock()))


class TestWatchProtocol:
    async def test_an_expired_watch_relists_without_missing_or_repeating(self, rig: Any
                                                                         ) -> None:
        """410 Gone mid-stream: the watcher lists again; a change made while it was cut off
        (a pod deleted, another crashing) is seen, and an alert already fired is not fired
        again."""
        _pods(rig, "p-a", "p-b", "p-c")
        await until(lambda: len(rig.watcher.state.pods) == 3, timeout=10)
        rig.kube.objects.patch("pods", "cto", "p-a", crash_loop())
        await until(lambda: rig.incidents("A7"), timeout=10)
        pods = next(r for r in rig.watcher.reflectors if r.kind.plural == "pods")
        lists = pods.stats.lists
        assert rig.kube.objects.expire_watches() >= 1
        # Compacted: these changes are only in the objects, not in any history a watch
        # could resume from.
        rig.kube.objects.delete("pods", "cto", "p-c")
        rig.kube.objects.patch("pods", "cto", "p-b", crash_loop(reason="ImagePullBackOff"))
        await until(lambda: pods.stats.lists > lists and pods.stats.gone >= 1, timeout=10)
        await until(lambda: ("cto", "p-c") not in rig.watcher.state.pods, timeout=10)
        await until(lambda: len(_alert_records(rig)[0]["targets"]) == 2, timeout=10)
        # One incident for rex's A7 (two pods), counted once per pod: no repeat from the relist.
        assert len(rig.incidents("A7")) == 1
        assert _alert_records(rig)[0]["count"] == 2

    async def test_bookmarks_keep_a_quiet_watch_current(self, rig: Any) -> None:
        """allowWatchBookmarks: a watch with no changes still moves its resourceVersion."""
        _pods(rig, "p-q")
        await until(lambda: rig.watcher.state.pods, timeout=10)
        pods = next(r for r in rig.watcher.reflectors if r.kind.plural == "pods")
        await until(lambda: pods.stats.bookmarks >= 1, timeout=10)
        assert any("allowWatchBookmarks=true" in r for r in rig.kube.requests)

    async def test_a_restarted_server_is_reconnected_and_changes_while_down_are_seen(
            self, rig: Any) -> None:
        """The API server goes away and comes back on the same address with the same data
        (and a change made meanwhile): the watcher reconnects with back-off and sees it."""
        _pods(rig, "p-r")
        await until(lambda: rig.watcher.state.pods, timeout=10)
        rig.kube.stop()
        rig.kube.objects.patch("pods", "cto", "p-r", crash_loop())
        pods = next(r for r in rig.watcher.reflectors if r.kind.plural == "pods")
        await until(lambda: pods.stats.errors >= 1, timeout=10)
        rig.kube.start()
        await until(lambda: rig.incidents("A7"), timeout=15)
        assert len(rig.incidents("A7")) == 1

    async def test_lists_are_read_in_pages(self, make_rig: Any) -> None:
        """limit/continue: 25 pods in pages of 10 are all tracked."""
        rig = await make_rig(page_size=10)
        _pods(rig, *[f"p-{i:02d}" for i in range(25)])
        await rig.watcher.stop()  # list again from scratch with the pods already there
        from healer.play.alerts import AlertSink
        from healer.play.kube.watcher import KubeWatcher

        again = KubeWatcher(rig.watcher.settings, rig.play.store, AlertSink.for_play(rig.play),
                            clock=rig.clock)
        await again.start()
        await until(lambda: len(again.state.pods) == 25, timeout=10)
        assert sum(1 for r in rig.kube.requests if "/pods?" in r and "limit=10" in r
                   and "watch" not in r) >= 3
        await again.stop()
        await rig.play.stop()


def _alert_records(rig: Any) -> list[dict[str, Any]]:
    from healer.play import alerts

    return alerts.firing(rig.play.store)


class TestLeadership:
    async def test_a_stopped_watcher_watches_again_when_started_again(self, rig: Any) -> None:
        """A replica that loses the kube-watcher duty stops the watcher; when it leads again
        the same watcher starts afresh: it connects, lists and alerts on what it sees."""
        _pods(rig, "p-s")
        await until(lambda: rig.watcher.state.pods, timeout=10)
        await rig.watcher.stop()
        rig.kube.objects.patch("pods", "cto", "p-s", crash_loop())
        await rig.watcher.start()
        await until(lambda: rig.incidents("A7"), timeout=10)
        assert all(not t.done() for t in rig.watcher._tasks)
