"""The sandbox's policy, as data and as bwrap's argv: pure, so these run on any machine.

The promise: a sandboxed command sees the host read-only and only through an allow-list of
mounts, writes only where its run may, never shares healer's processes or network, gets no
capability, and its environment is built from an allow-list that no secret of healer's passes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from healer.agents.sandbox import (
    MODEL_API,
    BwrapSandbox,
    Endpoint,
    checkout_paths,
    files_in,
    model_endpoints,
    parse_endpoint,
)
from healer.agents.sandbox.policy import (
    HOME,
    NET_DIR,
    Policy,
    bwrap_argv,
    hosts_text,
    plan_network,
    sandbox_env,
)
from healer.config import load_settings


def pairs(argv: list[str], flag: str) -> list[tuple[str, ...]]:
    """The arguments of every ``flag`` in ``argv`` (two for binds, one for the rest)."""
    width = {"--bind": 2, "--ro-bind": 2, "--symlink": 2}.get(flag, 1)
    cut = argv.index("--", argv.index("--chdir"))
    return [tuple(argv[i + 1:i + 1 + width]) for i, a in enumerate(argv[:cut]) if a == flag]


def policy(**kw: Any) -> Policy:
    base: dict[str, Any] = {"argv": ("claude", "-p"), "cwd": "/work/repo",
                            "readable": ("/usr", "/etc"), "writable": ("/work/repo",)}
    return Policy(**{**base, **kw})


class TestArgv:
    def test_always_a_new_session_killed_with_its_parent_in_namespaces_of_its_own(self) -> None:
        argv = bwrap_argv(policy())
        for flag in ("--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
                     "--unshare-uts", "--unshare-net", "--unshare-user", "--disable-userns"):
            assert flag in argv, flag
        assert argv[argv.index("--cap-drop") + 1] == "ALL" and "--cap-add" not in argv

    def test_network_is_unshared_unless_the_host_network_is_shared(self) -> None:
        assert "--unshare-net" in bwrap_argv(policy(net=plan_network([])))
        shared = bwrap_argv(policy(net=plan_network([], share_host=True)))
        assert "--unshare-net" not in shared

    def test_everything_read_only_but_the_writable_paths(self) -> None:
        argv = bwrap_argv(policy(writable=("/work/repo", "/state/agents/runs/r1")))
        assert set(pairs(argv, "--bind")) == {("/work/repo", "/work/repo"),
                                              ("/state/agents/runs/r1", "/state/agents/runs/r1")}
        assert ("/usr", "/usr") in pairs(argv, "--ro-bind")
        assert argv.index("--tmpfs") < argv.index("--ro-bind")  # an empty root first
        assert argv[argv.index("--tmpfs") + 1] == "/"
        remount = argv.index("--remount-ro")
        assert argv[remount + 1] == "/" and remount > max(
            i for i, a in enumerate(argv) if a == "--bind")

    def test_private_tmp_home_and_shm_are_capped_tmpfs(self) -> None:
        argv = bwrap_argv(policy(tmp_mb=64))
        for path in ("/tmp", HOME, "/dev/shm"):
            i = argv.index(path)
            assert argv[i - 1] == "--tmpfs" and argv[i - 3:i - 1] == ["--size", str(64 << 20)]

    def test_the_root_is_never_shown_whole(self) -> None:
        argv = bwrap_argv(policy())
        assert ("/", "/") not in pairs(argv, "--ro-bind") + pairs(argv, "--bind")

    def test_a_writable_run_folder_inside_a_hidden_state_dir_stays_writable(self) -> None:
        argv = bwrap_argv(policy(hidden_dirs=("/state",), writable=("/state/agents/runs/r1",)))
        assert argv.index("/state") < argv.index("/state/agents/runs/r1")
        assert argv[argv.index("/state") - 1] == "--tmpfs"

    def test_a_secret_inside_a_writable_checkout_is_masked_over_it(self) -> None:
        argv = bwrap_argv(policy(hidden_files=("/work/repo/healer.yaml",)))
        at = argv.index("/work/repo/healer.yaml")
        assert argv[at - 2:at] == ["--ro-bind", "/dev/null"]
        assert at > argv.index("--bind")

    def test_cwd_and_the_command_come_last(self) -> None:
        argv = bwrap_argv(policy())
        assert argv[argv.index("--chdir") + 1] == "/work/repo"
        assert argv[-3:] == ["--", "claude", "-p"]


class TestNetwork:
    def test_loopback_endpoints_are_listened_on_as_they_are(self) -> None:
        plan = plan_network([Endpoint("127.0.0.1", 8080), Endpoint("localhost", 9000)])
        assert [(lst.address, lst.port) for lst in plan.listens] == [
            ("127.0.0.1", 8080), ("127.0.0.1", 9000)]
        assert not plan.addresses and not plan.needs_low_ports

    def test_a_name_gets_a_loopback_address_of_its_own_in_etc_hosts(self) -> None:
        plan = plan_network([MODEL_API])
        (lst,) = plan.listens
        assert lst.address.startswith("127.66.") and lst.port == 443
        assert lst.upstream == MODEL_API and plan.needs_low_ports
        assert f"{lst.address}\tapi.anthropic.com" in hosts_text(plan)

    def test_a_lan_address_is_added_to_the_sandbox_loopback_by_the_bridge_alone(self) -> None:
        plan = plan_network([Endpoint("10.0.0.5", 8855), Endpoint("fd00::5", 22)])
        assert set(plan.addresses) == {"10.0.0.5", "fd00::5"}
        argv = bwrap_argv(policy(net=plan, net_dir="/tmp/n", bridge="/b.py", python="/py"))
        assert pairs(argv, "--cap-add") == [("CAP_NET_ADMIN",), ("CAP_NET_BIND_SERVICE",)]
        assert "--disable-userns" not in argv  # it would keep the capability from the netns
        cmd = argv[argv.index("--", argv.index("--chdir")) + 1:]
        assert cmd[:4] == ["/py", "-I", "-S", "/run/healer/bridge.py"]
        assert cmd[4:6] == ["--addr", "10.0.0.5"]
        assert f"[fd00::5]:22={NET_DIR}/e1.sock" in cmd and cmd[-3:] == ["--", "claude", "-p"]
        assert ("/tmp/n", NET_DIR) in pairs(argv, "--ro-bind")
        assert ("/tmp/n/hosts", "/etc/hosts") in pairs(argv, "--ro-bind")

    def test_no_endpoint_no_bridge(self) -> None:
        argv = bwrap_argv(policy(bridge="/b.py", python="/py"))
        assert "/run/healer/bridge.py" not in argv and argv[-3:] == ["--", "claude", "-p"]

    @pytest.mark.parametrize("text,want", [
        ("127.0.0.1:8080", Endpoint("127.0.0.1", 8080)),
        ("API.example.com:443", Endpoint("api.example.com", 443)),
        ("[fd00::1]:22", Endpoint("fd00::1", 22)),
    ])
    def test_endpoints_parse(self, text: str, want: Endpoint) -> None:
        assert parse_endpoint(text) == want

    @pytest.mark.parametrize("text", ["example.com", "host:0", "host:70000", "-oProxy=x:22",
                                      "a b:1", ":80"])
    def test_bad_endpoints_are_refused(self, text: str) -> None:
        with pytest.raises(ValueError):
            parse_endpoint(text)

    @pytest.mark.parametrize("env,want", [
        ({}, [MODEL_API]),
        ({"ANTHROPIC_BASE_URL": "http://127.0.0.1:4010"}, [Endpoint("127.0.0.1", 4010)]),
        ({"ANTHROPIC_BASE_URL": "https://proxy.example.com/v1"},
         [Endpoint("proxy.example.com", 443)]),
        ({"ANTHROPIC_BASE_URL": "http://user:pw@[::1]:81/"}, [Endpoint("::1", 81)]),
    ])
    def test_the_model_endpoint_follows_anthropic_base_url(self, env: dict[str, str],
                                                           want: list[Endpoint]) -> None:
        assert model_endpoints(env) == want


class TestEnvironment:
    def test_built_from_an_allow_list_never_inherited(self) -> None:
        host = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "GH_TOKEN": "ghp_x",
                "AWS_SECRET_ACCESS_KEY": "aws", "SSH_AUTH_SOCK": "/tmp/agent.sock",
                "ANTHROPIC_API_KEY": "sk-ant", "HOME": "/root", "KUBECONFIG": "/k"}
        env, rule = sandbox_env(host, {"HEALER_RUN_ID": "r1"})
        assert env == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C",
                       "ANTHROPIC_API_KEY": "sk-ant", "HEALER_RUN_ID": "r1", "HOME": HOME,
                       "TMPDIR": "/tmp"}
        assert not rule.allows("GH_TOKEN") and rule.allows("CLAUDE_CODE_ENTRYPOINT")

    def test_operator_names_pass_and_healer_secrets_never(self) -> None:
        host = {"KUBECONFIG": "/k", "HEALER_TOKEN": "s3cret"}
        env, rule = sandbox_env(host, {"HEALER_TOKEN": "again"},
                                extra=["KUBECONFIG", "HEALER_TOKEN"], secrets=["HEALER_TOKEN"])
        assert env["KUBECONFIG"] == "/k" and "HEALER_TOKEN" not in env
        assert not rule.allows("HEALER_TOKEN")

    def test_the_launcher_spec_holds_names_not_values(self, tmp_path: Path) -> None:
        settings = load_settings(env={}, overrides=[f"state_dir={tmp_path / 's'}"])
        box = BwrapSandbox(settings, secrets={"HEALER_TOKEN"},
                           environ={"PATH": "/usr/bin", "GH_TOKEN": "ghp_secret"})
        wrapped = box.wrap(["claude"], cwd=str(tmp_path), env={"ANTHROPIC_API_KEY": "sk-x"},
                           writable=[str(tmp_path)])
        try:
            spec = json.loads(wrapped.launcher_spec())
            text = json.dumps(spec) + " ".join(wrapped.argv)
            assert "sk-x" not in text and "ghp_secret" not in text
            assert "ANTHROPIC_API_KEY" in spec["keep"] and "HEALER_TOKEN" in spec["drop"]
            assert spec["argv"] == wrapped.argv and "GH_TOKEN" not in wrapped.env
        finally:
            import shutil

            shutil.rmtree(wrapped.folder or tmp_path / "none", ignore_errors=True)


class TestHostPolicy:
    """What BwrapSandbox makes of the settings and the run (it looks at the host's paths)."""

    def settings(self, tmp_path: Path, **agents: Any) -> Any:
        return load_settings(env={}, overrides={
            "state_dir": str(tmp_path / "state"), "results_dir": str(tmp_path / "results"),
            "fleet_dir": str(tmp_path / "fleet"), "agents": agents})

    def test_healer_dirs_and_home_secrets_are_hidden_where_a_mount_would_show_them(
            self, tmp_path: Path) -> None:
        for d in ("state", "results", "fleet", "repo/.ssh"):
            (tmp_path / d).mkdir(parents=True)
        settings = self.settings(tmp_path, sandbox_hide_paths=[str(tmp_path / "repo/.ssh")])
        p = BwrapSandbox(settings).policy(["true"], cwd=str(tmp_path),
                                          writable=[str(tmp_path)])
        hidden = set(p.hidden_dirs)
        assert {str(tmp_path / d) for d in ("state", "results", "fleet", "repo/.ssh")} <= hidden
        assert "/etc/ssl/private" in hidden or not Path("/etc/ssl/private").exists()
        assert "/etc/shadow" in p.hidden_files

    def test_operator_paths_and_runtimes_are_read_only(self, tmp_path: Path) -> None:
        tool = tmp_path / "toolchain"
        tool.mkdir()
        p = BwrapSandbox(self.settings(tmp_path, sandbox_read_paths=[str(tool)])).policy(
            ["true"], cwd=str(tmp_path), writable=[str(tmp_path / "nope")])
        import sys

        assert str(tool) in p.readable and str(Path(sys.base_prefix).resolve()) in p.readable
        assert p.writable == ()  # a path that does not exist is not bound
        assert p.cwd == HOME  # a cwd the sandbox does not show: it starts in HOME

    def test_the_host_root_is_never_a_mount(self, tmp_path: Path) -> None:
        p = BwrapSandbox(self.settings(tmp_path, sandbox_read_paths=["/"],
                                       sandbox_write_paths=["/"])).policy(
            ["true"], cwd="/", writable=["/"], readable=["/"])
        assert "/" not in p.readable and "/" not in p.writable

    def test_operator_network_and_the_host_network(self, tmp_path: Path) -> None:
        box = BwrapSandbox(self.settings(tmp_path, sandbox_network=["pypi.org:443"]))
        assert box.network([MODEL_API]) == ([MODEL_API, Endpoint("pypi.org", 443)], False)
        box = BwrapSandbox(self.settings(tmp_path, sandbox_network=["*"]))
        assert box.network([])[1] is True


class TestCheckout:
    def test_a_linked_worktree_shows_its_git_dirs_read_only(self, tmp_path: Path) -> None:
        """Only healer's own clones are writable git dirs: a linked worktree's lives in
        another repository, whose refs, objects, hooks and config the agent must not write."""
        repo, tree = tmp_path / "repo", tmp_path / "tree"
        env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null",
               "PATH": "/usr/bin:/bin"}
        for argv in (["git", "init", "-q", "-b", "main", str(repo)],
                     ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@x",
                      "commit", "-q", "--allow-empty", "-m", "x"],
                     ["git", "-C", str(repo), "worktree", "add", "-q", str(tree)]):
            subprocess.run(argv, check=True, env=env)
        writable, readable = checkout_paths(str(tree))
        common = (repo / ".git").resolve()
        assert writable == []
        assert readable == [str(common / "worktrees" / "tree"), str(common)]

    def test_a_clone_needs_nothing_outside_itself(self, tmp_path: Path) -> None:
        subprocess.run(["git", "init", "-q", str(tmp_path / "clone")], check=True,
                       env={"GIT_CONFIG_GLOBAL": "/dev/null", "PATH": "/usr/bin:/bin"})
        assert checkout_paths(str(tmp_path / "clone")) == ([], [])

    def test_a_plain_folder_has_no_git_dir_to_add(self, tmp_path: Path) -> None:
        assert checkout_paths(str(tmp_path)) == ([], [])

    def test_the_files_a_configured_command_names(self, tmp_path: Path) -> None:
        script = tmp_path / "agent.py"
        script.write_text("")
        found = files_in(["python3", str(script), "{prompt_file}", "/no/such/file"])
        assert str(script) in found and "{prompt_file}" not in found
        assert not any(f == "/no/such/file" for f in found)
