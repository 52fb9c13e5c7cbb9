#!/usr/bin/env python3
"""Record what the real Claude Code CLI prints when the model API fails.

Each case drives the CLI bundled with claude-agent-sdk against healer's scripted Anthropic
Messages API on 127.0.0.1 (``healer.testing.ScriptedModel``), twice: once with
``--output-format stream-json --verbose`` and once with the default plain text output. It
saves, per case, into ``--out`` (default ``tests/agents/cli_failures/claude/``)::

    <case>.stream.jsonl         stdout of the stream-json run
    <case>.text.txt             stdout of the plain-text run
    <case>.stream.stderr.txt    stderr of each run, when not empty
    <case>.text.stderr.txt
    <case>.meta.json            CLI version, argv (temp paths as ${tmp}), the env knobs used,
                                the HTTP status and headers the server sent, exit codes,
                                durations, requests received

and, for the cases that keep one (``Case.transcript``: ``rate_limit_429``, ``auth_401``), from
a third plain ``-p`` run with a hook on ``Stop``, ``StopFailure`` and ``SubagentStop`` that
writes its stdin to a file::

    <case>.transcript.jsonl     the session transcript the CLI wrote under
                                $CLAUDE_CONFIG_DIR/projects/ (what a Stop hook's
                                ``transcript_path`` names)
    <case>.hooks.jsonl          the JSON each of those hooks got on stdin, one a line

Volatile values are normalised so a re-recording diffs cleanly: temp paths become ``${tmp}``,
the server's port ``${port}``, the pid in the CLI's messaging socket path ``${pid}``. Session
ids and durations are kept as the CLI printed them (``meta.volatile`` lists those fields).

Only loopback is used: the scripted model listens on 127.0.0.1, and ``network_refused`` points
the CLI at a closed 127.0.0.1 port. Every run is bounded by ``--timeout``.

    .venv/bin/python scripts/record_cli_failures.py                 # every case
    .venv/bin/python scripts/record_cli_failures.py --case auth_401 --out /tmp/x
    .venv/bin/python scripts/record_cli_failures.py --transcripts-only   # just those files
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from healer.agents.claude import QUIET_ENV  # noqa: E402
from healer.testing.scripted_model import (  # noqa: E402
    RecordedRequest,
    ScriptedModel,
    Turn,
    http_error,
    text,
    tool_use,
)

DEFAULT_OUT = ROOT / "tests" / "agents" / "cli_failures" / "claude"
PROMPT = "Say hello."

#: How the recording is kept fast: the CLI honours ``retry-after`` (seconds) on 429/529/5xx
#: and ``CLAUDE_CODE_MAX_RETRIES`` caps its retries (default 10, with back-off up to minutes).
RETRY_ENV = {"CLAUDE_CODE_MAX_RETRIES": "2", "API_TIMEOUT_MS": "20000"}
RETRY_AFTER_S = "1"
#: What probing this CLI (2.1.332) against the scripted server showed; written into each meta.
RETRY_NOTES = {
    "CLAUDE_CODE_MAX_RETRIES": "honoured: api_retry events show max_retries=2, 3 requests in all",
    "retry-after (seconds)": "honoured: retry-after 1 -> retry_delay_ms ~1100-1250, "
                             "retry-after 3 -> ~3300-3600 (some jitter on top)",
    "retry-after (HTTP date), retry-after-ms": "not honoured here: default back-off "
                                               "(~500 ms, then ~1000 ms, plus jitter)",
    "x-should-retry: false": "honoured: a 529/500 is not retried at all, and the 529 text is "
                             "'API Error: 529 Overloaded. This is a server-side issue...' "
                             "instead of 'Repeated 529 Overloaded errors'",
    "x-should-retry: true": "honoured even on a 400 (retried)",
    "anthropic-ratelimit-requests-reset / -tokens-reset": "not read by the CLI (no such "
                                                          "string in the binary)",
    "anthropic-ratelimit-unified-reset": "read (epoch seconds) for subscription limits; it "
                                         "does not change an API-key 429's output",
}


def bundled_cli() -> str | None:
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return str(path) if path.is_file() else None


def _reset_headers(now: float) -> dict[str, str]:
    """Rate-limit headers as the real API sends them on a 429 (reset one second ahead)."""
    at = dt.datetime.fromtimestamp(int(now) + 1, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "retry-after": RETRY_AFTER_S,
        "x-should-retry": "true",
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": at,
        "anthropic-ratelimit-tokens-reset": at,
        "anthropic-ratelimit-unified-reset": str(int(now) + 1),  # epoch seconds, as the API
        "request-id": "req_scripted_rate_limit",
    }


def _retryable(request_id: str) -> dict[str, str]:
    return {"retry-after": RETRY_AFTER_S, "x-should-retry": "true", "request-id": request_id}


def _bash_forever(req: RecordedRequest) -> Any:
    return tool_use("Bash", {"command": "echo hi", "description": "Say hi"})


@dataclasses.dataclass
class Case:
    name: str
    about: str
    script: Callable[[], Sequence[Turn]] = lambda: [text("hello")]
    args: Sequence[str] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: A run before the recorded one, in the same config dir and cwd (same placeholders).
    setup_args: Sequence[str] | None = None
    when_exhausted: Turn | None = None
    closed_port: bool = False
    #: Also keep the session transcript and the Stop/StopFailure hook input (a third run).
    transcript: bool = False


def _cases() -> dict[str, Case]:
    sid = "${session_id}"
    cases = [
        Case("rate_limit_429", "429 rate_limit_error with retry-after and ratelimit resets",
             lambda: [http_error(429, "rate_limit_error",
                                 "This request would exceed the rate limit for your "
                                 "organization (00000000-0000-0000-0000-000000000000) of 50 "
                                 "requests per minute. For details, refer to: https://docs."
                                 "claude.com/en/api/rate-limits. You can see the response "
                                 "headers for current usage. Please reduce the prompt length "
                                 "or the maximum tokens requested, or try again later. You "
                                 "may also contact sales at https://www.anthropic.com/contact"
                                 "-sales to discuss your options for a rate limit increase.",
                                 headers=_reset_headers(time.time()))],
             transcript=True),
        Case("overloaded_529", "529 overloaded_error",
             lambda: [http_error(529, "overloaded_error", "Overloaded",
                                 headers=_retryable("req_scripted_overloaded"))]),
        Case("server_500", "500 api_error",
             lambda: [http_error(500, "api_error", "Internal server error",
                                 headers=_retryable("req_scripted_server_error"))]),
        Case("auth_401", "401 authentication_error",
             lambda: [http_error(401, "authentication_error", "invalid x-api-key",
                                 headers={"request-id": "req_scripted_auth",
                                          "x-should-retry": "false"})],
             transcript=True),
        Case("permission_403", "403 permission_error",
             lambda: [http_error(403, "permission_error",
                                 "Your API key does not have permission to use the specified "
                                 "resource.", headers={"request-id": "req_scripted_permission",
                                                       "x-should-retry": "false"})]),
        Case("billing_400", "400 invalid_request_error: credit balance too low",
             lambda: [http_error(400, "invalid_request_error",
                                 "Your credit balance is too low to access the Anthropic API. "
                                 "Please go to Plans & Billing to upgrade or purchase credits.",
                                 headers={"request-id": "req_scripted_billing",
                                          "x-should-retry": "false"})]),
        Case("context_overflow_400", "400 invalid_request_error: prompt is too long",
             lambda: [http_error(400, "invalid_request_error",
                                 "prompt is too long: 215000 tokens > 200000 maximum",
                                 headers={"request-id": "req_scripted_context",
                                          "x-should-retry": "false"})]),
        Case("max_turns", "the model keeps calling Bash; --max-turns 1",
             lambda: [], args=("--max-turns", "1", "--allowedTools", "Bash"),
             when_exhausted=_bash_forever),
        Case("budget", "the model keeps calling Bash; --max-budget-usd 0.0001",
             lambda: [], args=("--max-budget-usd", "0.0001", "--allowedTools", "Bash"),
             when_exhausted=_bash_forever),
        Case("resume_missing", "--resume with a session id that does not exist",
             args=("--resume", sid)),
        Case("session_in_use", "--session-id of a session that already exists",
             lambda: [text("hello"), text("hello again")], args=("--session-id", sid),
             setup_args=("--session-id", sid)),
        Case("network_refused", "ANTHROPIC_BASE_URL at a closed 127.0.0.1 port",
             closed_port=True),
    ]
    return {c.name: c for c in cases}


CASES = _cases()


# ---------------------------------------------------------------------------------------------
# Running


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(tmp: Path, base: Mapping[str, str]) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp / "home"),
           "LANG": "C.UTF-8", "TERM": "dumb", "NO_COLOR": "1"}
    env.update(QUIET_ENV)
    env.update(RETRY_ENV)
    env["CLAUDE_CONFIG_DIR"] = str(tmp / "config")
    env.update(base)
    return env


def _run(argv: list[str], env: Mapping[str, str], cwd: Path, timeout: float) -> dict[str, Any]:
    """Run ``argv`` in its own process group, killed at ``timeout``."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return {"stdout": out.decode(errors="replace"), "stderr": err.decode(errors="replace"),
            "exit_code": proc.returncode, "timed_out": timed_out,
            "duration_s": round(time.monotonic() - start, 2)}


