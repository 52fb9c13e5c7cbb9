"""The ``claude`` executor: an agent definition run by Claude Code through claude-agent-sdk.

What the agent gets, and nothing more:

- its definition's system prompt and exactly its tools: ``tools`` (what exists in the session)
  and ``allowed_tools`` (what runs without asking) are both the definition's list, every other
  known tool is in ``disallowed_tools``, and ``permission_mode="dontAsk"`` denies anything not
  pre-approved — so a tool outside the list is refused, not executed;
- ``cwd`` (plus its run folder, where it writes its result), ``max_turns`` (the lower of the
  definition's and the settings'), ``max_budget_usd``, and a wall-clock timeout;
- no user or project settings (``setting_sources=[]``, no CLAUDE.md, no skills, only the MCP
  servers the task names), an isolated ``CLAUDE_CONFIG_DIR`` in the run's folder (a copy of the
  user's login is placed there when one exists, and removed after), non-essential traffic off,
  and healer's own secrets blanked from its environment;
- the prompt delivered verbatim, so an ``@path`` inside untrusted text cannot attach a file.

Claude Code is started through a tiny launcher that puts it in its own session and records
its pid, so a timeout or a cancellation kills it and everything it started. SDK errors map to
healer's: CLI missing → ``AgentUnavailableError``; the process failing → ``AgentProcessError``;
an error result (API error, turn or budget cap) → ``AgentResultError``; the time limit →
``AgentTimeoutError``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib
import json
import logging
import os
import shutil
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from healer.agents import _proctree
from healer.agents.definitions import KNOWN_TOOLS
from healer.agents.executors.auto import claude_cli, user_claude_dir
from healer.agents.executors.base import Executor, Prepared, run_env, secret_env_names
from healer.errors import (
    AgentProcessError,
    AgentResultError,
    AgentUnavailableError,
)

log = logging.getLogger(__name__)

QUIET_ENV = {
    # Nothing but the model API: no telemetry, updates, error reports or feedback surveys.
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
}
MAX_TRANSCRIPT_BYTES = 5 << 20
_KILL_WAIT_S = 10.0

LAUNCHER = '''\
# healer: start Claude Code in a session of its own and note its pid, so that a timeout
# can stop it and everything it started. Replaced by the real CLI (exec), same pid.
import os, sys
os.setsid()
real = os.environ.pop("HEALER_CLAUDE_CLI")
pidfile = os.environ.pop("HEALER_AGENT_PIDFILE", "")
if pidfile:
    with open(pidfile, "w") as fh:
        fh.write(str(os.getpid()))
os.execv(real, [real, *sys.argv[1:]])
'''


def _launcher(folder: Path) -> Path:
    """The launcher script (rewritten when missing or stale)."""
    exe = sys.executable
    shebang = f"#!{exe}" if " " not in exe and len(exe) < 120 else "#!/usr/bin/env python3"
    text = f"{shebang} -I\n{LAUNCHER}"
    path = folder / "claude-launcher"
    if not path.is_file() or path.read_text() != text:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".claude-launcher.{os.getpid()}.tmp"
        tmp.write_text(text)
        tmp.chmod(stat.S_IRWXU)
        os.replace(tmp, path)
    return path


class _QuietKills(logging.Filter):
    """The SDK logs an ERROR when the CLI dies; healer reports that itself, mapped and once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Fatal error in message reader")


_sdk_log = logging.getLogger("claude_agent_sdk._internal.query")
if not any(isinstance(f, _QuietKills) for f in _sdk_log.filters):
    _sdk_log.addFilter(_QuietKills())


