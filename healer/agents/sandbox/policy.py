"""The sandbox's policy as data, and the one pure function that turns it into bwrap's argv.

Nothing here touches the host: ``BwrapSandbox`` (``healer.agents.sandbox``) looks at the
host and the settings, fills a ``Policy``, and ``bwrap_argv`` builds the command line from it
alone — so the argv is tested directly, on any machine. The mount order is the policy:

1. a fresh tmpfs as ``/``, a minimal ``/dev``, a ``/proc`` of the sandbox's own pid namespace;
2. private tmpfs ``/tmp``, ``HOME`` and ``/dev/shm``, each capped at ``tmp_mb`` MiB;
3. ``readable`` paths read-only (system folders, runtimes, the agent's CLI, operator paths:
   one under ``/tmp`` shows through the private tmp), the top-level symlinks
   (``/lib → usr/lib``);
4. ``hidden`` paths masked (a folder by an empty tmpfs, a file by ``/dev/null``) and
   ``writable`` paths bound read-write, parents before children: a run folder inside
   healer's hidden state dir is writable, a secret file inside a writable checkout hidden;
6. the network folder (relay sockets) and the generated ``/etc/hosts``, the bridge script;
7. ``/`` remounted read-only; ``--chdir`` to ``cwd``.

Always: ``--die-with-parent``, ``--new-session``, new pid/ipc/uts/cgroup namespaces, every
capability dropped; ``--unshare-net`` unless the host network is shared; a user namespace
where the kernel allows it — and no nested ones, unless the bridge needs a capability to set
up the network (a port below 1024, a non-loopback address: ``CAP_NET_BIND_SERVICE``,
``CAP_NET_ADMIN``, which it drops before the agent starts).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

HOME = "/home/agent"
HOSTNAME = "healer-sandbox"
NET_DIR = "/run/healer/net"  # inside: the relay sockets and the hosts file
BRIDGE = "/run/healer/bridge.py"  # inside: healer.agents.sandbox.bridge
HOSTS = "hosts"  # the generated /etc/hosts, in the network folder
TMP = "/tmp"  # noqa: S108 - the sandbox's own private tmpfs, not the host's
SHM = "/dev/shm"  # noqa: S108 - likewise
_NAMED_NET = ipaddress.ip_network("127.66.0.0/16")  # loopback addresses for named endpoints


@dataclass(frozen=True, order=True)
class Endpoint:
    """A ``host:port`` an agent may connect to (a name, or an IPv4/IPv6 address)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_endpoint(text: str) -> Endpoint:
    """``host:port`` or ``[v6]:port``; raises ``ValueError`` saying what is wrong."""
    from healer.core.names import safe_host
    from healer.errors import UnsafeNameError

    host, sep, port = text.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not host:port (a port 1-65535)")
    try:
        safe_host(host, "endpoint host")
    except UnsafeNameError as exc:
        raise ValueError(str(exc)) from None
    return Endpoint(host.lower(), int(port))


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


@dataclass(frozen=True)
class Listen:
    """One bridge inside: listen on ``address:port``, forward to socket ``socket``."""

    address: str
    port: int
    socket: str
    upstream: Endpoint


@dataclass(frozen=True)
class NetPlan:
    """How the sandbox reaches its endpoints (``plan_network``)."""

    share_host: bool = False  # the host's network as it is: no egress control at all
    listens: tuple[Listen, ...] = ()
    addresses: tuple[str, ...] = ()  # non-loopback IPs added to the sandbox's own lo
    names: tuple[tuple[str, str], ...] = ()  # (name, loopback address) for /etc/hosts

    @property
    def needs_admin(self) -> bool:
        return bool(self.addresses)

    @property
    def needs_low_ports(self) -> bool:
        return any(lst.port < 1024 for lst in self.listens)


