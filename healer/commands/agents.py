"""``healer agents list|run|prompt``: the agent definitions, and running one by hand."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

HELP = "list agent definitions, or run one (playbook, claude, command) and print its result"

_FLEET_AGENTS = {"channel-diagnoser", "daemon-restarter", "tunnel-establisher", "config-updater",
                 "nats-reconnector", "inbox-repairer"}

EPILOG = """\
examples:
  healer agents list
  healer agents run channel-diagnoser --target mac1 --var host=127.0.0.2 --executor playbook
  healer agents run channel-diagnoser --target mac1 --executor claude --timeout 120
  healer agents run healing-agent --target 3f2a9c1d --var error_type=KeyError \\
      --var traceback=@trace.txt --cwd ../worktree --executor claude
  healer agents prompt channel-diagnoser --target mac1 --var host=127.0.0.2

--var KEY=VALUE is repeatable; KEY=@FILE reads the value from FILE. For fleet agents, a
target that is a node in the fleet config (.multifleet/config.json) takes its host, ports and
user from there; --var wins.

exit codes: 0 the result's status is a success (ok, diagnosed, healed, fixed) · 1 the run
failed or its result is not a success · 2 usage or input error · 3 the executor cannot run
this agent here (no playbook, no Claude Code CLI, no command configured)"""


def _parse_vars(pairs: list[str]) -> dict[str, str]:
    from healer.errors import UsageError

    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--var expects KEY=VALUE, got {pair!r}")
        if value.startswith("@"):
            path = Path(value[1:]).expanduser()
            try:
                value = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"--var {key}=@{path}: cannot read: {exc}") from exc
        out[key] = value
    return out


def _fleet_vars(settings: Any, agent: str, target: str) -> dict[str, str]:
    """A fleet agent's peer details from the fleet config, when the target is a node there."""
    from healer.config import load_multifleet

    path = Path(settings.fleet.config).expanduser()
    if agent not in _FLEET_AGENTS or not path.is_file():
        return {}
    node = load_multifleet(path).nodes.get(target)
    if node is None:
        return {}
    found = {"host": node.host, "port": str(node.port), "ssh_port": str(node.ssh_port),
             "user": node.user, "nats_url": node.nats_url, "mac_address": node.mac_address,
             "tunnel_port": str(node.tunnel_port or "")}
    return {k: v for k, v in found.items() if v}


def _print_outcome(outcome: Any) -> None:
    head = (f"{outcome.agent} run {outcome.run_id} ({outcome.executor}): {outcome.status} in "
            f"{outcome.duration_s:.1f} s")
    print(head)
    print(f"result: {outcome.result_path}")
    result = outcome.result or {}
    for name, ch in sorted((result.get("channels") or {}).items()):
        ms = ch.get("latency_ms")
        timing = f" ({ms:.0f} ms)" if isinstance(ms, int | float) else ""
        print(f"  {name:<8} {'ok' if ch.get('ok') else 'FAIL':<5} {ch.get('detail', '')}{timing}")
    if result.get("summary"):
        print(f"summary: {result['summary']}")
    if outcome.error:
        print(f"error: {outcome.error}")


def _list(args: argparse.Namespace) -> int:
    from healer.agents import load_definitions, registered
    from healer.commands._common import print_json

    definitions = load_definitions(args.agents_dir)
    books = registered()
    rows = [{"name": d.name, "description": d.description, "tools": list(d.tools),
             "model": d.model, "max_turns": d.max_turns, "kind": d.kind,
             "has_playbook": d.name in books, "path": d.path}
            for d in definitions.values()]
    if args.json:
        print_json(rows)
        return 0
    width = max((len(r["name"]) for r in rows), default=4)
    print(f"{'NAME':<{width}}  {'KIND':<11} {'MODEL':<7} {'PLAYBOOK':<8} TOOLS")
    for r in rows:
        print(f"{r['name']:<{width}}  {r['kind']:<11} {r['model']:<7} "
              f"{'yes' if r['has_playbook'] else 'no':<8} {', '.join(r['tools'])}")
        if args.verbose:
            print(f"{'':<{width}}  {r['description']}")
    return 0


