#!/usr/bin/env python3
"""For healing agents: check an UNFIXABLE file before committing it.

usage:
  check_unfixable.py                 ./UNFIXABLE (run it in the clone's root)
  check_unfixable.py path/to/UNFIXABLE

Checks what the dispatcher and a human need: the file exists and is plain text, at most 500
words, no secrets or personal data (healer's publication validator), and it covers the
three parts - the root cause, why it is not a code bug, what a human operator should do.
Also says whether it is committed (the dispatcher reads it from the branch).

Output: {"ok": bool, "path", "words", "findings": [{"kind", "line", "hint"}], "missing":
["root cause" | "why not a code bug" | "what to do"], "committed": bool|null, "advice": [...]}.

exit codes: 0 checked (read "ok") · 2 no such file or not text · 3 healer is not installed
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from _healer import emit, fail, need_healer

MAX_WORDS = 500
PARTS = {
    "root cause": r"root cause|caused by|because",
    "why not a code bug": r"not a (code )?bug|external|upstream|outage|missing|provision|"
                          r"infrastructure|data|limitation|configuration|credential",
    "what to do": r"recommend|should|operator|to resolve|steps?:|next|action",
}


def committed(path: Path) -> bool | None:
    try:
        res = subprocess.run(["git", "status", "--porcelain", "--", path.name],
                             cwd=path.parent, capture_output=True, text=True, timeout=10,
                             check=False)
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "--", path.name],
                                 cwd=path.parent, capture_output=True, text=True, timeout=10,
                                 check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0:
        return None  # not a git checkout
    return tracked.returncode == 0 and not res.stdout.strip()


def main() -> int:
    p = argparse.ArgumentParser(prog="check_unfixable.py", description=__doc__.split("\n\n")[0],
                                epilog="\n".join(__doc__.split("\n")[2:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", nargs="?", default="UNFIXABLE")
    args = p.parse_args()
    path = Path(args.path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {path}: {exc}")
    need_healer()

    from healer.core.publish import validate

    findings = [{"kind": f.kind, "line": text.count("\n", 0, f.start) + 1, "hint": f.hint}
                for f in sorted(validate(text), key=lambda f: f.start)]
    words = len(text.split())
    missing = [part for part, rx in PARTS.items() if not re.search(rx, text, re.I)]
    is_committed = committed(path.resolve())
    advice = []
    if findings:
        advice.append("remove the flagged values; describe the system's behaviour instead")
    if words > MAX_WORDS:
        advice.append(f"shorten it to {MAX_WORDS} words or fewer")
    if not text.strip():
        advice.append("the file is empty: explain the root cause and what a human should do")
    advice += [f"add {part}" for part in missing]
    if is_committed is False:
        advice.append("commit it: git add UNFIXABLE && git commit -m 'chore: unfixable - REASON'")
    ok = bool(text.strip()) and not findings and words <= MAX_WORDS and not missing
    emit({"ok": ok and is_committed is not False, "path": str(path), "words": words,
          "findings": findings, "missing": missing, "committed": is_committed,
          "advice": advice})
    return 0


if __name__ == "__main__":
    sys.exit(main())
