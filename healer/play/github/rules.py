"""The PR alerts of the play healer, as pure functions of a tracked PR record.

**Who wrote it.** A comment or review is an agent's when its body carries the marker
``<!-- healer-agent: NAME -->`` (NAME an agent of ``github.agent_stages`` or a stage of
``github.handoff_order``), or else when its author's login is in ``github.bot_logins`` (a
GitHub App posts as ``<app-slug>[bot]``). Anything else is a person's and takes no part in
A1.

* **A1 — comment order mismatch** (warning, ``agent_error``). The agents hand a PR on in
  ``github.handoff_order`` (implementation → quality → security → testing → integration),
  each with a comment or review (opening the PR is its author's). A1 fires while a stage has
  handed off although a stage before it in the order has not yet; it names the agent that
  jumped ahead and the stages it skipped, and clears once the skipped stages have spoken (or
  the early comment is deleted). Going back to an earlier stage (rework after a review) is
  not a mismatch.
* **A4 — approval loop** (warning, ``agent_error``). Reviews in time order; each
  ``CHANGES_REQUESTED`` that follows an ``APPROVED`` is one turn of the loop. At
  ``github.approval_loop_threshold`` turns (2) A4 fires while the latest decisive review
  still asks for changes; it clears when the PR is approved again, merged or closed.
* **A5 — CI failure or merge conflict after approval** (critical, ``build_failure``, or
  ``test_failure`` when a failing check's name says test). The PR has a standing approval (a
  reviewer whose latest decisive review is ``APPROVED``) and on its head commit a check run
  concluded ``failure``, ``timed_out`` or ``startup_failure``, or a commit status is
  ``failure``/``error``, or GitHub says it cannot merge (``mergeable: false``,
  ``mergeable_state: dirty``). It clears when the checks are green again, the conflict is
  resolved, the approval is gone, or the PR is merged or closed.

A4 and A5 are about the PR's author (its agent, or the whole play when a person opened it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

FAILED_CONCLUSIONS = frozenset({"failure", "timed_out", "startup_failure"})
FAILED_STATES = frozenset({"failure", "error"})
DECISIVE = ("APPROVED", "CHANGES_REQUESTED")
CODES = ("A1", "A4", "A5")


@dataclass(frozen=True)
class Rules:
    """What the rules are configured with (``Rules.from_settings(settings.github)``)."""

    handoff_order: tuple[str, ...] = ("implementation", "quality", "security", "testing",
                                      "integration")
    agent_stages: dict[str, str] = field(default_factory=dict)
    bot_logins: dict[str, str] = field(default_factory=dict)  # lower-case login → agent
    approval_loop_threshold: int = 2

    @classmethod
    def from_settings(cls, gh: Any) -> Rules:
        return cls(tuple(gh.handoff_order), {k.lower(): v.lower()
                                             for k, v in gh.agent_stages.items()},
                   {k.lower(): v.lower() for k, v in gh.bot_logins.items()},
                   int(gh.approval_loop_threshold))

    def agent_of(self, item: dict[str, Any]) -> str:
        """The agent that wrote a comment or review ("" for a person)."""
        marker = str(item.get("marker") or "").lower()
        if marker and (marker in self.agent_stages or marker in self.handoff_order):
            return marker
        return self.bot_logins.get(str(item.get("login") or "").lower(), "")

    def stage_of(self, agent: str) -> str:
        if agent in self.handoff_order:
            return agent
        return self.agent_stages.get(agent, "")


@dataclass(frozen=True)
class Finding:
    """One alert the rules see firing on a PR (the watcher makes it a ``PlayAlert``)."""

    code: str
    agent: str
    severity: str
    issue_type: str
    summary: str
    detail: dict[str, Any] = field(default_factory=dict)


def judge(rec: dict[str, Any], rules: Rules) -> list[Finding]:
    """The alerts firing on the PR ``rec`` now (an empty list: all clear)."""
    if rec.get("state") != "open" or rec.get("merged"):
        return []  # a merged or closed PR has nothing left to heal
    out = [f for f in (comment_order(rec, rules), approval_loop(rec, rules),
                       failure_after_approval(rec, rules)) if f is not None]
    return out


def _name(rec: dict[str, Any]) -> str:
    return f"{rec.get('repo', '?')}#{rec.get('number', '?')}"


def author_agent(rec: dict[str, Any], rules: Rules) -> str:
    return rules.bot_logins.get(str(rec.get("author") or "").lower(), "")


def _in_time_order(items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(items, key=lambda i: (float(i.get("at") or 0), int(i.get("id") or 0)))


def comment_order(rec: dict[str, Any], rules: Rules) -> Finding | None:
    """A1: a stage handed off while an earlier one has not (see the module docstring)."""
    order = rules.handoff_order
    # Opening the PR is its author's hand-off (the implementation agent's, usually).
    opened = {"id": 0, "login": rec.get("author", ""), "marker": "", "at": 0.0}
    items = _in_time_order([opened, *rec.get("comments", []), *(
        r for r in rec.get("reviews", []) if r.get("state") != "PENDING")])
    spoken: set[str] = set()
    staged = []
    for item in items:
        agent = rules.agent_of(item)
        stage = rules.stage_of(agent)
        if stage:
            staged.append((item, agent, stage))
            spoken.add(stage)
    for item, agent, stage in staged:
        skipped = [s for s in order[:order.index(stage)] if s not in spoken]
        if skipped:
            return Finding(
                "A1", agent, "warning", "agent_error",
                f"{_name(rec)}: {agent} ({stage}) handed off before "
                f"{', '.join(skipped)} did (expected order: {' → '.join(order)})",
                {"stage": stage, "skipped": skipped, "expected_order": list(order),
                 "comment_id": item.get("id"), "at": item.get("at")})
    return None


def approval_loop(rec: dict[str, Any], rules: Rules) -> Finding | None:
    """A4: approved, then changes requested, ``approval_loop_threshold`` times."""
    turns, approved, last = 0, False, ""
    for review in _in_time_order(rec.get("reviews", [])):
        state = review.get("state")
        if state == "APPROVED":
            approved = True
        elif state == "CHANGES_REQUESTED" and approved:
            turns, approved = turns + 1, False
        if state in DECISIVE:
            last = str(state)
    if turns < rules.approval_loop_threshold or last != "CHANGES_REQUESTED":
        return None
    return Finding("A4", author_agent(rec, rules), "warning", "agent_error",
                   f"{_name(rec)}: approved and then sent back with changes requested "
                   f"{turns} times (approval loop)",
                   {"turns": turns, "threshold": rules.approval_loop_threshold})


def standing_approvals(rec: dict[str, Any]) -> list[str]:
    """Reviewers whose latest decisive review approves (a dismissal withdraws it)."""
    latest: dict[str, str] = {}
    for review in _in_time_order(rec.get("reviews", [])):
        state = review.get("state")
        if state in (*DECISIVE, "DISMISSED"):
            latest[str(review.get("login") or "")] = str(state)
    return sorted(login for login, state in latest.items() if state == "APPROVED")


def failing_checks(rec: dict[str, Any]) -> list[dict[str, str]]:
    """The head commit's failing check runs and commit statuses."""
    out = [{"name": name, "kind": "check_run", "conclusion": c.get("conclusion", ""),
            "url": c.get("url", "")}
           for name, c in sorted((rec.get("checks") or {}).items())
           if c.get("status") == "completed" and c.get("conclusion") in FAILED_CONCLUSIONS]
    out += [{"name": ctx, "kind": "status", "conclusion": s.get("state", ""),
             "url": s.get("url", "")}
            for ctx, s in sorted((rec.get("statuses") or {}).items())
            if s.get("state") in FAILED_STATES]
    return out


def conflicted(rec: dict[str, Any]) -> bool:
    return rec.get("mergeable") is False or rec.get("mergeable_state") == "dirty"


def failure_after_approval(rec: dict[str, Any], rules: Rules) -> Finding | None:
    """A5: an approved PR whose checks fail or that no longer merges."""
    approvers = standing_approvals(rec)
    if not approvers:
        return None
    failing = failing_checks(rec)
    conflict = conflicted(rec)
    if not failing and not conflict:
        return None
    what = []
    if failing:
        what.append(f"{', '.join(f['name'] for f in failing[:5])} failing")
    if conflict:
        what.append("merge conflict with " + str(rec.get("base_ref") or "the base branch"))
    tests = any("test" in f["name"].lower() for f in failing)
    return Finding("A5", author_agent(rec, rules), "critical",
                   "test_failure" if tests else "build_failure",
                   f"{_name(rec)}: approved, but {' and '.join(what)}",
                   {"failing": failing[:20], "conflict": conflict,
                    "mergeable_state": rec.get("mergeable_state", ""),
                    "approved_by": approvers[:10], "head_sha": rec.get("head_sha", "")})
