"""A new operator's first hour: what healer tells a person is true, and a check changes nothing.

* Every address healer writes for people or SDKs is the one it serves on: ``healer sentry dsn``
  beside a server on a non-default port names that port (and the DSN works); an escalation a
  server on a non-default port writes tells a person that port; ``api.public_url`` wins over
  both when set, and a bad one is a usage error.
* ``healer doctor`` leaves the file system as it found it.
* Usage mistakes are named: an unknown option of ``healer report``, a malformed ``--call-site``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from healer.testing.api import ServeProcess
from healer.testing.loop import healer_env
from healer.testing.wait import wait_for


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return healer_env(tmp_path / "state", tmp_path / "results", tmp_path / "fleet",
                      HEALER_EXECUTOR="playbook")


def healer(*argv: str, env: dict[str, str], cwd: Path | None = None,
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "healer", *argv], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def serve(env: dict[str, str]) -> Iterator[ServeProcess]:
    """``healer serve --port 0``: a port that is not the default 8083."""
    s = ServeProcess({**env, "HEALER__PLAY__REEVALUATE_AFTER_S": "0",
                      "HEALER__PLAY__MAX_ITERATIONS": "1"})
    try:
        yield s
    finally:
        s.close()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


class TestAddresses:
    def test_sentry_dsn_names_the_port_the_server_serves_on(
            self, serve: ServeProcess, env: dict[str, str]) -> None:
        """`healer sentry dsn` run beside `healer serve` names the server's port, and an SDK
        posting to that DSN is heard."""
        assert port_of(serve.url) != 8083
        r = healer("sentry", "dsn", "--json", env=env)
        assert r.returncode == 0, r.stderr
        dsn = json.loads(r.stdout)
        parts = httpx.URL(dsn["dsn"])
        assert (parts.host, parts.port) == ("127.0.0.1", port_of(serve.url))
        event = {"event_id": "a" * 32, "message": "first hour", "level": "error"}
        envelope = (json.dumps({"event_id": "a" * 32, "dsn": dsn["dsn"]}) + "\n"
                    + json.dumps({"type": "event"}) + "\n" + json.dumps(event) + "\n")
        resp = httpx.post(f"http://{parts.host}:{parts.port}/api/{dsn['project_id']}/envelope/",
                          content=envelope, headers={
                              "X-Sentry-Auth": f"Sentry sentry_version=7, sentry_key={dsn['key']}"})
        assert resp.status_code == 200, resp.text

    def test_public_url_wins_over_the_served_address(
            self, serve: ServeProcess, env: dict[str, str]) -> None:
        r = healer("sentry", "dsn", env={**env, "HEALER_PUBLIC_URL": "https://healer.example.com/"})
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("https://") and r.stdout.strip().endswith(
            "@healer.example.com/1")

    def test_without_a_server_the_configured_address(self, env: dict[str, str]) -> None:
        r = healer("sentry", "dsn", "--set", "api.port=9555", env=env)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip().endswith("@127.0.0.1:9555/1")

    @pytest.mark.parametrize("bad", ["healer.example.com", "ftp://x.example", "https://"])
    def test_a_public_url_that_is_no_url_is_a_usage_error(
            self, env: dict[str, str], bad: str) -> None:
        r = healer("sentry", "dsn", env={**env, "HEALER_PUBLIC_URL": bad})
        assert r.returncode == 2 and "api.public_url" in r.stderr
        assert "Traceback" not in r.stderr

    def test_an_escalation_names_the_port_the_server_serves_on(
            self, serve: ServeProcess, tmp_path: Path) -> None:
        """A play escalated by a server on a non-default port tells a person to reach that
        port, not the default."""
        http = serve.http
        r = http.post("/api/v1/session/start", json={
            "play_id": "play-first-hour", "repository": "5dlabs/cto",
            "cto_config": {"agents": {"rex": {"tools": {"remote": ["brave_search"]}}}}})
        assert r.status_code == 200, r.text
        r = http.post("/api/v1/session/play-first-hour/logs", json={"agent": "rex", "lines": [
            "ERROR Tool inventory MISMATCH for rex: missing: brave_search"]})
        assert r.status_code == 200, r.text
        human = tmp_path / "fleet" / "human"
        files = wait_for(lambda: sorted(human.glob("*.md")) if human.is_dir() else [],
                         timeout=120)
        text = files[0].read_text()
        port = port_of(serve.url)
        assert f"http://127.0.0.1:{port}/api/v1/session/play-first-hour" in text, text
        assert ":8083" not in text



def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its mode and size (what a check must not change)."""
    return {str(p.relative_to(root)): (p.lstat().st_mode, p.lstat().st_size)
            for p in root.rglob("*")}


