"""What the engine and the file scanner (``_files``) share: the block size, the lookback, the
raw hit, and the part of an ``Engine`` the file scanner uses."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from healer.detect.alert import Alert
from healer.detect.catalog import Catalog

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol
else:
    from healer._runtime_typing import Protocol

# The scan unit. 1 MiB: a block read into the buffer is still in the CPU's cache when
# Hyperscan, the newline count and pass 1 read it again (8 MiB blocks spilled out of it: the
# same scan took ~20 % more CPU); big enough that the per-block Python work is noise.
BLOCK_BYTES = 1 << 20
LOOKBACK_LINES = 64  # how far back a line without a timestamp borrows one

# A raw hit from a block: (line index in block, line bytes, pattern indexes, own ts, borrowed ts,
# the source its prefix names — "pod/NAME/CONTAINER", a compose service — or "", its level)
RawHit = tuple[int, bytes, tuple[int, ...], float | None, float | None, str, str]
# (source, the line's time) → when that source started (its first line), or None if unknown
StartOf = Callable[[str, float], float | None]


class BlockStream(Protocol):
    """An incremental scanner (``StreamScanner``), as far as ``_files`` uses one."""

    def feed(self, data: bytes) -> list[Alert]: ...

    def flush(self) -> list[Alert]: ...


class BlockEngine(Protocol):
    """An ``Engine``, as far as ``_files`` uses one."""

    catalog: Catalog
    clock: Callable[[], float]
    native_db: Any  # _speedups.HsDatabase whose matches scan_block can take ready, or None

    def stream(self, source: str, *, start_time: float | None = None,
               labels: Mapping[str, str] | None = None, not_before: float | None = None
               ) -> BlockStream: ...

    def scan_block(self, buf: Any, lo: int, hi: int, tail: list[bytes], first: int = 0,
                   collected: Any = None) -> tuple[int, list[RawHit], list[bytes]]: ...

    def alerts(self, hits: Iterable[RawHit], *, base: int, source: str, start: float,
               seen_at: float, labels: Mapping[str, str] | None, not_before: float | None,
               ts_override: float | None = None, start_of: StartOf | None = None
               ) -> list[Alert]: ...

    def first_line_ts(self, head: bytes) -> float | None: ...
