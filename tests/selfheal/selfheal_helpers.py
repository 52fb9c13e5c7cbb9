"""Shared pieces of the self-healing tests: the seed report, scripted agents, polling."""

from __future__ import annotations

import asyncio
import json
import os
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

BUGGY = textwrap.dedent('''\
    def lookup(row):
        return row["user_id"]
    ''')

TRACEBACK = textwrap.dedent('''\
    Traceback (most recent call last):
      File "{root}/src/app/tools.py", line 2, in lookup
        return row["user_id"]
    KeyError: 'user_id'
    ''')

# The seed's example report (self-healing-protocol.txt), verbatim.
SEED_REPORT = {
    "error_type": "asyncpg.exceptions.UndefinedTableError",
    "error_message": 'relation "butler_name.missing_table" does not exist',
    "traceback": "Traceback (most recent call last):...",
    "call_site": "src/butlers/modules/memory/tools/facts.py:memory_store_fact",
    "context": "I was storing a new fact for the memory module. The table appears to be missing "
               "from the schema — likely a migration that was not applied.",
    "tool_name": "memory_store_fact",
    "severity_hint": "high",
}

# The reproduction a scripted fix adds (the verification rule: a test that fails on base with
# the reported KeyError and passes with the fix). Substituted for REPRODUCTION below.
REPRODUCTION = '''t = pathlib.Path("tests/test_lookup_repro.py")
        t.parent.mkdir(exist_ok=True)
        t.write_text("import sys, pathlib\\n"
                     "sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / 'src'))\\n"
                     "from app.tools import lookup\\n\\n\\n"
                     "def test_a_row_without_user_id():\\n"
                     "    assert lookup({}) is None\\n")'''

# The seed's report, of the bug the scripted "fix" agent reproduces and fixes (a KeyError in
# src/app/tools.py): a report that should end in a PR must be one the fix reproduces.
FIXABLE_REPORT = {**SEED_REPORT, "error_type": "KeyError", "error_message": "'user_id'",
                  "call_site": "src/app/tools.py:lookup"}

# Scripted healing agents: small Python programs that do in their cwd (the worktree) what a
# model would do with its tools.
_AGENTS = {
    "fix": '''
        import pathlib, subprocess
        p = pathlib.Path("src/app/tools.py")
        p.write_text('def lookup(row):\\n    return row.get("user_id")\\n')
        REPRODUCTION
        subprocess.run(["git", "add", "src/app/tools.py", "tests"], check=True)
        subprocess.run(["git", "commit", "-qm", "fix: tolerate rows without user_id"],
                       check=True)
    ''',
    # A real fix that also adds a CI workflow echoing the repository's secrets.
    "workflow": '''
        import pathlib, subprocess
        p = pathlib.Path("src/app/tools.py")
        p.write_text('def lookup(row):\\n    return row.get("user_id")\\n')
        REPRODUCTION
        w = pathlib.Path(".github/workflows/x.yml")
        w.parent.mkdir(parents=True)
        w.write_text("on: push\\njobs:\\n  x:\\n    runs-on: ubuntu-latest\\n"
                     "    steps:\\n      - run: echo ${{ toJSON(secrets) }}\\n")
        subprocess.run(["git", "add", "-A"], check=True)
        subprocess.run(["git", "commit", "-qm", "fix: tolerate rows without user_id"],
                       check=True)
    ''',
    "unfixable": '''
        import pathlib, subprocess
        pathlib.Path("UNFIXABLE").write_text(
            "Root cause: the upstream payments API returns HTTP 503 for every request.\\n"
            "This is an outage of an external service, not a bug in this code.\\n"
            "Operator: check the provider's status page and retry later.\\n")
        subprocess.run(["git", "add", "UNFIXABLE"], check=True)
        subprocess.run(["git", "commit", "-qm", "chore: unfixable - upstream outage"],
                       check=True)
    ''',
    "leak": '''
        import pathlib, subprocess
        pathlib.Path("src/app/tools.py").write_text(
            'def lookup(row):\\n    return row.get("user_id")\\n')
        REPRODUCTION
        p = pathlib.Path("src/app/settings.py")
        p.write_text('API_KEY = "sk-ant-api03-Xy7Qp2Lm9Nv4Rt8Ks1Jd6Fh3Gz5Wb0Cc-AaBbCcDdEe"\\n'
                     'ADMIN = "jane.doe@gmail.com"\\n')
        subprocess.run(["git", "add", "-A", "src", "tests"], check=True)
        subprocess.run(["git", "commit", "-qm", "fix: configure the client"], check=True)
    ''',
    "hang": '''
        import time
        time.sleep(300)
    ''',
    "nothing": '''
        print("looked around, changed nothing")
    ''',
    "recurse": '''
        import json, os, subprocess, sys
        out = subprocess.run([sys.executable, "-m", "healer", "report", "--json",
                              "--type", "RuntimeError", "--message", "the agent itself broke"],
                             capture_output=True, text=True)
        with open("probe.json", "w") as fh:  # in its worktree: the one place it may write
            fh.write(out.stdout or out.stderr)
    ''',
}


AGENTS = {name: text.replace("REPRODUCTION", REPRODUCTION) for name, text in _AGENTS.items()}




def wait_status(read: Callable[[], dict[str, Any] | None], statuses: set[str],
                timeout: float = 30.0) -> dict[str, Any]:
    """Poll until the attempt ``read`` returns is in one of ``statuses``."""
    deadline = time.monotonic() + timeout
    last: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        last = read()
        if last and last.get("status") in statuses:
            return last
        time.sleep(0.1)
    raise AssertionError(f"attempt did not reach {statuses}: {json.dumps(last)[:2000]}")


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child healer process (no HEALER_* from outside)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEALER")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


TEST_TOKEN = "selfheal-test-token"


@asynccontextmanager
async def serve(service: Any, *, anonymous: bool = False) -> AsyncIterator[Any]:
    """healer's API app holding this service, on a free loopback port, with a client for it.

    Without a token in the settings, the app gets one and the client sends it: a report over
    HTTP is trusted (it starts a healing run by itself) only with the token. ``anonymous``:
    no token anywhere, as on a machine where none was set up (reports wait for a person)."""
    import httpx
    import uvicorn

    from healer.api.app import ApiContext, create_app
    from healer.testing.wait import until

    headers = {}
    if not anonymous and service.settings.api.token in ("", TEST_TOKEN):
        service.settings.api.token = TEST_TOKEN
        headers["Authorization"] = f"Bearer {TEST_TOKEN}"

    app = create_app(ApiContext(settings=service.settings, store=service.store,
                                services={"selfheal": service}))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           lifespan="off"))
    task = asyncio.create_task(server.serve())
    await until(lambda: server.started, 10)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                     headers=headers) as c:
            yield c
    finally:
        server.should_exit = True
        await task
