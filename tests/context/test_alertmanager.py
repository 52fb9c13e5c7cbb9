"""A real Prometheus Alertmanager routes alerts to a real `healer serve`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from context_helpers import AM_TOKEN, BUGGY, FLOAT_FIX, PAYMENT, REPRO, REPRO_FILE, plan

from healer.testing.alertmanager import Alertmanager, alertmanager_binary
from healer.testing.api import ServeProcess

pytestmark = [pytest.mark.e2e]

LABELS = {"alertname": "PaymentErrors", "severity": "critical", "env": "prod"}
NOTES = {"summary": "ZeroDivisionError: division by zero", "file": "app/payment.py",
         "line": "6"}


@pytest.fixture(autouse=True)
def _needs_alertmanager() -> None:
    if alertmanager_binary() is None:
        pytest.skip("prometheus-alertmanager is not installed")


@pytest.fixture
def stack(serve_env: Any) -> Iterator[Any]:
    """``stack(**env)`` → (healer serve, Alertmanager sending to it with the bearer token)."""
    opened: list[Any] = []

    def start(**env: Any) -> tuple[ServeProcess, Alertmanager]:
        srv = ServeProcess(serve_env(**env))
        opened.append(srv)
        am = Alertmanager(srv.url + "/api/v1/webhooks/alertmanager", token=AM_TOKEN).start()
        opened.append(am)
        return srv, am

    yield start
    for thing in reversed(opened):
        if isinstance(thing, ServeProcess):
            thing.close()
        else:
            thing.stop()


def incidents(srv: ServeProcess) -> dict[str, dict[str, Any]]:
    found = srv.http.get("/api/v1/context/incidents").json()["incidents"]
    return {i["key"]: i for i in found}


class TestRouting:
    def test_opens_dedups_and_resolves(self, stack: Any) -> None:
        """Alertmanager's notifications open an incident per alert fingerprint; a grouped
        notification repeating a known alert counts as a duplicate; resolving the alert in
        Alertmanager closes exactly the incident it opened."""
        srv, am = stack(HEALER__EXECUTOR__DEFAULT="playbook")  # record only
        am.fire(LABELS, NOTES)
        first = srv.wait_for(lambda: incidents(srv), timeout=30)
        (key_a,) = first
        assert key_a.startswith("am-") and first[key_a]["status"] == "open"
        assert first[key_a]["error"]["file"] == "app/payment.py"
        assert first[key_a]["error"]["severity"] == "critical"

        am.fire({**LABELS, "instance": "web-2"}, NOTES)  # same group: both alerts resent
        # The grouped resend carries both alerts: the new one opens, the known one is counted
        # (in either order, so wait for both).
        both = srv.wait_for(lambda: len(i := incidents(srv)) == 2 and
                            i[key_a]["occurrences"] >= 2 and i, timeout=30)
        (key_b,) = set(both) - {key_a}

        am.resolve(LABELS)
        done = srv.wait_for(lambda: (i := incidents(srv))[key_a]["status"] == "resolved" and i,
                            timeout=30)
        assert done[key_b]["status"] == "open"
        # The audit line follows the state write, so wait for it rather than read once.
        audit = srv.wait_for(lambda: "resolved" in (a := [e["event"] for e in srv.http.get(
            f"/api/v1/context/incidents/{key_a}").json()["audit"]]) and a, timeout=30)
        # The repeats are counted (occurrences above), not logged again; the end is.
        assert audit[:2] == ["opened", "gate"] and "resolved" in audit
        assert audit[-1] == "resolved"

    def test_an_alert_about_a_file_ends_in_a_clear_escalation(
            self, stack: Any, tmp_path: Path, dirs: Any) -> None:
        """An Alertmanager alert naming app/payment.py is healed with its living context;
        every fix breaks a critical invariant, so after the iteration limit a person gets a
        seed file and a forge issue that say what was tried and why it was rejected."""
        bad = [{"edits": [{"file": "app/payment.py", "content": PAYMENT.replace(
            BUGGY, FLOAT_FIX) + f"# try {n}\n"}, {"file": REPRO_FILE, "content": REPRO}],
            "commit": f"fix: try {n}"} for n in (1, 2)]
        srv, am = stack(plan=plan(tmp_path / "agent", *bad), HEALER__CODE__MAX_ITERATIONS="2")
        am.fire(LABELS, NOTES)
        done = srv.wait_for(lambda: (i := incidents(srv)) and next(iter(i.values()))[
            "status"] == "escalated" and i, timeout=90)
        inc = next(iter(done.values()))
        assert "no fix passed verification in 2 iteration(s)" in inc["escalation"]["reason"]
        seed = Path(inc["escalation"]["seed_file"]).read_text()
        assert "critical invariant INV-001 violated" in seed and "What healer tried" in seed
        issues = list((dirs.state / "forge" / "issues").glob("*.md"))
        assert len(issues) == 1 and "Self-healing: ZeroDivisionError" in issues[0].read_text()
        prompt = (tmp_path / "agent" / "prompt-1.md").read_text()
        assert "Source: alertmanager" in prompt and "Environment: prod" in prompt
