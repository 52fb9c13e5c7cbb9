"""`healer silence add|list|expire`: stop agents and notifications for what matches, a while."""

from __future__ import annotations

import argparse
import time
from typing import Any

from healer.commands._common import parser, run, settings_from

HELP = "silence incidents (maintenance windows): recorded, counted, no agent, no notification"

EPILOG = """\
A silence matches incidents like an Alertmanager silence matches alerts: every matcher must
match. Matchers are name=value, name!=value, name=~regex or name!~regex (a regex matches the
whole value); names: kind, source, key, summary, severity, node (a fleet peer), play (a play
id) and label.<name> (an Alertmanager label, else the incident's `about` field).

While a silence is active, a matching signal is still recorded and counted, but the gate
answers `silenced`: no healing agent starts, and the incident carries `silenced_by` so no
notification goes out. When it ends (or is expired) the next signal is gated as usual. A
silence that hides a critical escalation is shown on the dashboard's front page.

examples:
  healer silence add kind=play 'play=~play-task-4.*' --duration 2h --comment "cluster upgrade"
  healer silence add node=peer-b --starts 2030-01-05T22:00 --ends 2030-01-06T02:00
  healer silence add 'summary=~.*TimeoutError.*' label.environment=staging --duration 1d
  healer silence list [--expired] [--json]
  healer silence expire s-0123456789ab

exit codes: 0 done, 2 a bad matcher, time or duration, or no such silence.
"""


def _time(text: str) -> float:
    """An ISO 8601 time (local time when it names no zone) or epoch seconds."""
    from datetime import datetime

    from healer.errors import UsageError

    raw = text.strip()
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(raw).timestamp()
    except ValueError:
        raise UsageError(f"not a time: {text!r} (ISO 8601 like 2030-01-05T22:00, or epoch "
                         "seconds)") from None


def _show(items: list[dict[str, Any]]) -> None:
    if not items:
        print("no silences")
    for s in items:
        until = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(s["ends_at"])))
        print(f"{s['id']}  [{s['state']}] until {until} by {s['author']}: "
              f"{s['matchers_text']}" + (f"  ({s['comment']})" if s.get("comment") else ""))


def main(argv: list[str]) -> int:
    from healer.commands._common import add_settings_args

    p = parser("silence", HELP, EPILOG)
    sub = p.add_subparsers(dest="action", required=True, metavar="add|list|expire")
    add = sub.add_parser("add", help="a new silence", formatter_class=p.formatter_class)
    add.add_argument("matchers", nargs="+", metavar="MATCHER", help="name=value, name!=value, "
                     "name=~regex, name!~regex (all must match)")
    add.add_argument("--duration", default="", help="how long from its start: 90m, 2h, 1d "
                     "(default 2h unless --ends)")
    add.add_argument("--starts", default="", help="when it starts (ISO 8601 or epoch; "
                     "default now): a maintenance window")
    add.add_argument("--ends", default="", help="when it ends (ISO 8601 or epoch)")
    add.add_argument("--by", metavar="NAME", help="who silences (default: your OS user name)")
    add.add_argument("--comment", default="", help="why")
    lst = sub.add_parser("list", help="active and pending silences")
    lst.add_argument("--expired", action="store_true", help="also those that ended")
    exp = sub.add_parser("expire", help="end a silence now")
    exp.add_argument("id", help="the silence id (s-…)")
    exp.add_argument("--by", metavar="NAME", help="who ends it (default: your OS user name)")
    for sp in (add, lst, exp):
        sp.add_argument("--json", action="store_true", help="print JSON")
        add_settings_args(sp)
    args = p.parse_args(argv)

    def body() -> int:
        from healer.commands._common import print_json
        from healer.core.audit import Audit
        from healer.core.incidents import Ledger
        from healer.core.silences import Matcher, Silences, parse_duration
        from healer.core.store import open_store
        from healer.errors import NotFoundError, UsageError

        settings = settings_from(args)
        store = open_store(settings)
        try:
            audit = Audit(settings.state_path)
            book, ledger = Silences(store, audit=audit), Ledger(store, audit=audit)
            if args.action == "add":
                matchers = [Matcher.parse(m) for m in args.matchers]
                starts = _time(args.starts) if args.starts else None
                if args.ends and args.duration:
                    raise UsageError("give --duration or --ends, not both")
                ends = _time(args.ends) if args.ends else \
                    (starts or time.time()) + parse_duration(args.duration or "2h")
                out: Any = book.add(matchers, starts_at=starts, ends_at=ends,
                                    author=_who(args), comment=args.comment)
                book.reconcile(ledger)
                print_json(out) if args.json else _show([out])
            elif args.action == "expire":
                try:
                    out = book.expire(args.id, by=_who(args))
                except NotFoundError:
                    raise UsageError(f"no silence {args.id}") from None
                book.reconcile(ledger)
                print_json(out) if args.json else _show([out])
            else:
                book.reconcile(ledger)
                items = book.list(include_expired=args.expired)
                print_json({"silences": items}) if args.json else _show(items)
            return 0
        finally:
            store.close()

    return run(body)


def _who(args: argparse.Namespace) -> str:
    from healer.commands._verdict import who

    return who(args)
