"""``healer fleet status|probe|heal|send``: the fleet's channels, by hand."""

from __future__ import annotations

import argparse
import sys
from typing import Any

HELP = "fleet channels: status (nodes x channels), probe PEER, heal [PEER], send PEER MESSAGE"

EPILOG = """\
The nodes come from the fleet config (.multifleet/config.json; setting fleet.config); this
machine is the node named by --set node_id=… / HEALER_NODE_ID (default: the hostname). A node
whose entry is invalid (bad name, host, port …) is disabled with a warning naming it; the
others keep working, and `status` lists it under "skipped" (--json) or below the table.

examples:
  healer fleet status                      # probe every channel of every peer, once
  healer fleet status --watch              # live table, refreshed every 5 s
  healer fleet status --json
  healer fleet probe mac2                  # every channel to mac2, with the reasons
  healer fleet heal mac2                   # diagnose, repair, re-probe; escalate after 3 tries
  healer fleet heal                        # every peer with a broken channel
  healer fleet send mac2 "deploy done" --subject deploy

exit codes: 0 everything works (status/probe), healed (heal), delivered (send) · 1 something
is broken (status: also a node disabled by its config entry) / escalated / not delivered ·
2 usage error, unknown or disabled peer, bad fleet config (no valid node)"""


def _parser() -> argparse.ArgumentParser:
    from healer.commands._common import add_settings_args, parser

    p = parser("fleet", "Probe, heal and message the fleet's nodes over every channel.", EPILOG)
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    st = sub.add_parser("status", help="every peer × every channel (rich table)")
    st.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    st.add_argument("--interval", type=float, default=5.0, metavar="S",
                    help="seconds between refreshes with --watch (default 5)")
    st.add_argument("--count", type=int, default=0, metavar="N",
                    help="with --watch: stop after N refreshes")
    pr = sub.add_parser("probe", help="every channel to one peer, with the reasons")
    pr.add_argument("peer")
    pr.add_argument("--channel", action="append", default=None, metavar="NAME",
                    help="probe only this channel (repeatable)")
    he = sub.add_parser("heal", help="heal one peer (or every broken one) now")
    he.add_argument("peer", nargs="?")
    se = sub.add_parser("send", help="send a message down the channel ladder")
    se.add_argument("peer")
    se.add_argument("message", help="the message body")
    se.add_argument("--subject", default="", help="one line (default: from the body)")
    se.add_argument("--type", default="message", help="message type (default message)")
    se.add_argument("--priority", default="normal",
                    choices=["low", "normal", "high", "emergency"])
    se.add_argument("--strict", action="store_true",
                    help="strict ladder order instead of fleet.order")
    for sp in (st, pr, he, se):
        sp.add_argument("--json", action="store_true", help="print JSON")
        add_settings_args(sp)
    return p


def main(argv: list[str]) -> int:
    from healer.commands._common import run, settings_from

    args = _parser().parse_args(argv)
    if args.action == "status" and args.interval <= 0:
        _parser().error("--interval must be positive")

    def body() -> int:
        import asyncio

        settings = settings_from(args)
        return asyncio.run(_run(settings, args))

    return run(body)


async def _run(settings: Any, args: argparse.Namespace) -> int:
    from healer.errors import UsageError
    from healer.fleet.channels import FleetContext

    ctx = FleetContext.open(settings)
    if not ctx.view.exists:
        raise UsageError(f"no fleet config at {ctx.view.path} (set fleet.config or "
                         "HEALER_FLEET_CONFIG)")
    ctx.view.load()
    try:
        actions = {"status": _status, "probe": _probe, "heal": _heal, "send": _send}
        return int(await actions[args.action](ctx, args))
    finally:
        await ctx.aclose()


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False)


def _print_skipped(ctx: Any) -> None:
    """One line per node the fleet config disables, below the table."""
    from rich.markup import escape

    con = _console()
    for node, why in ctx.view.skipped.items():
        con.print(f"[yellow]{escape(node)}: disabled, its config entry is invalid — "
                  f"{escape(why)}[/]")


def _status_code(ctx: Any, probes: dict[str, Any]) -> int:
    return 0 if all(p.ok for p in probes.values()) and not ctx.view.skipped else 1


def _extra(ctx: Any, probes: dict[str, Any]) -> dict[str, dict[str, str]]:
    """What the loop knows (heartbeats, healing), from its last recorded status."""
    from healer.core.store import open_store
    from healer.fleet.service import STATUS

    try:
        rec = open_store(ctx.settings).get(STATUS, "latest")
    except Exception:
        rec = None
    peers = (rec.data.get("peers") if rec else None) or {}
    out = {}
    for name in probes:
        p = peers.get(name) or {}
        ep = p.get("episode") or {}
        age = p.get("heartbeat_age_s")
        out[name] = {"heartbeat": f"{age:.0f}s" if isinstance(age, int | float) else "",
                     "healing": ep.get("state", "")}
    return out


