"""The real @sentry/node from npm, in a Node subprocess, its DSN pointed at a running
`healer serve`, reports into incidents.

The pinned SDK (healer.testing.sentry_node.PIN) is installed once into ``$HEALER_NPM_CACHE``
or ``<repo>/.cache/npm-sentry`` (``make setup-test`` does it ahead); without node, or with a
registry npm cannot reach, these tests skip and say so.
"""

from __future__ import annotations

import gzip
import http.server
import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.testing import sentry_node
from healer.testing.api import ServeProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

KEY = "b2c3d4e5f60718293a4b5c6d7e8f90a1"
CACHE = sentry_node.cache_dir()  # read now: the suite's autouse fixture drops HEALER_* vars

# A shop module with a named function that fails; the script requires the SDK by path.
CHECKOUT_JS = """\
'use strict';

function splitBill(total, guests) {
  if (!guests) {
    throw new RangeError('cannot split a bill among no guests');
  }
  return total / guests;
}

module.exports = { splitBill };
"""

NODE_SCRIPT = """\
'use strict';
const Sentry = require(process.env.SENTRY_NODE_MODULE);
const {{ splitBill }} = require({checkout});

Sentry.init({{ dsn: process.env.SENTRY_DSN, release: 'shop@1.0.0', environment: 'e2e',
              sendClientReports: false }});

(async () => {{
  for (let i = 0; i < {times}; i++) {{
    try {{
      splitBill(10 + i, 0);
    }} catch (err) {{
      Sentry.setUser({{ id: 'user-' + (i % 2), email: 'u' + i + '@example.com' }});
      Sentry.setTag('shop.flow', 'checkout');
      Sentry.addBreadcrumb({{ category: 'cart', message: 'added item ' + i }});
      // The last one is over the transport's 32 KiB gzip threshold.
      const extra = i === {times} - 1 ? {{ basket: 'x'.repeat(40 * 1024) }} : {{}};
      Sentry.captureException(err, {{ extra }});
    }}
  }}
  {after}
  const flushed = await Sentry.flush(5000);
  console.log(JSON.stringify({{ flushed }}));
}})().catch((err) => {{ console.error(err); process.exit(1); }});
"""


@pytest.fixture(scope="session")
def sdk() -> sentry_node.NodeSdk:
    try:
        return sentry_node.ensure(CACHE)
    except sentry_node.Unavailable as exc:
        pytest.skip(str(exc))


def run_node(sdk: sentry_node.NodeSdk, shop: Path, dsn: str, *, times: int = 3,
             after: str = "") -> subprocess.CompletedProcess[str]:
    checkout = shop / "app" / "checkout.js"
    checkout.write_text(CHECKOUT_JS)
    script = shop / "report.js"
    script.write_text(NODE_SCRIPT.format(checkout=json.dumps(str(checkout)), times=times,
                                         after=after))
    # No proxy: the transport honours http_proxy, and the DSN is on loopback.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HEALER") and k.lower() not in ("http_proxy", "https_proxy")}
    env.update(SENTRY_NODE_MODULE=str(sdk.module), SENTRY_DSN=dsn, NO_COLOR="1")
    done = subprocess.run([sdk.node, str(script)], capture_output=True, text=True, timeout=120,
                          env=env, cwd=shop)
    assert done.returncode == 0, done.stderr
    assert '"flushed":true' in done.stdout, (done.stdout, done.stderr)
    return done


@pytest.fixture
def healer(serve_env: Any) -> Iterator[ServeProcess]:
    s = ServeProcess(serve_env(HEALER_SENTRY_KEY=KEY, HEALER__CONTEXT__ENABLED="false"))
    yield s
    s.close()


def dsn(url: str, key: str = KEY, project: int = 7) -> str:
    return re.sub(r"^http://", f"http://{key}@", url.rstrip("/")) + f"/{project}"


def incidents(server: ServeProcess) -> list[dict[str, Any]]:
    """The code incidents in healer's ledger."""
    found: list[dict[str, Any]] = server.http.get(
        "/api/v1/incidents", params={"kind": "code"}).json()["incidents"]
    return found


def detail(server: ServeProcess, iid: str) -> dict[str, Any]:
    """The living-context record of incident ``iid``: its error, culprit and Sentry parts."""
    found = [i for i in server.http.get("/api/v1/context/incidents").json()["incidents"]
             if i["id"] == iid]
    assert len(found) == 1, iid
    return found[0]