def plan_network(endpoints: Iterable[Endpoint], *, share_host: bool = False) -> NetPlan:
    """Where each endpoint is listened on inside the sandbox.

    A loopback address (``127.0.0.x``, ``::1``, ``localhost``) is listened on as it is; any
    other address is added to the sandbox's loopback interface first (the bridge adds it);
    a name gets a loopback address of its own from 127.66.0.0/16, mapped in ``/etc/hosts``,
    so a TLS client still speaks to that name end to end."""
    if share_host:
        return NetPlan(share_host=True)
    wanted = sorted(set(endpoints))
    names: dict[str, str] = {}
    pool = _NAMED_NET.hosts()
    listens, addresses = [], []
    for i, ep in enumerate(wanted):
        addr = _address(ep.host)
        if ep.host == "localhost":
            inside = "127.0.0.1"
        elif addr is not None:
            inside = str(addr)
            if not addr.is_loopback and inside not in addresses:
                addresses.append(inside)
        else:
            if ep.host not in names:
                names[ep.host] = str(next(pool))
            inside = names[ep.host]
        listens.append(Listen(inside, ep.port, f"e{i}.sock", ep))
    return NetPlan(listens=tuple(listens), addresses=tuple(addresses),
                   names=tuple(sorted(names.items())))


def hosts_text(plan: NetPlan) -> str:
    """The sandbox's ``/etc/hosts``: loopback, its own name, and each named endpoint."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
             f"127.0.1.1\t{HOSTNAME}"]
    lines += [f"{address}\t{name}" for name, address in plan.names]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Policy:
    """Everything one sandboxed command may see and do (see the module doc for the order)."""

    argv: tuple[str, ...]
    cwd: str
    readable: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    links: tuple[tuple[str, str], ...] = ()  # (target, path): /lib → usr/lib
    hidden_dirs: tuple[str, ...] = ()
    hidden_files: tuple[str, ...] = ()
    net: NetPlan = field(default_factory=NetPlan)
    net_dir: str = ""  # host folder: relay sockets and the hosts file ("" = none)
    bridge: str = ""  # host path of the bridge script ("" = run argv directly)
    python: str = ""  # the interpreter that runs the bridge
    tmp_mb: int = 1024
    userns: bool = True


def _by_depth(paths: Iterable[str]) -> list[str]:
    return sorted(set(paths), key=lambda p: (p.count("/"), p))


def bridge_argv(policy: Policy) -> list[str]:
    """The command the sandbox starts: the bridge in front of ``argv`` when there are
    endpoints to reach, else ``argv`` itself."""
    if not policy.net.listens or policy.net.share_host:
        return list(policy.argv)
    out = [policy.python, "-I", "-S", BRIDGE]
    for ip in policy.net.addresses:
        out += ["--addr", ip]
    for lst in policy.net.listens:
        where = f"[{lst.address}]" if ":" in lst.address else lst.address
        out += ["--listen", f"{where}:{lst.port}={NET_DIR}/{lst.socket}"]
    return [*out, "--", *policy.argv]


def bwrap_argv(policy: Policy, *, bwrap: str = "bwrap") -> list[str]:
    """bubblewrap's argv for ``policy`` (pure: it reads nothing but its arguments)."""
    size = str(policy.tmp_mb << 20)
    bridged = bool(policy.net.listens) and not policy.net.share_host
    caps = []  # for the bridge only: it drops them before the agent starts
    if bridged and policy.net.needs_admin:
        caps.append("CAP_NET_ADMIN")
    if bridged and policy.net.needs_low_ports:
        caps.append("CAP_NET_BIND_SERVICE")
    out = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
           "--unshare-uts", "--unshare-cgroup-try", "--hostname", HOSTNAME]
    if policy.userns:
        out.append("--unshare-user")
        if not caps:  # forbidding nested ones nests the sandbox one level deeper, where the
            out.append("--disable-userns")  # bridge's capabilities no longer reach the netns
    if not policy.net.share_host:
        out.append("--unshare-net")
    out += ["--cap-drop", "ALL"]
    for cap in caps:
        out += ["--cap-add", cap]
    out += ["--tmpfs", "/", "--dev", "/dev", "--proc", "/proc"]
    for path in (TMP, HOME, SHM):
        out += ["--size", size, "--tmpfs", path]
    writable = _by_depth(policy.writable)
    readable = [p for p in _by_depth(policy.readable) if p not in writable]
    for path in readable:
        out += ["--ro-bind", path, path]
    for target, path in policy.links:
        out += ["--symlink", target, path]
    dirs = set(policy.hidden_dirs)
    # Parents before children: a writable folder inside a hidden one (the run folder in
    # healer's state dir) is bound over the mask, a hidden path inside a writable folder (a
    # settings file in a checkout) is masked over the bind. Writable wins a tie.
    hidden = [p for p in [*policy.hidden_dirs, *policy.hidden_files] if p not in writable]
    for path in sorted(set(hidden) | set(writable),
                       key=lambda p: (p.count("/"), p not in writable, p)):
        if path in writable:
            out += ["--bind", path, path]
        elif path in dirs:
            out += ["--tmpfs", path]
        else:
            out += ["--ro-bind", "/dev/null", path]
    if policy.net_dir:
        out += ["--ro-bind", policy.net_dir, NET_DIR,
                "--ro-bind", f"{policy.net_dir}/{HOSTS}", "/etc/hosts"]
    if bridged and policy.bridge:
        out += ["--ro-bind", policy.bridge, BRIDGE]
    out += ["--remount-ro", "/", "--chdir", policy.cwd, "--", *bridge_argv(policy)]
    return out


