"""The sandbox every agent with tools runs in: bubblewrap, with healer's own policy.

Claude runs, command executors and the play actions run for an agent (``play.actions``) are
started through a ``Sandbox``: ``wrap(argv, cwd=, writable=, network=, env=)`` returns what to
exec (``Wrapped``: argv and environment), and ``async with wrapped:`` serves its network
bridges while the command runs. What a run gets (``BwrapSandbox``):

1. **Files** — an empty root of its own, read-only once set up. Read-only: the host's system
   folders (``/usr``, ``/etc`` without its secrets, ``/bin`` …), the Python runtime(s), healer's
   package, the agent's CLI and the command's own files, and ``agents.sandbox_read_paths``.
   Read-write: the run's checkout (only when the task names one and is not read-only; with the
   checkout's own git dir), its run folder (result file, CLI config), a private ``/tmp``, and
   ``agents.sandbox_write_paths``. ``HOME`` is an empty private folder. Everything else of the
   host is simply not there: healer's state, results and fleet dirs, other repositories, every
   home folder with its ``.ssh``, ``.aws``, ``.kube``, ``.config/gh`` …
2. **Environment** — built from an allow-list (``policy.BASE_ENV``: PATH, locale, terminal,
   the model API's ``ANTHROPIC_*``/``CLAUDE_CODE_*``), what healer sets for the run (its
   ``HEALER_*`` run variables, git identity) and ``agents.sandbox_env``; never inherited
   wholesale, never one of healer's secrets. Values never appear on a command line.
3. **Processes** — its own pid, ipc, uts and cgroup namespaces, a new session, no
   capabilities, killed when healer's side goes: healer's processes and their
   ``/proc/<pid>/environ`` are out of sight.
4. **Network** — its own network namespace (loopback only). Each allowed endpoint is bridged:
   inside, ``sandbox.bridge`` listens on the endpoint's own address and port and forwards to a
   Unix socket that healer serves outside (``sandbox.relay``) and connects to the real
   endpoint. Allowed: the model API (Claude runs and command executors), the fleet's peers
   (fleet agents), ``agents.sandbox_network`` (every run; ``*`` shares the host's network).

When bubblewrap is missing or cannot start a sandbox here, ``unavailable()`` says why and no
agent with tools starts (``AgentUnavailableError``; the gate holds code attempts with
``no_sandbox``). ``agents.sandbox: off`` gives ``NoSandbox``: agents run unconfined, as
before, with a warning at every start. ``healer.testing.sandbox.RecordingSandbox`` records
what a run asked for.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import glob
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from healer.agents.sandbox.policy import (
    HOME,
    HOSTS,
    Endpoint,
    EnvRule,
    NetPlan,
    Policy,
    bwrap_argv,
    hosts_text,
    parse_endpoint,
    plan_network,
    sandbox_env,
)
from healer.agents.sandbox.relay import Connect, Relay, Route, open_tcp
from healer.core import proc
from healer.core.proc import ProcResult
from healer.errors import AgentUnavailableError

__all__ = [
    "MODEL_API", "BwrapSandbox", "Endpoint", "NoSandbox", "Sandbox", "Wrapped",
    "checkout_paths", "doctor_check", "files_in", "model_endpoints", "parse_endpoint",
    "run_confined", "sandbox_for",
]

log = logging.getLogger(__name__)

MODEL_API = Endpoint("api.anthropic.com", 443)  # without ANTHROPIC_BASE_URL
SHARE_HOST = "*"  # in agents.sandbox_network: the host's network, no egress control
SYSTEM_DIRS = ("/usr", "/etc")
TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Secrets under the system folders a sandbox otherwise sees (root could read them all).
HIDDEN = (
    "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/security/opasswd",
    "/etc/ssh/ssh_host_*_key", "/etc/krb5.keytab", "/etc/ipsec.secrets",
    "/etc/ppp/chap-secrets", "/etc/ppp/pap-secrets", "/etc/apt/auth.conf",
    "/etc/apt/auth.conf.d", "/etc/ssl/private", "/etc/pki/tls/private", "/etc/letsencrypt",
    "/etc/kubernetes", "/etc/rancher", "/etc/wireguard", "/etc/openvpn", "/etc/ceph",
    "/etc/NetworkManager/system-connections", "/etc/docker/key.json",
    "/etc/containers/auth.json", "/etc/sudoers", "/etc/sudoers.d",
)
# The same in healer's own home, for a run whose checkout or read paths include it.
HOME_SECRETS = (
    "~/.ssh", "~/.aws", "~/.azure", "~/.config/gcloud", "~/.kube", "~/.config/gh",
    "~/.docker", "~/.gnupg", "~/.netrc", "~/.git-credentials", "~/.pypirc", "~/.npmrc",
    "~/.claude", "~/.claude.json", "~/.config/healer",
)
BUNDLE = ("schemas", "prompts", "agents", "skills", "hooks")  # healer's, read-only
PROBE_TTL_S = 60.0
_PACKAGE = Path(__file__).resolve().parents[2]  # healer's own package (read-only inside)
_BRIDGE = Path(__file__).with_name("bridge.py")


@dataclass
class Wrapped:
    """What to exec for one sandboxed command, and (as an async context manager) the network
    bridges it needs while it runs; leaving it removes the run's network folder."""

    argv: list[str]
    env: dict[str, str]
    confined: bool = False
    rule: EnvRule | None = None  # the allow-list ``env`` was made with (None: unconfined)
    relay: Relay | None = None
    folder: Path | None = None

    async def __aenter__(self) -> Wrapped:
        if self.relay is not None:
            try:
                await self.relay.start()
            except BaseException:
                await self.__aexit__()
                raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self.relay is not None:
                await self.relay.close()
        finally:  # also when cancelled meanwhile: the folder never outlives the run
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)

    def launcher_spec(self) -> str:
        """For a launcher that is handed an environment it did not build (the SDK builds the
        CLI's): the argv prefix and the allow-list, as JSON (names only, never values)."""
        rule = self.rule or EnvRule(names=frozenset())
        return json.dumps({"argv": self.argv, "keep": sorted(rule.names),
                           "prefixes": list(rule.prefixes), "drop": sorted(rule.drop)})


