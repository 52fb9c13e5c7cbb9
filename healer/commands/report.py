"""`healer report`: report an error for self-healing, like the report_error MCP tool."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from healer.commands._common import add_settings_args, parser, print_json, run, settings_from

HELP = "report an error for automated investigation (report_error)"

EPILOG = """\
examples:
  healer report --type KeyError --message "'user_id'" --traceback-file tb.txt
  python app.py 2>&1 | healer report --type RuntimeError --message "worker crashed" \\
      --traceback-file -

The message, traceback and context are sanitised before anything is stored; the fingerprint
ignores ids, times and line numbers, so the same bug reported twice joins one attempt.

A report from this command is trusted (the local operator ran it): it needs no approval
unless code.approval is `always`.

exit codes: 0 accepted or joined an attempt already investigating, 1 rejected by a gate
(cooldown, concurrency cap, circuit breaker, no model, severity, disabled, recursion,
awaiting_approval), 2 bad input.
"""


# A path (no colon, no control character, no space at either end), then a function name
# as Python's frames spell it: `handler`, `Cls.method`, `<module>`, `outer.<locals>.inner`.
CALL_SITE = re.compile(r"(?=\S)[^:\x00-\x1f]+(?<=\S):[A-Za-z_<][\w.<>]*")


def call_site(value: str) -> str:
    """``--call-site``: ``PATH:FUNCTION`` (``src/app/tools.py:lookup``, ``app.py:Cls.run``)."""
    if not CALL_SITE.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not PATH:FUNCTION (e.g. src/app/tools.py:lookup)")
    return value


def main(argv: list[str]) -> int:
    p = parser("report", HELP, EPILOG)
    p.add_argument("--type", required=True, dest="error_type",
                   help="fully qualified exception class, e.g. asyncpg.exceptions.Undefined…")
    p.add_argument("--message", required=True, dest="error_message",
                   help="the exact exception message")
    p.add_argument("--traceback-file", metavar="FILE",
                   help="file holding the full traceback ('-' reads stdin)")
    p.add_argument("--call-site", metavar="PATH:FUNCTION", type=call_site,
                   help="where it happened (default: from the traceback)")
    p.add_argument("--context", default="", help="your analysis; no user data")
    p.add_argument("--tool-name", default="", help="the tool that raised the error")
    p.add_argument("--severity-hint", choices=["critical", "high", "medium", "low"])
    p.add_argument("--json", action="store_true", help="print the response as JSON")
    add_settings_args(p)
    args = p.parse_args(argv)

    def body() -> int:
        from healer.errors import UsageError
        from healer.selfheal.service import open_service

        traceback = ""
        if args.traceback_file == "-":
            traceback = sys.stdin.read()
        elif args.traceback_file:
            try:
                traceback = Path(args.traceback_file).read_text(encoding="utf-8",
                                                                errors="replace")
            except OSError as exc:
                raise UsageError(f"{args.traceback_file}: {exc.strerror}") from exc
        settings = settings_from(args)
        service = open_service(settings)
        result = service.report({
            "error_type": args.error_type, "error_message": args.error_message,
            "traceback": traceback, "call_site": args.call_site or "",
            "context": args.context, "tool_name": args.tool_name,
            "severity_hint": args.severity_hint or "",
        }, trust="trusted")  # the local operator's own command
        if args.json:
            print_json(result)
        else:
            head = "accepted" if result["accepted"] else result["reason"]
            print(f"{head}: {result['message']}")
            print(f"fingerprint: {result['fingerprint']}")
            if result.get("attempt_id"):
                print(f"attempt: {result['attempt_id']}")
        joined = result.get("reason") == "already_investigating"
        return 0 if result["accepted"] or joined else 1

    return run(body)
