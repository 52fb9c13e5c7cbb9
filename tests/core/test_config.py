"""Settings: defaults, sources and their precedence, and clear errors for bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from healer.config import load_multifleet, load_settings, schema
from healer.errors import ConfigError


class TestDefaults:
    def test_design_defaults(self) -> None:
        """With no files and no env, the DESIGN.md defaults apply."""
        s = load_settings(env={})
        assert s.state_dir == ".healer"
        assert s.results_dir == "/tmp/atlas-agent-results"
        assert s.fleet_dir == ".fleet-messages"
        assert (s.api.host, s.api.port) == ("127.0.0.1", 8083)
        assert s.executor.default == "auto"
        assert s.forge.kind == "local"
        assert s.play.max_iterations == 3
        assert s.selfheal.cooldown_s == 3600 and s.selfheal.max_concurrent == 2
        assert s.fleet.stale_s == 90 and s.fleet.send_budget_s == 30
        assert s.sources == []

    def test_schema_file_matches_tree(self) -> None:
        """schemas/config.schema.json is generated from the settings tree and kept in step."""
        assert schema.main(["--check"]) == 0


class TestPrecedence:
    def test_yaml_env_flags(self, tmp_path: Path) -> None:
        """Flags beat env, env beats healer.yaml, healer.yaml beats defaults."""
        (tmp_path / "healer.yaml").write_text("api:\n  port: 9001\nselfheal:\n  cooldown_s: 5\n"
                                              "log: {level: debug}\n")
        s = load_settings(env={"HEALER_PORT": "9002", "HEALER__SELFHEAL__COOLDOWN_S": "7"},
                          overrides=["api.port=9003"])
        assert s.api.port == 9003
        assert s.selfheal.cooldown_s == 7.0
        assert s.log.level == "debug"
        assert s.sources == ["healer.yaml"]

    def test_cto_config(self, tmp_path: Path) -> None:
        """cto-config.json's healerEndpoint, maxIterations and syncTimeoutSecs are honoured."""
        (tmp_path / "cto-config.json").write_text(json.dumps({"defaults": {
            "play": {"healerEndpoint": "http://localhost:9999"},
            "remediation": {"maxIterations": 5, "syncTimeoutSecs": 120}}}))
        s = load_settings(env={})
        assert s.play.healer_endpoint == "http://localhost:9999"
        assert s.play.max_iterations == 5
        assert s.play.sync_timeout_s == 120.0

    def test_healer_yaml_beats_cto_config(self, tmp_path: Path) -> None:
        """healer's own file wins over the orchestrator's."""
        (tmp_path / "cto-config.json").write_text(
            '{"defaults": {"remediation": {"maxIterations": 5}}}')
        (tmp_path / "healer.yaml").write_text("play: {max_iterations: 2}\n")
        assert load_settings(env={}).play.max_iterations == 2

    def test_list_and_bool_from_env(self) -> None:
        """Env strings are coerced to the field's type."""
        s = load_settings(env={"HEALER__STORE__NATS_URLS": "nats://127.0.0.1:1,nats://127.0.0.1:2",
                               "HEALER__SELFHEAL__ENABLED": "no"})
        assert s.store.nats_urls == ["nats://127.0.0.1:1", "nats://127.0.0.1:2"]
        assert s.selfheal.enabled is False


