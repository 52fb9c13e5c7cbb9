"""The fake API server's HTTP side: discovery, list, watch, get, pod logs, reviews, tables.

Speaks what kubectl and client libraries send: ``Accept: application/json;as=Table;v=v1;
g=meta.k8s.io`` gets a ``meta.k8s.io/v1`` Table (in lists and in watch events), anything else
plain JSON; aggregated discovery is not offered (clients fall back to the legacy documents by
the response's content type).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from healer.testing.kube.objects import (
    BY_PLURAL,
    RESOURCES,
    Resource,
    Watch,
    parse_selector,
    rfc3339_nano,
    status,
)

REVIEW_GROUPS = {"authorization.k8s.io": ("selfsubjectaccessreviews", "SelfSubjectAccessReview"),
                 "authentication.k8s.io": ("selfsubjectreviews", "SelfSubjectReview")}


def _json(data: Any, code: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=code)


def _err(code: int, reason: str, message: str) -> JSONResponse:
    return _json(status(code, reason, message), code)


class Handler:
    def __init__(self, fake: Any):  # the FakeKube it serves
        self.fake = fake
        self.objects = fake.objects

    async def __call__(self, request: Request) -> Response:
        self.fake.requests.append(f"{request.method} {request.url.path}?{request.url.query}")
        who = self._user(request)
        if who is None:
            return _err(401, "Unauthorized", "Unauthorized")
        parts = [p for p in request.url.path.split("/") if p]
        if parts == ["version"]:
            return _json({"major": "1", "minor": "31", "gitVersion": "v1.31.0-healer-fake",
                          "platform": "linux/amd64"})
        if parts == ["api"]:
            return _json({"kind": "APIVersions", "versions": ["v1"],
                          "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                          "serverAddress": "127.0.0.1"}]})
        if parts == ["apis"]:
            return _json(self._groups())
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return _err(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            return self._resource_list(group, version)
        if group in REVIEW_GROUPS and request.method == "POST":
            return await self._review(request, group, rest, who)
        ns = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        plural = rest[0]
        res = BY_PLURAL.get(plural)
        if res is None or res.group != group or res.version != version:
            return _err(404, "NotFound", "the server could not find the requested resource")
        if len(rest) == 1:
            q = request.query_params
            if q.get("watch") in ("1", "true"):
                return self._watch(request, res, ns)
            return self._list(request, res, ns)
        name = rest[1]
        if len(rest) == 3 and plural == "pods" and rest[2] == "log":
            return await self._log(request, ns, name)
        obj = self.objects.get(plural, ns, name)
        if obj is None:
            return _err(404, "NotFound", f'{plural} "{name}" not found')
        if _wants_table(request):
            return _json(self._table(res, [obj], str(self.objects.rv)))
        return _json(obj)

    def _user(self, request: Request) -> str | None:
        tokens = self.fake.tokens
        if not tokens:
            return "system:anonymous"
        auth = request.headers.get("authorization", "")
        if auth.startswith("Bearer ") and auth[7:].strip() in tokens:
            return tokens[auth[7:].strip()]
        return None

    # -- discovery ---------------------------------------------------------------------------

    def _groups(self) -> dict[str, Any]:
        groups: dict[str, str] = {}
        for r in RESOURCES:
            if r.group:
                groups[r.group] = r.version
        for g in REVIEW_GROUPS:
            groups[g] = "v1"
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
             "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}}
            for g, v in sorted(groups.items())]}

    def _resource_list(self, group: str, version: str) -> Response:
        items: list[dict[str, Any]] = []
        for r in RESOURCES:
            if (r.group, r.version) == (group, version):
                items.append({"name": r.plural, "singularName": r.singular,
                              "namespaced": r.namespaced, "kind": r.kind, "verbs": list(r.verbs),
                              "shortNames": list(r.short)})
                if r.plural == "pods":
                    items.append({"name": "pods/log", "singularName": "", "namespaced": True,
                                  "kind": "Pod", "verbs": ["get"]})
        if group in REVIEW_GROUPS and version == "v1":
            plural, kind = REVIEW_GROUPS[group]
            items.append({"name": plural, "singularName": "", "namespaced": False,
                          "kind": kind, "verbs": ["create"]})
        if not items:
            return _err(404, "NotFound", "the server could not find the requested resource")
        gv = f"{group}/{version}" if group else version
        return _json({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                      "resources": items})

    # -- list and watch ----------------------------------------------------------------------

    def _list(self, request: Request, res: Resource, ns: str) -> Response:
        q = request.query_params
        try:
            rv, items = self.objects.select(res.plural, ns, q.get("labelSelector", ""))
        except ValueError as exc:
            return _err(400, "BadRequest", str(exc))
        items = [o for o in items if _fields(q.get("fieldSelector", ""), o)]
        offset = 0
        if q.get("continue"):
            try:
                token = json.loads(base64.urlsafe_b64decode(q["continue"]))
                rv, offset = int(token["rv"]), int(token["start"])
            except (ValueError, KeyError, TypeError):
                return _err(400, "BadRequest", "invalid continue token")
            if rv < self.objects.oldest_rv:
                return _err(410, "Expired", "The provided continue parameter is too old to "
                            "display a consistent list result.")
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        limit = int(q.get("limit") or 0)
        page = items[offset:]
        if limit and len(page) > limit:
            page = page[:limit]
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(
                {"rv": rv, "start": offset + limit}).encode()).decode()
            meta["remainingItemCount"] = len(items) - offset - limit
        self.fake.lists.append(res.plural)
        if _wants_table(request):
            table = self._table(res, page, str(rv))
            table["metadata"].update({k: v for k, v in meta.items() if k != "resourceVersion"})
            return _json(table)
        return _json({"kind": f"{res.kind}List", "apiVersion": res.group_version,
                      "metadata": meta, "items": page})

    def _watch(self, request: Request, res: Resource, ns: str) -> Response:
        q = request.query_params
        try:
            selector = parse_selector(q.get("labelSelector", ""))
        except ValueError as exc:
            return _err(400, "BadRequest", str(exc))
        table = _wants_table(request)
        bookmarks = q.get("allowWatchBookmarks") in ("1", "true")
        timeout = float(q.get("timeoutSeconds") or 1800)
        watch = Watch(res.plural, ns, selector, asyncio.Queue(), asyncio.get_running_loop())
        rv_text = q.get("resourceVersion", "")
        with self.objects._lock:
            self.objects.watches.append(watch)
            if rv_text in ("", "0"):
                _, items = self.objects.select(res.plural, ns, q.get("labelSelector", ""))
                backlog: list[dict[str, Any]] | None = [{"type": "ADDED", "object": o}
                                                        for o in items]
            else:
                backlog = self.objects.since(int(rv_text), watch)
        self.fake.watches_opened.append(res.plural)

        async def events() -> AsyncIterator[bytes]:
            try:
                if backlog is None:
                    yield _line({"type": "ERROR", "object": status(
                        410, "Expired", f"too old resource version: {rv_text} "
                        f"({self.objects.oldest_rv})")})
                    return
                for ev in backlog:
                    yield self._event(res, ev, table)
                deadline = time.monotonic() + timeout
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    try:
                        item = await asyncio.wait_for(
                            watch.queue.get(), timeout=min(left, self.fake.bookmark_every_s))
                    except TimeoutError:
                        item = "BOOKMARK"
                    if item is None:
                        return
                    if item == "BOOKMARK":
                        if bookmarks:
                            yield _line({"type": "BOOKMARK", "object": {
                                "kind": res.kind, "apiVersion": res.group_version,
                                "metadata": {"resourceVersion": str(self.objects.rv)}}})
                        continue
                    yield self._event(res, item, table)
            finally:
                with self.objects._lock, contextlib.suppress(ValueError):
                    self.objects.watches.remove(watch)

        return StreamingResponse(events(), media_type="application/json")

    def _event(self, res: Resource, ev: dict[str, Any], table: bool) -> bytes:
        if table and ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
            obj = ev["object"]
            ev = {"type": ev["type"], "object": self._table(
                res, [obj], obj["metadata"]["resourceVersion"])}
        return _line(ev)

    def _table(self, res: Resource, items: list[dict[str, Any]], rv: str) -> dict[str, Any]:
        cols = [("Name", "string", "name")]
        if res.plural == "pods":
            cols += [("Ready", "string", ""), ("Status", "string", ""),
                     ("Restarts", "string", "")]
        elif res.plural in ("coderuns", "workflows"):
            cols += [("Phase", "string", "")]
        cols += [("Age", "string", "")]
        rows = []
        for obj in items:
            md = obj["metadata"]
            cells: list[Any] = [md["name"]]
            if res.plural == "pods":
                cells += _pod_cells(obj)
            elif res.plural in ("coderuns", "workflows"):
                cells.append((obj.get("status") or {}).get("phase", ""))
            cells.append(_age(md.get("creationTimestamp", ""), self.objects.clock()))
            rows.append({"cells": cells, "object": {
                "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": md}})
        return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": rv},
                "columnDefinitions": [{"name": n, "type": t, "format": f, "description": n,
                                       "priority": 0} for n, t, f in cols],
                "rows": rows}

    # -- pod logs ------------------------------------------------------------------------------

    async def _log(self, request: Request, ns: str, name: str) -> Response:
        pod = self.objects.get("pods", ns, name)
        if pod is None:
            return _err(404, "NotFound", f'pods "{name}" not found')
        q = request.query_params
        names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        container = q.get("container") or (names[0] if len(names) == 1 else "")
        if not container:
            return _err(400, "BadRequest", f"a container name must be specified for pod "
                        f"{name}, choose one of: {names}")
        if container not in names:
            return _err(400, "BadRequest", f"container {container} is not valid for pod {name}")
        follow = q.get("follow") in ("1", "true")
        stamps = q.get("timestamps") in ("1", "true")
        since = 0.0
        if q.get("sinceTime"):
            from healer.play.kube.objects import parse_time

            since = parse_time(q["sinceTime"]) or 0.0
        elif q.get("sinceSeconds"):
            since = self.objects.clock() - float(q["sinceSeconds"])
        queue: asyncio.Queue[Any] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        with self.objects._lock:
            stream = self.objects.stream(ns, name, container)
            lines = list(stream.previous if q.get("previous") in ("1", "true") else
                         stream.lines)
            phase = (pod.get("status") or {}).get("phase", "")
            if follow and phase not in ("Succeeded", "Failed"):
                stream.followers.append((queue, loop))
            else:
                follow = False
        if q.get("tailLines"):
            lines = lines[-int(q["tailLines"]):]

        def fmt(ts: float, line: str) -> bytes:
            return (f"{rfc3339_nano(ts)} {line}\n" if stamps else f"{line}\n").encode()

        async def body() -> AsyncIterator[bytes]:
            for ts, line in lines:
                if ts >= since:
                    yield fmt(ts, line)
            while follow:
                item = await queue.get()
                if item is None:
                    return
                yield fmt(*item)

        return StreamingResponse(body(), media_type="text/plain")

    # -- reviews ---------------------------------------------------------------------------------

    async def _review(self, request: Request, group: str, rest: list[str], who: str) -> Response:
        plural, kind = REVIEW_GROUPS[group]
        if rest != [plural]:
            return _err(404, "NotFound", "the server could not find the requested resource")
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _err(400, "BadRequest", "invalid JSON")
        if plural == "selfsubjectreviews":
            return _json({**body, "kind": kind, "apiVersion": f"{group}/v1",
                          "status": {"userInfo": {"username": who, "uid": "fake-uid",
                                                  "groups": ["system:authenticated"]}}}, 201)
        attrs = (body.get("spec") or {}).get("resourceAttributes") or {}
        resource = attrs.get("resource", "")
        if attrs.get("subresource"):
            resource += "/" + attrs["subresource"]
        denied = (attrs.get("verb", ""), attrs.get("group", ""), resource) in self.objects.denied
        reason = "" if denied else "allowed by the fake API server"
        return _json({**body, "kind": kind, "apiVersion": f"{group}/v1",
                      "status": {"allowed": not denied, "reason": reason}}, 201)


def _wants_table(request: Request) -> bool:
    return "as=Table" in request.headers.get("accept", "")


def _line(data: Any) -> bytes:
    return (json.dumps(data, separators=(",", ":")) + "\n").encode()


def _fields(selector: str, obj: dict[str, Any]) -> bool:
    for part in [p for p in selector.split(",") if p]:
        key, _, value = part.partition("=")
        key = key.rstrip("!=")
        have = {"metadata.name": obj["metadata"]["name"],
                "metadata.namespace": obj["metadata"].get("namespace", "")}.get(key)
        if ("!=" in part) == (have == value.lstrip("=")):
            return False
    return True


def _pod_cells(pod: dict[str, Any]) -> list[Any]:
    st = pod.get("status") or {}
    cs = st.get("containerStatuses") or []
    ready = sum(1 for c in cs if c.get("ready"))
    total = len((pod.get("spec") or {}).get("containers") or []) or len(cs)
    reason = st.get("reason") or st.get("phase", "Pending")
    for c in cs:
        state = c.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state and state["terminated"].get("reason"):
            reason = state["terminated"]["reason"]
    restarts = sum(int(c.get("restartCount", 0)) for c in cs)
    return [f"{ready}/{total}", reason, restarts]


def _age(created: str, now: float) -> str:
    from healer.play.kube.objects import parse_time

    at = parse_time(created)
    if at is None:
        return "<unknown>"
    s = max(0, int(now - at))
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"
