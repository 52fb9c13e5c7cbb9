"""Which store backend the settings ask for (``store.backend``: ``file`` or ``jetstream``;
``store.sync``: when the file store's durable writes reach the disk)."""

from __future__ import annotations

from typing import Any

from healer.core.store.base import Store
from healer.core.store.file import FileStore
from healer.errors import StoreError


def open_store(settings: Any) -> Store:
    """The store the settings ask for."""
    backend = settings.store.backend
    if backend == "file":
        return FileStore(settings.state_path, sync=settings.store.sync)
    if backend == "jetstream":
        from healer.core.store.jetstream import JetStreamStore

        return JetStreamStore.connect(settings)
    raise StoreError(f"unknown store backend {backend!r}")
