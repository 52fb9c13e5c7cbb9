"""What a ScriptedModel replays and records: turns, faults, requests, script files.

See ``healer.testing.scripted_model`` for the server and how to use it.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

_ids = itertools.count(1)


def next_id(prefix: str) -> str:
    """A fresh id in the style of the real API (``toolu_…``, ``msg_…``)."""
    return f"{prefix}_scripted_{next(_ids):06d}"


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

    ``http_error``: answer ``status`` with an Anthropic error body, plus ``headers`` (e.g.
    ``retry-after``, ``anthropic-ratelimit-requests-reset``, ``x-should-retry``,
    ``request-id``), which replace the server's defaults of the same name (case-insensitive:
    ``request-id`` always, ``retry-after: 0`` and ``x-should-retry: false`` for 429 and 5xx).
    ``break_stream``: send
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
    headers: Mapping[str, str] = field(default_factory=dict, hash=False)


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
    return {"type": "tool_use", "id": id or next_id("toolu"), "name": name,
            "input": dict(input)}


def http_error(status: int = 529, error_type: str = "overloaded_error",
               message: str = "Overloaded", *, times: int | None = None,
               headers: Mapping[str, str] | None = None) -> Fault:
    """The model answers with an HTTP error (529 overloaded by default), with ``headers``."""
    return Fault("http_error", status=status, error_type=error_type, message=message,
                 times=times, headers={str(k): str(v) for k, v in (headers or {}).items()})


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
    #: What the server answered with an error (status, headers sent); None for replies.
    response_status: int | None = None
    response_headers: dict[str, str] | None = None

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
# Script files and the command line


def turn_from_dict(item: Mapping[str, Any]) -> Reply | Fault:
    """One turn from a script file entry (see docs/agents.md for the format)."""
    if not isinstance(item, Mapping):
        raise ValueError(f"a turn must be a mapping, got {type(item).__name__}")
    fault = item.get("fault")
    times = int(item["times"]) if item.get("times") is not None else None
    if fault == "http_error":
        headers = item.get("headers") or {}
        if not isinstance(headers, Mapping):
            raise ValueError("an http_error's 'headers' must be a mapping of names to values")
        return http_error(int(item.get("status", 529)), str(item.get("error_type",
                          "overloaded_error")), str(item.get("message", "Overloaded")),
                          times=times, headers=headers)
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