class Sandbox(Protocol):
    """Where an agent's command runs (see the module doc)."""

    name: str
    confined: bool  # False: the command runs as it is (agents.sandbox: off)

    def unavailable(self) -> str:
        """Why no sandbox can start here ("" when one can): fast after the first call."""
        ...

    def wrap(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
             writable: Sequence[str] = (), readable: Sequence[str] = (),
             network: Sequence[Endpoint] = ()) -> Wrapped:
        """What to exec to run ``argv`` in ``cwd`` with the run's variables ``env``, able to
        change ``writable``, see ``readable`` and reach ``network``. ``cwd`` is shown
        read-only when no writable path holds it."""
        ...


class NoSandbox:
    """``agents.sandbox: off``: the command runs unconfined, as it would without healer —
    the host's environment minus healer's own secrets, every file and address it can reach."""

    name = "off"
    confined = False

    def __init__(self, *, secrets: Iterable[str] = ()) -> None:
        self.secrets = frozenset(secrets)

    def unavailable(self) -> str:
        return ""

    def wrap(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
             writable: Sequence[str] = (), readable: Sequence[str] = (),
             network: Sequence[Endpoint] = ()) -> Wrapped:
        merged = {k: v for k, v in os.environ.items() if k not in self.secrets}
        merged.update(env)
        return Wrapped(argv=list(argv), env=merged)


