"""A realistic, labelled merged agent log: the corpus detection quality is measured on.

What ``healer scan`` meets in practice, generated (seeded, so every run is the same log):

- eight play pods started one after another, merged as ``kubectl logs --prefix --timestamps``
  prints them, plus compose services (``name-1  | ``) — interleaved;
- every line format agents and their tools write: logfmt, JSON, Python ``logging``, Rust
  ``tracing`` and ``env_logger``, klog, bracketed levels, plain compiler/test output, Claude
  Code stream-json transcripts and Codex JSON events;
- **real failures**: every catalog code in every format that can carry it (pre-flight codes
  A10–A12 within their pod's first minute; runtime and lifecycle codes at error/warn level;
  the level-free signatures ``panicked at``, ``Traceback (most recent call last)``,
  ``error[E…]`` bare);
- **hard negatives**: INFO/DEBUG lines that mention failure words, the agent's own words and
  code in transcripts (assistant text, ``tool_use`` input), passing tests named after failures
  behind prefixes, config echoes like ``timeout=30s``, tool output that is not an error, and
  pre-flight failures *outside* their pod's window.

Each line carries the codes it must raise (none for benign lines). ``python
tests/detect/realistic_corpus.py [--lines 50000]`` writes the log, scans it with both engines
and prints precision and recall per code and the share of benign lines alerted.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

T0 = 1764583200.0  # 2025-12-01T10:00:00Z
PODS = [f"play-task-{n}-{role}-{n}x7k2" for n, role in enumerate(
    ["intake", "impl", "impl", "quality", "testing", "security", "integration", "impl"])]
SERVICES = ["tools-server-1", "postgres-1"]
POD_GAP_S = 150.0  # each pod starts this long after the previous one

# code → failure messages that must raise it (and only it)
FAILURES: dict[str, list[str]] = {
    "A10": ["Tool inventory MISMATCH for rex: missing: github_create_pull_request",
            "declared tools brave_search, memory_store missing from the CLI"],
    "A11": ["cto-config.json missing from /etc/cto (not synced)",
            "cto-config invalid: agents.rex.tools is not a list"],
    "A12": ["mcp server github failed to initialize: exit status 1",
            "tools-server http://tools-server.cto:8080 unreachable"],
    "R1": ["thread 'main' panicked at src/main.rs:42:5: index out of bounds",
           "fatal error: all goroutines are asleep - deadlock!"],
    "R2": ["POST https://api.github.com/graphql: timeout after 30s",
           "dial tcp 10.0.0.5:5432: connect: connection refused"],
    "R3": ["github api: max retries exceeded (5)"],
    "R4": ["write /workspace/target: permission denied: read-only filesystem"],
    "R5": ["github returned 401 unauthorized for installation 42",
           "invalid token for linear api"],
    "L1": ["template not found: implementation/rex.md.hbs"],
    "L2": ["prompt file for task 4 missing from the ConfigMap"],
    "L3": ["role rex-reviewer undefined in play workflow"],
    "L4": ["task context for task 4 is empty"],
    "E1": ["failed to apply patch: hunk 2 of src/lib.rs rejected"],
    "E2": ["out of memory: cannot allocate 1073741824 bytes"],
    # agent runtime failures, in the Claude Code CLI's own words (tests/agents/cli_failures)
    "T1": ["API Error: Request rejected (429) · This request would exceed the rate limit for "
           "your organization of 50 requests per minute.",
           # generic HTTP 429 wordings (a user's first try, other APIs than the model's)
           "Error: rate limit exceeded (429)", "Error: 429 Too Many Requests",
           "HTTP 429 rate limit exceeded", "github api: too many requests, slow down"],
    "T2": ["API Error: Repeated 529 Overloaded errors. The API is at capacity."],
    "T3": ["API Error: 500 Internal server error. This is a server-side issue, usually "
           "temporary."],
    "T4": ["API Error: Connection refused — a firewall or proxy may be blocking it "
           "(ECONNREFUSED)"],
    "X1": ["Invalid API key · Fix external API key"],
    "X2": ["Failed to authenticate. API Error: 403 Your API key does not have permission to "
           "use the specified resource."],
    "X3": ["Credit balance is too low"],
    "X4": ["API Error: 400 model: claude-nope is not a valid model",
           'upstream said {"type":"error","error":{"type":"invalid_request_error"}}'],
    "C1": ["Prompt is too long · the request is ~215000 tokens (limit 200000)"],
    "C2": ["Error: Reached max turns (1)"],
    "C3": ["Error: Exceeded USD budget (0.0001)"],
    "S1": ["No conversation found with session ID: 0f6b2f3e-8a1d-4c55-9d0e-2b7f1c9a4e11"],
    "S2": ["Error: Session ID 0f6b2f3e-8a1d-4c55-9d0e-2b7f1c9a4e11 is already in use."],
    "S3": ["lock file /home/agent/.claude/sessions/task-4.lock already exists"],
}
PREFLIGHT = ("A10", "A11", "A12")
WARN_LEVEL = ("L3", "L4")  # logged as warnings by the agents
FATAL_LEVEL = ("E2",)
SIGNATURES = {  # level-free lines that are failures on their own
    "R1": "thread 'tokio-runtime-worker' panicked at src/client.rs:88:17: called `unwrap()`",
    "E3": "error[E0308]: mismatched types",
    "E4": "Traceback (most recent call last):",
}

NOISE = ["processing request", "wrote file src/lib.rs", "running cargo check", "heartbeat",
         "received model response", "committed changes", "pushing branch feature/task-4",
         "rendering prompt template", "cache hit for crate index", "updated CodeRun status",
         "compiling serde v1.0.215", "running 42 tests", "resolved 118 packages"]
HARD_NEGATIVES = [  # (level, message): benign, whatever words they contain
    ("info", "retrying request after timeout (attempt 1 of 3)"),
    ("info", "request timeout set to 30s"),
    ("info", "connection refused by upstream, falling back to cache"),
    ("debug", "unauthorized requests are rejected by the auth middleware"),
    ("info", "installed panic hook; a fatal error handler is in place"),
    ("info", "handled exception: ValueError in retry loop"),
    ("info", "max retries exceeded counter reset"),
    ("debug", "tools-server health check unreachable flag cleared"),
    ("info", "Tool inventory MISMATCH check passed (0 missing)"),
    ("info", "template not found in cache, loading from disk"),
    ("info", "rate limiter ready: too many requests get HTTP 429 (limit 100/s)"),
]
PLAIN_NEGATIVES = [  # level-free tool output that mentions failures and is fine
    "test client::tests::handles_timeout ... ok",
    "test auth::rejects_invalid_token ... ok",
    "tests/test_api.py::test_connection_refused_is_retried PASSED",
    "--- PASS: TestPanicRecovery (0.00s)",
    "test client::tests::backs_off_on_rate_limit_error ... ok",
    "tests/test_retry.py::test_overloaded_error_is_retried PASSED",
    "    Finished `test` profile [unoptimized + debuginfo] target(s) in 3.2s",
    "0 rate limits hit in the last hour",
    "rate_limit: 100/s",
    "  rate-limit: 429 after 100 requests/s",
]


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def _q(s: str) -> str:
    return json.dumps(s)


# formats: (name, level-aware renderer). A renderer gets (t, level, message) → line.
def _logfmt(t: float, lv: str, m: str) -> str:
    return f"{iso(t)} level={lv} msg={_q(m)} component=agent"


def _json(t: float, lv: str, m: str) -> str:
    return json.dumps({"ts": iso(t), "level": lv, "msg": m, "target": "agent"})


def _python(t: float, lv: str, m: str) -> str:
    word = {"warn": "WARNING", "fatal": "CRITICAL"}.get(lv, lv.upper())
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f",{int(t * 1000) % 1000:03d}"
    return f"{stamp} - agent.worker - {word} - {m}"


def _tracing(t: float, lv: str, m: str) -> str:
    return f"{iso(t)} {lv.upper():>5} agent::worker: {m}"


def _env_logger(t: float, lv: str, m: str) -> str:
    return f"[{iso(t)} {lv.upper():<5} agent] {m}"


def _bracket(t: float, lv: str, m: str) -> str:
    return f"{iso(t)} [{lv.upper()}] {m}"


def _klog(t: float, lv: str, m: str) -> str:
    letter = {"debug": "I", "info": "I", "warn": "W", "error": "E", "fatal": "F"}[lv]
    g = time.gmtime(t)
    return f"{letter}{g.tm_mon:02d}{g.tm_mday:02d} {g.tm_hour:02d}:{g.tm_min:02d}:" \
           f"{g.tm_sec:02d}.000001       1 worker.go:42] {m}"


def _codex(t: float, lv: str, m: str) -> str:
    if lv in ("error", "fatal"):
        return json.dumps({"type": "error", "message": m})
    if lv == "warn":
        return json.dumps({"type": "item.completed", "item": {
            "type": "command_execution", "command": "cargo test", "exit_code": 101,
            "aggregated_output": m}})
    return json.dumps({"type": "item.completed", "item": {"type": "agent_message", "text": m}})


def _claude(t: float, lv: str, m: str) -> str:
    if lv in ("error", "fatal", "warn"):
        return json.dumps({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
             "content": m}]}})
    return json.dumps({"type": "assistant", "message": {"role": "assistant", "content": [
        {"type": "text", "text": m}]}})


FORMATS: dict[str, Callable[[float, str, str], str]] = {
    "logfmt": _logfmt, "json": _json, "python": _python, "tracing": _tracing,
    "env_logger": _env_logger, "bracket": _bracket, "klog": _klog, "codex": _codex,
    "claude": _claude,
}


def transcript_negatives() -> list[str]:
    """The agent's own words and code: never a failure."""
    return [
        json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text":
                    "The test panicked at line 4 because of a timeout; I will add a retry "
                    "and handle connection refused."}]}}),
        json.dumps({"type": "assistant", "message": {"content": [{
            "type": "tool_use", "name": "Edit", "input": {
                "file_path": "src/client.rs", "new_string":
                'return Err(anyhow!("unauthorized: invalid token")); // fatal error path'}}]}}),
        json.dumps({"type": "user", "message": {"content": [{
            "type": "tool_result", "is_error": False,
            "content": "running 3 tests\ntest timeout_is_retried ... ok"}]}}),
        json.dumps({"type": "result", "subtype": "success", "is_error": False,
                    "result": "Fixed the connection refused error by adding retries."}),
        json.dumps({"msg": {"type": "agent_message",
                            "message": "the build panicked at lib.rs:3; fixing the timeout"}}),
        json.dumps({"type": "item.completed", "item": {
            "type": "reasoning", "text": "max retries exceeded handling needs a test"}}),
    ]


