"""The line model: what a matched log line is before any pattern is believed.

A line from a merged agent log carries wrappers the patterns must see through, and a level
and a speaker that decide whether a failure word in it is a failure at all::

    [pod/rex-7f9c/agent] 2026-12-01T10:00:00.123Z INFO retrying after timeout   ← info: no
    web-1  | ERROR connect: connection refused                                   ← error: yes
    {"type":"assistant","message":{"content":[{"type":"text","text":"add a timeout"}]}}
                                                   ← the agent's own words: never a failure

``view(line)`` strips the known prefixes — ``kubectl logs --prefix`` (``[pod/NAME/CONTAINER]``),
``--timestamps`` / RFC 3339 stamps, compose and docker ``service | `` — and takes the source
from them; it reads the level from every common format (JSON ``level``/``severity``/``lvl``/
``levelname``, logfmt, ``[INFO]``/``<warn>``, bare ``INFO``/``WARN``/``ERROR``/``FATAL`` near the
start as Python logging, Rust tracing/env_logger and Codex print them, klog ``I/W/E/F``, syslog
``<PRI>``); and it recognises structured agent transcripts: Claude Code stream-json and Codex
JSON events, where what the agent says or writes (``assistant`` text, ``tool_use`` input,
``agent_message``, reasoning) is *speech* and never a failure, while a ``tool_result`` with
``is_error``, an error ``result``, and API/stream error events are errors.

Only candidate lines (a pattern already matched) are ever viewed, so none of this costs
anything on the lines that make up almost all of a log.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from healer.detect import _native
from healer.detect._regex import LazyRegex
from healer.detect._timestamps import HEAD_BYTES, parse_ts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NamedTuple
else:
    from healer._runtime_typing import NamedTuple

# Levels, lowest first; "" is a line that states none.
LEVELS = ("trace", "debug", "info", "warn", "error", "fatal")
RANK = {name: n for n, name in enumerate(LEVELS)}
SPEECH = "speech"  # the agent's own words or code (a transcript): no pattern fires on it
LOG = "log"

_KUBECTL = LazyRegex(rb"\[pod/([^/\]\s]{1,253})/([^\]\s]{1,63})\] ")
_COMPOSE = LazyRegex(rb"([A-Za-z0-9][A-Za-z0-9_.-]{0,62})\s{0,40}\| ")
_STAMP = LazyRegex(rb"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?"
                    rb"(?:Z|z|[+-]\d{2}:?\d{2})? ")
_ANSI_FREE = LazyRegex(rb"\x1b\[[0-9;]*m")
_SYSLOG = LazyRegex(rb"<(\d{1,3})>")
_KLOG = LazyRegex(rb"([IWEF])\d{4} \d{2}:\d{2}:\d{2}")
# One search for the level of a plain-text line, in its first _LEVEL_REACH bytes: logfmt
# (``level=info``), a bracketed level (``[INFO]``, ``<warn>``) or a bare upper-case token at a
# word boundary (``INFO``, Python's ``Warning``) — not "error" in the middle of a sentence.
_ANY_LEVEL = LazyRegex(
    rb"(?i:(?:^|\s)(?:level|lvl|severity|loglevel)=\"?([a-z]{3,8})\b)"
    rb"|(?i:[\[<(]\s?(trace|debug|info|information|notice|warn|warning|error|err|fatal|"
    rb"critical|crit|panic|emerg|alert)\s?[\]>)])"
    rb"|(?:^|[\s:|\-\[])(TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|ERR|FATAL|CRITICAL|PANIC|"
    rb"Info|Warning|Error|Critical|Debug)(?=[\s:\]|\-]|$)")
_LEVEL_REACH = 96
_JSON_LEVEL = LazyRegex(rb'"(?:level|severity|lvl|levelname|log\.level|loglevel)"\s*:\s*'
                         rb'(?:"([A-Za-z]{1,12})"|(\d{1,3})\b)')
_SYSLOG_LEVELS = ("fatal", "fatal", "fatal", "error", "warn", "info", "info", "debug")

_WORDS = {
    "trace": "trace", "debug": "debug", "info": "info", "information": "info",
    "notice": "info", "warn": "warn", "warning": "warn", "error": "error", "err": "error",
    "fatal": "fatal", "critical": "fatal", "crit": "fatal", "panic": "fatal",
    "emerg": "fatal", "alert": "fatal", "dpanic": "fatal", "severe": "error",
    "i": "info", "w": "warn", "e": "error", "f": "fatal", "d": "debug", "t": "trace",
}
_KLOG_LEVEL = {b"I": "info", b"W": "warn", b"E": "error", b"F": "fatal"}


class LineView(NamedTuple):
    """One matched line as the catalog judges it."""

    body: bytes  # the line without its prefixes (what suppressions anchored at ^ see)
    level: str = ""  # one of LEVELS, or "" when the line states none
    source: str = ""  # "pod/NAME/CONTAINER" or a compose service, from the prefix
    part: str = LOG  # LOG, or SPEECH: the agent's own words (never a failure)


def judge(line: bytes) -> LineView | None:
    """``view(line)``, or None when it could not change a verdict: the line has no prefix, no
    JSON, no escape codes and no low level word in its head (so its level is warn or higher,
    or none). The engine asks this for every match; most matches are error lines."""
    return view(line) if needs_view(line) else None


def needs_view(line: bytes) -> bool:
    """Whether ``judge`` views the line (else it could not change a verdict)."""
    head = line[:160]
    if line[:5] == b"[pod/" or line[:1] == b"<" or b"{" in head or b"| " in head or \
            b"\x1b" in head:
        return True
    low = head.lower()
    return b"info" in low or b"debug" in low or b"trace" in low or b"notice" in low


# What makes ``judge`` look closer, as Hyperscan expressions over the heads of many lines
# (one line each, case-sensitive first, then caseless): the engine finds the lines to view in
# a block with one scan instead of nine tests a line (healer.detect._match.LineFlagger).
JUDGE_TRIGGERS = ((r"^\[pod/", True), (r"^<", True), (r"\{", True), (r"\| ", True),
                  (r"\x1b", True), (r"info|debug|trace|notice", False))
JUDGE_HEAD = 160


def view(line: bytes) -> LineView:
    """Prefixes off, level and source read, transcripts recognised (module doc)."""
    return LineView._make(view_fields(line))


_TRANSCRIPT = LazyRegex(rb'"type"|"msg": ?\{')
_JSON_WORDS: dict[bytes, str] = {}  # a _JSON_LEVEL match → its level
_PODS_SEEN: dict[bytes, str] = {}  # a kubectl prefix → the source it names


def view_fields(line: bytes) -> tuple[bytes, str, str, str]:
    """``view(line)`` as a plain tuple (body, level, source, part): what the engine uses."""
    body = line[:-1] if line[-1:] == b"\n" else line
    if body[-1:] == b"\r":
        body = body[:-1]
    if b"\x1b" in body:
        body = _ANSI_FREE.sub(b"", body)
    source = ""
    first = body[:1]
    # kubectl prefix, then its timestamp, then a compose prefix (in either order); each is
    # only tried when the first byte says it could be there — this runs for every match.
    # (None of them starts with "{": a JSON line skips the loop.)
    for _ in range(3 if first != b"{" else 0):
        first = body[:1]
        if first == b"[":
            m = _KUBECTL.match(body)
            if m:
                end = m.end()
                prefix = bytes(body[:end])  # (the reference path passes a bytearray)
                source = _PODS_SEEN.get(prefix)  # a merged log names a few pods, often
                if source is None:
                    source = "pod/" + m.group(1).decode("ascii", "replace") + "/" + \
                        m.group(2).decode("ascii", "replace")
                    if len(_PODS_SEEN) > 4096:
                        _PODS_SEEN.clear()
                    _PODS_SEEN[prefix] = source
                body = body[end:]
                continue
        if first.isdigit():
            m = _STAMP.match(body)
            if m:
                body = body[m.end():]
                continue
        if not source and first.isalnum() and b"| " in body[:110]:
            m = _COMPOSE.match(body)
            if m:
                source = m.group(1).decode("ascii", "replace")
                body = body[m.end():]
                continue
        break
    first = body[:1]
    if first == b"{" or (first == b" " and body.lstrip()[:1] == b"{"):
        if _TRANSCRIPT.search(body) is None:
            # A structured log record, not a transcript event: its level field is enough.
            m = _JSON_LEVEL.search(body)
            if m:
                found = m.group()
                word = _JSON_WORDS.get(found)
                if word is None:
                    word = _level_word(int(m.group(2)) if m.group(2) else m.group(1).decode(
                        "ascii"))
                    if len(_JSON_WORDS) > 4096:
                        _JSON_WORDS.clear()
                    _JSON_WORDS[found] = word
                return body, word, source, LOG
        return view_document(body, source)
    return body, _level(body), source, LOG


def view_document(body: bytes, source: str) -> tuple[bytes, str, str, str]:
    """``view_fields`` of a line whose ``body`` (prefixes off, from ``source``) starts a JSON
    document that must be read: a transcript event, or a record without a level field. The
    native line model (healer.detect._native) strips the prefixes and hands such lines here."""
    doc = _json(body)
    if doc is not None:
        level, part = _structured(doc)
        return body, level, source, part
    return body, _level(body), source, LOG


_scan_json = json.JSONDecoder().scan_once
_JSON_SPACE = " \t\n\r"  # json.decoder.WHITESPACE


def _json(text: bytes) -> dict[str, Any] | None:
    try:
        if text[1:2] == b"\x00":  # UTF-16 or UTF-32: json.loads detects it
            doc = json.loads(text)
        else:
            # What json.loads(text) does for a body that starts with "{" or a space (no BOM,
            # no NUL), without its encoding detection and the decoder's two regex calls: half
            # of its time on a transcript line.
            s = text.decode("utf-8", "surrogatepass")
            start = 0 if s[:1] == "{" else len(s) - len(s.lstrip(_JSON_SPACE))
            doc, end = _scan_json(s, start)
            if end != len(s) and s[end:].lstrip(_JSON_SPACE):
                return None  # extra data
    except (ValueError, StopIteration):
        return None
    return doc if isinstance(doc, dict) else None


def _level_word(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        # pino/bunyan numbers (10 trace … 60 fatal), and Python's (10 debug … 50 critical)
        for floor, name in ((60, "fatal"), (50, "error"), (40, "warn"), (30, "info"),
                            (20, "debug")):
            if value >= floor:
                return name
        return "trace"
    if isinstance(value, str):
        return _WORDS.get(value.strip().lower(), "")
    return ""


def _structured(doc: dict[str, Any]) -> tuple[str, str]:
    """(level, part) of a JSON line: a transcript event, or a structured log record."""
    kind = doc.get("type")
    if isinstance(kind, str):
        found = _claude_event(doc, kind)
        if found is not None:
            return found
    msg = doc.get("msg")
    if isinstance(msg, dict) and isinstance(msg.get("type"), str):
        found = _codex_event(msg["type"], msg)
        if found is not None:
            return found
    if isinstance(kind, str):
        found = _codex_event(kind, doc)
        if found is not None:
            return found
    for key in ("level", "severity", "lvl", "levelname", "log.level", "loglevel"):
        if key in doc:
            word = _level_word(doc[key])
            if word:
                return word, LOG
    return "", LOG


def _claude_event(doc: dict[str, Any], kind: str) -> tuple[str, str] | None:
    """Claude Code ``--output-format stream-json`` events."""
    if kind == "assistant":
        return "info", SPEECH  # text, thinking and tool_use input: the agent's own words
    if kind == "user":
        message = doc.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            errors = [c for c in content if isinstance(c, dict) and
                      c.get("type") == "tool_result" and c.get("is_error") is True]
            return ("error", LOG) if errors else ("info", SPEECH)
        return "info", SPEECH  # the prompt healer (or a person) gave it
    if kind == "result":
        subtype = str(doc.get("subtype", ""))
        failed = doc.get("is_error") is True or subtype.startswith("error")
        return ("error" if failed else "info"), LOG
    if kind == "system":
        subtype = str(doc.get("subtype", ""))
        return ("error" if "error" in subtype else "info"), LOG
    if kind == "error" or (kind == "stream_event" and "error" in json.dumps(
            doc.get("event", ""))[:200]):
        return "error", LOG
    return None


def _codex_event(kind: str, doc: dict[str, Any]) -> tuple[str, str] | None:
    """Codex CLI JSON events (``codex exec --json``, and the older ``{"msg": …}`` shape)."""
    if kind in ("agent_message", "agent_message_delta", "agent_reasoning",
                "agent_reasoning_delta", "reasoning", "user_message", "exec_command_begin",
                "patch_apply_begin"):
        return "info", SPEECH
    if kind in ("item.started", "item.updated", "item.completed"):
        item = doc.get("item")
        itype = item.get("type") if isinstance(item, dict) else None
        if itype in ("agent_message", "reasoning", "todo_list", "file_change"):
            return "info", SPEECH
        if itype == "command_execution" and isinstance(item, dict):
            code = item.get("exit_code")
            failed = (isinstance(code, int) and code != 0) or item.get("status") == "failed"
            return ("error" if failed else "info"), LOG
        if itype == "error":
            return "error", LOG
        return "info", LOG
    if kind in ("error", "stream_error", "turn.failed"):
        return "error", LOG
    if kind == "exec_command_end":
        code = doc.get("exit_code")
        return ("error" if isinstance(code, int) and code != 0 else "info"), LOG
    if kind in ("thread.started", "turn.started", "turn.completed", "task_started",
                "task_complete", "token_count", "session_configured"):
        return "info", LOG
    return None


_LEVELS_SEEN: dict[bytes, str] = {}  # a body's first _LEVEL_REACH bytes → _level(body)


def _level(body: bytes) -> str:
    """The level a plain-text line states ('' for none): it depends on the body's first
    _LEVEL_REACH bytes alone (the searches stop there), so it is cached by them."""
    head = bytes(body[:_LEVEL_REACH])
    level = _LEVELS_SEEN.get(head)
    if level is None:
        level = _level_of(head)
        if len(_LEVELS_SEEN) > 8192:
            _LEVELS_SEEN.clear()
        _LEVELS_SEEN[head] = level
    return level


def _level_of(body: bytes) -> str:
    first = body[:1]
    if first == b"<":
        m = _SYSLOG.match(body)
        if m and int(m.group(1)) < 192:
            return _SYSLOG_LEVELS[int(m.group(1)) & 7]
    elif first in b"IWEF" and first:
        m = _KLOG.match(body)
        if m:
            return _KLOG_LEVEL[m.group(1)]
    m = _ANY_LEVEL.search(body, 0, _LEVEL_REACH)
    if m:
        return _WORDS.get((m.group(1) or m.group(2) or m.group(3)).decode("ascii").lower(), "")
    return ""


# A line that starts with a source prefix: kubectl --prefix, or a compose/docker service.
_SOURCE_LINE = re.compile(rb"^(?:\[pod/([^/\]\s]{1,253}/[^\]\s]{1,63})\] |"
                          rb"([A-Za-z0-9][A-Za-z0-9_.-]{0,62}) {0,40}\| )", re.M)
SKEW_S = 2.0  # a source that starts this much after a line still counts as before it
_POD_NAME = LazyRegex(rb"[^/\]\s]{1,253}/[^\]\s]{1,63}")  # _SOURCE_LINE's, group by group
_COMPOSE_NAME = LazyRegex(rb"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_COMPOSE_REST = LazyRegex(rb" {0,40}\| ")
_FIRST_OF_TRIES = 1000  # lines that start with a compose name but are not its prefix


class Unknown:
    """``SourceStarts.first_of`` could not tell: scan every line (``track``)."""


UNKNOWN = Unknown()


def _prefix_of(source: str) -> tuple[bytes, Any] | Unknown | None:
    """How a line's prefix names ``source``: (the bytes a line starts with, the regex that
    must follow them or None), None when no prefix can name it, ``UNKNOWN`` when a search
    cannot tell (not ASCII)."""
    if source.startswith("pod/"):
        try:
            name = source[4:].encode("ascii")
        except UnicodeEncodeError:
            return UNKNOWN
        if _POD_NAME.fullmatch(name) is None:
            return None  # no line prefix names it
        return b"[pod/" + name + b"] ", None
    name = source.encode("ascii", "replace")
    if _COMPOSE_NAME.fullmatch(name) is None:
        return None if source.isascii() else UNKNOWN
    return name, _COMPOSE_REST


def _start_at(buf: Any, end: int, seen_at: float) -> float:
    """The time of a source's first line whose prefix ends at ``end``."""
    ts = parse_ts(bytes(buf[end:end + HEAD_BYTES]))
    return ts if ts is not None else seen_at


