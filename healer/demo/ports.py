"""Free loopback ports for the servers the demo fleet (and the tests) start."""

from __future__ import annotations

import functools
import random
import socket
from pathlib import Path

_RANDOM = random.SystemRandom()  # processes forked alike (xdist workers) must not pick alike


def free_port(host: str = "127.0.0.1", kind: int = socket.SOCK_STREAM) -> int:
    """A port nothing is bound to, for a server about to start. Taken below the kernel's
    ephemeral range: a port ``bind(0)`` picks is one the kernel also hands out as the local
    end of outgoing connections, and such a connection can take it before the server binds
    it (a loop then exits "already in use")."""
    low = _ephemeral_low()
    for _ in range(200):
        port = _RANDOM.randrange(max(1024, low - 12000), low)
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue  # in use, or lingering: another one
            return port
    with socket.socket(socket.AF_INET, kind) as s:  # the range is crowded: the kernel chooses
        s.bind((host, 0))
        return int(s.getsockname()[1])


@functools.cache
def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # where Linux's default range starts
