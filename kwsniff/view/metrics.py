"""Prometheus exposition of a live capture (prometheus_client), updated once per decoded batch.

Names follow Prometheus conventions: base units, `_total` counters, `_seconds` histograms, and no
`_created` series. Labels are the API, the error name, the broker (ip:port), the topic and the
consumer group with its partition, the follower broker's replica id, the client id of the request
header: never client ports or addresses, whose cardinality is unbounded. Series whose labels come
from the wire (broker, topic, group, partition, follower, client id, and an API or error the wire
names by number) are capped by ``max_series`` (`--metrics-max-series`) and by
bytes (half of the view pool of --memory-limit, kwsniff.memory.view_cap), those labelled by client
id by half of each, and APIs and errors named by a number by an eighth each: a new one past a cap is not made, and counted in kwsniff_metrics_series_dropped_total. A label value longer than MAX_LABEL characters is
cut, marked and told apart by a hash (docs/live-capture.md "Metrics"), so a scrape stays small.
"""

from __future__ import annotations

import collections
import hashlib
import time
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)

from kwsniff.capture.live import CaptureCounters
from kwsniff.defaults import DEFAULT_METRICS_MAX_SERIES
from kwsniff.memory import VIEW, VIEW_METRICS, MemoryBudget, view_cap
from kwsniff.protocol import api_names, error_names
from kwsniff.view.group_status import STATES
from kwsniff.view.stats import Pending

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# A commit links every file of the dataset into its next version: from milliseconds to seconds as
# the files grow (docs/live-capture.md "Workers").
COMMIT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Why packets were lost (kwsniff_packets_dropped_total's `cause`): libpcap's ps_drop (the kernel
# ring was full), its ps_ifdrop (the interface or driver), and batches the decoder's queue refused.
DROP_CAUSES = ("kernel", "interface", "queue")
# The client_id label of a request whose header had none (a null client id, Kafka's nullable
# string): Prometheus reads an empty label value as the label absent.
NO_CLIENT_ID = ""
# Longest label value kept whole: Kafka's topic names are at most 249 characters (its Topic.java),
# group ids and client ids have no limit. A longer one keeps its first CUT_TO characters, then "…"
# and 8 hex digits of its hash (two long values stay two series).
MAX_LABEL = 256
CUT_TO = MAX_LABEL - 9
# What one series costs, per family of metrics it belongs to: (bytes of its objects in
# prometheus_client, lines it adds to a scrape, each repeating its labels). Objects measured with
# tracemalloc over 10k series: a counter 0.6 KB, a gauge 0.7 KB, a histogram of LATENCY_BUCKETS_S
# 3.9 KB; a line is about LINE_COST bytes besides its labels. A counter is one line (no `_created`),
# a histogram of LATENCY_BUCKETS_S 17 (its buckets, +Inf, sum and count).
_SHAPES = {
    "api": (4_600, 18),  # a counter and a histogram
    "error": (700, 1),
    "broker_latency": (4_000, 17),
    "topic_io": (2_600, 4),  # produced and fetched records and bytes: four counters
    "lag": (2_200, 3),  # three gauges: records, seconds and its lower bound
    "replication": (1_500, 2),
    "group": (1_500, 2),
    "status": (4_900, 6),  # a gauge per state and the last commit's
    "removed": (700, 1),
    "client_api": (4_600, 18),  # per client id and API: a counter and a histogram
    "client_error": (700, 1),
    "client_topic_io": (2_600, 4),  # per client id and topic: the four record and byte counters
}
LINE_COST = 100
# The kinds of series the wire can multiply, and the share of the caps (1/n) each may take: client
# ids (unique per process in some fleets) and names made of a number the wire gave (`Unknown(N)`,
# `UNKNOWN_ERROR_CODE(N)`: the fixed names Kafka defines are not charged).
_KIND_OF = {"client_api": "client", "client_error": "client", "client_topic_io": "client"} | {
    "api": "numbered_api",
    "error": "numbered_error",
}
_SHARE_OF = {"client": 2, "numbered_api": 8, "numbered_error": 8}
# API and error names a Kafka release defines: a fixed set, always made. Names made of a number the
# wire gave (`Unknown(99)`, `UNKNOWN_ERROR_CODE(1234)`) are labels from the wire like a topic.
_KNOWN_APIS = frozenset(api_names().values())
# A batch's increments per series: (counter, its label values) -> how much.
Increments = collections.Counter[tuple[Any, tuple[str, ...]]]
_KNOWN_ERRORS = frozenset(error_names())


def bounded_label(value: str) -> str:
    """``value``, or its first CUT_TO characters, "…" and 8 hex digits of its hash when longer than
    MAX_LABEL."""
    if len(value) <= MAX_LABEL:
        return value
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    return f"{value[:CUT_TO]}…{digest}"


def client_label(client_id: str | None) -> str:
    """The client_id label of a request header's client id (NO_CLIENT_ID for a null one)."""
    return NO_CLIENT_ID if client_id is None else bounded_label(client_id)


class Metrics:
    def __init__(
        self, max_series: int = DEFAULT_METRICS_MAX_SERIES, budget: MemoryBudget | None = None
    ) -> None:
        # The `_created` series (each counter's and histogram's start time) add a line to each for
        # nothing an alert reads; prometheus_client turns them off for the whole process.
        disable_created_metrics()
        self.registry = CollectorRegistry()
        r = self.registry
        self.max_series = max_series
        budget = budget if budget is not None else MemoryBudget()
        self.pool = budget.cell(VIEW)
        # What LiveStats' totals, the lag's offset indices and the replication's logs leave.
        self.byte_cap = view_cap(budget, VIEW_METRICS)
        self.held_bytes = 0  # what the series made so far cost, as _SHAPES counts
        self._series: set[tuple[str, tuple[str, ...]]] = set()
        # Series of a kind the wire can multiply, and what they cost (_SHARE_OF): those labelled by
        # client id at most half of either cap, so a fleet of clients whose ids are unique per
        # process cannot crowd out the lag and topic series; those named by a number the wire gave
        # (APIs and error codes no Kafka defines) at most an eighth each, so a flood of them cannot.
        self.kind_series: collections.Counter[str] = collections.Counter()
        self.kind_bytes: collections.Counter[str] = collections.Counter()
        self.series_dropped = Counter(
            "kwsniff_metrics_series_dropped",
            "Updates not made because their series would pass --metrics-max-series or the metrics' share"
            " of --memory-limit",
            registry=r,
        )
        self.labels_cut = Counter(
            "kwsniff_metrics_labels_cut",
            f"Series made with a label value cut to {CUT_TO} characters, a marker and a hash"
            f" (longer than {MAX_LABEL})",
            registry=r,
        )
        group_labels = ["group", "topic", "partition"]
        self.lag_records = Gauge(
            "kwsniff_consumer_group_lag_records",
            "High watermark minus the group's committed offset (the report's lag section, live)",
            group_labels,
            registry=r,
        )
        self.lag_seconds = Gauge(
            "kwsniff_consumer_group_lag_seconds",
            "How long ago the group's committed offset was acknowledged to its producer (0 when caught up;"
            " interpolated between the acknowledgements held around it)",
            group_labels,
            registry=r,
        )
        self.lag_lower_bound = Gauge(
            "kwsniff_consumer_group_lag_seconds_lower_bound",
            "When the committed offset is older than every acknowledgement held: at least this many seconds"
            " behind (kwsniff_consumer_group_lag_seconds then has no sample)",
            group_labels,
            registry=r,
        )
        follower_labels = ["follower", "topic", "partition"]
        self.replication_records = Gauge(
            "kwsniff_replication_lag_records",
            "High watermark minus the follower's fetch offset at its latest fetch (the report's replication section, live)",
            follower_labels,
            registry=r,
        )
        self.replication_seconds = Gauge(
            "kwsniff_replication_lag_seconds",
            "How long the leader's log had held the follower's fetch offset at its latest fetch (0 when caught up)",
            follower_labels,
            registry=r,
        )
        topic_io = ("topic",)
        self.produced_records = Counter(
            "kwsniff_produced_records", "Records in Produce requests", topic_io, registry=r
        )
        self.produced_bytes = Counter(
            "kwsniff_produced_bytes", "Record batch bytes in Produce requests", topic_io, registry=r
        )
        self.consumed_records = Counter(
            "kwsniff_fetched_records", "Records in Fetch responses", topic_io, registry=r
        )
        self.consumed_bytes = Counter(
            "kwsniff_fetched_bytes", "Record batch bytes in Fetch responses", topic_io, registry=r
        )
        self.group_members = Gauge(
            "kwsniff_consumer_group_members",
            "Members the group's leader was sent in its last successful JoinGroup response (classic groups);"
            " KIP-848, share and streams groups: members heartbeating",
            ["group"],
            registry=r,
        )
        self.group_rebalanced = Gauge(
            "kwsniff_consumer_group_last_rebalance_timestamp_seconds",
            "When the group's last successful JoinGroup response to its leader was seen (a new generation),"
            " or a KIP-848 group's members changed",
            ["group"],
            registry=r,
        )
        self._rebalanced: dict[str, int] = {}
        self.group_status = Gauge(
            "kwsniff_consumer_group_status",
            "1 for the group's state on the topic, 0 for the others: OK, WARN (lag rising at every commit),"
            " STALL (committing the same offset while behind), STOP (no commit for 60 s while behind),"
            " LEFT (its last act was leaving), NEVER_COMMITTED (its clients fetch, it never committed);"
            ' docs/live-capture.md "Group status"',
            ["group", "topic", "state"],
            registry=r,
        )
        self.group_last_commit = Gauge(
            "kwsniff_consumer_group_last_commit_timestamp_seconds",
            "When the group's latest commit on the topic was seen (OffsetCommit request, OffsetFetch response)",
            ["group", "topic"],
            registry=r,
        )
        self.broker_latency = Histogram(
            "kwsniff_broker_request_latency_seconds",
            "Time from request to response, per API and broker (ip:port)",
            ["api", "broker"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.removed_versions = Counter(
            "kwsniff_client_removed_version_requests",
            "Requests of an API version some Apache Kafka release refuses (removed_in: the first, e.g."
            ' 4.0 for KIP-896); client_id "" when the request named none; docs/upgrade.md',
            ["client_id", "api", "api_version", "removed_in"],
            registry=r,
        )
        self.packets = Counter("kwsniff_packets", "Packets captured", registry=r)
        self.bytes = Counter("kwsniff_captured_bytes", "Bytes of packets captured", registry=r)
        self.dropped = Counter(
            "kwsniff_packets_dropped",
            "Packets lost, by cause: kernel (libpcap ps_drop, the capture ring was full), interface"
            " (ps_ifdrop, the interface or its driver), queue (decoding fell behind, the batch was refused)",
            ["cause"],
            registry=r,
        )
        for cause in DROP_CAUSES:  # every cause from the start: none lost is a value, 0
            self.dropped.labels(cause)
        self.queue_depth = Gauge(
            "kwsniff_queue_depth",
            "Batches of captured packets waiting for the decoder (with workers: all workers' queues)",
            registry=r,
        )
        self.last_commit = Gauge(
            "kwsniff_last_commit_timestamp_seconds",
            "When the tables were last committed (Unix seconds); before the first commit, when the"
            " capture started",
            registry=r,
        )
        self.last_commit.set(time.time())
        self.commit_duration = Histogram(
            "kwsniff_commit_duration_seconds",
            "How long each commit of the tables took (a rotation period's files published into --out)",
            buckets=COMMIT_BUCKETS_S,
            registry=r,
        )
        self.worker_restarts = Counter(
            "kwsniff_worker_restarts",
            "Capture workers (--workers) that died and were started again",
            registry=r,
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
        client_api = ["client_id", "api"]
        self.client_requests = Counter(
            "kwsniff_client_requests",
            "Kafka requests decoded, per client id (the request header's) and API",
            client_api,
            registry=r,
        )
        self.client_errors = Counter(
            "kwsniff_client_errors",
            "Error codes in responses (errors table rows) per client id, API and error, apart from the"
            " codes expected in normal handshakes (the report's errors section: kind failure)",
            ["client_id", "api", "error"],
            registry=r,
        )
        self.client_latency = Histogram(
            "kwsniff_client_request_latency_seconds",
            "Time from request to response, per client id and API",
            client_api,
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        client_topic = ("client_id", "topic")
        self.client_produced_records = Counter(
            "kwsniff_client_produced_records",
            "Records in Produce requests, per client id",
            client_topic,
            registry=r,
        )
        self.client_produced_bytes = Counter(
            "kwsniff_client_produced_bytes",
            "Record batch bytes in Produce requests, per client id",
            client_topic,
            registry=r,
        )
        self.client_fetched_records = Counter(
            "kwsniff_client_fetched_records",
            "Records in Fetch responses, per client id",
            client_topic,
            registry=r,
        )
        self.client_fetched_bytes = Counter(
            "kwsniff_client_fetched_bytes",
            "Record batch bytes in Fetch responses, per client id",
            client_topic,
            registry=r,
        )
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}  # see _child
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
        """One batch: capture counters (cumulative, turned into increments; the queue's depth as it
        is now) and the rows' figures: requests, error codes, records per topic (each also per client
        id), lags, group statuses and joins."""
        last = self._last
        self.packets.inc(counters.captured - last.captured)
        self.bytes.inc(counters.captured_bytes - last.captured_bytes)
        dropped = self.dropped
        dropped.labels("kernel").inc(max(0, counters.kernel_drops - last.kernel_drops))
        dropped.labels("interface").inc(max(0, counters.if_drops - last.if_drops))
        dropped.labels("queue").inc(counters.queue_drops - last.queue_drops)
        self.queue_depth.set(counters.queued_batches)
        self._last = counters
        requests, errors, topics, lags, joins, replication, statuses, removed, forgotten = pending
        self._requests(requests)
        self._errors(errors)
        self._topics(topics)
        allowed = self._allowed
        for client, api, version, removed_in in removed:
            refused = (client_label(client), bounded_label(api), str(version), removed_in)
            if allowed("removed", refused):
                self.removed_versions.labels(*refused).inc()
        self._group_lags(lags)
        self._lags("replication", replication, self.replication_records, self.replication_seconds)
        for group, topic, state, last_commit_us in statuses:
            labels = (bounded_label(group), bounded_label(topic))
            if self._allowed("status", labels):
                for each in STATES:
                    self.group_status.labels(*labels, each).set(1 if each == state else 0)
                if last_commit_us is not None:  # None: a group that never committed
                    self.group_last_commit.labels(*labels).set(last_commit_us / 1e6)
        for group, members, ts_us in joins:
            group = bounded_label(group)
            # The latest join by its time: a worker's rows may come after another's later ones.
            if ts_us >= self._rebalanced.get(group, ts_us) and self._allowed("group", (group,)):
                self._rebalanced[group] = ts_us
                self.group_members.labels(group).set(members)
                self.group_rebalanced.labels(group).set(ts_us / 1e6)
        self._forget_groups(forgotten)
        self.connections.set(open_connections)

    def _forget_groups(self, groups: list[str]) -> None:
        """Remove every series of the groups the lag forgot (`--group-expiry`): lags, statuses, last
        commits, members; their share of the series cap and bytes is free again."""
        if not groups:
            return
        gone = {bounded_label(g) for g in groups}
        for key in [k for k in self._series if k[0] in ("lag", "status", "group") and k[1][0] in gone]:
            metric, labels = key
            if metric == "lag":
                for gauge in (self.lag_records, self.lag_seconds, self.lag_lower_bound):
                    gauge.remove(*labels)
            elif metric == "status":
                for each in STATES:
                    self.group_status.remove(*labels, each)
                self.group_last_commit.remove(*labels)
            else:
                self.group_members.remove(*labels)
                self.group_rebalanced.remove(*labels)
                self._rebalanced.pop(labels[0], None)
            self._release(metric, labels)

    def _release(self, metric: str, labels: tuple[str, ...]) -> None:
        """A series removed: its share of the series cap and of the bytes is free again."""
        self._series.discard((metric, labels))
        cost = self._cost(metric, labels)
        self.held_bytes -= cost
        self.pool[0] -= cost

    def _cost(self, metric: str, labels: tuple[str, ...]) -> int:
        """What one series of ``metric`` labelled ``labels`` is charged (_SHAPES: its objects and lines)."""
        objects, lines = _SHAPES[metric]
        return objects + lines * (LINE_COST + sum(len(v.encode("utf-8", "surrogatepass")) for v in labels))

    def _child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        """``metric.labels(*labels)``, kept: prometheus_client's lookup (a lock, label checks) cost
        more than the update itself, once per request. Only counters and histograms, whose series
        are never removed; as many as their series, which the caps bound."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def _add(self, counts: Increments) -> None:
        """A batch's increments, added up per series, into their counters."""
        child = self._child
        for (metric, labels), n in counts.items():
            child(metric, labels).inc(n)

    def _requests(self, requests: Any) -> None:
        """Each request: counted and its latency observed per API, per API and broker, per client."""
        allowed, child = self._allowed, self._child
        counts: Increments = collections.Counter()
        for api, broker, latency_s, client_id in requests:
            known = api in _KNOWN_APIS
            if not known:
                api = bounded_label(api)
                if not allowed("api", (api,)):
                    continue
            counts[(self.requests, (api,))] += 1
            if latency_s is not None:
                child(self.latency, (api,)).observe(latency_s)
                if broker is not None and allowed("broker_latency", (api, broker)):
                    child(self.broker_latency, (api, broker)).observe(latency_s)
            # Per client, only the APIs Kafka defines: one the wire names by number is counted
            # above, and a client sending thousands of them would take a histogram each.
            labels = (client_label(client_id), api)
            if known and allowed("client_api", labels):
                counts[(self.client_requests, labels)] += 1
                if latency_s is not None:
                    child(self.client_latency, labels).observe(latency_s)
        self._add(counts)

    def _errors(self, errors: Any) -> None:
        """Each `errors` row by its name; those not expected (kwsniff.protocol.EXPECTED_ERRORS) also
        per client, API and error."""
        allowed = self._allowed
        counts: Increments = collections.Counter()
        for error, api, client_id, expected in errors:
            known = error in _KNOWN_ERRORS
            if not known:
                error = bounded_label(error)
                if not allowed("error", (error,)):
                    continue
            counts[(self.errors, (error,))] += 1
            # Per client, like requests, only codes and APIs Kafka defines.
            if known and not expected and api in _KNOWN_APIS:
                labels = (client_label(client_id), api, error)
                if allowed("client_error", labels):
                    counts[(self.client_errors, labels)] += 1
        self._add(counts)

    def _topics(self, topics: Any) -> None:
        """Records and bytes of each Produce request's and Fetch response's partition, per topic and
        per client and topic."""
        allowed = self._allowed
        counts: Increments = collections.Counter()
        for topic, api, records, record_bytes, client_id in topics:
            topic = bounded_label(topic)
            produce = api == "Produce"
            if allowed("topic_io", (topic,)):
                records_of, bytes_of = (
                    (self.produced_records, self.produced_bytes)
                    if produce
                    else (self.consumed_records, self.consumed_bytes)
                )
                counts[(records_of, (topic,))] += records
                counts[(bytes_of, (topic,))] += record_bytes
            labels = (client_label(client_id), topic)
            if allowed("client_topic_io", labels):
                records_of, bytes_of = (
                    (self.client_produced_records, self.client_produced_bytes)
                    if produce
                    else (self.client_fetched_records, self.client_fetched_bytes)
                )
                counts[(records_of, labels)] += records
                counts[(bytes_of, labels)] += record_bytes
        self._add(counts)

    def committed(self, at: float, duration_s: float) -> None:
        """A commit of the tables ended at ``at`` (Unix seconds) after ``duration_s``
        (kwsniff.sinks.Output.on_commit)."""
        self.last_commit.set(at)
        self.commit_duration.observe(duration_s)

    def increment_worker_restarts(self) -> None:
        """A capture worker died and was started again (the coordinator calls it)."""
        self.worker_restarts.inc()

    def _lags(self, metric: str, rows: Any, records: Gauge, seconds: Gauge) -> None:
        """Each row's lag in records and in seconds into the two gauges of ``metric``, labelled by
        its key (follower, topic, partition). An unknown figure (None) has no sample, its series
        removed, so a figure that became unknown never holds a stale value; a key with both unknown
        (a follower gone stale) gives back its share of the series cap."""
        for (who, topic, partition), lag_records, lag_s in rows:
            labels = (bounded_label(str(who)), bounded_label(topic), str(partition))
            if lag_records is None and lag_s is None:
                if (metric, labels) in self._series:
                    records.remove(*labels)
                    seconds.remove(*labels)
                    self._release(metric, labels)
                continue
            if self._allowed(metric, labels):
                for gauge, value in ((records, lag_records), (seconds, lag_s)):
                    if value is None:
                        gauge.remove(*labels)
                    else:
                        gauge.labels(*labels).set(value)

    def _group_lags(self, rows: Any) -> None:
        """Each group's lag in records, in seconds and its lower bound: an unknown one (None) has no
        sample, its series removed, so a lag that became unknown or bounded never holds a stale value."""
        gauges = (self.lag_records, self.lag_seconds, self.lag_lower_bound)
        for (group, topic, partition), *values in rows:
            labels = (bounded_label(group), bounded_label(topic), str(partition))
            if self._allowed("lag", labels):
                for gauge, value in zip(gauges, values, strict=True):
                    if value is None:
                        gauge.remove(*labels)
                    else:
                        gauge.labels(*labels).set(value)

    def _allowed(self, metric: str, labels: tuple[str, ...]) -> bool:
        """Whether the series of ``labels`` (already bounded) exists or may be made under max_series
        and the byte cap, and, of a kind the wire can multiply (_KIND_OF), under its share of each
        (else counted)."""
        key = (metric, labels)
        if key in self._series:
            return True
        cost = self._cost(metric, labels)
        kind = _KIND_OF.get(metric)
        share = _SHARE_OF[kind] if kind is not None else 1
        if (
            len(self._series) >= self.max_series
            or self.held_bytes + cost > self.byte_cap
            or kind is not None
            and (
                self.kind_series[kind] >= self.max_series // share
                or self.kind_bytes[kind] + cost > self.byte_cap // share
            )
        ):
            self.series_dropped.inc()
            return False
        self._series.add(key)
        self.held_bytes += cost
        if kind is not None:
            self.kind_series[kind] += 1
            self.kind_bytes[kind] += cost
        self.pool[0] += cost
        if any(len(v) == MAX_LABEL and v[CUT_TO] == "…" for v in labels):
            self.labels_cut.inc()
        return True

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
