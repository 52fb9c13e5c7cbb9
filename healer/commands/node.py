"""``healer node``: run this machine's fleet node daemon."""

from __future__ import annotations

import sys

HELP = "run this machine's fleet node daemon (GET /health, POST /message, NATS, heartbeats)"

EPILOG = """\
The node's address, port and NATS server come from its entry in the fleet config
(.multifleet/config.json, setting fleet.config) unless given here.

examples:
  healer node                                   # node id from HEALER_NODE_ID or the hostname
  healer node --node-id mac2 --port 8855
  healer node --node-id mac2 --pid-file /run/healer-node.pid

exit codes: 0 stopped by SIGINT/SIGTERM · 2 bad settings or arguments · 3 the port is taken"""


def main(argv: list[str]) -> int:
    from healer.commands._common import add_settings_args, parser, run, settings_from

    p = parser("node", "Run the fleet node daemon of this machine until SIGINT/SIGTERM.", EPILOG)
    p.add_argument("--node-id", help="this node's id (default: setting node_id or hostname)")
    p.add_argument("--host", help="address to listen on (default: the node's host in the "
                   "fleet config, else 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port (default: the node's port, else 8855)")
    p.add_argument("--nats-url", help="NATS server (default: the node's nats_url)")
    p.add_argument("--pid-file", help="write the daemon's pid here while it runs")
    add_settings_args(p)
    args = p.parse_args(argv)
    if args.port is not None and not 0 <= args.port <= 65535:
        p.error("--port must be 0-65535")

    def body() -> int:
        import asyncio
        import signal

        from healer.core.names import safe_host, safe_name
        from healer.errors import UnavailableError, UsageError
        from healer.fleet.node import NodeDaemon, serve

        settings = settings_from(args)
        from healer.core import aio, safedirs

        safedirs.ensure_own_dirs(settings)  # private and healer's own, or no start
        try:
            if args.node_id:
                safe_name(args.node_id, "node id")
            if args.host:
                safe_host(args.host, "host")
        except UsageError:
            raise
        if args.nats_url and not args.nats_url.startswith(("nats://", "tls://")):
            raise UsageError("--nats-url must start with nats:// or tls://")

        async def go() -> int:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            daemon = NodeDaemon(settings, node_id=args.node_id, host=args.host, port=args.port,
                                nats_url=args.nats_url, pid_file=args.pid_file)
            try:
                await serve(daemon, stop)
            except OSError as exc:
                raise UnavailableError(str(exc)) from exc
            return 0

        return aio.run(go())

    return run(body)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
