"""Seed files: written for people, read back exactly, never overwritten."""

from __future__ import annotations

from pathlib import Path

import pytest

from healer.core import seeds
from healer.errors import RejectedFile, UnsafeNameError


class TestSeeds:
    def test_round_trip(self, tmp_path: Path) -> None:
        """A written seed reads back with its front matter and body."""
        s = seeds.Seed(sender="healer", to="human", subject="mac3 unreachable",
                       body="## What happened\nNATS is down.\n", type="escalation",
                       severity="critical", incident="inc-42")
        path = seeds.write(tmp_path, s, clock=1764400000)
        assert path.parent == tmp_path / "human"
        assert seeds.NAME_RE.fullmatch(path.name)
        text = path.read_text()
        assert text.startswith("---\nfrom: healer\nto: human\n")
        back = seeds.read(path)
        assert (back.sender, back.to, back.type, back.severity, back.incident) == (
            "healer", "human", "escalation", "critical", "inc-42")
        assert "NATS is down." in back.body

    def test_same_second_not_overwritten(self, tmp_path: Path) -> None:
        """Two seeds from one node in one second both survive."""
        s = seeds.Seed(sender="mac1", to="mac2", subject="a", body="b")
        p1 = seeds.write(tmp_path, s, clock=1764400000)
        p2 = seeds.write(tmp_path, s, clock=1764400000)
        assert p1 != p2 and p1.exists() and p2.exists()
        assert [p.name for p in seeds.inbox(tmp_path, "mac2")] == sorted([p1.name, p2.name])

    def test_archive(self, tmp_path: Path) -> None:
        p = seeds.write(tmp_path, seeds.Seed(sender="a", to="b", subject="s", body="x"))
        dest = seeds.archive(p)
        assert dest.parent.name == "archive" and not p.exists()
        assert seeds.inbox(tmp_path, "b") == []

    @pytest.mark.parametrize("to", ["../etc", "a/b", "", "x y"])
    def test_unsafe_recipient(self, tmp_path: Path, to: str) -> None:
        with pytest.raises(UnsafeNameError):
            seeds.write(tmp_path, seeds.Seed(sender="a", to=to, subject="s", body="x"))

    @pytest.mark.parametrize(
        ("text", "fragment"),
        [
            ("hello", "front matter"),
            ("---\n[1, 2]\n---\nbody", "mapping"),
            ("---\nfrom: a\nto: b\n---\nbody", "subject"),
            ("---\nfrom: a\nto: b\nsubject: s\ntimestamp: t\nseverity: loud\n---\n", "severity"),
            ("---\nfrom: ../a\nto: b\nsubject: s\ntimestamp: t\n---\n", "from"),
            ("---\nfrom: a\nto: b\nsubject: [\n---\n", "YAML"),
        ],
    )
    def test_bad_seed_rejected(self, text: str, fragment: str) -> None:
        with pytest.raises(RejectedFile, match=fragment):
            seeds.parse(text)

    def test_subject_too_long_refused_on_write(self, tmp_path: Path) -> None:
        with pytest.raises(RejectedFile):
            seeds.write(tmp_path, seeds.Seed(sender="a", to="b", subject="s" * 300, body="x"))
