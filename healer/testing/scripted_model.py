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
import itertools
import json
import re
import socket
import string
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

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
_ids = itertools.count(1)


# ---------------------------------------------------------------------------------------------
# What a script is made of


@dataclass(frozen=True)
class Reply:
    """One assistant message: Anthropic content blocks and a stop reason.

    ``stop_reason`` defaults to ``tool_use`` when a block is a tool use, else ``end_turn``.
    """

    content: tuple[dict[str, Any], ...]
    stop_reason: str | None = None

    @property
    def effective_stop_reason(self) -> str:
        if self.stop_reason:
            return self.stop_reason
        return "tool_use" if any(b["type"] == "tool_use" for b in self.content) else "end_turn"


@dataclass(frozen=True)
class Fault:
    """Something going wrong instead of a reply.

    ``http_error``: answer ``status`` with an Anthropic error body. ``break_stream``: send
    ``after_events`` SSE events of ``reply`` (half the body, for a non-streaming request) then
    drop the connection. ``hang``: accept the request and answer nothing for ``seconds``
    (None: until the server stops).

    ``times``: how many requests the fault answers before the script moves on. Claude Code
    retries failed requests (and falls back from streaming), so the default ``None`` keeps
    the model broken for good; ``times=1`` is a blip the CLI's retry gets past.
    """

    kind: Literal["http_error", "break_stream", "hang"]
    status: int = 500
    error_type: str = "api_error"
    message: str = "scripted fault"
    after_events: int = 3
    seconds: float | None = None
    reply: Reply | None = None
    times: int | None = None


Turn = Reply | Fault | Callable[["RecordedRequest"], "Reply | Fault"]


def text(body: str) -> Reply:
    """A turn that only says ``body`` and ends."""
    return Reply(({"type": "text", "text": body},))


def tool_use(name: str, input: Mapping[str, Any], *, text: str = "", id: str = "") -> Reply:
    """A turn that calls tool ``name`` with ``input`` (after saying ``text``, if given)."""
    return reply(*([text_block(text)] if text else []), tool_block(name, input, id=id))


def reply(*blocks: dict[str, Any], stop_reason: str | None = None) -> Reply:
    """A turn made of several blocks, e.g. two tool uses at once."""
    return Reply(tuple(blocks), stop_reason)


def text_block(body: str) -> dict[str, Any]:
    return {"type": "text", "text": body}


def tool_block(name: str, input: Mapping[str, Any], *, id: str = "") -> dict[str, Any]:
    return {"type": "tool_use", "id": id or f"toolu_scripted_{next(_ids):06d}", "name": name,
            "input": dict(input)}


def http_error(status: int = 529, error_type: str = "overloaded_error",
               message: str = "Overloaded", *, times: int | None = None) -> Fault:
    """The model answers with an HTTP error (529 overloaded by default)."""
    return Fault("http_error", status=status, error_type=error_type, message=message,
                 times=times)


def break_stream(after_events: int = 3, reply: Reply | None = None, *,
                 times: int | None = None) -> Fault:
    """The model's stream stops after ``after_events`` events, connection dropped."""
    return Fault("break_stream", after_events=after_events,
                 reply=reply or text("this reply is cut off midway"), times=times)


def hang(seconds: float | None = None, *, times: int | None = None) -> Fault:
    """The model never answers (or only after ``seconds``)."""
    return Fault("hang", seconds=seconds, times=times)


# ---------------------------------------------------------------------------------------------
# What was received


