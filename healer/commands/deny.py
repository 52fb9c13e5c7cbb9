"""`healer deny`: a person says no to what waits for approval."""

from __future__ import annotations

from healer.commands._common import parser, run, settings_from

HELP = "deny what waits for a person: the incident is resolved, a held fix not published"

EPILOG = """\
The counterpart of `healer approve`. Denying a run resolves the incident ("run denied by
NAME"): no agent starts; if it fires again it reopens and asks again. Denying a held fix's
publication fails its attempt (no PR, no escalation; the branch is removed with the worktree
later) and resolves the incident. Recorded in the audit trail with who and when.

examples:
  healer deny code-sentry-3f2a… --comment "junk from a scanner"
  healer deny code-3f2a… --stage publish

exit codes: 0 denied, 2 nothing of that incident waits or no such incident.
"""


def main(argv: list[str]) -> int:
    from healer.commands._verdict import add_args, show, who

    p = parser("deny", HELP, EPILOG)
    add_args(p)
    args = p.parse_args(argv)

    def body() -> int:
        from healer.core.store import open_store
        from healer.errors import NotFoundError, UsageError
        from healer.selfheal import approvals

        settings = settings_from(args)
        store = open_store(settings)
        try:
            try:
                out = approvals.deny(settings, store, args.incident, by=who(args), via="cli",
                                     comment=args.comment, stage=args.stage or "")
            except NotFoundError as exc:
                raise UsageError(f"no incident {args.incident} ({exc})") from exc
            show(out, args.json)
            return 0
        finally:
            store.close()

    return run(body)
