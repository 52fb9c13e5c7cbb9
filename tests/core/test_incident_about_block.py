"""The ``about`` block core keeps for every kind: short fields within fixed limits, a bad
name or type refused with a reason, a repeat updating the scalars while the capability folds
the maps (``tally``), whatever order a store gives the keys back in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from healer.core import about as ab
from healer.core import incidents as inc
from healer.core.store import FileStore
from healer.errors import UsageError


def test_text_is_cut_and_stripped_of_control_characters() -> None:
    got = ab.clean({"culprit": "a\x1b[31m\nb" + "x" * 500, "line": 3, "empty": "",
                    "none": None})
    assert got == {"culprit": ("a [31m b" + "x" * 500)[:ab.MAX_TEXT], "line": 3}


@pytest.mark.parametrize("bad", [{"Bad": 1}, {"a-b": 1}, {"x": [1, 2]}, {"x": float("nan")},
                                 {f"f{i}": i for i in range(ab.MAX_FIELDS + 1)},
                                 {"m": {"l": {f"k{i}": i for i in range(ab.MAX_INNER + 1)}}}])
def test_a_bad_name_or_type_is_refused_with_a_reason(bad: dict[str, object]) -> None:
    with pytest.raises(UsageError, match="about"):
        ab.clean(bad)


def test_tally_counts_a_release_again_from_its_first_sighting() -> None:
    about: dict[str, object] = {}
    ab.tally(about, "releases", "r1", 1000.0)
    ab.tally(about, "releases", "r1", 2000.0, count=2)
    assert about["releases"] == {"r1": {"first": 1000.0, "last": 2000.0, "count": 3}}


def test_tally_keeps_the_most_recently_seen_releases_whatever_the_key_order() -> None:
    about: dict[str, object] = {}
    for n in range(ab.MAX_ENTRIES):
        ab.tally(about, "releases", f"r{n}", 1000.0 + n)
    ab.tally(about, "releases", "r0", 5000.0)  # the oldest seen again: now the newest
    shuffled = dict(sorted(about["releases"].items(), reverse=True))  # as a store gives it
    about = {"releases": shuffled}
    ab.tally(about, "releases", "new", 6000.0)
    releases = ab.clean(about)["releases"]
    assert len(releases) == ab.MAX_ENTRIES
    assert "r1" not in releases and {"r0", "r2", "new"} <= set(releases)
    assert releases["r0"] == {"first": 1000.0, "last": 5000.0, "count": 2}


def test_the_whole_block_stays_small() -> None:
    big = {f"m{i}": {f"{'l' * 90}{j}": "v" * 200 for j in range(ab.MAX_ENTRIES)}
           for i in range(ab.MAX_FIELDS)}
    assert len(json.dumps(ab.clean(big))) <= ab.MAX_BYTES


def test_a_repeat_updates_scalars_and_keeps_the_capabilitys_maps(tmp_path: Path) -> None:
    ledger = inc.Ledger(FileStore(tmp_path), clock=lambda: 100.0)
    first = {"peer": "n1", "channel": "ssh", "seen": {"a": {"first": 1, "last": 1, "count": 1}}}
    ledger.receive(inc.Signal(kind="fleet", key="n1-ssh", source="t", about=first))
    ledger.receive(inc.Signal(kind="fleet", key="n1-ssh", source="t",
                              about={"channel": "ssh, nats", "seen": {"b": 1}}))
    data = ledger.get("fleet-n1-ssh")
    assert data is not None
    assert inc.public_view(data)["about"] == {"peer": "n1", "channel": "ssh, nats",
                                              "seen": first["seen"]}
