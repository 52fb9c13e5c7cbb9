"""The buttons of healer's Slack messages: ``POST /api/v1/slack/interactions``.

Slack posts a person's click as ``application/x-www-form-urlencoded`` with one field,
``payload``: the JSON of a ``block_actions`` interaction (``user``, ``actions[]`` with
``action_id`` and ``value``). What each button does — the same code path as the CLI, the API
and the dashboard, recorded as by ``<name> (slack <user id>)``, via ``slack``:

==================  ===========================================================================
``action_id``       does (``value``: the incident id)
==================  ===========================================================================
healer_approve      ``healer approve`` — the waiting code agent starts (through the one gate)
healer_deny         ``healer deny`` — the incident is resolved
healer_ack          ``healer ack`` — the incident's ``acknowledged``; PagerDuty is told
healer_silence_1h   a silence of this incident (its kind and key) for one hour
==================  ===========================================================================

**Authenticated by Slack's signature, not the API token** (``healer.api.guard`` admits this
one path without a bearer token and with a form body): ``X-Slack-Signature`` must be ``v0=``
and the hex HMAC-SHA256 of ``v0:{X-Slack-Request-Timestamp}:{raw body}`` keyed with
``webhooks.slack_signing_secret``, compared in constant time; a timestamp further than
``webhooks.slack_max_age_s`` (300 s) from now is a replay; an identical body seen within that
window is a replay too. Any of these — or no secret configured — is 401 with the reason, an
audit ``slack_rejected`` event, and nothing else. Slack waits 3 s for an answer: every
action is a few store writes (an approved agent starts in the background), and a refused
action (nothing waits, acknowledged already) is still 200, its reason in ``text``, so Slack
does not retry it. The message itself is updated by the notification reconciler, which sees
the incident change.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from healer.api.http import HTTPError, ok, route
from healer.core.audit import Audit
from healer.core.incidents import Ledger
from healer.core.names import is_safe_name
from healer.core.silences import silence_incident
from healer.errors import ApprovalError, HealerError, NotFoundError, UsageError

PATH = "/api/v1/slack/interactions"
ACTIONS = ("healer_approve", "healer_deny", "healer_ack", "healer_silence_1h")
SILENCE_S = 3600.0
SEEN, SEEN_KEY = "slack-interactions", "seen"
MAX_FORM_FIELDS = 5
MAX_NAME = 80


def _audit(request: Request) -> Audit:
    return Audit(request.app.state.ctx.settings.state_path)


def _refuse(request: Request, why: str) -> HTTPError:
    _audit(request).write("slack_rejected", "", reason=why,
                          client=request.client.host if request.client else "")
    return HTTPError(401, why)


def _verify(request: Request, raw: bytes, now: float) -> str:
    from healer.context.ingest import verify_slack

    hooks = request.app.state.ctx.settings.webhooks
    return verify_slack(hooks.slack_signing_secret,
                        request.headers.get("x-slack-request-timestamp"), raw,
                        request.headers.get("x-slack-signature"), now=now,
                        max_age_s=hooks.slack_max_age_s)


def _replayed(request: Request, raw: bytes, now: float) -> bool:
    """Whether this exact signed body was handled within the replay window (and remember it
    if not): a captured click replayed inside the 5 minutes acts once."""
    store = request.app.state.ctx.store
    window = float(request.app.state.ctx.settings.webhooks.slack_max_age_s)
    digest = hashlib.sha256(raw).hexdigest()[:40]
    seen: dict[str, bool] = {}

    def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
        kept = {k: v for k, v in ((cur or {}).get("seen") or {}).items()
                if now - float(v) <= 2 * window}
        seen["it"] = digest in kept
        if seen["it"]:
            return None
        kept[digest] = now
        return {"seen": kept}

    store.update(SEEN, SEEN_KEY, fn, durable=False)
    return seen["it"]


def _payload(raw: bytes) -> dict[str, Any]:
    try:
        form = parse_qs(raw.decode("utf-8"), keep_blank_values=True,
                        max_num_fields=MAX_FORM_FIELDS, strict_parsing=True)
        data = json.loads(form["payload"][0])
    except (UnicodeDecodeError, ValueError, KeyError, IndexError):
        raise HTTPError(400, "expected a Slack interaction: a form with a JSON payload") from None
    if not isinstance(data, dict):
        raise HTTPError(400, "the payload is not a JSON object")
    return data


def _who(data: dict[str, Any]) -> tuple[str, str, str]:
    user = data.get("user") if isinstance(data.get("user"), dict) else {}
    uid = " ".join(str(user.get("id") or "").split())[:40]
    name = " ".join(str(user.get("username") or user.get("name") or "").split())[:MAX_NAME]
    if not uid:
        raise HTTPError(400, "the interaction names no Slack user")
    return uid, name, f"{name or uid} (slack {uid})"


def _reply(text: str, done: bool = True, **extra: Any) -> Response:
    return ok({"ok": done, "text": text, **extra})


async def interactions(request: Request) -> Response:
    ctx = request.app.state.ctx
    raw = await request.body()
    now = time.time()
    why = _verify(request, raw, now)
    if why:
        raise _refuse(request, why)
    if _replayed(request, raw, now):
        raise _refuse(request, "replayed: this signed request was handled already")
    data = _payload(raw)
    if data.get("type") != "block_actions":
        return _reply(f"healer handles only block_actions (got {data.get('type')!r})", False)
    actions = data.get("actions")
    action = actions[0] if isinstance(actions, list) and actions and \
        isinstance(actions[0], dict) else {}
    action_id, iid = str(action.get("action_id") or ""), str(action.get("value") or "")
    uid, name, by = _who(data)
    if action_id not in ACTIONS:
        return _reply(f"unknown action {action_id[:60]!r}", False)
    if not is_safe_name(iid):
        return _reply("the button names no incident", False)
    audit = _audit(request)
    try:
        text, extra = await _act(ctx, action_id, iid, by, audit)
    except (NotFoundError, ApprovalError, UsageError, HealerError) as exc:
        audit.write("slack_action", iid, action=action_id, user_id=uid, user_name=name,
                    outcome="refused", reason=str(exc)[:300])
        return _reply(str(exc)[:300], False)
    audit.write("slack_action", iid, action=action_id, user_id=uid, user_name=name,
                outcome="done")
    return _reply(text, True, **{"incident": iid, **extra})


async def _act(ctx: Any, action_id: str, iid: str, by: str, audit: Audit
               ) -> tuple[str, dict[str, Any]]:
    from healer.api.routes.incidents import _services
    from healer.selfheal import approvals as ap

    if action_id == "healer_approve":
        selfheal, context = _services(ctx)
        out = ap.approve(ctx.settings, ctx.store, iid, by=by, via="slack", selfheal=selfheal,
                         context=context)
        started = out.decision == "accepted"
        return (f"Approved by {by}: " + ("the healing agent started." if started else
                                         f"it starts when the gate allows ({out.decision}).")
                if out.stage == "run" else f"Approved by {by}: {out.message}."), out.as_dict()
    if action_id == "healer_deny":
        out = ap.deny(ctx.settings, ctx.store, iid, by=by, via="slack")
        return f"Denied by {by}: the incident is resolved.", out.as_dict()
    ledger = Ledger(ctx.store, audit=audit)
    if action_id == "healer_ack":
        ledger.acknowledge(iid, by=by, via="slack")
        return f"Acknowledged by {by}.", {}
    made = silence_incident(ctx.store, ledger, iid, seconds=SILENCE_S, author=by,
                            comment="Silence 1h from Slack", audit=audit)
    return f"Silenced for 1 h by {by} ({made['id']}).", {"silence": made["id"]}


def routes(ctx: Any) -> list[BaseRoute]:
    return [route(PATH, interactions, methods=("POST",), tag="chat",
                  summary="Slack's buttons on healer's messages (approve, deny, acknowledge, "
                          "silence 1 h); authenticated by X-Slack-Signature, not the token",
                  responses={200: "Handled (ok false: refused, with the reason)",
                             400: "Not a Slack interaction",
                             401: "Missing, forged or stale signature, or a replay; or no "
                                  "webhooks.slack_signing_secret"})]
