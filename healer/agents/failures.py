"""Agent runtime failures that are not bugs in the code: what they are and what to do.

A 529 wave, a revoked key, a stale ``--resume`` or a spent turn budget each need a different
action, and none of them is a failed healing attempt. Every such failure has a code and a
*class*; the class drives the action (``ACTIONS``):

- ``transient`` (T1 rate limit, T2 overloaded, T3 server error, T4 network): wait for the reset
  the agent or the API gave (else capped exponential back-off), then resume once; one incident
  per provider and account; never a failed attempt, never the circuit breaker.
- ``terminal`` (X1 bad credentials, X2 no permission, X3 credit exhausted, X4 invalid request):
  a person must act; escalate once, restart nothing.
- ``capacity`` (C1 context window, C2 turn cap, C3 budget cap): a fresh session if allowed.
- ``session`` (S1 missing resume, S2 session id in use, S3 a lock left behind): clear it and
  start fresh, never replay the failing ``--resume``.
- ``crash_loop`` (K1): launches that keep failing: pause, escalate.

The text forms (what CLIs print, in logs) are detection catalog entries with these codes and a
``class`` (``healer/detect/catalog.yaml``); this module classifies the *structured* forms: the
Claude Code CLI's stream-json ``result`` event and its synthetic assistant error message (the
shapes recorded in ``tests/agents/cli_failures/``), and the API's rate-limit headers.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

TRANSIENT, TERMINAL, CAPACITY, SESSION, CRASH_LOOP = (
    "transient", "terminal", "capacity", "session", "crash_loop")
CLASSES = (TRANSIENT, TERMINAL, CAPACITY, SESSION, CRASH_LOOP)
# Which failure counts when one run shows several (a rejected key explains the retries too).
PRECEDENCE = {TERMINAL: 0, CRASH_LOOP: 1, SESSION: 2, CAPACITY: 3, TRANSIENT: 4}


@dataclass(frozen=True)
class Code:
    cls: str
    title: str
    remedy: str  # what a person does about it (terminal, and whatever healer cannot do)


CODES: dict[str, Code] = {
    "T1": Code(TRANSIENT, "rate limit reached",
               "Wait for the limit to reset; raise the account's rate limit if it recurs."),
    "T2": Code(TRANSIENT, "model API overloaded",
               "Wait; the provider is at capacity (usually minutes)."),
    "T3": Code(TRANSIENT, "model API server error",
               "Wait; check the provider's status page if it lasts."),
    "T4": Code(TRANSIENT, "model API unreachable",
               "Check the network, proxy or inference gateway between the agent and the API."),
    "X1": Code(TERMINAL, "API key or login rejected",
               "Rotate the API key (or log Claude Code in again) and update the agents' "
               "secret; healer restarts nothing until then."),
    "X2": Code(TERMINAL, "credentials lack permission",
               "Give the key access to the model or workspace it uses, or use another key."),
    "X3": Code(TERMINAL, "credit or quota exhausted",
               "Top up the account's credit or raise its quota (billing settings)."),
    "X4": Code(TERMINAL, "request rejected as invalid",
               "Check the agent's model name, parameters and CLI version."),
    "C1": Code(CAPACITY, "context window exceeded",
               "Start the agent in a fresh session with a summary, or with less context."),
    "C2": Code(CAPACITY, "turn limit reached",
               "Start a fresh session to continue, or raise the agent's max turns."),
    "C3": Code(CAPACITY, "budget cap reached",
               "Raise the agent's budget if the task warrants it, or stop the task."),
    "S1": Code(SESSION, "resumed session does not exist",
               "Start the agent without --resume (a fresh session)."),
    "S2": Code(SESSION, "session id already in use",
               "Start the agent with a new session id."),
    "S3": Code(SESSION, "a stale session lock",
               "Remove the lock the killed process left and start fresh."),
    "K1": Code(CRASH_LOOP, "agent crash-looping",
               "Look at why every launch fails (its logs); healer stopped restarting it."),
}

# What healer does per class (docs, status and the playbooks read this).
ACTIONS = {
    TRANSIENT: "wait for the reset, then resume (staggered); not a failed attempt",
    TERMINAL: "escalate once; no restart until a person acts or the signal clears",
    CAPACITY: "fresh session (play.actions.fresh_session), else escalate",
    SESSION: "clear the session id or lock and start fresh, else escalate",
    CRASH_LOOP: "pause the agent and escalate",
}


def class_of(code: str) -> str:
    """The class of a failure code ("" when the code is not a runtime failure)."""
    entry = CODES.get(code)
    return entry.cls if entry else ""


@dataclass(frozen=True)
class Failure:
    code: str
    detail: str = ""  # the CLI's own words, cut
    status: int | None = None  # the API's HTTP status, when known
    provider: str = ""  # anthropic | openai | "" (unknown)
    retry_at: float | None = None  # when the API said to try again (Unix seconds)

    @property
    def cls(self) -> str:
        return class_of(self.code)

    @property
    def title(self) -> str:
        return CODES[self.code].title

    @property
    def transient(self) -> bool:
        return self.cls == TRANSIENT

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "class": self.cls, "title": self.title,
                               "detail": self.detail}
        for key in ("status", "provider", "retry_at"):
            if getattr(self, key) not in (None, ""):
                out[key] = getattr(self, key)
        return out


_MISSING_SESSION = re.compile(r"No conversation found with session ID", re.I)
_IN_USE = re.compile(r"Session ID \S+ is already in use", re.I)
_BILLING = re.compile(r"credit balance is too low|insufficient.?quota|quota exceeded", re.I)
_CONTEXT = re.compile(r"prompt is too long|context window|context.length", re.I)


def from_result(result: Mapping[str, Any], *, error: str = "",
                retry_at: float | None = None) -> Failure | None:
    """Classify Claude Code's ``result`` event (stream-json, or the SDK's ResultMessage as a
    mapping). ``error`` is the synthetic assistant message's category (``rate_limit``,
    ``authentication_failed``, ``billing_error`` …) when there was one.

    The CLI marks an API failure ``subtype: "success"`` with ``is_error: true``; only the
    caps and a failed resume use ``error_*`` subtypes (recorded shapes, CLI 2.1.332).
    """
    if not result.get("is_error") and not str(result.get("subtype", "")).startswith("error"):
        return None
    subtype = str(result.get("subtype") or "")
    reason = str(result.get("terminal_reason") or "")
    status = result.get("api_error_status")
    status = int(status) if isinstance(status, int) else None
    text = str(result.get("result") or "") or "; ".join(
        str(e) for e in result.get("errors") or [])
    detail = text.strip()[:500]

    def failure(code: str) -> Failure:
        return Failure(code, detail, status, "anthropic", retry_at)

    if reason == "prompt_too_long" or (status == 400 and _CONTEXT.search(text)):
        return failure("C1")
    if subtype == "error_max_turns" or reason == "max_turns":
        return failure("C2")
    if subtype == "error_max_budget_usd" or reason == "budget_exhausted":
        return failure("C3")
    if _MISSING_SESSION.search(text):
        return failure("S1")
    if _IN_USE.search(text):
        return failure("S2")
    if status == 429 or error == "rate_limit":
        return failure("T1")
    if status == 529 or error == "overloaded":
        return failure("T2")
    if status is not None and 500 <= status < 600:
        return failure("T3")
    if error == "billing_error" or _BILLING.search(text):
        return failure("X3")
    if status == 401 or (error == "authentication_failed" and status != 403):
        return failure("X1")
    if status == 403:
        return failure("X2")
    if status is not None and 400 <= status < 500:
        return failure("X4")
    if status is None and reason == "api_error":
        return failure("T4")  # no HTTP answer at all: refused, reset, timed out
    return None


# -- when to try again -------------------------------------------------------------------------

_IN_SECONDS = re.compile(
    r"(?:try again|retry|resets?) in (\d+(?:\.\d+)?)\s*(s|sec|seconds?|m|min|minutes?|h|hours?)\b",
    re.I)
_EPOCH_SUFFIX = re.compile(r"usage limit reached\|(\d{10})\b", re.I)
_HEADER = re.compile(r"\b(retry-after|anthropic-ratelimit-[a-z-]+-reset)\"?\s*[:=]\s*\"?"
                     r"(\d{4}-\d\d-\d\dT[0-9:.]+(?:Z|[+-]\d\d:\d\d)|[0-9]{1,10}(?:\.[0-9]+)?)",
                     re.I)
_UNIT = {"s": 1, "m": 60, "h": 3600}


def retry_at_from_headers(headers: Mapping[str, str], now: float) -> float | None:
    """When the API says to try again: ``retry-after`` (seconds or an HTTP date), else the
    latest of Anthropic's ``anthropic-ratelimit-*-reset`` times (RFC 3339, or epoch seconds
    for ``-unified-reset``)."""
    h = {k.lower(): str(v) for k, v in headers.items()}
    after = h.get("retry-after", "").strip()
    if after:
        try:
            return now + max(0.0, float(after))
        except ValueError:
            try:
                return parsedate_to_datetime(after).timestamp()
            except (TypeError, ValueError):
                pass
    resets = [t for k, v in h.items() if k.startswith("anthropic-ratelimit-")
              and k.endswith("-reset") and (t := _instant(v)) is not None]
    return max(resets) if resets else None


def _instant(value: str) -> float | None:
    value = value.strip()
    if value.isdigit():
        return float(value)
    m = re.match(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)$", value)
    if not m:
        return None
    y, mo, d, hh, mm, ss = (int(x) for x in m.groups()[:6])
    offset = 0 if m.group(7) == "Z" else (
        (1 if m.group(7)[0] == "+" else -1) * (int(m.group(7)[1:3]) * 3600
                                              + int(m.group(7)[4:6]) * 60))
    return float(calendar.timegm((y, mo, d, hh, mm, ss, 0, 0, 0)) - offset)


def retry_at_from_text(text: str, now: float) -> float | None:
    """A reset time an agent printed: "try again in 30 seconds", "resets in 5m", Claude
    Code's subscription form ``usage limit reached|<epoch>``, or logged response headers
    (``retry-after: 30``, ``anthropic-ratelimit-requests-reset: <RFC 3339>``)."""
    m = _EPOCH_SUFFIX.search(text)
    if m:
        return float(m.group(1))
    headers = {h.group(1): h.group(2) for h in _HEADER.finditer(text)}
    if headers:  # an agent (or its wrapper) that logs the API's response headers
        return retry_at_from_headers(headers, now)
    m = _IN_SECONDS.search(text)
    if m:
        return now + float(m.group(1)) * _UNIT[m.group(2)[0].lower()]
    return None


def backoff_s(waits: int, *, base_s: float, cap_s: float) -> float:
    """Capped exponential back-off: ``base_s`` after the first failure, doubling, at most
    ``cap_s`` (REFERENCE: a 15-minute cap)."""
    return float(min(cap_s, base_s * (2 ** max(0, waits - 1))))

