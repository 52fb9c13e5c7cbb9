"""``healer serve``: the HTTP API, with the whole healing pipeline behind it.

It runs what ``healer loop`` runs (the same services, periodic jobs and recovery), with the API
switched on whatever ``api.enabled`` says, so nothing an API caller starts — a play's
remediation, a report held by the cap, a webhook's heal — waits for a loop that is not there.
"""

from __future__ import annotations

HELP = "serve the HTTP API and run the healing pipeline behind it (healer loop with the API on)"


def main(argv: list[str]) -> int:
    from healer.commands._common import add_settings_args, parser, run, settings_from

    p = parser(
        "serve",
        "Serve healer's HTTP API on api.host:api.port (default 127.0.0.1:8083) until\n"
        "SIGINT/SIGTERM, and run everything `healer loop` runs behind it (remediation,\n"
        "retries of held incidents, recovery, the fleet watchdog where configured).\n"
        "It is `healer loop` with the API always on: run one of them per state dir.",
        "exit codes: 0 stopped cleanly, 2 bad settings or a loop already running on this\n"
        "state dir, 3 the port could not be bound",
    )
    p.add_argument("--host", help="bind address (default 127.0.0.1; off-loopback needs a token)")
    p.add_argument("--port", type=int, help="port (default 8083; 0 picks a free one)")
    add_settings_args(p)
    args = p.parse_args(argv)
    if args.host:
        args.set.append(f"api.host={args.host}")
    if args.port is not None:
        args.set.append(f"api.port={args.port}")
    args.set.append("api.enabled=true")

    def body() -> int:
        from healer import loop
        from healer.core import aio

        settings = settings_from(args)

        def started(healer: loop.Healer) -> None:
            api = healer.extras.get("api")
            print(f"healer API on {getattr(api, 'url', '')}", flush=True)

        return aio.run(loop.run(settings, on_started=started))

    return run(body)
