"""The Kubernetes API as the watcher uses it: list, watch, pod logs, reviews.

Built on kr8s (``kr8s.asyncio.api``): asyncio-native on httpx (the HTTP stack healer already
uses), and it resolves the cluster the standard way — ``kube.kubeconfig``, else
``$KUBECONFIG`` / ``~/.kube/config`` with ``kube.context`` (tokens, client certificates, exec
plugins, ``insecure-skip-tls-verify``, ``tls-server-name``, proxies), else the in-cluster
service account (``/var/run/secrets/kubernetes.io/serviceaccount``, re-read on a 401 so
rotated tokens keep working). Its generic ``call_api`` leaves the protocol to healer, which
matters for watches: kr8s's own ``watch`` resumes a 410 Gone at the same stale
resourceVersion and asks for no bookmarks, so ``healer.play.kube.reflector`` speaks list +
watch itself over this client. The other maintained clients were heavier for this job:
``kubernetes`` is synchronous (a thread per watch) with megabytes of generated models,
``kubernetes-asyncio`` brings aiohttp as a second HTTP stack, and lightkube's typed models
hide the request parameters the watcher must set.

Errors become ``KubeError`` (``status``, ``reason``), a 410 ``KubeGoneError``; tokens never
appear in them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.errors import KubeError, KubeGoneError

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
MAX_LINE_BYTES = 8 << 20  # one watch event (etcd caps an object at 1.5 MB)


@dataclass(frozen=True)
class Kind:
    """One resource type: ``group`` empty for the core API."""

    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


PODS = Kind("", "v1", "pods")
EVENTS = Kind("", "v1", "events")
CODERUNS = Kind("agents.platform", "v1", "coderuns")
WORKFLOWS = Kind("argoproj.io", "v1alpha1", "workflows")


def in_cluster() -> bool:
    """Running in a pod with a mounted service account token."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and Path(
        SERVICE_ACCOUNT, "token").is_file()


def configured(settings: Any) -> bool:
    """Whether a cluster can be found (a kubeconfig file or the in-cluster account)."""
    paths = [settings.kubeconfig] if settings.kubeconfig else (
        os.environ.get("KUBECONFIG", "").split(os.pathsep) if os.environ.get("KUBECONFIG")
        else [str(Path("~/.kube/config").expanduser())])
    return any(p and Path(p).expanduser().is_file() for p in paths) or in_cluster()


def _error(exc: BaseException, what: str) -> KubeError:
    """A kr8s / httpx error as a ``KubeError`` (no request headers, so no token)."""
    import httpx
    from kr8s import ServerError

    if isinstance(exc, ServerError):
        resp = exc.response
        code = resp.status_code if resp is not None else 0
        body = exc.status if isinstance(exc.status, dict) else {}
        reason = str(body.get("reason") or "")
        message = str(body.get("message") or exc)[:300]
        cls = KubeGoneError if code == 410 else KubeError
        return cls(f"{what}: {code} {reason or 'error'}: {message}", status=code, reason=reason)
    if isinstance(exc, httpx.HTTPError | OSError):
        return KubeError(f"{what}: {type(exc).__name__}: {exc}"[:400],
                         reason=type(exc).__name__)
    return KubeError(f"{what}: {type(exc).__name__}: {exc}"[:400], reason=type(exc).__name__)


