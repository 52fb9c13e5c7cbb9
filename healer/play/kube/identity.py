"""Who healer is in the cluster and what it may do there (``healer doctor``).

Identity: a ``SelfSubjectReview`` (``authentication.k8s.io/v1``, Kubernetes 1.28+); where the
server has none, the service account named in the token, else the kubeconfig user.
Permissions: one ``SelfSubjectAccessReview`` per verb and resource the watcher uses (list and
watch on pods, events, CodeRuns and Workflows; get on ``pods/log``). Nothing secret is
reported: no token, no certificate.
"""

from __future__ import annotations

import asyncio
from typing import Any

from healer.errors import KubeError
from healer.play.kube.client import KubeClient, configured

NEEDED = (("list", "", "pods", ""), ("watch", "", "pods", ""), ("list", "", "events", ""),
          ("watch", "", "events", ""), ("get", "", "pods", "log"),
          ("list", "agents.platform", "coderuns", ""),
          ("watch", "agents.platform", "coderuns", ""),
          ("list", "argoproj.io", "workflows", ""), ("watch", "argoproj.io", "workflows", ""))


async def inspect(kube: Any, *, timeout_s: float = 20.0) -> dict[str, Any]:
    """Connect, say who we are and what we may do; ``reachable`` False with ``error``."""
    try:
        return await asyncio.wait_for(_inspect(kube), timeout=timeout_s)
    except KubeError as exc:
        return {"reachable": False, "error": str(exc)[:400], "namespace": kube.namespace}
    except TimeoutError:
        return {"reachable": False, "error": f"no answer within {timeout_s:.0f} s",
                "namespace": kube.namespace}


async def _inspect(kube: Any) -> dict[str, Any]:
    client = await KubeClient.connect(kube)
    try:
        version = await client.get_json("/version")
        identity, how = client.user(), "kubeconfig user" if not client.user().startswith(
            "system:serviceaccount:") else "token"
        try:
            review = await client.create("authentication.k8s.io/v1", "selfsubjectreviews", {
                "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
            user = (review.get("status") or {}).get("userInfo") or {}
            if user.get("username"):
                identity, how = str(user["username"]), "SelfSubjectReview"
        except KubeError:
            pass  # an older server: the configuration's own answer stands
        permissions: dict[str, bool] = {}
        for verb, group, resource, sub in NEEDED:
            attrs = {"namespace": kube.namespace, "verb": verb, "group": group,
                     "resource": resource}
            if sub:
                attrs["subresource"] = sub
            review = await client.create("authorization.k8s.io/v1", "selfsubjectaccessreviews", {
                "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attrs}})
            label = f"{verb} {resource}/{sub}" if sub else f"{verb} {resource}"
            permissions[label] = bool((review.get("status") or {}).get("allowed"))
        return {"reachable": True, "server": client.server, "context": client.context,
                "version": str(version.get("gitVersion", "")), "identity": identity,
                "identity_from": how, "namespace": kube.namespace, "permissions": permissions}
    finally:
        await client.close()


def report(settings: Any) -> dict[str, Any]:
    """The doctor's view: the inspection when ``kube.enabled``, else whether a cluster is
    configured at all (without dialling it)."""
    kube = settings.kube
    if not kube.enabled:
        return {"enabled": False, "configured": configured(kube)}
    return {"enabled": True, **asyncio.run(inspect(kube))}