# -- the environment ------------------------------------------------------------------------

# What every sandboxed run may take from healer's environment (besides what healer sets for
# the run): the command search path, locale and terminal, and the model API's variables.
# The test runner's own settings pass too: they configure how the project's tests run
# (e.g. ``PYTEST_ADDOPTS="--timeout 60"``) and hold no secret.
RUNNER_ENV = frozenset({"PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD"})
BASE_ENV = frozenset({
    "PATH", "LANG", "LANGUAGE", "TERM", "COLORTERM", "NO_COLOR", "TZ", "SHELL", "USER",
    "LOGNAME", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL", *RUNNER_ENV,
})
BASE_PREFIXES = ("LC_", "ANTHROPIC_", "CLAUDE_CODE_", "CLAUDE_AGENT_SDK_")


@dataclass(frozen=True)
class EnvRule:
    """Which variables pass into a sandbox: named or prefixed, never a secret of healer's."""

    names: frozenset[str]
    prefixes: tuple[str, ...] = BASE_PREFIXES
    drop: frozenset[str] = frozenset()

    def allows(self, name: str) -> bool:
        return name not in self.drop and (name in self.names or name.startswith(self.prefixes))

    def apply(self, environ: Mapping[str, str]) -> dict[str, str]:
        return {k: v for k, v in environ.items() if self.allows(k)}


def sandbox_env(environ: Mapping[str, str], run: Mapping[str, str], *,
                extra: Sequence[str] = (), secrets: Iterable[str] = ()
                ) -> tuple[dict[str, str], EnvRule]:
    """The environment of a sandboxed command, and the rule that made it: the allowed part
    of healer's ``environ`` (``BASE_ENV``, ``BASE_PREFIXES``, the operator's ``extra``
    names), then everything healer sets for the run (``run``), then ``HOME`` (empty,
    private) and ``TMPDIR``. A secret of healer's never passes, whoever names it."""
    drop = frozenset(secrets)
    fixed = {"HOME": HOME, "TMPDIR": TMP}
    rule = EnvRule(names=frozenset(BASE_ENV | set(extra) | set(run) | set(fixed)), drop=drop)
    env = {k: v for k, v in environ.items() if rule.allows(k) and k not in run}
    env.update({k: v for k, v in run.items() if k not in drop})
    env.update(fixed)
    return env, rule
