"""The slowest test files' seconds, so `make test` starts them first.

Under ``--dist loadfile`` a file runs whole on one worker. Started last, a slow file leaves
the other worker idle and the progress line still at "98 %" for minutes; started first, it
runs while the other worker gets through the many quick files. ``tests/conftest.py`` reads
``durations.json`` (file → seconds, as measured by one run of the suite) and moves those
files to the front in that order; a file it does not name keeps its place after them.

The figures only need to be roughly right. To refresh them from a run of the suite::

    .venv/bin/python -m pytest -n 2 --dist loadfile --junitxml=/tmp/suite.xml
    .venv/bin/python tests/durations.py /tmp/suite.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

DURATIONS = Path(__file__).with_name("durations.json")
MIN_SECONDS = 15.0  # quicker files are the filler that balances the end of a run


def load() -> dict[str, float]:
    """File (relative to the repository, "/"-separated) → seconds; {} if unreadable."""
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def from_junit(report: Path) -> dict[str, float]:
    """Seconds per test file in a pytest ``--junitxml`` report, slowest first."""
    per: Counter[str] = Counter()
    # The report is one this machine's pytest just wrote, not untrusted input.
    for case in ET.parse(report).iter("testcase"):  # noqa: S314
        parts = case.get("classname", "").split(".")
        module = "/".join(p for p in parts if not p[:1].isupper())  # drop test classes
        per[f"{module}.py"] += float(case.get("time") or 0)
    return {f: round(s) for f, s in per.most_common() if s >= MIN_SECONDS}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print("usage: tests/durations.py JUNIT_XML (from pytest --junitxml)", file=sys.stderr)
        return 2
    try:
        figures = from_junit(Path(argv[0]))
    except ET.ParseError as exc:
        print(f"tests/durations.py: {argv[0]} is not a junit XML report: {exc}",
              file=sys.stderr)
        return 2
    DURATIONS.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"{DURATIONS}: {len(figures)} files of {MIN_SECONDS:.0f} s or more")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
