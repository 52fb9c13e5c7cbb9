"""``healer doctor``'s GitHub line: reachable, as whom, with which scopes, how much budget.

* ``GET /rate_limit`` (free: it does not count against the limit) — reachable, and the core
  limit's remaining requests and reset;
* ``GET /user`` — the identity of a personal access token, with ``X-OAuth-Scopes`` for a
  classic one (fine-grained tokens have no scopes header: their permissions are per
  repository); an App installation token cannot read ``/user`` (403), so
  ``GET /installation/repositories`` says how many repositories it reaches, with the
  permissions it has on the first;
* each ``github.repos`` entry (up to ``MAX_REPOS``): readable or not.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from healer.errors import HealerError
from healer.play.github.client import check_api_url, headers, split_repo

MAX_REPOS = 5


def health(settings: Any) -> tuple[bool, str] | None:
    """(ok, detail) for ``healer doctor``; None when the watcher is not configured."""
    gh = settings.github
    if not (gh.token or gh.repos or gh.webhook_secret):
        return None
    hook = "webhook secret set" if gh.webhook_secret else "no webhook secret (webhook off)"
    try:
        url = check_api_url(gh.api_url)
    except HealerError as exc:
        return False, str(exc)
    with httpx.Client(base_url=url, headers=headers(gh.token), timeout=gh.timeout_s,
                      follow_redirects=False) as http:
        try:
            limits = http.get("/rate_limit")
        except httpx.HTTPError as exc:
            return False, f"{url} unreachable ({type(exc).__name__}); {hook}"
        if limits.status_code == 401:
            return False, f"{url}: the token was refused (401 Bad credentials); {hook}"
        ok, who = _identity(http, bool(gh.token))
        parts = [f"{url} as {who}", _budget(limits), *(_repos(http, gh.repos)), hook]
    ok = ok and limits.status_code == 200 and not any(p.endswith("NOT readable")
                                                      for p in parts)
    return ok, "; ".join(p for p in parts if p)


def _identity(http: httpx.Client, has_token: bool) -> tuple[bool, str]:
    if not has_token:
        return True, "anonymous (no token: 60 requests an hour, public repositories only)"
    try:
        user = http.get("/user")
        if user.status_code == 200:
            login = str(user.json().get("login", "?"))
            scopes = user.headers.get("x-oauth-scopes")
            if scopes is None:
                return True, f"{login} (fine-grained token or App user token: permissions " \
                             "are per repository, no X-OAuth-Scopes)"
            return True, f"{login} (scopes: {scopes.strip() or 'none'})"
        if user.status_code == 403:
            inst = http.get("/installation/repositories", params={"per_page": 1})
            if inst.status_code == 200:
                data = inst.json()
                repos = data.get("repositories") or [{}]
                perms = ", ".join(k for k, v in (repos[0].get("permissions") or {}).items()
                                  if v) or "?"
                return True, (f"a GitHub App installation ({data.get('total_count', 0)} "
                              f"repositories; on {repos[0].get('full_name', '?')}: {perms})")
        return False, f"an unknown identity (GET /user: HTTP {user.status_code})"
    except (httpx.HTTPError, ValueError) as exc:
        return False, f"an unknown identity ({type(exc).__name__})"


def _budget(resp: httpx.Response) -> str:
    try:
        core = resp.json()["resources"]["core"]
        left = max(0, int(core["reset"]) - int(time.time()))
        return (f"rate limit {core['remaining']}/{core['limit']} left, resets in "
                f"{left // 60} min")
    except (ValueError, KeyError, TypeError):
        return f"rate limit unknown (GET /rate_limit: HTTP {resp.status_code})"


def _repos(http: httpx.Client, repos: list[str]) -> list[str]:
    out = []
    for full in repos[:MAX_REPOS]:
        try:
            owner, name = split_repo(full)
            code = http.get(f"/repos/{owner}/{name}").status_code
        except (HealerError, httpx.HTTPError):
            code = 0
        out.append(f"{full} {'readable' if code == 200 else 'NOT readable'}")
    return out
