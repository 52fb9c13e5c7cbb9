"""The sections of the settings tree that every capability shares: logging, the API, the bus,
the store, how agents run, the forge, notifications and webhook secrets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from healer.config.fields import section, setting


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
class ThrottleSettings:
    """Growing delays per client address for wrong API tokens and wrong dashboard logins
    (one bucket each): ``free_failures`` cost nothing, then each further one doubles the wait
    from ``base_delay_s`` up to ``max_delay_s``; while a client waits, its requests get 429
    with ``Retry-After``. Nobody else waits."""

    free_failures: int = setting(
        5, "Wrong tokens (or logins) a client address may send before it must wait.",
        minimum=0, maximum=1000)
    base_delay_s: float = setting(
        1.0, "The first wait, in seconds; each further failure doubles it.", minimum=0.001)
    max_delay_s: float = setting(300.0, "The longest wait, in seconds.", minimum=0.001)
    forget_after_s: float = setting(
        3600.0, "A client address with no failure for this long starts afresh.", minimum=1)
    max_clients: int = setting(
        10000, "Client addresses remembered at most (least recently seen are forgotten "
        "first), so a spray of addresses cannot exhaust memory.", minimum=16)


@dataclass
class ApiSettings:
    host: str = setting(
        "127.0.0.1", "Address the HTTP API binds to. Binding off loopback requires `api.token`.",
        env="HEALER_HOST",
    )
    port: int = setting(8083, "TCP port of the HTTP API (0 picks a free one).",
                        env="HEALER_PORT", minimum=0, maximum=65535)
    public_url: str = setting(
        "", "The base URL people and SDKs reach the API at (`https://healer.example.com`, "
        "behind a proxy or a DNS name): every address healer writes — Sentry DSNs, the "
        "commands in escalations, dashboard links — uses it, and its host and origin are "
        "accepted like `allowed_hosts` and `allowed_origins` entries. Empty: the address "
        "the API serves on (`api.host:api.port`; a wildcard bind names this machine).",
        env="HEALER_PUBLIC_URL")
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
        True, "Whether `GET /health` and `GET /ready` answer without the token (liveness and "
        "readiness probes rarely carry one).")
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
    trusted_proxies: list[str] = setting(
        [], "Addresses or networks (`127.0.0.1`, `10.0.0.0/8`) of reverse proxies whose "
        "`X-Forwarded-For` and `X-Forwarded-Proto` are believed. Empty (the default): the "
        "client address is the socket's peer and those headers are ignored, so a client cannot "
        "pick the address it is throttled as. A TLS-terminating proxy on this machine needs "
        "`127.0.0.1` here.", items={"type": "string", "minLength": 1},
    )
    throttle: ThrottleSettings = section(
        ThrottleSettings, "Per-client delays after wrong tokens and wrong logins.")
    session_ttl_s: float = setting(
        12 * 3600.0, "How long a dashboard login lasts (seconds); logging out or ending the "
        "session in the dashboard revokes it sooner, also across restarts.", minimum=60)
    max_sessions: int = setting(
        32, "Dashboard sessions kept at most; a login past it ends the least recently used.",
        minimum=1, maximum=10000)


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
    sync: Literal["batched", "always"] = setting(
        "batched", "When a durable write of the `file` backend reaches the disk. Both: the record "
        "is visible to every process at once, and the fsyncs of a process's writes are batched "
        "(one flusher, a few ms). `batched`: a write returns before its batch is synced, so a "
        "power loss (not a crash of healer) can lose the last few ms of writes. `always`: each "
        "write waits for its batch.", env="HEALER_STORE_SYNC",
    )
    nats_urls: list[str] = setting(["nats://127.0.0.1:4222"], "NATS servers for `jetstream`.",
                                   env="HEALER_NATS_URLS")
    bucket: str = setting("healer", "JetStream key-value bucket holding the records.")
    history: int = setting(5, "Revisions kept per record in the bucket.", minimum=1,
                           maximum=64)
    replicas: int = setting(1, "Replicas of the bucket and the results stream when healer "
                            "creates them (3 in a NATS cluster).", minimum=1, maximum=5)
    credentials: str = setting("", "NATS credentials file (.creds), passed to nats-py.")
    nats_user: str = setting("", "User name for the NATS servers (with `nats_password`).")
    nats_password: str = setting("", "Password for the NATS servers.",
                                 env="HEALER_STORE_NATS_PASSWORD", secret=True)
    nats_token: str = setting("", "Token for the NATS servers (instead of a user).",
                              env="HEALER_STORE_NATS_TOKEN", secret=True)
    tls_ca: str = setting("", "CA bundle to verify the NATS servers (enables TLS).")
    tls_cert: str = setting("", "Client certificate for NATS mutual TLS.")
    tls_key: str = setting("", "Client key for NATS mutual TLS.")
    connect_timeout_s: float = setting(5.0, "Timeout of the first NATS connection.", minimum=0.1)
    lease_ttl_s: float = setting(30.0, "How long a node's lease on a peer or incident lasts "
                                 "unless renewed; a dead node's lease is taken over after it.",
                                 minimum=1)


@dataclass
class HaSettings:
    lease_ttl_s: float = setting(
        9.0, "How long a replica's lease on a once-only duty (a watcher, a poller, a sweep, "
        "the notifier) lasts unless renewed. Renewed every third of it; a replica that cannot "
        "renew stops the duty a third before expiry, and another replica takes it over within "
        "this long and a third after the leader dies (at once after a clean stop): 12 s with "
        "the default.",
        env="HEALER_HA_LEASE_TTL_S", minimum=3, maximum=600)
    instance: str = setting(
        "", "This process's name among the replicas, in lease owners `<node>/<instance>`; "
        "empty: a random one at every start (a restarted replica is a new owner).",
        env="HEALER_HA_INSTANCE", pattern="^$|^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass
class ClaudeSettings:
    model: str = setting("", "Model name passed to Claude Code; empty uses the CLI's default.")
    max_turns: int = setting(30, "Turn cap for one agent run (an agent's own maxTurns wins if "
                             "lower).", minimum=1)
    max_budget_usd: float = setting(2.0, "Spending cap for one agent run, in US dollars.",
                                    minimum=0)
    cli_path: str = setting("", "Path to the `claude` CLI; empty uses the one bundled in "
                            "claude-agent-sdk.")
    defer_base_s: float = setting(
        30.0, "After a transient model API failure (rate limit, overloaded, server error, "
        "unreachable) with no retry time from the API, Claude runs on this node wait this long "
        "before the next launch, doubling with each failure in a row up to `defer_cap_s`; a "
        "run whose time limit would pass first ends `deferred`.", minimum=0.1)
    defer_cap_s: float = setting(
        900.0, "Longest back-off between two Claude launches after transient model API "
        "failures (see `defer_base_s`).", minimum=1)


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
class AgentsSettings:
    """What confines every agent run, and what agents may spend (see docs/security.md)."""

    sandbox: bool = setting(
        True, "Run every agent with tools (Claude runs, command executors, playbooks that run "
        "commands for an agent) inside the bubblewrap sandbox: the host read-only, writable only "
        "the run's checkout, a private tmp and its result folder, an allow-listed environment "
        "and network. Default on; when the sandbox cannot start, no agent with tools starts "
        "either. `off` LOOSENS ISOLATION: agents run unconfined, with a warning at every start.")
    sandbox_read_paths: list[str] = setting(
        [], "Host paths (files or folders, `~` expanded) every sandboxed run may read, at the "
        "same path: a toolchain outside the system folders (`/opt/go`, `~/.cargo`), a key a "
        "fleet agent's ssh needs. Default none. LOOSENS ISOLATION: whatever is listed can be "
        "read by an agent, and sent wherever its network reaches.",
        items={"type": "string", "minLength": 1})
    sandbox_write_paths: list[str] = setting(
        [], "Host paths every sandboxed run may change, besides its own checkout, run folder "
        "and private tmp: e.g. a folder a `play.actions` command writes to. Default none. "
        "LOOSENS ISOLATION: an agent can change or plant files there.",
        items={"type": "string", "minLength": 1})
    sandbox_hide_paths: list[str] = setting(
        [], "Host paths hidden inside every sandbox (a folder shows empty, a file as empty), "
        "on top of the built-in list (`/etc/shadow`, ssh host keys, `/etc/ssl/private` …) and "
        "healer's own state, results and fleet dirs and settings files: secrets kept under a "
        "folder the sandbox otherwise shows read-only. Default none. Tightens isolation.",
        items={"type": "string", "minLength": 1})
    sandbox_env: list[str] = setting(
        [], "Names of environment variables a sandboxed run takes from healer's environment, "
        "besides PATH, locale, terminal, the model API's `ANTHROPIC_*`/`CLAUDE_CODE_*` and "
        "what healer sets for the run (e.g. `KUBECONFIG` for a play action). Default none; "
        "healer's own secrets never pass. LOOSENS ISOLATION: a listed value is readable by "
        "the agent.",
        items={"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"})
    sandbox_network: list[str] = setting(
        [], "`host:port` endpoints (a name, an IPv4 address, `[IPv6]`) every sandboxed run may "
        "connect to, besides the model API (Claude runs, command executors) and the fleet's "
        "peers (fleet agents): e.g. a package index or the cluster API a play action calls. "
        "Default none. `*` shares the host's whole network (no egress control at all). "
        "LOOSENS ISOLATION: an agent can send what it reads to a listed endpoint.",
        items={"type": "string", "pattern": r"^(\*|\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}|"
                                            r"[A-Za-z0-9._-]+:[0-9]{1,5})$"})
    sandbox_tmp_mb: int = setting(
        1024, "Size cap in MiB of each private tmpfs of a sandbox (`/tmp`, `HOME`, "
        "`/dev/shm`), so an agent cannot fill the machine's memory. Default 1024.",
        minimum=1, maximum=65536)
    sandbox_bwrap: str = setting(
        "bwrap", "The bubblewrap binary: a name looked up on PATH or a path. Default `bwrap` "
        "(Debian's `bubblewrap` package).", minLength=1)
    daily_budget_usd: dict[str, float] = setting(
        {}, "Most US dollars agents may spend per day (UTC), counted from what runs report "
        "(a Claude run's own cost report, a command agent's result `cost_usd`; playbooks cost "
        "nothing): per kind (`code`, `play`, `fleet`) and `all` over every kind, e.g. "
        "`{\"code\": 20, \"all\": 50}`. A run over a budget does not start: it waits "
        "until the next midnight UTC or until the budget is raised (a code attempt is held "
        "and resumes by itself; other runs end `deferred` and are tried again — never a "
        "failed attempt) and a person is told once per day and budget; `healer status`, the "
        "dashboard and `/metrics` show the spend. Empty, or 0 for a key, means no limit.")
    monthly_budget_usd: dict[str, float] = setting(
        {}, "Most US dollars agents may spend per calendar month (UTC), counted like "
        "`daily_budget_usd` and in the same shape: per kind (`code`, `play`, `fleet`) and "
        "`all`, e.g. `{\"all\": 500}`. A run over it waits until the first of the next "
        "month or until the budget is raised, and a person is told once per month and "
        "budget. Empty, or 0 for a key, means no limit.")


@dataclass
class GateSettings:
    thresholds: dict[str, dict[str, float]] = setting(
        {}, "When an incident from a source becomes eligible for an agent, per source "
        "(`report_error`, `sentry`, `alertmanager`, `loki`, `slack`): after `occurrences` "
        "within `window_s` seconds (a sliding window; no `window_s`: since it opened), or "
        "after `users` distinct users reported it, e.g. `{\"sentry\": {\"users\": 3}, "
        "\"loki\": {\"occurrences\": 5, \"window_s\": 600}}`. Below it the incident is "
        "recorded and counted with the gate decision `awaiting_occurrences`: no agent, no "
        "notification; the next occurrence asks again. Default none: one occurrence, as "
        "always. Play and fleet incidents have thresholds of their own (detection counts, "
        "watchdog times) and take no rule here.",
        propertyNames={"enum": ["report_error", "sentry", "alertmanager", "loki", "slack"]},
        additionalProperties={
            "type": "object", "additionalProperties": False, "minProperties": 1,
            "properties": {"occurrences": {"type": "integer", "minimum": 1, "maximum": 1000},
                           "window_s": {"type": "number", "minimum": 0},
                           "users": {"type": "integer", "minimum": 0, "maximum": 1000}}})


@dataclass
class ForgeSettings:
    kind: Literal["local", "github"] = setting(
        "local", "`local`: issues and PR records as Markdown/JSON under the state dir. "
        "`github`: the GitHub REST API.", env="HEALER_FORGE",
    )
    github_repo: str = setting("", "`owner/name` on GitHub for the `github` forge.")
    token_env: str = setting("GITHUB_TOKEN", "Environment variable holding the forge token.")
    api_url: str = setting("https://api.github.com", "GitHub API base URL.")
    push_url: str = setting(
        "", "Where the `github` forge pushes healing branches (`healer/…`, one explicit "
        "refspec each): an `https` URL (the token from `token_env` goes along as an HTTP "
        "header, never on a command line), an `http` URL on loopback, or a local path. Empty: "
        "`https://github.com/<github_repo>.git` (or the `api_url` host for GitHub Enterprise). "
        "Never read from the repository's own config, whose remotes an agent could change; "
        "ssh URLs are refused (their keys would come from the machine, not from the settings).")


@dataclass
class SlackNotifySettings:
    webhook_url: str = setting(
        "", "Slack incoming-webhook URL (`https://hooks.slack.com/services/…`): one message per "
        "notice (webhooks cannot edit a message). Empty: use the Web API when `bot_token` is "
        "set, else no Slack.", env="HEALER_SLACK_WEBHOOK", secret=True)
    bot_token: str = setting(
        "", "Slack bot token (`xoxb-…`, scope `chat:write`): one message per incident posted "
        "with `chat.postMessage` and updated in place with `chat.update`, with Approve/Deny "
        "and Acknowledge/Silence buttons. Wins over `webhook_url`.",
        env="HEALER_SLACK_BOT_TOKEN", secret=True)
    channel: str = setting("", "Channel id (`C0123…`) or name the bot posts to (Web API).")
    api_url: str = setting("https://slack.com/api", "Slack Web API base URL.", minLength=1)


@dataclass
class PagerDutyNotifySettings:
    routing_key: str = setting(
        "", "PagerDuty Events API v2 integration (routing) key: `trigger` on escalation, "
        "`acknowledge` when a person acknowledges, `resolve` when healed; `dedup_key` is the "
        "incident id. Empty disables.", env="HEALER_PAGERDUTY_ROUTING_KEY", secret=True)
    url: str = setting("https://events.pagerduty.com/v2/enqueue",
                       "Events API v2 endpoint (EU accounts: events.eu.pagerduty.com).",
                       minLength=1)


@dataclass
class WebhookNotifySettings:
    url: str = setting("", "A generic JSON webhook: every notice of every routed incident is "
                       "POSTed here, signed the Standard Webhooks way (`webhook-id`, "
                       "`webhook-timestamp`, `webhook-signature`). Empty disables.",
                       env="HEALER_NOTIFY_WEBHOOK_URL")
    secret: str = setting(
        "", "Signing secret, `whsec_` + base64 of at least 24 random bytes (Standard "
        "Webhooks). Empty: requests go unsigned (a receiver cannot tell them from forgeries).",
        env="HEALER_NOTIFY_WEBHOOK_SECRET", secret=True)


@dataclass
class EmailNotifySettings:
    host: str = setting("", "SMTP server host; empty disables e-mail.", env="HEALER_SMTP_HOST")
    port: int = setting(587, "SMTP port (587 submission with STARTTLS).", minimum=1,
                        maximum=65535)
    starttls: bool = setting(True, "Upgrade the connection with STARTTLS before AUTH and "
                             "refuse to send if the server does not offer it. Off only for "
                             "a relay on loopback.")
    ca_file: str = setting("", "PEM file of the CAs to trust for STARTTLS; empty: the "
                           "system's.")
    username: str = setting("", "SMTP AUTH user; empty: no AUTH.", env="HEALER_SMTP_USER")
    password: str = setting("", "SMTP AUTH password.", env="HEALER_SMTP_PASSWORD", secret=True)
    sender: str = setting("healer@localhost", "The From address.")
    to: list[str] = setting([], "Recipients.", items={"type": "string", "minLength": 3})


@dataclass
class NotifySettings:
    discord_webhook_url: str = setting(
        "", "Discord webhook; shorthand for the `discord` target (escalations of P0/P1 with "
        "the default route). Empty disables.", env="HEALER_DISCORD_WEBHOOK", secret=True,
    )
    timeout_s: float = setting(10.0, "Timeout of one notification post.", minimum=0.1)
    routes: list[dict[str, Any]] = setting(
        [], "Which targets hear of which incidents, Alertmanager style: a list of `{match: "
        "{kind, severity, source, labels}, targets: [slack, pagerduty, webhook, email, "
        "discord], continue: false}`; each match key takes a value or a list, `labels` a map "
        "of label → value. The first route that matches wins unless it says `continue`. "
        "Empty: the default route — incidents of severity critical/high go to every "
        "configured target (with only `discord_webhook_url` set: P0/P1 escalations to "
        "Discord, as before).", items={"type": "object"})
    max_attempts: int = setting(8, "Tries of one delivery before it is marked `failed` "
                                "(shown in `healer status` and `/metrics`).", minimum=1,
                                maximum=100)
    backoff_s: float = setting(2.0, "Wait before the first retry; doubled each time.",
                               minimum=0.01)
    max_backoff_s: float = setting(300.0, "Longest wait between two tries.", minimum=0.01)
    interval_s: float = setting(1.0, "How often the loop looks for changed incidents and "
                                "due deliveries.", minimum=0.05)
    links_url: str = setting("", "Base URL of healer's dashboard for links in messages "
                             "(e.g. `https://healer.example.com`); empty: `api.public_url`, "
                             "and no dashboard link when that is empty too.")
    slack: SlackNotifySettings = section(SlackNotifySettings, "Slack target.")
    pagerduty: PagerDutyNotifySettings = section(PagerDutyNotifySettings, "PagerDuty target.")
    webhook: WebhookNotifySettings = section(WebhookNotifySettings, "Signed JSON webhook target.")
    email: EmailNotifySettings = section(EmailNotifySettings, "E-mail (SMTP) target.")


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
