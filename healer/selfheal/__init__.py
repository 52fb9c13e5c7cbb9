"""Self-healing for reported errors: sanitise, fingerprint, gate, and heal in a worktree.

Public surface: ``SelfHealService`` (service.py) behind the MCP tools, HTTP routes and CLI;
the validator ``ensure_publishable`` / ``validate`` (sanitize.py) that everything outbound
goes through; ``Dispatcher`` (dispatch.py) for the healing run itself.
"""

from healer.selfheal.sanitize import (
    AnonymizationError,
    Finding,
    Sanitizer,
    ensure_publishable,
    scrub,
    validate,
)

__all__ = ["AnonymizationError", "Finding", "Sanitizer", "ensure_publishable", "scrub",
           "validate"]
