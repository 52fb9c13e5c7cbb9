"""Helpers for healer's tests and for users testing their own healing setups.

- ``ScriptedModel``: an Anthropic Messages API on 127.0.0.1 that replays a scripted
  conversation, so the real Claude Code CLI runs offline (``healer.testing.scripted_model``).
- ``healer.testing.loop``: run a real loop process, drop agent results.
- ``healer.testing.api``: run a real ``healer serve``.
- ``healer.testing.nats``: a real nats-server with JetStream.
- ``healer.testing.receivers`` / ``fake_github``: webhook receivers and a fake GitHub API
  (issues and PRs; the PR watcher's reads with ETags and rate limits).
- ``healer.testing.github_webhooks``: signed GitHub webhook deliveries.
- ``healer.testing.sandbox``: ``RecordingSandbox``, a sandbox that records what each agent run
  asked for (an executor's ``sandbox=``).

Names are imported lazily so ``python -m healer.testing.scripted_model`` runs cleanly.
"""

from __future__ import annotations

from typing import Any

_SCRIPTED = (
    "DUMMY_API_KEY", "Fault", "RecordedRequest", "Reply", "ScriptedModel", "break_stream",
    "hang", "http_error", "load_script", "reply", "text", "text_block", "tool_block",
    "tool_use",
)
__all__ = list(_SCRIPTED)


def __getattr__(name: str) -> Any:
    if name in _SCRIPTED:
        from healer.testing import scripted_model

        return getattr(scripted_model, name)
    raise AttributeError(f"module 'healer.testing' has no attribute {name!r}")
