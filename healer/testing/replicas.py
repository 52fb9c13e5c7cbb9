"""``healer loop`` replicas (three by default) on a NATS JetStream cluster of as many servers,
for failover tests and the failover benchmark (``tests/core/test_failover.py``,
``benchmarks/failover.py``).

Everything listens on 127.0.0.1. Each replica has its own state and results folders (its own
disk), one API port and one token shared by all; they share the R3 bucket, one fleet folder
(where escalation seed files land) and the receivers::

    with ReplicaSet(tmp, extra={...}) as rs:        # cluster, receiver, 3 loops
        victim = rs.leader_of("notify")
        started = time.monotonic()
        victim.kill9()                              # the loop and all it started
        took = rs.takeover_s(victim, started)       # until every duty is led elsewhere
        rs.post("/api/v1/errors", json=report, first=2)   # to replica 2, else the next
        print(rs.duplicates())                      # what was done twice: must be empty

What a failover must not leave behind (``Duplicates``): two incident records of one
fingerprint, two attempts of one report that are not a takeover's retry, one agent run (run
id) started twice, one notification (incident and state) delivered twice, two escalation seed
files of one incident.

The agent (``AGENT``, every agent of every kind through the command executor) notes its run
in ``probe`` as ``<run id>~<random>`` — the only folder its sandbox may write — waits
``agent_s`` seconds and finds nothing to fix: a healing attempt ends ``unfixable`` (a person
is told; the circuit breaker does not count it), a play remediation ``failed``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from healer.testing.loop import LoopProcess, healer_env
from healer.testing.nats import NatsCluster, free_port, jetstream_store
from healer.testing.notify_receivers import SignedWebhook
from healer.testing.wait import wait_for

TOKEN = "failover-test-token-0123456789"  # noqa: S105 - a test token on loopback
SECRET = "whsec_" + base64.b64encode(b"failover-notify-secret-32-bytes!").decode()
BUCKET = "failover"
MARK = "~"  # between the run id and the random part of a probe file's name

AGENT = r"""
import json, os, secrets, sys, time
from pathlib import Path
run = os.environ["HEALER_RUN_ID"]
(Path(sys.argv[1]) / f"{run}~{secrets.token_hex(4)}").write_text(os.environ["HEALER_KIND"])
time.sleep(float(sys.argv[3]))
kind = os.environ["HEALER_KIND"]
with open(sys.argv[2], "w") as fh:  # unfixable: escalated, and no breaker opens
    json.dump({"schema_version": 1, "kind": kind, "target": os.environ["HEALER_TARGET"],
               "run_id": run, "status": "unfixable" if kind == "healing" else "failed",
               "summary": "the failover test's agent fixes nothing"}, fh)
"""


# --- processes ---------------------------------------------------------------------------------

def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (from /proc: no tool to spawn while a tree is frozen)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(stat.parent.name))
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has stopped too)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def runs(pid: int, module: str) -> bool:
    """Whether process ``pid`` runs ``python -m <module>``."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return module.encode() in argv and alive(pid)


def freeze_tree(pid: int) -> list[int]:
    """SIGSTOP ``pid`` and every process below it, top down and until no new one appears (a
    frozen parent starts nothing more); the pids stopped, ``pid`` first."""
    assert pid > 1  # never a process group, never every process
    frozen: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        if p in frozen:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGSTOP)
            frozen.append(p)
            todo.extend(_children(p))
    return frozen


def signal_all(pids: list[int], sig: int) -> None:
    for p in pids:
        assert p > 1
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, sig)


# --- one replica -------------------------------------------------------------------------------

