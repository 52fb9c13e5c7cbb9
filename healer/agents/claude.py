"""The ``claude`` executor: an agent definition run by Claude Code through claude-agent-sdk.

What the agent gets, and nothing more:

- its definition's system prompt and exactly its tools: ``tools`` (what exists in the session)
  are the built-in tools the definition names, ``allowed_tools`` (what runs without asking)
  is the definition's list as written — ``Bash`` only as ``Bash(<command prefix>:*)`` patterns
  (``Bash(git diff:*)``), MCP tools by name — every other known tool is in
  ``disallowed_tools``, and ``permission_mode="dontAsk"`` denies anything not pre-approved: a
  tool outside the list, or a command no pattern matches (``cat /etc/passwd``, ``curl`` for
  the healing agent), is refused, not executed;
- ``cwd`` (plus its run folder, where it writes its result), ``max_turns`` (the lower of the
  definition's and the settings'), ``max_budget_usd``, and a wall-clock timeout; what each
  launch cost (``ResultMessage.total_cost_usd``) counts against the day's agent budget
  (``healer.agents.budget``), which may hold the run back before it starts;
- no user or project settings (``setting_sources=[]``, no CLAUDE.md, no skills, only the MCP
  servers the task names), an isolated ``CLAUDE_CONFIG_DIR`` in the run's folder (a copy of the
  user's login is placed there when one exists, and removed after), non-essential traffic off;
- the sandbox (``healer.agents.sandbox``, bubblewrap): the host read-only and mostly absent
  (no home folders, no healer state, no other repositories), writable only its checkout
  (unless read-only; with the checkout's git dir), its run folder and a private ``/tmp``, an
  empty ``HOME``; an environment from an allow-list (PATH, locale, ``ANTHROPIC_*``/
  ``CLAUDE_CODE_*``, its ``HEALER_*`` run variables, ``agents.sandbox_env``), never healer's
  secrets; its own pid namespace; no network but the model API (``ANTHROPIC_BASE_URL``'s
  host and port, else api.anthropic.com:443, bridged), the peers its context names (fleet
  agents) and ``agents.sandbox_network``. Where no sandbox can start, the run fails at once
  (``AgentUnavailableError``); only ``agents.sandbox: off`` runs it unconfined, with a
  warning;
- the prompt delivered verbatim, so an ``@path`` inside untrusted text cannot attach a file.

Claude Code is started through a tiny launcher that puts it in its own session, records its
pid (outside the run folder, where the agent cannot change it), keeps only the allow-listed
environment and execs bubblewrap with the run's policy, so a timeout or a cancellation kills it
and everything it started. SDK errors map to
healer's: CLI missing → ``AgentUnavailableError``; the process failing → ``AgentProcessError``;
an error result (API error, turn or budget cap) → ``AgentResultError``; the time limit →
``AgentTimeoutError``.

Model API failures that are not the agent's fault (``healer.agents.failures``, classified
from the result and the synthetic assistant message's error category) follow the runtime
rules, with the node's records in ``healer.agents.limits``:

- **transient** (T1–T4): the account-wide limit is recorded, the run waits until its
  ``retry_at`` (the API's retry time when the CLI saw one, else the back-off) and launches the
  CLI again — once, within its own time limit; when the time limit would pass first, or the
  second launch fails the same way, it ends ``deferred`` (``deferred_error``, with the
  next ``retry_at``), not failed. Every Claude run waits for the limit before launching; a run
  the model answered clears it.
- **rejected credential** (X1–X3): the run fails, Claude runs on this node stop (the marker,
  one escalation), and while the marker holds an agent with a playbook runs it instead, any
  other fails at once without launching the CLI; a new credential clears it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib
import json
import logging
import os
import random
import shutil
import stat
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.agents import _proctree, failures, limits
from healer.agents.budget import clean_usd
from healer.agents.definitions import KNOWN_TOOLS, tool_name
from healer.agents.executors.auto import claude_cli, user_claude_dir
from healer.agents.executors.base import (
    Executor,
    Prepared,
    deferred_error,
    run_env,
    secret_env_names,
)
from healer.agents.executors.playbook import PlaybookExecutor
from healer.agents.sandbox import Wrapped, files_in, model_endpoints
from healer.agents.task import AgentTask, RunOutcome
from healer.errors import (
    AgentProcessError,
    AgentResultError,
    AgentUnavailableError,
    ExecutorError,
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
_POLL_LIMIT_S = 1.0  # how often a waiting run looks at the limit record again
_STAGGER_S = 2.0  # at most this much later than retry_at, so waiting runs do not start at once

LAUNCHER = '''\
# healer: start Claude Code in a session of its own and note its pid, so that a timeout
# can stop it and everything it started. Replaced (exec, same pid) by the real CLI, or by
# the sandbox (HEALER_SANDBOX: bwrap's argv ending with the CLI, and the names of the
# variables that may pass; values never go on a command line).
import json, os, sys
os.setsid()
real = os.environ.pop("HEALER_CLAUDE_CLI")
pidfile = os.environ.pop("HEALER_AGENT_PIDFILE", "")
spec = os.environ.pop("HEALER_SANDBOX", "")
if pidfile:
    with open(pidfile, "w") as fh:
        fh.write(str(os.getpid()))
argv, env = [real, *sys.argv[1:]], dict(os.environ)
if spec:
    spec = json.loads(spec)
    keep, drop, prefixes = set(spec["keep"]), set(spec["drop"]), tuple(spec["prefixes"])
    env = {k: v for k, v in env.items()
           if k not in drop and (k in keep or k.startswith(prefixes))}
    argv = [*spec["argv"], *sys.argv[1:]]
os.execve(argv[0], argv, env)
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


class _APIFailure(Exception):
    """One launch ended with a model API failure the runtime rules act on (internal to this
    module: ``_execute`` acts on it and raises healer's own error)."""

    def __init__(self, message: str, *, found: failures.Failure, hint_s: float | None,
                 agent: str, run_id: str):
        self.found = found
        self.failure = found.to_dict()  # what the result document carries
        self.hint_s = hint_s
        self.ids = {"agent": agent, "run_id": run_id}
        super().__init__(message)

    def as_error(self, suffix: str = "") -> AgentResultError:
        """The run's error: an ``AgentResultError`` carrying the failure for the result."""
        error = AgentResultError(f"{self}{suffix}", **self.ids)
        error.failure = self.failure  # type: ignore[attr-defined]
        return error


@dataclass
class _Launch:
    """What one launch of the CLI told: the synthetic assistant message's error category, the
    CLI's last retry delay on a 429 (it honours the API's ``retry-after``), whether the model
    answered at all."""

    error: str = ""
    hint_s: float | None = None
    answered: bool = False


class ClaudeExecutor(Executor):
    """Runs an agent with Claude Code (see the module doc for what it may do)."""

    name = "claude"

    def __init__(self, settings: Any, *, env: Mapping[str, str] | None = None,
                 cli_path: str | None = None, **kw: Any):
        super().__init__(settings, **kw)
        self.extra_env = dict(env or {})
        self.cli_path = cli_path

    def run_environment(self) -> dict[str, str]:
        """The environment the CLI inherits, as far as its credential goes (the fingerprint
        of ``healer.agents.limits`` is taken over it)."""
        env = dict(os.environ)
        env.update({name: "" for name in secret_env_names(self.settings)})
        env.update(self.extra_env)
        return env

    async def run(self, task: AgentTask, **kw: Any) -> RunOutcome:
        """Run ``task``; while Claude runs are disabled here (a rejected key), an agent with a
        playbook runs that instead (any other fails at once, in ``_execute``)."""
        marker = await asyncio.to_thread(limits.disabled, self.settings,
                                         self.run_environment())
        if marker is not None:
            from healer.agents.playbooks import get_playbook

            if get_playbook(task.agent) is not None:
                log.warning("Claude runs are disabled here since %s (%s): agent %s runs its "
                            "playbook instead", marker.get("since_iso"), marker.get("code"),
                            task.agent)
                fallback = PlaybookExecutor(self.settings, agents_dir=self.agents_dir,
                                            prompts_dir=self.prompts_dir)
                return await fallback.run(task, **kw)
        return await super().run(task, **kw)

    # -- building the session ------------------------------------------------------------

    def _config_dir(self, prep: Prepared) -> Path:
        """The run's own CLI config dir, made afresh: the run folder is the agent's to
        change, so whatever it left there (a symlink to a host file) is removed first."""
        folder = prep.run_dir / "claude-config"
        _remove(folder)
        folder.mkdir(mode=0o700)
        creds = user_claude_dir() / ".credentials.json"
        if creds.is_file():
            # A logged-in CLI keeps its login here; the isolated dir needs a copy for the run.
            fd = os.open(folder / ".credentials.json",
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(creds.read_bytes())
        return folder

    def pid_file(self, prep: Prepared) -> Path:
        """Where the launcher notes the CLI's pid: healer's, out of the agent's reach."""
        return self.settings.state_path.resolve() / "agents" / "pids" / f"{prep.run.run_id}.pid"

    def run_vars(self, prep: Prepared, config_dir: Path) -> dict[str, str]:
        """What healer sets in the CLI's environment for this run."""
        return {**QUIET_ENV, **run_env(prep), "CLAUDE_CONFIG_DIR": str(config_dir),
                **self.extra_env}

    def options(self, prep: Prepared, *, launcher: Path, config_dir: Path, cli: str,
                stderr: Any = None, wrapped: Wrapped | None = None) -> Any:
        """The ``ClaudeAgentOptions`` of one run (``wrapped``: the run's sandbox)."""
        from claude_agent_sdk import ClaudeAgentOptions

        definition = prep.definition
        claude = self.settings.executor.claude
        tools = list(definition.tools)
        builtin = list(dict.fromkeys(tool_name(t) for t in tools if not t.startswith("mcp__")))
        max_turns = claude.max_turns
        if definition.max_turns:
            max_turns = min(max_turns, definition.max_turns)
        model = claude.model or (definition.model if definition.model != "inherit" else None)
        env = {name: "" for name in secret_env_names(self.settings)}
        env.update(self.run_vars(prep, config_dir))
        if wrapped is not None and wrapped.confined:
            env.update(wrapped.env)
            env["HEALER_SANDBOX"] = wrapped.launcher_spec()
        env.update({"HEALER_CLAUDE_CLI": cli, "HEALER_AGENT_PIDFILE": str(self.pid_file(prep))})
        return ClaudeAgentOptions(
            system_prompt=definition.system_prompt,
            tools=builtin,
            allowed_tools=tools,
            disallowed_tools=sorted(KNOWN_TOOLS - {tool_name(t) for t in tools}),
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
        ids = {"agent": prep.run.agent, "run_id": prep.run.run_id}
        env = self.run_environment()
        marker = await asyncio.to_thread(limits.disabled, self.settings, env)
        if marker is not None:
            refused = AgentUnavailableError(limits.refusal(marker), **ids)
            # The result names the hold, so the attempt waits for it instead of failing.
            refused.failure = limits.refusal_failure(marker)  # type: ignore[attr-defined]
            raise refused
        cli = self.cli_path or claude_cli(self.settings)
        if not cli:
            raise AgentUnavailableError(
                "Claude Code CLI not found (install claude-agent-sdk, or set "
                "executor.claude.cli_path)", **ids)
        try:
            # The SDK takes ~1 s to import: not on the event loop, where other runs are going.
            await asyncio.to_thread(importlib.import_module, "claude_agent_sdk")
        except ImportError as exc:
            raise AgentUnavailableError(f"claude-agent-sdk is not installed: {exc}",
                                        **ids) from exc
        prompt = prep.prompt()
        (prep.run_dir / "prompt.md").write_text(prompt, encoding="utf-8")
        deadline = prep.started + prep.timeout_s  # monotonic, like the executor's timeout
        resumed = False
        while True:
            await self._wait_for_limit(prep, deadline)
            launch = _Launch()
            try:
                await self._launch(prep, cli, prompt, launch)
            except _APIFailure as exc:
                if exc.found.transient:
                    rec = await self._defer(prep, exc)
                    if self._has_result(prep):
                        raise exc.as_error() from exc  # the agent's own result stands
                    if resumed:  # the rules resume once: the run ends deferred
                        raise self._deferred(prep, rec, again=True) from exc
                    resumed = True
                    continue  # wait for retry_at (next round), then launch the CLI again
                await self._disable(prep, exc, env)  # a rejected credential (_classify)
                raise exc.as_error("; Claude runs on this node are stopped until the "
                                   "credential changes") from exc
            except ExecutorError:
                if launch.answered:
                    await asyncio.to_thread(limits.clear_limit, self.settings)
                raise
            await asyncio.to_thread(limits.clear_limit, self.settings)
            return None

    @staticmethod
    def _has_result(prep: Prepared) -> bool:
        """The agent wrote its result before the API failed: that result stands."""
        return prep.staged_path.exists() or prep.staged_path.is_symlink()

    # -- the runtime-failure rules ----------------------------------------------------------

    async def _wait_for_limit(self, prep: Prepared, deadline: float) -> None:
        """Wait until the node's Claude limit (if any) has passed, staggered; raise
        the deferred error at once when it lasts past the run's time limit."""
        stagger: float | None = None
        while True:
            rec = await asyncio.to_thread(limits.read_limit, self.settings)
            now = time.time()
            if rec is None:
                return
            retry_at = float(rec["retry_at"])
            if stagger is None:
                stagger = random.uniform(  # noqa: S311 - a spread, not a secret
                    0.0, min(_STAGGER_S, 0.1 * max(0.0, retry_at - now)))
            if retry_at + stagger <= now:
                return
            if retry_at + stagger - now >= deadline - time.monotonic():
                raise self._deferred(prep, rec)
            if prep.deferral is None:
                log.info("[%s] model API %s (%s): waiting until %s before launching Claude "
                         "Code", prep.run.run_id, rec.get("code"), rec.get("title"),
                         rec.get("retry_at_iso"))
            prep.deferral = self._deferred(prep, rec)  # the time limit passing: deferred
            await asyncio.sleep(min(_POLL_LIMIT_S, retry_at + stagger - now))

    def _deferred(self, prep: Prepared, rec: Mapping[str, Any], *,
                  failure: Mapping[str, Any] | None = None,
                  again: bool = False) -> AgentResultError:
        """The run ends deferred on the limit ``rec``, with ``failure`` (else the latest the
        run saw, else the record's); ``again``: its second launch failed too, else its time
        limit comes first."""
        if failure is None and prep.deferral is not None:
            failure = prep.deferral.failure
        failure = dict(failure) if failure is not None else {
            "code": rec.get("code"), "class": failures.class_of(str(rec.get("code"))),
            "title": rec.get("title"), "detail": rec.get("detail") or "",
            "status": rec.get("status"), "provider": "anthropic"}
        retry_at = float(rec["retry_at"])
        failure["retry_at"] = retry_at
        status = f", API status {failure['status']}" if failure.get("status") else ""
        detail = f": {failure['detail']}" if failure.get("detail") else ""
        why = ("it failed again after the wait" if again else
               "the run's time limit comes before it may be tried again")
        return deferred_error(
            f"deferred: the model API failed with {failure.get('code')} "
            f"({failure.get('title')}{status}){detail}; {why}; try again after "
            f"{limits.iso(retry_at)} — not a failed attempt",
            retry_at=retry_at, failure=failure, agent=prep.run.agent, run_id=prep.run.run_id)

    async def _defer(self, prep: Prepared, exc: _APIFailure) -> dict[str, Any]:
        """Record a transient failure as the node's limit (returned); the run may wait it
        out, and ends deferred if its time limit passes meanwhile."""
        rec = await asyncio.to_thread(limits.note_transient, self.settings, exc.found,
                                      now=time.time(), hint_s=exc.hint_s)
        prep.deferral = self._deferred(prep, rec, failure=exc.failure)
        log.warning("[%s] model API %s (%s), %d in a row: Claude runs on this node wait until "
                    "%s (%s)", prep.run.run_id, exc.found.code, exc.found.title, rec["waits"],
                    rec["retry_at_iso"], rec["source"])
        return rec

    async def _disable(self, prep: Prepared, exc: _APIFailure,
                       env: Mapping[str, str]) -> None:
        """A rejected credential: stop Claude runs here, tell a person once."""
        marker, created = await asyncio.to_thread(limits.disable, self.settings, exc.found,
                                                  env)
        if created:
            log.error("Claude runs on this node are disabled: %s (%s): %s", exc.found.title,
                      exc.found.code, marker.get("reason"))
            # Shielded: the run's time limit must not cut the one escalation short.
            escalation = asyncio.ensure_future(_escalate(
                self.settings, marker, f"{prep.run.agent} {prep.run.run_id}"))
            _ESCALATING.add(escalation)
            escalation.add_done_callback(_ESCALATING.discard)
            await asyncio.shield(escalation)

    def _wrap(self, prep: Prepared, cli: str, config_dir: Path) -> Wrapped:
        """The CLI in the run's sandbox: the CLI's folder and the task's MCP servers' files
        readable, the model API reachable."""
        readable = [str(Path(cli).parent), str(Path(cli).resolve().parent)]
        for server in prep.task.mcp_servers.values():
            if isinstance(server, Mapping) and isinstance(server.get("command"), str):
                args = [a for a in server.get("args") or [] if isinstance(a, str)]
                readable += files_in([server["command"], *args])
        environ = {**os.environ, **self.extra_env}
        return self.confine(prep, [cli], env=self.run_vars(prep, config_dir), readable=readable,
                            network=[str(e) for e in model_endpoints(environ)])

    async def _launch(self, prep: Prepared, cli: str, prompt: str, launch: _Launch) -> None:
        """One launch of the CLI, to its end (or killed on timeout or cancellation)."""
        config_dir = self._config_dir(prep)
        launcher = _launcher(self.settings.state_path.resolve() / "agents")
        self.pid_file(prep).parent.mkdir(parents=True, exist_ok=True)
        stderr_tail: collections.deque[str] = collections.deque(maxlen=40)

        def on_stderr(line: str) -> None:
            stderr_tail.append(line)
            log.debug("[%s] claude stderr: %s", prep.run.run_id, line[:500])

        try:
            wrapped = self._wrap(prep, cli, config_dir)
            async with wrapped:
                options = self.options(prep, launcher=launcher, config_dir=config_dir,
                                       cli=cli, stderr=on_stderr, wrapped=wrapped)
                consume = asyncio.create_task(self._consume(prep, prompt, options,
                                                            stderr_tail, launch))
                try:
                    await asyncio.shield(consume)
                except asyncio.CancelledError:
                    # Timeout or cancellation: stop the CLI first, then let the SDK close.
                    await _proctree.kill_tree(self._pid(prep), prep.run.run_id)
                    await _settle(consume)
                    raise
                finally:
                    await _proctree.kill_tree(None, prep.run.run_id, grace_s=1.0)
        finally:
            _remove(config_dir)  # it holds a copy of the login

    def _pid(self, prep: Prepared) -> int | None:
        try:
            return int(self.pid_file(prep).read_text().strip())
        except (OSError, ValueError):
            return None

    async def _consume(self, prep: Prepared, prompt: str, options: Any,
                       stderr_tail: collections.deque[str], launch: _Launch) -> None:
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
                    prep.cost_usd += clean_usd(message.total_cost_usd)  # every launch counts
                elif isinstance(message, sdk.AssistantMessage):
                    if message.error:
                        launch.error = str(message.error)
                    elif message.model != "<synthetic>":
                        launch.answered = True
                        prep.deferral = None  # the model answers: a timeout is a timeout
                elif isinstance(message, sdk.SystemMessage) and message.subtype == "api_retry":
                    delay = message.data.get("retry_delay_ms")
                    if message.data.get("error_status") == 429 and isinstance(
                            delay, int | float):
                        launch.hint_s = float(delay) / 1000.0
        except sdk.CLINotFoundError as exc:
            raise AgentUnavailableError(f"Claude Code CLI not found: {exc}", **ids) from exc
        except sdk.CLIConnectionError as exc:
            raise AgentUnavailableError(f"cannot start Claude Code: {exc}", **ids) from exc
        except sdk.ResultError as exc:
            message = _describe_result(exc.subtype, exc.result, exc.errors,
                                       exc.api_error_status)
            found = _classify(exc.data or _as_result(exc), launch)
            if found is not None:
                raise _APIFailure(message, found=found, hint_s=launch.hint_s, **ids) from exc
            raise AgentResultError(message, **ids) from exc
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
            message = _describe_result(final.subtype, final.result, final.errors,
                                       final.api_error_status)
            found = _classify(_as_result(final), launch)
            if found is not None:
                raise _APIFailure(message, found=found, hint_s=launch.hint_s, **ids)
            raise AgentResultError(message, **ids)


_ESCALATING: set[asyncio.Future[None]] = set()  # escalations in flight (kept referenced)


async def _escalate(settings: Any, marker: Mapping[str, Any], run: str) -> None:
    try:
        await limits.escalate_disabled(settings, marker, run=run)
    except Exception:  # the marker holds either way; doctor shows it
        log.exception("could not escalate the disabled Claude runs")


def _as_result(obj: Any) -> dict[str, Any]:
    """A ``ResultMessage`` or ``ResultError`` as the CLI's result event."""
    return {"is_error": True, "subtype": getattr(obj, "subtype", None),
            "result": getattr(obj, "result", None), "errors": getattr(obj, "errors", None),
            "api_error_status": getattr(obj, "api_error_status", None),
            "terminal_reason": getattr(obj, "terminal_reason", None)}


def _classify(result: Mapping[str, Any], launch: _Launch) -> failures.Failure | None:
    """The failure the runtime rules act on here (transient, or a rejected credential);
    None for the rest (turn and budget caps, invalid requests, sessions: plain errors)."""
    text = str(result.get("result") or "")
    found = failures.from_result(result, error=launch.error,
                                 retry_at=failures.retry_at_from_text(text, time.time()))
    if found is None or not (found.transient or found.code in limits.DISABLING):
        return None
    return found


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


def _remove(path: Path) -> None:
    """Remove ``path`` whatever it is (a folder, a file, a symlink: never followed)."""
    if path.is_symlink() or path.is_file():
        with contextlib.suppress(OSError):
            path.unlink()
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)


class _Transcript:
    """The run's messages as JSON lines in its folder, capped in size (never through a
    symlink the agent may have left in its place)."""

    def __init__(self, path: Path):
        if path.is_symlink() or (path.exists() and not path.is_file()):
            _remove(path)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        self.fh = os.fdopen(fd, "a", encoding="utf-8")
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
