"""The inside of the sandbox's network: listen on each allowed endpoint, forward to healer.

Run by bubblewrap as the sandbox's first process, with ``python -I -S`` (standard library
only: it imports nothing of healer's), before the agent::

    python -I -S bridge.py [--addr IP]... [--listen ADDR:PORT=SOCKET]... -- AGENT ARGV...

1. ``--addr``: add each IP to the sandbox's own loopback interface (a fleet peer's LAN
   address, so the agent can connect to it by that address). Needs ``CAP_NET_ADMIN``, which
   bubblewrap grants to this process only when there is such an address.
2. ``--listen``: listen on ADDR:PORT inside the sandbox (binding a port below 1024 needs
   ``CAP_NET_BIND_SERVICE``, likewise granted only then). Each connection is forwarded to the
   Unix socket SOCKET, which healer's side (``healer.agents.sandbox.relay``) serves outside and
   connects to the real endpoint.
3. Drop every capability (ambient, effective, permitted, inheritable), check that none is
   left, then fork and exec the agent: it never holds a capability. A failure here ends the
   sandbox (exit 125) before the agent starts.
4. Forward SIGTERM/SIGINT/SIGHUP to the agent, and exit with its status when it ends (its
   leftovers die with the sandbox's pid namespace).
"""

import contextlib
import os
import signal
import socket
import struct
import sys
import threading

_CHUNK = 65536
_MAX_CONNECTIONS = 64


def _fail(message: str) -> None:
    sys.stderr.write(f"healer sandbox bridge: {message}\n")
    sys.stderr.flush()
    os._exit(125)


def _split_hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def add_address(ip: str) -> None:
    """Add ``ip`` (a /32 or /128) to the loopback interface (rtnetlink RTM_NEWADDR)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    raw = socket.inet_pton(family, ip)

    def attr(kind: int, data: bytes) -> bytes:
        return struct.pack("HH", 4 + len(data), kind) + data + b"\0" * (-len(data) % 4)

    body = struct.pack("BBBBI", family, len(raw) * 8, 0, 0, socket.if_nametoindex("lo"))
    body += attr(2, raw) + attr(1, raw)  # IFA_LOCAL, IFA_ADDRESS
    flags = 0x1 | 0x4 | 0x400 | 0x200  # NLM_F_REQUEST | ACK | CREATE | EXCL
    message = struct.pack("IHHII", 16 + len(body), 20, flags, 1, 0) + body  # RTM_NEWADDR
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as nl:
        nl.bind((0, 0))
        nl.send(message)
        answer = nl.recv(4096)
    error = struct.unpack("i", answer[16:20])[0] if len(answer) >= 20 else 0
    if error:
        raise OSError(-error, os.strerror(-error))


def drop_capabilities() -> None:
    """Give up every capability for good (this process and everything it starts)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable (2 words each): none
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def capabilities_left() -> list[str]:
    """What could still give the agent a capability (from /proc/self/status): a capability
    set that is not empty, or no ``no_new_privs`` (which bubblewrap sets, so that no exec —
    of a setuid file, or as root — gains one)."""
    left = []
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("CapInh", "CapPrm", "CapEff", "CapAmb") and int(value.strip(), 16):
                left.append(key)
            elif key == "NoNewPrivs" and value.strip() != "1":
                left.append("NoNewPrivs=0")
    return left


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy until ``src`` ends (then half-close ``dst``) or either side fails (then both)."""
    how = socket.SHUT_WR
    try:
        while True:
            data = src.recv(_CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        how = socket.SHUT_RDWR
    for s in (dst,) if how == socket.SHUT_WR else (src, dst):
        with contextlib.suppress(OSError):
            s.shutdown(how)


def _serve(listener: socket.socket, path: str, slots: threading.Semaphore) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        if not slots.acquire(blocking=False):
            client.close()
            continue
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            slots.release()
            continue

        def run(a: socket.socket = client, b: socket.socket = upstream) -> None:
            other = threading.Thread(target=_pump, args=(b, a), daemon=True)
            other.start()
            _pump(a, b)
            other.join()
            a.close()
            b.close()
            slots.release()

        threading.Thread(target=run, daemon=True).start()


def main(argv: list[str]) -> None:
    if "--" not in argv:
        _fail("usage: bridge.py [--addr IP]... [--listen ADDR:PORT=SOCKET]... -- ARGV...")
    cut = argv.index("--")
    options, command = argv[:cut], argv[cut + 1:]
    if not command or len(options) % 2:
        _fail("no command, or an option without its value")
    addresses, listens = [], []
    for flag, value in zip(options[::2], options[1::2], strict=True):
        if flag == "--addr":
            addresses.append(value)
        elif flag == "--listen":
            where, _, path = value.partition("=")
            listens.append((*_split_hostport(where), path))
        else:
            _fail(f"unknown option {flag}")
    for ip in addresses:
        try:
            add_address(ip)
        except OSError as exc:
            _fail(f"cannot add {ip} to the loopback interface: {exc}")
    listeners = []
    for host, port, path in listens:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(64)
        except OSError as exc:
            _fail(f"cannot listen on {host}:{port}: {exc}")
        listeners.append((sock, path))
    try:
        drop_capabilities()
        left = capabilities_left()
    except Exception as exc:  # any failure means: do not start the agent
        _fail(f"cannot drop capabilities: {exc}")
    if left:
        _fail(f"capabilities left after dropping them: {', '.join(left)}")
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(command[0], command)  # noqa: S606 - the agent's argv, no shell
        except OSError as exc:
            sys.stderr.write(f"healer sandbox: cannot run {command[0]}: {exc.strerror}\n")
            os._exit(127)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: os.kill(pid, signum))
    slots = threading.Semaphore(_MAX_CONNECTIONS)
    for sock, path in listeners:
        threading.Thread(target=_serve, args=(sock, path, slots), daemon=True).start()
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            status = 0
            break
        except InterruptedError:
            continue
    sys.stdout.flush()
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status)
             else 128 + os.WTERMSIG(status))


if __name__ == "__main__":
    main(sys.argv[1:])
