"""``healer serve``: the HTTP API alone (sessions, errors, webhooks, metrics)."""

from __future__ import annotations

HELP = "serve the HTTP API only (sessions, report_error, webhooks, metrics)"


def main(argv: list[str]) -> int:
    from healer.commands._common import add_settings_args, parser, run, settings_from

    p = parser(
        "serve",
        "Serve healer's HTTP API on api.host:api.port (default 127.0.0.1:8083) until\n"
        "SIGINT/SIGTERM. `healer loop` serves the same API alongside everything else.",
        "exit codes: 0 stopped cleanly, 2 bad settings, 3 the port could not be bound",
    )
    p.add_argument("--host", help="bind address (default 127.0.0.1; off-loopback needs a token)")
    p.add_argument("--port", type=int, help="port (default 8083; 0 picks a free one)")
    add_settings_args(p)
    args = p.parse_args(argv)
    if args.host:
        args.set.append(f"api.host={args.host}")
    if args.port is not None:
        args.set.append(f"api.port={args.port}")

    def body() -> int:
        import asyncio
        import signal

        from healer.api.service import ApiService
        from healer.core.store import open_store
        from healer.errors import UnavailableError

        settings = settings_from(args)

        async def serve() -> int:
            svc = ApiService(settings, open_store(settings))
            try:
                await svc.start()
            except OSError as exc:
                raise UnavailableError(exc.strerror or str(exc)) from None
            print(f"healer API on {svc.url}", flush=True)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
            await svc.stop()
            return 0

        return asyncio.run(serve())

    return run(body)