def _normalise(value: str, tmp: Path, port: int) -> str:
    for path in {str(tmp.resolve()), str(tmp)}:
        value = value.replace(path, "${tmp}")
    value = re.sub(r"(/cc-socks/)\d+(\.sock)", r"\g<1>${pid}\g<2>", value)  # the CLI's socket
    return re.sub(rf"127\.0\.0\.1:{port}\b", "127.0.0.1:${port}", value)


def _argv(cli: str, case: Case, mode: str, args: Sequence[str], values: Mapping[str, str]
          ) -> list[str]:
    argv = [cli, "-p", PROMPT]
    if mode == "stream":
        argv += ["--output-format", "stream-json", "--verbose"]
    argv += [a.replace("${session_id}", values["session_id"]) for a in args]
    return argv


@contextlib.contextmanager
def _sandbox() -> Iterator[Path]:
    """A fresh temp dir with the CLI's own ``home``, ``config`` and ``work`` folders."""
    with tempfile.TemporaryDirectory(prefix="healer-cli-rec-") as name:
        tmp = Path(name)
        for sub in ("home", "config", "work"):
            (tmp / sub).mkdir(mode=0o700)
        yield tmp


@contextlib.contextmanager
def _serving(case: Case) -> Iterator[tuple[ScriptedModel, int, dict[str, str]]]:
    """The case's scripted model, serving: (model, the port the CLI is sent to, its env).
    A ``closed_port`` case is sent to a port nothing listens on."""
    model = ScriptedModel(case.script(), when_exhausted=case.when_exhausted)
    model.start()
    try:
        port = _closed_port() if case.closed_port else model.port
        base = dict(model.env())
        if case.closed_port:
            base["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{port}"
        yield model, port, base
    finally:
        model.stop()


def record_mode(cli: str, case: Case, mode: str, timeout: float) -> dict[str, Any]:
    """One run of ``case`` in ``mode`` (stream or text), in a fresh temp dir."""
    values = {"session_id": str(uuid.uuid4())}
    with _sandbox() as tmp, _serving(case) as (model, port, base):
        env = _env(tmp, {**base, **case.env})
        setup: dict[str, Any] | None = None
        if case.setup_args is not None:
            setup = _run(_argv(cli, case, mode, case.setup_args, values), env,
                         tmp / "work", timeout)
            setup = {k: v for k, v in setup.items() if k not in ("stdout", "stderr")} | {
                "argv": _placeholders(_argv("claude", case, mode, case.setup_args,
                                            values), values),
                "stdout_tail": _normalise(setup["stdout"], tmp, port)[-2000:]}
        before = len(model.requests)
        run = _run(_argv(cli, case, mode, case.args, values), env, tmp / "work", timeout)
        reqs = model.requests[before:]
        errors = [r for r in reqs if r.response_status is not None]
        return {
            "argv": _placeholders(_argv("claude", case, mode, case.args, values), values),
            "stdout": _normalise(run["stdout"], tmp, port),
            "stderr": _normalise(run["stderr"], tmp, port),
            "exit_code": run["exit_code"], "timed_out": run["timed_out"],
            "duration_s": run["duration_s"],
            "session_id_arg": values["session_id"] if any(
                "${session_id}" in a for a in [*case.args, *(case.setup_args or ())]) else None,
            "setup": setup,
            "requests": {
                "total": len(reqs),
                "messages": sum(1 for r in reqs if r.path.split("?")[0].endswith("/v1/messages")),
                "scripted_turns": sum(1 for r in reqs if r.scripted),
                "error_responses": len(errors),
                "paths": sorted({f"{r.method} {r.path.split('?')[0]}" for r in reqs}),
                "error_at_s": [round(r.at - errors[0].at, 2) for r in errors],
            },
            "http": ({"status": errors[0].response_status,
                      "headers": errors[0].response_headers} if errors else None),
        }


def _placeholders(argv: list[str], values: Mapping[str, str]) -> list[str]:
    return [a.replace(values["session_id"], "${session_id}") for a in argv]


def cli_version(cli: str) -> str:
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=30,
                         env={"PATH": os.environ.get("PATH", ""), **QUIET_ENV})
    return out.stdout.strip()


