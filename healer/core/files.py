"""The one way healer writes files: temp file in the same folder, fsync, rename.

A reader never sees half a file, and a crash leaves either the old content or the new one.
The temp file is created ``O_CREAT | O_EXCL | O_NOFOLLOW`` (a planted name or symlink is never
written through), and the rename replaces a symlink at ``path`` rather than following it.
Folders healer owns are opened with ``healer.core.safedirs`` first; this module trusts the
folder it is given.
"""

from __future__ import annotations

import contextlib
import errno
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
        try:
            _fill(fd, data, mode, durable)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def _fill(fd: int, data: bytes, mode: int | None, durable: bool) -> None:
    """``data`` into the new file ``fd``, fsynced when ``durable``, then ``mode`` (None: the
    file has it already). os.write, not a file object: a file object costs a buffer and three
    syscalls (isatty, lseek, fstat) per write, a fifth of a session start's time in the
    store."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    if durable:
        os.fsync(fd)
    if mode is not None:
        os.fchmod(fd, mode)


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
    created = _create_unnamed(name, data, mode, durable) if _UNNAMED[0] else None
    if created is None:
        tmp = _write_temp(name, data, mode, durable)
        try:
            os.link(tmp, name)
            created = True
        except FileExistsError:
            created = False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    if created and durable:
        _fsync_dir(os.path.dirname(name) or ".")
    return created


# Whether this process creates files unnamed (O_TMPFILE, Linux) and links them in through
# /proc/self/fd; False once it found it cannot (another OS, a file system without O_TMPFILE,
# no /proc): the named temp file from then on.
_UNNAMED = [hasattr(os, "O_TMPFILE")]
_UNSUPPORTED = frozenset({errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL})


def _read_umask() -> int | None:
    """The process's umask, read without setting it (os.umask would, racing other threads):
    Linux reports it in /proc/self/status since 4.7. None where it cannot be read."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


# healer never changes its umask; were it made stricter later, a file would only get fewer
# permission bits than asked for, never more.
_UMASK = _read_umask()


def _create_unnamed(path: str, data: bytes, mode: int, durable: bool) -> bool | None:
    """``atomic_create_bytes`` through a file that has no name until it is complete.

    A named temp file costs its folder an entry added, looked up and removed per write (a
    third of the kernel's time per record in a folder of thousands, measured). None when it
    did not work here: nothing was made, and the caller writes a named temp file instead,
    which also reports any real error (a missing folder, no space) as it always did.
    """
    try:
        # Made with its final mode (nobody can open a file that has no name): the fchmod is
        # needed only where the umask takes bits of it away.
        fd = os.open(os.path.dirname(path) or ".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC,
                     mode)
    except OSError as exc:
        if exc.errno in _UNSUPPORTED:
            _UNNAMED[0] = False
        return None
    try:
        _fill(fd, data, mode if _UMASK is None or mode & _UMASK else None, durable)
        # linkat(2) with AT_SYMLINK_FOLLOW on the fd's /proc link names the open file itself.
        # Python passes that flag only to linkat, which it calls only when given a dir fd:
        # the fd is given, and the kernel ignores it for an absolute path.
        os.link(f"/proc/self/fd/{fd}", path, src_dir_fd=fd, follow_symlinks=True)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno == errno.ENOENT and not os.path.isdir("/proc/self/fd"):
            _UNNAMED[0] = False
        return None
    finally:
        os.close(fd)  # an unnamed file that was not linked is gone with it
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
