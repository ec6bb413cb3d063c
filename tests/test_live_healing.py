"""`kwsniff capture lo --workers 2` against a real tansu broker under steady load from real
confluent-kafka producers: a capture worker killed by SIGKILL is started again by the coordinator,
counted, its lost packets counted, and the capture goes on (both workers' rows in every period after
the restart, the period pcaps read back) and exits 0 on Ctrl-C; and at a stop every worker reads
what the fanout gave it before any leaves the group, so no connection is split between workers."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from tests.realparts import (
    CAPTURE_STOP_TIMEOUT_S,
    capture_metric,
    create_topics,
    free_port,
    start_broker,
    stop_process,
    wait_until,
)
from tests.test_live_periods import SteadyProducers, committed_periods, produced, start_capture

TOPIC = "healing"
PARTITIONS = 6  # a producer each: a dozen connections for the fanout to spread over the workers


def worker_pids(parent: int) -> list[int]:
    """The capture's worker processes: its children started by multiprocessing's spawn (not the
    resource tracker it may also start)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"spawn_main" in cmdline:
            pids.append(int(entry.name))
    return sorted(pids)


def periods_of_both_workers_after(out: Path, after_us: int) -> int:
    """Committed periods that began after ``after_us`` holding a capture_stats row of each worker."""
    if not (out / "capture_stats").is_dir():
        return 0
    table = ds.dataset(out / "capture_stats").to_table()
    starts = table.column("period_start").cast("int64").to_pylist()
    workers = table.column("worker").to_pylist()
    seen: dict[int, set[int]] = {}
    for start, worker in zip(starts, workers, strict=True):
        if start > after_us:
            seen.setdefault(start, set()).add(worker)
    return sum(1 for w in seen.values() if w == {0, 1})


def stop_capture(proc: subprocess.Popen[bytes]) -> str:
    proc.send_signal(signal.SIGINT)
    try:
        stdout, _ = proc.communicate(timeout=CAPTURE_STOP_TIMEOUT_S)
    finally:
        stop_process(proc, signal.SIGKILL)
    return stdout.decode()