async def _status(ctx: Any, args: argparse.Namespace) -> int:
    import asyncio
    import json

    from healer.fleet.channels import probe_fleet
    from healer.fleet.render import fleet_table

    names = list(ctx.settings.fleet.channels)
    if args.watch and not args.json:
        from rich.live import Live

        shown = 0
        _print_skipped(ctx)
        probes = await probe_fleet(ctx, ctx.view.peers)
        with Live(fleet_table(probes, names, _extra(ctx, probes)), console=_console(),
                  refresh_per_second=4) as live:
            while True:
                shown += 1
                if args.count and shown >= args.count:
                    break
                await asyncio.sleep(args.interval)
                ctx.view.load()
                probes = await probe_fleet(ctx, ctx.view.peers)
                live.update(fleet_table(probes, names, _extra(ctx, probes)))
        return _status_code(ctx, probes)
    shown = 0
    while True:
        probes = await probe_fleet(ctx, ctx.view.peers)
        if args.json:
            print(json.dumps({"node": ctx.self_id,
                              "peers": {k: v.to_dict() for k, v in probes.items()},
                              "skipped": ctx.view.skipped}, indent=2, sort_keys=True),
                  flush=True)
        else:
            _console().print(fleet_table(probes, names, _extra(ctx, probes),
                                         title=f"fleet seen from {ctx.self_id}"))
            _print_skipped(ctx)
        shown += 1
        if not args.watch or (args.count and shown >= args.count):
            return _status_code(ctx, probes)
        await asyncio.sleep(args.interval)


async def _probe(ctx: Any, args: argparse.Namespace) -> int:
    import json

    from healer.fleet.channels import CHANNELS, probe_peer

    if args.channel:
        unknown = [c for c in args.channel if c not in CHANNELS]
        if unknown:
            from healer.errors import UsageError

            raise UsageError(f"unknown channel {unknown[0]!r} (channels: "
                             f"{', '.join(CHANNELS)})")
    node = ctx.view.peer(args.peer)
    probe = await probe_peer(ctx, node, args.channel)
    if args.json:
        print(json.dumps(probe.to_dict(), indent=2, sort_keys=True))
    else:
        con = _console()
        con.print(f"[bold]{node.node_id}[/] at {node.host}:{node.port}")
        for name, o in probe.channels.items():
            ms = f" ({o.latency_ms:.0f} ms)" if o.latency_ms is not None else ""
            mark = "[green]ok  [/]" if o.ok else "[red]FAIL[/]"
            con.print(f"  {CHANNELS[name].level} {name:<7} {mark} {o.detail}{ms}")
        for name, why in probe.skipped.items():
            con.print(f"  {CHANNELS[name].level} {name:<7} [dim]--   {why}[/]")
    return 0 if probe.ok else 1


async def _heal(ctx: Any, args: argparse.Namespace) -> int:
    import json

    from healer.core.store import open_store
    from healer.fleet.channels import probe_fleet
    from healer.fleet.heal import HealLoop

    store = open_store(ctx.settings)
    con = _console()

    def show(e: dict[str, Any]) -> None:
        if args.json:
            return
        if e["type"] == "dispatch":
            con.print(f"{e['peer']}: {', '.join(e['channels'])} broken → {e['agent']} "
                      f"(attempt {e['attempt']})")
        elif e["type"] == "result":
            con.print(f"{e['peer']}: {e['agent']} → {e['status']}: {e['summary']}")

    loop = HealLoop(ctx, store, on_event=show)
    probes: dict[str, Any] = {}
    if args.peer:
        peers = [ctx.view.peer(args.peer).node_id]
    else:
        probes = await probe_fleet(ctx, ctx.view.peers)
        peers = [name for name, p in probes.items() if not p.ok]
    episodes = []
    for peer in peers:
        # With the probe, a cooldown on one problem does not hide a new, different one.
        why = loop.blocked(peer, probes.get(peer))
        if why and args.peer is None:
            con.print(f"{peer}: skipped ({why})")
            continue
        episodes.append(await loop.heal(peer, "healer fleet heal"))
    if args.json:
        print(json.dumps([e.to_dict() for e in episodes], indent=2, sort_keys=True))
    else:
        if not episodes:
            con.print("[green]every channel to every peer works[/]")
        if args.peer is None:
            _print_skipped(ctx)
        for e in episodes:
            colour = "green" if e.state == "healed" else "red"
            con.print(f"[{colour}]{e.peer}: {e.state}[/] in {e.duration_s:.1f} s"
                      + (f" by {', '.join(e.agents)}" if e.agents else "")
                      + (f" — escalation: {e.escalation}" if e.escalation else ""))
    return 0 if all(e.state in ("healed", "transient") for e in episodes) else 1


async def _send(ctx: Any, args: argparse.Namespace) -> int:
    import json

    from healer.fleet import messages
    from healer.fleet.delivery import Reliability, send_with_fallback
    from healer.fleet.render import delivery_table

    node = ctx.view.peer(args.peer)
    subject = args.subject or (args.message.splitlines() or [""])[0][:200]
    msg = messages.make(args.type, node.node_id, ctx.self_id, subject=subject,
                        body=args.message, priority=args.priority)
    d = await send_with_fallback(ctx, node, msg, stats=Reliability(),
                                 order="strict" if args.strict else None)
    if args.json:
        print(json.dumps(d.to_dict(), indent=2, sort_keys=True))
    else:
        _console().print(delivery_table(d.to_dict()))
    return 0 if d.delivered else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
