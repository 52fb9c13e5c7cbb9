"""Replays for ``healer eval --executor scripted``: a fixture's patch played by a scripted model.

Loaded by path from ``healer.code.eval.runner`` (it is test glue: healer's own package never
imports ``healer.testing``). ``serve(replay, repo)`` starts a ``ScriptedModel`` on 127.0.0.1
that, driving the real Claude Code CLI as the healing agent, does what a model fixing the bug
would do:

* a patch (``files:``) — Read the files it changes that exist, Write each file's new content
  (the fix and the reproduction test), commit them with ``git add``/``git commit`` via Bash,
  write the run's result file, stop;
* a note (``unfixable:``) — Write ``UNFIXABLE`` with the note, commit it, write the result
  (``unfixable``), stop.

A replay file (``replays/<name>.yaml``)::

    say: one line of the model's reasoning (optional)
    message: "fix: guard the empty cart"          # the commit message
    files:                                         # path in the repository → new content
      src/shop/cart.py: |
        ...
      tests/test_empty_cart.py: |
        ...
    # or, instead of files:
    unfixable: |
      Not a code bug: DATABASE_URL is not set. Operator: set it in the service's environment.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from healer.testing import ScriptedModel, text, tool_use
from healer.testing.model_script import Reply, reply, text_block, tool_block

UNFIXABLE = "UNFIXABLE"


def load_replay(path: Path) -> dict[str, Any]:
    """A replay file, checked (ValueError saying what is wrong)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path.name}: a replay is a mapping")
    files, note = data.get("files"), data.get("unfixable")
    if bool(files) == bool(note):
        raise ValueError(f"{path.name}: give either 'files' or 'unfixable'")
    if files is not None:
        if not isinstance(files, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            raise ValueError(f"{path.name}: 'files' maps paths to contents")
        for rel in files:
            parts = Path(rel).parts
            if Path(rel).is_absolute() or ".." in parts or (parts and parts[0] == ".git"):
                raise ValueError(f"{path.name}: {rel!r} is not a path inside the repository")
    return data


def _result(status: str, summary: str) -> Reply:
    doc = {"schema_version": 1, "kind": "${kind}", "target": "${target}", "status": status,
           "run_id": "${run_id}", "incident": "${incident}", "executor": "claude",
           "summary": summary, "actions_taken": ["replayed a scripted patch"]}
    return tool_use("Write", {"file_path": "${result_path}", "content": json.dumps(doc)})


def _commit(paths: list[str], message: str) -> Reply:
    add = " ".join(shlex.quote(p) for p in paths)
    return tool_use("Bash", {"command": f"git add -- {add} && git commit -q -m "
                                        f"{shlex.quote(message)}",
                             "description": "Commit the change"})


def script_of(replay: dict[str, Any], repo: Path) -> list[Reply]:
    """The model's turns for ``replay`` in a copy of ``repo`` (``${cwd}``: the clone)."""
    say = str(replay.get("say") or "Looking at the report.")
    note = replay.get("unfixable")
    if note:
        return [tool_use("Write", {"file_path": f"${{cwd}}/{UNFIXABLE}", "content": str(note)},
                         text=say),
                _commit([UNFIXABLE], "chore: unfixable — not a code bug"),
                _result("unfixable", "not a code bug"), text("Wrote UNFIXABLE.")]
    files: dict[str, str] = replay["files"]
    turns: list[Reply] = []
    existing = [p for p in files if (repo / p).is_file()]
    if existing:  # Claude Code writes over a file only after reading it
        turns.append(reply(text_block(say), *(tool_block("Read", {
            "file_path": f"${{cwd}}/{p}"}) for p in existing)))
    turns.append(reply(*(tool_block("Write", {"file_path": f"${{cwd}}/{p}", "content": c})
                         for p, c in files.items())))
    turns += [_commit(list(files), str(replay.get("message") or "fix: scripted patch")),
              _result("fixed", "committed a fix and its test"), text("Committed the fix.")]
    return turns


@contextmanager
def serve(replay_path: Path, repo: Path) -> Iterator[tuple[dict[str, str], Any]]:
    """``(env, turns)``: the environment pointing Claude Code at the model replaying
    ``replay_path``, and a callable giving how many scripted turns the agent took."""
    script = script_of(load_replay(replay_path), repo)
    with ScriptedModel(script, when_exhausted=text("Done.")) as model:
        yield model.env(), lambda: len(model.turns)
