"""The results bus: agent result files in, each applied exactly once, bad files set aside.

- ``validate``: the pure checks of one result file, and how long a partial one is waited for;
- ``ledger``: the exactly-once application (ledger record, pending marker, subscribers);
- ``watch``: ``ResultsBus``, which watches the results dir and the fleet seed inbox;
- ``jetstream``: ``JetStreamResultsBus``, which hands each result to exactly one node of a
  fleet; loaded only when asked for, as it needs nats-py.
"""

from __future__ import annotations

from healer.core.bus.ledger import LEDGER, PENDING, AgentResult, BusStats, Ledger, Subscriber
from healer.core.bus.validate import RESULT_NAME
from healer.core.bus.watch import SUBDIRS, ResultsBus, SeedSubscriber

__all__ = ["LEDGER", "PENDING", "RESULT_NAME", "SUBDIRS", "AgentResult", "BusStats", "Ledger",
           "ResultsBus", "SeedSubscriber", "Subscriber"]