def _task(args: argparse.Namespace, settings: Any) -> Any:
    from healer.agents import AgentTask
    from healer.errors import UsageError

    variables = {**_fleet_vars(settings, args.name, args.target), **_parse_vars(args.var)}
    prompt = None
    if getattr(args, "prompt_file", None):
        try:
            prompt = Path(args.prompt_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--prompt-file: cannot read: {exc}") from exc
    return AgentTask(agent=args.name, target=args.target, vars=variables, cwd=args.cwd,
                     timeout_s=args.timeout, incident=args.incident or "",
                     run_id=args.run_id or "", prompt=prompt)


def _run(args: argparse.Namespace, settings: Any) -> int:
    import asyncio

    from healer.agents import dispatcher, select_executor
    from healer.commands._common import print_json
    from healer.errors import EXIT_UNAVAILABLE, AgentUnavailableError

    task = _task(args, settings)
    executor = select_executor(settings, args.executor, agents_dir=args.agents_dir)
    outcome = asyncio.run(dispatcher(settings, executor=executor).run(task))
    if args.json:
        print_json(outcome.to_dict())
    else:
        _print_outcome(outcome)
    if outcome.ok:
        return 0
    return EXIT_UNAVAILABLE if isinstance(outcome.exception, AgentUnavailableError) else 1


def _prompt(args: argparse.Namespace, settings: Any) -> int:
    from healer.agents import select_executor

    executor = select_executor(settings, args.executor or "claude", agents_dir=args.agents_dir)
    prep = executor.prepare(_task(args, settings), create=False)
    print(prep.prompt(), end="")
    return 0


def main(argv: list[str]) -> int:
    from healer.commands._common import add_settings_args, parser, run, settings_from

    p = parser("agents", "Agent definitions (agents/*.md) and running one agent by hand.\n"
               "Every run leaves heal-<kind>-<target>-<epoch>.json in the results dir.", EPILOG)
    sub = p.add_subparsers(dest="action", metavar="{list,run,prompt}")
    sub.required = True

    ls = sub.add_parser("list", help="the agent definitions")
    ls.add_argument("--json", action="store_true", help="print them as JSON")
    ls.add_argument("-v", "--verbose", action="store_true", help="also print descriptions")

    def task_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("name", help="agent name (see `healer agents list`)")
        sp.add_argument("--target", required=True,
                        help="what the agent works on: a peer, a play id, a fingerprint")
        sp.add_argument("--var", action="append", default=[], metavar="KEY=VALUE",
                        help="context for the agent (repeatable; KEY=@FILE reads a file)")
        sp.add_argument("--cwd", help="the agent's working directory (default: here)")
        sp.add_argument("--timeout", type=float, metavar="S",
                        help="wall-clock limit (default: executor.timeout_s)")
        sp.add_argument("--incident", help="the incident this run belongs to")
        sp.add_argument("--run-id", help="use this run id instead of a fresh one")
        sp.add_argument("--prompt-file", help="use this prompt instead of the agent's template")

    rn = sub.add_parser("run", help="run one agent and print its outcome")
    task_args(rn)
    rn.add_argument("--executor", choices=["auto", "playbook", "claude", "command"],
                    help="how to run it (default: executor.default, normally auto)")
    rn.add_argument("--json", action="store_true", help="print the outcome as JSON")

    pr = sub.add_parser("prompt", help="print the task prompt an agent would get")
    task_args(pr)
    pr.add_argument("--executor", choices=["claude", "command"], help=argparse.SUPPRESS)

    for sp in (ls, rn, pr):
        sp.add_argument("--agents-dir", help="a folder of agent definitions (default: bundled)")
        add_settings_args(sp)
    args = p.parse_args(argv)

    def body() -> int:
        settings = settings_from(args)
        if args.action == "list":
            return _list(args)
        if args.action == "run":
            return _run(args, settings)
        return _prompt(args, settings)

    return run(body)