class KubeClient:
    """One connection to one cluster, as kr8s resolved it."""

    def __init__(self, api: Any, namespace: str):
        self.api = api
        self.namespace = namespace

    @classmethod
    async def connect(cls, settings: Any) -> KubeClient:
        """Resolve the cluster from ``settings`` (a ``KubeSettings``) and check it answers
        (``GET /version``)."""
        import kr8s.asyncio

        kwargs: dict[str, Any] = {}
        if settings.kubeconfig:
            path = Path(settings.kubeconfig).expanduser()
            if not path.is_file():
                raise KubeError(f"kubeconfig {path} does not exist", reason="NoKubeconfig")
            kwargs["kubeconfig"] = str(path)
        if settings.context:
            kwargs["context"] = settings.context
        try:
            api = await kr8s.asyncio.api(namespace=settings.namespace, **kwargs)
        except ValueError as exc:  # kr8s: no credentials, no such context, bad file
            raise KubeError(f"no usable Kubernetes configuration: {exc}",
                            reason="NoConfiguration") from None
        except Exception as exc:
            raise _error(exc, "connecting to the Kubernetes API") from None
        api.timeout = 30.0  # plain requests; watches and logs set their own
        return cls(api, settings.namespace)

    @property
    def server(self) -> str:
        return str(self.api.auth.server)

    @property
    def context(self) -> str:
        return str(self.api.auth.active_context or ("in-cluster" if in_cluster() else ""))

    def user(self) -> str:
        """Who the configuration says we are, without asking the server: the service
        account in the token, else the kubeconfig user."""
        token = self.api.auth.token or ""
        parts = token.split(".")
        if len(parts) == 3:
            try:
                pad = "=" * (-len(parts[1]) % 4)
                claims = json.loads(base64.urlsafe_b64decode(parts[1] + pad))
                if claims.get("sub"):
                    return str(claims["sub"])
            except ValueError:
                pass
        ctx = getattr(self.api.auth, "_context", {}) or {}
        return str(ctx.get("user") or "")

    # -- requests -----------------------------------------------------------------------------

    def _where(self, kind: Kind, namespace: str | None) -> dict[str, Any]:
        return {"version": kind.api_version, "base": "/api" if not kind.group else "/apis",
                "namespace": namespace}

    async def get_json(self, path: str) -> Any:
        """GET an absolute API path (``/version``, ``/apis``)."""
        try:
            async with self.api.call_api("GET", version="", base=path.rstrip("/"),
                                         url="") as r:
                return r.json()
        except Exception as exc:
            raise _error(exc, f"GET {path}") from None

    async def list(self, kind: Kind, *, namespace: str | None = None, selector: str = "",
                   limit: int = 500, cont: str = "") -> dict[str, Any]:
        """One page of a list (``metadata.continue`` names the next)."""
        params: dict[str, Any] = {"limit": limit}
        if selector:
            params["labelSelector"] = selector
        if cont:
            params["continue"] = cont
        try:
            async with self.api.call_api("GET", url=kind.plural, params=params,
                                         **self._where(kind, namespace)) as r:
                data: dict[str, Any] = r.json()
                return data
        except Exception as exc:
            raise _error(exc, f"list {kind.plural}") from None

    @contextlib.asynccontextmanager
    async def watch(self, kind: Kind, *, resource_version: str, namespace: str | None = None,
                    selector: str = "", timeout_s: int = 300
                    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """A watch from ``resource_version`` with bookmarks: yields the decoded events."""
        import httpx

        params: dict[str, Any] = {"watch": "true", "resourceVersion": resource_version,
                                  "allowWatchBookmarks": "true", "timeoutSeconds": timeout_s}
        if selector:
            params["labelSelector"] = selector
        # The server ends the watch after timeout_s; a read timeout a little longer notices a
        # connection that died without a FIN (bookmarks keep a live one talking).
        timeout = httpx.Timeout(10.0, read=timeout_s + 30.0)
        try:
            async with self.api.call_api("GET", url=kind.plural, params=params, stream=True,
                                         timeout=timeout, **self._where(kind, namespace)) as r:
                yield _events(r, kind)
        except KubeError:
            raise
        except Exception as exc:
            raise _error(exc, f"watch {kind.plural}") from None

    @contextlib.asynccontextmanager
    async def logs(self, namespace: str, pod: str, container: str, *, since_time: str = "",
                   follow: bool = True) -> AsyncIterator[AsyncIterator[bytes]]:
        """A pod container's log (``follow``, ``timestamps``, from ``since_time``), as raw
        lines."""
        import httpx

        params: dict[str, Any] = {"container": container, "timestamps": "true",
                                  "follow": "true" if follow else "false"}
        if since_time:
            params["sinceTime"] = since_time
        timeout = httpx.Timeout(10.0, read=None)  # a quiet agent may log nothing for an hour
        try:
            async with self.api.call_api("GET", url=f"pods/{pod}/log", params=params,
                                         stream=True, timeout=timeout,
                                         **self._where(PODS, namespace)) as r:
                yield _lines(r)
        except KubeError:
            raise
        except Exception as exc:
            raise _error(exc, f"logs of {namespace}/{pod}/{container}") from None

    async def create(self, group_version: str, plural: str, body: dict[str, Any]
                     ) -> dict[str, Any]:
        """POST a cluster-scoped object (the reviews)."""
        try:
            async with self.api.call_api("POST", version=group_version, base="/apis",
                                         url=plural, content=json.dumps(body)) as r:
                data: dict[str, Any] = r.json()
                return data
        except Exception as exc:
            raise _error(exc, f"create {plural}") from None

    async def close(self) -> None:
        session = getattr(self.api, "_session", None)
        if session is not None:
            with contextlib.suppress(Exception):
                await session.aclose()


async def _lines(resp: Any) -> AsyncIterator[bytes]:
    """The response body split into lines, none longer than ``MAX_LINE_BYTES`` (the rest of
    an overlong line is dropped, the stream goes on)."""
    buf = b""
    skipping = False
    async for chunk in resp.aiter_bytes():
        buf += chunk
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                break
            line, buf = buf[:nl], buf[nl + 1:]
            if skipping:
                skipping = False
                continue
            yield line
        if len(buf) > MAX_LINE_BYTES:
            yield buf[:MAX_LINE_BYTES]
            buf, skipping = b"", True
    if buf and not skipping:
        yield buf


async def _events(resp: Any, kind: Kind) -> AsyncIterator[dict[str, Any]]:
    async for line in _lines(resp):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            raise KubeError(f"watch {kind.plural}: undecodable event", reason="BadEvent") from None
        if event.get("type") == "ERROR":
            st = event.get("object") or {}
            code = int(st.get("code") or 0)
            cls = KubeGoneError if code == 410 else KubeError
            raise cls(f"watch {kind.plural}: {code} {st.get('reason', '')}: "
                      f"{str(st.get('message', ''))[:300]}", status=code,
                      reason=str(st.get("reason", "")))
        yield event
