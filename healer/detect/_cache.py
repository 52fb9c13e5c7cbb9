"""A small on-disk cache for work that only depends on content: compiled Hyperscan databases
and "this catalog file passed schema validation".

Entries are named by a sha256 of everything they depend on, so a stale entry is never used;
writes are atomic; any problem (read-only home, corrupt entry) just means no cache. Location:
``$HEALER_CACHE_DIR``, else ``$XDG_CACHE_HOME/healer``, else ``~/.cache/healer``.
"""

from __future__ import annotations

import contextlib
import os

try:  # CPython's own SHA-256: hashlib loads OpenSSL first, ~5 ms of every `healer scan`
    from _sha2 import sha256 as _sha256  # type: ignore[import-not-found]  # 3.12+
except ImportError:
    try:
        from _sha256 import sha256 as _sha256  # type: ignore[import-not-found,no-redef]
    except ImportError:
        from hashlib import sha256 as _sha256  # type: ignore[assignment]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_VERSION = b"healer-detect-cache-1"
MAX_ENTRY_BYTES = 64 << 20


def cache_dir() -> str:
    explicit = os.environ.get("HEALER_CACHE_DIR")
    if explicit:
        return os.path.expanduser(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return os.path.join(os.path.expanduser(xdg) if xdg else _home_cache(), "healer")


def _home_cache() -> str:
    home = os.path.expanduser("~")
    if home == "~":  # (as Path.home(): no HOME and no passwd entry)
        raise RuntimeError("no home directory")
    return os.path.join(home, ".cache")


def sha256(data: bytes = b"") -> Any:
    """``hashlib.sha256(data)``, without importing hashlib."""
    return _sha256(data)


def key(*parts: bytes | str) -> str:
    h = sha256(_VERSION)
    for part in parts:
        data = part.encode("utf-8", "surrogateescape") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def get(kind: str, name: str) -> bytes | None:
    try:
        with open(os.path.join(cache_dir(), "detect", f"{kind}-{name}"), "rb") as f:
            if os.fstat(f.fileno()).st_size > MAX_ENTRY_BYTES:
                return None
            return f.read()
    except (OSError, RuntimeError):  # RuntimeError: no home directory
        return None


def put(kind: str, name: str, data: bytes) -> None:
    from healer.core.files import atomic_write_bytes

    with contextlib.suppress(OSError, RuntimeError):
        atomic_write_bytes(os.path.join(cache_dir(), "detect", f"{kind}-{name}"), data,
                           mode=0o600)
