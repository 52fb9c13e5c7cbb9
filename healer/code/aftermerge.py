"""After the merge: a fix that did not hold reopens its incident and gets a draft revert PR.

::

    attempt pr_merged ──► the same fingerprint again ──► within the watch, and running the fix?
      (merged_at)                                             │ no: only counted
                                                              ▼ yes
      ``fix_regressed``: the SAME incident reopens (the intake's ``regression``), the
      recurrence is counted on the attempt (``revert``), which joins ``heal-reverts-due``
                                                              ▼ in the background
      a clone of its own ─► ``git revert`` of the fix's commits on the base branch
        ─► branch ``healer/revert-<attempt_id>`` ─► the forge: its PR if there is one, else a
           DRAFT PR ─► ``revert_proposed`` ─► one escalation that names the revert PR

The rules:

1. **Which fix.** The newest attempt of the fingerprint, when it is ``pr_merged``. Its merge
   time is when healer saw the merge (the ``pr_merged`` step of its history).
2. **The watch** lasts ``context.watch_s`` after the merge (one day by default), for every
   source. A recurrence after it is a new problem: the intake heals it as usual.
3. **The fix's release is seen.** An occurrence runs the fix when its release (the Sentry
   event's ``release``, the deploy marker) was first seen on the incident after the merge; one
   in a release the incident showed before the merge is old code still running and is only
   counted — no revert. An occurrence that carries no release (report_error, Alertmanager,
   Loki, Slack) counts from the merge on, but only for an incident that never carried one:
   where releases are known, an occurrence without one cannot say which code ran.
4. **One revert per attempt.** The first recurrence marks the attempt's revert due (one
   store write); later ones only count. Preparing it is claimed on the attempt (one process
   at a time), and the forge is asked for a PR of the branch first, so a crash between the
   PR and its record never makes a second one. The loop's ``code-aftermerge`` job prepares
   what a crash left due.
5. **A person decides.** The revert PR is a draft and healer never merges it; the fix stays
   merged until someone does. One escalation per attempt (dedup key
   ``code.revert.<attempt_id>``) names the PR; a revert that cannot be prepared (it does not
   apply, the fix's commits are missing, the change is already gone) is escalated with the
   reason and no PR. The revert runs in a clone under ``<state>/worktrees/``, never in the
   operator's checkout; its title, body and diff pass the sanitiser before the forge sees
   them.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.core import incidents as inc
from healer.core.audit import Audit
from healer.core.escalation import Escalation, escalate
from healer.core.git import BRANCH_PREFIX, git
from healer.core.names import safe_name
from healer.core.publish.forge import Forge, PrRef, PullRequest, open_forge
from healer.core.publish.sanitizer import Sanitizer
from healer.core.store import Store
from healer.selfheal import attempts as st
from healer.selfheal import gitdir
from healer.selfheal import worktree as wt

log = logging.getLogger(__name__)

REVERTS_DUE = "heal-reverts-due"  # store set: attempts whose revert is still to prepare
REGRESSION = "regression"  # the intake's action for a recurrence of a watched fix
FIX_REGRESSED = "fix_regressed"  # the reason report_error answers with
DUE, PROPOSED, NOT_POSSIBLE = "due", "proposed", "not_possible"
LABELS = ("self-healing", "automated", "revert")
CLAIM_S = 600.0  # a claim older than this belonged to a process that died
MAX_TRIES = 5  # forge or git failures before the revert is escalated without a PR
MAX_LISTED = 20  # reverted commits named in the PR body


def revert_branch(attempt_id: str) -> str:
    """``healer/revert-<attempt_id>``: under healer's own branch prefix."""
    return f"{BRANCH_PREFIX}revert-{safe_name(attempt_id, 'attempt id')}"