def record_case(cli: str, case: Case, out: Path, timeout: float, version: str
                ) -> dict[str, Any]:
    runs = {mode: record_mode(cli, case, mode, timeout) for mode in ("stream", "text")}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{case.name}.stream.jsonl").write_text(runs["stream"]["stdout"], encoding="utf-8")
    (out / f"{case.name}.text.txt").write_text(runs["text"]["stdout"], encoding="utf-8")
    for mode, run in runs.items():
        path = out / f"{case.name}.{mode}.stderr.txt"
        if run["stderr"].strip():
            path.write_text(run["stderr"], encoding="utf-8")
        elif path.exists():
            path.unlink()
    meta = {
        "case": case.name, "about": case.about, "cli_version": version,
        "prompt": PROMPT,
        "env": {**RETRY_ENV, **case.env, "CLAUDE_CONFIG_DIR": "${tmp}/config",
                "HOME": "${tmp}/home", "ANTHROPIC_BASE_URL": "http://127.0.0.1:${port}",
                "ANTHROPIC_API_KEY": "(scripted dummy key)", "quiet_env": sorted(QUIET_ENV)},
        "cwd": "${tmp}/work",
        "retry_notes": RETRY_NOTES,
        "volatile": ["session_id / session uuids (kept as printed)", "uuid", "duration_ms",
                     "duration_api_ms", "ratelimit reset times in http.headers",
                     "requests.error_at_s"],
        "modes": {mode: {k: v for k, v in run.items() if k not in ("stdout", "stderr")}
                  for mode, run in runs.items()},
    }
    meta["http"] = runs["stream"]["http"] or runs["text"]["http"]
    meta["summary"] = summarise(runs["stream"]["stdout"], runs["text"]["stdout"])
    (out / f"{case.name}.meta.json").write_text(json.dumps(meta, indent=2) + "\n",
                                                encoding="utf-8")
    return meta


