"""``healer loop``: the same as ``python -m healer.loop``."""

from __future__ import annotations

HELP = "run the headless healer loop (= python -m healer.loop)"


def main(argv: list[str]) -> int:
    from healer.loop import main as loop_main

    return loop_main(argv)
