"""One memory budget for a run (``--memory-limit``), split into pools, after Suricata's memcaps.

Every structure that grows with the input charges the pool it belongs to and releases what it
charged when it lets go. A pool past its cap raises ``pressure``; whoever owns that state then
evicts the oldest or largest of it and counts what it evicted (docs/memory.md). The budget only
counts: it never refuses an allocation itself, so the hot paths pay an addition, not a call.

Pools hand their users a *cell*, a one-item list shared by everyone charging that pool, so a hot
path charges with ``cell[0] += n`` (no method call, no attribute lookup on the budget). Imports
nothing: any layer may use it.
"""

from __future__ import annotations

import sys

FLOWS = 0  # connection state: the flow table, connections, their pairing state
REASSEMBLY = 1  # out-of-order TCP segments, partial frames, bytes held while detecting Kafka
RECORDS = 2  # `records` rows held for a Produce response (their offsets), and read per frame
ROWS = 3  # rows buffered per table before a Parquet row group is written
QUEUE = 4  # packets captured live and not yet decoded
SECRETS = 5  # TLS secrets from `--keylog` files and pcapng Decryption Secrets Blocks
FRAGMENTS = 6  # IP fragments held for reassembly (`--fragment-memory` is at most this share)
NAMES = 7  # what responses taught the run about names: topic ids to topic names
VIEW = 8  # `capture` only: the live view's per-topic and per-client totals, the metrics' series
BROKERS = 9  # the broker map: node ids learned for broker addresses, advertised names linked
POOLS = (
    "flows",
    "reassembly",
    "records",
    "rows",
    "queue",
    "secrets",
    "fragments",
    "names",
    "view",
    "brokers",
)
# Shares of the limit, per pool. `read` leaves the queue's and the view's shares unused: headroom.
SHARES = (0.25, 0.25, 0.25, 0.125, 1 / 32, 1 / 64, 1 / 32, 1 / 128, 1 / 32, 1 / 128)

DEFAULT_MEMORY_LIMIT = 1024 * 1024 * 1024  # 1 GiB
# Bytes one followed connection costs (Connection, two reassemblers, a Conversation, the flow
# table's two entries): about 4.9 KB measured with tracemalloc over 50k single-packet flows.
CONNECTION_COST = 5120
# Bytes one `records` row costs while it exists: its RecordInfo and then its row dict (18 keys),
# payload bytes not included (they are charged by their length).
RECORD_COST = 1200
# Bytes one buffered row of a table costs as a dict (a `partitions` row is about 2 KB).
ROW_COST = 2048
# Bytes one TLS secret costs besides its own bytes: its client random and label as dict keys, the
# per-connection dict (tracemalloc over 100k distinct client randoms: 444 B with a 48-byte secret).
SECRET_COST = 400
# Bytes one topic name costs besides its two strings (sys.getsizeof of the id and the name): its
# dict entry and the index's share (tracemalloc over 100k names: about 40 B, twice that just after
# the table grows, rounded up).
TOPIC_NAME_COST = 100
# Bytes one entry of a live total (a topic's record bytes, a client's throttled responses) costs
# besides its key string: its counter slot and int (tracemalloc over 100k keys: about 70 B, rounded
# up for the table's growth).
TOTAL_COST = 128


# One capture record (a pcap record, a pcapng block) may be at most this part of the limit, and never
# less than what libpcap allows any link type (256 KiB): it is held whole while it is read, and
# copied once or twice on the way. A larger one is skipped in pieces, never held (docs/memory.md).
RECORD_SHARE = 1 / 16
MIN_RECORD = 256 * 1024


def record_limit(limit: int) -> int:
    """The largest capture record read under a limit of ``limit`` bytes."""
    return max(MIN_RECORD, int(limit * RECORD_SHARE))


class MemoryBudget:
    """The run's limit, its pools' caps and what each pool holds now."""

    __slots__ = ("limit", "caps", "cells", "pressure", "frame_records")

    def __init__(self, limit: int = DEFAULT_MEMORY_LIMIT, shares: tuple[float, ...] = SHARES) -> None:
        if len(shares) != len(POOLS) or sum(shares) > 1.0 + 1e-9:
            raise ValueError("one share per pool, adding up to at most 1")
        self.limit = limit
        self.caps = [int(limit * s) for s in shares]
        self.cells: list[list[int]] = [[0] for _ in POOLS]
        self.pressure = False
        # Records bytes charged while the current frame is read: one frame may not take more than
        # the records pool's whole cap, whatever older frames hold (those can be evicted).
        self.frame_records = 0

    def cell(self, pool: int) -> list[int]:
        """The pool's shared counter, for hot paths (``cell[0] += n``, ``cell[0] -= n``)."""
        return self.cells[pool]

    def cap(self, pool: int) -> int:
        return self.caps[pool]

    def used(self, pool: int) -> int:
        return self.cells[pool][0]

    def charge(self, pool: int, n: int) -> None:
        cell = self.cells[pool]
        cell[0] += n
        if cell[0] > self.caps[pool]:
            self.pressure = True

    def release(self, pool: int, n: int) -> None:
        self.cells[pool][0] -= n

    def over(self, pool: int) -> bool:
        return self.cells[pool][0] > self.caps[pool]

    def admit_records(self, nbytes: int) -> bool:
        """May the frame being read hold ``nbytes`` more of records? If so they are charged."""
        if self.frame_records + nbytes > self.caps[RECORDS]:
            return False
        self.frame_records += nbytes
        self.charge(RECORDS, nbytes)
        return True

    def snapshot(self) -> dict[str, int]:
        """Bytes held per pool now (for tests and the docs' figures)."""
        return {name: self.cells[i][0] for i, name in enumerate(POOLS)}


# The view pool's parts (docs/memory.md): the live view's totals a quarter, the consumer-group lag's
# offset indices an eighth, the replication lag's leader logs an eighth, the metrics' series the rest.
VIEW_TOTALS, VIEW_LAG, VIEW_REPLICATION, VIEW_METRICS = range(4)


def view_cap(budget: MemoryBudget, part: int) -> int:
    """The bytes of the view pool that ``part`` (VIEW_TOTALS ... VIEW_METRICS) may hold."""
    cap = budget.cap(VIEW)
    quarter, eighth = cap // 4, cap // 8
    return (quarter, eighth, eighth, cap - quarter - 2 * eighth)[part]


_trim: object = None  # glibc's malloc_trim once looked up; False where there is none


def give_back() -> bool:
    """Hand the memory the allocators hold free back to the system: Arrow's memory pool (mimalloc
    or jemalloc keep what Arrow freed: ``release_unused``), when pyarrow is loaded, and glibc's heap
    (``malloc_trim(0)``); False where the C library has no malloc_trim (musl, macOS). A capture left
    running for weeks calls it after each period's commit: each commit allocates and frees (Arrow,
    delta-rs, the rows of the period; the hourly compaction reads a whole hour into Arrow) in
    pieces the allocators keep mapped: in a soak, a malloc_trim at minute 42 returned 20 MB, and
    the first compaction's buffers stayed in Arrow's pool (docs/live-capture.md "Memory over
    weeks"). It costs milliseconds, once a period."""
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.default_memory_pool().release_unused()
    global _trim
    if _trim is None:
        import ctypes

        try:
            _trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _trim = False
    if _trim is False:
        return False
    _trim(0)  # type: ignore[operator]
    return True
