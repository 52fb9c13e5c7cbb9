"""The embedded local fleet and ``healer loop --demo`` (``make run``).

``healer.demo.fleet.LocalFleet`` brings up real NATS servers, a real sshd and node daemons on
127.0.0.x; ``run_demo`` runs the real loop on it, injects faults and shows them healed. It is
production code (the demo ships with healer); ``healer.testing`` re-exports the fleet for tests.
"""

from __future__ import annotations

from healer.demo.run import run_demo

__all__ = ["run_demo"]