class TestErrors:
    @pytest.mark.parametrize(
        ("text", "key", "fragment"),
        [
            ("api:\n  port: abc\n", "api.port", "expected integer"),
            ("api:\n  prot: 1\n", "api.prot", "unknown key"),
            ("executor: {default: magic}\n", "executor.default", "one of"),
            ("selfheal: {max_concurrent: 0}\n", "selfheal.max_concurrent", "minimum"),
            ("- a\n- b\n", "", "mapping"),
        ],
    )
    def test_bad_yaml_names_file_and_key(self, tmp_path: Path, text: str, key: str,
                                         fragment: str) -> None:
        """A bad settings file is reported with its file, the key and what was expected."""
        (tmp_path / "healer.yaml").write_text(text)
        with pytest.raises(ConfigError) as info:
            load_settings(env={})
        assert info.value.file == "healer.yaml"
        assert info.value.key == key
        assert fragment in str(info.value)

    def test_invalid_yaml_syntax(self, tmp_path: Path) -> None:
        """A YAML syntax error says where."""
        (tmp_path / "healer.yaml").write_text("api: [\n")
        with pytest.raises(ConfigError, match=r"healer.yaml: not valid YAML \(line"):
            load_settings(env={})

    def test_bad_env_names_the_variable(self) -> None:
        """A bad env var is reported by its name."""
        with pytest.raises(ConfigError) as info:
            load_settings(env={"HEALER_PORT": "eighty"})
        assert info.value.file == "environment" and info.value.key == "HEALER_PORT"

    def test_unknown_flag_key(self) -> None:
        with pytest.raises(ConfigError, match="unknown setting"):
            load_settings(env={}, overrides=["api.nope=1"])

    def test_token_required_off_loopback(self) -> None:
        """Binding the API off loopback without a token, or with a short or blank one, is
        refused; 16 characters are enough, and loopback names need none."""
        for token in ("", "short-token", " " * 20):
            with pytest.raises(ConfigError, match="at least 16 characters is required"):
                load_settings(env={"HEALER_HOST": "0.0.0.0", "HEALER_TOKEN": token})
        load_settings(env={"HEALER_HOST": "0.0.0.0", "HEALER_TOKEN": "x" * 16})
        for host in ("127.0.0.2", "::1", "localhost"):
            load_settings(env={"HEALER_HOST": host})

    def test_bad_cto_config(self, tmp_path: Path) -> None:
        (tmp_path / "cto-config.json").write_text(
            '{"defaults": {"remediation": {"maxIterations": "three"}}}')
        with pytest.raises(ConfigError) as info:
            load_settings(env={})
        assert info.value.file == "cto-config.json"
        assert info.value.key == "defaults.remediation.maxIterations"

    def test_cli_exit_code_2(self, tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
        """Through the CLI: one clear line on stderr, no traceback, exit code 2."""
        bad = tmp_path / "bad.yaml"
        bad.write_text("fleet:\n  stale_s: soon\n")
        r = cli("doctor", "--config", str(bad))
        assert r.code == 2
        assert "bad.yaml: key 'fleet.stale_s': expected number" in r.err
        assert "Traceback" not in r.err


class TestMultifleet:
    def _write(self, tmp_path: Path, nodes: dict) -> Path:  # type: ignore[type-arg]
        p = tmp_path / "config.json"
        p.write_text(json.dumps({"chief": {"nodeId": "mac1", "host": "127.0.0.1"},
                                 "nodes": nodes}))
        return p

    def test_reads_nodes(self, tmp_path: Path) -> None:
        """Chief and nodes are read with their addresses and ports."""
        p = self._write(tmp_path, {
            "mac1": {"host": "127.0.0.2", "user": "fleet", "port": 8855, "role": "chief"},
            "mac2": {"host": "127.0.0.3", "tunnel_port": 8856, "custom": True},
        })
        fc = load_multifleet(p)
        assert fc.chief == "mac1"
        assert fc.nodes["mac1"].user == "fleet"
        assert fc.nodes["mac2"].tunnel_port == 8856
        assert fc.nodes["mac2"].extra == {"custom": True}

    @pytest.mark.parametrize(
        "nodes",
        [
            {"../etc": {"host": "127.0.0.2"}},
            {"mac1": {"host": "127.0.0.2; rm -rf /"}},
            {"mac1": {"host": "-oProxyCommand=sh"}},
            {"mac1": {"host": "127.0.0.2", "user": "root$(id)"}},
            {"mac1 x": {"host": "127.0.0.2"}},
        ],
    )
    def test_hostile_names_refused(self, tmp_path: Path, nodes: dict) -> None:  # type: ignore[type-arg]
        """Node ids, hosts and users with shell metacharacters or traversal are refused."""
        with pytest.raises(ConfigError):
            load_multifleet(self._write(tmp_path, nodes))
