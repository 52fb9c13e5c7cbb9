"""Alert grouping: repeats collapse, one code in one workflow family shares an incident."""

from __future__ import annotations

import pytest

from healer.detect.alert import Alert
from healer.detect.grouping import Grouper, family, normalise, target_of

T0 = 1714557600.0


def alert(code: str = "R2", line: str = "connection refused", *, pod: str = "play-task-4-impl-a",
          ts: float | None = None, pid: str = "connection-refused") -> Alert:
    return Alert(code, pid, 2, "high", "loki", 1, line, ts, {"pod": pod})


class TestFamily:
    @pytest.mark.parametrize(("target", "fam"), [
        ("play-task-4-impl-x7k2p", "play-task-4"),
        ("play-task-4", "play-task-4"),
        ("play-task-12-quality-9fq4d-abc", "play-task-12"),
        ("coderun-abc", "coderun-abc"),
        ("42-things", "42-things"),
        ("healer", "healer"),
    ])
    def test_family(self, target: str, fam: str) -> None:
        """A target's family is its name up to the first all-digit segment."""
        assert family(target) == fam

    def test_normalise_masks_changing_parts(self) -> None:
        """Numbers, UUIDs and timestamps are masked, so repeats look identical."""
        a = normalise("2024-05-01T10:00:00Z req 7f1c2a3b-0000-4000-8000-123456789abc took 31ms")
        b = normalise("2024-05-02T11:12:13Z req 00000000-1111-4222-8333-444444444444 took 7ms")
        assert a == b == "<TS> req <UUID> took <ID>"

    def test_target_from_labels_or_source(self) -> None:
        """The target is the pod label when there is one, else the source."""
        assert target_of(alert(pod="p-1")) == "p-1"
        assert target_of(Alert("R2", "x", 2, "high", "file.log", 1, "l")) == "file.log"


class TestGrouper:
    def test_identical_alerts_collapse(self) -> None:
        """The same alert again for the same target only bumps count and last seen."""
        g = Grouper()
        first = g.add(alert(line="refused after 31ms"), now=T0)
        again = g.add(alert(line="refused after 97ms"), now=T0 + 10)
        assert first.new_group and not again.new_group
        assert again.group.count == 2
        assert (again.group.first_seen, again.group.last_seen) == (T0, T0 + 10)
        assert len(g.groups()) == 1

    def test_family_shares_incident(self) -> None:
        """One code in one workflow family within the window shares one incident key."""
        g = Grouper(window_s=1800)
        a = g.add(alert(pod="play-task-4-impl-x"), now=T0)
        b = g.add(alert(pod="play-task-4-test-y", line="other text"), now=T0 + 600)
        assert a.new_incident and not b.new_incident
        assert a.incident.key == b.incident.key == f"HEAL-R2-play-task-4-{int(T0)}"
        assert b.incident.targets == {"play-task-4-impl-x", "play-task-4-test-y"}
        assert b.incident.count == 2 and len(g.groups()) == 2

    def test_other_code_or_family_is_another_incident(self) -> None:
        """A different code, or a different family, opens its own incident."""
        g = Grouper()
        a = g.add(alert(), now=T0)
        b = g.add(alert(code="R5", pid="auth-broken", line="invalid token"), now=T0)
        c = g.add(alert(pod="play-task-5-impl-z"), now=T0)
        assert len({a.incident.key, b.incident.key, c.incident.key}) == 3

    def test_window_closes(self) -> None:
        """After the window a new incident opens for the same code and family."""
        g = Grouper(window_s=1800)
        a = g.add(alert(), now=T0)
        b = g.add(alert(), now=T0 + 1801)
        assert b.new_incident and b.new_group and a.incident.key != b.incident.key

    def test_alert_timestamp_wins(self) -> None:
        """An alert's own timestamp is its time, not when it was grouped."""
        g = Grouper(window_s=60)
        g.add(alert(ts=T0), now=T0 + 5000)
        late = g.add(alert(ts=T0 + 30), now=T0 + 9000)
        assert not late.new_incident

    def test_memory_is_bounded(self) -> None:
        """Idle groups expire and at most max_groups are kept."""
        g = Grouper(window_s=100, max_groups=5)
        for i in range(20):
            g.add(alert(pod=f"pod-{i}-x", line=f"line {i} text"), now=T0)
        assert len(g.groups()) == 5 and len(g.incidents()) == 5
        g.add(alert(pod="late-1-x"), now=T0 + 1000)
        assert [x.target for x in g.groups()] == ["late-1-x"]

    def test_incident_key_is_a_safe_name(self) -> None:
        """Incident keys are usable as record names even for odd targets."""
        from healer.core.names import safe_name

        g = Grouper()
        key = g.add(alert(pod="we!rd/pod name 7 x"), now=T0).incident.key
        assert safe_name(key, "incident") == key
