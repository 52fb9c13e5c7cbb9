"""``healer mcp``: the self-healing tools over MCP (stdio), for Claude Code and other agents.

Tools (typed input schemas, structured output):

* ``report_error(error_type, error_message, traceback?, call_site?, context?, tool_name?,
  severity_hint?)`` → ``{accepted, fingerprint, attempt_id?, reason?, message}``;
* ``get_healing_status(fingerprint?, limit?)`` → ``{fingerprint?, count, attempts: [...]}``.

Claude Code starts it from the repository's ``.mcp.json``. At start-up it settles attempts a
dead process left behind (``SelfHealService.recover``); accepted reports run in detached
worker processes, so the session ending does not stop a healing run.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it on Python 3.11

from healer.errors import UsageError
from healer.selfheal.service import SelfHealService

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Self-healing: when you hit an unexpected error that looks like a code bug (not bad user "
    "input, not a transient network error or rate limit, not CancelledError/KeyboardInterrupt), "
    "call report_error once with the exception type, exact message and full traceback; never "
    "put user data, credentials or personal data into `context`. Then continue your session; "
    "do not wait for the fix and do not retry report_error for the same error."
)


class ReportResult(TypedDict):
    """The answer to report_error."""

    accepted: bool
    fingerprint: str
    message: str
    attempt_id: NotRequired[str]
    reason: NotRequired[str]


class AttemptView(TypedDict):
    """One healing attempt as get_healing_status shows it."""

    attempt_id: str
    fingerprint: str
    status: Literal["investigating", "pr_open", "pr_merged", "failed", "unfixable", "timeout",
                    "anonymization_failed", "awaiting_approval", "held"]
    error_type: NotRequired[str]
    call_site: NotRequired[str]
    severity: NotRequired[str]
    tool_name: NotRequired[str]
    created_at: NotRequired[float]
    updated_at: NotRequired[float]
    ended_at: NotRequired[float]
    branch: NotRequired[str]
    pr_url: NotRequired[str]
    pr_number: NotRequired[int]
    reason: NotRequired[str]
    unfixable_reason: NotRequired[str]
    findings: NotRequired[list[str]]
    escalation: NotRequired[str]  # the seed file in .fleet-messages/human/, once escalated
    held: NotRequired[dict[str, Any]]  # awaiting_approval: why the fix waits for a person
    approved_by: NotRequired[dict[str, Any]]  # who let a held fix be published
    # held: what healer's own model access waits for (code, class, title, until, since)
    hold: NotRequired[dict[str, Any]]
    held_at: NotRequired[float]
    # the replica running it under its attempt lease: node, lease, revision
    owner: NotRequired[dict[str, Any]]
    # its replica stopped renewing: node, renewed_at, at, by (the replica that took over)
    taken_over: NotRequired[dict[str, Any]]
    retry_of: NotRequired[str]  # the attempt taken over that this one runs again
    retried_as: NotRequired[str]  # the attempt that runs this one's report again
    superseded_by: NotRequired[str]  # a new report's attempt that did that retry instead
    takeovers: NotRequired[int]  # how many replicas died under this report so far


class HealingStatus(TypedDict):
    """The answer to get_healing_status."""

    count: int
    attempts: list[AttemptView]
    fingerprint: NotRequired[str]


Severity = Literal["critical", "high", "medium", "low"]


def build_server(service: SelfHealService) -> Any:
    """The MCP server object with both tools bound to ``service``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from healer import __version__

    server = MCPServer("healer", instructions=INSTRUCTIONS, version=__version__)

    @server.tool(name="report_error", structured_output=True)
    def report_error(
        error_type: Annotated[str, Field(
            min_length=1, max_length=300,
            description="Fully qualified exception class name, e.g. "
                        "asyncpg.exceptions.UndefinedTableError.")],
        error_message: Annotated[str, Field(
            max_length=100_000, description="The exact exception message, unmodified.")],
        traceback: Annotated[str | None, Field(
            description="The full traceback, verbatim; dynamic values are sanitised.")] = None,
        call_site: Annotated[str | None, Field(
            max_length=500, description="<relative-file-path>:<function-name> where the error "
                                        "occurred, without a line number.")] = None,
        context: Annotated[str | None, Field(
            description="Your analysis: what you were doing, expected vs actual, parameter "
                        "shapes (never values), hypotheses. Under 500 words, no user data.")]
            = None,
        tool_name: Annotated[str | None, Field(
            max_length=200, description="The MCP tool that raised the error, if any.")] = None,
        severity_hint: Annotated[Severity | None, Field(
            description="critical = data loss/security; high = broken functionality; medium = "
                        "degraded behaviour; low = cosmetic.")] = None,
    ) -> ReportResult:
        """Report an unexpected error that looks like a code bug, for automated investigation
        and a proposed fix via PR. Returns at once; continue your session."""
        try:
            result = service.report({
                "error_type": error_type, "error_message": error_message,
                "traceback": traceback, "call_site": call_site, "context": context,
                "tool_name": tool_name, "severity_hint": severity_hint,
            }, trust="trusted")  # stdio: the local session that started this server
        except UsageError as exc:
            raise ToolError(str(exc)) from exc
        return ReportResult(**result)  # type: ignore[typeddict-item]

    @server.tool(name="get_healing_status", structured_output=True)
    def get_healing_status(
        fingerprint: Annotated[str | None, Field(
            description="A fingerprint from a report_error response (or its first 12 hex "
                        "digits); omit to list the latest attempts.")] = None,
        limit: Annotated[int, Field(ge=1, le=200, description="At most this many attempts.")]
            = 20,
    ) -> HealingStatus:
        """The healing attempts of one fingerprint, or the latest ones: investigating, pr_open,
        pr_merged, failed, unfixable, timeout, anonymization_failed, awaiting_approval (a
        finished fix a person must approve before its PR is opened) or held (waiting for
        healer's own model access — a rejected key, a rate limit — and resumed by itself
        when that is over; not a failure)."""
        try:
            return service.status(fingerprint, limit)  # type: ignore[return-value]
        except UsageError as exc:
            raise ToolError(str(exc)) from exc

    return server


def serve(settings: Any) -> None:
    """Run the MCP server on stdio until the client goes away."""
    from healer.selfheal.service import open_service

    service = open_service(settings)
    try:
        settled = service.recover()
        if settled:
            log.info("settled %d attempt(s) left behind by a dead process", len(settled))
    except Exception:  # recovery must never keep the tools from starting
        log.exception("start-up recovery failed")
    build_server(service).run("stdio")