def test_a_killed_worker_is_started_again_counted_and_the_capture_goes_on(tmp_path: Path) -> None:
    out, pcap, err = tmp_path / "live", tmp_path / "ring.pcap", tmp_path / "capture.err"
    with start_broker() as broker:
        create_topics(broker.bootstrap, {TOPIC: PARTITIONS})
        metrics_port = free_port()
        proc = start_capture(out, broker.port, pcap, err, 1.0, "--metrics-port", str(metrics_port))
        load = SteadyProducers(broker.bootstrap, TOPIC, PARTITIONS)
        try:
            wait_until(lambda: committed_periods(out) >= 3, "three committed periods", 120)
            assert capture_metric(metrics_port, "kwsniff_worker_restarts_total") == 0.0
            before = worker_pids(proc.pid)
            assert len(before) == 2, before
            os.kill(before[0], signal.SIGKILL)
            killed_us = time.time_ns() // 1000

            def replaced() -> bool:
                now = worker_pids(proc.pid)
                return len(now) == 2 and before[0] not in now

            wait_until(replaced, "a worker in place of the killed one", 60)
            wait_until(
                lambda: capture_metric(metrics_port, "kwsniff_worker_restarts_total") == 1.0,
                "the restart counted on the metrics endpoint",
                30,
            )
            # The capture goes on: periods with both workers' rows are committed after the restart.
            wait_until(lambda: periods_of_both_workers_after(out, killed_us) >= 3, "periods after it", 120)
            assert proc.poll() is None
        finally:
            acked = load.stop()
            summary = stop_capture(proc)
    message = err.read_text(errors="replace")
    assert proc.returncode == 0, message
    assert "kwsniff: error" not in message and "Traceback" not in message, message
    assert re.search(
        r"kwsniff: warning: lo: capture worker [01] exited with status -9: started again\n", message
    )
    found = re.search(r"workers restarted: 1 \(.*: at least ([\d,]+)\)", summary)
    assert found is not None, summary
    lost = int(found.group(1).replace(",", ""))
    # Records whose rows died with the worker are what its lost packets carried: none missing
    # without packets counted lost (and nothing counted twice).
    rows = produced(out)
    assert all(rows[k] <= acked[k] for k in acked) and set(rows) <= set(acked)
    assert rows == acked or lost > 0, (rows, acked, lost)
    # Every connection stayed on its worker's slot: the survivor's never moved, the dead worker's
    # went on in the worker in its place (their rows before were lost with it): one row each.
    connections = ds.dataset(out / "connections").to_table().to_pylist()
    by_client = Counter((c["client_ip"], c["client_port"]) for c in connections)
    assert set(by_client.values()) == {1}, by_client
    # The period pcaps, the killed worker's files of its open periods with them, read back as one capture.
    pieces = sorted(tmp_path.glob("ring_*.pcap"))
    read = subprocess.run(
        [
            sys.executable,
            "-m",
            "kwsniff",
            "read",
            "--continuous",
            *map(str, pieces),
            "--out",
            str(tmp_path / "again"),
        ]
        + ["-p", str(broker.port)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert read.returncode == 0, read.stderr


def test_at_a_stop_under_load_no_connection_is_split_between_workers(tmp_path: Path) -> None:
    """Ctrl-C while a dozen connections carry steady traffic: each worker reads its ring up to the
    stop while every worker is still in the fanout group, so each connection has one row and no
    response is an orphan.
    (The workers used to leave the group one by one: a connection's last packets then went to the
    other worker, giving a second row, an orphan response and an unanswered request.)"""
    out, pcap, err = tmp_path / "live", tmp_path / "ring.pcap", tmp_path / "capture.err"
    with start_broker() as broker:
        create_topics(broker.bootstrap, {TOPIC: PARTITIONS})
        proc = start_capture(out, broker.port, pcap, err, rotate_s=5.0)
        load = SteadyProducers(broker.bootstrap, TOPIC, PARTITIONS)
        try:
            wait_until(lambda: sum(produced(out).values()) >= 2000, "records in the tables", 120)
            summary = stop_capture(proc)  # the producers still produce
        finally:
            load.stop()
            stop_process(proc, signal.SIGKILL)
    message = err.read_text(errors="replace")
    assert proc.returncode == 0 and "kwsniff: error" not in message, message
    assert "packets dropped" in summary
    connections = ds.dataset(out / "connections").to_table().to_pylist()
    by_client = Counter((c["client_ip"], c["client_port"]) for c in connections)
    assert len(by_client) >= PARTITIONS and set(by_client.values()) == {1}, by_client
    assert sum(c["orphan_responses"] for c in connections) == 0


# --- the coordinator's part, on workers the test plays --------------------------------------------


class FakeProcess:
    def __init__(self, spec: object) -> None:
        self.spec = spec
        self.started = False
        self.pid = None
        self.exitcode: int | None = None

    def start(self) -> None:
        self.started = True


def fake_pool(tmp_path: Path) -> object:
    import dataclasses

    from kwsniff.pipeline.live_worker import WorkerRun, WorkerSpec
    from kwsniff.pipeline.run_workers import WorkerPool
    from kwsniff.pipeline.session import SessionOptions
    from kwsniff.view.stats import LiveStats

    run = WorkerRun("lo", "", 262144, 1 << 20, 1.0, 900.0, None)
    spec = WorkerSpec(0, 2, run, 1, tmp_path, "cap", ("requests",), SessionOptions(), (), 1 << 20)
    pool = WorkerPool([spec, dataclasses.replace(spec, index=1)], None, 1.0, LiveStats())  # type: ignore[arg-type]

    def process(spec: WorkerSpec, control: object) -> FakeProcess:
        ours, theirs = pool._channels[spec.index] = socket.socketpair()
        pool.workers_end = theirs.dup()  # what the worker process would hold  # type: ignore[attr-defined]
        return FakeProcess(spec)

    pool._process = process  # type: ignore[method-assign]
    return pool


def test_the_coordinator_restarts_a_dead_worker_and_counts_what_it_lost(tmp_path: Path) -> None:
    from kwsniff.capture.live import CaptureCounters

    pool: Any = fake_pool(tmp_path)
    # Worker 0 handed in its last period after decoding 700 packets, said it had taken 900 in its
    # last stats, and had taken 1,000 when it was killed (kept in the shared counter).
    pool._handle(("period", 0, [], [], 700))
    pool._handle(("stats", 0, CaptureCounters(captured=900, kernel_drops=3), 0, [], [], [], []))
    pool._handle(("stats", 1, CaptureCounters(captured=50), 0, [], [], [], []))
    pool.taken[0].value = 1000
    pool._awaiting = {0, 1}  # a rotation in progress
    pool._restart(0)
    assert (pool.restarts, pool.lost_packets) == (1, 300)
    assert pool._awaiting == {1}  # the rotation no longer waits for the dead one
    assert pool.specs[0].generation == 1 and pool.specs[0].tag == "w0r1"
    assert pool.processes[0].started and pool.processes[0].spec is pool.specs[0]
    assert pool.taken[0].value == 0 and 0 in pool._starting
    # Its counters stay in the totals; the new worker's start from zero.
    assert pool.snapshot() == CaptureCounters(captured=950, kernel_drops=3)
    assert pool.per_worker()[0] == CaptureCounters()
    # Once ready, it starts in the current period, told its number and end.
    pool._pcap_period, pool._pcap_end, pool._table_start = 7, 1007.0, 1006.001
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stand_in:  # its packet socket, sent
        with pool.workers_end:
            socket.send_fds(pool.workers_end, [b"socket"], [stand_in.fileno()])
        pool._handle(("ready", 0, 4321))
    assert 0 in pool._held
    pool._release_sockets()
    assert pool.controls[0].get(timeout=5) == ("start", 1006.001, 7, 1007.0)
    assert 0 not in pool._starting


def test_the_coordinator_gives_up_after_too_many_restarts_in_the_window(tmp_path: Path) -> None:
    from kwsniff.pipeline.run_workers import MAX_RESTARTS

    pool: Any = fake_pool(tmp_path)
    dead = FakeProcess(None)
    dead.exitcode = -9
    for _ in range(MAX_RESTARTS):
        assert pool._may_restart(0, dead)
        pool._restart(0)
    assert not pool._may_restart(1, dead)
    pool._release_sockets()
    assert pool.errors == [
        f"worker 1 exited with status -9, after {MAX_RESTARTS} workers were restarted within 600 s: "
        "not restarted, the capture stops"
    ]
    assert pool._stopping


class TimedHandle:
    """A pcapy handle whose ring holds ``batches`` of packets at the given times (seconds); its
    descriptor is readable while any batch is left."""

    def __init__(self, batches: list[list[float]]) -> None:
        import struct

        self.batches = [
            (
                b"p" * len(b),
                b"".join(struct.pack("=IIII", int(t), round(t % 1 * 1e6), i, 1) for i, t in enumerate(b)),
            )
            for b in batches
        ]
        self.read_fd, self.write_fd = os.pipe()
        os.write(self.write_fd, b"x")
        self.read = 0
        self.closed = False

    def datalink(self) -> int:
        return 228

    def getfd(self) -> int:
        return self.read_fd

    def next_batch(self, count: int) -> tuple[bytes, bytes]:
        batch = self.batches[self.read]
        self.read += 1
        if self.read == len(self.batches):
            os.read(self.read_fd, 1)  # nothing more: the descriptor is no longer readable
        return batch

    def stats(self) -> tuple[int, int, int]:
        return (0, 0, 0)

    def close(self) -> None:
        self.closed = True
        os.close(self.read_fd)
        os.close(self.write_fd)


def test_a_capture_stopped_at_a_time_reads_the_ring_up_to_it_and_keeps_its_socket_until_closed() -> None:
    """A fanout worker's stop: every packet from before the stop is read, the first later one ends
    the read (the ring is in time order), and the socket stays a member of the group until close()."""
    from kwsniff.capture.live import LiveCapture

    handle = TimedHandle([[1.0, 2.0], [3.0, 4.0], [5.0]])
    live = LiveCapture(handle, close_on_stop=False)
    live.stop_at(3.5)
    live.start()
    live.join(30)
    assert not live.running
    queued = []
    while (item := live.queue.get(timeout=5)) is not None:
        queued += [ts for ts, _ in item[1]]
    assert queued == [1_000_000, 2_000_000, 3_000_000]
    assert handle.read == 2 and live.snapshot().captured == 3
    assert not handle.closed
    live.close()
    live.close()  # once
    assert handle.closed


def test_a_capture_stopped_at_a_time_ends_once_its_ring_is_quiet() -> None:
    from kwsniff.capture.live import LiveCapture

    handle = TimedHandle([[1.0, 2.0]])
    live = LiveCapture(handle, close_on_stop=False)
    live.stop_at(10.0)  # long past: the ring's silence after it says nothing older is coming
    live.start()
    live.join(30)
    assert not live.running and live.snapshot().captured == 2
    live.close()


def test_a_worker_skips_what_its_socket_took_before_it_joined_or_the_capture_started() -> None:
    """Until it joins the fanout group a socket takes every packet (the others' too), and libpcap
    hands a block over only once it is full or old: packets stamped before the join are skipped,
    not counted, wherever they come in the ring."""
    from kwsniff.capture.live import LiveCapture

    handle = TimedHandle([[1.0, 2.0], [2.5, 3.0, 3.5]])
    live = LiveCapture(handle, close_on_stop=False, skip_before=3.0)
    live.stop_at(10.0)
    live.start()
    live.join(30)
    queued = []
    while (item := live.queue.get(timeout=5)) is not None:
        queued += [ts for ts, _ in item[1]]
    assert queued == [3_000_000, 3_500_000] and live.snapshot().captured == 2
    live.close()
