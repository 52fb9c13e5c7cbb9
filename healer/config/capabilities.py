"""The sections of the settings tree that belong to one capability each: detect, play (and
its Kubernetes watcher, kube), selfheal, fleet and context."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from healer.config.fields import setting


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
    healer_endpoint: str = setting(
        "", "Where orchestrators reach healer (cto-config `defaults.play.healerEndpoint`); the "
        "commands in play escalations name it. Empty: `api.public_url`, else the address the "
        "API serves on. `api.public_url` wins when both are set.",
        pattern="^(https?://.+)?$")
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
        "retry; resume and fresh_session for agent runtime failures): an argv, no shell. "
        "`{play_id}`, `{agent}`, `{issue_type}`, `{level}`, `{missing_tools}`, `{task_id}`, "
        "`{repository}`, `{namespace}`, `{code}`, `{session_id}` (the session not to "
        "resume), and for a watcher's alert `{target}` (`pod/cto/NAME`) and `{pod}` (NAME) "
        "are substituted.",
    )
    action_timeout_s: float = setting(120.0, "Timeout of one remediation action.", minimum=1)
    tools_server_hosts: list[str] = setting(
        ["127.0.0.1", "::1", "localhost"],
        "Hosts a session's `tools_server` may name (`tools.cto.svc`; `.svc` for a domain and "
        "its subdomains): the pre-flight connects only to these, and `POST "
        "/api/v1/session/start` refuses a session naming another host (400). Default: "
        "loopback only. `*` LOOSENS ISOLATION: any host healer can reach, which makes healer a "
        "probe of them for whoever can start a session; empty allows no `tools_server`.",
        items={"type": "string", "minLength": 1})
    checkouts: dict[str, str] = setting(
        {}, "Local git checkouts of the plays' repositories: a session's `repository` "
        "(`owner/name`) → a path. A remediation that changes code (strategy `fix_code` or "
        "`fix_config`) for a repository listed here works in its own checkout made from it "
        "for the attempt (branch `healing/…`, kept for a person when it committed); every "
        "other play agent works in an empty scratch folder. Never healer's own checkout.")
    stuck_after_s: float = setting(600.0, "An active agent silent this long (no logs, no "
                                   "inventory) is stuck (alert A9).", minimum=1)
    limit_first_wait_s: float = setting(
        60.0, "A rate limit or overload with no reset time: resume the waiting agents this "
        "long after it was first seen (agent-supervisor default).", minimum=0)
    limit_wait_s: float = setting(300.0, "Then this long between resume rounds while the "
                                  "limit keeps coming back.", minimum=0)
    limit_max_waits: int = setting(12, "Resume rounds before a persisting limit goes to a "
                                   "person (12 × 300 s ≈ the 120-minute anchor).", minimum=1)
    resume_stagger_s: float = setting(5.0, "Time between two agents resumed after a shared "
                                      "limit, so they do not hit it again at once.", minimum=0)
    crash_loop_launches: int = setting(10, "Failed launches in a row after which an agent is "
                                       "paused and a person told (K1).", minimum=1)
    crash_loop_window_s: float = setting(600.0, "A launch counts as failed when the agent "
                                         "fails again within this time.", minimum=1)
    crash_backoff_base_s: float = setting(30.0, "Back-off before relaunching an agent after "
                                          "its first failed launch; doubles each time.",
                                          minimum=0)
    crash_backoff_cap_s: float = setting(900.0, "The longest relaunch back-off (15 minutes).",
                                         minimum=0)


@dataclass
class GitHubSettings:
    """The GitHub watcher of play sessions: polling the REST API and the signed webhook.

    It watches the pull requests of active plays (the session's ``repository``, PRs matched by
    ``pr_match``) for the alerts A1 (hand-off comments out of ``handoff_order``), A4
    (approval loop, ``approval_loop_threshold``) and A5 (CI failure or merge conflict after
    approval); their commits and comments count as the play's progress (A3)."""

    token: str = setting(
        "", "Token the watcher reads GitHub with (a personal access token, fine-grained or "
        "classic with `repo`, or a GitHub App installation token). Polling runs when a token "
        "or `repos` is set; without a token GitHub allows 60 requests an hour.",
        env="GITHUB_TOKEN", secret=True)
    api_url: str = setting("https://api.github.com", "GitHub REST API base URL (GitHub "
                           "Enterprise: `https://HOST/api/v3`).")
    webhook_secret: str = setting(
        "", "Secret of the repository or App webhook pointed at `POST /api/v1/webhooks/github` "
        "(`X-Hub-Signature-256`); empty answers that route 503 and accepts nothing.",
        env="HEALER_GITHUB_WEBHOOK_SECRET", secret=True)
    poll: bool = setting(True, "Whether `healer loop` polls GitHub (when a token or `repos` "
                         "is set); false leaves only the webhook.")
    repos: list[str] = setting(
        [], "`owner/name` repositories the watcher may read; empty allows the repository of "
        "any active play. A play naming another repository is skipped with a warning.",
        items={"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9._-]+$"})
    poll_interval_s: float = setting(60.0, "Time between two polling passes. Unchanged "
                                     "resources answer 304 (an ETag per URL), which GitHub "
                                     "does not count against the rate limit.", minimum=1)
    min_remaining: int = setting(
        100, "Polling pauses until the rate-limit reset when fewer requests than this are "
        "left, so the forge (issues, fix PRs) keeps its share of the same token.", minimum=0)
    secondary_backoff_s: float = setting(
        60.0, "Wait after a secondary rate limit that names no `Retry-After` (GitHub: at least "
        "a minute); doubles with each one in a row up to `secondary_backoff_cap_s`.",
        minimum=1)
    secondary_backoff_cap_s: float = setting(900.0, "Longest secondary-limit back-off.",
                                             minimum=1)
    timeout_s: float = setting(15.0, "Timeout of one GitHub request.", minimum=0.1)
    max_prs: int = setting(200, "Pull requests tracked at once over all plays; the oldest "
                           "finished ones are forgotten first.", minimum=1)
    max_prs_per_play: int = setting(10, "Pull requests tracked per play (the newest).",
                                    minimum=1)
    max_items: int = setting(100, "Comments, reviews, commits and checks read and kept per "
                             "pull request (the newest page of the API each: a longer thread "
                             "is followed to its last page).", minimum=1,
                             maximum=100)
    pr_match: list[str] = setting(
        ["{play_id}", "task-{task_id}"],
        "Which open PRs of a play's repository are the play's: one whose head branch, or one "
        "of whose labels, contains a rendered template (whole words: `task-4` does not match "
        "`task-42`). `{play_id}` and `{task_id}` (each task of the session) are substituted.",
        items={"type": "string", "minLength": 1})
    handoff_order: list[str] = setting(
        ["implementation", "quality", "security", "testing", "integration"],
        "The order in which a play's agents hand a PR on (A1): a stage commenting while an "
        "earlier stage has not commented yet is out of order.",
        items={"type": "string", "minLength": 1})
    agent_stages: dict[str, str] = setting(
        {"rex": "implementation", "blaze": "implementation", "cleo": "quality",
         "cipher": "security", "tess": "testing", "atlas": "integration"},
        "Agent name → its stage in `handoff_order`.")
    bot_logins: dict[str, str] = setting(
        {"5dlabs-rex[bot]": "rex", "5dlabs-blaze[bot]": "blaze", "5dlabs-cleo[bot]": "cleo",
         "5dlabs-cipher[bot]": "cipher", "5dlabs-tess[bot]": "tess",
         "5dlabs-atlas[bot]": "atlas"},
        "GitHub login (an App's bot is `<app-slug>[bot]`) → agent name; case-insensitive. A "
        "comment whose body holds the marker `<!-- healer-agent: NAME -->` (an agent name or "
        "a stage) is that agent's whoever posted it.")
    approval_loop_threshold: int = setting(
        2, "A4: a PR approved and then sent back with changes requested this many times is in "
        "an approval loop.", minimum=1)
    delivery_ttl_s: float = setting(86400.0, "Webhook delivery ids (`X-GitHub-Delivery`) are "
                                    "remembered this long; a repeat is acknowledged and "
                                    "ignored.", minimum=0)
    max_body_bytes: int = setting(1 << 20, "Largest webhook body accepted (also bounded by "
                                  "`api.max_body_bytes`); more is 413.", minimum=1024)


