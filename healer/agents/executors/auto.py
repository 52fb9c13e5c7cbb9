"""Finding Claude Code, and what ``auto`` picks: ``claude`` when a model is reachable, else
``playbook``."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def claude_cli(settings: Any) -> str | None:
    """The Claude Code CLI to run: configured, bundled with claude-agent-sdk, or on PATH."""
    configured = settings.executor.claude.cli_path
    if configured:
        path = Path(configured).expanduser()
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    try:
        import importlib.util

        spec = importlib.util.find_spec("claude_agent_sdk")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "_bundled" / "claude"
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
    return shutil.which("claude")


def user_claude_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the user's Claude Code keeps its settings and login."""
    env = os.environ if env is None else env
    return Path(env.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude").expanduser()


def _url_host(url: str) -> str:
    rest = url.split("://", 1)[-1]
    return rest.split("/", 1)[0].rsplit("@", 1)[-1]  # never show credentials in a URL


def explain_auto(settings: Any, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """Which executor ``auto`` picks, and why (for ``healer doctor``)."""
    env = os.environ if env is None else env
    cli = claude_cli(settings)
    if cli is None:
        where = settings.executor.claude.cli_path or "bundled with claude-agent-sdk or on PATH"
        return "playbook", f"no Claude Code CLI found ({where})"
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        if env.get(key):
            return "claude", f"{key} is set"
    if env.get("ANTHROPIC_BASE_URL"):
        return "claude", f"ANTHROPIC_BASE_URL points at {_url_host(env['ANTHROPIC_BASE_URL'])}"
    for key in ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"):
        if env.get(key, "").lower() in ("1", "true"):
            return "claude", f"{key} is set"
    creds = user_claude_dir(env) / ".credentials.json"
    if creds.is_file():
        return "claude", f"Claude Code is logged in ({creds})"
    return "playbook", ("no model reachable: no ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL or Claude "
                        "Code login")
