#!/usr/bin/env python3
"""Check the context text of an error report for secrets and personal data before sending it.

usage:
  check_context.py --text "I was storing a fact; the table looks missing."
  check_context.py context.txt
  echo "..." | check_context.py -

It runs healer's own publication validator (the one that blocks PRs): API keys, tokens,
passwords, URLs with credentials, e-mail addresses, phone and card numbers, IP addresses,
home paths, host names not on the allow list, UUIDs. It cannot see names, message bodies or
other user content written as plain words - keeping those out is your job.

Output: {"clean": bool, "words": N, "max_words": 500, "findings": [{"kind", "line",
"column", "hint"}], "advice": [...]}. A hint shows only the first characters of a hit.

exit codes: 0 checked (read "clean") · 2 bad input · 3 healer is not installed
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _healer import emit, fail, need_healer

MAX_WORDS = 500
ADVICE = {
    "EMAIL": "say 'the user's e-mail address' instead of the address",
    "PHONE": "say 'a phone number' instead of the number",
    "UUID": "say 'a UUID-shaped id' instead of the id",
    "IP": "say 'the database host' or 'a private address' instead of the address",
    "HOME-PATH": "use a repository-relative path",
}


def main() -> int:
    p = argparse.ArgumentParser(prog="check_context.py", description=__doc__.split("\n\n")[0],
                                epilog="\n".join(__doc__.split("\n")[2:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", nargs="?", help="a file with the text, or - for stdin")
    p.add_argument("--text", help="the text itself")
    args = p.parse_args()
    if (args.text is None) == (args.file is None):
        fail("give the text with --text, or a FILE (- for stdin)")
    if args.text is not None:
        text = args.text
    else:
        try:
            text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(
                encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"cannot read {args.file}: {exc}")
    need_healer()

    from healer.config import load_settings
    from healer.core.publish import validate
    from healer.errors import HealerError

    try:
        hosts = load_settings(None).selfheal.allowed_hosts
    except HealerError:
        hosts = []
    findings = []
    for f in sorted(validate(text, allowed_hosts=hosts), key=lambda f: f.start):
        line = text.count("\n", 0, f.start) + 1
        col = f.start - (text.rfind("\n", 0, f.start) + 1) + 1
        findings.append({"kind": f.kind, "line": line, "column": col, "hint": f.hint})
    words = len(text.split())
    advice = sorted({ADVICE.get(f["kind"], f"remove the {f['kind'].lower()} value")
                     for f in findings})
    if words > MAX_WORDS:
        advice.append(f"shorten it to {MAX_WORDS} words or fewer")
    emit({"clean": not findings and words <= MAX_WORDS, "words": words,
          "max_words": MAX_WORDS, "findings": findings, "advice": advice})
    return 0


if __name__ == "__main__":
    sys.exit(main())