class BwrapSandbox:
    """The bubblewrap sandbox with ``settings.agents``' policy (the module doc)."""

    name = "bwrap"
    confined = True

    def __init__(self, settings: Any, *, secrets: Iterable[str] = (),
                 connect: Connect = open_tcp, environ: Mapping[str, str] | None = None):
        self.settings = settings
        self.secrets = frozenset(secrets)
        self.connect = connect  # how healer's side reaches an endpoint (a seam for tests)
        self.environ = environ  # healer's environment (default: os.environ at wrap time)

    @property
    def bwrap(self) -> str:
        return self.settings.agents.sandbox_bwrap or "bwrap"

    def unavailable(self) -> str:
        return _probe(self.bwrap)[0]

    # -- the policy ------------------------------------------------------------------------

    def network(self, network: Sequence[Endpoint]) -> tuple[list[Endpoint], bool]:
        """The endpoints a run reaches (its own and ``agents.sandbox_network``), and whether
        the host's network is shared instead."""
        wanted = list(network)
        share = False
        for item in self.settings.agents.sandbox_network:
            if item.strip() == SHARE_HOST:
                share = True
            else:
                wanted.append(parse_endpoint(item))
        return wanted, share

    def policy(self, argv: Sequence[str], *, cwd: str, writable: Sequence[str] = (),
               readable: Sequence[str] = (), net: NetPlan | None = None, net_dir: str = "",
               userns: bool | None = None) -> Policy:
        """The policy of one command: the run's paths plus what the host and the settings add
        (looks at the host; ``bwrap_argv`` turns it into argv)."""
        agents = self.settings.agents
        # The host's root as a whole is never shown, whoever asks for it.
        rw = _existing(p for p in (_real(p) for p in [
            *writable, *_expand(agents.sandbox_write_paths)]) if p != "/")
        ro = [*_system_readable(), *_runtimes(), *(_real(p) for p in readable),
              *(_real(p) for p in _expand(agents.sandbox_read_paths))]
        ro = _existing(p for p in ro if p != "/" and not _covered_by_other(p, ro))
        cwd = _real(cwd)
        if not _covered(cwd, [*rw, *ro]):
            cwd = HOME  # a working directory the sandbox does not show: start in HOME
        mounted = [*ro, *rw]
        hidden_dirs, hidden_files = [], []
        for path in self._hidden():
            if path in rw or not _covered(path, mounted):
                continue
            (hidden_dirs if os.path.isdir(path) else hidden_files).append(path)
        return Policy(
            argv=tuple(argv), cwd=cwd, readable=tuple(ro), writable=tuple(rw),
            links=_system_links(), hidden_dirs=tuple(hidden_dirs),
            hidden_files=tuple(hidden_files), net=net or NetPlan(), net_dir=net_dir,
            bridge=str(_BRIDGE), python=sys.executable, tmp_mb=agents.sandbox_tmp_mb,
            userns=_probe(self.bwrap)[1] if userns is None else userns)

    def _hidden(self) -> list[str]:
        s = self.settings
        paths = [s.state_path, s.results_path, s.fleet_path, *s.sources,
                 *_expand(HOME_SECRETS), *_expand(s.agents.sandbox_hide_paths)]
        out = [_real(str(p)) for p in paths]
        for pattern in HIDDEN:
            out += glob.glob(pattern) if "*" in pattern else [pattern]
        return [p for p in dict.fromkeys(out) if os.path.lexists(p)]

    def wrap(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
             writable: Sequence[str] = (), readable: Sequence[str] = (),
             network: Sequence[Endpoint] = ()) -> Wrapped:
        endpoints, share = self.network(network)
        plan = plan_network(endpoints, share_host=share)
        folder = Path(tempfile.mkdtemp(prefix="healer-sbx-"))  # short: socket paths ≤ 108
        try:
            (folder / HOSTS).write_text(hosts_text(plan))
            policy = self.policy(argv, cwd=cwd, writable=writable, readable=readable,
                                 net=plan, net_dir=str(folder))
            environ = os.environ if self.environ is None else self.environ
            final, rule = sandbox_env(environ, env, extra=self.settings.agents.sandbox_env,
                                      secrets=self.secrets)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        routes = [Route(lst.socket, lst.upstream.host, lst.upstream.port)
                  for lst in plan.listens]
        relay = Relay(folder, routes, connect=self.connect) if routes else None
        bwrap = shutil.which(self.bwrap) or self.bwrap  # absolute: execve has no PATH search
        return Wrapped(argv=bwrap_argv(policy, bwrap=bwrap), env=final, confined=True,
                       rule=rule, relay=relay, folder=folder)


