"""Capture a fixture's error as sentry-sdk really sends it: ``envelope.bin``.

    .venv/bin/python evals/capture.py evals/fixtures/py-division-by-zero \\
        --call shop.pricing:apply_discount --args '[100, 10, 0]'

Starts a capture server on 127.0.0.1 (a free port), points sentry-sdk at it with a DSN, imports
``--call`` from the fixture's ``repo/`` and calls it with ``--args`` (a JSON list); the exception
it raises is captured by sentry-sdk and the envelope it sends is written, byte for byte, to
``<fixture>/envelope.bin``. Nothing leaves the machine; no default integrations, no PII.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar


class _Capture(BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        if self.headers.get("content-encoding"):
            body = b""  # asked for uncompressed below; anything else is not the event
        if b'"type":"event"' in body.replace(b" ", b""):
            self.bodies.append(body)
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("fixture", type=Path)
    p.add_argument("--call", required=True, help="module:function inside the fixture's repo/")
    p.add_argument("--args", default="[]", help="the function's arguments, a JSON list")
    args = p.parse_args(argv)
    import sentry_sdk

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    # A release and environment like a deployment's; paths relative to the repository.
    sentry_sdk.init(dsn=f"http://evalkey@127.0.0.1:{port}/1", default_integrations=False,
                    release="shop@1.4.2", environment="production", send_default_pii=False,
                    # The envelope as the SDK builds it, uncompressed: readable in review.
                    _experiments={"transport_compression_level": 0})
    repo = (args.fixture / "repo").resolve()
    sys.path.insert(0, str(repo))
    module_name, _, func = args.call.partition(":")
    target = getattr(importlib.import_module(module_name), func)
    try:
        target(*json.loads(args.args))
    except Exception as exc:  # the bug: what the fixture is about
        sentry_sdk.capture_exception(exc)
    else:
        print("capture: the call raised nothing", file=sys.stderr)
        return 1
    sentry_sdk.flush(timeout=10)
    server.shutdown()
    if not _Capture.bodies:
        print("capture: sentry-sdk sent no event", file=sys.stderr)
        return 1
    (args.fixture / "envelope.bin").write_bytes(_Capture.bodies[-1])
    print(f"wrote {args.fixture / 'envelope.bin'} ({len(_Capture.bodies[-1])} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
