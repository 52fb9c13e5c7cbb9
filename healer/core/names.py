"""Validation of every name that becomes part of a path, a host or an argv.

Names come from HTTP bodies, config files, result files and agents; none of them is trusted.
Each check returns the name unchanged or raises ``UnsafeNameError`` with the reason.
"""

from __future__ import annotations

import ipaddress
import re

from healer.errors import UnsafeNameError

# Record keys, play ids, fingerprints, peer/node names: letters, digits and . _ - only,
# starting with a letter or digit, at most 128 characters.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_HOSTNAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def safe_name(name: object, what: str = "name") -> str:
    """A name that is safe as one path component and as one argv element."""
    if type(name) is str and ".." not in name and _NAME.fullmatch(name):
        return name  # the common case in one test; the checks below word what is wrong
    if not isinstance(name, str):
        raise UnsafeNameError(repr(name), what, "must be a string")
    if not name:
        raise UnsafeNameError(name, what, "must not be empty")
    if _CONTROL.search(name):
        raise UnsafeNameError(name, what, "contains control characters")
    if "/" in name or "\\" in name:
        raise UnsafeNameError(name, what, "contains a path separator")
    if ".." in name:
        raise UnsafeNameError(name, what, "contains '..'")
    if not _NAME.fullmatch(name):
        raise UnsafeNameError(
            name, what, "use 1-128 letters, digits, '.', '_' or '-', starting with a letter/digit"
        )
    return name


def is_safe_name(name: object) -> bool:
    try:
        safe_name(name)
    except UnsafeNameError:
        return False
    return True


def safe_host(host: object, what: str = "host") -> str:
    """A hostname or IP literal; never an option (``-oProxyCommand``) or a shell word."""
    if not isinstance(host, str) or not host:
        raise UnsafeNameError(repr(host), what, "must be a non-empty string")
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    if not _HOSTNAME.fullmatch(host):
        raise UnsafeNameError(host, what, "not a valid hostname or IP address")
    return host


def safe_user(user: object, what: str = "user") -> str:
    """A POSIX login name."""
    if not isinstance(user, str) or not _USER.fullmatch(user):
        raise UnsafeNameError(str(user), what, "not a valid login name")
    return user


def safe_port(port: object, what: str = "port") -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise UnsafeNameError(str(port), what, "must be an integer 1-65535")
    return port


MIN_TOKEN_CHARS = 16
"""Shortest bearer token accepted for a service reachable from other machines."""


def is_loopback_host(host: str) -> bool:
    """``localhost``, a ``*.localhost`` name (RFC 6761) or an address in 127.0.0.0/8 or ::1."""
    name = host.strip().strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
