"""A stand-in living-context-healer for the command executor: it follows a JSON plan.

Run as ``python scripted_agent.py PLAN.json`` by healer's command executor (the prompt file,
result file, working directory, run id, kind, target and incident come in ``HEALER_*``
variables). Plan: ``{"iterations": [{"edits": [{"file", "old", "new"} | {"file", "content"}],
"commit": "message" | null, "status": "fixed", "summary": "…"}]}``; iteration N (read from the
prompt) uses entry N (the last one when there are fewer). Each prompt is kept beside the plan
as ``prompt-<N>.md`` so tests can read what the agent was told.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path


def main() -> int:
    plan_path = Path(sys.argv[1])
    prompt = Path(os.environ["HEALER_PROMPT_FILE"]).read_text(encoding="utf-8")
    n = int(re.search(r"iteration (\d+) of \d+", prompt).group(1))  # type: ignore[union-attr]
    (plan_path.parent / f"prompt-{n}.md").write_text(prompt, encoding="utf-8")
    steps = json.loads(plan_path.read_text())["iterations"]
    step = steps[min(n, len(steps)) - 1]
    cwd = Path(os.environ["HEALER_CWD"])
    for edit in step.get("edits", []):
        path = cwd / edit["file"]
        text = path.read_text() if path.exists() else ""
        if "old" in edit:
            if edit["old"] not in text:
                print(f"scripted agent: {edit['old']!r} not in {edit['file']}", file=sys.stderr)
                return 3
            text = text.replace(edit["old"], edit["new"])
        else:
            text = edit["content"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if step.get("commit"):
        subprocess.run(["git", "add", "-A"], cwd=cwd, check=True)
        subprocess.run(["git", "commit", "-q", "-m", step["commit"]], cwd=cwd, check=True)
    result = {"schema_version": 1, "kind": os.environ["HEALER_KIND"],
              "target": os.environ["HEALER_TARGET"], "status": step.get("status", "fixed"),
              "run_id": os.environ["HEALER_RUN_ID"], "executor": "command",
              "summary": step.get("summary", "scripted fix")}
    if os.environ.get("HEALER_INCIDENT"):
        result["incident"] = os.environ["HEALER_INCIDENT"]
    Path(os.environ["HEALER_RESULT_FILE"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