@dataclass
class CodeSettings:
    """Code fixes, whichever source reported the error (report_error, Sentry, Alertmanager,
    Slack, Loki)."""

    approval: Literal["always", "anonymous", "never"] = setting(
        "anonymous", "When a code agent waits for a person's approval before it starts: "
        "`anonymous` (default) for incidents only anonymous sources reported (the Sentry DSN "
        "ingest, the API without a token); `always` for every incident; `never` LOOSENS "
        "ISOLATION: anonymous input starts code agents by itself. Approve with `healer approve "
        "INCIDENT`, `POST /api/v1/incidents/{id}/approve` or the dashboard.")
    approval_min_events: int = setting(
        1, "An incident waiting for approval is put before a person (listed as waiting, "
        "approvable) once seen this many times from `approval_min_distinct` distinct users or "
        "releases. Default 1: at once. Meeting it never runs anything without approval.",
        minimum=1)
    approval_min_distinct: int = setting(
        1, "Distinct users or releases (from Sentry events) that must have reported an incident "
        "before it is put before a person; a source naming neither counts as one. Default 1.",
        minimum=1, maximum=100)
    new_incidents_per_hour: int = setting(
        30, "New incidents each anonymous source (each Sentry DSN key; the API without a token) "
        "may open per hour; repeats of known incidents are still counted, what is refused is "
        "counted as dropped (`healer_incidents_dropped`). 0 LOOSENS ISOLATION: no limit.",
        minimum=0)
    max_open_anonymous: int = setting(
        100, "Most incidents from anonymous sources active at once (open, healing, fixed); "
        "new ones over it are dropped and counted. 0 LOOSENS ISOLATION: no cap.", minimum=0)
    test_command: str = setting(
        "", "The project's test command (argv, split like a shell would, never run by one), "
        "run in the agent sandbox to verify a fix: before it on the base commit, after it in a "
        "clean checkout. Empty (default) detects it: pytest (pyproject.toml, setup.cfg, "
        "setup.py, pytest.ini, test_*.py or tests/*.py), `npm test` (package.json with "
        "scripts.test), `go test ./...` (go.mod), `cargo test` (Cargo.toml).")
    test_timeout_s: float = setting(600.0, "Wall-clock limit of one run of the test command or "
                                    "of the reproduction.", minimum=1)
    max_iterations: int = setting(3, "Fix iterations of one code attempt (each rejection is "
                                  "told to the next) before it ends failed.", minimum=1)


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
    lease_ttl_s: float = setting(
        15.0, "A running attempt's lease (`leases/attempt-<id>`), renewed by its worker every "
        "third of this: an attempt whose replica stops renewing for this long is taken over "
        "by another replica (ended with the reason and retried).", minimum=1)
    takeover_interval_s: float = setting(
        5.0, "How often one replica looks for attempts whose lease expired (shared stores "
        "only; a single replica on the file store settles dead workers by their pid).",
        minimum=0.5)
    max_takeovers: int = setting(
        2, "Retries of one report after the replicas running it died; past this the last "
        "attempt ends failed and a person is told.", minimum=0)


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
    secret: str = setting(
        "", "The fleet's signing key (at least 16 characters, the same on every node): "
        "heartbeats, fleet messages and identity proofs carry an HMAC-SHA256 made with it, and "
        "what is unsigned, forged, older than 120 s or replayed is refused. Required: `healer "
        "node` and the loop's fleet service refuse to start without it.",
        env="HEALER_FLEET_SECRET", secret=True)
    nats_user: str = setting("", "User name for the fleet's NATS servers (with "
                             "`nats_password`).", env="HEALER_FLEET_NATS_USER")
    nats_password: str = setting("", "Password for the fleet's NATS servers.",
                                 env="HEALER_FLEET_NATS_PASSWORD", secret=True)
    nats_token: str = setting("", "Token for the fleet's NATS servers (instead of a user).",
                              env="HEALER_FLEET_NATS_TOKEN", secret=True)
    nats_credentials: str = setting("", "NATS credentials file (.creds: user JWT and nkey "
                                    "seed) for the fleet's NATS servers.",
                                    env="HEALER_FLEET_NATS_CREDS")
    allowed_networks: list[str] = setting(
        [], "Networks (CIDR) the config updater may move a node into. Empty: loopback plus the "
        "/24 (IPv4) or /64 (IPv6) of every configured node's current address. Unspecified, "
        "link-local (cloud metadata), multicast and broadcast addresses are refused always, "
        "and a host name only when it is already in the fleet config and every address it "
        "resolves to is allowed. Listing a wide network LOOSENS ISOLATION.",
        items={"type": "string", "minLength": 1})


