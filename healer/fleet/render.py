"""Rich tables for people: the fleet (peers × channels), a delivery, healing episodes."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from healer.fleet.channels import PeerProbe


def channel_cell(probe: PeerProbe, name: str) -> str:
    if name in probe.channels:
        o = probe.channels[name]
        if o.ok:
            ms = f" {o.latency_ms:.0f}ms" if o.latency_ms is not None else ""
            return f"[green]✓[/]{ms}"
        return f"[red]✗[/] {o.detail[:28]}"
    if name in probe.skipped:
        return "[dim]–[/]"
    return ""


def fleet_table(probes: dict[str, PeerProbe], channels: list[str],
                extra: dict[str, dict[str, str]] | None = None, title: str = "fleet") -> Table:
    """One row per peer, one column per channel (✓ latency, ✗ reason, – not applicable)."""
    extra = extra or {}
    cols = sorted({k for e in extra.values() for k in e})
    t = Table(title=title, title_justify="left", expand=False)
    t.add_column("node", style="bold")
    for name in channels:
        t.add_column(name)
    for c in cols:
        t.add_column(c)
    for peer, probe in sorted(probes.items()):
        t.add_row(peer, *(channel_cell(probe, n) for n in channels),
                  *(extra.get(peer, {}).get(c, "") for c in cols))
    return t


def delivery_table(delivery: dict[str, Any]) -> Table:
    t = Table(title=f"send to {delivery['peer']}: "
              + (f"delivered on {delivery['level']} {delivery['channel']}"
                 if delivery["delivered"] else "NOT delivered")
              + f" in {delivery['elapsed_s']:.2f} s", title_justify="left")
    for col in ("level", "channel", "status", "timeout", "detail"):
        t.add_column(col)
    for a in delivery["attempts"]:
        colour = {"delivered": "green", "sent": "yellow", "failed": "red"}.get(a["status"],
                                                                                "dim")
        t.add_row(a["level"], a["channel"], f"[{colour}]{a['status']}[/]",
                  f"{a['timeout_s']:g}s" if a["timeout_s"] else "", a["detail"][:60])
    return t


def episodes_table(rows: list[dict[str, Any]], title: str = "healing") -> Table:
    t = Table(title=title, title_justify="left")
    for col in ("fault", "peer", "broken", "agent", "time", "outcome"):
        t.add_column(col)
    for r in rows:
        colour = "green" if r["outcome"] == "healed" else "red"
        t.add_row(r.get("fault", ""), r["peer"], ", ".join(r.get("channels", [])),
                  ", ".join(r.get("agents", [])) or "-",
                  f"{r['seconds']:.1f} s" if r.get("seconds") is not None else "-",
                  f"[{colour}]{r['outcome']}[/]")
    return t
