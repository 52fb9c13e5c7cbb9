"""`healer ack`: a person takes an incident (PagerDuty and the chat message are told)."""

from __future__ import annotations

from healer.commands._common import parser, run, settings_from

HELP = "acknowledge an incident: a person is on it (PagerDuty and Slack are told)"

EPILOG = """\
Marks the incident `acknowledged` (who, when, via cli) and writes it to the audit trail
(<state>/heal-audit.jsonl). Nothing else changes: healer keeps healing it; the notification
layer sends PagerDuty an `acknowledge` and updates the Slack message. The same is the
Acknowledge button in Slack and on the dashboard, and POST /api/v1/incidents/{id}/ack.
Firing again after it was resolved clears the acknowledgement.

examples:
  healer ack fleet-peer-b-nats
  healer ack code-3f2a… --by alice --json

exit codes: 0 acknowledged, 2 no such incident, resolved, or acknowledged already.
"""


def main(argv: list[str]) -> int:
    from healer.commands._common import add_settings_args
    from healer.commands._verdict import who

    p = parser("ack", HELP, EPILOG)
    p.add_argument("incident", help="the incident id, as `healer status` lists it")
    p.add_argument("--by", metavar="NAME",
                   help="who acknowledges, for the audit trail (default: your OS user name)")
    p.add_argument("--json", action="store_true", help="print the incident as JSON")
    add_settings_args(p)
    args = p.parse_args(argv)

    def body() -> int:
        from healer.commands._common import print_json
        from healer.core.audit import Audit
        from healer.core.incidents import Ledger, public_view
        from healer.core.store import open_store
        from healer.errors import NotFoundError, UsageError

        settings = settings_from(args)
        store = open_store(settings)
        try:
            ledger = Ledger(store, audit=Audit(settings.state_path))
            try:
                data = ledger.acknowledge(args.incident, by=who(args), via="cli")
            except NotFoundError as exc:
                raise UsageError(f"no incident {args.incident} ({exc})") from exc
            if args.json:
                print_json(public_view(data))
            else:
                ack = data["acknowledged"]
                print(f"{data['id']}: acknowledged by {ack['by']}")
            return 0
        finally:
            store.close()

    return run(body)
