"""The fleet healing agents as deterministic playbooks (no model needed).

Each does what its agent definition in ``agents/`` says, with the same result contract
(``heal-<kind>-<peer>-<epoch>.json``):

===================  =======  ====================================================================
agent                kind     does
===================  =======  ====================================================================
channel-diagnoser    diagnose probes every channel, says which work and why the others fail
daemon-restarter     daemon   over SSH runs the node's ``restart`` argv, then waits for /health
tunnel-establisher   tunnel   ``ssh -f -N -L`` with keep-alives, verified through the tunnel
config-updater       config   the node's new address from its heartbeat or the discovery
                              command (never a scan), verified, written atomically, re-probed
nats-reconnector     nats     local server, the node's server, its daemon's link, its route
inbox-repairer       inbox    moves what blocks the seed inbox aside and recreates it
===================  =======  ====================================================================

The node comes from the fleet config when the target is a node there (so its restart
command, tunnel port and NATS server are known), else from the task's ``peer`` context (an
ad-hoc ``--var host=…`` run). In the loop, the fleet service passes its live ``FleetContext``
as ``context["fleet"]`` (shared NATS link, heartbeats); standalone runs open their own.

Importing this package registers every playbook (``healer.agents.playbooks`` imports it on
first use). The modules, by what they repair: ``diagnose`` (every channel: channel-diagnoser,
master-healer), ``daemon`` (the node: daemon-restarter, inbox-repairer), ``address`` (how it is
reached: tunnel-establisher, config-updater), ``nats_link`` (nats-reconnector); ``common``
holds what they share.
"""

from __future__ import annotations

from healer.fleet.playbooks import address, daemon, diagnose, nats_link

__all__ = ["address", "daemon", "diagnose", "nats_link"]
