"""The C library calls the bus makes that Python's ``os`` lacks: inotify, and a rename that
never replaces.

``rename_noreplace`` is ``renameat2(RENAME_NOREPLACE)``: one system call that moves a file and
fails if the name is taken, where a check first (``stat``) and a rename after cost two calls
and leave a gap between them. It answers None where the kernel, the file system or the C
library lacks it; the caller then moves the file the portable way.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os

RENAME_NOREPLACE = 1
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP}


@functools.cache
def libc() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    for name, args in (("inotify_init1", [ctypes.c_int]),
                       ("inotify_add_watch", [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]),
                       ("renameat2", [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                                      ctypes.c_char_p, ctypes.c_uint])):
        if hasattr(lib, name):
            getattr(lib, name).argtypes = args
    return lib


_works = True  # until the system says renameat2 is not there


def rename_noreplace(src_fd: int, name: str, dst_fd: int, dest: str) -> bool | None:
    """Move ``name`` (in folder ``src_fd``) to ``dest`` (in ``dst_fd``) unless ``dest``
    exists: True when moved, False when the name is taken, None when this system cannot
    say (no renameat2). ``FileNotFoundError`` if ``name`` is gone; other errors as
    ``OSError``."""
    global _works
    lib = libc()
    if not _works or lib is None or not hasattr(lib, "renameat2"):
        return None
    if lib.renameat2(src_fd, os.fsencode(name), dst_fd, os.fsencode(dest),
                     RENAME_NOREPLACE) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.EEXIST:
        return False
    if err in _UNSUPPORTED:
        _works = False
        return None
    raise OSError(err, os.strerror(err), name)
