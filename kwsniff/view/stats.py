"""What the live view and the metrics show, aggregated from the rows themselves.

:class:`StatsSink` wraps the real sink: every row passes through it on its way to Parquet, so the
screen and the Parquet files can never disagree about what was decoded. The decode thread adds rows;
the view thread takes :meth:`LiveStats.take_window` snapshots under a lock.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from kwsniff.rows import RowSink

# Latencies kept per API per window for the percentiles; past it the window keeps every n-th.
MAX_LATENCIES = 4096


@dataclass
class Window:
    """Rows of one view interval (reset by take_window)."""

    requests: Counter[str] = field(default_factory=Counter)
    latencies_ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


@dataclass
class Totals:
    """Everything since the capture started."""

    requests: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    topic_bytes: Counter[str] = field(default_factory=Counter)
    throttled: Counter[str] = field(default_factory=Counter)  # client_id -> throttled responses
    connections_closed: int = 0


class LiveStats:
    """Counters fed from rows (decode thread), read by the view and the metrics (other threads)."""

    def __init__(self, collect_pending: bool = False) -> None:
        self.lock = threading.Lock()
        self.collect_pending = collect_pending
        self.window = Window()
        self.totals = Totals()
        # Per-batch deltas for the metrics: (api, latency_s or None, error_name or None).
        self.pending: list[tuple[str, float | None, str | None]] = []

    def row(self, table: str, row: dict[str, Any]) -> None:
        # Rows are read with .get: a table's rows carry only the columns known for that exchange
        # (a response whose request was lost has no request facts), the sink fills in the nulls.
        get = row.get
        if table == "requests":
            api = get("api_name") or f"api_{get('api_key')}"
            latency = get("latency_ms")
            error = get("error_name") if get("error_code") else None
            throttle = get("throttle_time_ms")
            with self.lock:
                self.window.requests[api] += 1
                self.totals.requests[api] += 1
                if latency is not None:
                    kept = self.window.latencies_ms[api]
                    if len(kept) < MAX_LATENCIES:
                        kept.append(latency)
                if error:
                    self.totals.errors[error] += 1
                if throttle:
                    self.totals.throttled[get("client_id") or "?"] += 1
                if self.collect_pending:
                    self.pending.append((api, None if latency is None else latency / 1000, error))
        elif table == "partitions":
            record_bytes = get("record_bytes")
            if record_bytes and get("api_name") in ("Produce", "Fetch"):
                with self.lock:
                    self.totals.topic_bytes[get("topic") or get("topic_id") or "?"] += record_bytes
        elif table == "connections":
            with self.lock:
                self.totals.connections_closed += 1

    def take_window(self) -> Window:
        with self.lock:
            window, self.window = self.window, Window()
        return window

    def take_pending(self) -> list[tuple[str, float | None, str | None]]:
        with self.lock:
            pending, self.pending = self.pending, []
        return pending


class StatsSink:
    """A RowSink that passes every row to ``stats`` and then to ``sink``."""

    def __init__(self, sink: RowSink, stats: LiveStats) -> None:
        self.sink = sink
        self.stats = stats

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.stats.row(table, row)
        self.sink.add(table, row)


def percentile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank percentile (q in 0..1) of a sorted, non-empty list."""
    rank = max(1, -(-len(sorted_values) * q // 1))
    return sorted_values[int(rank) - 1]
