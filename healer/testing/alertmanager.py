"""Start a real Prometheus Alertmanager on 127.0.0.1 that sends its webhooks to healer.

::

    with Alertmanager(webhook_url, token="s3cret") as am:
        am.fire({"alertname": "HighErrorRate", "severity": "critical"},
                {"summary": "ZeroDivisionError: division by zero", "file": "app/pay.py"})
        ...
        am.resolve({"alertname": "HighErrorRate", "severity": "critical"})

The Debian package's binary (``/usr/bin/prometheus-alertmanager``, or ``alertmanager`` on
PATH) runs with a temporary config and storage path, clustering off
(``--cluster.listen-address=``), and short ``group_wait``/``group_interval`` so notifications
arrive in about a second. The webhook receiver authenticates with
``http_config.authorization.credentials`` (``Authorization: Bearer <token>``) and sends
resolved notifications. Alerts are posted through the v2 API (``POST /api/v2/alerts``), as
Prometheus or Loki's ruler would.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import yaml

from healer.demo.ports import free_port

CANDIDATES = ("/usr/bin/prometheus-alertmanager", "prometheus-alertmanager", "alertmanager")


def alertmanager_binary() -> str | None:
    """The Alertmanager binary, or None when it is not installed."""
    for name in CANDIDATES:
        found = shutil.which(name) if "/" not in name else (name if Path(name).is_file()
                                                             else None)
        if found:
            return found
    return None


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


class Alertmanager:
    """A real Alertmanager process routing every alert to one webhook."""

    def __init__(self, webhook_url: str, *, token: str = "", group_wait: str = "1s",
                 group_interval: str = "1s", repeat_interval: str = "1h",
                 group_by: tuple[str, ...] = ("alertname",), binary: str | None = None):
        self.binary = binary or alertmanager_binary()
        if self.binary is None:
            raise FileNotFoundError("prometheus-alertmanager is not installed "
                                    "(apt-get install prometheus-alertmanager)")
        self.webhook_url = webhook_url
        self.token = token
        self.route = {"receiver": "healer", "group_by": list(group_by),
                      "group_wait": group_wait, "group_interval": group_interval,
                      "repeat_interval": repeat_interval}
        self.proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.port = 0
        self.url = ""

    def config(self) -> dict[str, Any]:
        hook: dict[str, Any] = {"url": self.webhook_url, "send_resolved": True}
        if self.token:
            hook["http_config"] = {"authorization": {"type": "Bearer",
                                                     "credentials": self.token}}
        return {"route": self.route, "receivers": [{"name": "healer",
                                                   "webhook_configs": [hook]}]}

    def start(self, timeout: float = 20.0) -> Alertmanager:
        assert self.binary is not None
        self._tmp = tempfile.TemporaryDirectory(prefix="healer-am-")
        folder = Path(self._tmp.name)
        (folder / "alertmanager.yml").write_text(yaml.safe_dump(self.config()))
        (folder / "data").mkdir()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(folder / "alertmanager.log", "wb")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={folder / 'alertmanager.yml'}",
             f"--storage.path={folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", f"--web.external-url={self.url}",
             "--cluster.listen-address=",
             "--log.level=warn"], stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"alertmanager exited ({self.proc.returncode}): {self.log()}")
            try:
                if httpx.get(self.url + "/-/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"alertmanager not ready within {timeout} s: {self.log()}")

    def log(self) -> str:
        if self._tmp is None:
            return ""
        try:
            return (Path(self._tmp.name) / "alertmanager.log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def post(self, alerts: list[Mapping[str, Any]]) -> None:
        """``POST /api/v2/alerts`` as Prometheus does."""
        resp = httpx.post(self.url + "/api/v2/alerts", json=list(alerts), timeout=10)
        resp.raise_for_status()

    def fire(self, labels: Mapping[str, str], annotations: Mapping[str, str] | None = None,
             *, generator_url: str = "http://127.0.0.1:9090/graph") -> None:
        """Start (or keep firing) an alert for the next hour."""
        now = datetime.now(UTC)
        self.post([{"labels": dict(labels), "annotations": dict(annotations or {}),
                    "startsAt": _iso(now - timedelta(seconds=1)),
                    "endsAt": _iso(now + timedelta(hours=1)), "generatorURL": generator_url}])

    def resolve(self, labels: Mapping[str, str],
                annotations: Mapping[str, str] | None = None) -> None:
        """End an alert now (Alertmanager then sends the resolved notification)."""
        now = datetime.now(UTC)
        self.post([{"labels": dict(labels), "annotations": dict(annotations or {}),
                    "startsAt": _iso(now - timedelta(minutes=1)),
                    "endsAt": _iso(now - timedelta(milliseconds=1))}])

    def alerts(self) -> list[dict[str, Any]]:
        resp = httpx.get(self.url + "/api/v2/alerts", timeout=10)
        resp.raise_for_status()
        return list(resp.json())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if getattr(self, "_log", None) is not None:
            self._log.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Alertmanager:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
