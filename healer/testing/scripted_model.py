"""A scripted Anthropic Messages API on 127.0.0.1, to drive the real Claude Code CLI offline.

``ScriptedModel`` answers ``POST /v1/messages`` (SSE streaming and plain JSON) by replaying a
script chosen by the test: a list of turns, each a ``Reply`` (text and ``tool_use`` blocks —
built-in tools like Write, Edit, Bash, Read, or MCP tools ``mcp__<server>__<tool>``), a
``Fault`` (HTTP error, stream broken midway, hang), or a callable that receives the request
and returns either, so a script can react to tool results. Point the CLI at it with
``ANTHROPIC_BASE_URL`` and a dummy key (``model.env()`` gives both)::

    with ScriptedModel([tool_use("Write", {"file_path": "${cwd}/x.txt", "content": "hi"}),
                        text("done")]) as model:
        run_claude(env=model.env())
        assert model.requests[0].tool_names

Claude Code also sends side requests that are not the agent's conversation (a title or quota
check with a small model, token counting). Those get a short harmless answer and do not consume
the script: a ``/v1/messages`` request counts as a turn only when it carries the agent's tool
list or the system prompt the test expects (``is_turn`` decides; override it if needed).

String values in replies may use ``${name}`` placeholders, filled from the conversation's user
text with ``captures`` (regexes with one group). The defaults read healer's task prompts:
``${result_path}``, ``${run_id}``, ``${incident}``, ``${target}``, ``${kind}``, ``${cwd}``.

Every request is recorded (``model.requests``) with its path, headers (keys masked) and body.
Run it standalone with ``python -m healer.testing.scripted_model --script FILE``.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import string
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from healer.testing.model_script import (
    Fault,
    RecordedRequest,
    Reply,
    Turn,
    break_stream,
    hang,
    http_error,
    load_script,
    next_id,
    reply,
    text,
    text_block,
    tool_block,
    tool_use,
    turn_from_dict,
)

__all__ = [
    "DUMMY_API_KEY", "Fault", "RecordedRequest", "Reply", "ScriptedModel", "Turn",
    "break_stream", "hang", "http_error", "load_script", "main", "message_json", "reply",
    "sse_events", "text", "text_block", "tool_block", "tool_use", "turn_from_dict",
]

DUMMY_API_KEY = "sk-ant-scripted-model-dummy-key"

DEFAULT_CAPTURES: dict[str, str] = {
    "result_path": r"[Rr]esult file: `([^`\n]+)`",
    "run_id": r"run_id: `([^`\n]+)`",
    "incident": r"incident: `([^`\n]+)`",
    "target": r"target: `([^`\n]+)`",
    "kind": r"kind: `([^`\n]+)`",
    "cwd": r"[Ww]orking directory: `([^`\n]+)`|Primary working directory: (\S+)",
}
SIDE_REPLY = "ok"


# ---------------------------------------------------------------------------------------------
# The server


def _mask(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    out = {}
    for key, value in headers:
        low = key.lower()
        out[low] = "***" if low in ("x-api-key", "authorization") and value else value
    return out


class ScriptedModel:
    """An Anthropic Messages API replaying ``script`` on 127.0.0.1 (port 0 picks a free one)."""

    def __init__(
        self,
        script: Sequence[Turn] = (),
        *,
        port: int = 0,
        captures: Mapping[str, str] | None = None,
        system_marker: str = "",
        when_exhausted: Turn | None = None,
    ):
        self.script: list[Turn] = list(script)
        self.captures = dict(DEFAULT_CAPTURES if captures is None else captures)
        self.system_marker = system_marker
        self.when_exhausted: Turn = when_exhausted or text("(script exhausted)")
        self.requests: list[RecordedRequest] = []
        self.exhausted_requests = 0
        self._port = port
        self._lock = threading.Lock()
        self._next = 0
        self._uses = 0  # requests the current (fault) turn has answered
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> ScriptedModel:
        server = _Server(("127.0.0.1", self._port), _Handler)
        server.model = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="scripted-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases hanging handlers
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("ScriptedModel is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment that points Claude Code (or any Anthropic client) at this server."""
        return {"ANTHROPIC_BASE_URL": self.url, "ANTHROPIC_API_KEY": DUMMY_API_KEY}

    # -- the script ------------------------------------------------------------------------

    def add(self, *turns: Turn) -> None:
        with self._lock:
            self.script.extend(turns)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self.script) - self._next

    @property
    def turns(self) -> list[RecordedRequest]:
        """The requests that consumed a scripted turn, in order."""
        return [r for r in self.requests if r.scripted]

    def is_turn(self, req: RecordedRequest) -> bool:
        """Whether a /v1/messages request is the agent's conversation, not a side request."""
        if self.system_marker:
            return self.system_marker in req.system_text
        return bool(req.json.get("tools"))

    def _take(self, req: RecordedRequest) -> Turn:
        with self._lock:
            if self._next < len(self.script):
                turn = self.script[self._next]
                req.turn = self._next
                self._uses += 1
                if not isinstance(turn, Fault) or (turn.times is not None
                                                   and self._uses >= turn.times):
                    self._next += 1
                    self._uses = 0
                return turn
            self.exhausted_requests += 1
            return self.when_exhausted

    def resolve(self, req: RecordedRequest) -> Reply | Fault:
        turn = self._take(req)
        result = turn(req) if callable(turn) else turn
        if isinstance(result, Reply):
            result = _fill(result, self._values(req))
        return result

    def _values(self, req: RecordedRequest) -> dict[str, str]:
        haystack = req.user_text() + "\n" + req.system_text
        values = {}
        for name, pattern in self.captures.items():
            m = re.search(pattern, haystack)
            if m:
                values[name] = next((g for g in m.groups() if g is not None), m.group(0))
        return values


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    model: ScriptedModel


