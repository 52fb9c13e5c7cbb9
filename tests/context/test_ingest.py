"""Intake: every source's payload becomes the normalised error and a dedup key."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from healer.context.ingest import (
    NormalizedError,
    from_alertmanager,
    from_slack,
    locate,
    verify_bearer,
    verify_sentry,
    verify_slack,
)
from healer.context.sentry import from_sentry
from healer.core.schemas import errors as schema_errors
from healer.errors import UsageError
from healer.testing.webhooks import (
    sentry_event_alert,
    sentry_issue,
    sentry_signature,
    slack_command,
    slack_message_action,
    slack_signature,
)


def am_body(*alerts: dict, status: str = "firing", **extra: object) -> dict:
    return {"version": "4", "groupKey": '{}:{alertname="HighErrorRate"}', "truncatedAlerts": 0,
            "status": status, "receiver": "healer", "groupLabels": {"alertname": "x"},
            "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://127.0.0.1:9093", "alerts": list(alerts), **extra}


def am_alert(status: str = "firing", fp: str = "d5e08c84ef09a8b8", **notes: str) -> dict:
    return {"status": status, "labels": {"alertname": "HighErrorRate", "severity": "critical",
                                         "env": "prod"},
            "annotations": notes, "startsAt": "2024-05-01T10:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://127.0.0.1:9090/graph",
            "fingerprint": fp}


class TestSentry:
    def test_event_alert_normalises_to_the_innermost_in_app_frame(self, project: Path) -> None:
        """event_alert: message, file:line of the last in-app frame (library frames skipped),
        a traceback, severity from the level, Sentry context, key from the issue id."""
        (sig,) = from_sentry("event_alert", sentry_event_alert(line=6), project)
        e = sig.error
        assert sig.key == "sentry-4242" and sig.status == "firing"
        assert (e.message, e.file, e.line, e.function) == (
            "ZeroDivisionError: division by zero", "app/payment.py", 6, "average")
        assert e.severity == "high" and e.source == "sentry" and e.environment == "production"
        assert e.stack_trace.startswith("Traceback (most recent call last):")
        assert e.stack_trace.rstrip().endswith("ZeroDivisionError: division by zero")
        assert e.sentry["release"] == "shop@1.4.2" and len(e.sentry["breadcrumbs"]) == 3
        assert "issues/4242" in e.sentry["issue_url"]
        assert schema_errors("normalized-error", e.as_dict()) == []

    def test_deployed_absolute_paths_map_into_the_repo(self, project: Path) -> None:
        """A frame whose filename is a server path still finds app/payment.py."""
        body = sentry_event_alert()
        frame = body["data"]["event"]["exception"]["values"][0]["stacktrace"]["frames"][-1]
        frame["filename"] = "/srv/releases/42/app/payment.py"
        (sig,) = from_sentry("event_alert", body, project)
        assert sig.error.file == "app/payment.py"

    def test_javascript_stacks_and_levels(self) -> None:
        """A browser event: JS frames, fatal → critical."""
        (sig,) = from_sentry("event_alert", sentry_event_alert(
            platform="javascript", file="src/cart.ts", level="fatal"))
        assert sig.error.severity == "critical" and sig.error.file == "src/cart.ts"
        assert "at average (src/cart.ts:12:0)" in sig.error.stack_trace

    def test_issue_lifecycle(self) -> None:
        """issue created fires (with user and event counts), resolved resolves the same key,
        assigned is ignored."""
        (created,) = from_sentry("issue", sentry_issue("created"))
        assert created.key == "sentry-4242" and created.error.sentry["users"] == 7
        assert created.error.sentry["events"] == 31 and created.error.file == "app/payment.py"
        (resolved,) = from_sentry("issue", sentry_issue("resolved"))
        assert resolved.key == "sentry-4242" and resolved.status == "resolved"
        assert from_sentry("issue", sentry_issue("assigned")) == []

    def test_error_and_metric_alert_resources(self) -> None:
        """error (created) is an event; metric_alert critical fires and resolved resolves."""
        body = sentry_event_alert()
        (err,) = from_sentry("error", {"action": "created", "data": {
            "error": body["data"]["event"]}})
        assert err.key == "sentry-4242"
        metric = {"action": "critical", "data": {"description_title": "Too many errors",
                                                 "description_text": "1000 events",
                                                 "metric_alert": {"id": "77"}}}
        (fired,) = from_sentry("metric_alert", metric)
        assert fired.error.severity == "critical" and fired.error.file == ""
        (res,) = from_sentry("metric_alert", {**metric, "action": "resolved"})
        assert res.key == fired.key and res.status == "resolved"

    @pytest.mark.parametrize("body", [[], {"data": []}, {"action": "triggered", "data": {}}])
    def test_malformed_bodies_are_usage_errors(self, body: object) -> None:
        """Shapes that are not Sentry's are refused with a reason."""
        with pytest.raises(UsageError):
            from_sentry("event_alert", body)

    def test_signature_over_raw_bytes(self) -> None:
        """The hex HMAC-SHA256 of the exact bytes verifies; one changed byte, another secret,
        no secret or no header do not."""
        raw = json.dumps(sentry_event_alert()).encode()
        sig = sentry_signature("s3cret", raw)
        assert verify_sentry("s3cret", raw, sig)
        assert verify_sentry("s3cret", raw, sig.upper())
        assert not verify_sentry("s3cret", raw[:-1] + b" ", sig)
        assert not verify_sentry("other", raw, sig)
        assert not verify_sentry("", raw, sig)
        assert not verify_sentry("s3cret", raw, None)
        assert not verify_sentry("s3cret", raw, "é" * 64)