def sandbox_for(settings: Any, *, secrets: Iterable[str] = ()) -> Sandbox:
    """The sandbox the settings ask for: bubblewrap, or ``NoSandbox`` for
    ``agents.sandbox: off``."""
    if settings.agents.sandbox:
        return BwrapSandbox(settings, secrets=secrets)
    return NoSandbox(secrets=secrets)


def run_confined(sandbox: Sandbox, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
                 timeout: float, writable: Sequence[str] = ()) -> ProcResult:
    """Run ``argv`` to the end in ``sandbox`` from synchronous code (a verification's test
    command runs the agent's code: it gets what an agent gets, nothing more). ``env`` is the
    run's own variables, on top of the sandbox's allow-list. ``AgentUnavailableError`` when
    no sandbox can start here."""
    why = sandbox.unavailable()
    if why:
        raise AgentUnavailableError(f"no sandbox for the command: {why}")
    wrapped = sandbox.wrap(argv, cwd=cwd, env=env, writable=writable)

    async def go() -> ProcResult:
        async with wrapped:  # the network bridges live as long as the command
            return await asyncio.to_thread(proc.run, wrapped.argv, timeout=timeout, cwd=cwd,
                                           env=wrapped.env)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(go())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # called from inside a loop
        return pool.submit(asyncio.run, go()).result()


def doctor_check(settings: Any) -> tuple[bool, str]:
    """``healer doctor``'s sandbox line: on and working, why not, or off."""
    if not settings.agents.sandbox:
        return False, ("agents.sandbox: off — agents run unconfined, with the host's files, "
                       "network and environment")
    sandbox = BwrapSandbox(settings)
    why = sandbox.unavailable()
    if why:
        return False, f"cannot start: {why}; agents with tools wait until it can"
    where = shutil.which(sandbox.bwrap) or sandbox.bwrap
    userns = "" if _probe(sandbox.bwrap)[1] else " (without a user namespace)"
    return True, f"bubblewrap ({where}){userns}: agents run confined"


def model_endpoints(env: Mapping[str, str]) -> list[Endpoint]:
    """The model API a Claude Code CLI with this environment talks to:
    ``ANTHROPIC_BASE_URL``'s host and port, else api.anthropic.com:443."""
    url = env.get("ANTHROPIC_BASE_URL", "").strip()
    if not url:
        return [MODEL_API]
    scheme, _, rest = url.partition("://")
    hostport = rest.split("/", 1)[0].rsplit("@", 1)[-1] if rest else scheme
    default = 80 if scheme.lower() == "http" else 443
    host, port = hostport, default
    if hostport.startswith("["):
        host, _, tail = hostport[1:].partition("]")
        port = int(tail[1:]) if tail.startswith(":") and tail[1:].isdigit() else default
    elif hostport.count(":") == 1:
        host, _, tail = hostport.partition(":")
        port = int(tail) if tail.isdigit() else default
    try:
        return [parse_endpoint(str(Endpoint(host, port)))]
    except ValueError:
        log.warning("ANTHROPIC_BASE_URL %r names no host:port the sandbox can bridge", url)
        return []


