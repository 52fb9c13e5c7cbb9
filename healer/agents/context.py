"""Typed context for the task prompts: what an agent is told about its run and its target.

The dispatcher builds these from its own models (a fleet peer, a play session, a sanitized
error report, the living-context layers) and passes them in ``AgentTask.context``; for a run
from the command line, ``context_from_vars`` builds them from ``--var key=value`` pairs. The
templates read attributes (``peer.host``), and Jinja's ``StrictUndefined`` turns any name a
template needs but nobody provided into an error instead of an empty string.

Text that came from outside (log lines, error messages, tracebacks, analysis by other agents)
is kept as plain strings here and fenced as data by the renderer (``healer.agents.prompts``);
nothing in this module treats it as anything but data. What a template may show outside a
fence is checked here: names, hosts and ports (``healer.core.names``), the remediation
``strategy`` (one of ``STRATEGIES``) and a ``branch`` name. Error reports must already be
sanitized (``healer.selfheal``) before they reach a prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from healer.core.names import safe_host, safe_name, safe_port, safe_user
from healer.errors import UnsafeNameError, UsageError
from healer.resources import bundle_path


@dataclass(frozen=True)
class RunInfo:
    """What every task prompt states: who runs, for what, and where the result goes."""

    agent: str
    kind: str
    target: str
    run_id: str
    result_path: str
    cwd: str
    timeout_s: float
    executor: str
    incident: str = ""
    read_only: bool = False  # the run may write only its result file (AgentTask.read_only)
    schema_path: str = field(default_factory=lambda: str(bundle_path(
        "schemas", "agent-result.schema.json")))


@dataclass(frozen=True)
class Peer:
    """A fleet node as an agent needs to know it."""

    name: str
    host: str
    port: int = 8855
    user: str = ""
    ssh_port: int = 22
    tunnel_port: int = 0
    nats_url: str = ""
    mac_address: str = ""
    restart: tuple[str, ...] = ()

    @property
    def _host_in_url(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    @property
    def health_url(self) -> str:
        return f"http://{self._host_in_url}:{self.port}/health"

    @property
    def tunnel_health_url(self) -> str:
        return f"http://127.0.0.1:{self.tunnel_port}/health" if self.tunnel_port else ""

    @property
    def nats_host(self) -> str:
        rest = self.nats_url.split("://", 1)[-1] if self.nats_url else ""
        host = rest.rsplit(":", 1)[0] if rest else ""
        return host.strip("[]") or self.host

    @property
    def nats_port(self) -> int:
        rest = self.nats_url.split("://", 1)[-1] if self.nats_url else ""
        if ":" in rest:
            tail = rest.rsplit(":", 1)[1].rstrip("/")
            if tail.isdigit():
                return int(tail)
        return 4222

    def endpoints(self) -> list[str]:
        """``host:port`` of every channel an agent may probe or repair on this peer: its
        daemon, SSH, NATS and (on this machine's loopback) its tunnel."""
        def hostport(host: str, port: int) -> str:
            return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

        out = [hostport(self.host, self.port), hostport(self.host, self.ssh_port),
               hostport(self.nats_host, self.nats_port)]
        if self.tunnel_port:
            out.append(hostport("127.0.0.1", self.tunnel_port))
        return out

    @classmethod
    def from_vars(cls, name: str, vars: Mapping[str, str], *, default_port: int = 8855) -> Peer:
        """A peer from ``--var`` strings; every name that becomes a host or port is checked."""
        safe_name(name, "peer name")
        host = vars.get("host") or name
        try:
            safe_host(host, "host")
            port = safe_port(_int(vars, "port", default_port), "port")
            ssh_port = safe_port(_int(vars, "ssh_port", 22), "ssh_port")
            tunnel_port = _int(vars, "tunnel_port", 0)
            if tunnel_port:
                safe_port(tunnel_port, "tunnel_port")
            user = vars.get("user", "")
            if user:
                safe_user(user)
            nats_url = vars.get("nats_url", "")
            if nats_url and not nats_url.startswith(("nats://", "tls://")):
                raise UsageError(f"nats_url must start with nats:// or tls://, got {nats_url!r}")
            peer = cls(name=name, host=host, port=port, user=user, ssh_port=ssh_port,
                       tunnel_port=tunnel_port, nats_url=nats_url,
                       mac_address=vars.get("mac_address", ""))
            safe_host(peer.nats_host, "NATS host")
        except UnsafeNameError as exc:
            raise UsageError(str(exc)) from exc
        return peer


@dataclass(frozen=True)
class ChannelStatus:
    """One fleet channel to one peer, as last probed."""

    name: str
    ok: bool
    detail: str = ""
    latency_ms: float | None = None


@dataclass(frozen=True)
class Alert:
    """A detected problem in a play session (alert code, severity, the lines that showed it)."""

    code: str
    severity: str
    title: str
    target: str = ""
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Session:
    """A play session: the workflow being watched."""

    play_id: str
    repository: str = ""
    status: str = "active"
    tasks: tuple[Mapping[str, Any], ...] = ()
    issues: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class ErrorReport:
    """A report_error call, after sanitizing: the only form a healing agent sees."""

    error_type: str
    error_message: str
    fingerprint: str = ""
    traceback: str = ""
    call_site: str = ""
    context: str = ""
    tool_name: str = ""
    severity: str = ""


@dataclass(frozen=True)
class LivingContext:
    """The four living-context layers relevant to one production error."""

    error: Mapping[str, Any]
    scenarios: tuple[Mapping[str, Any], ...] = ()
    invariants: tuple[Mapping[str, Any], ...] = ()
    impact: Mapping[str, Any] = field(default_factory=dict)
    incidents: tuple[Mapping[str, Any], ...] = ()


def _int(vars: Mapping[str, str], key: str, default: int) -> int:
    raw = vars.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise UsageError(f"--var {key} must be an integer, got {raw!r}") from exc


def _json_list(vars: Mapping[str, str], key: str) -> list[Any]:
    raw = vars.get(key)
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--var {key} must be a JSON list: {exc.msg}") from exc
    if not isinstance(value, list):
        raise UsageError(f"--var {key} must be a JSON list")
    return value


def _mapping_items(items: list[Any], key: str) -> tuple[Mapping[str, Any], ...]:
    if not all(isinstance(i, Mapping) for i in items):
        raise UsageError(f"--var {key} must be a JSON list of objects")
    return tuple(items)


# The strategies a remediation runs with (healer.play.evaluate and the runtime's launches).
STRATEGIES = ("fix_config", "fix_code", "restart", "retry", "resume", "fresh_session")
_BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")


def _strategy(vars: Mapping[str, str]) -> str:
    strategy = vars.get("strategy") or "retry"
    if strategy not in STRATEGIES:
        raise UsageError(f"--var strategy must be one of {', '.join(STRATEGIES)}, got "
                         f"{strategy[:40]!r}")
    return strategy


def _branch(vars: Mapping[str, str], default: str = "") -> str:
    branch = vars.get("branch") or default
    if branch and (not _BRANCH.fullmatch(branch) or ".." in branch):
        raise UsageError(f"--var branch {branch[:40]!r} is not a branch name")
    return branch


_FLEET_AGENTS = {"channel-diagnoser", "daemon-restarter", "tunnel-establisher", "config-updater",
                 "nats-reconnector", "inbox-repairer"}


def peer_endpoints(context: Mapping[str, Any]) -> list[str]:
    """The endpoints of the peers a task's context names (``peer``, ``peers``): what a fleet
    agent's sandbox lets it reach."""
    found: list[str] = []
    for value in context.values():
        items = value if isinstance(value, list | tuple) else [value]
        for item in items:
            if isinstance(item, Peer):
                found += item.endpoints()
    return list(dict.fromkeys(found))


_CODE_SOURCES = frozenset({"report_error", "sentry", "alertmanager", "slack", "loki"})


def context_from_vars(agent: str, target: str, vars: Mapping[str, str], *,
                      settings: Any = None) -> dict[str, Any]:
    """The typed context an agent's template needs, built from ``--var`` strings.

    Keys a caller already put in ``AgentTask.context`` win over these (see executors).
    """
    node_port = settings.fleet.node_port if settings is not None else 8855
    ctx: dict[str, Any] = {"vars": dict(vars)}
    if settings is not None:
        ctx["fleet_dir"] = str(settings.fleet_path)
        ctx["fleet_config"] = settings.fleet.config
    else:
        ctx["fleet_dir"], ctx["fleet_config"] = ".fleet-messages", ".multifleet/config.json"
    if agent in _FLEET_AGENTS:
        ctx["peer"] = Peer.from_vars(target, vars, default_port=node_port)
        ctx["channels"] = [ChannelStatus(str(c.get("name", "?")), bool(c.get("ok")),
                                         str(c.get("detail", "")))
                           for c in _mapping_items(_json_list(vars, "channels"), "channels")]
        ctx["problem"] = vars.get("problem", "")
    elif agent == "master-healer":
        names = [n.strip() for n in vars.get("peers", target).split(",") if n.strip()]
        ctx["peers"] = [Peer.from_vars(n, {}, default_port=node_port) for n in names]
        ctx["max_attempts"] = _int(vars, "max_attempts", 3)
        ctx["problem"] = vars.get("problem", "")
    elif agent in ("evaluation-agent", "remediation-agent"):
        ctx["session"] = Session(play_id=target, repository=vars.get("repository", ""))
        alerts = _mapping_items(_json_list(vars, "alerts"), "alerts")
        ctx["alerts"] = [Alert(code=str(a.get("code", "")), severity=str(a.get("severity", "")),
                               title=str(a.get("title", "")), target=str(a.get("target", "")),
                               lines=tuple(str(x) for x in a.get("lines", ())))
                         for a in alerts]
        ctx["logs"] = vars.get("logs", "")
        ctx["strategy"] = _strategy(vars)
        ctx["branch"] = _branch(vars)
        ctx["evaluation"] = vars.get("evaluation", "")
        ctx["attempt"] = _int(vars, "attempt", 1)
        ctx["max_attempts"] = _int(vars, "max_attempts", 3)
    elif agent in ("healing-agent", "living-context-healer"):
        # One prompt family (prompts/code-fix.md.j2) for both names of the code-fix agent.
        ctx["report"] = ErrorReport(
            error_type=vars.get("error_type", "UnknownError"),
            error_message=vars.get("error_message", vars.get("message", "")),
            fingerprint=target, traceback=vars.get("traceback", vars.get("stackTrace", "")),
            call_site=vars.get("call_site", vars.get("file", "")),
            context=vars.get("context", ""), tool_name=vars.get("tool_name", ""),
            severity=vars.get("severity", ""))
        ctx["branch"] = _branch(vars, f"healer/{target[:12]}")
        source = vars.get("source", "")
        ctx["source"] = source if source in _CODE_SOURCES else "report_error"
        ctx["living"] = None
        if agent == "living-context-healer":
            error = {k: vars.get(k, "") for k in ("message", "file", "line", "stackTrace",
                                                  "severity", "source", "environment")}
            ctx["living"] = LivingContext(
                error=error,
                scenarios=_mapping_items(_json_list(vars, "scenarios"), "scenarios"),
                invariants=_mapping_items(_json_list(vars, "invariants"), "invariants"),
                incidents=_mapping_items(_json_list(vars, "incidents"), "incidents"))
        ctx["sentry"] = {}
        ctx["iteration"] = _int(vars, "iteration", 1)
        ctx["max_iterations"] = _int(vars, "max_iterations", 3)
        ctx["max_blast_radius"] = _int(vars, "max_blast_radius", 5)
        ctx["previous_failure"] = vars.get("previous_failure", "")
    return ctx
