"""Evaluation: what kind of issue this is, which strategy fixes it, at which level.

The rules of the CTO platform's healer: pre-flight or tool-mismatch issues at critical
severity, and language mismatches, are fixed in config; build or test failures in code; a stuck
agent is restarted; anything else is retried. Levels climb with each failed attempt: L1 retry,
L2 re-spawn the agent, L3 an alternative agent, L4 a human — at once for security findings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Alert code → issue type, for alerts found in agent logs.
CODE_ISSUE_TYPE = {
    "A10": "tool_mismatch",
    "A11": "config_error",
    "A12": "mcp_init_failed",
    "L1": "pre_flight_failure",
    "L2": "pre_flight_failure",
    "L3": "pre_flight_failure",
    "L4": "pre_flight_failure",
    "E3": "build_failure",
}
ISSUE_TYPE_CODE = {"tool_mismatch": "A10", "config_error": "A11", "mcp_init_failed": "A12",
                   "pre_flight_failure": "A10", "language_mismatch": "A11"}
LEVELS = {1: "L1", 2: "L2", 3: "L3"}
LEVEL_MEANING = {"L1": "retry", "L2": "re-spawn the agent", "L3": "alternative agent",
                 "L4": "human"}
FIX_CONFIG_TYPES = ("pre_flight_failure", "tool_mismatch", "config_error", "mcp_init_failed")


@dataclass(frozen=True)
class Plan:
    issue_type: str
    strategy: str  # fix_config | fix_code | restart | retry
    level: str  # L1..L4
    reason: str

    @property
    def to_human(self) -> bool:
        return self.level == "L4"


def issue_type_for_alert(code: str, priority: int) -> str:
    if code in CODE_ISSUE_TYPE:
        return CODE_ISSUE_TYPE[code]
    return "agent_error" if priority == 2 else "other"


def strategy_for(issue_type: str, severity: str) -> str:
    if issue_type in FIX_CONFIG_TYPES and severity == "critical":
        return "fix_config"
    if issue_type == "language_mismatch":
        return "fix_config"
    if issue_type in ("build_failure", "test_failure"):
        return "fix_code"
    if issue_type == "stuck":
        return "restart"
    return "retry"


def plan(issue: dict[str, Any], attempt: int, max_attempts: int) -> Plan:
    """The strategy and level for ``attempt`` (1-based) of fixing ``issue``."""
    issue_type = issue["issue_type"]
    strategy = strategy_for(issue_type, issue.get("severity", "warning"))
    if issue.get("security"):
        return Plan(issue_type, strategy, "L4", "security findings always go to a human")
    if attempt > max_attempts:
        return Plan(issue_type, strategy, "L4",
                    f"{max_attempts} remediation attempts did not fix it")
    level = LEVELS.get(attempt, "L3")
    return Plan(issue_type, strategy, level,
                f"attempt {attempt} of {max_attempts}: {LEVEL_MEANING[level]}")


def workflow_family(target: str) -> str:
    """``play-task-4-abc12`` → ``play-task-4``: runs of one workflow share an issue."""
    parts = target.split("-")
    for i in range(len(parts) - 1, 0, -1):
        if parts[i].isdigit():
            return "-".join(parts[: i + 1])
    return target


def alert_code(issue: dict[str, Any]) -> str:
    return str(issue.get("code") or ISSUE_TYPE_CODE.get(issue["issue_type"], "A17"))
