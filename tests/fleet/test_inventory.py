"""The fleet inventory (.multifleet/config.json): one bad node disables that node only."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from healer.config import ConfigError, load_multifleet, load_settings
from healer.errors import UsageError
from healer.fleet.peers import FleetView, update_address

GOOD = {"host": "127.0.0.2", "user": "fleet", "port": 8855}
BAD_NODES: dict[str, tuple[Any, str]] = {  # node id → (entry, fragment of the reason)
    "n1;reboot": (GOOD, "unsafe node id"),
    "host-option": ({**GOOD, "host": "-oProxyCommand=touch /tmp/pwned"}, "unsafe host"),
    "host-shell": ({**GOOD, "host": "127.0.0.2;reboot"}, "not a valid hostname"),
    "user-shell": ({**GOOD, "user": "root;reboot"}, "unsafe user"),
    "lan-ip": ({**GOOD, "lan_ip": "`id`"}, "unsafe lan_ip"),
    "nats-url": ({**GOOD, "nats_url": "nats://127.0.0.1:4222;reboot"}, "nats_url"),
    "port-text": ({**GOOD, "port": "eighty"}, "nodes.port-text.port: expected integer"),
    "port-range": ({**GOOD, "port": 70000}, "nodes.port-range.port"),
    "no-host": ({"port": 8855}, "'host' is a required property"),
    "role": ({**GOOD, "role": "boss"}, "expected one of chief, worker"),
    "not-object": ("just a string", "nodes.not-object: expected object"),
    "restart": ({**GOOD, "restart": "reboot"}, "nodes.restart.restart: expected array"),
}


def write(path: Path, nodes: dict[str, Any], **top: Any) -> Path:
    path.write_text(json.dumps({"chief": {"nodeId": "mac1", "host": "127.0.0.2"},
                                "nodes": nodes, **top}))
    return path


def mixed(path: Path) -> Path:
    """Two good nodes around every kind of bad one."""
    return write(path, {"mac1": {**GOOD, "role": "chief"},
                        **{k: v[0] for k, v in BAD_NODES.items()},
                        "mac2": {**GOOD, "host": "127.0.0.3"}})


class TestLoader:
    def test_bad_nodes_are_skipped_with_reasons(self, tmp_path: Path) -> None:
        """Every invalid node entry is left out with a reason naming it; the good ones load."""
        cfg = load_multifleet(mixed(tmp_path / "fleet.json"))
        assert list(cfg.nodes) == ["mac1", "mac2"]
        assert cfg.nodes["mac2"].host == "127.0.0.3" and cfg.chief == "mac1"
        assert set(cfg.skipped) == set(BAD_NODES)
        for node, (_, fragment) in BAD_NODES.items():
            assert fragment in cfg.skipped[node], (node, cfg.skipped[node])
            assert cfg.skipped[node].startswith(f"nodes.{node}"), cfg.skipped[node]

    def test_no_valid_node_left_is_an_error(self, tmp_path: Path) -> None:
        """A file whose every node is invalid is refused as a whole, naming the node."""
        path = write(tmp_path / "fleet.json", {"n1": {**GOOD, "host": "a b"}})
        with pytest.raises(ConfigError) as info:
            load_multifleet(path)
        assert info.value.key == "nodes.n1"
        assert "not a valid hostname" in str(info.value) and "no valid node" in str(info.value)

    @pytest.mark.parametrize("doc,key", [
        ({"nodes": []}, "nodes"),
        ({"chief": {"nodeId": 7}, "nodes": {"n1": GOOD}}, "chief.nodeId"),
        ({"chief": {"nodeId": "../x"}, "nodes": {"n1": GOOD}}, "chief.nodeId"),
        ({"nodes": {f"n{i}": GOOD for i in range(1001)}}, "nodes"),
        ({}, ""),
    ])
    def test_file_level_problems_refuse_the_file(self, tmp_path: Path, doc: dict[str, Any],
                                                 key: str) -> None:
        """Problems outside the node entries still make the whole file invalid."""
        path = tmp_path / "fleet.json"
        path.write_text(json.dumps(doc))
        with pytest.raises(ConfigError) as info:
            load_multifleet(path)
        assert info.value.key == key

    def test_empty_node_list_is_fine(self, tmp_path: Path) -> None:
        """No nodes at all is an empty fleet, not an error."""
        cfg = load_multifleet(write(tmp_path / "fleet.json", {}))
        assert cfg.nodes == {} and cfg.skipped == {}


class TestFleetView:
    def _view(self, path: Path) -> FleetView:
        settings = load_settings(env={"HEALER_FLEET_CONFIG": str(path),
                                      "HEALER_NODE_ID": "mac1"})
        return FleetView(settings)

    def test_disabled_nodes_are_not_peers(self, tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
        """The view uses the good nodes, warns once per bad node naming it and why, and
        refuses a disabled one by name."""
        view = self._view(mixed(tmp_path / "fleet.json"))
        with caplog.at_level(logging.WARNING, logger="healer.fleet.peers"):
            assert [n.node_id for n in view.peers] == ["mac2"]
            assert view.peer("mac2").host == "127.0.0.3"
            assert view.me is not None and view.chief is not None
        warned = [r.getMessage() for r in caplog.records]
        for node in BAD_NODES:
            assert sum(f"node {node!r} is disabled" in w for w in warned) == 1, warned
        assert set(view.skipped) == set(BAD_NODES)
        with pytest.raises(UsageError, match=r"'host-option' is disabled.*unsafe host"):
            view.peer("host-option")
        with pytest.raises(UsageError, match="unknown peer 'zz'"):
            view.peer("zz")

    def test_fixing_the_entry_enables_the_node(self, tmp_path: Path) -> None:
        """Once the bad entry is corrected in the file, the node is back without a restart."""
        path = write(tmp_path / "fleet.json", {"mac1": GOOD, "mac2": {**GOOD, "port": "x"}})
        view = self._view(path)
        assert "mac2" in view.skipped and view.peers == []
        write(path, {"mac1": GOOD, "mac2": {**GOOD, "port": 8856}})
        assert [n.port for n in view.peers] == [8856] and view.skipped == {}

    def test_update_address_with_a_bad_neighbour(self, tmp_path: Path) -> None:
        """Moving a good node works while another node is disabled; moving a node whose entry
        stays invalid is refused and the file is left as it was."""
        path = write(tmp_path / "fleet.json", {"mac1": GOOD, "mac2": GOOD,
                                               "bad": {**GOOD, "user": "root;x"}})
        assert update_address(path, "mac2", "127.0.0.9", 9000).host == "127.0.0.9"
        assert load_multifleet(path).nodes["mac2"].port == 9000
        before = path.read_text()
        with pytest.raises(ConfigError, match="unsafe user"):
            update_address(path, "bad", "127.0.0.8", 9001)
        assert path.read_text() == before


class TestCommand:
    def test_probe_and_status_with_a_bad_node(self, dirs: Any, cli: Any) -> None:
        """Through the real CLI: the good node is probed, the bad one is listed as skipped
        with its reason (JSON and table) and named in a warning; probing it exits 2."""
        path = write(dirs.root / "fleet.json", {
            "mac1": {**GOOD, "role": "chief"},
            "mac2": {"host": "127.0.0.1", "port": 9},
            "evil": {"host": "-oProxyCommand=touch /tmp/pwned"},
        })
        env = {**dirs.env, "HEALER_FLEET_CONFIG": str(path), "HEALER_NODE_ID": "mac1"}
        r = cli("fleet", "probe", "mac2", "--channel", "seed", "--json", env=env)
        assert r.code == 0, r.err
        assert json.loads(r.out)["channels"]["seed"]["ok"] is True
        assert "node 'evil' is disabled" in r.err and "unsafe host" in r.err
        r = cli("fleet", "status", "--json", env=env)
        doc = json.loads(r.out)
        assert set(doc["peers"]) == {"mac2"}
        assert "unsafe host '-oProxyCommand" in doc["skipped"]["evil"]
        assert r.code == 1  # a disabled node is something broken
        r = cli("fleet", "status", env=env)
        assert "evil: disabled" in r.out and "Traceback" not in r.err
        r = cli("fleet", "probe", "evil", env=env)
        assert r.code == 2 and "peer 'evil' is disabled" in r.err and "Traceback" not in r.err
