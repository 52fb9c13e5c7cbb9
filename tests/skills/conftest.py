"""Fixtures of the skill-bundle tests (defined in skills_helpers, shared with the tests)."""

from skills_helpers import *  # noqa: F403 - the fixtures and helpers, by name
