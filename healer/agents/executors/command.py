"""``command``: any CLI from ``settings.executor.commands[agent]``."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from healer.agents.budget import clean_usd
from healer.agents.executors.base import Executor, Prepared, run_env
from healer.agents.sandbox import files_in, model_endpoints
from healer.errors import AgentProcessError, AgentUnavailableError


class CommandExecutor(Executor):
    """Runs any CLI as the agent: argv from ``settings.executor.commands[agent]`` (or ``*``).

    ``{prompt_file}``, ``{result_file}``, ``{cwd}`` (and ``{run_id}``, ``{agent}``,
    ``{target}``, ``{kind}``) are substituted in each argument; the same values are in the
    environment as ``HEALER_*``. The command runs in its own session; a timeout or a
    cancellation kills it and everything it started. Output goes to ``output.log`` in the
    run's folder. What the run cost is what its result says in ``cost_usd`` (US dollars;
    ``healer.agents.budget``).

    It runs in the agent sandbox (``healer.agents.sandbox``) like a Claude run: its checkout
    and run folder writable, the files its configured argv names readable, the model API
    (``ANTHROPIC_BASE_URL``'s, else api.anthropic.com:443) and ``agents.sandbox_network``
    reachable, the allow-listed environment plus what healer sets for the run.
    """

    name = "command"

    def __init__(self, settings: Any, *, commands: Mapping[str, list[str]] | None = None,
                 env: Mapping[str, str] | None = None, **kw: Any):
        super().__init__(settings, **kw)
        self.commands = dict(settings.executor.commands if commands is None else commands)
        self.extra_env = dict(env or {})

    def argv(self, prep: Prepared, prompt_file: Path) -> list[str]:
        template = self.commands.get(prep.run.agent) or self.commands.get("*")
        if not template:
            raise AgentUnavailableError(
                f"no command configured for agent {prep.run.agent!r} (set "
                f"executor.commands.{prep.run.agent} or executor.commands.*)",
                agent=prep.run.agent, run_id=prep.run.run_id)
        values = {"{prompt_file}": str(prompt_file), "{result_file}": prep.run.result_path,
                  "{cwd}": prep.run.cwd, "{run_id}": prep.run.run_id,
                  "{agent}": prep.run.agent, "{target}": prep.run.target,
                  "{kind}": prep.run.kind}
        out = []
        for arg in template:
            for key, value in values.items():
                arg = arg.replace(key, value)
            out.append(arg)
        return out

    def cost(self, prep: Prepared, result: Mapping[str, Any] | None) -> float:
        return clean_usd(prep.cost_usd + clean_usd((result or {}).get("cost_usd")))

    async def _execute(self, prep: Prepared) -> Mapping[str, Any] | None:
        from healer.agents._proctree import kill_tree

        prompt_file = prep.run_dir / "prompt.md"
        prompt_file.write_text(prep.prompt(), encoding="utf-8")
        argv = self.argv(prep, prompt_file)
        env = {**self.extra_env, **run_env(prep), "HEALER_PROMPT_FILE": str(prompt_file)}
        template = self.commands.get(prep.run.agent) or self.commands.get("*") or []
        wrapped = self.confine(prep, argv, env=env, readable=files_in(template),
                               network=[str(e) for e in model_endpoints(
                                   {**os.environ, **self.extra_env})])
        out_path = prep.run_dir / "output.log"
        async with wrapped:
            with open(out_path, "wb") as out:
                try:
                    proc = await asyncio.create_subprocess_exec(
                        *wrapped.argv, cwd=prep.run.cwd, env=wrapped.env,
                        stdin=asyncio.subprocess.DEVNULL, stdout=out,
                        stderr=asyncio.subprocess.STDOUT, start_new_session=True)
                except OSError as exc:
                    raise AgentUnavailableError(
                        f"cannot start {wrapped.argv[0]!r}: {exc.strerror or exc}",
                        agent=prep.run.agent, run_id=prep.run.run_id) from exc
                try:
                    code = await proc.wait()
                except asyncio.CancelledError:
                    await kill_tree(proc.pid, prep.run.run_id)
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(proc.wait(), 5)
                    raise
                finally:
                    # The command is done; anything it left running in its session goes too.
                    await kill_tree(None, prep.run.run_id, grace_s=1.0)
        if code != 0:
            tail = out_path.read_bytes()[-4000:].decode(errors="replace")
            raise AgentProcessError(f"{Path(argv[0]).name} exited with code {code}",
                                    exit_code=code, stderr=tail, agent=prep.run.agent,
                                    run_id=prep.run.run_id)
        return None
