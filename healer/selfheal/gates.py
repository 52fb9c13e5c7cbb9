"""The code kind's side of the one gate (``healer.core.gate``): its severity verdict
(0 critical … 4 info, from the error's type and message, a caller's hint refining a medium
verdict), its policy (``selfheal.*``), and what its approval step and flood limits read
(``code.*``: ``healer.core.approval``, ``healer.core.trust``) — for both code roads."""

from __future__ import annotations

import functools
import re
from typing import Any

from healer.core import approval, trust
from healer.core.gate import Policy

SEVERITIES = ("critical", "high", "medium", "low", "info")
MEDIUM = 2

# Verdicts from the error itself (the class name without its module); a caller's hint only
# refines a medium verdict.
_INFO_TYPES = re.compile(r"CancelledError|KeyboardInterrupt|SystemExit|GeneratorExit|"
                         r"StopIteration|StopAsyncIteration|\w*Warning")
_LOW_TYPES = re.compile(r"\w*Timeout\w*|\w*TimedOut\w*|ConnectError|ConnectionError|"
                        r"ConnectionResetError|ConnectionRefusedError|BrokenPipeError|"
                        r"RateLimitError|TooManyRequests\w*|ServiceUnavailable\w*|"
                        r"RemoteDisconnected|ReadError|WriteError|NetworkError")
_HIGH_TYPES = re.compile(r"AttributeError|TypeError|NameError|KeyError|IndexError|"
                         r"ImportError|ModuleNotFoundError|NotImplementedError|AssertionError|"
                         r"UnboundLocalError|RecursionError|ZeroDivisionError|\w*IntegrityError|"
                         r"\w*ProgrammingError|Undefined\w*Error|\w*SyntaxError|"
                         r"\w*ViolationError|InternalError|\w*OperationalError")
_LOW_WORDS = ("rate limit", "rate-limit", "ratelimit", "too many requests", " 429",
              "temporarily unavailable", "try again later", "timed out", "timeout")
_CRITICAL_WORDS = ("data loss", "corrupt", "security", "leak", "privilege",
                   "unauthorized access", "unauthorised access", "injection")


@functools.lru_cache(maxsize=1024)
def _type_verdict(name: str) -> int | None:
    """What the class name alone says: 4 info, 3 low, 1 high, None (the message decides)."""
    if _INFO_TYPES.fullmatch(name):
        return 4
    if _LOW_TYPES.fullmatch(name):
        return 3
    return 1 if _HIGH_TYPES.fullmatch(name) else None


def severity_verdict(error_type: str, message: str, hint: str | None = None) -> int:
    """0 critical … 4 info: from the error, then the hint if the verdict is medium."""
    by_type = _type_verdict(error_type.rsplit(".", 1)[-1].strip())
    if by_type == 4:
        return 4
    low = message.lower()
    if by_type == 3 or any(w in low for w in _LOW_WORDS):
        return 3
    if any(w in low for w in _CRITICAL_WORDS):
        return 0
    verdict = 1 if by_type == 1 else MEDIUM
    if verdict == MEDIUM and hint:
        hint = hint.strip().lower()
        if hint in SEVERITIES:
            return SEVERITIES.index(hint)
    return verdict


def policy(settings: Any) -> Policy:
    """The code kind's gate policy (``selfheal.*``). Agent runs of every kind together are
    bounded by ``executor.max_concurrent`` where they start (``healer.core.slots``): an
    admitted attempt waits there for a slot rather than being turned away."""
    sh = settings.selfheal
    return Policy(kind="code", cooldown_s=sh.cooldown_s, max_concurrent=sh.max_concurrent,
                  breaker_window=sh.breaker_window, breaker_reset_s=sh.breaker_reset_s)


def approval_policy(settings: Any) -> approval.Policy:
    """``code.approval`` and its eligibility threshold."""
    code = settings.code
    return approval.Policy(mode=code.approval, min_events=code.approval_min_events,
                           min_distinct=code.approval_min_distinct)


def flood_policy(settings: Any) -> trust.FloodPolicy:
    """``code.new_incidents_per_hour`` and ``code.max_open_anonymous``."""
    code = settings.code
    return trust.FloodPolicy(new_per_hour=code.new_incidents_per_hour,
                             max_open_anonymous=code.max_open_anonymous)
