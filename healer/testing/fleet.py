"""The local fleet for tests: it lives in ``healer.demo.fleet`` (the demo ships with healer)."""

from __future__ import annotations

from healer.demo.fleet import (
    LocalFleet,
    LocalNode,
    Tarpit,
    free_port,
    nats_server_binary,
    sshd_binary,
)

__all__ = ["LocalFleet", "LocalNode", "Tarpit", "free_port", "nats_server_binary", "sshd_binary"]