@dataclass
class RecordedRequest:
    """One HTTP request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float
    scripted: bool = False
    turn: int | None = None

    @property
    def json(self) -> dict[str, Any]:
        return self.body if isinstance(self.body, dict) else {}

    @property
    def model(self) -> str:
        return str(self.json.get("model", ""))

    @property
    def stream(self) -> bool:
        return bool(self.json.get("stream"))

    @property
    def system_text(self) -> str:
        """The system prompt as one string (Claude Code sends a list of text blocks)."""
        system = self.json.get("system", "")
        if isinstance(system, str):
            return system
        return "\n".join(b.get("text", "") for b in system if isinstance(b, dict))

    @property
    def tool_names(self) -> list[str]:
        return [t.get("name", "") for t in self.json.get("tools") or [] if isinstance(t, dict)]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.json.get("messages") or [])

    def user_text(self) -> str:
        """All text the user side (and the CLI's context blocks) sent, in order."""
        out: list[str] = []
        for m in self.messages:
            if m.get("role") == "assistant":
                continue
            content = m.get("content")
            if isinstance(content, str):
                out.append(content)
                continue
            for b in content or []:
                if isinstance(b, dict) and b.get("type") == "text":
                    out.append(str(b.get("text", "")))
        return "\n".join(out)

    def tool_results(self) -> list[dict[str, Any]]:
        """The ``tool_result`` blocks of the latest user message (answers to the last turn).

        Claude Code may add system-role context after it (budget notes); those are skipped.
        """
        users = [m for m in self.messages if m.get("role") == "user"]
        if not users:
            return []
        content = users[-1].get("content")
        if not isinstance(content, list):
            return []
        return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]

    def tool_result_text(self) -> str:
        parts: list[str] = []
        for block in self.tool_results():
            content = block.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts += [str(c.get("text", "")) for c in content if isinstance(c, dict)]
        return "\n".join(parts)


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
    msg_id = f"msg_scripted_{next(_ids):06d}"
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
    return {"id": f"msg_scripted_{next(_ids):06d}", "type": "message", "role": "assistant",
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

    def _send_json(self, status: int, data: Any) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.send_header("request-id", f"req_scripted_{next(_ids):06d}")
        if status >= 500 or status == 429:
            self.send_header("retry-after", "0")
            self.send_header("x-should-retry", "false")
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
                    "type": what.error_type, "message": what.message}})
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
        self.send_header("request-id", f"req_scripted_{next(_ids):06d}")
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
# Script files and the command line


def turn_from_dict(item: Mapping[str, Any]) -> Reply | Fault:
    """One turn from a script file entry (see docs/agents.md for the format)."""
    if not isinstance(item, Mapping):
        raise ValueError(f"a turn must be a mapping, got {type(item).__name__}")
    fault = item.get("fault")
    times = int(item["times"]) if item.get("times") is not None else None
    if fault == "http_error":
        return http_error(int(item.get("status", 529)), str(item.get("error_type",
                          "overloaded_error")), str(item.get("message", "Overloaded")),
                          times=times)
    if fault == "break_stream":
        return break_stream(int(item.get("after_events", 3)), times=times)
    if fault == "hang":
        seconds = item.get("seconds")
        return hang(float(seconds) if seconds is not None else None, times=times)
    if fault is not None:
        raise ValueError(f"unknown fault {fault!r} (http_error, break_stream, hang)")
    blocks: list[dict[str, Any]] = []
    if item.get("text"):
        blocks.append(text_block(str(item["text"])))
    calls = list(item.get("tools") or [])
    if item.get("tool"):
        calls.insert(0, {"name": item["tool"], "input": item.get("input", {})})
    for call in calls:
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            raise ValueError("a tool call needs a 'name' and an 'input' mapping")
        args = dict(call.get("input") or {})
        # Convenience: a Write whose content is a mapping writes it as JSON.
        if isinstance(args.get("content"), Mapping | list):
            args["content"] = json.dumps(args["content"], indent=2)
        blocks.append(tool_block(call["name"], args))
    if not blocks:
        raise ValueError("a turn needs 'text', 'tool'/'tools' or 'fault'")
    return Reply(tuple(blocks), item.get("stop_reason"))


def load_script(path: str | Path) -> list[Turn]:
    """A script file (JSON or YAML): a list of turns, or ``{"turns": [...]}``."""
    import yaml

    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, Mapping):
        data = data.get("turns")
    if not isinstance(data, list):
        raise ValueError("a script is a list of turns (or a mapping with 'turns')")
    return [turn_from_dict(item) for item in data]


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
