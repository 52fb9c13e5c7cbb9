"""From a probe to repairs: which agent fixes which broken channel, and what needs a person.

The rules follow the root cause, so one fault gets one agent, not one per symptom:

- ``http`` down while NATS still answers (or the address answers as another node, or the
  peer announced a new address): the node moved → **config-updater** (its tunnel points at
  the old address too; the next round fixes that).
- ``http`` down, NATS down, SSH up: the daemon is dead → **daemon-restarter** (that brings
  back http, the tunnel's far end and NATS).
- ``http`` and ``ssh`` both down: the machine is unreachable — nothing to run; a person.
- ``tunnel`` down (http fine, SSH up) → **tunnel-establisher**.
- ``nats`` down (daemon answers HTTP) → **nats-reconnector**.
- ``seed`` down → **inbox-repairer**.
- ``relay`` depends on the chief, which is healed as a peer of its own.
- ``ssh`` and ``git`` down: no agent repairs SSH daemons or git remotes → a person.

Each repair kind, and each channel no agent repairs (``person-<channel>``), is a **problem**:
fleet incidents, their attempts, escalations and cooldowns are kept per peer and problem
(``fleet-<peer>-<problem>``), so a new, different fault on a peer that was escalated is
handled as its own incident.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from healer.fleet.channels import PeerProbe


@dataclass(frozen=True)
class Repair:
    """One agent run that should fix ``channels``."""

    agent: str
    kind: str
    channels: tuple[str, ...]
    why: str


AGENTS = {
    "daemon": "daemon-restarter",
    "tunnel": "tunnel-establisher",
    "config": "config-updater",
    "nats": "nats-reconnector",
    "inbox": "inbox-repairer",
}
KINDS = {agent: kind for kind, agent in AGENTS.items()}
NEEDS_A_PERSON = ("ssh", "git")


def _r(kind: str, channels: list[str], why: str) -> Repair:
    return Repair(AGENTS[kind], kind, tuple(channels), why)


@dataclass
class Plan:
    repairs: list[Repair]
    unrepairable: dict[str, str]  # channel → why no agent can fix it
    waiting: dict[str, str]  # channel → what it waits for

    @property
    def empty(self) -> bool:
        return not self.repairs

    @property
    def problems(self) -> set[str]:
        """One key per repair kind and per channel that needs a person (see the module doc)."""
        return {r.kind for r in self.repairs} | {person(c) for c in self.unrepairable}

    def without(self, problems: Iterable[str]) -> Plan:
        """This plan minus ``problems`` (ones a person already has, say)."""
        drop = set(problems)
        return replace(self, repairs=[r for r in self.repairs if r.kind not in drop],
                       unrepairable={c: w for c, w in self.unrepairable.items()
                                     if person(c) not in drop})


def person(channel: str) -> str:
    """The problem key of a broken channel no agent can repair."""
    return f"person-{channel}"


def incident_id(peer: str, problems: Iterable[str]) -> str:
    """``fleet-<peer>-<problem>[.<problem>…]``: stable for the same fault on the same peer."""
    return f"fleet-{peer}-{'.'.join(sorted(set(problems))) or 'channels'}"


def plan(probe: PeerProbe, *, announced_elsewhere: bool = False) -> Plan:
    """What to run for the broken channels of ``probe`` (see the module doc)."""
    broken = set(probe.broken)
    ch = probe.channels
    repairs: list[Repair] = []
    unrepairable: dict[str, str] = {}
    waiting: dict[str, str] = {}
    covered: set[str] = set()

    def works(name: str) -> bool:
        return name in ch and ch[name].ok

    if "http" in broken:
        wrong_node = "expected" in ch["http"].detail
        if announced_elsewhere or wrong_node or works("nats"):
            repairs.append(_r("config", ["http"], "the daemon is alive but not at its configured "
                              "address" if not wrong_node else ch["http"].detail))
            covered |= {"http"}
            if "tunnel" in broken:
                waiting["tunnel"] = "the node's address is being updated first"
                covered.add("tunnel")
        elif "ssh" in broken:
            unrepairable["http"] = "neither the daemon nor SSH answers: the machine is down " \
                                   "or off the network"
            covered |= {"http", "tunnel", "nats"} & broken
        else:
            dead = [c for c in ("http", "tunnel", "nats") if c in broken]
            repairs.append(_r("daemon", dead, "the daemon answers neither HTTP nor NATS, "
                              "SSH works"))
            covered |= set(dead)
    rest = broken - covered
    if "tunnel" in rest:
        if "ssh" in broken:
            unrepairable["tunnel"] = "the tunnel runs over SSH, which fails"
        else:
            repairs.append(_r("tunnel", ["tunnel"], ch["tunnel"].detail))
    if "nats" in rest:
        repairs.append(_r("nats", ["nats"], ch["nats"].detail))
    if "seed" in rest:
        repairs.append(_r("inbox", ["seed"], ch["seed"].detail))
    if "relay" in rest:
        waiting["relay"] = "the chief's daemon (healed as a peer of its own)"
    for name in NEEDS_A_PERSON:
        if name in rest:
            unrepairable[name] = f"no agent repairs {name}: {ch[name].detail}"
    return Plan(repairs, unrepairable, waiting)
