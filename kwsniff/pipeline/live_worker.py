"""One worker process of a live capture spread over cores (`kwsniff capture --workers N`).

Each worker opens its own libpcap handle on the interface and joins it to the run's AF_PACKET
fanout group (steered by kwsniff.capture.fanout's BPF program, flow-symmetric: both directions of a
connection reach the same worker, and a tunnel's connections that of its outer addresses), then
decodes its share with the same :class:`LiveDecoder` as a single-process capture. Its Parquet files
go to a spool directory the coordinator (:mod:`kwsniff.pipeline.run_workers`) moves into the
dataset's stage, so every worker's rows of a period are committed together.

Messages to the coordinator (one queue shared by the workers), each a tuple starting with the kind
and the worker's number: ``ready``, ``error`` (one line), ``stats`` (counters, open connections and
the few fields of the rows the live view and metrics count), ``period`` (files of a closed period,
and the `--write-pcap` files closed: (period, path)), ``drained`` (every packet decoded, its last
stats sent), ``done`` (the last files, row counts, the worker's :class:`CaptureResult` and its last
`--write-pcap` files). From the coordinator (one queue per worker): ``("start", now, period, end)``
(the table period's start, and the `--write-pcap` period's number and end),
``("rotate", now, end, next_end)`` (the table period ends now, the `--write-pcap` period at ``end``,
announced before, and the next one at ``next_end``), ``("brokers", endpoints)``, ``("node_ids", [((address, port), node id), ...])``
(the ids brokers gave themselves), ``("topic_names", [(topic id, name), ...])`` and ``("finish",)``.

Brokers a worker learns (`read`'s auto-detection: an endpoint whose connection proved Kafka) go to
the coordinator with its stats and from there to the other workers, so a connection to that
endpoint hashed to another worker is trusted there too, mid-stream ones included. Node ids a worker
learns for broker addresses (kwsniff.rows.brokers) travel the same way, so rows of a connection
whose Metadata went to another worker are named too (once the id arrives), and so do the topic
names a worker learns for topic ids (a Metadata, a Fetch v13+ response naming them): the rows another
worker holds for an id it never saw named (a consumer's Fetch by id) get their name, in the tables
and in the metrics, once it arrives. SIGTERM, sent to the worker's PID,
stops it; SIGINT is ignored (Ctrl-C reaches the whole process group, the coordinator decides). A
stopped worker reads its ring up to the moment of the stop (:meth:`LiveCapture.stop_at`), decodes
it, says it is drained and waits (at most FINISH_WAIT_S) for the coordinator's ``finish``, sent once
every worker is drained and after every id they learned, before its session writes the rows still
held for a node id: a capture stopped right after a Metadata names the rows of every worker alike.
Its socket stays in the fanout group until then: a member that left would hand its connections' last
packets to the others (the group steers by the number of members), splitting them. Once it joined
the group it sends the socket to the coordinator (``channel``), which keeps a copy so that its slot
stays taken if it dies (kwsniff.pipeline.run_workers).

A worker the coordinator started again after one died (its ``generation`` above 0) names its files
and numbers its connections apart from those of the worker it replaces.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import signal
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kwsniff.capture.live import LiveCapture, LiveCaptureError, join_fanout, open_interface
from kwsniff.capture.pcap_periods import PeriodPcapWriter
from kwsniff.memory import SECRETS, MemoryBudget
from kwsniff.pipeline.keylogs import KeyLogError, follow_keylog
from kwsniff.pipeline.run import capture_result
from kwsniff.pipeline.run_live import LiveDecoder, LiveOptions
from kwsniff.pipeline.session import SessionOptions
from kwsniff.sinks.parquet import arrow_without_pandas
from kwsniff.view.stats import LAG_APIS, LiveStats

PUBLISH_EVERY_S = 0.5  # how often a worker sends its counters and rows to the coordinator
START_TIMEOUT_S = 60.0  # a worker told nothing this long after it is ready gives up
CONN_ID_BITS = 40  # a replacement worker's conn_ids start at generation << 40 (an int64 column)
FINISH_WAIT_S = 10.0  # how long a drained worker waits for the others' node ids (`finish`)
# The fields of each table's rows that LiveStats counts: all the view and metrics need.
VIEW_FIELDS = {
    "requests": (
        "api_name",
        "api_key",
        "latency_ms",
        "throttle_time_ms",
        "client_id",
        "broker_ip",
        "broker_port",
        # A version some Kafka release refuses (kwsniff_client_removed_version_requests_total).
        "api_version",
        "removed_in",
    ),
    # The metrics' per-client errors: by API and client, apart from the expected codes.
    "errors": ("error_name", "error_code", "api_name", "api_key", "client_id"),
    # Bytes and records per topic, and what the lag follows (kwsniff.view.lag).
    "partitions": (
        "api_name",
        "api_key",
        "record_bytes",
        "record_count",
        "topic",
        "topic_id",
        "partition",
        "group_id",
        "error_code",
        "first_offset",
        "last_offset",
        "high_watermark",
        "committed_offset",
        "ts_request",
        "ts_response",
        "client_id",  # the metrics' per-client records and bytes
        "client_ip",  # with client_id, the group of a Fetch's client (NEVER_COMMITTED)
        # Followers' fetches for the replication lag (kwsniff.view.replication).
        "fetch_offset",
        "replica_id",
        "fetcher",
    ),
    "connections": ("gaps", "gap_bytes"),
    # Joins (members), KIP-848 heartbeats' members, and each exchange's event and time for the
    # group's status (LEFT).
    "groups": (
        "api_key",
        "group_id",
        "client_id",  # a group's clients: whose Fetch is the group's (NEVER_COMMITTED)
        "client_ip",
        "member_id",
        "members",
        "error_code",
        "event",
        "ts_request",
        "ts_response",
    ),
}


@dataclass
class WorkerRun:
    """The capture options every worker shares (`kwsniff capture --workers N`'s)."""

    iface: str
    bpf: str
    snaplen: int
    buffer_bytes: int  # each worker's ring
    rotate_s: float  # the coordinator's: it asks every worker to close its period
    idle_s: float
    write_pcap: Path | None


@dataclass
class WorkerSpec:
    """What a worker needs, sent to it at start (picklable)."""

    index: int
    workers: int
    run: WorkerRun
    group: int  # the fanout group id
    spool: Path  # where its Parquet files are written
    name: str  # the capture's name (the `capture` column), the same for every worker
    tables: tuple[str, ...]
    session: SessionOptions  # without keylog: each worker follows the key log files itself
    keylog: tuple[Path, ...]
    queue_bytes: int
    metrics: bool = False  # --metrics-port: the rows only the metrics count are relayed too
    generation: int = 0  # 0, then 1, 2, ... for the workers started in its place after one died

    @property
    def tag(self) -> str:
        """The worker in its file names: `w1`, and `w1r2` for its second replacement."""
        return f"w{self.index}" + (f"r{self.generation}" if self.generation else "")


class RowRelay(LiveStats):
    """A LiveStats that keeps, instead of counting them, the view's fields of each row, for the
    coordinator's LiveStats to count: the view and metrics then see every worker's rows."""

    def __init__(self, metrics: bool = False) -> None:
        super().__init__()
        self.metrics = metrics
        self.rows: list[tuple[str, dict[str, Any]]] = []

    def row(self, table: str, row: dict[str, Any]) -> None:
        fields = VIEW_FIELDS.get(table)
        get = row.get
        if fields is None:
            return
        # The view counts partitions with record bytes; the metrics also follow the lag's rows
        # (commits, watermarks) and the groups' exchanges.
        if not self.metrics and table == "groups":
            return
        lag_row = self.metrics and get("api_key") in LAG_APIS
        if table == "partitions" and not get("record_bytes") and not lag_row:
            return
        kept = {k: get(k) for k in fields}
        with self.lock:
            self.rows.append((table, kept))

    def take_rows(self) -> list[tuple[str, dict[str, Any]]]:
        with self.lock:
            rows, self.rows = self.rows, []
        return rows


class WorkerDecoder(LiveDecoder):
    """A LiveDecoder that rotates when the coordinator says and reports to it."""

    def __init__(self, *args: Any, index: int, events: Any, control: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.index = index
        self.events = events
        self.control = control
        self._last_sent = 0.0
        self.reported = 0  # of sink.files, those sent in `period` messages
        self.pcaps_reported = 0  # of the period pcaps closed, those sent
        self.shared: set[tuple[bytes, int]] = set()  # learned brokers the other workers were told of
        self.shared_ids: dict[tuple[str, int], int] = {}  # node ids of broker addresses, likewise
        self.told_to_finish = False  # the coordinator's `finish`: every worker is drained
        self.session.rows.topics.fresh = {}  # the names it learns, shared at each stats
        # The packets taken from the kernel so far, in memory the coordinator shares: it outlives
        # this process, so the coordinator can count what a killed worker lost.
        self.taken: Any = None

    def before_batch(self) -> None:
        """Rotations take effect before the next batch is written (the sooner, the fewer packets the
        period files must move)."""
        if self.taken is not None:
            self.taken.value = self.capture.counters.captured
        self._take_control()

    def _publish(self) -> None:
        self._take_control()
        now = time.monotonic()
        if now - self._last_sent >= PUBLISH_EVERY_S:
            self._last_sent = now
            self.send_stats()

    def _take_control(self) -> None:
        while True:
            try:
                message = self.control.get_nowait()
            except queue.Empty:
                break
            self._apply(message)

    def before_finish(self) -> None:
        """Every packet decoded: the last stats (every node id this worker learned) go out, then the
        worker waits for the coordinator's ``finish``, which comes after the others' ids."""
        self.send_stats()
        self.events.put(("drained", self.index))
        deadline = time.monotonic() + FINISH_WAIT_S
        while not self.told_to_finish and time.monotonic() < deadline:
            try:
                self._apply(self.control.get(timeout=0.1))
            except queue.Empty:
                continue

    def _apply(self, message: tuple[Any, ...]) -> None:
        """One message of the coordinator's."""
        if message[0] == "finish":
            self.told_to_finish = True
        elif message[0] == "rotate":
            _, now, end, next_end = message
            files = self.sink.rotate(now)
            self.reported = len(self.sink.files)
            if isinstance(self.pcap, PeriodPcapWriter):
                self.pcap.rotate(end, next_end)
            # The packets whose rows (but those of exchanges still open) are in the files handed in.
            self.events.put(
                ("period", self.index, [str(f) for f in files], self.closed_pcaps(), self.decoded)
            )
        elif message[0] == "brokers":  # learned by another worker from its connections
            for endpoint in message[1]:
                self.session.learn_broker(endpoint)
                self.shared.add(endpoint)
        elif message[0] == "node_ids":  # node ids of broker addresses another worker learned
            self.shared_ids.update(message[1])
            self.session.rows.node_ids.share(message[1])
        elif message[0] == "topic_names":  # topic ids' names another worker learned
            names, topics = dict(message[1]), self.session.rows.topics
            topics.learn(names)
            fresh = topics.fresh
            for k, v in names.items():  # not sent back
                if fresh is not None and fresh.get(k) == v:
                    del fresh[k]

    def closed_pcaps(self) -> list[tuple[int, str]]:
        """(period, path) of this worker's `--write-pcap` files closed since the last call."""
        if not isinstance(self.pcap, PeriodPcapWriter):
            return []
        closed = self.pcap.closed[self.pcaps_reported :]
        self.pcaps_reported += len(closed)
        return [(period, str(path)) for period, path in closed]

    def send_stats(self) -> None:
        assert isinstance(self.stats, RowRelay)
        rows = self.stats.take_rows()
        learned = self.session.brokers - self.shared
        self.shared |= learned
        # Only what brokers said of themselves: another host's claim stays provisional where it was
        # heard (kwsniff.rows.brokers), and a flood of such claims is not copied to every worker.
        ids = [(e, n) for e, n in self.session.rows.node_ids.directory.owned() if e not in self.shared_ids]
        self.shared_ids.update(ids)
        names = self.session.rows.topics.take_fresh()  # only those learned since the last stats
        counters = self.capture.snapshot()
        self.events.put(
            ("stats", self.index, counters, self.open_connections(), rows, sorted(learned), ids, names)
        )


def worker_main(
    spec: WorkerSpec, events: Any, control: Any, taken: Any = None, channel: socket.socket | None = None
) -> None:
    """The body of a worker process (multiprocessing's target): anything unforeseen is one line to
    the coordinator, not a traceback on the terminal. ``taken``: a shared multiprocessing Value the
    worker keeps at the number of packets it has taken from the kernel; ``channel``: a Unix socket
    its packet socket is sent over, once it joined the fanout group."""
    try:
        _work(spec, events, control, taken, channel)
    except Exception as err:  # noqa: BLE001
        events.put(("error", spec.index, f"{type(err).__name__}: {err}"))


def _work(spec: WorkerSpec, events: Any, control: Any, taken: Any, channel: socket.socket | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    try:
        run = spec.run
        handle = open_interface(run.iface, run.bpf, run.snaplen, run.buffer_bytes)
        try:
            join_fanout(handle, spec.group, spec.workers)
            joined = time.time()
            if channel is not None:
                # The coordinator keeps a copy of this socket: if this process dies, its slot in the
                # group stays taken until a worker in its place has joined (kwsniff.pipeline.run_workers).
                with contextlib.suppress(OSError), channel:  # without it, a restart reshuffles slots
                    socket.send_fds(channel, [b"socket"], [handle.getfd()])
        except LiveCaptureError:
            handle.close()
            raise
    except LiveCaptureError as err:
        events.put(("error", spec.index, str(err)))
        return
    # As `capture` does in its own process: without it pyarrow imports pandas at the first period's
    # close (seconds on a busy machine, while the other workers wait to commit).
    arrow_without_pandas()
    events.put(("ready", spec.index, os.getpid()))
    begin = _wait_for_start(control, stop)
    if begin is None:
        handle.close()
        events.put(("done", spec.index, [], {}, None, []))
        return
    try:
        session = dataclasses.replace(
            spec.session, conn_ids=(spec.index, spec.workers), conn_id_base=spec.generation << CONN_ID_BITS
        )
        if spec.keylog:
            cap = MemoryBudget(session.memory_limit).cap(SECRETS)
            session = dataclasses.replace(session, keylog=follow_keylog(spec.keylog, cap))
        _capture(spec, handle, session, begin, joined, events, control, stop, taken)
    except (KeyLogError, OSError) as err:
        events.put(("error", spec.index, str(err)))


def _wait_for_start(control: Any, stop: threading.Event) -> tuple[float, int, float] | None:
    """The coordinator's ``start``: the table period's start (every worker's first period starts
    then), the `--write-pcap` period's number and its end; or None: stop."""
    deadline = time.monotonic() + START_TIMEOUT_S
    parent = os.getppid()
    while not stop.is_set() and time.monotonic() < deadline and os.getppid() == parent:
        with contextlib.suppress(queue.Empty):
            message = control.get(timeout=0.2)
            if message[0] == "start":
                return float(message[1]), int(message[2]), float(message[3])
            if message[0] == "stop":  # the capture stopped before this worker (a replacement) started
                return None
    return None


def _capture(
    spec: WorkerSpec,
    handle: Any,
    session: SessionOptions,
    begin: tuple[float, int, float],
    joined: float,
    events: Any,
    control: Any,
    stop: threading.Event,
    taken: Any,
) -> None:
    start, period, end = begin
    # Until it joined the group this socket took every packet, which others take too; and the
    # capture starts at ``start`` (a worker started in place of a dead one joins after it): what it
    # holds from before either is skipped, so no packet is decoded twice. (Reading the ring empty at
    # the start would not do: libpcap hands a block over only once it is full or TIMEOUT_MS old.)
    # The socket leaves the fanout group only once every worker has drained (live.close below).
    live = LiveCapture(
        handle,
        0,
        queue_bytes=spec.queue_bytes,
        close_on_stop=False,
        skip_before=max(joined, start),
    )
    relay = RowRelay(spec.metrics)
    pcap = spec.run.write_pcap
    options = LiveOptions(
        spec.spool,
        spec.name,
        spec.tables,
        rotate_s=float("inf"),  # the coordinator rotates
        idle_s=spec.run.idle_s,
        snaplen=spec.run.snaplen,
        worker=spec.index,
        # The file names say the worker, the rows do not: one capture, one `capture` value.
        file_name=f"{spec.name}-{spec.tag}",
    )
    decoder = WorkerDecoder(live, session, options, relay, index=spec.index, events=events, control=control)
    decoder.taken = taken
    if pcap is not None:
        # This worker's packets of each period, for the coordinator to merge with the others'.
        decoder.pcap = PeriodPcapWriter(
            spec.spool / "pcap", spec.tag, live.linktype, spec.run.snaplen, period=period, end_s=end
        )
    decoder.sink.started = start  # the first period's start, as every worker's
    started = time.monotonic()
    decoder.start()
    live.start()
    parent = os.getppid()
    while not stop.wait(0.2) and live.running and decoder.running:
        if os.getppid() != parent:  # the coordinator is gone: stop and keep what was decoded
            break
    # What the fanout gave this worker up to the stop is read (the others do the same, still members).
    live.stop_at(time.time())
    live.join()
    decoder.join()
    live.close()
    decoder.send_stats()
    done = [str(f) for f in decoder.sink.files[decoder.reported :]]
    if decoder.error is not None or decoder.result is None:
        events.put(
            ("error", spec.index, f"decoding stopped: {type(decoder.error).__name__}: {decoder.error}")
        )
    result = None
    if decoder.result is not None:
        c = live.snapshot()
        result = capture_result(
            decoder.session,
            decoder.result,
            name=spec.name,
            path=spec.name,
            file_bytes=c.captured_bytes,
            seconds=time.monotonic() - started,
            truncated=False,
        )
    if live.error:
        events.put(("error", spec.index, live.error))
    events.put(("done", spec.index, done, dict(decoder.sink.counts), result, decoder.closed_pcaps()))
