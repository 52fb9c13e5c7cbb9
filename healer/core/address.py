"""The address healer is reached at, for every text it writes for people and SDKs.

A DSN, the ``curl`` line in an escalation, a dashboard link: each names an address someone
will use later, from elsewhere. It must be the one healer really serves on, never the default
it would have used. One order decides it everywhere:

1. ``api.public_url`` when configured — what people and SDKs reach (a proxy, a DNS name);
2. the address a running healer on this state dir serves on, as its ``<state>/loop.json``
   says (a command run beside ``healer serve --port 9000`` names 9000);
3. ``api.host:api.port`` as configured (inside the serving process these are the real ones:
   the API service writes a port picked by ``api.port: 0`` back into the settings).

A wildcard bind (``0.0.0.0``, ``::``) is no address anyone can reach, so this machine's name
stands in for it.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any
from urllib.parse import urlsplit

_WILDCARDS = ("", "0.0.0.0", "::", "[::]", "*")  # noqa: S104 - names, not a bind


def check_public_url(url: str) -> str:
    """``url`` without its trailing slash when it is an http(s) URL with a host, else
    ``ValueError`` saying what is wrong."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http(s) URL such as https://healer.example.com, "
                         f"got {url!r}")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"expected a base URL without credentials, query or fragment, "
                         f"got {url!r}")
    return url.strip().rstrip("/")


def base_url(host: str, port: int) -> str:
    """``http://HOST:PORT`` a person can use: a wildcard bind names this machine."""
    if host in _WILDCARDS:
        host = socket.getfqdn() or "localhost"
    host = host.strip("[]")
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def public_url(settings: Any) -> str:
    """Where healer's API is reached, from the settings alone (steps 1 and 3 above): for the
    process that serves it."""
    api = settings.api
    if api.public_url:
        return str(api.public_url).rstrip("/")
    return base_url(api.host, api.port)


def served_url(settings: Any) -> str:
    """Where healer's API is reached, for a command run beside it (steps 1-3 above)."""
    if settings.api.public_url:
        return str(settings.api.public_url).rstrip("/")
    running = _running_api(settings)
    if running:
        parts = urlsplit(running)
        if parts.hostname and parts.port:
            return base_url(parts.hostname, parts.port)
    return public_url(settings)


def _running_api(settings: Any) -> str:
    """The API address in ``<state>/loop.json`` when the loop that wrote it still runs."""
    try:
        data = json.loads((settings.state_path / "loop.json").read_text())
        if data.get("state") != "running" or not data.get("api"):
            return ""
        os.kill(int(data["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ""
    return str(data["api"])