def merged_at(att: Mapping[str, Any]) -> float | None:
    """When healer saw the attempt's PR merged (None: it is not ``pr_merged``)."""
    if att.get("status") != st.PR_MERGED:
        return None
    steps = [h.get("at") for h in att.get("history") or () if h.get("status") == st.PR_MERGED]
    at = steps[-1] if steps else att.get("updated_at")
    return float(at) if isinstance(at, int | float) else None


def runs_fix(release: str, releases: Mapping[str, Any] | None, merged: float) -> bool:
    """Whether an occurrence in ``release`` runs the fix merged at ``merged`` (rule 3).

    ``releases``: the incident's ``about.releases`` before this occurrence is counted
    (release → ``{first, last, count}``)."""
    known = dict(releases or {})
    if not release:
        return not known
    first = (known.get(release) or {}).get("first") if isinstance(known.get(release),
                                                                   Mapping) else None
    return not isinstance(first, int | float) or first >= merged


@dataclass(frozen=True)
class Revert:
    """What ``propose`` did for one attempt.

    ``state``: ``proposed`` (a draft PR, now or before), ``not_possible`` (escalated without
    a PR), ``due`` (a failure; tried again later) or ``skipped`` (not due, or claimed)."""

    attempt_id: str
    state: str
    pr_url: str = ""
    pr_number: int | None = None
    reason: str = ""
    escalation: str = ""


