"""Objects as the API server holds them (pods, CodeRuns, Workflows) and the changes that put a
pod into trouble (crash loop, OOM kill, non-zero exit) or bring it back."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from healer.testing.kube.objects import rfc3339


def container_status(name: str = "agent", *, ready: bool = True, restarts: int = 0,
                     state: dict[str, Any] | None = None,
                     last: dict[str, Any] | None = None, started: float | None = None
                     ) -> dict[str, Any]:
    at = rfc3339(time.time() if started is None else started)
    return {"name": name, "ready": ready, "restartCount": restarts, "image": "agent:latest",
            "imageID": "", "started": ready,
            "state": state if state is not None else {"running": {"startedAt": at}},
            "lastState": last or {}}


def pod(name: str, *, namespace: str = "cto", labels: dict[str, str] | None = None,
        containers: tuple[str, ...] = ("agent",), phase: str = "Running",
        started: float | None = None, is_ready: bool = True) -> dict[str, Any]:
    at = time.time() if started is None else started
    cond = "True" if is_ready else "False"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {}),
                     "creationTimestamp": rfc3339(at)},
        "spec": {"containers": [{"name": c, "image": "agent:latest"} for c in containers]},
        "status": {
            "phase": phase, "startTime": rfc3339(at),
            "conditions": [{"type": t, "status": cond, "lastTransitionTime": rfc3339(at)}
                           for t in ("Ready", "ContainersReady")],
            "containerStatuses": [container_status(c, ready=is_ready, started=at)
                                  for c in containers],
        },
    }


def _container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    for c in obj["status"]["containerStatuses"]:
        if c["name"] == name:
            return c  # type: ignore[no-any-return]
    raise KeyError(name)


def _set_ready(obj: dict[str, Any], flag: bool, at: float) -> None:
    for cond in obj["status"].get("conditions", []):
        if cond["type"] in ("Ready", "ContainersReady"):
            if cond["status"] != ("True" if flag else "False"):
                cond["lastTransitionTime"] = rfc3339(at)
            cond["status"] = "True" if flag else "False"


def crash_loop(container: str = "agent", *, restarts: int = 4, exit_code: int = 1,
               reason: str = "CrashLoopBackOff", at: float | None = None
               ) -> Callable[[dict[str, Any]], None]:
    """The container is waiting to be restarted after failing (CrashLoopBackOff,
    ImagePullBackOff …)."""
    def fn(obj: dict[str, Any]) -> None:
        now = time.time() if at is None else at
        c = _container(obj, container)
        c.update(ready=False, started=False, restartCount=restarts,
                 state={"waiting": {"reason": reason, "message": f"back-off restarting "
                                                                 f"failed container {container}"}},
                 lastState={"terminated": {"exitCode": exit_code, "reason": "Error",
                                           "finishedAt": rfc3339(now)}})
        _set_ready(obj, False, now)
    return fn


def terminated(container: str = "agent", *, exit_code: int = 1, reason: str = "Error",
               keep_ready: bool = True, at: float | None = None,
               restarts: int | None = None) -> Callable[[dict[str, Any]], None]:
    """The container ended with ``exit_code`` (``reason`` OOMKilled for a kill by the kernel);
    ``keep_ready``: the pod still says Ready (the silent failure A2 looks for)."""
    def fn(obj: dict[str, Any]) -> None:
        now = time.time() if at is None else at
        c = _container(obj, container)
        c["state"] = {"terminated": {"exitCode": exit_code, "reason": reason,
                                     "finishedAt": rfc3339(now)}}
        if restarts is not None:
            c["restartCount"] = restarts
        if not keep_ready:
            c["ready"] = False
            _set_ready(obj, False, now)
    return fn


def ready(container: str = "agent", *, at: float | None = None, restarts: int | None = None
          ) -> Callable[[dict[str, Any]], None]:
    """The container runs and is ready again."""
    def fn(obj: dict[str, Any]) -> None:
        now = time.time() if at is None else at
        c = _container(obj, container)
        c.update(ready=True, started=True, state={"running": {"startedAt": rfc3339(now)}},
                 lastState={})
        if restarts is not None:
            c["restartCount"] = restarts
        obj["status"]["phase"] = "Running"
        obj["status"].pop("reason", None)
        _set_ready(obj, True, now)
    return fn


def coderun(name: str, *, namespace: str = "cto", phase: str = "Running",
            labels: dict[str, str] | None = None, task_id: str = "4",
            github_app: str = "5DLabs-Rex", created: float | None = None) -> dict[str, Any]:
    at = time.time() if created is None else created
    return {"apiVersion": "agents.platform/v1", "kind": "CodeRun",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {}),
                         "creationTimestamp": rfc3339(at)},
            "spec": {"runType": "implementation", "taskId": task_id, "githubApp": github_app,
                     "service": "cto", "repositoryUrl": "https://github.com/5dlabs/cto"},
            "status": {"phase": phase}}


def workflow(name: str, *, namespace: str = "cto", labels: dict[str, str] | None = None,
             nodes: dict[str, dict[str, Any]] | None = None, phase: str = "Running",
             created: float | None = None) -> dict[str, Any]:
    at = time.time() if created is None else created
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {}),
                         "creationTimestamp": rfc3339(at)},
            "spec": {}, "status": {"phase": phase, "startedAt": rfc3339(at),
                                   "nodes": dict(nodes or {})}}
