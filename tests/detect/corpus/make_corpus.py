"""Writes agent.log and expected.tsv: the labelled detection corpus.

Run ``python tests/detect/corpus/make_corpus.py`` after changing it; the outputs are committed.
Every line carries its label here, written by hand next to the line (never computed by the
engine): the codes it must raise, or none. The log starts at T0 = 2024-05-01T10:00:00Z, so
pre-flight lines within 60 s alert and later ones do not.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
ESC = "\x1b"
LINES: list[tuple[bytes, str]] = []  # (raw line without newline, expected codes "A10,R2" or "")


def add(line: str | bytes, codes: str = "") -> None:
    raw = line.encode("utf-8") if isinstance(line, str) else line
    LINES.append((raw, codes))


def ts(second: int) -> str:
    return f"2024-05-01T10:{second // 60:02d}:{second % 60:02d}.{second % 997:03d}Z"


def main() -> None:
    # --- start of the agent: first line carries T0 -----------------------------------------------
    add(f"{ts(0)} level=info msg=\"agent starting\" pod=play-task-4-impl-x7k2p")
    # Pre-flight within the window (priority 1), in every shape.
    add(f"{ts(2)} level=error msg=\"Tool inventory MISMATCH: github_create_pr\"", "A10")
    add(f"{ts(3)} level=warn msg=\"tool inventory mismatch for agent rex\"", "A10")
    add(f'{{"ts":"{ts(4)}","level":"error","msg":"declared tools are missing: brave_search"}}',
        "A10")
    add(f"{ts(5)} ERROR cto-config.json missing from /etc/cto", "A11")
    add(f"{ts(6)} level=error msg=\"cto-config is invalid: agents.rex.tools not a list\"", "A11")
    add(f"{ts(7)} level=error msg=\"mcp server github failed to initialize\"", "A12")
    add(f"{ts(8)} {ESC}[31mERROR{ESC}[0m tools-server at http://127.0.0.1:3000 unreachable", "A12")
    add(f"{ts(9)} TOOL INVENTORY MISMATCH detected", "A10")
    add(f"{ts(10)} level=info msg=\"tool inventory ok\" tools=14")
    add(f"{ts(11)} level=info msg=\"mcp servers initialized\" count=3")
    for s in range(12, 40):
        add(f"{ts(s)} level=info msg=\"tool call finished\" tool=read_file duration={s}ms")

    # --- runtime failures (priority 2), each in several shapes ----
    runtime = [
        ("thread 'main' panicked at src/agent.rs:214:9", "R1"),
        ("fatal error: runtime: out of memory", "R1"),
        ("request to api failed: timeout after 30s", "R2"),
        ("dial tcp 127.0.0.1:5432: connect: connection refused", "R2"),
        ("max retries exceeded with url: /v1/messages", "R3"),
        ("permission denied writing /workspace (read-only filesystem)", "R4"),
        ("github api returned 401 Unauthorized", "R5"),
        ("invalid token for MCP server linear", "R5"),
    ]
    second = 40
    for text, code in runtime:
        add(f"{ts(second)} level=error msg=\"{text}\" pod=play-task-4-impl-x7k2p", code)
        add(f'{{"ts":"{ts(second)}","level":"error","pod":"play-task-4","msg":"{text}"}}', code)
        add(f"E0501 10:01:{second % 60:02d}.123456       1 controller.go:88] {text}", code)
        add(f"{ts(second)} {ESC}[1;31m[ERROR]{ESC}[0m {text}", code)
        add(text.upper(), code)
        second += 1

    # --- lifecycle issues (priority 3) ---------------------------------------------------------
    lifecycle = [
        ("template not found: prompts/impl/rust.md.j2", "L1"),
        ("system prompt missing for agent rex", "L2"),
        ("agent role is undefined in CodeRun spec", "L3"),
        ("task context is empty for task 4", "L4"),
    ]
    for text, code in lifecycle:
        add(f"{ts(second)} level=warn msg=\"{text}\"", code)
        add(f'{{"ts":"{ts(second)}","level":"warning","msg":"{text}"}}', code)
        add(f"[WARN] {text}", code)
        second += 1

    # --- pre-flight patterns after the 60 s window: no alert ----
    add(f"{ts(130)} level=error msg=\"Tool inventory MISMATCH: late check\"")
    add(f"{ts(131)} level=error msg=\"cto-config missing after reload\"")
    add(f"{ts(132)} level=error msg=\"mcp server slack failed to initialize\"")
    # ... but a late line that also has a runtime failure still raises the runtime code.
    add(f"{ts(133)} level=error msg=\"tools-server unreachable: connection refused\"", "R2")

    # --- level patterns (generic): only when nothing specific matched ----
    add(f"{ts(140)} level=error msg=\"unexpected state transition\"", "E1")
    add(f'{{"ts":"{ts(141)}","level":"error","msg":"could not update CodeRun status"}}', "E1")
    add(f'{{"ts":"{ts(142)}","severity": "error","msg":"sync failed"}}', "E1")
    add(f"{ts(143)} [ERROR] reconcile loop failed for play-task-4", "E1")
    add("E0501 10:02:24.000001       1 reflector.go:140] failed to list *v1.Pod", "E1")
    add(f"{ts(144)} level=fatal msg=\"cannot continue\"", "E2")
    add(f'{{"ts":"{ts(145)}","level":"fatal","msg":"shutting down"}}', "E2")
    add(f"{ts(146)} [FATAL] controller exited", "E2")
    add("F0501 10:02:27.000001       1 main.go:41] unable to start manager", "E2")
    add("error[E0308]: mismatched types", "E3")
    add("error[E0425]: cannot find value `cfg` in this scope", "E3")
    add("Traceback (most recent call last):", "E4")
    add("java.lang.IllegalStateException: agent already running", "E4")
    add(f"{ts(147)} level=error msg=\"request timeout while syncing\"", "R2")  # specific wins
    add(f"{ts(148)} [ERROR] connection refused by 127.0.0.1:6379", "R2")

    # --- a Rust panic with its backtrace ----
    add(f"{ts(150)} thread 'tokio-runtime-worker' panicked at 'called `Result::unwrap()` on an "
        "`Err` value: Os { code: 2 }', crates/healer/src/scanner.rs:88:41", "R1")
    add("note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace")
    add("stack backtrace:")
    for i, fn in enumerate(["core::panicking::panic_fmt", "core::result::unwrap_failed",
                            "healer::scanner::scan", "tokio::runtime::task::harness::poll"]):
        add(f"   {i}: {fn}")
        add(f"             at ./src/{fn.split('::')[-1]}.rs:{10 + i}:5")

    # --- a Python traceback ----
    add("Traceback (most recent call last):", "E4")
    add('  File "/app/agent/run.py", line 42, in <module>')
    add("    main()")
    add('  File "/app/agent/run.py", line 37, in main')
    add("    client.connect()")
    add("ConnectionRefusedError: [Errno 111] Connection refused", "R2")
    add("Traceback (most recent call last):", "E4")
    add('  File "/app/agent/tools.py", line 9, in load')
    add("PermissionError: [Errno 13] Permission denied: '/workspace' on read-only filesystem",
        "R4")

    # --- ANSI colour codes, also splitting a pattern ----
    add(f"{ESC}[90m{ts(160)}{ESC}[0m {ESC}[31mthread 'main' panicked{ESC}[0m at src/x.rs:1:1", "R1")
    add(f"{ESC}[33mconnection{ESC}[0m {ESC}[33mrefused{ESC}[0m by upstream", "R2")
    add(f"{ESC}[32m{ts(161)} INFO all good{ESC}[0m")
    add(f"{ESC}]0;agent window title{ESC}\\{ts(162)} max retries exceeded", "R3")
    add(f"{ESC}[1m{ESC}[4mtemplate not found{ESC}[0m: impl.md", "L1")

    # --- very long lines ----
    add(f"{ts(170)} level=info msg=\"tool output\" body=\"" + "x" * 9000 + "\"")
    add(f"{ts(171)} level=error msg=\"tool output\" body=\"" + "y" * 9000 + " timeout\"", "R2")
    add("z" * 20000 + " fatal error at the very end", "R1")
    add(f"{ts(172)} " + "panicked at the start " + "w" * 12000, "R1")

    # --- invalid UTF-8 --------------------------------------------------------------------------
    add(ts(180).encode() + b" level=error msg=\"\xff\xfe garbage then connection refused\"", "R2")
    add(ts(181).encode() + b" level=info msg=\"binary \xc3\x28 \xa0\xa1 data\"")
    add(b"\x80\x81\x82 invalid token \xfe", "R5")
    add(b"caf\xc3\xa9 \xe2\x82\xac ok")

    # --- false positives: none of these may alert ----
    fps = [
        f"{ts(190)} level=info msg=\"request finished\" error=nil status=200",
        f"{ts(190)} level=info msg=\"validation done\" error=\"\"",
        f"{ts(191)} level=debug msg=\"retry policy\" error=<nil> timeout=5s",
        f'{{"ts":"{ts(191)}","level":"info","msg":"validation done","errors": []}}',
        f'{{"ts":"{ts(192)}","level":"info","msg":"call ok","error":null}}',
        '{"result":"ok","errors":[],"warnings":["slow"]}',
        "lint summary: errors: 0, warnings: 2",
        "cargo clippy: 0 errors, 3 warnings emitted",
        "Checked 14 files, no errors found",
        f"{ts(193)} level=info msg=\"config loaded\" timeout=30s retries=3",
        f'{{"ts":"{ts(193)}","level":"info","msg":"settings","timeout_s": 30}}',
        f"{ts(194)} [INFO] http client timeout: 10s",
        "I0501 10:03:14.000001       1 leaderelection.go:250] attempting timeout renew",
        "W0501 10:03:15.000001       1 reflector.go:424] watch closed: connection refused",
        "W0501 10:03:16.000001       1 client.go:88] invalid token cache miss, refreshing",
        f"{ts(195)} level=warn msg=\"connection refused, will retry\" attempt=1",
        f"{ts(196)} level=warn msg=\"upstream timeout, retrying in 5s\"",
        "test auth::rejects_invalid_token ... ok",
        "test scanner::detects_panicked_at_lines ... ok",
        "test net::timeout_is_retried ... ignored",
        "tests/test_net.py::test_connection_refused_is_retried PASSED",
        "--- PASS: TestTimeoutHandling (0.01s)",
        '{"type":"result","is_error":false,"result":"fixed the timeout handling"}',
        "metrics: timeout_count=0 error_total 0",
        f"{ts(197)} level=info msg=\"healthcheck\" status=ok failures=[]",
        "running: cargo test --timeout=120 -- --nocapture",
        "exec: kubectl wait --for=condition=ready --timeout=60s pod/x",
        "Summary: 12 passed, 0 failures, 0 timeouts",
    ]
    for fp in fps:
        add(fp)

    # --- case-sensitivity and near misses ----
    add(f"{ts(200)} level=info msg=\"prompt rendered\" tokens=512")  # prompt but not missing
    add(f"{ts(201)} level=info msg=\"role assigned\" role=implementer")  # role, not undefined
    add(f"{ts(202)} level=info msg=\"task context loaded\" bytes=2048")
    add(f"{ts(203)} level=info msg=\"templates found\" count=12")
    add(f"{ts(204)} level=info msg=\"Exception handling enabled\"")  # no colon
    add(f"{ts(205)} level=info msg=\"permission denied for user guest\"")  # not filesystem
    add(f"{ts(206)} level=info msg=\"authorized\" user=bot")  # authorized, not unauthorized
    add(f"{ts(207)} Error budget at 99.9%")  # no level pattern
    add(f"{ts(208)} LEVEL=ERROR MSG=\"UPPERCASE LOGFMT\"", "E1")

    # --- plain noise to reach a realistic mix ----
    msgs = ["processing request", "wrote file src/lib.rs", "running cargo check",
            "received model response", "committed changes", "pushing branch feature/task-4",
            "rendering prompt template", "heartbeat", "cache hit", "updated CodeRun status"]
    for i in range(120):
        m = msgs[i % len(msgs)]
        shape = i % 4
        if shape == 0:
            add(f"{ts(210 + i)} level=info msg=\"{m}\" pod=play-task-4-impl-x7k2p")
        elif shape == 1:
            add(f'{{"ts":"{ts(210 + i)}","level":"info","msg":"{m}","n":{i}}}')
        elif shape == 2:
            add(f"I0501 10:0{3 + i // 60}:{i % 60:02d}.000001       1 controller.go:{i}] {m}")
        else:
            add(f"{ts(210 + i)} INFO {m}")
    add(f"{ts(400)} level=error msg=\"final: max retries exceeded\"", "R3")
    add("")  # an empty line
    add("\t   \t")  # whitespace only
    add(f"{ts(401)} level=info msg=\"agent finished\"\r")  # CRLF line end

    # --- the line model: prefixes, levels from every format, agent transcripts ----------------
    pod = "[pod/play-task-4-impl-x7k2p/agent] "
    add(f"{pod}{ts(402)} INFO retrying request after timeout")  # bare INFO behind kubectl
    add(f"{pod}test client::handles_timeout ... ok")  # a passing test named after a failure
    add("web-1  | test client::handles_timeout ... ok")  # the same behind a compose prefix
    add(f"{ts(403)} - app.http - INFO - request timeout set to 30s")  # Python logging
    add(f"{ts(404)}  INFO hyper::client: connection refused, falling back")  # Rust tracing
    add(f"[{ts(405)} INFO  worker] upstream panicked at startup earlier")  # env_logger
    add(f"<14>{ts(406)} host app: timeout budget configured")  # syslog priority 6 (info)
    add(f"{pod}{ts(407)} ERROR upstream: connection refused", "R2")  # error behind kubectl
    add(f"web-1  | {ts(408)} WARN request timeout after 30s", "R2")
    add('{"type":"assistant","message":{"content":[{"type":"text","text":"The test panicked at '
        'line 4 because of a timeout; I will add retry handling."}]}}')  # the agent's words
    add('{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Write","input":'
        '{"content":"if err == ECONNREFUSED { log(\\"connection refused\\") }"}}]}}')
    add('{"type":"user","message":{"content":[{"type":"tool_result","is_error":true,'
        '"content":"curl: (7) Failed to connect: connection refused"}]}}', "R2")
    add('{"type":"result","subtype":"success","is_error":false,"result":"fixed the timeout"}')
    add('{"msg":{"type":"agent_message","message":"the build panicked at lib.rs:3"}}')  # Codex
    add('{"type":"item.completed","item":{"type":"agent_message","text":"timeout handled"}}')
    add('{"type":"error","message":"stream error: connection refused"}', "R2")  # Codex error

    with open(HERE / "agent.log", "wb") as fh:
        for raw, _ in LINES:
            fh.write(raw + b"\n")
    with open(HERE / "expected.tsv", "w", encoding="utf-8") as fh:
        fh.write("# line\tcodes (every other line must raise no alert); made by make_corpus.py\n")
        for n, (_, codes) in enumerate(LINES, start=1):
            if codes:
                fh.write(f"{n}\t{codes}\n")
    print(f"{len(LINES)} lines, {sum(1 for _, c in LINES if c)} labelled")


if __name__ == "__main__":
    main()
