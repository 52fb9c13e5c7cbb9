"""`healer approve`: a person lets a code agent start, or a held fix be published."""

from __future__ import annotations

from healer.commands._common import parser, run, settings_from

HELP = "approve what waits for a person: starting a code agent, publishing a held fix"

EPILOG = """\
Incidents reported only by anonymous sources (the Sentry DSN ingest, the HTTP API without a
token) wait for a person before a code agent starts (code.approval: anonymous; `always` asks
for every incident). Fixes whose diff touches CI, dependencies, healer's configuration or
weakens tests wait before their PR is opened. Both are listed here and by `healer status`.

examples:
  healer approve                            list what waits (run or publish)
  healer approve code-sentry-3f2a… --comment "looked at the stack trace"
  healer approve code-3f2a… --stage publish --by alice
  healer deny code-3f2a…                    say no instead (see healer deny --help)

Approving a run asks the gate again (cooldown, concurrency cap, circuit breaker, a model):
when it says yes the agent starts at once, else the approval stands and the next retry pass
starts it. Approving a publication opens the PR; its body says why it was held and who
approved. Every verdict is in the audit trail (<state>/heal-audit.jsonl) with who and when.

exit codes: 0 approved (or the list printed), 2 nothing of that incident waits, it is not
eligible yet, or no such incident.
"""


def main(argv: list[str]) -> int:
    from healer.commands._verdict import add_args, list_waiting, show, who

    p = parser("approve", HELP, EPILOG)
    add_args(p, optional_incident=True)
    args = p.parse_args(argv)

    def body() -> int:
        from healer.core.store import open_store
        from healer.errors import NotFoundError, UsageError
        from healer.selfheal import approvals

        settings = settings_from(args)
        store = open_store(settings)
        try:
            if not args.incident:
                list_waiting(approvals.waiting(settings, store), args.json)
                return 0
            try:
                out = approvals.approve(settings, store, args.incident, by=who(args), via="cli",
                                        comment=args.comment, stage=args.stage or "")
            except NotFoundError as exc:
                raise UsageError(f"no incident {args.incident} ({exc})") from exc
            show(out, args.json)
            return 0
        finally:
            store.close()

    return run(body)