class ClaudeExecutor(Executor):
    """Runs an agent with Claude Code (see the module doc for what it may do)."""

    name = "claude"

    def __init__(self, settings: Any, *, env: Mapping[str, str] | None = None,
                 cli_path: str | None = None, **kw: Any):
        super().__init__(settings, **kw)
        self.extra_env = dict(env or {})
        self.cli_path = cli_path

    # -- building the session ------------------------------------------------------------

    def _config_dir(self, prep: Prepared) -> Path:
        folder = prep.run_dir / "claude-config"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        creds = user_claude_dir() / ".credentials.json"
        if creds.is_file():
            # A logged-in CLI keeps its login here; the isolated dir needs a copy for the run.
            target = folder / ".credentials.json"
            shutil.copyfile(creds, target)
            target.chmod(0o600)
        return folder

    def options(self, prep: Prepared, *, launcher: Path, config_dir: Path, cli: str,
                stderr: Any = None) -> Any:
        """The ``ClaudeAgentOptions`` of one run."""
        from claude_agent_sdk import ClaudeAgentOptions

        definition = prep.definition
        claude = self.settings.executor.claude
        tools = list(definition.tools)
        builtin = [t for t in tools if not t.startswith("mcp__")]
        max_turns = claude.max_turns
        if definition.max_turns:
            max_turns = min(max_turns, definition.max_turns)
        model = claude.model or (definition.model if definition.model != "inherit" else None)
        env = {name: "" for name in secret_env_names(self.settings)}
        env.update(QUIET_ENV)
        env.update(run_env(prep))
        env.update({
            "CLAUDE_CONFIG_DIR": str(config_dir),
            "HEALER_CLAUDE_CLI": cli,
            "HEALER_AGENT_PIDFILE": str(prep.run_dir / "claude.pid"),
        })
        env.update(self.extra_env)
        return ClaudeAgentOptions(
            system_prompt=definition.system_prompt,
            tools=builtin,
            allowed_tools=tools,
            disallowed_tools=sorted(KNOWN_TOOLS - set(tools)),
            permission_mode="dontAsk",
            cwd=prep.run.cwd,
            add_dirs=[str(prep.staged_path.parent)],
            max_turns=max_turns,
            max_budget_usd=claude.max_budget_usd,
            model=model,
            cli_path=str(launcher),
            setting_sources=[],
            skills=[],
            mcp_servers=dict(prep.task.mcp_servers),
            strict_mcp_config=True,
            env=env,
            stderr=stderr,
            verbatim_prompts=True,
        )

    # -- running -------------------------------------------------------------------------

    async def _execute(self, prep: Prepared) -> Mapping[str, Any] | None:
        cli = self.cli_path or claude_cli(self.settings)
        if not cli:
            raise AgentUnavailableError(
                "Claude Code CLI not found (install claude-agent-sdk, or set "
                "executor.claude.cli_path)", agent=prep.run.agent, run_id=prep.run.run_id)
        try:
            # The SDK takes ~1 s to import: not on the event loop, where other runs are going.
            await asyncio.to_thread(importlib.import_module, "claude_agent_sdk")
        except ImportError as exc:
            raise AgentUnavailableError(f"claude-agent-sdk is not installed: {exc}",
                                        agent=prep.run.agent, run_id=prep.run.run_id) from exc
        prompt = prep.prompt()
        (prep.run_dir / "prompt.md").write_text(prompt, encoding="utf-8")
        config_dir = self._config_dir(prep)
        launcher = _launcher(self.settings.state_path.resolve() / "agents")
        stderr_tail: collections.deque[str] = collections.deque(maxlen=40)

        def on_stderr(line: str) -> None:
            stderr_tail.append(line)
            log.debug("[%s] claude stderr: %s", prep.run.run_id, line[:500])

        options = self.options(prep, launcher=launcher, config_dir=config_dir, cli=cli,
                               stderr=on_stderr)
        consume = asyncio.create_task(self._consume(prep, prompt, options, stderr_tail))
        try:
            await asyncio.shield(consume)
        except asyncio.CancelledError:
            # Timeout or cancellation: stop the CLI first, then let the SDK notice and close.
            await _proctree.kill_tree(self._pid(prep), prep.run.run_id)
            await _settle(consume)
            raise
        finally:
            await _proctree.kill_tree(None, prep.run.run_id, grace_s=1.0)
            shutil.rmtree(config_dir, ignore_errors=True)  # it holds a copy of the login
        return None

    @staticmethod
    def _pid(prep: Prepared) -> int | None:
        try:
            return int((prep.run_dir / "claude.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    async def _consume(self, prep: Prepared, prompt: str, options: Any,
                       stderr_tail: collections.deque[str]) -> None:
        import claude_agent_sdk as sdk

        ids = {"agent": prep.run.agent, "run_id": prep.run.run_id}
        final: Any = None
        transcript = _Transcript(prep.run_dir / "transcript.jsonl")
        try:
            async for message in sdk.query(prompt=prompt, options=options):
                transcript.add(message)
                _log_message(prep.run.run_id, message)
                if isinstance(message, sdk.ResultMessage):
                    final = message
        except sdk.CLINotFoundError as exc:
            raise AgentUnavailableError(f"Claude Code CLI not found: {exc}", **ids) from exc
        except sdk.CLIConnectionError as exc:
            raise AgentUnavailableError(f"cannot start Claude Code: {exc}", **ids) from exc
        except sdk.ResultError as exc:
            raise AgentResultError(_describe_result(exc.subtype, exc.result, exc.errors,
                                                    exc.api_error_status), **ids) from exc
        except sdk.ProcessError as exc:
            stderr = "\n".join(stderr_tail) or (exc.stderr or "")
            raise AgentProcessError(f"Claude Code failed (exit code {exc.exit_code})",
                                    exit_code=exc.exit_code, stderr=stderr[-4000:],
                                    **ids) from exc
        except sdk.ClaudeSDKError as exc:
            raise AgentProcessError(f"Claude Code session broke: {exc}", **ids) from exc
        finally:
            transcript.close()
        if final is None:
            raise AgentProcessError("Claude Code ended without a result message", **ids)
        if final.is_error:
            raise AgentResultError(_describe_result(final.subtype, final.result, final.errors,
                                                    final.api_error_status), **ids)


async def _settle(task: asyncio.Task[None]) -> None:
    """Wait (bounded) for the SDK to notice the CLI is gone; cancel it if it does not."""
    done, _ = await asyncio.wait({task}, timeout=_KILL_WAIT_S)
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=5)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved: the timeout/cancel is what the caller reports