#: The events whose hook input record_transcript keeps (the ones that end a turn).
TRANSCRIPT_HOOKS = ("Stop", "StopFailure", "SubagentStop")
_DUMP_HOOK = '#!/bin/sh\n# record_cli_failures: keep the hook input\ncat >> "$1"\necho >> "$1"\n'


def record_transcript(cli: str, case: Case, out: Path, timeout: float) -> dict[str, Any]:
    """One plain ``-p`` run of ``case`` with a hook on each of ``TRANSCRIPT_HOOKS`` that
    appends its stdin to a file; saves the session transcript the CLI wrote
    (``<case>.transcript.jsonl``) and those hook inputs (``<case>.hooks.jsonl``), with temp
    paths as ``${tmp}`` (the project folder's name ``${tmp_slug}-work``) and the server's port
    as ``${port}``."""
    with _sandbox() as tmp:
        dump, inputs = tmp / "dump-hook.sh", tmp / "hooks.jsonl"
        dump.write_text(_DUMP_HOOK)
        dump.chmod(0o700)
        (tmp / "config" / "settings.json").write_text(json.dumps({"hooks": {
            event: [{"hooks": [{"type": "command", "command": f'"{dump}" "{inputs}"'}]}]
            for event in TRANSCRIPT_HOOKS}}))
        with _serving(case) as (_model, port, base):
            values = {"session_id": str(uuid.uuid4())}
            run = _run(_argv(cli, case, "text", case.args, values),
                       _env(tmp, {**base, **case.env}), tmp / "work", timeout)
        hooks = [json.loads(line) for line in (inputs.read_text(encoding="utf-8").splitlines()
                                               if inputs.exists() else []) if line.strip()]
        transcripts = sorted((tmp / "config" / "projects").glob("*/*.jsonl"))
        if not hooks or not transcripts:
            raise RuntimeError(f"{case.name}: no hook input or no transcript "
                               f"(exit {run['exit_code']}): {run['stderr'][-500:]}")
        # The CLI names the project folder after the cwd's path, every character but letters
        # and digits a dash: that name holds the random temp dir too.
        slugs = {re.sub(r"[^A-Za-z0-9]", "-", str(t)) for t in (tmp, tmp.resolve())}

        def clean(value: str) -> str:
            for slug in slugs:
                value = value.replace(slug, "${tmp_slug}")
            return _normalise(value, tmp, port)

        out.mkdir(parents=True, exist_ok=True)
        (out / f"{case.name}.transcript.jsonl").write_text(
            clean(transcripts[0].read_text(encoding="utf-8")), encoding="utf-8")
        (out / f"{case.name}.hooks.jsonl").write_text("".join(
            clean(json.dumps(h)) + "\n" for h in hooks), encoding="utf-8")
        return {"exit_code": run["exit_code"], "hooks": [h.get("hook_event_name") for h in hooks],
                "transcript_bytes": transcripts[0].stat().st_size}


