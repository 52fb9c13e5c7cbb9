"""The parts of pods, events, CodeRuns and Workflows the rules read, and who they belong to.

Objects are slimmed as they arrive (a pod's spec, managed fields and annotations are
dropped), so thousands of tracked pods cost a few megabytes, not a copy of etcd.

Which play and agent an object is about, from its labels (``kube.play_labels``,
``kube.agent_labels``; first found wins):

- play: ``play-id``, ``play``, ``workflow``, ``workflows.argoproj.io/workflow`` (an Argo
  workflow's pods carry the workflow's name, which is the play's id: ``play-task-4-abc``); an
  object with none but a task id (label ``task-id``, CodeRun ``spec.taskId``) belongs to play
  ``task-<id>``; a Workflow is its own play (its name) unless a label says otherwise;
- agent: ``agent``, ``github-app``, a CodeRun's ``spec.githubApp``; a GitHub App name such as
  ``5DLabs-Rex`` becomes ``rex``;
- task: label ``task-id`` or ``spec.taskId``.

An object whose play or agent is not a safe name (``healer.core.names``) is ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from healer.core.names import is_safe_name

MAX_NODES = 200  # Workflow nodes kept per workflow (the running ones first)
MAX_TEXT = 300
_APP_PREFIX = re.compile(r"^\d*[A-Za-z]*labs-", re.I)


def parse_time(text: Any) -> float | None:
    """An RFC 3339 time (``2024-05-01T10:00:00Z``, with fractions or an offset) → epoch."""
    if not isinstance(text, str) or not text:
        return None
    t = text.strip().replace("Z", "+00:00")
    m = re.match(r"^(.*T\d{2}:\d{2}:\d{2})\.(\d+)(.*)$", t)
    frac = 0.0
    if m:  # fromisoformat takes at most 6 fraction digits before 3.11's fuller parser
        t = m.group(1) + m.group(3)
        frac = float("0." + m.group(2))
    try:
        return datetime.fromisoformat(t).timestamp() + frac
    except ValueError:
        return None


def _text(value: Any) -> str:
    return str(value or "")[:MAX_TEXT]


def slim(plural: str, obj: dict[str, Any]) -> dict[str, Any]:
    """What the rules need of ``obj``."""
    md = obj.get("metadata") or {}
    meta = {k: md.get(k) for k in ("name", "namespace", "uid", "resourceVersion",
                                   "creationTimestamp", "deletionTimestamp") if md.get(k)}
    meta["labels"] = {str(k)[:100]: str(v)[:100] for k, v in
                      list((md.get("labels") or {}).items())[:64]}
    out: dict[str, Any] = {"metadata": meta}
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    if plural == "pods":
        out["status"] = {
            "phase": status.get("phase", ""), "reason": _text(status.get("reason")),
            "message": _text(status.get("message")), "startTime": status.get("startTime"),
            "conditions": [{k: c.get(k) for k in ("type", "status", "lastTransitionTime",
                                                  "reason")}
                           for c in (status.get("conditions") or [])[:16]],
            "containerStatuses": [_container(c) for c in
                                  (status.get("containerStatuses") or [])[:32]],
        }
        out["containers"] = [str(c.get("name", "")) for c in (spec.get("containers") or [])[:32]]
    elif plural == "coderuns":
        out["spec"] = {k: _text(spec.get(k)) for k in ("taskId", "githubApp", "runType",
                                                        "service", "repositoryUrl", "model")
                       if spec.get(k) not in (None, "")}
        out["status"] = {k: status.get(k) for k in ("phase", "lastUpdate", "startTime",
                                                     "message", "podName", "jobName")
                         if status.get(k) not in (None, "")}
    elif plural == "workflows":
        nodes = status.get("nodes") or {}
        kept = sorted(nodes.items(), key=lambda kv: kv[1].get("phase") != "Running")[:MAX_NODES]
        out["status"] = {"phase": status.get("phase", ""), "startedAt": status.get("startedAt"),
                         "nodes": {k: {f: v.get(f) for f in ("displayName", "templateName",
                                                             "type", "phase", "startedAt",
                                                             "finishedAt", "podName")
                                       if v.get(f) is not None}
                                   for k, v in kept}}
    elif plural == "events":
        involved = obj.get("involvedObject") or {}
        out.update(type=obj.get("type", ""), reason=_text(obj.get("reason")),
                   message=_text(obj.get("message")), count=obj.get("count", 1),
                   lastTimestamp=obj.get("lastTimestamp") or obj.get("eventTime"),
                   involved={"kind": involved.get("kind", ""), "name": involved.get("name", ""),
                             "namespace": involved.get("namespace", "")})
    return out


def _container(c: dict[str, Any]) -> dict[str, Any]:
    def state(s: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for kind in ("waiting", "running", "terminated"):
            if kind in s:
                v = s[kind] or {}
                out[kind] = {k: (_text(v[k]) if isinstance(v[k], str) else v[k])
                             for k in ("reason", "message", "exitCode", "startedAt",
                                       "finishedAt") if k in v}
        return out

    return {"name": str(c.get("name", "")), "ready": bool(c.get("ready")),
            "restartCount": int(c.get("restartCount") or 0),
            "state": state(c.get("state") or {}), "lastState": state(c.get("lastState") or {})}


@dataclass(frozen=True)
class Owner:
    """The play, agent and task an object belongs to."""

    play_id: str
    agent: str
    task_id: str = ""


def agent_name(raw: str) -> str:
    """``5DLabs-Rex`` → ``rex``; ``rex`` stays."""
    name = _APP_PREFIX.sub("", raw.strip()).lower()
    return re.sub(r"[^a-z0-9._-]+", "-", name).strip("-._")[:64]


def owner(plural: str, obj: dict[str, Any], play_labels: list[str],
          agent_labels: list[str]) -> Owner | None:
    md = obj.get("metadata") or {}
    labels = md.get("labels") or {}
    spec = obj.get("spec") or {}
    play = next((labels[k] for k in play_labels if labels.get(k)), "")
    task = str(labels.get("task-id") or spec.get("taskId") or "")
    if not play and plural == "workflows":
        play = str(md.get("name", ""))
    if not play and task:
        play = f"task-{task}"
    raw_agent = next((labels[k] for k in agent_labels if labels.get(k)), "") or str(
        spec.get("githubApp") or "")
    agent = agent_name(raw_agent) if raw_agent else ""
    if not play or not is_safe_name(play) or (agent and not is_safe_name(agent)):
        return None
    return Owner(play, agent, task if is_safe_name(task) else "")


def ref(obj: dict[str, Any]) -> tuple[str, str]:
    md = obj.get("metadata") or {}
    return str(md.get("namespace", "")), str(md.get("name", ""))
