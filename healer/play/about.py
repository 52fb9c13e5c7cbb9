"""What a play incident is about (``healer.core.about``): its code and the object it concerns.

==============  =========================================================================
``code``        the alert or failure code: A1–A12 (the detection catalog and the watchers),
                T/X/C/S/K (runtime failures, ``healer.agents.failures``)
``play_id``     the play (its session, when it has one)
``agent``       the agent it is about, if one
``object_kind`` what the object is: pod, coderun, workflow, pr (from the watcher's target),
                else agent, account or play
``object``      its name (``play-task-4-abc-rex``, ``owner/repo#12``)
``namespace``   a cluster object's namespace
==============  =========================================================================

Targets come from the cluster and GitHub: they are scrubbed before they are kept.
"""

from __future__ import annotations

from typing import Any

from healer.core.publish.sanitizer import scrub

CLUSTER_KINDS = ("pod", "coderun", "workflow")


def play_about(code: str, play_id: str = "", agent: str = "", target: str = "",
               **extra: Any) -> dict[str, Any]:
    """The ``about`` block of a play incident; ``target`` is a watcher's
    ``<kind>/<namespace>/<name>`` or ``pr/<owner>/<repo>#<n>``; ``extra``: more short fields
    (``provider``, ``account``)."""
    about: dict[str, Any] = {"code": code, "play_id": play_id, "agent": agent}
    kind, _, rest = scrub(target).partition("/")
    if kind in CLUSTER_KINDS and "/" in rest:
        namespace, _, name = rest.partition("/")
        about.update(object_kind=kind, object=name, namespace=namespace)
    elif kind and rest:
        about.update(object_kind=kind, object=rest)
    elif agent:
        about.update(object_kind="agent", object=agent)
    elif extra.get("account"):
        about.update(object_kind="account", object=extra["account"])
    elif play_id:
        about.update(object_kind="play", object=play_id)
    return {**about, **extra}