class TestAlertmanager:
    def test_v4_firing_with_file_annotations(self, project: Path) -> None:
        """Labels and annotations become the normalised error; the key is the fingerprint."""
        (sig,) = from_alertmanager(am_body(am_alert(
            summary="ZeroDivisionError: division by zero", file="app/payment.py", line="6")),
            project)
        e = sig.error
        assert sig.key == "am-d5e08c84ef09a8b8" and sig.status == "firing"
        assert (e.file, e.line, e.severity, e.source, e.environment) == (
            "app/payment.py", 6, "critical", "alertmanager", "prod")
        assert e.error_type == "ZeroDivisionError"
        assert sig.detail["alertname"] == "HighErrorRate"

    def test_file_from_a_traceback_in_the_description(self, project: Path) -> None:
        """Without a file annotation the innermost project frame of the text is used."""
        tb = ('Traceback (most recent call last):\n  File "/usr/lib/python3.11/site-packages/'
              'x.py", line 3, in y\n  File "/srv/app/app/payment.py", line 6, in average\n'
              "ZeroDivisionError: division by zero")
        (sig,) = from_alertmanager(am_body(am_alert(summary="errors", description=tb)), project)
        assert (sig.error.file, sig.error.line, sig.error.function) == (
            "app/payment.py", 6, "average")

    def test_grouped_firing_and_resolved_alerts_and_newer_fields(self) -> None:
        """One notification carries several alerts, each with its own status; newer
        Alertmanagers' notification_reason/routeLabels are kept."""
        sigs = from_alertmanager(am_body(am_alert(fp="aa"), am_alert("resolved", fp="bb"),
                                         notification_reason="resolved",
                                         routeLabels={"team": "shop"}))
        assert [(s.key, s.status) for s in sigs] == [("am-aa", "firing"), ("am-bb", "resolved")]
        assert sigs[0].detail["routeLabels"] == {"team": "shop"}

    def test_loki_alerts_through_alertmanager_are_loki(self) -> None:
        """An alert from Loki's ruler (source=loki) keeps Loki as its source."""
        alert = am_alert(summary="ERROR rate high")
        alert["labels"]["source"] = "loki"
        (sig,) = from_alertmanager(am_body(alert))
        assert sig.error.source == "loki"

    def test_missing_fingerprint_is_derived_from_labels(self) -> None:
        """Alertmanagers that omit the fingerprint still dedup: the key hashes the labels."""
        a, b = am_alert(fp=""), am_alert(fp="")
        assert from_alertmanager(am_body(a))[0].key == from_alertmanager(am_body(b))[0].key

    @pytest.mark.parametrize("body", [{"version": "3", "alerts": []}, {"alerts": "x"}, [],
                                      {"alerts": [1]}])
    def test_bad_payloads(self, body: object) -> None:
        """Unsupported versions and broken shapes are usage errors."""
        with pytest.raises(UsageError):
            from_alertmanager(body)

    def test_bearer(self) -> None:
        """Only `Bearer <token>` with the configured token passes; no token → nothing does."""
        assert verify_bearer("t0k", "Bearer t0k") and verify_bearer("t0k", "bearer  t0k")
        assert not verify_bearer("t0k", "Bearer t0kx")
        assert not verify_bearer("t0k", "Basic t0k")
        assert not verify_bearer("", "Bearer ")
        assert not verify_bearer("t0k", None)


