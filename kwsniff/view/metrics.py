"""Prometheus exposition of a live capture (prometheus_client), updated once per decoded batch.

Names follow Prometheus conventions: base units, `_total` counters, `_seconds` histograms. Labels
are the API and the error name only: never client ports or addresses, whose cardinality is unbounded.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from kwsniff.capture.live import CaptureCounters
from kwsniff.view.stats import Pending

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.packets = Counter("kwsniff_packets", "Packets captured", registry=r)
        self.bytes = Counter("kwsniff_captured_bytes", "Bytes of packets captured", registry=r)
        self.kernel_drops = Counter(
            "kwsniff_kernel_drops", "Packets dropped by the kernel (libpcap ps_drop)", registry=r
        )
        self.if_drops = Counter(
            "kwsniff_interface_drops", "Packets dropped by the interface (libpcap ps_ifdrop)", registry=r
        )
        self.queue_drops = Counter(
            "kwsniff_queue_drops", "Packets dropped because decoding fell behind", registry=r
        )
        self.requests = Counter("kwsniff_requests", "Kafka requests decoded", ["api"], registry=r)
        self.errors = Counter(
            "kwsniff_errors",
            "Non-zero error codes anywhere in responses (top level, topic, partition...): errors table rows",
            ["error"],
            registry=r,
        )
        self.latency = Histogram(
            "kwsniff_request_latency_seconds",
            "Time from request to response",
            ["api"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.connections = Gauge("kwsniff_open_connections", "TCP connections being followed", registry=r)
        self.worker_kernel_drops = Counter(
            "kwsniff_worker_kernel_drops",
            "Packets the kernel dropped from one capture worker's socket (--workers; PACKET_STATISTICS)",
            ["worker"],
            registry=r,
        )
        self._workers: list[CaptureCounters] = []
        self._last = CaptureCounters()
        self.server: Any = None

    def serve(self, port: int, addr: str) -> None:
        """Starts the exposition HTTP server (a daemon thread); OSError if the port is taken."""
        self.server, _thread = start_http_server(port, addr, registry=self.registry)

    def update(
        self,
        counters: CaptureCounters,
        pending: Pending,
        open_connections: int,
    ) -> None:
        """One batch: capture counters (cumulative, turned into increments), the requests decoded and
        the error codes found in their responses."""
        last = self._last
        self.packets.inc(counters.captured - last.captured)
        self.bytes.inc(counters.captured_bytes - last.captured_bytes)
        self.kernel_drops.inc(max(0, counters.kernel_drops - last.kernel_drops))
        self.if_drops.inc(max(0, counters.if_drops - last.if_drops))
        self.queue_drops.inc(counters.queue_drops - last.queue_drops)
        self._last = counters
        requests, errors = pending
        for api, latency_s in requests:
            self.requests.labels(api).inc()
            if latency_s is not None:
                self.latency.labels(api).observe(latency_s)
        for error in errors:
            self.errors.labels(error).inc()
        self.connections.set(open_connections)

    def update_workers(self, workers: list[CaptureCounters]) -> None:
        """Each worker's counters (cumulative): its kernel drops, labelled with its number."""
        last = self._workers + [CaptureCounters()] * (len(workers) - len(self._workers))
        for index, (now, before) in enumerate(zip(workers, last, strict=True)):
            self.worker_kernel_drops.labels(str(index)).inc(max(0, now.kernel_drops - before.kernel_drops))
        self._workers = list(workers)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