def generate(n_lines: int = 50_000, seed: int = 7) -> list[tuple[str, set[str]]]:
    """The merged log as (line, expected codes), in time order."""
    rng = random.Random(seed)
    events: list[tuple[float, str, set[str]]] = []
    starts = {pod: T0 + i * POD_GAP_S for i, pod in enumerate(PODS)}
    starts.update({svc: T0 - 30 for svc in SERVICES})
    end = T0 + len(PODS) * POD_GAP_S + 600

    def prefix(src: str, t: float) -> str:
        if src in SERVICES:
            return f"{src}  | "
        return f"[pod/{src}/agent] {iso(t)} "

    def add(src: str, t: float, line: str, codes: set[str] | None = None) -> None:
        events.append((t, prefix(src, t) + line, codes or set()))

    # every source starts with an info line (its first line: the start of its window)
    for src, t in starts.items():
        add(src, t, _logfmt(t, "info", "agent starting"))
    # failures: every code in every format, spread over the pods
    k = 0
    for code, messages in FAILURES.items():
        level = "warn" if code in WARN_LEVEL else "fatal" if code in FATAL_LEVEL else "error"
        for fmt_name, fmt in FORMATS.items():
            for m in messages:
                # klog W lines are not counted, as in the original: log these at E
                level_here = "error" if fmt_name == "klog" and level == "warn" else level
                pod = PODS[k % len(PODS)]
                k += 1
                if code in PREFLIGHT:
                    t = starts[pod] + rng.uniform(2, 50)
                else:
                    t = starts[pod] + rng.uniform(70, POD_GAP_S * 3)
                if code in ("E1", "E2") and fmt_name in ("codex", "claude"):
                    continue  # a transcript event has no level pattern: nothing to say
                add(pod, t, fmt(t, level_here, m), {code})
    for code, line in SIGNATURES.items():
        for pod in PODS[:4]:
            t = starts[pod] + rng.uniform(70, 300)
            add(pod, t, line, {code})
    # pre-flight failures outside their pod's window: benign for detection
    for pod in PODS:
        t = starts[pod] + rng.uniform(120, 140)
        add(pod, t, _logfmt(t, "error", FAILURES["A10"][0]), set())
    # hard negatives, many times over, and plain noise up to n_lines
    negatives: list[Callable[[float], str]] = []
    for lv, m in HARD_NEGATIVES:
        for fmt in FORMATS.values():
            negatives.append(lambda t, fmt=fmt, lv=lv, m=m: fmt(t, lv, m))
    negatives += [lambda t, s=s: s for s in PLAIN_NEGATIVES + transcript_negatives()]
    negatives.append(lambda t: _logfmt(t, "info", "config loaded") + " timeout=30s retries=3")
    negatives.append(lambda t: json.dumps({"level": "info", "msg": "config",
                                           "timeout": "30s", "errors": []}))
    fill = n_lines - len(events)
    for i in range(max(0, fill)):
        src = rng.choice(PODS + SERVICES)
        t = rng.uniform(starts[src] + 1, end)
        if i % 10 == 0:
            line = rng.choice(negatives)(t)
        else:
            fmt = rng.choice(list(FORMATS.values()))
            line = fmt(t, rng.choice(["info", "info", "debug"]), rng.choice(NOISE))
        add(src, t, line)
    return [(line, codes) for _, line, codes in sorted(events, key=lambda e: e[0])]