@dataclass
class Replica:
    name: str  # its node id: n0, n1, …
    env: dict[str, str]
    port: int
    cwd: Path
    loop: LoopProcess = field(init=False)
    frozen: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.loop = LoopProcess(self.env, cwd=self.cwd)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.loop.proc is not None and self.loop.proc.poll() is None

    def start(self, wait: float = 90.0) -> Replica:
        self.loop.start(wait=wait)
        return self

    def kill9(self) -> None:
        """kill -9 of the loop and of every process it started (workers, agents): the host
        died. The tree is frozen first, so nothing it starts meanwhile escapes."""
        assert self.loop.proc is not None
        pids = freeze_tree(self.loop.proc.pid)
        signal_all(pids, signal.SIGKILL)
        self.loop.proc.wait(10)

    def freeze(self) -> None:
        """SIGSTOP of the loop and everything it started: cut off from NATS and the world, as
        in a partition (its leases stop being renewed, its sockets stay open)."""
        assert self.loop.proc is not None
        self.frozen = freeze_tree(self.loop.proc.pid)

    def thaw(self) -> None:
        signal_all(self.frozen, signal.SIGCONT)
        self.frozen = []

    def frozen_workers(self) -> list[int]:
        """The healing workers (``healer.code.worker``) stopped with the replica."""
        return [p for p in self.frozen if runs(p, "healer.code.worker")]

    def leads(self) -> set[str]:
        """What the replica says it leads (``loop.json``, written every few seconds)."""
        try:
            return set(json.loads(self.loop.status_file.read_text())["leads"])
        except (OSError, ValueError, KeyError):
            return set()

    def stop(self) -> None:
        if self.frozen:
            self.thaw()
        if self.alive:
            with contextlib.suppress(subprocess.TimeoutExpired):  # stop() killed it then
                self.loop.stop()


# --- what a failover must not leave behind -----------------------------------------------------

@dataclass
class Duplicates:
    """Everything done twice; empty when the failover was clean."""

    incidents: dict[str, int] = field(default_factory=dict)  # fingerprint → records
    attempts: dict[str, int] = field(default_factory=dict)  # fingerprint → first attempts
    runs: dict[str, int] = field(default_factory=dict)  # agent run id → starts
    notices: dict[str, int] = field(default_factory=dict)  # "incident state" → deliveries
    escalations: dict[str, int] = field(default_factory=dict)  # incident → seed files

    @property
    def total(self) -> int:
        return sum(n - 1 for part in (self.incidents, self.attempts, self.runs, self.notices,
                                      self.escalations) for n in part.values())

    def __bool__(self) -> bool:
        return self.total > 0

    def summary(self) -> str:
        parts = {"incidents": self.incidents, "attempts": self.attempts,
                 "agent runs": self.runs, "notifications": self.notices,
                 "escalations": self.escalations}
        return ", ".join(f"{name} {sum(n - 1 for n in d.values())}"
                         for name, d in parts.items())


def _twice(counts: Counter[str]) -> dict[str, int]:
    return {k: n for k, n in counts.items() if n > 1}


def agent_runs(probe: Path) -> Counter[str]:
    """How often each agent run id started."""
    return Counter(p.name.split(MARK, 1)[0] for p in probe.iterdir() if MARK in p.name)


def seed_incidents(fleet: Path) -> Counter[str]:
    """Escalation seed files (open or archived) per incident."""
    from healer.core import seeds

    out: Counter[str] = Counter()
    human = fleet / seeds.HUMAN
    for path in [*human.glob("*.md"), *human.glob("archive/*.md")]:
        with contextlib.suppress(OSError, ValueError):
            incident = seeds.read(path).incident
            if incident:
                out[incident] += 1
    return out


def delivered(hook: SignedWebhook) -> Counter[str]:
    """Deliveries per ``"<incident> <state>"`` (a state told twice in a row is a duplicate:
    nothing in these tests moves an incident back to a state it left)."""
    return Counter(f"{v['body']['data']['incident']} {v['body']['data']['state']}"
                   for v in list(hook.verified))


def attempts_by_report(store: Any) -> Counter[str]:
    """Attempts per fingerprint that are not a takeover's retry of an earlier one (nor the
    new report's attempt that did a retry's work, ``superseded_by``)."""
    from healer.selfheal.attempts import Attempts

    atts = list(Attempts(store).all())
    served = {a["superseded_by"] for a in atts if a.get("superseded_by")}
    return Counter(str(a.get("fingerprint")) for a in atts
                   if not a.get("retry_of") and a.get("attempt_id") not in served)