def _describe_result(subtype: str | None, result: str | None, errors: list[str] | None,
                     status: int | None) -> str:
    message = f"Claude Code reported an error ({subtype or 'error'})"
    if status:
        message += f", API status {status}"
    detail = (result or "").strip() or "; ".join(errors or [])
    return f"{message}: {detail[:1000]}" if detail else message


def _log_message(run_id: str, message: Any) -> None:
    kind = type(message).__name__
    if kind == "AssistantMessage":
        for block in message.content:
            name = type(block).__name__
            if name == "TextBlock" and block.text.strip():
                log.info("[%s] agent: %s", run_id, " ".join(block.text.split())[:300])
            elif name == "ToolUseBlock":
                log.info("[%s] tool %s %s", run_id, block.name,
                         json.dumps(block.input, default=str)[:300])
    elif kind == "UserMessage" and isinstance(message.content, list):
        for block in message.content:
            if type(block).__name__ == "ToolResultBlock" and block.is_error:
                log.info("[%s] tool refused or failed: %s", run_id, str(block.content)[:300])
    elif kind == "SystemMessage" and message.subtype == "api_retry":
        log.warning("[%s] model API retry %s/%s: %s", run_id, message.data.get("attempt"),
                    message.data.get("max_retries"), message.data.get("error"))
    elif kind == "ResultMessage":
        log.info("[%s] claude finished: %s, %s turns, $%.4f", run_id, message.subtype,
                 message.num_turns, message.total_cost_usd or 0.0)


class _Transcript:
    """The run's messages as JSON lines in its folder, capped in size."""

    def __init__(self, path: Path):
        self.fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.size = 0

    def add(self, message: Any) -> None:
        if self.size > MAX_TRANSCRIPT_BYTES:
            return
        import dataclasses

        try:
            data = dataclasses.asdict(message) if dataclasses.is_dataclass(message) else {
                "repr": repr(message)}
        except Exception:  # an odd message must not break the run
            data = {"repr": repr(message)[:2000]}
        line = json.dumps({"type": type(message).__name__, **data}, default=str)[:200_000]
        self.fh.write(line + "\n")
        self.size += len(line) + 1

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.fh.close()