def write(path: Path, corpus: list[tuple[str, set[str]]]) -> None:
    path.write_text("".join(line + "\n" for line, _ in corpus), encoding="utf-8")


def score(corpus: list[tuple[str, set[str]]], alerts: list[tuple[int, str]]
          ) -> dict[str, dict[str, float]]:
    """Per code: tp, fp, fn, precision, recall; plus 'benign': lines alerted / benign lines."""
    got: dict[int, set[str]] = {}
    for line_no, code in alerts:
        got.setdefault(line_no, set()).add(code)
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    benign = benign_hit = 0
    for n, (_, want) in enumerate(corpus, start=1):
        have = got.get(n, set())
        for c in want & have:
            tp[c] += 1
        for c in have - want:
            fp[c] += 1
        for c in want - have:
            fn[c] += 1
        if not want:
            benign += 1
            benign_hit += bool(have)
    out: dict[str, dict[str, float]] = {}
    for c in sorted(set(tp) | set(fp) | set(fn)):
        p = tp[c] / (tp[c] + fp[c]) if tp[c] + fp[c] else 1.0
        r = tp[c] / (tp[c] + fn[c]) if tp[c] + fn[c] else 1.0
        out[c] = {"tp": tp[c], "fp": fp[c], "fn": fn[c], "precision": p, "recall": r}
    out["benign"] = {"lines": benign, "alerted": benign_hit,
                     "rate": benign_hit / benign if benign else 0.0}
    return out


def main() -> int:
    import argparse
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from healer.detect.catalog import Catalog
    from healer.detect.engine import Engine

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=50_000)
    args = ap.parse_args()
    corpus = generate(args.lines)
    failures = sum(bool(c) for _, c in corpus)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "merged.log"
        write(path, corpus)
        for kind in ("re", "hyperscan"):
            engine = Engine(Catalog.load(), engine=kind)
            alerts = [(a.line_no, a.code) for a in engine.scan_file(path, workers=1)]
            s = score(corpus, alerts)
            b = s.pop("benign")
            print(f"{kind}: {len(corpus)} lines, {failures} failures, {len(alerts)} alerts; "
                  f"benign lines alerted {int(b['alerted'])} of {int(b['lines'])} "
                  f"({b['rate'] * 100:.3f} %, target ≤ 0.05 %)")
            print(f"  {'code':<5} {'tp':>4} {'fp':>4} {'fn':>4} {'precision':>9} {'recall':>7}")
            for c, m in s.items():
                print(f"  {c:<5} {int(m['tp']):>4} {int(m['fp']):>4} {int(m['fn']):>4} "
                      f"{m['precision']:>9.3f} {m['recall']:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