def _fill(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, Reply):
        return Reply(tuple(_fill(b, values) for b in value.content), value.stop_reason)
    if isinstance(value, str):
        return string.Template(value).safe_substitute(values)
    if isinstance(value, dict):
        return {k: _fill(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, values) for v in value]
    return value


def _usage(req: RecordedRequest) -> dict[str, int]:
    size = len(json.dumps(req.json.get("messages", []))) // 4
    return {"input_tokens": max(1, size), "output_tokens": 1,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def sse_events(reply_: Reply, model: str, usage: Mapping[str, int]) -> list[dict[str, Any]]:
    """The Messages API streaming events of ``reply_``, in wire order."""
    msg_id = next_id("msg")
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {
        "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": dict(usage)}}]
    for i, block in enumerate(reply_.content):
        if block["type"] == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            raw = json.dumps(block["input"])
            # Split the arguments in two deltas, as the real API streams them in pieces.
            half = len(raw) // 2
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in (raw[:half],
                                                                                raw[half:])]
        else:
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        events.append({"type": "content_block_start", "index": i, "content_block": start})
        events += [{"type": "content_block_delta", "index": i, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": i})
    events.append({"type": "message_delta", "delta": {
        "stop_reason": reply_.effective_stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": 10}})
    events.append({"type": "message_stop"})
    return events


def message_json(reply_: Reply, model: str, usage: Mapping[str, int]) -> dict[str, Any]:
    """The non-streaming Messages API body of ``reply_``."""
    return {"id": next_id("msg"), "type": "message", "role": "assistant",
            "model": model, "content": [dict(b) for b in reply_.content],
            "stop_reason": reply_.effective_stop_reason, "stop_sequence": None,
            "usage": {**usage, "output_tokens": 10}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are recorded, not printed

    # -- plumbing --------------------------------------------------------------------------

    def _read_body(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return raw.decode(errors="replace")

    def _record(self, body: Any) -> RecordedRequest:
        req = RecordedRequest(self.command, self.path, _mask(self.headers.items()), body,
                              time.time())
        with self.server.model._lock:
            self.server.model.requests.append(req)
        return req

    def _send_json(self, status: int, data: Any, headers: Mapping[str, str] | None = None,
                   req: RecordedRequest | None = None) -> None:
        """Answer ``data``; ``headers`` replace the defaults of the same name."""
        raw = json.dumps(data).encode()
        sent: dict[str, str] = {"request-id": next_id("req")}
        if status >= 500 or status == 429:
            sent.update({"retry-after": "0", "x-should-retry": "false"})
        for key, value in (headers or {}).items():
            sent = {k: v for k, v in sent.items() if k.lower() != key.lower()}
            sent[key] = value
        if req is not None:  # before sending: a client may act on the headers at once
            req.response_status, req.response_headers = status, sent
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        for key, value in sent.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(raw)

    def _send_cut(self, raw: bytes) -> None:
        """Promise the whole body, send half of it, drop the connection."""
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw[: len(raw) // 2])
        self.wfile.flush()
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    # -- routes ----------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._record(None)
        self._send_json(200, {"data": [], "has_more": False} if "models" in self.path else {})

    def do_HEAD(self) -> None:
        self._record(None)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = self._read_body()
        req = self._record(body)
        path = self.path.split("?", 1)[0]
        if path.endswith("/count_tokens"):
            self._send_json(200, {"input_tokens": _usage(req)["input_tokens"]})
            return
        if not path.endswith("/v1/messages"):
            self._send_json(200, {})
            return
        model = self.server.model
        if not model.is_turn(req):
            self._answer(req, text(SIDE_REPLY))
            return
        req.scripted = True
        self._answer(req, model.resolve(req))

    def _answer(self, req: RecordedRequest, what: Reply | Fault) -> None:
        model_name = req.model or "claude-scripted"
        if isinstance(what, Fault):
            if what.kind == "hang":
                self.server.model._stopping.wait(what.seconds)
                self.close_connection = True
                return
            if what.kind == "http_error":
                self._send_json(what.status, {"type": "error", "error": {
                    "type": what.error_type, "message": what.message}}, what.headers, req)
                return
        usage = _usage(req)
        if not req.stream:
            reply_ = what.reply if isinstance(what, Fault) else what
            assert reply_ is not None
            if isinstance(what, Fault):
                self._send_cut(json.dumps(message_json(reply_, model_name, usage)).encode())
            else:
                self._send_json(200, message_json(reply_, model_name, usage))
            return
        reply_ = what.reply if isinstance(what, Fault) and what.reply else what
        assert isinstance(reply_, Reply)
        events = sse_events(reply_, model_name, usage)
        cut = what.after_events if isinstance(what, Fault) else len(events)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", next_id("req"))
        self.end_headers()
        try:
            for event in events[:cut]:
                self._chunk(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
            if isinstance(what, Fault):
                # No terminating chunk: the client sees the connection die mid-body.
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True



# ---------------------------------------------------------------------------------------------
# The command line


def main(argv: list[str] | None = None) -> int:
    """``python -m healer.testing.scripted_model --script FILE [--port N]``."""
    import argparse
    import signal
    import sys

    p = argparse.ArgumentParser(
        prog="python -m healer.testing.scripted_model",
        description="Serve a scripted Anthropic Messages API on 127.0.0.1 for Claude Code.",
    )
    p.add_argument("--script", required=True, help="JSON or YAML list of turns")
    p.add_argument("--port", type=int, default=0, help="TCP port (default: a free one)")
    p.add_argument("--system-marker", default="",
                   help="count a request as a turn only if its system prompt contains this")
    p.add_argument("--log", help="append every received request as one JSON line to this file")
    args = p.parse_args(argv)
    try:
        script = load_script(args.script)
    except (OSError, ValueError) as exc:
        print(f"scripted_model: {args.script}: {exc}", file=sys.stderr)
        return 2
    model = ScriptedModel(script, port=args.port, system_marker=args.system_marker)
    try:
        model.start()
    except OSError as exc:
        print(f"scripted_model: cannot listen: {exc}", file=sys.stderr)
        return 2
    print(f"ANTHROPIC_BASE_URL={model.url}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    seen = 0
    try:
        while not stop.wait(0.2):
            if args.log:
                with model._lock:
                    new = model.requests[seen:]
                    seen = len(model.requests)
                with open(args.log, "a", encoding="utf-8") as fh:
                    for r in new:
                        fh.write(json.dumps({"method": r.method, "path": r.path,
                                             "scripted": r.scripted, "turn": r.turn,
                                             "body": r.body}) + "\n")
    except KeyboardInterrupt:
        pass
    finally:
        model.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
