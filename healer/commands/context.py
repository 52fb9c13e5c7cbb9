"""``healer context``: the living-context layers — set them up, check them, see what an agent
is told, verify a fix, list incidents."""

from __future__ import annotations

import sys
from typing import Any

HELP = "living context: init layers, render the agent's context, verify a fix, incidents"

DESCRIPTION = """\
Living-context healing: errors from Sentry, Alertmanager, Loki and Slack are fixed by an agent
that sees the project's four context layers (in context.dir, default .healer/context/):
scenarios/<feature>.scenarios.yaml, invariants.yaml, impact-map.yaml, incident-memory.yaml.

  healer context init [--repo DIR] [--force]        impact map from the Python imports, and
                                                    skeleton scenario/invariant files to fill in
  healer context validate                           check every layer file (and loki-rules.yaml)
  healer context render --error FILE.json           the exact context block the agent gets
  healer context render --incident KEY              … for a stored incident
  healer context verify [--worktree DIR] [--base REF] [--diff FILE] [--file PATH]
                                                    run the scenario runner on a change
  healer context incidents [KEY] [--status S]       incidents and (for one) its audit trail
"""

EPILOG = """\
exit codes: 0 ok (verify: the fix passed), 1 verify rejected the fix / incident not found,
            2 bad input or a bad layer file, 3 a dependency is missing
"""


def main(argv: list[str]) -> int:
    from healer.commands._common import add_settings_args, parser, run, settings_from

    p = parser("context", DESCRIPTION, EPILOG)
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    pi = sub.add_parser("init", help="write the impact map and skeleton layer files")
    pi.add_argument("--repo", help="repository to map (default: the one around the cwd)")
    pi.add_argument("--force", action="store_true", help="overwrite existing skeleton files")
    pv = sub.add_parser("validate", help="check every layer file")
    pr = sub.add_parser("render", help="print the context block a healing agent is given")
    g = pr.add_mutually_exclusive_group(required=True)
    g.add_argument("--error", metavar="FILE.json", help="a normalised error ('-' = stdin)")
    g.add_argument("--incident", metavar="KEY", help="a stored incident")
    pf = sub.add_parser("verify", help="run the scenario runner on a worktree or a diff")
    pf.add_argument("--worktree", metavar="DIR", help="checkout with the fix (default: the "
                    "repository around the cwd); the change is its working tree against --base")
    pf.add_argument("--base", metavar="REF", help="what the fix is measured against (default: "
                    "selfheal.base_branch, main, or the current branch; with --diff: HEAD)")
    pf.add_argument("--diff", metavar="FILE", help="a unified diff to apply to --base in a "
                    "scratch worktree and verify there ('-' = stdin)")
    wf = pf.add_mutually_exclusive_group()
    wf.add_argument("--file", metavar="PATH", help="the failing file (its scenarios run too)")
    wf.add_argument("--error", metavar="FILE.json", help="the normalised error being fixed")
    pn = sub.add_parser("incidents", help="list incidents, or show one with its audit trail")
    pn.add_argument("key", nargs="?", help="an incident key (e.g. sentry-1234, am-7f3a…)")
    pn.add_argument("--status", choices=["open", "healing", "fixed", "escalated", "resolved"])
    for sp in (pi, pv, pr, pf, pn):
        sp.add_argument("--json", action="store_true", help="print JSON")
        add_settings_args(sp)
    args = p.parse_args(argv)

    def body() -> int:
        from healer.commands import _context_actions as actions

        settings = settings_from(args)
        fn: Any = getattr(actions, args.action)
        return int(fn(settings, args))

    return run(body)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
