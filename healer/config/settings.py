"""``Settings``: the root of the tree, one section per concern, and the paths it names."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path

from healer.config.capabilities import (
    CodeSettings,
    ContextSettings,
    DetectSettings,
    FleetSettings,
    GitHubSettings,
    IngestSettings,
    KubeSettings,
    PlaySettings,
    SelfhealSettings,
)
from healer.config.fields import section, setting
from healer.config.sections import (
    AgentsSettings,
    ApiSettings,
    BusSettings,
    ExecutorSettings,
    ForgeSettings,
    GateSettings,
    HaSettings,
    LogSettings,
    NotifySettings,
    StoreSettings,
    WebhookSettings,
)


@dataclass
class Settings:
    """The whole settings tree. Paths are relative to the working directory."""

    state_dir: str = setting(".healer", "Where records, the ledger and worktrees live. Private: "
                             "created 0700; healer refuses a symlink, another user's or a "
                             "group/other-writable folder.",
                             env="HEALER_STATE_DIR")
    results_dir: str = setting("/tmp/atlas-agent-results", "Where agents drop result JSON. "
                               "Checked like state_dir at every start (in /tmp, so that no "
                               "other user can own it first).",
                               env="HEALER_RESULTS_DIR")
    fleet_dir: str = setting(".fleet-messages", "Seed-file folders, one per recipient. "
                             "Checked like state_dir.",
                             env="HEALER_FLEET_DIR")
    node_id: str = setting("", "This machine's fleet node id; empty derives it from the "
                           "hostname.", env="HEALER_NODE_ID")
    cto_config: str = setting("cto-config.json", "The orchestrator's config, read if present.",
                              env="HEALER_CTO_CONFIG")
    log: LogSettings = section(LogSettings, "Logging.")
    api: ApiSettings = section(ApiSettings, "The HTTP API.")
    bus: BusSettings = section(BusSettings, "The results bus.")
    store: StoreSettings = section(StoreSettings, "Where state lives.")
    ha: HaSettings = section(HaSettings, "Several replicas on one shared store: who leads "
                             "each once-only duty (docs/ha.md).")
    executor: ExecutorSettings = section(ExecutorSettings, "How agents run.")
    agents: AgentsSettings = section(AgentsSettings, "What confines agents and what they may "
                                     "spend.")
    gate: GateSettings = section(GateSettings, "What an incident needs before an agent "
                                 "may start for it.")
    forge: ForgeSettings = section(ForgeSettings, "Where issues and PRs go.")
    notify: NotifySettings = section(NotifySettings, "Human notifications.")
    detect: DetectSettings = section(DetectSettings, "Log pattern detection.")
    play: PlaySettings = section(PlaySettings, "Play sessions and remediation.")
    kube: KubeSettings = section(KubeSettings, "The play healer's Kubernetes watcher.")
    code: CodeSettings = section(CodeSettings, "Code fixes, from every source.")
    selfheal: SelfhealSettings = section(SelfhealSettings, "report_error gates and healing runs.")
    fleet: FleetSettings = section(FleetSettings, "Fleet channels, watchdog and healing loop.")
    context: ContextSettings = section(ContextSettings, "Living-context healing.")
    webhooks: WebhookSettings = section(WebhookSettings, "Inbound webhook secrets.")
    ingest: IngestSettings = section(IngestSettings, "The Sentry-compatible event ingest.")
    github: GitHubSettings = section(GitHubSettings, "The GitHub watcher of play PRs "
                                     "(polling and the webhook).")

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
