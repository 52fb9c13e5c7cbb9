"""`healer status`: healing attempts (get_healing_status), optionally refreshed from the forge."""

from __future__ import annotations

import time
from typing import Any

from healer.commands._common import add_settings_args, parser, print_json, run, settings_from

HELP = "what is broken, what healer is doing, what needs a person; healing attempts"

EPILOG = """\
examples:
  healer status                    overview (loop, plays, fleet, incidents, escalations
                                   waiting for a person) and the latest healing attempts
  healer status 3f2a9c1d8e7b       the attempts of one fingerprint (a prefix is enough)
  healer status --refresh --json   ask the forge about open PRs first (pr_open → pr_merged)
  healer status code-sentry-4242   one incident: what it is about (culprit, release, alert
                                   code and object, peer and channel), where it stands

An attempt that ended without a fix shows the escalation file written for a person
(.fleet-messages/human/…); --json has it as "escalation". The overview shows today's agent
spend and this month's (UTC) against each agents.daily_budget_usd and
agents.monthly_budget_usd budget; a spent budget holds that kind's runs until midnight UTC,
the first of the next month, or a raised budget ("agent_spend" and "agent_spend.month" in
--json). An incident whose source wants more occurrences first (gate.thresholds) shows the
gate decision "awaiting_occurrences".

With several replicas on one store (docs/ha.md) the overview lists who leads which
once-only duty and since when ("duties" in --json: duty, owner "<node>/<instance>" or null
while nobody leads it, since, expires_at, revision).

Incidents only anonymous sources reported are marked "anonymous"; what waits for a person's
approval (a code agent to start, a held fix to publish) is listed with the `healer approve`
and `healer deny` commands; what the flood limits dropped is counted.

exit codes: 0 ok, 1 something needs a person (an escalation file or an approval waiting, or a
listed attempt failed, timed out, was unfixable or blocked by anonymization; the incident
asked for is escalated), 2 bad input (also: no such incident).
"""

INCIDENT_KINDS = ("code-", "play-", "fleet-")  # an incident id, not a fingerprint
_NEEDS_PERSON = {"failed", "timeout", "anonymization_failed", "unfixable", "awaiting_approval"}


def _age(ts: float | None) -> str:
    if not ts:
        return "-"
    s = max(0, int(time.time() - ts))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit} ago"
    return f"{s}s ago"


def _table(data: dict[str, Any]) -> None:
    atts = data["attempts"]
    if not atts:
        print("no healing attempts" + (f" for {data['fingerprint']}"
                                       if data.get("fingerprint") else ""))
        return
    print(f"{'ATTEMPT':<25} {'STATUS':<21} {'FP':<12} {'WHEN':<9} WHAT")
    for a in atts:
        what = f"{a.get('error_type', '?')} in {a.get('call_site', '?')}"
        print(f"{a['attempt_id']:<25} {a['status']:<21} {a['fingerprint'][:12]:<12} "
              f"{_age(a.get('created_at')):<9} {what}")
        detail = a.get("pr_url") or a.get("unfixable_reason") or a.get("reason")
        if detail:
            print(f"{'':<25} {' '.join(str(detail).split())[:150]}")
        owner = a.get("owner") or {}
        if a["status"] == "investigating" and owner.get("node"):
            print(f"{'':<25} running on {owner['node']} (lease revision "
                  f"{owner.get('revision', '?')})")
        if a.get("retried_as"):
            print(f"{'':<25} run again as {a['retried_as']}")
        elif a.get("superseded_by"):
            print(f"{'':<25} run again as {a['superseded_by']} (a new report of it)")
        if a.get("escalation"):
            print(f"{'':<25} escalated to a person: {a['escalation']}")


def _duties(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    print("duties (one replica leads each):")
    for r in rows:
        who = r["owner"] or "nobody leads it"
        since = f"since {_age(r['since'])}" if r["since"] else ""
        print(f"  {r['duty']:<20} {who:<32} {since}".rstrip())
    print()


def _incident(store: Any, iid: str, as_json: bool) -> int:
    from healer.overview import incident, render_incident

    view = incident(store, iid)
    if as_json:
        print_json({"incident": view})
    else:
        print(render_incident(view))
    return 1 if view["status"] == "escalated" else 0


def main(argv: list[str]) -> int:
    p = parser("status", HELP, EPILOG)
    p.add_argument("fingerprint", nargs="?", help="a fingerprint or its prefix (≥4 hex "
                   "digits), or an incident id (code-…, play-…, fleet-…)")
    p.add_argument("--limit", type=int, default=20, help="at most this many attempts (20)")
    p.add_argument("--refresh", action="store_true",
                   help="poll the forge for open PRs first (records merges)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_settings_args(p)
    args = p.parse_args(argv)
    if args.limit < 1:
        p.error("--limit must be at least 1")

    def body() -> int:
        from healer.selfheal.service import open_service

        settings = settings_from(args)
        service = open_service(settings)
        if args.fingerprint and args.fingerprint.startswith(INCIDENT_KINDS):
            return _incident(service.store, args.fingerprint, args.json)
        if args.refresh:
            service.refresh()
        data = service.status(args.fingerprint, args.limit)
        waiting = False
        if args.fingerprint is None:
            from healer.overview import overview, render

            data["overview"] = overview(settings, service.store)
            from healer.core.duties import read_leaders

            data["duties"] = read_leaders(service.store)
            waiting = bool(data["overview"]["needs_a_person"]) or bool(
                data["overview"]["approvals"]["waiting"])
        if args.json:
            print_json(data)
        else:
            if "overview" in data:
                print(render(data["overview"]))
                print()
                _duties(data["duties"])
            _table(data)
        needs = any(a["status"] in _NEEDS_PERSON for a in data["attempts"])
        return 1 if needs or waiting else 0

    return run(body)
