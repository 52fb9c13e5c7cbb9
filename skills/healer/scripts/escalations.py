#!/usr/bin/env python3
"""Escalations waiting for a human: the seed files in <fleet dir>/human/, as JSON.

usage:
  escalations.py                       open escalations, newest first (front matter + title)
  escalations.py --show NAME           one escalation with its full Markdown body
  escalations.py --archive NAME        mark it handled: move it to human/archive/
  escalations.py --all                 include archived ones

NAME is the file name (20250301-101500-from-ops.md) or its path. The fleet dir is
--fleet-dir, else healer's setting fleet_dir ($HEALER_FLEET_DIR, healer.yaml), else
.fleet-messages. Only archive an escalation after the problem it describes is fixed.

exit codes: 0 ok ("open" says how many wait for a person) · 2 bad input (unknown NAME)
· 3 healer is not installed
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _healer import EXIT_USAGE, emit, fail, need_healer


def main() -> int:
    p = argparse.ArgumentParser(prog="escalations.py", description=__doc__.split("\n\n")[0],
                                epilog="\n".join(__doc__.split("\n")[2:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--show", metavar="NAME")
    what.add_argument("--archive", metavar="NAME")
    what.add_argument("--all", action="store_true", help="also list archived escalations")
    p.add_argument("--fleet-dir", help="seed-file folder (default: healer's fleet_dir)")
    args = p.parse_args()
    need_healer()

    from healer.config import load_settings
    from healer.core import seeds
    from healer.errors import HealerError, RejectedFile

    try:
        fleet = Path(args.fleet_dir) if args.fleet_dir else load_settings(None).fleet_path
    except HealerError as exc:
        fail(str(exc), exc.exit_code)
    human = fleet / seeds.HUMAN

    def find(name: str) -> Path:
        base = Path(name).name
        for folder in (human, human / "archive"):
            if (folder / base).is_file():
                return folder / base
        fail(f"no escalation {base!r} in {human}", EXIT_USAGE)

    def entry(path: Path, body: bool = False) -> dict:
        try:
            s = seeds.read(path)
        except (RejectedFile, OSError) as exc:
            return {"file": path.name, "path": str(path), "error": str(exc)}
        title = next((ln[2:].strip() for ln in s.body.splitlines() if ln.startswith("# ")),
                     s.subject)
        out = {"file": path.name, "path": str(path), "from": s.sender, "subject": s.subject,
               "title": title, "timestamp": s.timestamp, "type": s.type,
               "severity": s.severity, "incident": s.incident,
               "archived": path.parent.name == "archive"}
        if body:
            out["body"] = s.body
        return out

    if args.show:
        emit(entry(find(args.show), body=True))
        return 0
    if args.archive:
        src = find(args.archive)
        if src.parent.name == "archive":
            emit({"archived": str(src), "already": True})
            return 0
        emit({"archived": str(seeds.archive(src)), "already": False})
        return 0
    paths = list(seeds.inbox(fleet, seeds.HUMAN))
    if args.all and (human / "archive").is_dir():
        paths += [q for q in sorted((human / "archive").iterdir())
                  if seeds.NAME_RE.fullmatch(q.name)]
    items = sorted((entry(q) for q in paths), key=lambda e: e["file"], reverse=True)
    open_count = sum(1 for e in items if not e.get("archived"))
    emit({"fleet_dir": str(fleet), "open": open_count, "escalations": items})
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