@dataclass
class ContextSettings:
    dir: str = setting(".healer/context", "Folder with the four living-context layers.")
    max_iterations: int = setting(5, "Ignored: code attempts, whatever their source, iterate "
                                  "`code.max_iterations` times.", minimum=1)
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
class IngestSettings:
    """The Sentry-compatible ingest (``/api/<project_id>/envelope/`` and ``/store/``): any
    Sentry SDK whose DSN points at healer reports its errors as living-context incidents."""

    enabled: bool = setting(True, "Whether the ingest endpoints accept events (they still "
                            "need a key: with none configured and none made by `healer sentry "
                            "dsn`, every event is refused).")
    sentry_keys: list[str] = setting(
        [], "Keys SDKs may use (the public key of their DSN): one key or a list; `KEY:ID` binds "
        "a key to project id ID, a bare key serves every project. Keys made by `healer sentry "
        "dsn` (`<state>/sentry-keys.json`) are accepted too.", env="HEALER_SENTRY_KEY",
        secret=True, type=["array", "string"], items={"type": "string", "minLength": 1})
    cors_origins: list[str] = setting(
        [], "Browser origins (`https://app.example.com`) whose pages may send events; none by "
        "default (server SDKs send no Origin).", items={"type": "string", "minLength": 1})
    max_body_bytes: int = setting(1 << 20, "Largest request body as sent (compressed); more is "
                                  "413.", minimum=1024)
    max_decompressed_bytes: int = setting(4 << 20, "Largest body after gzip/deflate/br "
                                          "decoding; more is 413.", minimum=1024)
    max_event_bytes: int = setting(1 << 20, "Largest single event item; more is 413.",
                                   minimum=1024)
    max_items: int = setting(100, "Most items in one envelope; more is 413.", minimum=1)
    rate_per_s: float = setting(5.0, "Events per second each key may send (a token bucket, "
                                "after `rate_burst`); over it is 429 with Retry-After and "
                                "X-Sentry-Rate-Limits, which the SDKs honour. 0 LOOSENS "
                                "ISOLATION: unlimited.", minimum=0)
    rate_burst: int = setting(100, "Events a key may send at once before `rate_per_s` "
                              "applies.", minimum=1)
    queue_size: int = setting(10_000, "Events accepted but not yet filed; when full, 429 (the "
                              "SDKs retry later).", minimum=1)
    answer: Literal["filed", "queued", "auto"] = setting(
        "auto", "When a good request is answered 200. `filed`: once its events are in the "
        "store (one store write later; concurrent requests share one batch), "
        "else 503 with Retry-After — an event answered 200 survives the replica dying. "
        "`queued`: as soon as they are queued in memory (faster; a replica killed before it "
        "filed them loses them). `auto`: `filed` unless `store.backend` is `file` (one "
        "replica).")
    answer_timeout_s: float = setting(
        10.0, "With `answer: filed`, how long a request waits for its events to be filed "
        "before it is answered 503 (they may still be filed later).", minimum=0.1)


