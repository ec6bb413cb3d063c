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
`--write-pcap` files). From the coordinator (one queue per worker): ``("start", now)``,
``("rotate", now)``, ``("brokers", endpoints)``, ``("node_ids", [((address, port), node id), ...])``
(the ids brokers gave themselves) and ``("finish",)``.

Brokers a worker learns (`read`'s auto-detection: an endpoint whose connection proved Kafka) go to
the coordinator with its stats and from there to the other workers, so a connection to that
endpoint hashed to another worker is trusted there too, mid-stream ones included. Node ids a worker
learns for broker addresses (kwsniff.rows.brokers) travel the same way, so rows of a connection
whose Metadata went to another worker are named too (once the id arrives). SIGTERM, sent to the worker's PID,
stops it; SIGINT is ignored (Ctrl-C reaches the whole process group, the coordinator decides). A
stopped worker, its packets decoded, says it is drained and waits (at most FINISH_WAIT_S) for the
coordinator's ``finish``, sent once every worker is drained and after every id they learned, before
its session writes the rows still held for a node id: a capture stopped right after a Metadata names
the rows of every worker alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kwsniff.capture.live import LiveCapture, LiveCaptureError, drain, join_fanout, open_interface
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
    ),
    "errors": ("error_name", "error_code"),
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

    def _publish(self) -> None:
        while True:
            try:
                message = self.control.get_nowait()
            except queue.Empty:
                break
            self._apply(message)
        now = time.monotonic()
        if now - self._last_sent >= PUBLISH_EVERY_S:
            self._last_sent = now
            self.send_stats()

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
            files = self.sink.rotate(message[1])
            self.reported = len(self.sink.files)
            if isinstance(self.pcap, PeriodPcapWriter):
                self.pcap.rotate(message[1])
            self.events.put(("period", self.index, [str(f) for f in files], self.closed_pcaps()))
        elif message[0] == "brokers":  # learned by another worker from its connections
            for endpoint in message[1]:
                self.session.learn_broker(endpoint)
                self.shared.add(endpoint)
        elif message[0] == "node_ids":  # node ids of broker addresses another worker learned
            self.shared_ids.update(message[1])
            self.session.rows.node_ids.share(message[1])

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
        counters = self.capture.snapshot()
        self.events.put(("stats", self.index, counters, self.open_connections(), rows, sorted(learned), ids))


def worker_main(spec: WorkerSpec, events: Any, control: Any) -> None:
    """The body of a worker process (multiprocessing's target): anything unforeseen is one line to
    the coordinator, not a traceback on the terminal."""
    try:
        _work(spec, events, control)
    except Exception as err:  # noqa: BLE001
        events.put(("error", spec.index, f"{type(err).__name__}: {err}"))


def _work(spec: WorkerSpec, events: Any, control: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    try:
        run = spec.run
        handle = open_interface(run.iface, run.bpf, run.snaplen, run.buffer_bytes)
        try:
            join_fanout(handle, spec.group)
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
    start = _wait_for_start(control, stop)
    if start is None:
        handle.close()
        events.put(("done", spec.index, [], {}, None))
        return
    # Until every worker had joined, this socket took every packet, which others may have taken
    # too: what it holds from before the start is dropped, so no packet is decoded twice.
    drain(handle)
    try:
        session = dataclasses.replace(spec.session, conn_ids=(spec.index, spec.workers))
        if spec.keylog:
            cap = MemoryBudget(session.memory_limit).cap(SECRETS)
            session = dataclasses.replace(session, keylog=follow_keylog(spec.keylog, cap))
        _capture(spec, handle, session, start, events, control, stop)
    except (KeyLogError, OSError) as err:
        events.put(("error", spec.index, str(err)))


def _wait_for_start(control: Any, stop: threading.Event) -> float | None:
    """The coordinator's start time (every worker's first period starts then), or None: stop."""
    deadline = time.monotonic() + START_TIMEOUT_S
    parent = os.getppid()
    while not stop.is_set() and time.monotonic() < deadline and os.getppid() == parent:
        with contextlib.suppress(queue.Empty):
            message = control.get(timeout=0.2)
            if message[0] == "start":
                return float(message[1])
    return None


def _capture(
    spec: WorkerSpec,
    handle: Any,
    session: SessionOptions,
    start: float,
    events: Any,
    control: Any,
    stop: threading.Event,
) -> None:
    live = LiveCapture(handle, 0, queue_bytes=spec.queue_bytes)
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
        file_name=f"{spec.name}-w{spec.index}",
    )
    decoder = WorkerDecoder(live, session, options, relay, index=spec.index, events=events, control=control)
    if pcap is not None:
        # This worker's packets of each period, for the coordinator to merge with the others'.
        decoder.pcap = PeriodPcapWriter(
            spec.spool / "pcap", f"w{spec.index}", live.linktype, spec.run.snaplen
        )
    decoder.sink.started = start  # the first period's start, as every worker's
    started = time.monotonic()
    decoder.start()
    live.start()
    parent = os.getppid()
    while not stop.wait(0.2) and live.running and decoder.running:
        if os.getppid() != parent:  # the coordinator is gone: stop and keep what was decoded
            break
    live.stop()
    live.join()
    decoder.join()
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
