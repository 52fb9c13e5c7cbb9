"""Send a fixture's report through healer's real intake and wait for the attempt to end.

The one module of the eval that knows how a report becomes an ended attempt record, so the
one attempt flow (``healer.code.attempt``) can be pointed at here alone. Everything else of
the eval reads only the contract's record fields: ``status``, ``reason``, ``head_sha``,
``branch``, ``repo``, ``base_sha``, ``worktree``, ``verification``, ``iterations``.

* ``report.json`` → ``SelfHealService.report`` (trusted: the operator runs the eval), then the
  attempt's run in this process (``Dispatcher.run``) instead of a detached worker, so the
  eval knows when it ended.
* ``envelope.bin`` / ``envelope.json`` → the Sentry envelope parser the DSN ingest uses
  (``healer.context.envelope``); each event's normalised error (message, culprit frame,
  rendered stack) goes in as the same report, so both sources end in the same record.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from healer.code.eval.fixtures import Fixture
from healer.core.store import FileStore
from healer.errors import UsageError
from healer.selfheal.runner import AgentRunner


def report_of(fixture: Fixture, repo: Path, settings: Any) -> dict[str, Any]:
    """The report_error payload the fixture's report stands for, in ``repo``."""
    if not fixture.envelope:
        return fixture.report_payload(repo)
    from healer.context.envelope import EnvelopeError, Limits, parse_envelope, signal_of

    try:
        env = parse_envelope(fixture.report.read_bytes(),
                             Limits.from_settings(settings.ingest))
    except EnvelopeError as exc:
        raise UsageError(f"fixture {fixture.name}: {fixture.report.name}: {exc.reason}") \
            from None
    if not env.events:
        raise UsageError(f"fixture {fixture.name}: the envelope holds no event")
    err = signal_of(env.events[0], "eval", repo).error
    assert err is not None  # signal_of always builds one
    return {"error_type": err.error_type or "Error", "error_message": err.message,
            "traceback": err.stack_trace, "call_site": err.call_site,
            "context": f"Reported by sentry-sdk ({err.environment or 'no environment'})."}


async def drive(settings: Any, fixture: Fixture, repo: Path, runner: AgentRunner
                ) -> dict[str, Any]:
    """Report the fixture's error about ``repo`` and run the attempt to its end; the final
    attempt record (``{"status": "rejected", "reason": …}`` when a gate turned it down)."""
    from healer.selfheal.dispatch import Dispatcher
    from healer.selfheal.service import SelfHealService

    store = FileStore(settings.state_path)
    try:
        service = SelfHealService(settings, store, runner=runner, launcher=lambda _aid: None,
                                  env={}, cwd=repo)
        started = time.monotonic()
        answer = service.report(report_of(fixture, repo, settings), trust="trusted")
        if not answer.get("accepted"):
            return {"status": "rejected", "reason": str(answer.get("message", "")),
                    "duration_s": time.monotonic() - started}
        record = await Dispatcher(settings, store, runner=runner).run(answer["attempt_id"])
        return {**record, "duration_s": time.monotonic() - started}
    finally:
        # The ledgers write what they gathered now, not a second later from a timer: the
        # case's state dir is deleted when its case ends.
        store.close()


def spent_usd(settings: Any) -> float:
    """What the agent runs of this (fresh) state dir cost, as the runs reported it."""
    from healer.agents.budget import Budget

    budgets = Budget(settings, FileStore(settings.state_path)).today()["budgets"]
    return float((budgets.get("all") or {}).get("spent_usd") or 0.0)