@dataclass
class KubeSettings:
    """The play healer's Kubernetes watcher (``healer.play.kube``): pods, events, CodeRuns and
    Argo Workflows of the namespace where the agents run, turned into play alerts A2, A3, A7,
    A8 and A9. Off unless ``enabled``; the cluster is found the standard way (``kubeconfig``,
    else ``$KUBECONFIG`` or ``~/.kube/config`` with ``context``, else the in-cluster service
    account)."""

    enabled: bool = setting(False, "Whether `healer loop` watches the cluster. Off by default: "
                            "a kubeconfig on the machine is not a request to watch it.",
                            env="HEALER_KUBE_ENABLED")
    kubeconfig: str = setting("", "Kubeconfig file; empty uses `$KUBECONFIG`, else "
                              "`~/.kube/config`, else the in-cluster service account "
                              "(`/var/run/secrets/kubernetes.io/serviceaccount`).")
    context: str = setting("", "Kubeconfig context; empty uses its current-context.",
                           env="HEALER_KUBE_CONTEXT")
    namespace: str = setting("cto", "Namespace the agents run in.", env="HEALER_KUBE_NAMESPACE")
    pod_selector: str = setting("", "Label selector of the pods to watch (`app=coderun`); "
                                "empty watches every pod of the namespace.")
    coderun_selector: str = setting("", "Label selector of the CodeRuns to watch.")
    workflow_selector: str = setting("", "Label selector of the Argo Workflows to watch.")
    watch_coderuns: bool = setting(True, "Watch CodeRuns (`agents.platform/v1`); off where the "
                                   "CRD is not installed.")
    watch_workflows: bool = setting(True, "Watch Argo Workflows (`argoproj.io/v1alpha1`); off "
                                    "where Argo is not installed.")
    exclude_prefixes: list[str] = setting(
        ["healer", "cto-tools", "cto-controller", "vault-mcp-server", "openmemory",
         "event-cleaner", "workspace-pvc-cleaner"],
        "Infrastructure pods (by name prefix) that are never a play's agent.",
        items={"type": "string", "minLength": 1})
    play_labels: list[str] = setting(
        ["play-id", "play", "workflow", "workflows.argoproj.io/workflow"],
        "Labels naming an object's play, first found wins; an object with none but a task id "
        "(label `task-id`, CodeRun `spec.taskId`) belongs to play `task-<id>`.",
        items={"type": "string", "minLength": 1})
    agent_labels: list[str] = setting(
        ["agent", "github-app"], "Labels naming an object's agent, first found wins (a CodeRun "
        "falls back to `spec.githubApp`); `5DLabs-Rex` becomes `rex`.",
        items={"type": "string", "minLength": 1})
    stage_labels: list[str] = setting(
        ["stage", "agents.platform/stage"], "Labels naming a pod's stage for A8 (a Workflow "
        "node's stage comes from its template or display name).",
        items={"type": "string", "minLength": 1})
    restart_threshold: int = setting(3, "A2: a pod whose containers restarted this often.",
                                     minimum=1)
    dead_after_s: float = setting(60.0, "A2: a running pod not Ready (or ContainersReady) this "
                                  "long.", minimum=0)
    stage_timeouts_s: dict[str, float] = setting(
        {"implementation": 2700.0, "quality": 900.0, "testing": 1800.0, "security": 900.0,
         "integration": 1200.0, "default": 3600.0},
        "A8: how long a step of each stage may run (implementation 45, quality 15, testing 30, "
        "security 15, integration 20, otherwise 60 minutes).")
    stuck_after_s: float = setting(600.0, "A9: a CodeRun whose phase has not changed this long "
                                   "(and is not finished) is stuck.", minimum=1)
    stale_progress_s: float = setting(900.0, "A3: a play with running work and no commit, "
                                      "comment or log line this long.", minimum=1)
    recovered_after_s: float = setting(
        60.0, "A pod counts as recovered (its alerts clear, their incidents resolve) once it "
        "stayed Ready this long; a deleted pod's alerts clear when another pod of the same play "
        "and agent recovered.", minimum=0)
    orphan_ttl_s: float = setting(3600.0, "Alerts of a play with no object left in the cluster "
                                  "clear after this long.", minimum=1)
    evaluate_interval_s: float = setting(15.0, "How often the rules run besides on every "
                                         "change (the time-based alerts).", minimum=0.05)
    watch_timeout_s: int = setting(300, "Server-side timeout of one watch request; the watch "
                                   "resumes from its last resourceVersion.", minimum=1)
    page_size: int = setting(500, "Objects per list request (`limit`/`continue`).", minimum=1)
    backoff_max_s: float = setting(30.0, "Longest wait before reconnecting to an unreachable "
                                   "API server (doubling from 0.5 s, with jitter).", minimum=0.1)
    max_objects: int = setting(5000, "Objects of one resource held in memory; more are not "
                               "tracked (and logged).", minimum=10)
    follow_logs: bool = setting(True, "Follow the logs of the watched pods (their lines count as "
                                "progress for A3).")
    detect_logs: bool = setting(True, "Judge the followed log lines of a play's agent pods "
                                "with the play's log detection (as `POST /api/v1/session/{id}/"
                                "logs` does) while its session is active; turn off when the "
                                "agents post their own logs.")
    max_log_streams: int = setting(50, "Pod containers whose logs are followed at once.",
                                   minimum=1)
    dashboard_url: str = setting(
        "", "Link shown with each alert: a template with `{namespace}`, `{kind}` (pod, coderun, "
        "workflow) and `{name}`, e.g. `https://k8s.example.com/#/{kind}/{namespace}/{name}`.")