RESULT_FIELDS = ("subtype", "is_error", "api_error_status", "api_error_type",
                 "terminal_reason", "stop_reason", "num_turns", "result", "errors")


def stream_events(stdout: str) -> list[dict[str, Any]]:
    events = []
    for line in stdout.splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            item = json.loads(line)
            if isinstance(item, dict):
                events.append(item)
    return events


def summarise(stream_stdout: str, text_stdout: str) -> dict[str, Any]:
    """The parts a classifier reads: the result event, api_retry events, error messages."""
    events = stream_events(stream_stdout)
    result = next((e for e in reversed(events) if e.get("type") == "result"), None)
    retries = [e for e in events if e.get("type") == "system"
               and e.get("subtype") == "api_retry"]
    api_errors = [{k: e.get(k) for k in ("error", "api_error_status", "api_error_type",
                                         "request_id")}
                  | {"text": "".join(b.get("text", "") for b in e["message"].get("content", [])
                                     if isinstance(b, dict))}
                  for e in events if e.get("type") == "assistant" and e.get("error")]
    return {
        "event_types": sorted({f"{e.get('type')}/{e.get('subtype', '')}".rstrip("/")
                               for e in events}),
        "session_ids_printed": sorted({str(e["session_id"]) for e in events
                                       if e.get("session_id")}),
        "result": {k: result.get(k) for k in RESULT_FIELDS if k in result} if result else None,
        "api_retry": [{k: v for k, v in e.items() if k not in ("uuid", "session_id")}
                      for e in retries],
        "api_error_messages": api_errors,
        "text_output": text_stdout.strip(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="cases:\n" + "\n".join(
                                    f"  {c.name:22} {c.about}" for c in CASES.values()))
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default: {DEFAULT_OUT}")
    p.add_argument("--case", action="append", choices=sorted(CASES), metavar="NAME",
                   help="record only this case (repeatable; default: all)")
    p.add_argument("--cli", default=None, help="the claude binary (default: the bundled one)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per CLI run")
    p.add_argument("--transcripts-only", action="store_true",
                   help="record only the transcript and hook input of the cases that keep one")
    args = p.parse_args(argv)
    cli = args.cli or bundled_cli()
    if not cli or not shutil.which(cli):
        print("record_cli_failures: the Claude Code CLI was not found", file=sys.stderr)
        return 2
    version = cli_version(cli)
    for name in args.case or list(CASES):
        case = CASES[name]
        if not args.transcripts_only:
            meta = record_case(cli, case, args.out, args.timeout, version)
            codes = {m: r["exit_code"] for m, r in meta["modes"].items()}
            took = {m: r["duration_s"] for m, r in meta["modes"].items()}
            print(f"{name}: exit {codes} in {took} s", flush=True)
        if case.transcript:
            kept = record_transcript(cli, case, args.out, args.timeout)
            print(f"{name}: transcript ({kept['transcript_bytes']} bytes), hooks "
                  f"{kept['hooks']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
