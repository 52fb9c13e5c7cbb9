"""``healer sentry dsn``: the DSN that points a Sentry SDK at this healer."""

from __future__ import annotations

HELP = "print a Sentry DSN for this healer (sentry dsn [--project NAME]); SDKs report to it"


def main(argv: list[str]) -> int:
    from healer.commands._common import add_settings_args, parser, print_json, run, settings_from

    p = parser(
        "sentry",
        "Point any Sentry SDK at healer. `healer sentry dsn` prints a DSN for the HTTP API,\n"
        "making a key for the project the first time and keeping it in\n"
        "<state dir>/sentry-keys.json (mode 0600). The address is api.public_url when set,\n"
        "else the one the healer running on this state dir serves on (`healer serve --port`),\n"
        "else api.host:api.port. Give the DSN to the SDK:\n\n"
        "  Python:      sentry_sdk.init(dsn=\"http://KEY@127.0.0.1:8083/1\")\n"
        "  JavaScript:  Sentry.init({ dsn: \"http://KEY@127.0.0.1:8083/1\" })\n\n"
        "Its errors become living-context incidents (healer context incidents).",
        "exit codes: 0 printed, 2 bad settings or project name",
    )
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    d = sub.add_parser("dsn", help="print (and on first use create) a project's DSN")
    d.add_argument("--project", default="default",
                   help="project name (default: default); each gets its own id and key")
    d.add_argument("--host", help="host name SDKs reach healer by (default: the address above)")
    d.add_argument("--json", action="store_true", help="print {dsn, key, project, project_id}")
    add_settings_args(d)
    args = p.parse_args(argv)

    def body() -> int:
        from healer.context.sentry_intake import dsn_for, ensure_key

        settings = settings_from(args)
        key, project_id = ensure_key(settings, args.project)
        dsn = dsn_for(settings, key, project_id, host=args.host)
        if args.json:
            print_json({"dsn": dsn, "key": key, "project": args.project,
                        "project_id": int(project_id)})
        else:
            print(dsn)
        return 0

    return run(body)