def checkout_paths(cwd: str) -> tuple[list[str], list[str]]:
    """What a run working in the git checkout ``cwd`` must also see: nothing for healer's own
    clones (their git dir is ``cwd/.git``, inside the checkout). A linked worktree someone
    hands to ``healer agents run --cwd`` keeps its git dir and the repository's common dir
    elsewhere: both are shown read-only (the agent can read history, never write refs,
    objects, hooks or config of a repository that is not its own clone)."""
    dot = Path(cwd) / ".git"
    if not dot.is_file() or dot.is_symlink():
        return [], []
    try:
        text = dot.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return [], []
    if not text.startswith("gitdir:"):
        return [], []
    gitdir = (Path(cwd) / text[len("gitdir:"):].strip()).resolve()
    if not gitdir.is_dir():
        return [], []
    readable = [str(gitdir)]
    common_file = gitdir / "commondir"
    if common_file.is_file():
        with contextlib.suppress(OSError):
            common = (gitdir / common_file.read_text().strip()).resolve()
            readable.append(str(common))
    return [], readable


def files_in(argv: Sequence[str]) -> list[str]:
    """The files a configured command names by absolute path (its script, its config):
    shown read-only in its sandbox. The command itself is found on PATH."""
    out = []
    first = shutil.which(argv[0]) if argv else None
    for item in [*([first] if first else []), *argv]:
        if os.path.isabs(item) and os.path.isfile(item):
            out += [item, os.path.realpath(item)]
    return list(dict.fromkeys(out))


# -- the host ---------------------------------------------------------------------------------

_PROBES: dict[str, tuple[float, str, bool]] = {}


def _probe(bwrap: str) -> tuple[str, bool]:
    """("" or why no sandbox starts, whether a user namespace works): tried with the real
    namespaces on ``true``, remembered for ``PROBE_TTL_S``."""
    now = time.monotonic()
    cached = _PROBES.get(bwrap)
    if cached is not None and now - cached[0] < PROBE_TTL_S:
        return cached[1], cached[2]
    why, userns = _try(bwrap)
    _PROBES[bwrap] = (now, why, userns)
    return why, userns


def _try(bwrap: str) -> tuple[str, bool]:
    found = shutil.which(bwrap)
    if found is None:
        return (f"bubblewrap ({bwrap}) not found: install the `bubblewrap` package "
                "(scripts/setup.sh does), or set agents.sandbox: off to run agents "
                "unconfined"), False
    true = shutil.which("true") or "/usr/bin/true"
    why = ""
    for userns in (True, False):
        policy = Policy(argv=(true,), cwd="/", readable=tuple(_system_readable()),
                        links=_system_links(), tmp_mb=1, userns=userns)
        try:
            done = subprocess.run(bwrap_argv(policy, bwrap=found), capture_output=True,
                                  text=True, timeout=15, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap ({found}) did not run: {exc}", False
        if done.returncode == 0:
            return "", userns
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return f"bubblewrap ({found}) cannot start a sandbox here: {why}", False


def _system_readable() -> list[str]:
    out = [d for d in SYSTEM_DIRS if os.path.isdir(d)]
    for name in TOP_LEVEL:
        path = f"/{name}"
        if os.path.isdir(path) and not os.path.islink(path):
            out.append(path)
    return out


def _system_links() -> tuple[tuple[str, str], ...]:
    return tuple((os.readlink(f"/{n}"), f"/{n}") for n in TOP_LEVEL
                 if os.path.islink(f"/{n}"))


def _runtimes() -> list[str]:
    """The Python runtime(s) healer runs on (a venv and its base), healer's package and its
    bundle (schemas, prompts, agents, skills: a checkout keeps them beside the package)."""
    from healer.resources import bundle_path

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             str(_PACKAGE)}
    paths.update(str(bundle_path(name)) for name in BUNDLE)
    return [_real(p) for p in sorted(paths)]


def _real(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.path.expanduser(str(path)))


def _expand(paths: Iterable[str]) -> list[str]:
    return [os.path.expanduser(p) for p in paths if p]


def _existing(paths: Iterable[str]) -> list[str]:
    return [p for p in dict.fromkeys(paths) if os.path.exists(p)]


def _covered(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _covered_by_other(path: str, roots: Sequence[str]) -> bool:
    return any(r != path and path.startswith(r.rstrip("/") + "/") for r in roots)