def incidents_by_fingerprint(store: Any) -> Counter[str]:
    from healer.core.incidents import INCIDENTS as KIND

    out: Counter[str] = Counter()
    for rec in store.list(KIND):
        # A report's incident is keyed by its fingerprint; a Sentry issue's names it.
        fp = rec.data.get("fingerprint") or (rec.data.get("kind") == "code"
                                             and rec.data.get("key"))
        if fp:
            out[str(fp)] += 1
    return out


# --- the set ---------------------------------------------------------------------------------

def git_repo(path: Path) -> Path:
    """A small repository on ``main`` for the healing attempts' worktrees."""
    (path / "src" / "app").mkdir(parents=True)
    (path / "src" / "app" / "tools.py").write_text("def lookup(row):\n    return row['id']\n")
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "x"]):
        subprocess.run(["git", *argv], cwd=path, check=True, capture_output=True, timeout=30)
    return path


class ReplicaSet:
    """``n`` replicas on an ``n``-server cluster (see the module docstring). ``ttl_s`` is the
    duties' lease time, ``attempt_ttl_s`` the attempts' (longer: a worker starting on a busy
    machine, or a NATS election, must not look dead); ``agent_s`` how long each agent run
    takes; ``extra`` more environment for every replica."""

    def __init__(self, root: Path, *, n: int = 3, ttl_s: float = 3.0,
                 attempt_ttl_s: float = 6.0, agent_s: float = 2.0,
                 extra: dict[str, str] | None = None):
        self.root = root
        self.ttl_s, self.attempt_ttl_s = ttl_s, attempt_ttl_s
        self.probe = root / "probe"
        self.fleet = root / "fleet"
        self.repo = root / "repo"
        self.agent = root / "agent.py"
        self.cluster = NatsCluster(n, store_dir=root / "nats")
        self.hook = SignedWebhook(SECRET)
        self.n, self.agent_s, self.extra = n, agent_s, dict(extra or {})
        self.replicas: list[Replica] = []
        self.store: Any = None
        self._stack = contextlib.ExitStack()

    # -- life ---------------------------------------------------------------------------------

    def __enter__(self) -> ReplicaSet:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def env(self, name: str, port: int) -> dict[str, str]:
        d = self.root / name
        agent = [sys.executable, str(self.agent), str(self.probe), "{result_file}",
                 str(self.agent_s)]
        return healer_env(
            d / "state", d / "results", self.fleet, HEALER_NODE_ID=name,
            HEALER_STORE="jetstream", HEALER_NATS_URLS=json.dumps(self.cluster.urls),
            HEALER__STORE__BUCKET=BUCKET, HEALER__STORE__REPLICAS=str(min(3, self.n)),
            HEALER_HA_LEASE_TTL_S=str(self.ttl_s), HEALER__API__ENABLED="true",
            HEALER_PORT=str(port),
            HEALER_TOKEN=TOKEN, HEALER_EXECUTOR="command",
            HEALER__EXECUTOR__COMMANDS=json.dumps({"*": agent}),
            HEALER__AGENTS__SANDBOX_WRITE_PATHS=json.dumps([str(self.probe)]),
            HEALER__SELFHEAL__REPO=str(self.repo),
            HEALER__SELFHEAL__LEASE_TTL_S=str(self.attempt_ttl_s),
            HEALER__SELFHEAL__TAKEOVER_INTERVAL_S="1", HEALER__SELFHEAL__MAX_CONCURRENT="50",
            HEALER__NOTIFY__INTERVAL_S="0.2", HEALER__NOTIFY__BACKOFF_S="0.5",
            HEALER__NOTIFY__ROUTES=json.dumps([{"targets": ["webhook"]}]),
            HEALER_NOTIFY_WEBHOOK_URL=self.hook.url + "/healer",
            HEALER_NOTIFY_WEBHOOK_SECRET=SECRET, **self.extra)

    def start(self) -> None:
        self.probe.mkdir(parents=True, exist_ok=True)
        self.agent.write_text(AGENT)
        if not self.repo.exists():
            git_repo(self.repo)
        self._stack.enter_context(self.cluster)
        self._stack.enter_context(self.hook)
        self.store = jetstream_store(self.cluster.urls, BUCKET, replicas=min(3, self.n))
        self.replicas = [Replica(f"n{i}", self.env(f"n{i}", port), port, self.repo)
                         for i, port in enumerate(free_port() for _ in range(self.n))]
        # The first replica up takes every free duty: one leader of all, as after a deploy.
        self.replicas[0].start()
        wait_for(lambda: self.replicas[0].leads(), timeout=60)
        for r in self.replicas[1:]:
            r.start()

    def stop(self) -> None:
        for r in self.replicas:
            with contextlib.suppress(Exception):
                r.stop()
        if self.store is not None:
            with contextlib.suppress(Exception):
                self.store.close()
            self.store = None
        self._stack.close()

    def restart(self, replica: Replica) -> None:
        """Start a replica again (after ``kill9``) on its folders and port."""
        replica.loop = LoopProcess(replica.env, cwd=replica.cwd)
        replica.start()

    # -- who leads --------------------------------------------------------------------------

    def owners(self) -> dict[str, str | None]:
        """Each duty's live owner (``<node>/<instance>``), None where it expired; {} when the
        store could not answer (a server of the cluster is away)."""
        from healer.core.duties import read_leaders

        try:
            return {row["duty"]: row["owner"] for row in read_leaders(self.store)}
        except Exception:  # a 503 while a stream leader is elected: ask again
            return {}

    def leader_of(self, duty: str) -> Replica:
        owner = wait_for(lambda: self.owners().get(duty), timeout=60)
        return self.by_name(owner.split("/", 1)[0])

    def by_name(self, name: str) -> Replica:
        return next(r for r in self.replicas if r.name == name)

    def takeover_s(self, gone: Replica, started: float, timeout: float = 60.0) -> float:
        """Seconds from ``started`` (monotonic) until every duty has a live owner other than
        ``gone``."""
        def done() -> bool:
            now = self.owners()
            return bool(now) and all(o and not o.startswith(gone.name + "/")
                                     for o in now.values())

        wait_for(done, timeout=timeout, every=0.02)
        return time.monotonic() - started

    # -- traffic ------------------------------------------------------------------------------

    def post(self, path: str, *, first: int = 0, **kw: Any) -> httpx.Response:
        """POST to replica ``first``; one that does not answer (dead, or not listening yet)
        is skipped for the next, as a load balancer does. A request a replica took is never
        sent twice: only a refused connection moves on."""
        headers = {"Authorization": f"Bearer {TOKEN}", **kw.pop("headers", {})}
        last: Exception | None = None
        for i in range(len(self.replicas)):
            r = self.replicas[(first + i) % len(self.replicas)]
            if r.frozen:
                continue  # a partitioned replica: the balancer's health check took it out
            try:
                return httpx.post(r.url + path, headers=headers, timeout=30, **kw)
            except httpx.ConnectError as exc:
                last = exc
        raise AssertionError(f"no replica answered {path}: {last}")

    # -- what happened ----------------------------------------------------------------------

    def duplicates(self) -> Duplicates:
        return Duplicates(
            incidents=_twice(incidents_by_fingerprint(self.store)),
            attempts=_twice(attempts_by_report(self.store)),
            runs=_twice(agent_runs(self.probe)),
            notices=_twice(delivered(self.hook)),
            escalations=_twice(seed_incidents(self.fleet)))

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"--- {r.name}\n{r.loop.log()[-tail:]}" for r in self.replicas)


@contextlib.contextmanager
def frozen(replica: Replica) -> Iterator[Replica]:
    """A partition of ``replica`` for the block (SIGSTOP … SIGCONT)."""
    replica.freeze()
    try:
        yield replica
    finally:
        replica.thaw()