class TestDoctor:
    def test_doctor_changes_nothing(self, tmp_path: Path) -> None:
        """In an empty HOME and working folder, `healer doctor` creates none of healer's
        folders: it says they will be created."""
        home, cwd = tmp_path / "home", tmp_path / "cwd"
        home.mkdir()
        cwd.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEALER")}
        env.update(HOME=str(home), HEALER_RESULTS_DIR=str(cwd / "results"))
        before = tree(tmp_path)
        r = healer("doctor", "--json", env=env, cwd=cwd)
        assert tree(tmp_path) == before
        checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
        for name in ("dir: state", "dir: results", "dir: fleet messages"):
            assert checks[name]["ok"] is True
            assert checks[name]["detail"].endswith("will be created (0700) when healer starts")


class TestUsageMistakes:
    def test_an_unknown_option_is_named_before_missing_ones(self, env: dict[str, str]) -> None:
        r = healer("report", "--bogus", "x", env=env)
        assert r.returncode == 2
        assert r.stderr.strip().splitlines()[-1] == \
            "healer report: error: unrecognized arguments: --bogus x"

    def test_missing_required_options_are_still_named(self, env: dict[str, str]) -> None:
        r = healer("report", "--message", "m", env=env)
        assert r.returncode == 2 and "the following arguments are required: --type" in r.stderr

    @pytest.mark.parametrize("bad", ["handler", "src/app.py:", ":handler", "src/app.py:9x",
                                     "a.py:f:g", " a.py:f"])
    def test_a_call_site_must_be_path_colon_function(self, env: dict[str, str],
                                                     bad: str) -> None:
        r = healer("report", "--type", "KeyError", "--message", "m", "--call-site", bad,
                   env=env)
        assert r.returncode == 2
        assert "is not PATH:FUNCTION" in r.stderr and "Traceback" not in r.stderr

    @pytest.mark.parametrize("good", ["src/app/tools.py:lookup", "app.py:Cls.run",
                                      "app.py:<module>", "my app/x.py:outer.<locals>.inner"])
    def test_call_sites_as_python_spells_them_pass(self, good: str) -> None:
        from healer.commands.report import call_site

        assert call_site(good) == good


README = Path(__file__).resolve().parent.parent / "README.md"


class TestReadme:
    def test_the_exit_codes_are_healers(self) -> None:
        """README's exit-code list names exactly the codes healer.errors defines."""
        import re

        from healer import errors

        text = " ".join(README.read_text().split())
        listed = text.split("Exit codes: ", 1)[1].split(". ", 1)[0]
        codes = {int(c) for c in re.findall(r"\*\*(\d+)\*\*", listed)}
        defined = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
        assert codes == defined
        assert "port already in use" in listed

    def test_the_play_example_says_how_long_escalation_takes(self) -> None:
        """The minutes README gives for the play example follow from the play defaults."""
        import re

        from healer.config.capabilities import PlaySettings

        play = PlaySettings()
        minutes = play.max_iterations * play.reevaluate_after_s / 60
        text = " ".join(README.read_text().split())
        said = re.search(r"the escalation comes about (\d+) minutes after the issue", text)
        assert said and int(said.group(1)) == round(minutes)


def test_the_public_url_is_an_address_the_api_answers_on(env: dict[str, str]) -> None:
    """Behind `api.public_url` a proxy forwards its Host: healer answers it, and still refuses
    a name nobody configured (DNS rebinding)."""
    s = ServeProcess({**env, "HEALER_PUBLIC_URL": "https://healer.example.com"})
    try:
        assert s.http.get("/health", headers={"Host": "healer.example.com"}).status_code == 200
        assert s.http.get("/health", headers={"Host": "evil.example"}).status_code == 421
    finally:
        s.close()
