"""gate.thresholds for a context source: N distinct users before an agent may start."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from healer.context.incidents import IncidentBook
from healer.context.ingest import FIRING, NormalizedError, Signal
from healer.core.incidents import public_view
from healer.core.store import FileStore
from healer.core.trust import TRUSTED


def sentry(*users: str, count: int = 1) -> Signal:
    error = NormalizedError(message="ZeroDivisionError: division by zero",
                            file="app/payment.py", line=5, function="average",
                            source="sentry", severity="high")
    return Signal(key="sentry-7-payment", status=FIRING, source="sentry", error=error,
                  users=users, trust=TRUSTED, count=count)


def test_three_distinct_users_open_it(make_settings: Callable[..., Any], project: Path) -> None:
    settings = make_settings("gate.thresholds=" + json.dumps({"sentry": {"users": 3}}))
    book = IncidentBook(settings, FileStore(settings.state_path), root=project)
    first = book.receive(sentry("u1"))
    assert first.decision == "awaiting_occurrences" and not first.heal
    assert "reported by 1 of 3 distinct users" in first.message
    # The same user again, however often, is still one user.
    again = book.receive(sentry("u1", count=5))
    assert again.decision == "awaiting_occurrences" and not again.heal
    second = book.receive(sentry("u2"))
    assert "2 of 3" in second.message
    inc = public_view(book.ledger.require("code-sentry-7-payment"))
    assert inc["gate"]["reason"] == "awaiting_occurrences" and inc["reporters"] == 2
    assert inc["count"] == 7 and inc["status"] == "open"
    assert book.retry_held() == []
    third = book.receive(sentry("u3"))
    assert third.heal and third.decision == "accepted" and third.attempt_id


def test_another_source_without_a_rule_is_not_held(make_settings: Callable[..., Any],
                                                    project: Path) -> None:
    settings = make_settings("gate.thresholds=" + json.dumps({"loki": {"occurrences": 4}}))
    book = IncidentBook(settings, FileStore(settings.state_path), root=project)
    assert book.receive(sentry("u1")).heal
