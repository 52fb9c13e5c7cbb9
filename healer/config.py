"""healer's settings: one typed tree, documented defaults, four sources.

Precedence, lowest first: the defaults below → ``cto-config.json`` (the orchestrator's
``defaults.play.healerEndpoint`` and ``defaults.remediation.*``) → ``healer.yaml`` → environment
variables → command-line flags. Every field carries its documentation in ``metadata["doc"]``;
``schemas/config.schema.json`` is generated from this tree (``python -m healer.config``) and a
test keeps the two in step.

Environment variables: the documented short names (``HEALER_STATE_DIR``, ``HEALER_PORT`` …) and,
for every field, ``HEALER__<SECTION>__<FIELD>`` (e.g. ``HEALER__SELFHEAL__COOLDOWN_S=600``).
Flags: ``--set section.field=value`` on any command that loads settings.

The fleet's node list is not a setting: it is read from ``.multifleet/config.json``
(``fleet.config``) by ``load_multifleet``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from healer.core.names import (
    MIN_TOKEN_CHARS,
    is_loopback_host,
    safe_host,
    safe_name,
    safe_port,
    safe_user,
)
from healer.core.schemas import errors as schema_errors
from healer.errors import ConfigError, UnsafeNameError


def setting(default: Any, doc: str, *, env: str = "", secret: bool = False, **schema: Any) -> Any:
    """A settings field: its default, its documentation, its short env var and schema limits."""
    meta = {"doc": doc, "env": env, "secret": secret, "schema": schema}
    if isinstance(default, list | dict):
        return field(default_factory=lambda d=default: json.loads(json.dumps(d)), metadata=meta)
    return field(default=default, metadata=meta)


def section(cls: type, doc: str) -> Any:
    return field(default_factory=cls, metadata={"doc": doc, "env": "", "secret": False})


@dataclass
class LogSettings:
    level: Literal["debug", "info", "warning", "error"] = setting(
        "info", "Lowest level that is logged.", env="HEALER_LOG_LEVEL"
    )
    format: Literal["text", "json"] = setting(
        "text", "`json` writes one JSON object per line (for log shippers).",
        env="HEALER_LOG_FORMAT",
    )


@dataclass
class ApiSettings:
    host: str = setting(
        "127.0.0.1", "Address the HTTP API binds to. Binding off loopback requires `api.token`.",
        env="HEALER_HOST",
    )
    port: int = setting(8083, "TCP port of the HTTP API (0 picks a free one).",
                        env="HEALER_PORT", minimum=0, maximum=65535)
    token: str = setting(
        "", "Bearer token every route needs when set (webhooks carry their own signatures; "
        "see `public_health` and `public_metrics`). Empty disables the check, which is allowed "
        "on loopback only; off loopback it must be at least 16 characters.",
        env="HEALER_TOKEN", secret=True,
    )
    max_body_bytes: int = setting(1 << 20, "Largest request body accepted (bytes).", minimum=1024)
    enabled: bool = setting(True, "Whether `healer loop` serves the HTTP API.")
    allowed_hosts: list[str] = setting(
        [], "Host header values accepted besides loopback names and addresses and the bound "
        "address (DNS-rebinding protection): `healer.example.com`, `.example.com` for a domain "
        "and its subdomains, `*` for any.", items={"type": "string", "minLength": 1},
    )
    allowed_origins: list[str] = setting(
        [], "Browser origins (`https://ops.example.com`) allowed to call the API besides "
        "healer's own; a request with any other `Origin` gets 403.",
        items={"type": "string", "pattern": "^https?://[^/]+$"},
    )
    public_health: bool = setting(
        True, "Whether `GET /health` answers without the token (liveness probes rarely carry "
        "one).")
    public_metrics: bool = setting(
        False, "Whether `GET /metrics` answers without the token (for scrapers that cannot "
        "send `Authorization`).")
    header_timeout_s: float = setting(
        10.0, "A client must send a request's complete headers within this long of connecting "
        "(or of its previous response); slower ones are disconnected.", minimum=0.1)
    body_timeout_s: float = setting(
        30.0, "A request's whole body must arrive within this long; slower ones get 408.",
        minimum=0.1)
    keepalive_s: float = setting(
        5.0, "Idle keep-alive connections are closed after this long (uvicorn "
        "`timeout_keep_alive`).", minimum=0.1)
    max_json_depth: int = setting(32, "Deepest JSON nesting accepted in a request body.",
                                  minimum=4, maximum=512)
    max_connections: int = setting(
        2048, "Open connections and requests in flight at most (uvicorn `limit_concurrency`); "
        "past it new requests get 503.", minimum=16)


@dataclass
class BusSettings:
    max_file_bytes: int = setting(1 << 20, "Result files larger than this are rejected.",
                                  minimum=1)
    settle_s: float = setting(
        2.0, "How long a result file that ends before its JSON does must stay unchanged, after "
        "its writer closed it, before it is rejected as incomplete; also how long a fresh hard "
        "link may take to drop back to one name (link-then-unlink writers).", minimum=0,
    )
    max_wait_s: float = setting(
        60.0, "Longest wait for an incomplete result file whose writer keeps it open or keeps "
        "changing it (a writer pausing mid-file); then it is rejected, saying whether it was "
        "still being written. At least `bus.settle_s`.", minimum=0,
    )
    rescan_s: float = setting(
        5.0, "Interval of the safety rescan of the results dir, in case an event was missed.",
        minimum=0.1,
    )
    max_json_depth: int = setting(64, "Deepest JSON nesting accepted in a result file.",
                                  minimum=4)


@dataclass
class StoreSettings:
    backend: Literal["file", "jetstream"] = setting(
        "file", "`file`: records under the state dir (one machine). `jetstream`: NATS JetStream "
        "key-value buckets shared by every node's healer.", env="HEALER_STORE",
    )
    nats_urls: list[str] = setting(["nats://127.0.0.1:4222"], "NATS servers for `jetstream`.",
                                   env="HEALER_NATS_URLS")
    bucket: str = setting("healer", "JetStream key-value bucket holding the records.")
    history: int = setting(5, "Revisions kept per record in the bucket.", minimum=1,
                           maximum=64)
    replicas: int = setting(1, "Replicas of the bucket and the results stream when healer "
                            "creates them (3 in a NATS cluster).", minimum=1, maximum=5)
    credentials: str = setting("", "NATS credentials file (.creds), passed to nats-py.")
    tls_ca: str = setting("", "CA bundle to verify the NATS servers (enables TLS).")
    tls_cert: str = setting("", "Client certificate for NATS mutual TLS.")
    tls_key: str = setting("", "Client key for NATS mutual TLS.")
    connect_timeout_s: float = setting(5.0, "Timeout of the first NATS connection.", minimum=0.1)
    lease_ttl_s: float = setting(30.0, "How long a node's lease on a peer or incident lasts "
                                 "unless renewed; a dead node's lease is taken over after it.",
                                 minimum=1)


@dataclass
class ClaudeSettings:
    model: str = setting("", "Model name passed to Claude Code; empty uses the CLI's default.")
    max_turns: int = setting(30, "Turn cap for one agent run (an agent's own maxTurns wins if "
                             "lower).", minimum=1)
    max_budget_usd: float = setting(2.0, "Spending cap for one agent run, in US dollars.",
                                    minimum=0)
    cli_path: str = setting("", "Path to the `claude` CLI; empty uses the one bundled in "
                            "claude-agent-sdk.")


@dataclass
class ExecutorSettings:
    default: Literal["auto", "playbook", "claude", "command"] = setting(
        "auto", "How agents run. `auto`: claude when a model is reachable, else playbook.",
        env="HEALER_EXECUTOR",
    )
    timeout_s: float = setting(600.0, "Wall-clock limit of one agent run.", minimum=1)
    max_concurrent: int = setting(4, "Agent runs in flight at once on this machine, of every "
                                  "kind (play, code, fleet, by hand) and from every healer "
                                  "process together; more wait for a slot.",
                                  minimum=1)
    slot_wait_s: float = setting(3600.0, "Longest a run waits for a free agent slot; past it "
                                 "the run fails without starting.", minimum=0.1)
    commands: dict[str, list[str]] = setting(
        {}, "For the `command` executor: agent name → argv (no shell). `{prompt_file}`, "
        "`{result_file}` and `{cwd}` are substituted.",
    )
    claude: ClaudeSettings = section(ClaudeSettings, "Claude Code executor.")


@dataclass
class ForgeSettings:
    kind: Literal["local", "github"] = setting(
        "local", "`local`: issues and PR records as Markdown/JSON under the state dir. "
        "`github`: the GitHub REST API.", env="HEALER_FORGE",
    )
    github_repo: str = setting("", "`owner/name` on GitHub for the `github` forge.")
    token_env: str = setting("GITHUB_TOKEN", "Environment variable holding the forge token.")
    api_url: str = setting("https://api.github.com", "GitHub API base URL.")
    remote: str = setting("origin", "Git remote the `github` forge pushes healing branches to.")


@dataclass
class NotifySettings:
    discord_webhook_url: str = setting(
        "", "Discord webhook for P0/P1 escalations; empty disables.",
        env="HEALER_DISCORD_WEBHOOK", secret=True,
    )
    timeout_s: float = setting(10.0, "Timeout of one notification post.", minimum=0.1)


@dataclass
class DetectSettings:
    catalog: str = setting("", "A user catalog (YAML). Empty uses the embedded catalog.")
    catalog_mode: Literal["extend", "replace"] = setting(
        "extend", "Whether a user catalog adds to the embedded one or replaces it."
    )
    preflight_window_s: float = setting(60.0, "Priority-1 patterns count only this long after "
                                        "an agent starts.", minimum=0)
    group_window_s: float = setting(1800.0, "Alerts of one code in one workflow family within "
                                    "this window share one incident.", minimum=0)
    max_line_chars: int = setting(200, "Alert lines are cut to this many characters.",
                                  minimum=20)


@dataclass
class PlaySettings:
    healer_endpoint: str = setting("http://localhost:8083", "Where orchestrators reach healer "
                                   "(cto-config `defaults.play.healerEndpoint`).")
    max_iterations: int = setting(3, "Remediation attempts before escalating to a human "
                                  "(cto-config `defaults.remediation.maxIterations`).", minimum=1)
    sync_timeout_s: float = setting(300.0, "cto-config `defaults.remediation.syncTimeoutSecs`.",
                                    minimum=1)
    evaluate_interval_s: float = setting(300.0, "How often active sessions are evaluated.",
                                         minimum=0.1)
    reevaluate_after_s: float = setting(120.0, "Re-evaluation delay after a remediation.",
                                        minimum=0)
    dedup_window_s: float = setting(1800.0, "Alerts of one code and workflow family share one "
                                    "forge issue within this window.", minimum=0)
    actions: dict[str, list[str]] = setting(
        {}, "What the remediation playbook runs per strategy (fix_config, fix_code, restart, "
        "retry): an argv, no shell. `{play_id}`, `{agent}`, `{issue_type}`, `{level}`, "
        "`{missing_tools}`, `{task_id}`, `{repository}`, `{namespace}` are substituted.",
    )
    action_timeout_s: float = setting(120.0, "Timeout of one remediation action.", minimum=1)
    tools_server_hosts: list[str] = setting(
        [], "Hosts the pre-flight may connect to when a session names a `tools_server` "
        "(`tools.cto.svc`, `.svc` for a domain and its subdomains); empty allows any.",
        items={"type": "string", "minLength": 1})
    stuck_after_s: float = setting(600.0, "An active agent silent this long (no logs, no "
                                   "inventory) is stuck (alert A9).", minimum=1)


@dataclass
class SelfhealSettings:
    enabled: bool = setting(True, "Whether report_error may dispatch healing agents.")
    severity_threshold: int = setting(2, "Investigate only severities at or below this "
                                      "(0 critical … 4 info).", minimum=0, maximum=4)
    cooldown_s: float = setting(3600.0, "No new attempt for a fingerprint this long after its "
                                "last attempt ended.", minimum=0)
    max_concurrent: int = setting(2, "Attempts investigating at once.", minimum=1)
    breaker_window: int = setting(5, "Stop when this many latest terminal attempts all failed.",
                                  minimum=1)
    timeout_s: float = setting(1800.0, "Wall-clock limit of one healing run.", minimum=1)
    worktree_ttl_s: float = setting(86400.0, "Worktrees are removed this long after the "
                                    "attempt ends.", minimum=0)
    repo: str = setting("", "Repository being healed; empty means the git repository of the "
                        "working directory.")
    breaker_reset_s: float = setting(3600.0, "After the circuit breaker opened, let one attempt "
                                     "through again this long after the last failure.", minimum=0)
    base_branch: str = setting("", "Branch healing worktrees start from and PRs target; empty "
                               "uses `main` if it exists, else the current branch.")
    allowed_hosts: list[str] = setting([], "Host names (and their subdomains) the sanitiser "
                                       "keeps, in addition to loopback and the reserved "
                                       "example domains.")
    refresh_interval_s: float = setting(300.0, "How often the loop asks the forge about open "
                                        "fix PRs (pr_open → pr_merged).", minimum=1)
    worker: Literal["process", "task"] = setting(
        "process", "Where a healing run happens: `process` (a detached worker that outlives the "
        "server that accepted the report) or `task` (an asyncio task in that server).",
    )


@dataclass
class FleetSettings:
    config: str = setting(".multifleet/config.json", "The fleet's node list (multifleet format).",
                          env="HEALER_FLEET_CONFIG")
    node_port: int = setting(8855, "Port of each node daemon's HTTP endpoint.",
                             minimum=1, maximum=65535)
    heartbeat_s: float = setting(10.0, "Heartbeat interval.", minimum=0.1)
    watchdog_start_s: float = setting(60.0, "Watchdog starts this long after boot.", minimum=0)
    watchdog_interval_s: float = setting(30.0, "Watchdog period.", minimum=0.1)
    slow_s: float = setting(45.0, "A peer silent this long is slow.", minimum=0)
    stale_s: float = setting(90.0, "A peer silent this long is stale: repair its channel.",
                             minimum=0)
    readdress_s: float = setting(300.0, "Re-read a silent peer's address after this long.",
                                 minimum=0)
    alert_chief_s: float = setting(600.0, "Alert the chief about a peer silent this long.",
                                   minimum=0)
    repair_cooldown_s: float = setting(300.0, "Per-peer cooldown between repairs.", minimum=0)
    send_budget_s: float = setting(30.0, "Whole time budget of one send_with_fallback.",
                                   minimum=1)
    order: Literal["strict", "reliability"] = setting(
        "reliability", "Channel order: `strict` ladder or by recent `reliability` score."
    )
    heal_wait_s: float = setting(30.0, "Longest wait for a healing agent before re-probing.",
                                 minimum=0)
    max_heal_attempts: int = setting(3, "Attempts per broken channel before a human escalation.",
                                     minimum=1)
    nats_url: str = setting(
        "", "NATS server this healer uses for the P1 channel and heartbeats; empty: this node's "
        "`nats_url` in the fleet config, else the chief's.", env="HEALER_FLEET_NATS_URL")
    channels: list[str] = setting(
        ["nats", "http", "tunnel", "relay", "seed", "ssh", "wol", "git"],
        "Channels in ladder order (P1 NATS, P2 HTTP direct and via the SSH tunnel, P3 chief "
        "relay, P4 seed file, P5 SSH, P6 Wake-on-LAN, P7 git). Leave one out to disable it.")
    timeouts: dict[str, float] = setting(
        {"nats": 2.0, "http": 3.0, "tunnel": 3.0, "relay": 3.0, "seed": 2.0, "ssh": 8.0,
         "wol": 3.0, "git": 10.0, "discord": 10.0},
        "Per-channel timeout in seconds; a channel failing more than half the time gets half "
        "of it, and no send outlives `send_budget_s`.")
    heal_interval_s: float = setting(60.0, "How often the loop probes every peer and heals "
                                     "what is broken.", minimum=0.1)
    agent_timeout_s: float = setting(120.0, "Wall-clock limit of one fleet healing agent run.",
                                     minimum=1)
    ssh_identity: str = setting("", "Private key for SSH to the nodes; empty uses ssh's "
                                "defaults.")
    ssh_strict_host_key_checking: Literal["yes", "accept-new", "no"] = setting(
        "accept-new", "ssh's StrictHostKeyChecking for every fleet SSH call (BatchMode is "
        "always on, so an unknown key never prompts).")
    ssh_known_hosts: str = setting("", "UserKnownHostsFile for fleet SSH; empty uses ssh's "
                                   "default.")
    ssh_keepalive_s: float = setting(15.0, "ServerAliveInterval of SSH tunnels (3 missed "
                                     "answers end the tunnel).", minimum=1)
    wol_address: str = setting(
        "127.0.0.1", "Where Wake-on-LAN magic packets go. Set your LAN's broadcast address to "
        "wake real machines; the loopback default keeps the packet on this machine.")
    wol_port: int = setting(9, "UDP port of Wake-on-LAN packets.", minimum=1, maximum=65535)
    git_push: bool = setting(False, "Whether the git channel (P7) pushes its commit.")
    discovery_command: list[str] = setting(
        [], "argv printing a moved node's current address as JSON `{\"host\", \"port\"}`; "
        "`{node}` is substituted. Used by the config updater when no heartbeat announced it.")
    interactive_marker: str = setting(
        ".healer/interactive-session", "File on a node that an interactive agent session "
        "holds while a person works there (relative to the SSH user's home); while it exists, "
        "healer leaves a notice instead of restarting that node's daemon.")
    ladder_wait_s: float = setting(30.0, "Repair ladder: wait after L1 notify, L2 guide and L3 "
                                   "assist before re-probing (returns early once healthy).",
                                   minimum=0)
    restart_verify_s: float = setting(10.0, "Longest wait for a restarted daemon's /health, "
                                      "and for a restarted NATS server's routes to answer.",
                                      minimum=0)
    recovery_script: list[str] = setting([], "Repair ladder L3.5: argv run on this machine "
                                         "with `{node}` substituted; empty skips the level.")
    recovery_timeout_s: float = setting(60.0, "Timeout of the L3.5 recovery script.", minimum=1)
    assist_interval_s: float = setting(900.0, "Repair ladder L5: at most one request to a "
                                       "healthy peer to assist per this many seconds.", minimum=0)
    alert_interval_s: float = setting(900.0, "At most one alert to the chief per silent peer "
                                      "per this many seconds.", minimum=0)
    allowed_actions: list[str] = setting(
        ["notify", "guide", "assist", "recovery", "restart", "peer_assist", "daemon", "tunnel",
         "config", "nats", "inbox"],
        "Repairs healer may run (ladder levels and healing agents); anything else is refused "
        "by the gate.")
    token: str = setting("", "Bearer token node daemons require on POST routes; empty allows "
                         "loopback callers only.", env="HEALER_FLEET_TOKEN", secret=True)


@dataclass
class ContextSettings:
    dir: str = setting(".healer/context", "Folder with the four living-context layers.")
    max_iterations: int = setting(5, "Fix iterations before escalating.", minimum=1)
    scenario_timeout_s: float = setting(30.0, "Timeout of one scenario's test_command.",
                                        minimum=1)
    max_blast_radius: int = setting(5, "A fix whose blast radius (changed files plus the files "
                                    "that import them, from the impact map) reaches this many "
                                    "files is rejected.", minimum=1)
    enabled: bool = setting(True, "Whether incidents from webhooks and Loki rules are healed; "
                            "false only records them.")
    require_scenarios: bool = setting(
        True, "A fix no scenario verifies is not a pass (escalated); false accepts it when the "
        "other checks pass, with a warning in the PR.")
    heal_without_file: bool = setting(
        False, "Heal incidents that name no source file (e.g. metric alerts); by default they "
        "are only recorded.")
    agent_timeout_s: float = setting(600.0, "Wall-clock limit of one healing iteration's agent "
                                     "run.", minimum=1)
    watch_s: float = setting(86400.0, "Post-fix watch: the same alert firing this long after "
                             "the fix PR was merged reopens the incident as a regression.",
                             minimum=0)
    watch_interval_s: float = setting(60.0, "How often the loop checks fix PRs, ends watches and "
                                      "retries incidents the concurrency cap held back.",
                                      minimum=0.1)
    delivery_ttl_s: float = setting(86400.0, "Webhook deliveries are remembered this long to "
                                    "drop replays.", minimum=0)
    loki_url: str = setting("", "Loki base URL for the LogQL rule runner (setups without a "
                            "ruler); empty disables it.")
    loki_rules: str = setting("", "LogQL rules file; empty means `loki-rules.yaml` in "
                              "`context.dir`.")
    loki_interval_s: float = setting(60.0, "How often the LogQL rules are evaluated.",
                                     minimum=1)


@dataclass
class WebhookSettings:
    sentry_client_secret: str = setting("", "Sentry integration client secret (HMAC key).",
                                        env="HEALER_SENTRY_SECRET", secret=True)
    alertmanager_token: str = setting("", "Bearer token Alertmanager sends.",
                                      env="HEALER_ALERTMANAGER_TOKEN", secret=True)
    slack_signing_secret: str = setting("", "Slack app signing secret.",
                                        env="HEALER_SLACK_SECRET", secret=True)
    slack_max_age_s: float = setting(300.0, "Slack requests whose timestamp is further than "
                                     "this from now are refused (replay window).", minimum=1)


@dataclass
class Settings:
    """The whole settings tree. Paths are relative to the working directory."""

    state_dir: str = setting(".healer", "Where records, the ledger and worktrees live.",
                             env="HEALER_STATE_DIR")
    results_dir: str = setting("/tmp/atlas-agent-results", "Where agents drop result JSON.",
                               env="HEALER_RESULTS_DIR")
    fleet_dir: str = setting(".fleet-messages", "Seed-file folders, one per recipient.",
                             env="HEALER_FLEET_DIR")
    node_id: str = setting("", "This machine's fleet node id; empty derives it from the "
                           "hostname.", env="HEALER_NODE_ID")
    cto_config: str = setting("cto-config.json", "The orchestrator's config, read if present.",
                              env="HEALER_CTO_CONFIG")
    log: LogSettings = section(LogSettings, "Logging.")
    api: ApiSettings = section(ApiSettings, "The HTTP API.")
    bus: BusSettings = section(BusSettings, "The results bus.")
    store: StoreSettings = section(StoreSettings, "Where state lives.")
    executor: ExecutorSettings = section(ExecutorSettings, "How agents run.")
    forge: ForgeSettings = section(ForgeSettings, "Where issues and PRs go.")
    notify: NotifySettings = section(NotifySettings, "Human notifications.")
    detect: DetectSettings = section(DetectSettings, "Log pattern detection.")
    play: PlaySettings = section(PlaySettings, "Play sessions and remediation.")
    selfheal: SelfhealSettings = section(SelfhealSettings, "report_error gates and healing runs.")
    fleet: FleetSettings = section(FleetSettings, "Fleet channels, watchdog and healing loop.")
    context: ContextSettings = section(ContextSettings, "Living-context healing.")
    webhooks: WebhookSettings = section(WebhookSettings, "Inbound webhook secrets.")

    # Where each value came from is not a setting; the loader notes the files it read here.
    sources: list[str] = field(default_factory=list, metadata={"internal": True})

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir).expanduser()

    @property
    def results_path(self) -> Path:
        return Path(self.results_dir).expanduser()

    @property
    def fleet_path(self) -> Path:
        return Path(self.fleet_dir).expanduser()

    @property
    def node(self) -> str:
        """This node's id: configured, or the hostname's first label made safe."""
        if self.node_id:
            return self.node_id
        raw = socket.gethostname().split(".")[0].lower()
        cleaned = "".join(c if c.isalnum() or c in "-_" else "-" for c in raw).strip("-_")
        return cleaned[:64] or "node"


# ---------------------------------------------------------------------------------------------
# Schema generation from the tree


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _type_schema(tp: Any) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return {"enum": list(typing.get_args(tp))}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if origin is list:
        (item,) = typing.get_args(tp)
        return {"type": "array", "items": _type_schema(item)}
    if origin is dict:
        _, value = typing.get_args(tp)
        return {"type": "object", "additionalProperties": _type_schema(value)}
    if _is_dataclass_type(tp):
        return _object_schema(tp)
    raise TypeError(f"no schema mapping for {tp!r}")


def _public_fields(cls: type) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]


def _object_schema(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = {}
    for f in _public_fields(cls):
        s = _type_schema(hints[f.name])
        meta = f.metadata
        s.update(meta.get("schema", {}))
        doc = meta.get("doc", "")
        if meta.get("env"):
            doc += f" Env: `{meta['env']}`."
        s["description"] = doc
        if f.default is not dataclasses.MISSING:
            s["default"] = f.default
        elif f.default_factory is not dataclasses.MISSING and not _is_dataclass_type(hints[f.name]):
            s["default"] = f.default_factory()
        props[f.name] = s
    return {"type": "object", "additionalProperties": False, "properties": props}


def json_schema() -> dict[str, Any]:
    s = _object_schema(Settings)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://healer.dev/schemas/config.schema.json",
        "title": "healer.yaml",
        "description": "healer's settings file. Every key is optional; see the defaults.",
        **s,
    }


# ---------------------------------------------------------------------------------------------
# Loading

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _field_type(cls: type, name: str) -> Any:
    return typing.get_type_hints(cls)[name]


def _coerce(text: str, tp: Any) -> Any:
    """Turn an env/flag string into the field's type (schema validation follows)."""
    origin = typing.get_origin(tp)
    if tp is bool:
        low = text.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        return text
    if tp is int:
        try:
            return int(text)
        except ValueError:
            return text
    if tp is float:
        try:
            return float(text)
        except ValueError:
            return text
    if origin in (list, dict):
        stripped = text.strip()
        if stripped.startswith(("[", "{")):
            try:
                return json.loads(stripped)
            except json.JSONDecodeError:
                return text
        if origin is list:
            return [p.strip() for p in stripped.split(",") if p.strip()]
        return text
    return text


