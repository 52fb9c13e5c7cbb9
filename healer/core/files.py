"""The one way healer writes files: temp file in the same folder, fsync, rename.

A reader never sees half a file, and a crash leaves either the old content or the new one.
The temp file is created ``O_CREAT | O_EXCL | O_NOFOLLOW`` (a planted name or symlink is never
written through), and the rename replaces a symlink at ``path`` rather than following it.
Folders healer owns are opened with ``healer.core.safedirs`` first; this module trusts the
folder it is given.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import Any


def _fsync_dir(folder: Path | str) -> None:
    # The rename is only durable once the directory entry is on disk.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_temp(path: str, data: bytes, mode: int, durable: bool = True) -> str:
    # O_EXCL | O_NOFOLLOW: a name someone planted (a symlink to a file of theirs or ours) is
    # never written through; a fresh random name is tried instead. Plain strings, not
    # pathlib: on the store's hot path the path objects cost more than the write.
    folder, name = os.path.split(path)
    for _ in range(100):
        tmp = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(tmp, flags, 0o600)
        except FileExistsError:
            continue
        except FileNotFoundError:  # the folder first (not on every write: a syscall saved)
            os.makedirs(folder or ".", exist_ok=True)
            fd = os.open(tmp, flags, 0o600)
        break
    else:
        raise FileExistsError(f"no free temp name beside {path}")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), mode)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def atomic_write_bytes(path: Path | str, data: bytes, *, mode: int = 0o644,
                       durable: bool = True) -> Path:
    """Replace ``path`` with ``data`` atomically and (unless ``durable`` is false: derived
    data that can be rebuilt) durably."""
    name = os.fspath(path)
    tmp = _write_temp(name, data, mode, durable)
    try:
        os.replace(tmp, name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(os.path.dirname(name) or ".")
    return path if isinstance(path, Path) else Path(path)


def atomic_create_bytes(path: Path | str, data: bytes, *, mode: int = 0o644,
                        durable: bool = True) -> bool:
    """Create ``path`` with ``data`` only if it does not exist yet; atomic and durable.

    Returns False (and writes nothing) when the file already exists. Uses link(2), which
    fails if the target exists, so content and existence appear together.
    """
    name = os.fspath(path)
    tmp = _write_temp(name, data, mode, durable)
    try:
        os.link(tmp, name)
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    if durable:
        _fsync_dir(os.path.dirname(name) or ".")
    return True


def dumps(data: Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def atomic_write_json(path: Path | str, data: Any, *, mode: int = 0o644) -> Path:
    return atomic_write_bytes(path, dumps(data), mode=mode)


def atomic_write_text(path: Path | str, text: str, *, mode: int = 0o644) -> Path:
    return atomic_write_bytes(path, text.encode(), mode=mode)


def read_json(path: Path | str) -> Any:
    with open(path, "rb") as fh:
        return json.loads(fh.read())
