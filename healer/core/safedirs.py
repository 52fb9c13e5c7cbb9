"""Directories healer writes into: opened without following symlinks, private, healer's own.

Another local user must not be able to redirect what healer writes (a symlink planted where a
folder should be) nor feed it files (a folder they created first, or may write into). So
every directory healer creates or writes into — state dir, results dir with ``applied/`` and
``rejected/``, fleet messages dir with ``human/``, each peer's inbox and ``archive/``, agent run
folders — is opened here, one component at a time from ``/``, each with ``openat`` relative to
its parent's descriptor, so no check can race a rename (OpenSSH ``StrictModes``, systemd
``RuntimeDirectory=``):

    component                            allowed when
    ----------------------------------   ---------------------------------------------------------
    an existing ancestor of the dir      owned by root or by healer's user; not writable by
      (``/``, ``/tmp``, ``/home/me``)      group/others unless sticky (``/tmp``); a symlink only if
                                           root owns it (``/var/run -> /run``)
    the configured dir itself, and       a real directory (never a symlink), owned by healer's
      every folder below it                user, not writable by group/others
    a folder healer creates              made with mode 0700, then checked as above

A refusal is ``UnsafeDirError(path, reason)``: one line, the path and why. Files go in with
``create_file`` (``O_CREAT | O_EXCL | O_NOFOLLOW``) and move with ``move`` (``renameat`` between
two checked descriptors), so neither a name nor a folder in between can be swapped.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from healer.errors import UnsafeDirError

PRIVATE = 0o700
MAX_SYMLINKS = 40  # as the kernel's own limit on one lookup
# O_PATH: walk through ancestors we may search but not read (/home is often 0711).
_WALK = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _who(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _check(st: os.stat_result, path: str, *, own: bool) -> None:
    """``own``: the configured dir or below (strict); else an ancestor (system paths pass)."""
    me = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirError(path, "not a directory")
    if own:
        if st.st_uid != me:
            raise UnsafeDirError(path, f"owned by {_who(st.st_uid)}, not by {_who(me)} "
                                       "who runs healer")
        if st.st_mode & 0o022:
            raise UnsafeDirError(path, f"writable by group/others (mode "
                                       f"{stat.S_IMODE(st.st_mode):04o}); chmod go-w it")
        return
    if st.st_uid not in (0, me):
        raise UnsafeDirError(path, f"a folder above it is owned by {_who(st.st_uid)}")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise UnsafeDirError(path, f"a folder above it is writable by group/others without "
                                   f"the sticky bit (mode {stat.S_IMODE(st.st_mode):04o})")


def _step(parent: int, name: str, shown: str, *, own: bool, create: bool, final: bool,
          mode: int) -> tuple[int, str | None]:
    """Open ``name`` under ``parent``: (fd, None), or (-1, link target) for an ancestor symlink
    root owns. Creates it (``mode``) when missing and ``create``."""
    for _ in range(3):  # a folder made or removed by someone else between the calls
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            if not create:
                raise UnsafeDirError(shown, "does not exist") from None
            try:
                os.mkdir(name, mode, dir_fd=parent)
            except FileExistsError:
                continue
            own = True  # what healer made is healer's, whatever its parent is
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            if own:
                raise UnsafeDirError(shown, "is a symlink (healer does not follow symlinks "
                                            "in the directories it writes)")
            if st.st_uid != 0:
                raise UnsafeDirError(shown, f"a folder above it is a symlink owned by "
                                            f"{_who(st.st_uid)} (only root's are followed)")
            return -1, os.readlink(name, dir_fd=parent)
        try:
            fd = os.open(name, (_OPEN if final else _WALK | os.O_NOFOLLOW), dir_fd=parent)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UnsafeDirError(shown, f"cannot open: {exc.strerror}") from None
        try:
            _check(os.fstat(fd), shown, own=own)
        except BaseException:
            os.close(fd)
            raise
        return fd, None
    raise UnsafeDirError(shown, "keeps changing while healer opens it")


def open_dir(path: Path | str, *, create: bool = True, mode: int = PRIVATE) -> int:
    """A descriptor of the checked directory ``path`` (the caller closes it).

    ``path`` is the configured dir: it and what healer creates are checked strictly, the
    existing folders above it leniently (see the table above). Missing folders are created
    with ``mode`` when ``create``; else ``UnsafeDirError(..., "does not exist")``.
    """
    full = os.path.abspath(os.fspath(path))
    # (name, is it the configured dir itself), last first; a root-owned ancestor symlink's
    # target is spliced in as more ancestors.
    todo = [(p, False) for p in reversed(Path(full).parts[1:])]
    if todo:
        todo[0] = (todo[0][0], True)
    stack = [os.open("/", _WALK)]
    links = 0
    try:
        _check(os.fstat(stack[0]), "/", own=not todo)
        if not todo:
            return os.open("/", _OPEN)
        while todo:
            name, own = todo.pop()
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                continue
            if name in ("", "."):
                continue
            fd, target = _step(stack[-1], name, full, own=own, create=create,
                               final=not todo, mode=mode)
            if target is None:
                stack.append(fd)
                continue
            links += 1
            if links > MAX_SYMLINKS:
                raise UnsafeDirError(full, "too many symlinks above it")
            if target.startswith("/"):
                while len(stack) > 1:
                    os.close(stack.pop())
            todo.extend((p, False) for p in reversed(target.split("/")))
        return stack.pop()
    finally:
        for fd in stack:
            os.close(fd)


def open_subdir(dir_fd: int, name: str, *, create: bool = True, mode: int = PRIVATE,
                shown: str = "") -> int:
    """A descriptor of the folder ``name`` (one component) inside the checked ``dir_fd``,
    checked strictly; created with ``mode`` when missing and ``create``."""
    if not name or "/" in name or name in (".", ".."):
        raise UnsafeDirError(shown or name, "not a single folder name")
    fd, _ = _step(dir_fd, name, shown or name, own=True, create=create, final=True, mode=mode)
    return fd


@contextlib.contextmanager
def opened(path: Path | str, *subdirs: str, create: bool = True) -> Iterator[int]:
    """``with opened(results, "applied") as fd:`` — the checked dir (and subdirs), closed
    after."""
    fd = open_dir(path, create=create)
    try:
        shown = os.fspath(path)
        for sub in subdirs:
            shown = os.path.join(shown, sub)
            inner = open_subdir(fd, sub, create=create, shown=shown)
            os.close(fd)
            fd = inner
        yield fd
    finally:
        os.close(fd)


def ensure_private_dir(path: Path | str, *subdirs: str) -> Path:
    """Create (0700) or check ``path`` and its ``subdirs``; ``UnsafeDirError`` if unsafe."""
    with opened(path, *subdirs):
        pass
    return Path(path).joinpath(*subdirs)


def check_dir(path: Path | str, *subdirs: str) -> str | None:
    """Why ``path`` (and its subdirs, where they exist) would be refused; None if it is fine.
    Creates nothing (for ``healer doctor``)."""
    try:
        fd = open_dir(path, create=False)
    except UnsafeDirError as exc:
        return "does not exist yet (healer creates it, 0700)" if exc.reason == "does not exist" \
            else str(exc.reason)
    try:
        for sub in subdirs:
            try:
                os.close(open_subdir(fd, sub, create=False, shown=os.path.join(path, sub)))
            except UnsafeDirError as exc:
                if exc.reason != "does not exist":
                    return f"{sub}/: {exc.reason}"
    finally:
        os.close(fd)
    return None


def create_file(dir_fd: int, name: str, data: bytes, *, mode: int = 0o600,
                durable: bool = True) -> bool:
    """Create ``name`` in ``dir_fd`` with ``data`` (``O_CREAT | O_EXCL | O_NOFOLLOW``): never
    through a symlink, never over another file. False if the name exists."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode, dir_fd=dir_fd)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        raise
    return True


def exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def move(src_fd: int, name: str, dst_fd: int, dst_name: str | None = None) -> str:
    """Move ``name`` from one checked folder to another without replacing anything: a taken
    name gets ``.2``, ``.3`` … Returns the name it got."""
    base = dst_name or name
    dest, n = base, 1
    while True:
        if not exists(dst_fd, dest):
            # link+unlink would refuse a taken name atomically, but symlinks and other
            # users' files cannot always be hard-linked; both dirs are healer's own.
            os.rename(name, dest, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            return dest
        n += 1
        dest = f"{base}.{n}"


def move_aside(folder: Path | str, name: str, sub: str, *, dest_name: str | None = None,
               reason: str | None = None) -> str:
    """Move ``name`` from the checked ``folder`` into its checked ``sub``/ (``move``), with a
    ``<name>.reason`` beside it when ``reason`` is given (best effort: the move is what
    counts). Returns the name it got; ``FileNotFoundError`` if it vanished."""
    with opened(folder) as src, opened(folder, sub) as dst:
        dest = move(src, name, dst, dest_name)
        if reason is not None:
            with contextlib.suppress(OSError):  # whole or not at all: readers follow at once
                replace_file(dst, dest + ".reason", reason.encode(), mode=0o600)
    return dest


def replace_file(dir_fd: int, name: str, data: bytes, *, mode: int = 0o644) -> None:
    """Atomically replace ``name`` in the checked ``dir_fd`` (a symlink at ``name`` is
    replaced, never followed)."""
    for _ in range(100):
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        if create_file(dir_fd, tmp, data, mode=mode):
            break
    else:
        raise FileExistsError(f"no free temp name beside {name}")
    try:
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def own_dirs(settings: Any) -> list[tuple[str, Path, tuple[str, ...]]]:
    """The folders every start checks: (label, configured dir, subdirs healer writes).

    ``settings`` is healer's Settings, typed ``Any`` so that core does not import config.
    """
    return [
        ("state", settings.state_path, ()),
        ("results", settings.results_path, ("applied", "rejected")),
        ("fleet messages", settings.fleet_path, ("human",)),
    ]


def ensure_own_dirs(settings: Any) -> None:
    """At every start (``healer loop``, ``serve``, ``node``): create (0700) or check healer's
    folders; ``UnsafeDirError`` names the first that is not safe. Subdirs are checked where
    they exist (``human/`` appears with the first escalation, so a person sees one waiting)."""
    for _, path, subs in own_dirs(settings):
        with opened(path) as fd:
            for sub in subs:
                try:
                    os.close(open_subdir(fd, sub, create=False, shown=os.path.join(path, sub)))
                except UnsafeDirError as exc:
                    if exc.reason != "does not exist":
                        raise
