"""The dashboard's routes: pages at ``/`` and ``/ui/…``, live events, login, the session list
(``GET /ui/sessions``, JSON), the actions (mark handled, heal again, approve, deny,
acknowledge, silence an incident 1 h, add and expire a silence, end a session) and logout.

Every route is made by ``_page``, ``_action`` or ``_public`` — so none can forget its check:
pages need read access, actions a logged-in session and its CSRF token, and only the login
form and the vendored static files are public. Every answer carries the security headers
(``SECURITY_HEADERS``: a Content-Security-Policy without inline scripts or styles, no
framing, no referrer to other sites, no sniffing) and ``Cache-Control: no-store`` unless it
is a static file.
The routes are left out of ``/openapi.json`` (``include_in_schema=False``): they are HTML for
people, not the JSON API.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import BaseRoute, Route

from healer.api.dashboard import actions, live, panels
from healer.api.dashboard import incidents as inc_view
from healer.api.dashboard.auth import ACT, COOKIE, NONE, DashboardAuth
from healer.api.dashboard.render import render
from healer.api.dashboard.sessions import Sessions
from healer.api.throttle import client_key, retry_after_header
from healer.core import seeds
from healer.core.audit import AUDIT_FILE
from healer.core.names import is_safe_name
from healer.errors import HealerError, NotFoundError, UsageError

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
STATIC_FILES = {
    "htmx.min.js": "text/javascript", "htmx-ext-sse.min.js": "text/javascript",
    "dashboard.js": "text/javascript", "dashboard.css": "text/css",
    "favicon.svg": "image/svg+xml",
    "LICENSE-htmx.txt": "text/plain", "LICENSE-htmx-ext-sse.txt": "text/plain",
}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Resource-Policy": "same-origin",
}
MAX_FORM_FIELDS = 10
_SID = re.compile(r"[0-9a-f]{16}")

Handler = Callable[[Request], Awaitable[Response]]
View = Callable[[Request, int], Awaitable[Response]]


def _headers(extra: dict[str, str] | None = None, *, cache: str = "no-store") -> dict[str, str]:
    return {**SECURITY_HEADERS, "Cache-Control": cache, **(extra or {})}


def _local(target: str) -> str:
    """``target`` if it is a path on this site (a ``next=`` after login), else ``/``."""
    if target.startswith("/") and not target.startswith(("//", "/\\")) and \
            all(c.isprintable() and c not in "\\\r\n" for c in target) and len(target) < 2000:
        return target
    return "/"


class Dashboard:
    def __init__(self, ctx: Any):
        self.ctx = ctx
        api = ctx.settings.api
        self.auth = DashboardAuth(
            api.token, api.host,
            Sessions(ctx.store, api.token, ttl_s=api.session_ttl_s,
                     max_sessions=api.max_sessions),
            bearer=ctx.throttles.bearer, login=ctx.throttles.login)
        self.live = live.Broadcaster(self._marks)
        ctx.services.setdefault("dashboard", self)
        self._attach()

    # -- wiring to the pipeline ------------------------------------------------------------

    def _attach(self) -> None:
        """Wake the live watcher from the pipeline's own events, when it runs here."""
        loop = self.ctx.services.get("loop")
        bus = getattr(loop, "bus", None)
        if bus is not None:
            bus.subscribe(self.live.wake)
            bus.subscribe_seeds(self.live.wake)
        fleet = self.ctx.services.get("fleet")
        listen = getattr(getattr(fleet, "healer", None), "listen", None)
        if listen is not None:
            listen(self.live.wake)

    def close(self) -> None:
        self.live.close()

    def _marks(self) -> dict[str, str]:
        s, store = self.ctx.settings, self.ctx.store
        human = inc_view.human_folder(s)
        stats = (store.stamp("incident-stats", "all"), store.stamp("incident-index", "recent"))
        sessions = store.members("sessions-active")
        fleet = panels.fleet_status(self.ctx.services, store)
        peers = {n: (p.get("watchdog"), p.get("healing"), (p.get("probe") or {}).get("at"),
                     (p.get("episode") or {}).get("state"),
                     int((p.get("heartbeat_age_s") or 0) // 5))
                 for n, p in (fleet.get("peers") or {}).items()}
        loop = self.ctx.services.get("loop")
        bus = loop.status()["bus"] if loop is not None else live.file_mark(
            s.state_path / "loop.json")
        return {
            "incidents": live.digest(stats, live.file_mark(s.state_path / AUDIT_FILE)),
            "human": live.digest(live.names_mark(human), live.names_mark(human / "archive")),
            "fleet": live.digest(peers, len(fleet.get("events") or []),
                                 len(fleet.get("deliveries") or [])),
            "plays": live.digest(sessions, [store.stamp("sessions", p) for p in sessions]),
            "healer": live.digest(bus, store.stamp("heal-admission", "gate"),
                                  live.names_mark(s.results_path / "rejected")),
        }

    # -- responses -------------------------------------------------------------------------

    def _page_html(self, request: Request, template: str, access: int, *, topics: str,
                   status: int = 200, **data: Any) -> Response:
        session = self.auth.session_of(request)
        text = render(template, request=request, access=access, can_act=access >= ACT,
                      csrf=self.auth.csrf_token(session) if session else "",
                      can_log_in=self.auth.can_log_in, topics=topics,
                      self_url=request.url.path + (f"?{request.url.query}"
                                                   if request.url.query else ""),
                      waiting=len(seeds.inbox(self.ctx.settings.fleet_path, seeds.HUMAN)),
                      **data)
        return HTMLResponse(text, status_code=status, headers=_headers())

    def _problem(self, request: Request, access: int, code: int, reason: str) -> Response:
        return self._page_html(request, "problem.html", access, topics="", status=code,
                               code=code, reason=reason)

    def _sessions(self, request: Request) -> list[dict[str, Any]]:
        current = self.auth.session_id(request)
        return [{**s.to_json(), "current": s.id == current}
                for s in self.auth.sessions.list()]

    def _to_login(self, request: Request) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if request.headers.get("hx-request"):
            # A live refresh after the session ended: a full page load goes to the form.
            return Response(status_code=401, headers=_headers({"HX-Redirect": "/ui/login"}))
        return RedirectResponse(f"/ui/login?next={quote(target, safe='/')}", 303,
                                headers=_headers())

    async def _form(self, request: Request) -> dict[str, str]:
        body = (await request.body()).decode("utf-8", "replace")
        try:
            pairs = parse_qsl(body, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
        except ValueError:
            return {}
        return dict(pairs)

    # -- route makers: every route passes one of these ---------------------------------------

    def _page(self, path: str, view: View) -> Route:
        async def handler(request: Request) -> Response:
            access = self.auth.access(request)
            if access == NONE:
                if not self.auth.can_log_in:
                    return self._problem(request, NONE, 403, "healer is bound off loopback "
                                         "without api.token: the dashboard is closed")
                return self._to_login(request)
            try:
                return await view(request, access)
            except NotFoundError as exc:
                return self._problem(request, access, 404, str(exc))
            except (UsageError, HealerError) as exc:
                return self._problem(request, access, 400, str(exc))

        return Route(path, handler, methods=["GET"], include_in_schema=False)

    def _action(self, path: str,
                act: Callable[[Request, dict[str, str]], Awaitable[str | Response]]) -> Route:
        async def handler(request: Request) -> Response:
            form = await self._form(request)
            session = self.auth.session_of(request)
            access = self.auth.access(request)
            if not session:
                why = ("log in with the API token to act" if self.auth.can_log_in else
                       "actions need api.token (set it, restart healer and log in)")
                return self._problem(request, access, 403, why)
            if not self.auth.csrf_ok(session, form.get("csrf", "")):
                return self._problem(request, access, 403, "missing or wrong CSRF token: "
                                     "reload the page and try again")
            try:
                target = await act(request, form)
            except NotFoundError as exc:
                return self._problem(request, access, 404, str(exc))
            except (UsageError, HealerError, OSError) as exc:
                return self._problem(request, access, 400, str(exc))
            if isinstance(target, Response):
                return target
            return RedirectResponse(target, 303, headers=_headers())

        return Route(path, handler, methods=["POST"], include_in_schema=False)

    @staticmethod
    def _public(path: str, handler: Handler, methods: tuple[str, ...] = ("GET",)) -> Route:
        return Route(path, handler, methods=list(methods), include_in_schema=False)

    # -- views -----------------------------------------------------------------------------

    async def incidents(self, request: Request, access: int) -> Response:
        f = inc_view.Filters.parse(request.query_params)
        data = await asyncio.to_thread(inc_view.incident_list, self.ctx.store, f)
        return self._page_html(request, "incidents.html", access, topics="sse:incidents",
                               **data)

    async def incident(self, request: Request, access: int) -> Response:
        iid = request.path_params["id"]
        if not is_safe_name(iid):
            raise UsageError("not an incident id")
        data = await asyncio.to_thread(inc_view.incident_detail, self.ctx.settings,
                                       self.ctx.store, iid)
        if data is None:
            raise NotFoundError("incident", iid)
        done = request.query_params.get("done", "")
        notice = {"approved": "Approved: recorded in the audit trail with your session.",
                  "denied": "Denied: the incident is resolved.",
                  "acknowledged": "Acknowledged: recorded with your session.",
                  "silenced": "Silenced for 1 h (see Silences to expire it)."}.get(done, "")
        return self._page_html(request, "incident.html", access, topics="sse:incidents",
                               notice=notice, **data)

    async def human(self, request: Request, access: int) -> Response:
        items = await asyncio.to_thread(inc_view.inbox, self.ctx.settings)
        done = request.query_params.get("done", "")
        name = request.query_params.get("file", "")
        notice = ""
        if done in ("handled", "heal-again") and seeds.NAME_RE.fullmatch(name):
            notice = (f"{name} marked handled (moved to archive/)" if done == "handled" else
                      f"{name} handed back to healer: the incident is open again")
        return self._page_html(request, "human.html", access, topics="sse:human", items=items,
                               notice=notice, folder=str(inc_view.human_folder(
                                   self.ctx.settings)))

    async def silences(self, request: Request, access: int) -> Response:
        expired = request.query_params.get("expired", "") == "1"
        items = await asyncio.to_thread(actions.silences, self.ctx.store, expired)
        done = request.query_params.get("done", "")
        notice = {"added": "Silence added.", "expired": "Silence expired."}.get(done, "")
        return self._page_html(request, "silences.html", access, topics="sse:incidents",
                               silences=items, expired=expired, notice=notice)

    async def fleet(self, request: Request, access: int) -> Response:
        status = panels.fleet_status(self.ctx.services, self.ctx.store)  # in memory: no thread
        matrix = panels.fleet_matrix(self.ctx.settings, status)
        return self._page_html(request, "fleet.html", access, topics="sse:fleet", **matrix)

    async def plays(self, request: Request, access: int) -> Response:
        data = await asyncio.to_thread(panels.plays, self.ctx.store)
        return self._page_html(request, "plays.html", access, topics="sse:plays", **data)

    async def healer(self, request: Request, access: int) -> Response:
        data = await asyncio.to_thread(panels.healer_health, self.ctx.settings,
                                       self.ctx.services, self.ctx.store)
        sessions = self._sessions(request) if self.auth.can_log_in else []
        ended = request.query_params.get("ended", "")
        return self._page_html(request, "healer.html", access, topics="sse:healer",
                               sessions=sessions, ended=ended if _SID.fullmatch(ended) else "",
                               **data)

    async def session_list(self, request: Request, access: int) -> Response:
        """The live sessions as JSON, for scripts (read access): never their secrets."""
        return JSONResponse({"sessions": self._sessions(request)}, headers=_headers())

    async def events(self, request: Request, access: int) -> Response:
        if self.live.full:
            return Response("too many live pages open\n", 503, media_type="text/plain",
                            headers=_headers({"Retry-After": "10"}))
        return StreamingResponse(self.live.stream(request.is_disconnected),
                                 media_type="text/event-stream",
                                 headers=_headers({"X-Accel-Buffering": "no"}))

    # -- actions ---------------------------------------------------------------------------

    async def handled(self, request: Request, form: dict[str, str]) -> str:
        name = request.path_params["name"]
        await asyncio.to_thread(actions.mark_handled, self.ctx.settings, name, by="dashboard")
        self.live.wake()
        return f"/ui/human?done=handled&file={quote(name)}"

    async def heal_again(self, request: Request, form: dict[str, str]) -> str:
        name = request.path_params["name"]
        await asyncio.to_thread(actions.heal_again, self.ctx.settings, self.ctx.store, name,
                                by="dashboard")
        self.live.wake()
        return f"/ui/human?done=heal-again&file={quote(name)}"

    async def approve(self, request: Request, form: dict[str, str]) -> str:
        return await self._verdict(request, form, True)

    async def deny(self, request: Request, form: dict[str, str]) -> str:
        return await self._verdict(request, form, False)

    def _who(self, request: Request, form: dict[str, str]) -> str:
        name = " ".join(form.get("by", "").split())[:60]
        tag = f"dashboard session {self.auth.session_id(request)[:8]}"  # the list shows 16
        return f"{name} ({tag})" if name else tag

    async def ack(self, request: Request, form: dict[str, str]) -> str:
        iid = request.path_params["id"]
        if not is_safe_name(iid):
            raise UsageError("not an incident id")
        await asyncio.to_thread(actions.acknowledge, self.ctx.settings, self.ctx.store, iid,
                                by=self._who(request, form))
        self.live.wake()
        return f"/ui/incidents/{quote(iid)}?done=acknowledged"

    async def silence_incident(self, request: Request, form: dict[str, str]) -> str:
        iid = request.path_params["id"]
        if not is_safe_name(iid):
            raise UsageError("not an incident id")
        await asyncio.to_thread(actions.silence_incident, self.ctx.settings, self.ctx.store,
                                iid, by=self._who(request, form))
        self.live.wake()
        return f"/ui/incidents/{quote(iid)}?done=silenced"

    async def add_silence(self, request: Request, form: dict[str, str]) -> str:
        await asyncio.to_thread(actions.add_silence, self.ctx.settings, self.ctx.store, form,
                                by=self._who(request, form))
        self.live.wake()
        return "/ui/silences?done=added"

    async def expire_silence(self, request: Request, form: dict[str, str]) -> str:
        await asyncio.to_thread(actions.expire_silence, self.ctx.settings, self.ctx.store,
                                request.path_params["sid"], by=self._who(request, form))
        self.live.wake()
        return "/ui/silences?done=expired"

    async def end_session(self, request: Request, form: dict[str, str]) -> str:
        sid = request.path_params["sid"]
        if not _SID.fullmatch(sid):
            raise UsageError("not a session id")
        if not self.auth.sessions.end(sid):
            raise NotFoundError("dashboard session", sid)
        log.info("dashboard session %s ended by session %s", sid, self.auth.session_id(request))
        return f"/ui/healer?ended={sid}#h-sessions"

    async def _verdict(self, request: Request, form: dict[str, str], approve: bool) -> str:
        from healer.api.routes.incidents import _services

        iid = request.path_params["id"]
        if not is_safe_name(iid):
            raise UsageError("not an incident id")
        name = " ".join(form.get("by", "").split())[:60]
        tag = f"dashboard session {self.auth.session_id(request)[:8]}"  # the list shows 16
        by = f"{name} ({tag})" if name else tag
        # In the event loop: an approved run starts as a task of this server.
        out = actions.verdict(self.ctx.settings, self.ctx.store, iid, approve=approve, by=by,
                              comment=form.get("comment", "")[:1000],
                              services=_services(self.ctx))
        self.live.wake()
        return f"/ui/incidents/{quote(iid)}?done={out['verdict']}"

    async def logout(self, request: Request, form: dict[str, str]) -> Response:
        self.auth.sessions.end(self.auth.session_id(request))
        resp = RedirectResponse("/ui/login?bye=1", 303, headers=_headers())
        resp.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return resp

    # -- login -----------------------------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        return self._login_page(request, "", 200)

    def _login_page(self, request: Request, error: str, status: int,
                    headers: dict[str, str] | None = None) -> Response:
        nxt = _local(request.query_params.get("next", "/"))
        page = self._page_html(request, "login.html", self.auth.access(request), topics="",
                               status=status, error=error, next=nxt,
                               bye=bool(request.query_params.get("bye")))
        page.headers.update(headers or {})
        return page

    async def login(self, request: Request) -> Response:
        form = await self._form(request)
        if not self.auth.can_log_in:
            return self._login_page(request, "no api.token is set: there is nothing to log in "
                                    "with (the dashboard is read-only on loopback)", 400)
        client = client_key(request.scope)
        wait = self.auth.login.retry_after(client)
        if wait > 0:
            after = retry_after_header(wait)
            return self._login_page(request, "too many wrong tokens from your address: try "
                                    f"again in {after['Retry-After']} s", 429, after)
        if not self.auth.check_token(form.get("token", "")):
            wait = self.auth.login.failed(client)
            if wait > 0:
                log.warning("wrong dashboard logins from %s: it waits %.3g s", client, wait)
            return self._login_page(request, "wrong token", 401)
        # A new session every login; the one this browser brought (if any) ends: a cookie
        # planted before the login is worth nothing after it.
        self.auth.sessions.end(self.auth.session_id(request))
        sid, cookie = await asyncio.to_thread(
            self.auth.sessions.create, client, request.headers.get("user-agent", ""))
        log.info("dashboard login from %s: session %s", client, sid)
        resp = RedirectResponse(_local(form.get("next", "/")), 303, headers=_headers())
        resp.set_cookie(COOKIE, cookie, max_age=int(self.auth.sessions.ttl_s), path="/",
                        httponly=True, samesite="strict", secure=request.url.scheme == "https")
        return resp

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        media = STATIC_FILES.get(name)
        if media is None:
            return Response("no such file\n", 404, media_type="text/plain", headers=_headers())
        body = await asyncio.to_thread((STATIC / name).read_bytes)
        return Response(body, media_type=media, headers=_headers(cache="public, max-age=300"))

    # -- the table -------------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        out: list[BaseRoute] = [
            self._page("/", self.incidents),
            self._page("/ui/incidents", self.incidents),
            self._page("/ui/incidents/{id}", self.incident),
            self._page("/ui/human", self.human),
            self._page("/ui/silences", self.silences),
            self._page("/ui/fleet", self.fleet),
            self._page("/ui/plays", self.plays),
            self._page("/ui/healer", self.healer),
            self._page("/ui/events", self.events),
            self._page("/ui/sessions", self.session_list),
            self._action("/ui/human/{name}/handled", self.handled),
            self._action("/ui/human/{name}/heal-again", self.heal_again),
            self._action("/ui/incidents/{id}/approve", self.approve),
            self._action("/ui/incidents/{id}/deny", self.deny),
            self._action("/ui/incidents/{id}/ack", self.ack),
            self._action("/ui/incidents/{id}/silence", self.silence_incident),
            self._action("/ui/silences", self.add_silence),
            self._action("/ui/silences/{sid}/expire", self.expire_silence),
            self._action("/ui/sessions/{sid}/end", self.end_session),
            self._action("/ui/logout", self.logout),
            self._public("/ui/login", self.login_form),
            self._public("/ui/login", self.login, ("POST",)),
            self._public("/ui/static/{name}", self.static),
        ]
        return out


def routes(ctx: Any) -> list[BaseRoute]:
    """``ROUTE_PROVIDERS`` entry: the dashboard's routes for the app of ``ctx``."""
    dash = Dashboard(ctx)
    closing = getattr(ctx, "closing", None)
    if closing is not None:
        closing.append(dash.close)
    return dash.routes()