class AfterMerge:
    """The post-fix watch of the ``heal-attempts`` store: recurrences and their reverts."""

    def __init__(self, settings: Any, store: Store, *, clock: Callable[[], float] = time.time,
                 forge: Forge | None = None, metrics: Any = None):
        self.settings = settings
        self.store = store
        self.clock = clock
        self.forge = forge
        self.metrics = metrics
        self.attempts = st.Attempts(store, clock)
        self.audit = Audit(settings.state_path, clock)

    # --- recurrences (cheap: the intakes call these on their hot path) ----------------------

    def watched_fix(self, fingerprint: str, *, at: float | None = None) -> dict[str, Any] | None:
        """The fingerprint's newest attempt, when it is a merged fix still watched."""
        newest = self.attempts.newest_for(fingerprint)
        merged = merged_at(newest) if newest else None
        now = self.clock() if at is None else at
        if newest is None or merged is None or \
                not 0 <= now - merged <= self.settings.context.watch_s:
            return None
        return newest

    def recurrence(self, fingerprint: str, *, release: str = "",
                   releases: Mapping[str, Any] | None = None,
                   at: float | None = None) -> dict[str, Any] | None:
        """An occurrence of ``fingerprint``: if it regresses a watched fix (rules 1–3), note it
        and return the attempt (its ``revert`` says whether a revert is due); else None."""
        now = self.clock() if at is None else at
        att = self.watched_fix(fingerprint, at=now)
        merged = merged_at(att) if att else None
        if att is None or merged is None or not runs_fix(release, releases, merged):
            return None
        return self.note(att["attempt_id"], release=release, at=now)

    def note(self, attempt_id: str, *, release: str = "", at: float | None = None
             ) -> dict[str, Any]:
        """Count one recurrence on the attempt; the first makes its revert due
        (``fix_regressed``)."""
        now = self.clock() if at is None else at
        first: dict[str, bool] = {}

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None:
                return None
            rv = dict(cur.get("revert") or {})
            rv["recurrences"] = int(rv.get("recurrences") or 0) + 1
            rv.setdefault("first_at", now)
            rv["last_at"] = now
            if release:
                rv.setdefault("release", release[:200])
            first["yes"] = not rv.get("state")
            if first["yes"]:
                rv["state"] = DUE
            cur["revert"] = rv
            return cur

        self.store.add_member(REVERTS_DUE, attempt_id)  # before: a crash leaves it findable
        rec = self.store.update(st.ATTEMPTS, attempt_id, fn)
        att = rec.data if rec is not None else {"attempt_id": attempt_id}
        if first.get("yes"):
            self.audit.write(FIX_REGRESSED, str(att.get("incident_id") or ""),
                             attempt_id=attempt_id, release=release[:200],
                             pr_url=str(att.get("pr_url") or ""))
        elif (att.get("revert") or {}).get("state") != DUE:
            self.store.remove_member(REVERTS_DUE, attempt_id)
        return att

    # --- the revert -------------------------------------------------------------------------

    async def propose_due(self) -> list[Revert]:
        """Prepare every revert still due (the loop's ``code-aftermerge`` job)."""
        out = []
        for aid in await asyncio.to_thread(self._due):
            out.append(await self.propose(aid))
        return out

    def _due(self) -> list[str]:
        found = []
        for aid in sorted(self.store.members(REVERTS_DUE)):
            att = self.attempts.get(aid)
            if att is None or (att.get("revert") or {}).get("state") != DUE:
                self.store.remove_member(REVERTS_DUE, aid)
                continue
            found.append(aid)
        return found

    async def propose(self, attempt_id: str) -> Revert:
        """Prepare the draft revert PR of ``attempt_id`` and tell a person, once."""
        att = self._claim(attempt_id)
        if att is None:
            rv = (self.attempts.get(attempt_id) or {}).get("revert") or {}
            return Revert(attempt_id, "skipped", str(rv.get("pr_url") or ""),
                          rv.get("pr_number"), str(rv.get("reason") or ""))
        try:
            ref, reason = await asyncio.to_thread(self._open_revert, att)
        except Exception as exc:  # the forge or git failing: tried again, then escalated
            log.warning("revert of %s not prepared: %s", attempt_id, exc)
            tries = int((att.get("revert") or {}).get("tries") or 0) + 1
            if tries < MAX_TRIES:
                self._record(attempt_id, claim=None, tries=tries,
                             error=f"{type(exc).__name__}: {exc}"[:500])
                return Revert(attempt_id, DUE, reason=str(exc)[:500])
            ref, reason = None, f"the revert could not be prepared ({type(exc).__name__})"
        if ref is not None:
            self._record(attempt_id, state=PROPOSED, claim=None, pr_url=ref.url,
                         pr_number=ref.number, branch=revert_branch(attempt_id),
                         proposed_at=self.clock())
            self.audit.write("revert_proposed", str(att.get("incident_id") or ""),
                             attempt_id=attempt_id, pr_url=ref.url,
                             branch=revert_branch(attempt_id))
        else:
            self._record(attempt_id, state=NOT_POSSIBLE, claim=None, reason=reason)
        self.store.remove_member(REVERTS_DUE, attempt_id)
        seed = await self._tell(self.attempts.require(attempt_id), ref, reason)
        return Revert(attempt_id, PROPOSED if ref else NOT_POSSIBLE, ref.url if ref else "",
                      ref.number if ref else None, reason, seed)

    def _claim(self, attempt_id: str) -> dict[str, Any] | None:
        now = self.clock()
        got: dict[str, bool] = {}

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            rv = dict((cur or {}).get("revert") or {})
            if cur is None or rv.get("state") != DUE or now - float(rv.get("claim") or 0) < \
                    CLAIM_S:
                return None
            rv["claim"] = now
            cur["revert"] = rv
            got["yes"] = True
            return cur

        rec = self.store.update(st.ATTEMPTS, attempt_id, fn)
        return rec.data if rec is not None and got.get("yes") else None

    def _record(self, attempt_id: str, **fields: Any) -> None:
        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None:
                return None
            rv = dict(cur.get("revert") or {})
            rv.update(fields)
            cur["revert"] = {k: v for k, v in rv.items() if v is not None}
            return cur

        self.store.update(st.ATTEMPTS, attempt_id, fn)

    def _repo(self, att: Mapping[str, Any]) -> Path:
        repo = att.get("repo") or self.settings.selfheal.repo or Path.cwd()
        return wt.repo_root(Path(str(repo)).expanduser())

    def _sanitizer(self, repo: Path) -> Sanitizer:
        return Sanitizer(root=repo, allowed_hosts=self.settings.selfheal.allowed_hosts)

    def _open_revert(self, att: dict[str, Any]) -> tuple[PrRef | None, str]:
        """The draft revert PR (found, or made in a clone of its own), or why there is none.
        Blocking: git and the forge."""
        aid = att["attempt_id"]
        branch = revert_branch(aid)
        repo = self._repo(att)
        sanitizer = self._sanitizer(repo)
        forge = self.forge or open_forge(self.settings, repo, sanitizer)
        found = forge.find_pr(branch)
        if found is not None:
            return found, ""
        head, base_sha = str(att.get("head_sha") or ""), str(att.get("base_sha") or "")
        if not head or not base_sha:
            return None, "the fix's attempt does not record its commits (head_sha, base_sha)"
        base = wt.base_branch(repo, str(att.get("base") or ""))
        tip = git(repo, "rev-parse", "--verify", f"{base}^{{commit}}").stdout.strip()
        dest = self.settings.state_path.resolve() / "worktrees" / f"revert-{safe_name(aid)}"
        if dest.is_symlink():
            dest.unlink()
        shutil.rmtree(dest, ignore_errors=True)  # what a crash left: healer's own folder
        wt.clone(repo, dest, tip, branch=branch)
        try:
            return self._commit_and_open(att, forge, sanitizer, dest, base, tip, head,
                                         base_sha)
        finally:
            wt.remove("", dest)

    def _commit_and_open(self, att: dict[str, Any], forge: Forge, sanitizer: Sanitizer,
                         dest: Path, base: str, tip: str, head: str, base_sha: str
                         ) -> tuple[PrRef | None, str]:
        ident = wt.git_identity(dest)

        def g(*args: str, check: bool = True) -> Any:
            return git(dest, *args, check=check, env=ident, git_dir=dest / gitdir.GIT_NAME)

        if not g("cat-file", "-e", f"{head}^{{commit}}", check=False).ok:
            return None, (f"the fix's commits ({head[:12]}) are not in the repository's "
                          f"history; fetch {att.get('branch') or 'its branch'} and revert by hand")
        listed = g("log", "--format=%h %s", f"{base_sha}..{head}").stdout.splitlines()
        done = g("revert", "--no-commit", f"{base_sha}..{head}", check=False)
        if not done.ok:
            g("revert", "--abort", check=False)
            why = (done.stderr.strip().splitlines() or ["conflicts"])[-1]
            return None, sanitizer.scrub(f"the fix does not revert cleanly on {base}: {why}")
        if g("diff", "--cached", "--quiet", check=False).ok:
            return None, f"the fix's change is no longer on {base}: nothing to revert"
        title, body = self._describe(att, sanitizer, listed)
        g("commit", "--quiet", "--no-verify", "-m", title, "-m", body)
        new = g("rev-parse", "HEAD").stdout.strip()
        diff = g("diff", "--no-color", "--no-ext-diff", "--no-textconv", tip, new).stdout
        pr = PullRequest(title=title, body=body, head=revert_branch(att["attempt_id"]),
                         base=base, head_sha=new, base_sha=tip, diff=diff, labels=LABELS,
                         meta={"attempt_id": att["attempt_id"],
                               "fingerprint": att["fingerprint"],
                               "reverts_pr": str(att.get("pr_url") or "")},
                         source=str(dest), draft=True)
        return forge.open_pr(pr), ""

    def _describe(self, att: dict[str, Any], sanitizer: Sanitizer, commits: list[str]
                  ) -> tuple[str, str]:
        """The revert PR's title and body (scrubbed): why, the original PR, what it undoes."""
        rv = att.get("revert") or {}
        fp = str(att["fingerprint"])
        n = int(rv.get("recurrences") or 1)
        after = f"release `{rv['release']}`" if rv.get("release") else "the merge"
        what = f"{att.get('error_type') or 'error'} in {att.get('call_site') or 'unknown site'}"
        title = f"revert(healing): {what} came back after its fix [{fp[:12]}]"
        lines = [
            "## Why", "",
            f"healer's fix for `{what}` ({att.get('pr_url') or 'its PR'}, attempt "
            f"`{att['attempt_id']}`) was merged, and the same error (fingerprint `{fp[:12]}`) "
            f"came back {n} time(s) after {after}: the fix did not hold.", "",
            f"This draft reverts the fix's {len(commits)} commit(s):", "",
            *[f"- {c}" for c in commits[:MAX_LISTED]],
            *([f"- … and {len(commits) - MAX_LISTED} more"] if len(commits) > MAX_LISTED
              else []), "",
            "## What to do", "",
            "healer never merges this PR. Merge it to take the fix out, or close it to keep "
            "the fix; either way the error needs a person (healer does not retry a fix that "
            "did not hold on its own).", "",
            f"<sub>healer · reverts attempt {att['attempt_id']} · fingerprint {fp}</sub>", ""]
        return sanitizer.scrub(title)[:200], sanitizer.scrub("\n".join(lines))

    async def _tell(self, att: dict[str, Any], ref: PrRef | None, reason: str) -> str:
        """The one escalation of this attempt's regression (naming the revert PR)."""
        rv = att.get("revert") or {}
        if rv.get("escalation"):
            return str(rv["escalation"])
        aid, fp = att["attempt_id"], str(att["fingerprint"])
        iid = str(att.get("incident_id") or "")
        what = f"{att.get('error_type') or 'error'} in {att.get('call_site') or 'unknown site'}"
        after = f"release {rv['release']}" if rv.get("release") else "the merge"
        n = int(rv.get("recurrences") or 1)
        done = (f"healer opened a DRAFT PR that reverts it: {ref.url} (#{ref.number}). "
                "healer never merges it." if ref else
                f"healer could not prepare a revert PR: {reason}.")
        esc = Escalation(
            title=(f"[HEAL-CODE] Fix did not hold: {what} — "
                   + (f"revert proposed (draft PR #{ref.number})" if ref else
                      "revert by hand")),
            target=fp[:12], severity="high",
            what_happened=(f"The fix of `{what}` ({att.get('pr_url') or 'PR unknown'}, attempt "
                           f"`{aid}`) was merged, and the same error came back {n} time(s) "
                           f"after {after}, within the post-fix watch: the fix did not hold. "
                           f"The incident is reopened. {done}"),
            next_steps=([f"Review the draft revert PR {ref.url}: merge it to take the fix "
                         "out, or close it to keep the fix."] if ref else
                        ["Revert the fix by hand if it made things worse."]) + [
                "Fix the root cause by hand: healer does not retry a fix that did not hold "
                "on its own.",
                "Record the lesson (and the anti-pattern) in incident-memory.yaml when the "
                "repository has a living context."],
            commands=[f"healer status {fp[:12]}"],
            evidence=[f"error: {what}", f"fix: {att.get('pr_url', '')}",
                      f"revert: {ref.url if ref else reason}"],
            incident=iid, labels=["heal", "escalation", "regression", "revert"],
            dedup_key=f"code.revert.{aid}", one_open=True,
            own=(aid, fp, revert_branch(aid)))
        record = await escalate(self.settings, self.store, esc, metrics=self.metrics)
        seed = str(record.seed_file or "")
        self._record(aid, escalation=seed or "not written")
        if iid:
            inc.Ledger(self.store, clock=self.clock, audit=self.audit).escalated(
                iid, seed_file=seed, issue_url=record.issue.url if record.issue else "",
                reason=("the fix did not hold: " + (f"revert proposed ({ref.url})" if ref
                                                     else reason))[:2000])
        return seed
