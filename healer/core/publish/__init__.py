"""The outbound policy: everything that leaves the machine is scrubbed and validated here first.

The public names, imported on first use (so a module that only needs ``forge_issues.dedup_key``
does not compile the scrubber's rules)::

    Sanitizer, scrub, validate, ensure_publishable   healer.core.publish.sanitizer
    AnonymizationError, Finding                      healer.core.publish.findings
    Forge, PullRequest, ForgeError, open_forge       healer.core.publish.forge
    Issues, IssueRef, dedup_key                      healer.core.publish.forge_issues

The scrubber's parts: ``ruleset`` (the ordered detectors), ``secret_rules`` and ``pii_rules``
(their tables), ``detectors`` (locators, pre-filter census), ``entropy`` (the validator's
census of random tokens). See docs/self-healing.md.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Sanitizer": "sanitizer", "scrub": "sanitizer", "validate": "sanitizer",
    "ensure_publishable": "sanitizer", "AnonymizationError": "findings", "Finding": "findings",
    "Forge": "forge", "PullRequest": "forge", "ForgeError": "forge", "open_forge": "forge",
    "Issues": "forge_issues", "IssueRef": "forge_issues", "dedup_key": "forge_issues",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'healer.core.publish' has no attribute {name!r}")
    return getattr(importlib.import_module(f"healer.core.publish.{module}"), name)