def _resolve(path: list[str]) -> tuple[type, str] | None:
    """The dataclass and field name a dotted path points at, or None."""
    cls: type = Settings
    for i, part in enumerate(path):
        names = {f.name: f for f in _public_fields(cls)}
        if part not in names:
            return None
        tp = _field_type(cls, part)
        if i == len(path) - 1:
            return cls, part
        if not _is_dataclass_type(tp):
            return None
        cls = tp
    return None


def _nest(path: list[str], value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cur = out
    for part in path[:-1]:
        cur = cur.setdefault(part, {})
    cur[path[-1]] = value
    return out


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def _validate_layer(raw: Any, source: str, *, key_hint: Mapping[str, str] | None = None) -> None:
    if not isinstance(raw, Mapping):
        raise ConfigError("expected a mapping of settings at the top level", file=source,
                          expected="a YAML mapping")
    problems = schema_errors("config", raw)
    if problems:
        key, message = problems[0]
        shown = (key_hint or {}).get(key, key)
        raise ConfigError(message, file=source, key=shown, expected=_expected_for(key))


def _expected_for(key: str) -> str:
    parts = key.split(".")
    found = _resolve(parts)
    if not found:
        return ""
    cls, name = found
    s = _type_schema(_field_type(cls, name))
    if "enum" in s:
        return "one of " + ", ".join(map(str, s["enum"]))
    return s.get("type", "")


def _env_layer(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    layer: dict[str, Any] = {}
    hints: dict[str, str] = {}

    def visit(cls: type, prefix: list[str]) -> None:
        for f in _public_fields(cls):
            path = [*prefix, f.name]
            tp = _field_type(cls, f.name)
            if _is_dataclass_type(tp):
                visit(tp, path)
                continue
            names = ["HEALER__" + "__".join(p.upper() for p in path)]
            if f.metadata.get("env"):
                names.insert(0, f.metadata["env"])
            for name in names:
                if name in env:
                    _merge(layer, _nest(path, _coerce(env[name], tp)))
                    hints[".".join(path)] = name
                    break

    visit(Settings, [])
    return layer, hints


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["api.port=9000", …]`` → a nested dict with values coerced to the field types."""
    layer: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {pair!r}", file="flags")
        path = key.strip().split(".")
        found = _resolve(path)
        if not found:
            raise ConfigError("unknown setting", file="flags", key=key.strip())
        cls, name = found
        _merge(layer, _nest(path, _coerce(value, _field_type(cls, name))))
    return layer


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("file is not UTF-8 text", file=str(path)) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=str(path)) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"not valid YAML{where}: {problem}", file=str(path)) from exc
    return {} if data is None else data


def _read_json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError("file is not UTF-8 text", file=str(path)) from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}",
                          file=str(path)) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=str(path)) from exc


def _cto_layer(path: Path) -> dict[str, Any]:
    """The orchestrator's settings healer honours, from cto-config.json."""
    data = _read_json_file(path)
    problems = schema_errors("cto-config", data)
    if problems:
        key, message = problems[0]
        raise ConfigError(message, file=str(path), key=key)
    defaults = data.get("defaults", {})
    play = defaults.get("play", {})
    rem = defaults.get("remediation", {})
    layer: dict[str, Any] = {}
    if "healerEndpoint" in play:
        layer["healer_endpoint"] = play["healerEndpoint"]
    if "maxIterations" in rem:
        layer["max_iterations"] = rem["maxIterations"]
    if "syncTimeoutSecs" in rem:
        layer["sync_timeout_s"] = rem["syncTimeoutSecs"]
    return {"play": layer} if layer else {}


def _build(cls: type, raw: Mapping[str, Any]) -> Any:
    kwargs: dict[str, Any] = {}
    for f in _public_fields(cls):
        if f.name not in raw:
            continue
        tp = _field_type(cls, f.name)
        value = raw[f.name]
        if _is_dataclass_type(tp):
            value = _build(tp, value)
        elif tp is float and isinstance(value, int):
            value = float(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def load_settings(
    config_file: str | Path | None = None,
    *,
    overrides: list[str] | Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Load the settings tree from every source; raise ``ConfigError`` naming the bad value."""
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    sources: list[str] = []

    env_layer, env_hints = _env_layer(env)
    _validate_layer(env_layer, "environment", key_hint=env_hints)

    cto_name = env_layer.get("cto_config", "cto-config.json")
    cto_path = Path(cto_name).expanduser()
    if cto_path.is_file():
        _merge(merged, _cto_layer(cto_path))
        sources.append(str(cto_path))

    explicit = config_file or env.get("HEALER_CONFIG")
    path = Path(explicit).expanduser() if explicit else Path("healer.yaml")
    if explicit and not path.is_file():
        raise ConfigError("file not found", file=str(path))
    if path.is_file():
        layer = _read_yaml(path)
        _validate_layer(layer, str(path))
        _merge(merged, layer)
        sources.append(str(path))

    _merge(merged, env_layer)
    if overrides:
        flag_layer = parse_overrides(list(overrides)) if isinstance(overrides, list) else dict(
            overrides)
        _validate_layer(flag_layer, "flags")
        _merge(merged, flag_layer)

    _validate_layer(merged, "settings")
    settings: Settings = _build(Settings, merged)
    settings.sources = sources
    _check_semantics(settings)
    return settings


def _check_semantics(s: Settings) -> None:
    """Rules a schema cannot say."""
    if s.node_id:
        try:
            safe_name(s.node_id, "node id")
        except UnsafeNameError as exc:
            raise ConfigError(exc.reason, file="settings", key="node_id",
                              expected="a safe name") from exc
    if not is_loopback_host(s.api.host) and len(s.api.token.strip()) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"a token of at least {MIN_TOKEN_CHARS} characters is required when the API binds "
            f"to a non-loopback address ({s.api.host})",
            file="settings", key="api.token",
            expected=f"a bearer token of {MIN_TOKEN_CHARS}+ characters (HEALER_TOKEN)",
        )
    if s.api.token and s.api.token != s.api.token.strip():
        raise ConfigError("the token has leading or trailing white space", file="settings",
                          key="api.token", expected="a token without surrounding white space")


def redacted(settings: Settings) -> dict[str, Any]:
    """The settings as a dict with secrets masked, for `healer doctor` and logs."""

    def visit(obj: Any) -> Any:
        out: dict[str, Any] = {}
        for f in _public_fields(type(obj)):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                out[f.name] = visit(value)
            elif f.metadata.get("secret") and value:
                out[f.name] = "***"
            else:
                out[f.name] = value
        return out

    return visit(settings)


# ---------------------------------------------------------------------------------------------
# The fleet's node list (.multifleet/config.json)


@dataclass(frozen=True)
class NodeEntry:
    """One fleet node as the multifleet config describes it."""

    node_id: str
    host: str
    user: str = ""
    port: int = 8855
    role: str = "worker"
    mac_address: str = ""
    lan_ip: str = ""
    tailscale_ip: str = ""
    tunnel_port: int = 0
    ssh_port: int = 22
    nats_url: str = ""
    restart: tuple[str, ...] = ()
    nats_restart: tuple[str, ...] = ()
    interactive_marker: str = ""
    fleet_dir: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MultifleetConfig:
    chief: str
    chief_host: str
    nodes: Mapping[str, NodeEntry]
    path: str = ""
    skipped: Mapping[str, str] = field(default_factory=dict)
    """Nodes left out because their entry is invalid: node id (as written) → why."""


def _check_nats_url(url: str) -> None:
    """``nats://host:port``: a safe host and port, nothing else (no credentials, no options)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("nats", "tls"):
        raise UnsafeNameError(url, "nats_url", "must start with nats:// or tls://")
    host, _, port = rest.rstrip("/").rpartition(":")
    if not host or not port.isdigit():
        raise UnsafeNameError(url, "nats_url", "must be nats://<host>:<port>")
    safe_host(host.strip("[]"), "nats_url host")
    safe_port(int(port), "nats_url port")


def _check_node(node_id: str, entry: Mapping[str, Any]) -> None:
    """``UnsafeNameError`` for a node whose id, host, user, addresses or NATS URL are unsafe."""
    safe_name(node_id, "node id")
    safe_host(entry["host"], "host")
    if entry.get("user"):
        safe_user(entry["user"], "user")
    for ip_key in ("lan_ip", "tailscale_ip"):
        if entry.get(ip_key):
            safe_host(entry[ip_key], ip_key)
    safe_port(entry.get("port", 8855))
    if entry.get("nats_url"):
        _check_nats_url(entry["nats_url"])


def load_multifleet(path: str | Path) -> MultifleetConfig:
    """Read and validate ``.multifleet/config.json``; hostile names are refused here.

    A node whose entry is invalid (schema, or an unsafe id, host, user, address or NATS URL)
    is left out and listed in ``skipped`` with the reason; the other nodes are used. The file
    as a whole is refused (``ConfigError``) when it is not JSON, has the wrong shape outside
    the node entries or a bad ``chief.nodeId``, or when no valid node is left.
    """
    from healer.core.schemas import describe, validator

    p = Path(path)
    data = _read_json_file(p)
    bad: dict[str, tuple[str, str]] = {}  # node id → (dotted key, message)
    found = sorted(validator("multifleet-config").iter_errors(data),
                   key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    for error in found:
        key, message = describe(error)
        where = list(error.absolute_path)
        if len(where) < 2 or where[0] != "nodes":
            raise ConfigError(message, file=str(p), key=key)
        bad.setdefault(str(where[1]), (key, message))
    known = {f.name for f in dataclasses.fields(NodeEntry)}
    argvs = ("restart", "nats_restart")
    nodes: dict[str, NodeEntry] = {}
    for node_id, entry in data.get("nodes", {}).items():
        if node_id in bad:
            continue
        try:
            _check_node(node_id, entry)
        except UnsafeNameError as exc:
            bad[node_id] = (f"nodes.{node_id}", str(exc))
            continue
        fields = {k: v for k, v in entry.items()
                  if k in known and k not in (*argvs, "node_id", "extra")}
        extra = {k: v for k, v in entry.items() if k not in known}
        nodes[node_id] = NodeEntry(node_id=node_id, extra=extra, **fields,
                                   **{k: tuple(entry.get(k, ())) for k in argvs})
    if bad and not nodes:
        key, message = next(iter(bad.values()))
        raise ConfigError(f"{message} (and no valid node is left)", file=str(p), key=key,
                          expected="at least one valid node entry")
    chief = data.get("chief", {})
    chief_id = chief.get("nodeId", "")
    if chief_id:
        try:
            safe_name(chief_id, "chief node id")
        except UnsafeNameError as exc:
            raise ConfigError(exc.reason, file=str(p), key="chief.nodeId") from exc
    skipped = {node_id: f"{key}: {message}" for node_id, (key, message) in sorted(bad.items())}
    return MultifleetConfig(chief=chief_id, chief_host=chief.get("host", ""), nodes=nodes,
                            path=str(p), skipped=skipped)


def _main(argv: list[str]) -> int:
    """`python -m healer.config [--check]`: write (or check) schemas/config.schema.json."""
    from healer.resources import bundle_path

    target = bundle_path("schemas", "config.schema.json")
    text = json.dumps(json_schema(), indent=2) + "\n"
    if "--check" in argv:
        current = target.read_text() if target.exists() else ""
        if current != text:
            print(f"{target} is out of date: run python -m healer.config", file=sys.stderr)
            return 1
        return 0
    target.write_text(text)
    print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))

