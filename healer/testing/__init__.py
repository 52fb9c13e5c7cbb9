"""Helpers for healer's tests and for users testing their own healing setups.

- ``ScriptedModel``: an Anthropic Messages API on 127.0.0.1 that replays a scripted
  conversation, so the real Claude Code CLI runs offline (``healer.testing.scripted_model``).

Other helpers (local fleet, service starters, result droppers) live in the modules beside it.
"""

from healer.testing.scripted_model import (
    DUMMY_API_KEY,
    Fault,
    RecordedRequest,
    Reply,
    ScriptedModel,
    break_stream,
    hang,
    http_error,
    load_script,
    reply,
    text,
    text_block,
    tool_block,
    tool_use,
)

__all__ = [
    "DUMMY_API_KEY",
    "Fault",
    "RecordedRequest",
    "Reply",
    "ScriptedModel",
    "break_stream",
    "hang",
    "http_error",
    "load_script",
    "reply",
    "text",
    "text_block",
    "tool_block",
    "tool_use",
]