class SourceStarts:
    """When each source named by a line prefix started: the time of its first line seen.

    Pre-flight windows count from these, so in a merged log every pod or service has its own
    (``Engine.alerts``). ``track`` runs over the lines as they are read — one regex pass, and
    only over data that holds a prefix at all."""

    def __init__(self) -> None:
        self.starts: dict[str, float] = {}

    def track(self, buf: Any, lo: int, hi: int, seen_at: float) -> None:
        """Note the first line of every source a prefix names in ``buf[lo:hi]``."""
        if buf.find(b"[pod/", lo, hi) < 0 and buf.find(b"| ", lo, hi) < 0:
            return
        for m in _SOURCE_LINE.finditer(buf, lo, hi):
            name = "pod/" + m.group(1).decode("ascii", "replace") if m.group(1) else \
                m.group(2).decode("ascii", "replace")
            if name not in self.starts:
                ts = parse_ts(bytes(buf[m.end():min(hi, m.end() + HEAD_BYTES)]))
                self.starts[name] = ts if ts is not None else seen_at

    @staticmethod
    def first_of(buf: Any, source: str, seen_at: float) -> float | Unknown | None:
        """When ``source`` starts in ``buf`` (a whole log, from its first byte): what
        ``track`` over all of it would note for ``source``, found by searching for its prefix
        alone (a memmem, not a pass over every line). ``UNKNOWN`` when that cannot be told
        this way (a name that did not decode as ASCII, a name many lines start with)."""
        spec = _prefix_of(source)
        if not isinstance(spec, tuple):
            return spec
        prefix, rest = spec
        at = 0 if buf[:len(prefix)] == prefix else buf.find(b"\n" + prefix) + 1 or -1
        for _ in range(_FIRST_OF_TRIES):
            if at < 0:
                return None  # no line starts with it
            end = at + len(prefix)
            if rest is not None:  # a compose name must be followed by spaces and "| "
                m = rest.match(buf, end)
                end = m.end() if m else -1
            if end >= 0:
                return _start_at(buf, end, seen_at)
            at = buf.find(b"\n" + prefix, at) + 1 or -1
        return UNKNOWN

    @staticmethod
    def first_of_many(buf: Any, sources: Iterable[str], seen_at: float
                      ) -> dict[str, float | Unknown | None]:
        """``first_of`` for each of ``sources``. With the native module, in one pass over
        the lines up to the last source's first one (one search each costs the sum of how
        far each source starts into the log; in a merged log pods start all through it):
        then a compose name is never ``UNKNOWN``, its first prefixed line is found however
        many lines start with the name."""
        sp = _native.speedups
        if sp is None:
            return {source: SourceStarts.first_of(buf, source, seen_at) for source in sources}
        out: dict[str, float | Unknown | None] = {}
        pods: list[tuple[str, bytes]] = []
        composes: list[tuple[str, bytes]] = []
        for source in sources:
            spec = _prefix_of(source)
            if not isinstance(spec, tuple):
                out[source] = spec
            else:
                (pods if spec[1] is None else composes).append((source, spec[0]))
        if pods or composes:
            ends = sp.first_prefixed_lines(buf, [p for _, p in pods], [p for _, p in composes])
            for (source, _), end in zip([*pods, *composes], [*ends[0], *ends[1]], strict=True):
                out[source] = _start_at(buf, end, seen_at) if end >= 0 else None
        return out

    @staticmethod
    def prefixed(head: bytes) -> bool:
        """Whether a log whose beginning is ``head`` names sources in line prefixes."""
        return _SOURCE_LINE.search(head) is not None

    def start_of(self, source: str, when: float) -> float | None:
        """When ``source`` started; "" (a line without a prefix) → the start of the source
        that started most recently before ``when``. None: not known."""
        if source:
            return self.starts.get(source)
        before = [t for t in self.starts.values() if t <= when + SKEW_S]
        return max(before) if before else None
