"""The play alerts a cluster's state shows, with the original play healer's thresholds.

``ClusterState`` holds the slimmed pods, CodeRuns, Workflows and warning events of the
watched namespace; ``Rules.alerts(state, now)`` says which alerts hold right now, each as a
``PlayAlert`` keyed by ``(code, play, agent, target)``. What fires and clears, and when a
pod counts as recovered, is the watcher's business (``healer.play.kube.watcher``).

- **A7 pod failure** (critical, ``agent_failure``): phase Failed, evicted, a container waiting
  in CrashLoopBackOff / ImagePullBackOff / ErrImagePull / CreateContainerConfigError, or
  OOMKilled (now, or last time while it is not back and ready).
- **A2 silent failure** (``agent_failure``; only when A7 does not already hold for the pod):
  a container terminated with an exit code ≠ 0 while the pod still runs (critical), the pod
  not Ready / ContainersReady for ``dead_after_s`` (60 s), or restarts ≥ ``restart_threshold``
  (3) (warning).
- **A8 step timeout** (warning, ``stuck``): a pod with a stage label, or a running Workflow
  node whose template or display name names a stage, running longer than its stage's limit
  (``stage_timeouts_s``: implementation 45, quality 15, testing 30, security 15,
  integration 20, otherwise 60 minutes).
- **A9 stuck CodeRun** (warning, ``stuck``): not finished and no phase change for
  ``stuck_after_s`` (10 min); healer's own remediation CodeRuns (label ``remediation:
  "true"``, name prefix ``healer-remediation-``) are skipped.
- **A3 stale progress** (warning, ``stuck``): a play with running work (a running pod, an
  unfinished CodeRun) and no progress (``healer.play.progress``: commits, comments, log lines)
  for ``stale_progress_s`` (15 min), counted from when its work or the watcher started if
  nothing was ever noted; one alert per running agent of the play, so each is restarted.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from healer.play.alerts import PlayAlert
from healer.play.kube.objects import Owner, owner, parse_time, slim

AlertId = tuple[str, str, str, str]  # code, play, agent, target
POD_FAILURES = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull",
                "CreateContainerConfigError")
TERMINAL_PHASES = ("Succeeded", "Failed", "Completed", "Cancelled", "Canceled", "Error")
MAX_EVENTS_PER_OBJECT = 3
MAX_EVENT_OBJECTS = 2000


@dataclass
class Tracked:
    obj: dict[str, Any]
    owner: Owner | None
    phase_since: float = 0.0  # CodeRuns: when the current phase began (as far as we know)
    healthy_since: float | None = None  # pods: since when it looks fine


@dataclass
class ClusterState:
    """What the watcher knows of the namespace, by resource and (namespace, name)."""

    settings: Any  # KubeSettings
    clock: Callable[[], float]
    started_at: float = 0.0
    pods: dict[tuple[str, str], Tracked] = field(default_factory=dict)
    coderuns: dict[tuple[str, str], Tracked] = field(default_factory=dict)
    workflows: dict[tuple[str, str], Tracked] = field(default_factory=dict)
    events: dict[tuple[str, str], deque[str]] = field(default_factory=dict)
    gone: dict[str, float] = field(default_factory=dict)  # play → when its last object went

    def table(self, plural: str) -> dict[tuple[str, str], Tracked]:
        return {"pods": self.pods, "coderuns": self.coderuns, "workflows": self.workflows}[plural]

    def excluded(self, plural: str, obj: dict[str, Any]) -> bool:
        name = str((obj.get("metadata") or {}).get("name", ""))
        return plural == "pods" and any(name.startswith(p) for p in
                                        self.settings.exclude_prefixes)

    def sync(self, plural: str, items: list[dict[str, Any]]) -> None:
        """A fresh list: what is not in it was deleted while nobody watched."""
        if plural == "events":
            self.events.clear()
            for obj in items:
                self.apply(plural, "ADDED", obj)
            return
        table = self.table(plural)
        fresh = {_key(o) for o in items}
        for key in [k for k in table if k not in fresh]:
            self._remove(plural, key)
        for obj in items:
            self.apply(plural, "MODIFIED" if _key(obj) in table else "ADDED", obj)

    def apply(self, plural: str, kind: str, obj: dict[str, Any]) -> None:
        now = self.clock()
        if plural == "events":
            self._event(obj)
            return
        if self.excluded(plural, obj):
            return
        table = self.table(plural)
        key = _key(obj)
        if kind == "DELETED":
            self._remove(plural, key)
            return
        s = self.settings
        small = slim(plural, obj)
        who = owner(plural, obj, s.play_labels, s.agent_labels)
        old = table.get(key)
        t = Tracked(small, who, old.phase_since if old else 0.0,
                    old.healthy_since if old else None)
        if plural == "coderuns":
            phase = small["status"].get("phase", "")
            if old is None or old.obj["status"].get("phase", "") != phase:
                if old is None:  # first sight: the best guess of when the phase began
                    t.phase_since = max(filter(None, (
                        parse_time(small["metadata"].get("creationTimestamp")),
                        parse_time(small["status"].get("lastUpdate")))), default=now)
                else:
                    t.phase_since = now
        if plural == "pods":
            t.healthy_since = (t.healthy_since or now) if pod_healthy(small) else None
        table[key] = t
        if who is not None:
            self.gone.pop(who.play_id, None)

    def _remove(self, plural: str, key: tuple[str, str]) -> None:
        t = self.table(plural).pop(key, None)
        if t is not None and t.owner is not None and not self.objects_of(t.owner.play_id):
            self.gone[t.owner.play_id] = self.clock()
        if plural == "pods":
            self.events.pop(key, None)

    def _event(self, obj: dict[str, Any]) -> None:
        small = slim("events", obj)
        if small.get("type") != "Warning":
            return
        inv = small["involved"]
        key = (inv["namespace"], inv["name"])
        if key not in self.events and len(self.events) >= MAX_EVENT_OBJECTS:
            self.events.pop(next(iter(self.events)))
        ring = self.events.setdefault(key, deque(maxlen=MAX_EVENTS_PER_OBJECT))
        text = f"{small['reason']}: {small['message']}"[:300]
        if text not in ring:
            ring.append(text)

    def refresh(self) -> None:
        """Pods that stayed fine keep their ``healthy_since``; called before the rules."""
        now = self.clock()
        for t in self.pods.values():
            if pod_healthy(t.obj):
                t.healthy_since = t.healthy_since or now
            else:
                t.healthy_since = None

    def objects_of(self, play_id: str) -> list[Tracked]:
        return [t for table in (self.pods, self.coderuns, self.workflows)
                for t in table.values() if t.owner and t.owner.play_id == play_id]


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    md = obj.get("metadata") or {}
    return str(md.get("namespace", "")), str(md.get("name", ""))


def _cond(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in pod["status"].get("conditions") or [] if c.get("type") == kind),
                None)


def pod_healthy(pod: dict[str, Any]) -> bool:
    """Succeeded, or running with every container running and ready."""
    st = pod["status"]
    if st.get("phase") == "Succeeded":
        return True
    if st.get("phase") != "Running" or st.get("reason") == "Evicted":
        return False
    cs = st.get("containerStatuses") or []
    return bool(cs) and all(c["ready"] and "running" in c["state"] for c in cs) and all(
        (c := _cond(pod, k)) is None or c.get("status") == "True"
        for k in ("Ready", "ContainersReady"))


def is_remediation(obj: dict[str, Any]) -> bool:
    md = obj["metadata"]
    return (md.get("labels") or {}).get("remediation") == "true" or str(
        md.get("name", "")).startswith("healer-remediation-")


class Rules:
    def __init__(self, settings: Any, *, link: Callable[[str, str, str], str],
                 progress_last: Callable[[str], float | None]):
        self.s = settings
        self.link = link  # (kind, namespace, name) → URL or ""
        self.progress_last = progress_last

    def alerts(self, state: ClusterState, now: float) -> dict[AlertId, PlayAlert]:
        out: dict[AlertId, PlayAlert] = {}
        for (ns, name), t in state.pods.items():
            if t.owner is None:
                continue
            found = self._pod_failure(t, ns, name, state) or self._silent(t, ns, name, now,
                                                                         state)
            for alert in (found, self._pod_timeout(t, ns, name, now)):
                if alert is not None:
                    out[_id(alert)] = alert
        for (ns, name), t in state.workflows.items():
            for alert in self._node_timeouts(t, ns, name, now, state):
                out[_id(alert)] = alert
        for (ns, name), t in state.coderuns.items():
            alert = self._stuck_run(t, ns, name, now)
            if alert is not None:
                out[_id(alert)] = alert
        for alert in self._stale(state, now):
            out[_id(alert)] = alert
        return out

    # -- the rules -----------------------------------------------------------------------------

    def _alert(self, code: str, t: Tracked, kind: str, ns: str, name: str, severity: str,
               summary: str, issue_type: str, state: ClusterState | None = None,
               **detail: Any) -> PlayAlert:
        assert t.owner is not None
        events = list(state.events.get((ns, name), ())) if state is not None else []
        info: dict[str, Any] = {"namespace": ns, "kind": kind, "name": name,
                                "task_id": t.owner.task_id, **detail}
        if events:
            info["events"] = events
        return PlayAlert(code=code, play_id=t.owner.play_id, agent=t.owner.agent,
                         target=f"{kind}/{ns}/{name}", severity=severity, summary=summary,
                         issue_type=issue_type, link=self.link(kind, ns, name), detail=info)

    def _pod_failure(self, t: Tracked, ns: str, name: str, state: ClusterState
                     ) -> PlayAlert | None:
        st = t.obj["status"]
        reason = ""
        if st.get("reason") == "Evicted":
            reason = f"evicted: {st.get('message', '')}".strip(": ")
        elif st.get("phase") == "Failed":
            reason = f"failed ({st.get('reason') or 'phase Failed'})"
        for c in st.get("containerStatuses") or []:
            if reason:
                break
            waiting = (c["state"].get("waiting") or {}).get("reason", "")
            now_term = c["state"].get("terminated") or {}
            last_term = c["lastState"].get("terminated") or {}
            if waiting in POD_FAILURES:
                reason = f"container {c['name']} in {waiting} ({c['restartCount']} restarts)"
            elif now_term.get("reason") == "OOMKilled" or (
                    last_term.get("reason") == "OOMKilled" and not c["ready"]):
                reason = f"container {c['name']} OOMKilled"
        if not reason:
            return None
        restarts = sum(c["restartCount"] for c in st.get("containerStatuses") or [])
        return self._alert("A7", t, "pod", ns, name, "critical",
                           f"pod {name}: {reason}"[:300], "agent_failure", state,
                           reason=reason[:200], restarts=restarts)

    def _silent(self, t: Tracked, ns: str, name: str, now: float, state: ClusterState
                ) -> PlayAlert | None:
        st = t.obj["status"]
        if st.get("phase") != "Running":
            return None
        restarts = 0
        for c in st.get("containerStatuses") or []:
            restarts += c["restartCount"]
            term = c["state"].get("terminated") or {}
            code = term.get("exitCode")
            if code not in (None, 0):
                return self._alert("A2", t, "pod", ns, name, "critical",
                                   f"pod {name}: container {c['name']} exited {code} while the "
                                   f"pod still runs", "agent_failure", state,
                                   reason=f"exit {code}", exit_code=code, restarts=restarts)
        for kind in ("Ready", "ContainersReady"):
            cond = _cond(t.obj, kind)
            if cond is not None and cond.get("status") == "False":
                since = parse_time(cond.get("lastTransitionTime")) or now
                if now - since >= self.s.dead_after_s:
                    return self._alert("A2", t, "pod", ns, name, "warning",
                                       f"pod {name}: {kind} false for {int(now - since)} s",
                                       "agent_failure", state, reason=f"{kind}=False",
                                       restarts=restarts)
        if restarts >= self.s.restart_threshold:
            return self._alert("A2", t, "pod", ns, name, "warning",
                               f"pod {name}: {restarts} container restarts", "agent_failure",
                               state, reason="restarts", restarts=restarts)
        return None

    def _limit(self, stage: str) -> tuple[str, float]:
        limits = self.s.stage_timeouts_s
        stage = stage.lower()
        for key, seconds in limits.items():
            if key != "default" and key in stage:
                return key, float(seconds)
        return stage or "default", float(limits.get("default", 3600.0))

    def _pod_timeout(self, t: Tracked, ns: str, name: str, now: float) -> PlayAlert | None:
        labels = t.obj["metadata"].get("labels") or {}
        stage = next((labels[k] for k in self.s.stage_labels if labels.get(k)), "")
        started = parse_time(t.obj["status"].get("startTime"))
        if not stage or t.obj["status"].get("phase") != "Running" or started is None:
            return None
        stage, limit = self._limit(stage)
        if now - started <= limit:
            return None
        return self._alert("A8", t, "pod", ns, name, "warning",
                           f"{stage} step in pod {name} running {int((now - started) / 60)} min "
                           f"(limit {int(limit / 60)})", "stuck", stage=stage)

    def _node_timeouts(self, t: Tracked, ns: str, name: str, now: float,
                       state: ClusterState) -> list[PlayAlert]:
        if t.owner is None:
            return []
        out = []
        for node in (t.obj["status"].get("nodes") or {}).values():
            if node.get("phase") != "Running" or node.get("type", "Pod") != "Pod":
                continue
            label = str(node.get("templateName") or node.get("displayName") or "")
            started = parse_time(node.get("startedAt"))
            if started is None or not label:
                continue
            stage, limit = self._limit(label)
            if now - started <= limit:
                continue
            pod = state.pods.get((ns, str(node.get("podName") or "")))
            owner_ = t.owner
            if pod is not None and pod.owner is not None and pod.owner.agent:
                owner_ = Owner(t.owner.play_id, pod.owner.agent, t.owner.task_id)
            step = str(node.get("displayName") or label)[:80]
            alert = self._alert("A8", Tracked(t.obj, owner_), "workflow", ns, name, "warning",
                                f"{stage} step {step} of workflow {name} running "
                                f"{int((now - started) / 60)} min (limit {int(limit / 60)})",
                                "stuck", stage=stage, step=step)
            out.append(dataclasses.replace(alert, target=f"{alert.target}/{step}"))
        return out

    def _stuck_run(self, t: Tracked, ns: str, name: str, now: float) -> PlayAlert | None:
        phase = t.obj["status"].get("phase", "") or "Pending"
        if t.owner is None or phase in TERMINAL_PHASES or is_remediation(t.obj):
            return None
        if now - t.phase_since < self.s.stuck_after_s:
            return None
        repo = t.obj["spec"].get("repositoryUrl", "")
        return self._alert("A9", t, "coderun", ns, name, "warning",
                           f"CodeRun {name} {phase} for {int((now - t.phase_since) / 60)} min "
                           "without a phase change", "stuck", phase=phase,
                           repository=_repo(repo))

    def _stale(self, state: ClusterState, now: float) -> list[PlayAlert]:
        plays: dict[str, list[Tracked]] = {}
        for t in state.pods.values():
            if t.owner and t.obj["status"].get("phase") == "Running":
                plays.setdefault(t.owner.play_id, []).append(t)
        for t in state.coderuns.values():
            if (t.owner and t.obj["status"].get("phase", "") not in TERMINAL_PHASES
                    and not is_remediation(t.obj)):
                plays.setdefault(t.owner.play_id, []).append(t)
        out = []
        for play_id, work in plays.items():
            began = min((parse_time(w.obj["status"].get("startTime")) or parse_time(
                w.obj["metadata"].get("creationTimestamp")) or now) for w in work)
            last = max(self.progress_last(play_id) or 0.0, began, state.started_at)
            if now - last <= self.s.stale_progress_s:
                continue
            # Nothing of the play moved, so each of its running agents is silent: one alert
            # an agent, so each restart names the agent it restarts (a play-wide alert would
            # run the restart action with no agent, which can only fail and escalate).
            agents = sorted({w.owner.agent for w in work if w.owner and w.owner.agent}) or [""]
            ns = str(work[0].obj["metadata"].get("namespace", ""))
            for agent in agents:
                out.append(PlayAlert(
                    code="A3", play_id=play_id, agent=agent, target=f"play/{ns}/{play_id}",
                    severity="warning", issue_type="stuck",
                    summary=f"play {play_id}: no commit, comment or log line for "
                            f"{int((now - last) / 60)} min"
                            + (f" (agent {agent} running)" if len(agents) > 1 else ""),
                    link="",
                    detail={"namespace": ns, "kind": "play", "name": play_id,
                            "last_progress": last}))
        return out


def _id(alert: PlayAlert) -> AlertId:
    return alert.code, alert.play_id, alert.agent, alert.target


def _repo(url: str) -> str:
    """``https://github.com/owner/name(.git)`` → ``owner/name``."""
    parts = url.rstrip("/").removesuffix(".git").split("/")
    return "/".join(parts[-2:]) if len(parts) >= 2 and "github" in url else ""
