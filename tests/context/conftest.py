"""Fixtures for living-context healing: the shop project, its layers, settings, a service."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from context_helpers import (
    AM_TOKEN,
    SECRET,
    SLACK_SECRET,
    agent_command,
    make_project,
    write_layers,
)

from healer.config import load_settings


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


@pytest.fixture
def context_dir(tmp_path: Path, project: Path) -> Path:
    return write_layers(tmp_path / "context", project)


@pytest.fixture
def make_settings(dirs: Any, project: Path, context_dir: Path) -> Callable[..., Any]:
    """Settings confined to the test's dirs; ``plan=`` runs the scripted agent."""

    def make(*extra: str, plan: Path | None = None) -> Any:
        overrides = [
            f"state_dir={dirs.state}", f"results_dir={dirs.results}", f"fleet_dir={dirs.fleet}",
            f"cto_config={dirs.state / 'none.json'}", f"fleet.config={dirs.state / 'none.json'}",
            f"context.dir={context_dir}", f"selfheal.repo={project}",
            f"webhooks.sentry_client_secret={SECRET}", f"webhooks.alertmanager_token={AM_TOKEN}",
            f"webhooks.slack_signing_secret={SLACK_SECRET}", "node_id=testnode",
        ]
        if plan is not None:
            # The scripted agent keeps each prompt beside its plan: a folder its sandbox
            # may write to.
            overrides += ["executor.default=command", "executor.commands=" + json.dumps(
                {"living-context-healer": agent_command(plan)}),
                "agents.sandbox_write_paths=" + json.dumps([str(plan.parent)])]
        return load_settings(env={}, overrides=[*overrides, *extra])

    return make


@pytest.fixture
def serve_env(dirs: Any, project: Path, context_dir: Path) -> Callable[..., dict[str, str]]:
    """The environment of a `healer serve` child for the shop; ``plan=`` as above."""

    def make(plan: Path | None = None, **extra: str) -> dict[str, str]:
        env = dirs.env
        env.update({"HEALER__SELFHEAL__REPO": str(project),
                    "HEALER__CONTEXT__DIR": str(context_dir),
                    "HEALER_SENTRY_SECRET": SECRET, "HEALER_ALERTMANAGER_TOKEN": AM_TOKEN,
                    "HEALER_SLACK_SECRET": SLACK_SECRET})
        if plan is not None:
            env["HEALER__EXECUTOR__DEFAULT"] = "command"
            env["HEALER__EXECUTOR__COMMANDS"] = json.dumps(
                {"living-context-healer": agent_command(plan)})
            env["HEALER__AGENTS__SANDBOX_WRITE_PATHS"] = json.dumps([str(plan.parent)])
        env.update(extra)
        return env

    return make


@pytest.fixture
async def service_for(make_settings: Callable[..., Any]) -> AsyncIterator[Callable[..., Any]]:
    """``service_for(plan=…, *overrides)`` → a ContextService over a FileStore."""
    from healer.context.service import ContextService
    from healer.core.store import FileStore

    made: list[Any] = []

    def make(*extra: str, plan: Path | None = None, **kw: Any) -> Any:
        settings = make_settings(*extra, plan=plan)
        svc = ContextService(settings, FileStore(settings.state_path), **kw)
        made.append(svc)
        return svc

    yield make
    for svc in made:
        await svc.stop()
