"""A deterministic generator of agent logs in the shapes agents really write.

Used by scan_vs_ripgrep.py to make a big file; the mix (mostly info lines in logfmt, JSON and
klog, a share of lines that hold a failure, 0.3 % that look like one but are not, colour
codes, long lines, bad UTF-8) is what a busy CodeRun pod's log looks like.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

_PODS = [f"play-task-{n}-{kind}-{suffix}" for n in range(1, 9)
         for kind in ("impl", "quality", "test") for suffix in ("x7k2p", "9fq4d")]
_PATHS = ["/api/v1/sessions", "/api/v1/tasks/42", "/health", "/repos/acme/app/pulls",
          "/api/v1/tools/list", "/metrics", "/v1/messages"]
_INFO_MSGS = [
    "processing request", "tool call finished", "wrote file src/lib.rs", "running cargo check",
    "received model response", "committed changes", "pushing branch feature/task-4",
    "reading task context", "rendering prompt template", "loaded 14 tools from tools-server",
    "heartbeat", "cache hit", "spawned subprocess", "updated CodeRun status",
]
_ERRORS = [
    "thread 'main' panicked at src/agent.rs:214:9: called `Option::unwrap()` on a `None` value",
    "fatal error: runtime: out of memory",
    "request to tools-server failed: timeout after 30s",
    "dial tcp 127.0.0.1:3000: connect: connection refused",
    "max retries exceeded with url: /v1/messages",
    "permission denied while writing /workspace/out.json (read-only filesystem)",
    "github api returned 401 Unauthorized",
    "invalid token for MCP server github",
    "template not found: prompts/impl/rust.md.j2",
    "system prompt missing for agent rex",
    "agent role undefined in CodeRun spec",
    "task context is empty for task 4",
    "Tool inventory MISMATCH: declared tools missing: github_create_pull_request",
    "cto-config.json missing from /etc/cto",
    "mcp server github failed to initialize: exit status 1",
    "tools-server at http://127.0.0.1:3000 unreachable",
]
_FALSE_POSITIVES = [
    'level=info msg="request finished" error=nil status=200',
    '{"level":"info","msg":"validation done","errors": []}',
    "lint summary: errors: 0, warnings: 2",
    'level=info msg="config loaded" timeout=30s retries=3',
    "W0501 10:00:00.123456 1 reflector.go:424] watch closed, will retry",
]


def _ts(i: int) -> str:
    s = i // 20  # about 20 lines a second
    return f"2024-05-01T{10 + s // 3600 % 12:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{i % 1000:03d}Z"


def lines(n: int, seed: int = 4, *, error_rate: float = 0.01,
          false_positive_rate: float = 0.003) -> Iterator[bytes]:
    """``n`` log lines (with newlines) of mixed shapes; the same arguments give the same bytes.

    ``error_rate`` of the lines hold one of the failures above (in logfmt, JSON, plain text or
    colour), ``false_positive_rate`` look alarming but are not; the rest are info lines
    (logfmt, JSON, klog), plus a few very long lines and a few with invalid UTF-8.
    """
    rnd = random.Random(seed)
    fp_edge = error_rate + false_positive_rate
    for i in range(n):
        ts, pod = _ts(i), rnd.choice(_PODS)
        r = rnd.random()
        if r < error_rate:
            text = rnd.choice(_ERRORS)
            shape = rnd.random()
            if shape < 0.4:
                out = f'{ts} level=error msg="{text}" pod={pod}'
            elif shape < 0.7:
                out = f'{{"ts":"{ts}","level":"error","pod":"{pod}","msg":"{text}"}}'
            elif shape < 0.9:
                out = f"{ts} ERROR {pod} {text}"
            else:
                out = f"\x1b[31m{ts} ERROR\x1b[0m {pod} {text}"
        elif r < fp_edge:
            out = f"{ts} {rnd.choice(_FALSE_POSITIVES)}"
        elif r < fp_edge + 0.0003:
            out = f'{ts} level=info msg="tool output" pod={pod} body="' + "x" * rnd.randint(
                2000, 6000) + '"'
        elif r < fp_edge + 0.0005:
            yield f'{ts} level=info msg="binary output" pod={pod} data='.encode() + \
                b"\xff\xfe\xc3(\x80\n"
            continue
        elif r < 0.45:
            msg = rnd.choice(_INFO_MSGS)
            out = (f'{ts} level=info msg="{msg}" pod={pod} path={rnd.choice(_PATHS)} '
                   f"duration={rnd.randint(1, 900)}ms")
        elif r < 0.8:
            msg = rnd.choice(_INFO_MSGS)
            out = (f'{{"ts":"{ts}","level":"info","pod":"{pod}","msg":"{msg}",'
                   f'"duration_ms":{rnd.randint(1, 900)},"trace":"{rnd.getrandbits(40):010x}"}}')
        else:
            msg = rnd.choice(_INFO_MSGS)
            out = (f"I0501 {ts[11:26]}    1 controller.go:{rnd.randint(10, 900)}] {msg} "
                   f'pod="cto/{pod}" resourceVersion={rnd.randint(1000, 999999)}')
        yield out.encode("utf-8") + b"\n"