def metric(server: ServeProcess, result: str) -> float:
    """``healer_webhooks_total{source="sentry_sdk", result=...}``."""
    for line in server.http.get("/metrics").text.splitlines():
        if (line.startswith("healer_webhooks_total{") and 'source="sentry_sdk"' in line
                and f'result="{result}"' in line):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class _Capture(http.server.BaseHTTPRequestHandler):
    """Records each request's path, headers, whether its body is gzip data, and its envelope
    item types; answers ``{}``."""

    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = b""
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            while (size := int(self.rfile.readline().split(b";")[0].strip(), 16)):
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
        gzipped = body[:2] == b"\x1f\x8b"
        lines = (gzip.decompress(body) if gzipped else body).split(b"\n")
        self.seen.append({"path": self.path, "headers": {k.lower(): v for k, v in
                                                         self.headers.items()},
                          "gzip": gzipped, "items": [json.loads(lines[i])["type"] for i in
                                                     range(1, len(lines) - 1, 2)]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


class TestNodeSdk:
    def test_three_throws_are_one_incident_with_the_culprit(self, sdk: sentry_node.NodeSdk,
                                                            healer: ServeProcess,
                                                            project: Path) -> None:
        """The same RangeError thrown 3 times from splitBill (one body gzipped by the SDK, two
        plain) is one code incident, count 3, naming app/checkout.js and splitBill; a
        captured message is an incident of its own."""
        run_node(sdk, project, dsn(healer.url),
                 after="Sentry.captureMessage('checkout took too long', 'error');")

        def settled() -> Any:
            found = incidents(healer)
            code = [i for i in found if "RangeError" in i["summary"]]
            msg = [i for i in found if "checkout took too long" in i["summary"]]
            return (code[0], msg[0]) if code and msg and code[0]["count"] == 3 else None

        code, msg = healer.wait_for(settled, timeout=60)
        assert len(incidents(healer)) == 2, incidents(healer)
        assert code["status"] == "open" and code["source"] == "sentry"
        full = detail(healer, code["id"])
        err = full["error"]
        assert err["file"] == "app/checkout.js"
        assert err["function"] == "splitBill"
        assert err["source"] == "sentry"
        assert code["count"] == 3
        assert "cannot split a bill among no guests" in err["message"]
        assert "at splitBill (app/checkout.js:" in err["stackTrace"]
        assert full["call_site"] == "app/checkout.js:splitBill"
        assert full["detail"]["platform"] == "node"
        assert full["detail"]["sdk"] == "sentry.javascript.node"
        assert err["sentry"]["users"] == 2  # user-0 and user-1, counted, never stored
        assert "user-0" not in str(code) and "u0@example.com" not in str(code)
        assert err["sentry"]["tags"]["shop.flow"] == "checkout"
        assert err["sentry"]["release"] == "shop@1.0.0"
        assert detail(healer, msg["id"])["error"]["message"] == "checkout took too long"
        assert msg["id"] != code["id"]
        assert metric(healer, "accepted") >= 4
        assert metric(healer, "invalid") == 0

    def test_a_wrong_key_is_refused_and_nothing_is_stored(self, sdk: sentry_node.NodeSdk,
                                                          healer: ServeProcess,
                                                          project: Path) -> None:
        """The SDK with a key healer does not know gets 403 and nothing is filed; the right
        key right after is."""
        run_node(sdk, project, dsn(healer.url, key="0" * 32), times=1)
        # The SDK waited for every answer: the event's and the release's session updates'.
        refused = metric(healer, "forbidden")
        assert refused >= 1
        assert metric(healer, "accepted") == 0
        assert incidents(healer) == []
        run_node(sdk, project, dsn(healer.url), times=1)
        healer.wait_for(lambda: incidents(healer), timeout=60)
        assert len(incidents(healer)) == 1
        assert metric(healer, "forbidden") == refused

    def test_what_the_transport_sends(self, sdk: sentry_node.NodeSdk, project: Path) -> None:
        """The wire format the guard lets through on the ingest paths: an envelope POST with
        no Content-Type, streamed (chunked, no Content-Length), the key in the query string,
        gzip only over 32 KiB."""
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
        _Capture.seen = seen = []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            run_node(sdk, project, dsn(f"http://127.0.0.1:{server.server_address[1]}"),
                     times=2)
        finally:
            server.shutdown()
            server.server_close()
        events = [r for r in seen if r["items"] == ["event"]]
        assert len(events) == 2, [r["items"] for r in seen]  # the others: session updates
        for req in seen:
            assert req["path"].startswith(f"/api/7/envelope/?sentry_version=7&sentry_key={KEY}&")
            assert "content-type" not in req["headers"]
            assert "content-length" not in req["headers"]
            assert req["headers"]["transfer-encoding"] == "chunked"
            assert "x-sentry-auth" not in req["headers"]
            assert req["headers"]["user-agent"] == f"sentry.javascript.node/{sdk.version}"
        encodings = sorted(r["headers"].get("content-encoding", "") for r in events)
        assert encodings == ["", "gzip"]  # the one with a 40 KiB extra
        assert all(r["gzip"] == ("content-encoding" in r["headers"]) for r in seen)