class TestSlack:
    def test_slash_command_with_file_and_line(self, project: Path) -> None:
        """`/heal app/payment.py:6 message` names the file and line."""
        sig = from_slack(slack_command("app/payment.py:6 ZeroDivisionError on empty baskets"),
                         project)
        assert (sig.error.file, sig.error.line, sig.error.source) == ("app/payment.py", 6,
                                                                       "slack")
        assert sig.error.message == "ZeroDivisionError on empty baskets"
        assert sig.detail["reported_by"] == "dev" and sig.key.startswith("slack-")

    def test_message_action_with_a_pasted_traceback(self, project: Path) -> None:
        """A message action on a pasted traceback (Slack-escaped, fenced) finds the frame."""
        text = ("```Traceback (most recent call last):\n  File &quot;app/payment.py&quot;, "
                "line 6, in average\nZeroDivisionError: division by zero```")
        sig = from_slack(slack_message_action(text), project)
        assert (sig.error.file, sig.error.line) == ("app/payment.py", 6)
        assert sig.error.message == "ZeroDivisionError: division by zero"

    def test_empty_text_gets_the_usage(self) -> None:
        """`/heal` alone answers with how to use it."""
        with pytest.raises(UsageError, match="usage: /heal"):
            from_slack(slack_command("  "))

    def test_signature_and_replay_window(self) -> None:
        """v0 signature of v0:ts:body within 5 minutes; old timestamps and edits fail."""
        raw, now = b"text=hi", time.time()
        ts = str(int(now))
        good = slack_signature("sec", ts, raw)
        assert verify_slack("sec", ts, raw, good, now=now, max_age_s=300) == ""
        assert "signature" in verify_slack("sec", ts, raw + b"!", good, now=now, max_age_s=300)
        old = str(int(now) - 301)
        assert "replay" in verify_slack("sec", old, raw, slack_signature("sec", old, raw),
                                        now=now, max_age_s=300)
        assert "secret" in verify_slack("", ts, raw, good, now=now, max_age_s=300)
        assert "number" in verify_slack("sec", "abc", raw, good, now=now, max_age_s=300)


class TestNormalizedError:
    def test_from_dict_validates_and_normalises(self, project: Path) -> None:
        """A hand-written error file is checked against the schema; its file made relative."""
        e = NormalizedError.from_dict({"message": "KeyError: 'sku'",
                                       "file": f"{project}/app/payment.py", "line": 3}, project)
        assert e.file == "app/payment.py" and e.error_type == "KeyError"
        with pytest.raises(UsageError, match="severity"):
            NormalizedError.from_dict({"message": "x", "severity": "apocalyptic"})

    def test_locate_prefers_project_frames(self) -> None:
        """Library frames lose to the innermost project frame; JS stacks are innermost-first."""
        assert locate('File "/x/site-packages/lib.py", line 1, in f\nFile "app/a.py", line 2,'
                      ' in g\nFile "/x/site-packages/lib2.py", line 9, in h')[:2] == ("app/a.py",
                                                                                    2)
        assert locate("Error\n    at f (src/a.ts:3:4)\n    at g (src/b.ts:9:1)")[:2] == (
            "src/a.ts", 3)
        assert locate("no frames here") == ("", None, "")
