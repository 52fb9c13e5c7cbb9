"""The state store: JSON records with revisions, compare-and-set, and small member sets.

Records (sessions, incidents, attempts, applied results, ...) are addressed by ``kind`` and
``key``, both safe names. Every write bumps the record's ``revision``; a write that names the
revision it expects fails with ``ConflictError`` when someone else wrote first, so two
processes (or two nodes, with the JetStream backend) can never both win the same incident.

- ``base``: the ``Store`` interface and ``Record``;
- ``file``: ``FileStore``, one JSON file per record under the state dir (one machine);
- ``commit``: ``GroupCommit``, the file store's one flusher per process: records visible at
  once, their fsyncs batched (``store.sync``: ``batched`` or ``always``);
- ``jetstream``: ``JetStreamStore``, a NATS JetStream key-value bucket (a fleet); loaded only
  when asked for, as it needs nats-py;
- ``backends``: ``open_store``, the backend the settings name.
"""

from __future__ import annotations

from healer.core.store.backends import open_store
from healer.core.store.base import Clock, Record, Store, Updater
from healer.core.store.file import FileStore

__all__ = ["Clock", "FileStore", "Record", "Store", "Updater", "open_store"]
