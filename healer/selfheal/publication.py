"""Publication a person controls: the hold before a sensitive fix's PR, and the PR after a yes.

The one code attempt flow (``healer.code.attempt``, for every source) calls ``check`` in its
publish step, after the sanitiser and the reviewable check, right before the forge.
A diff ``healer.core.publish.policy`` holds is not published::

    publish step ─► check(diff) ─► nothing held ─► forge.open_pr → pr_open
                        └─► held ─► hold(): the attempt ``awaiting_approval`` with the PR it
                                    would open (``held_pr``) and the reasons (``held``), the
                                    diff kept in <state>/selfheal/held/<attempt>.diff, the
                                    clone kept (the reaper skips it); the incident
                                    ``fixed`` with approvals.publish waiting
    healer approve ─► publish_held(): the clone's git dir still as healer sealed it? the
                      branch in the clone still at the held commit? the sanitiser again, then
                      the PR from the clone — its body says why it was held and who
                      approved — and the attempt ``pr_open``
    healer deny ────► deny_held(): the attempt ``failed`` (a person's no: no escalation, no
                      breaker), the clone left for the reaper

The forge is asked only in ``publish_held``: a held fix never reaches it before a yes.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from healer.core import approval
from healer.core.files import atomic_write_text
from healer.core.git import git
from healer.core.incidents import Ledger
from healer.core.publish import policy
from healer.core.publish.forge import Forge, PullRequest, open_forge
from healer.core.publish.sanitizer import Sanitizer
from healer.core.store import Store
from healer.errors import UsageError
from healer.selfheal import attempts as st
from healer.selfheal import gitdir

HELD_DIR = ("selfheal", "held")


def config_dirs(settings: Any, repo: Path) -> list[str]:
    """healer's configuration inside the repository besides the fixed names: the living
    context folder (``context.dir``) when it lies there."""
    context = Path(settings.context.dir).expanduser()
    folder = context if context.is_absolute() else repo / context
    try:
        return [str(folder.resolve().relative_to(repo.resolve()))]
    except (ValueError, OSError):
        return []


def check(settings: Any, repo: Path, diff: str) -> policy.Hold:
    """What in ``diff`` needs a person before publication (``healer.core.publish.policy``)."""
    return policy.classify(diff, config_dirs=config_dirs(settings, repo))


def held_fields(settings: Any, attempt_id: str, hold: policy.Hold, pr: PullRequest
                ) -> dict[str, Any]:
    """What the attempt keeps while it waits: the reasons, the PR it would open, the diff."""
    folder = Path(settings.state_path).joinpath(*HELD_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    diff_file = folder / f"{attempt_id}.diff"
    atomic_write_text(diff_file, pr.diff)
    return {"held": {**hold.as_dict(), "diff_file": str(diff_file)},
            "held_pr": {"title": pr.title, "body": pr.body, "head": pr.head, "base": pr.base,
                        "head_sha": pr.head_sha, "base_sha": pr.base_sha,
                        "labels": list(pr.labels), "meta": dict(pr.meta)},
            "reason": "held for a person's approval before publication: "
                      + "; ".join(hold.reasons()[:5])}


def _held(store: Store, attempt_id: str) -> tuple[st.Attempts, dict[str, Any]]:
    attempts = st.Attempts(store)
    att = attempts.require(attempt_id)
    if att.get("status") != st.AWAITING_APPROVAL or not isinstance(att.get("held_pr"), dict):
        raise UsageError(f"attempt {attempt_id} holds no fix waiting for publication "
                         f"(status {att.get('status')})")
    return attempts, att


def _branch_at(clone: Path, branch: str) -> str:
    res = git(clone, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}",
              check=False, git_dir=clone / gitdir.GIT_NAME)
    return res.stdout.strip() if res.ok else ""


def publish_held(settings: Any, store: Store, attempt_id: str, verdict: approval.Verdict, *,
                 forge: Forge | None = None, clock: Any = time.time) -> dict[str, Any]:
    """Open the PR of a held fix a person approved; return the attempt (``pr_open``).

    Refuses (``UsageError``) when the clone is gone or its git dir is no longer as healer
    sealed it (quarantined then), or when the branch no longer points at the commit that was
    held: what was approved is exactly what is published."""
    attempts, att = _held(store, attempt_id)
    pr = att["held_pr"]
    repo = Path(att.get("repo") or settings.selfheal.repo or ".")
    clone = Path(att.get("worktree") or "")
    if not att.get("worktree") or not (clone / gitdir.GIT_NAME).is_dir():
        raise UsageError(f"the clone of attempt {attempt_id} is gone: nothing was published")
    changes = gitdir.check_recorded(att.get("gitdir_seal")) if att.get("gitdir_seal") else [
        "the clone has no seal on record"]
    if changes:
        raise UsageError(f"the clone of attempt {attempt_id} was tampered with since it was "
                         f"held ({'; '.join(changes)[:300]}): nothing was published")
    at = _branch_at(clone, pr["head"])
    if at != pr["head_sha"]:
        raise UsageError(f"branch {pr['head']} is {'at ' + at[:12] if at else 'gone'}, not at "
                         f"the held commit {pr['head_sha'][:12]}: nothing was published")
    diff = Path(att["held"]["diff_file"]).read_text(encoding="utf-8")
    sanitizer = Sanitizer(root=repo, allowed_hosts=settings.selfheal.allowed_hosts)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(verdict.at))
    body = pr["body"].rstrip("\n") + "\n" + policy.pr_section(
        list(att["held"].get("reasons") or []), by=sanitizer.scrub(verdict.by), via=verdict.via,
        at=when, comment=sanitizer.scrub(verdict.comment))
    own = (pr["head"], *(str(v) for v in pr["meta"].values()))
    for what, text in (("PR title", pr["title"]), ("PR body", body), ("diff", diff)):
        sanitizer.ensure_publishable(text, what, own=own)
    forge = forge or open_forge(settings, repo, sanitizer)
    ref = forge.open_pr(PullRequest(
        title=pr["title"], body=body, head=pr["head"], base=pr["base"],
        head_sha=pr["head_sha"], base_sha=pr["base_sha"], diff=diff,
        labels=tuple(pr["labels"]), meta=dict(pr["meta"]), source=str(clone)))
    approved = {"by": verdict.by[:approval.MAX_BY], "via": verdict.via, "at": verdict.at}
    final = attempts.transition(attempt_id, st.PR_OPEN, expect=st.AWAITING_APPROVAL,
                                pr_number=ref.number, pr_url=ref.url, approved_by=approved)
    if att.get("incident"):  # a living-context attempt: its incident's fix gains the PR
        ledger = Ledger(store, clock=clock)
        iid = str(att.get("incident_id") or "")
        inc = ledger.get(iid) or {}
        fix = {**(inc.get("fix") or {}), "pr_url": ref.url, "pr_number": ref.number,
               "held": False, "approved_by": approved}
        ledger.update(iid, "pr_opened", fix=fix, links={"pr_url": ref.url})
    return final


def deny_held(store: Store, attempt_id: str, verdict: approval.Verdict) -> dict[str, Any]:
    """A person said no to publishing: the attempt fails (no escalation, nothing for the
    breaker); the branch is left for the reaper, the diff file removed."""
    attempts, att = _held(store, attempt_id)
    final = attempts.transition(attempt_id, st.FAILED, expect=st.AWAITING_APPROVAL,
                                reason=f"publication denied by {verdict.by[:approval.MAX_BY]}",
                                denied_by={"by": verdict.by[:approval.MAX_BY],
                                           "via": verdict.via, "at": verdict.at})
    with contextlib.suppress(OSError, KeyError, TypeError):
        Path(att["held"]["diff_file"]).unlink(missing_ok=True)
    return final
