"""`kwsniff capture lo --workers 2 --rotate-seconds 5 --write-pcap` against a real tansu broker while
real confluent-kafka clients produce and consume: every period of both workers is committed into
`--out` while the capture runs (a reader sees the acknowledged records before the stop), every
acknowledged record is counted per partition against the producer's delivery reports, the summary
and `capture_stats` agree on the periods, and `--write-pcap` gives one pcap per period holding both
workers' packets that `read --continuous` reads as one capture (the live tables' requests) and tshark
reads after mergecap (the same requests by port, API and correlation id)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from kwsniff.capture.pcap_periods import PeriodPcapWriter, merge_period, period_path
from kwsniff.pipeline.run_workers import next_rotation
from tests.realparts import (
    CAPTURE_READY_TIMEOUT_S,
    CAPTURE_STOP_TIMEOUT_S,
    consume_with_confluent,
    create_topics,
    pcap_packet_count,
    start_broker,
    stop_process,
)

TOPIC = "periods"
PARTITIONS = 3
RECORDS = 300
ROTATE_S = 5.0
LIVE_TIMEOUT_S = 120.0  # for the acknowledged records to show in --out while the capture runs
POLL_S = 0.2
# Columns that differ by nature between the live tables and `read` of the pcaps: the capture's
# name and conn_id (numbered per worker live; rows are matched by their connection's ports).
UNCOMPARED = ("capture", "conn_id")


def start_capture(
    out: Path, port: int, pcap: Path, err_path: Path, rotate_s: float = ROTATE_S, *extra: str
) -> subprocess.Popen[bytes]:
    """`kwsniff capture lo` with two workers, returned once it says every worker captures."""
    command = [sys.executable, "-m", "kwsniff", "capture", "lo", "--out", str(out), "-p", str(port)]
    command += ["--workers", "2", "--rotate-seconds", str(rotate_s), "--write-pcap", str(pcap), *extra]
    with err_path.open("wb") as err:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err)
    deadline = time.monotonic() + CAPTURE_READY_TIMEOUT_S
    while b"kwsniff: capturing on lo with 2 workers" not in err_path.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc, signal.SIGKILL)
            raise AssertionError(f"capture not ready: {err_path.read_text(errors='replace')}")
        time.sleep(POLL_S)
    return proc


def produce_acknowledged(bootstrap: str) -> Counter[tuple[str, int]]:
    """RECORDS records over the topic's partitions, one producer (and its connections: more for the
    fanout to spread) per partition; the records acknowledged per partition, from the producers'
    delivery reports."""
    from confluent_kafka import Producer

    acked: Counter[tuple[str, int]] = Counter()

    def delivered(err: object, msg: Any) -> None:
        if err is None:
            acked[(msg.topic(), msg.partition())] += 1

    for partition in range(PARTITIONS):
        config = {"bootstrap.servers": bootstrap, "client.id": f"periods-producer-{partition}"}
        producer = Producer({**config, "linger.ms": 5, "acks": "all"})
        for i in range(RECORDS // PARTITIONS):
            producer.produce(TOPIC, value=b"record %d" % i, partition=partition, on_delivery=delivered)
            producer.poll(0)
        assert producer.flush(30) == 0
    return acked


def produced(out: Path) -> Counter[tuple[str, int]]:
    """Records of the Produce requests the broker accepted, per partition, in --out's tables."""
    counts: Counter[tuple[str, int]] = Counter()
    if not (out / "partitions").is_dir():
        return counts
    for row in ds.dataset(out / "partitions").to_table().to_pylist():
        if row["api_name"] == "Produce" and row["error_code"] == 0:
            counts[(row["topic"], row["partition"])] += row["record_count"]
    return counts


def wait_for_live_rows(out: Path, proc: subprocess.Popen[bytes], want: Counter[tuple[str, int]]) -> None:
    """Bounded wait until --out's tables count ``want`` while the capture still runs."""
    deadline = time.monotonic() + LIVE_TIMEOUT_S
    seen: Counter[tuple[str, int]] = Counter()
    while time.monotonic() < deadline and proc.poll() is None:
        seen = produced(out)
        if seen == want:
            return
        time.sleep(POLL_S)
    raise AssertionError(f"--out shows {dict(seen)} of {dict(want)} (capture exit {proc.poll()})")


def admin_node_ids(bootstrap: str) -> list[int]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "kwsniff-admin"})
    return sorted(admin.list_topics(timeout=10).brokers)


def requests_by_ports(out: Path) -> list[str]:
    """The requests table's rows, each with its connection's client port in place of the
    uncompared columns, sorted."""
    ports = {c["conn_id"]: c["client_port"] for c in ds.dataset(out / "connections").to_table().to_pylist()}
    rows = []
    for row in ds.dataset(out / "requests").to_table().to_pylist():
        kept = {k: v for k, v in row.items() if k not in UNCOMPARED}
        kept["client_port"] = ports[row["conn_id"]]
        rows.append(repr(sorted(kept.items())))
    return sorted(rows)


def tshark_requests(pcap: Path, port: int) -> Counter[tuple[int, int, int, int]]:
    """tshark's Kafka requests (client port, API key, version, correlation id)."""
    fields = ["tcp.srcport", "tcp.dstport", "kafka.api_key", "kafka.api_version", "kafka.correlation_id"]
    command = [
        "tshark",
        "-r",
        str(pcap),
        "-d",
        f"tcp.port=={port},kafka",
        "-Y",
        f"kafka && tcp.dstport=={port}",
    ]
    command += ["-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]
    done = subprocess.run(
        command + [x for f in fields for x in ("-e", f)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    found: Counter[tuple[int, int, int, int]] = Counter()
    for line in done.stdout.splitlines():
        src, _, keys, versions, correlations = line.split("\t")
        # One segment may complete several requests: the lists align (every request header has all three).
        for key, version, cid in zip(
            keys.split(","), versions.split(","), correlations.split(","), strict=True
        ):
            found[(int(src), int(key), int(version), int(cid))] += 1
    return found


def test_two_workers_commit_every_period_while_clients_run_and_write_one_pcap_per_period(
    tmp_path: Path,
) -> None:
    out, pcap, err = tmp_path / "live", tmp_path / "live.pcap", tmp_path / "capture.err"
    with start_broker() as broker:
        create_topics(broker.bootstrap, {TOPIC: PARTITIONS})
        # The broker's node id as librdkafka decodes its Metadata (asked before the capture starts).
        (node_id,) = admin_node_ids(broker.bootstrap)
        proc = start_capture(out, broker.port, pcap, err)
        try:
            acked = produce_acknowledged(broker.bootstrap)
            assert sum(acked.values()) == RECORDS and len(acked) == PARTITIONS
            # Both workers' periods are committed while the capture runs: the records show up.
            wait_for_live_rows(out, proc, acked)
            assert ds.dataset(out / "capture_stats").count_rows() >= 2  # a period of each worker
            seen, _ = consume_with_confluent(
                broker.bootstrap, [TOPIC], "periods-group", RECORDS, timeout_s=60
            )
            assert seen == RECORDS
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                stdout, _ = proc.communicate(timeout=CAPTURE_STOP_TIMEOUT_S)
            finally:
                stop_process(proc, signal.SIGKILL)
    message = err.read_text(errors="replace")
    assert "Traceback" not in message and "kwsniff: error" not in message, message
    assert proc.returncode == 0, message  # capture stopped by Ctrl-C after committing: docs/datasets.md
    summary = stdout.decode()

    # Every acknowledged record, per partition, after the stop.
    assert produced(out) == acked
    # The summary's periods are capture_stats' periods, each with both workers' rows.
    periods = int(re.search(r"(\d+) rotation periods", summary).group(1))  # type: ignore[union-attr]
    stats = ds.dataset(out / "capture_stats").to_table().to_pylist()
    starts = Counter(r["period_start"] for r in stats)
    assert len(starts) == periods >= 2, (starts, summary)
    assert set(Counter(r["worker"] for r in stats)) == {0, 1}
    assert all(n <= 2 for n in starts.values()) and sum(starts.values()) >= 2 * periods - 1
    # Every row of both workers was committed, and nothing but the dataset is in or beside OUT.
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert not [p for p in out.rglob(".*")]

    # One pcap per period, named as a Wireshark file set, read back as one capture.
    pieces = sorted(tmp_path.glob("live_*.pcap"))
    assert [re.fullmatch(r"live_(\d{5})_\d{14}\.pcap", p.name) is not None for p in pieces] == [
        True
    ] * periods
    assert [int(p.name.split("_")[1]) for p in pieces] == list(range(1, periods + 1))
    # Every packet either worker decoded is in the set (counted by a walk of the record headers).
    assert sum(pcap_packet_count(p) for p in pieces) == sum(r["packets"] for r in stats) > 0
    again = tmp_path / "again"
    read = subprocess.run(
        [sys.executable, "-m", "kwsniff", "read", "--continuous", *map(str, pieces), "--out", str(again)]
        + ["-p", str(broker.port)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert read.returncode == 0, read.stderr
    assert "pieces in time order" in read.stdout
    assert ds.dataset(again / "captures").count_rows() == 1
    live_requests = requests_by_ports(out)
    # Which broker answered (docs/tables.md): every row of either worker names the broker's node id,
    # whichever worker decoded the Metadata that named it (the workers pass node ids on).
    for table in ("requests", "partitions", "groups"):
        got = Counter(r["broker_id"] for r in ds.dataset(out / table).to_table().to_pylist())
        assert set(got) == {node_id}, (table, got)
    assert requests_by_ports(again) == live_requests
    answered = ds.dataset(out / "requests").to_table().filter(ds.field("ts_response").is_valid())
    assert Counter(answered.column("api_name").to_pylist())["Produce"] >= 1
    assert {"Fetch", "JoinGroup", "SyncGroup"} <= set(answered.column("api_name").to_pylist())

    # tshark reads the set (made one file by mergecap): the same requests.
    merged = tmp_path / "merged.pcap"
    done = subprocess.run(
        ["mergecap", "-w", str(merged), *map(str, pieces)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    ports = {c["conn_id"]: c["client_port"] for c in ds.dataset(out / "connections").to_table().to_pylist()}
    ours = Counter(
        (ports[r["conn_id"]], r["api_key"], r["api_version"], r["correlation_id"])
        for r in ds.dataset(out / "requests").to_table().to_pylist()
    )
    assert tshark_requests(merged, broker.port) == ours


class SteadyProducers:
    """One confluent-kafka producer per partition producing without pause in a thread of its own
    until :meth:`stop`: load for the capture while it rotates; the records acknowledged."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        import threading

        self.acked: Counter[tuple[str, int]] = Counter()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(bootstrap, topic, p), daemon=True)
            for p in range(partitions)
        ]
        for thread in self._threads:
            thread.start()

    def _run(self, bootstrap: str, topic: str, partition: int) -> None:
        from confluent_kafka import Producer

        def delivered(err: object, msg: Any) -> None:
            if err is None:
                self.acked[(msg.topic(), msg.partition())] += 1

        config = {"bootstrap.servers": bootstrap, "client.id": f"steady-{partition}", "linger.ms": 2}
        producer = Producer(config)
        i = 0
        while not self._stop.is_set():
            producer.produce(topic, value=b"steady %d" % i, partition=partition, on_delivery=delivered)
            producer.poll(0)
            i += 1
            if i % 20 == 0:  # a batch of 20 at a time, paced: load, not a flood
                producer.flush(30)
                self._stop.wait(0.01)
        assert producer.flush(30) == 0

    def stop(self) -> Counter[tuple[str, int]]:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        return self.acked


def committed_periods(out: Path) -> int:
    if not (out / "capture_stats").is_dir():
        return 0
    return len({r["period_start"] for r in ds.dataset(out / "capture_stats").to_table().to_pylist()})


def test_two_workers_file_every_packet_in_the_period_of_its_own_time_over_many_short_periods(
    tmp_path: Path,
) -> None:
    """Under steady load, one-second periods: the period files never overlap, each is cut at a
    point of the rotation grid (start + k seconds) that its name says, and `read --continuous`
    reads the set as the live tables hold it. (The workers used to apply a rotation after the batch
    in hand, leaving packets past the boundary in the earlier file: `read --continuous` refused.)"""
    out, pcap, err = tmp_path / "live", tmp_path / "ring.pcap", tmp_path / "capture.err"
    periods_wanted = 15
    with start_broker() as broker:
        create_topics(broker.bootstrap, {TOPIC: PARTITIONS})
        proc = start_capture(out, broker.port, pcap, err, rotate_s=1.0)
        try:
            load = SteadyProducers(broker.bootstrap, TOPIC, PARTITIONS)
            try:
                deadline = time.monotonic() + LIVE_TIMEOUT_S
                while committed_periods(out) < periods_wanted and time.monotonic() < deadline:
                    assert proc.poll() is None, err.read_text(errors="replace")
                    time.sleep(POLL_S)
            finally:
                acked = load.stop()
            assert committed_periods(out) >= periods_wanted
            wait_for_live_rows(out, proc, acked)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                stdout, _ = proc.communicate(timeout=CAPTURE_STOP_TIMEOUT_S)
            finally:
                stop_process(proc, signal.SIGKILL)
    message = err.read_text(errors="replace")
    assert proc.returncode == 0 and "kwsniff: error" not in message, message
    assert produced(out) == acked and sum(acked.values()) > 0

    stats = ds.dataset(out / "capture_stats").to_table().to_pylist()
    # The first period's start (the grid's origin), in microseconds.
    started_us = min(
        ds.dataset(out / "capture_stats").to_table().column("period_start").cast("int64").to_pylist()
    )
    pieces = sorted(tmp_path.glob("ring_*.pcap"))
    assert len(pieces) >= periods_wanted
    spans = []  # (piece, first, last) of the pieces holding packets (the last may hold none)
    for piece in pieces:
        times = [ts for ts, _ in dpkt_packets(piece)[1]]
        assert times == sorted(times)
        if times:
            spans.append((piece, times[0], times[-1]))
    assert len(spans) >= periods_wanted and spans[0][1] >= started_us
    for (piece, _, last), (after, first, _) in zip(spans, spans[1:], strict=False):
        # A point of the grid lies between the piece's last packet and the next one's first (a late
        # rotation may skip one: docs/live-capture.md), and the next piece is named after it. The
        # grid's points in packet time are within a microsecond of started_us + k * 1 s.
        cuts = range(started_us + ((last - started_us) // 1_000_000) * 1_000_000, first + 2, 1_000_000)
        number = int(after.name.split("_")[1])
        named = [c for c in cuts if last <= c <= first + 1 and period_path(pcap, number, c / 1e6) == after]
        assert named, (piece.name, after.name, last, first)
    # Every packet either worker decoded, once.
    assert sum(pcap_packet_count(p) for p in pieces) == sum(r["packets"] for r in stats)
    again = tmp_path / "again"
    read = subprocess.run(
        [sys.executable, "-m", "kwsniff", "read", "--continuous", *map(str, pieces), "--out", str(again)]
        + ["-p", str(broker.port)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert read.returncode == 0, read.stderr
    assert "pieces in time order" in read.stdout, read.stdout
    assert requests_by_ports(again) == requests_by_ports(out)
    # `spark --continuous` reads the set as one series too (it used to fail it: overlapping pieces).
    on_spark = tmp_path / "on-spark"
    spark = subprocess.run(
        [sys.executable, "-m", "kwsniff", "spark", "--continuous", *map(str, pieces), "--out", str(on_spark)]
        + ["--master", "local[1]", "-p", str(broker.port)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert spark.returncode == 0, spark.stderr[-2000:]
    captures = ds.dataset(on_spark / "captures", partitioning="hive").to_table().to_pylist()
    assert [(c["status"], c["reason"]) for c in captures] == [("ok", None)]
    spark_requests = ds.dataset(on_spark / "requests", partitioning="hive").count_rows()
    assert spark_requests == ds.dataset(out / "requests").count_rows()


# --- the parts, on packets the tests make ---------------------------------------------------------


def dpkt_packets(path: Path) -> tuple[int, list[tuple[int, bytes]]]:
    """(link type, [(ts_us, data)]) of a pcap, read by dpkt."""
    import dpkt

    with path.open("rb") as f:
        reader = dpkt.pcap.Reader(f)
        return reader.datalink(), [(round(ts * 1_000_000), bytes(data)) for ts, data in reader]


def test_a_workers_period_files_split_at_the_boundary_by_packet_time(tmp_path: Path) -> None:
    """A packet captured before the boundary but decoded after the rotation (it waited in the queue)
    goes to the earlier period, whose file stays open until the next rotation."""
    writer = PeriodPcapWriter(tmp_path / "spool", "w1", linktype=1, snaplen=65535)
    writer.write([(9_000_000, b"a"), (9_500_000, b"b")])
    writer.rotate(10.0)
    assert writer.closed == []  # period 1 still takes late packets
    writer.write([(9_900_000, b"late"), (10_000_000, b"c"), (10_200_000, b"d")])
    writer.write([(10_300_000, b"e")])
    writer.rotate(11.0)
    assert writer.closed == [(1, tmp_path / "spool" / "w1-000001.pcap")]
    writer.write([(10_900_000, b"late2"), (11_100_000, b"f")])
    writer.close()
    assert [p for p, _ in writer.closed] == [1, 2, 3]
    files = [dpkt_packets(path) for _, path in writer.closed]
    assert files == [
        (1, [(9_000_000, b"a"), (9_500_000, b"b"), (9_900_000, b"late")]),
        (1, [(10_000_000, b"c"), (10_200_000, b"d"), (10_300_000, b"e"), (10_900_000, b"late2")]),
        (1, [(11_100_000, b"f")]),
    ]


def test_a_packet_past_the_announced_end_goes_to_the_next_period_before_the_rotation_arrives(
    tmp_path: Path,
) -> None:
    """The coordinator announces each period's end a period ahead: a packet captured after it but
    decoded before the worker hears of the rotation is already in the next period's file; one older
    than every open period (a worker a period behind) goes to the oldest open file, counted late."""
    writer = PeriodPcapWriter(tmp_path / "spool", "w0", linktype=1, snaplen=65535, period=4, end_s=10.0)
    writer.write([(9_800_000, b"a"), (10_000_000, b"b"), (10_100_000, b"c")])
    writer.write([(10_200_000, b"d")])
    writer.rotate(10.0, 11.0)  # heard late: b, c and d are already where they belong
    writer.write([(9_900_000, b"late"), (11_000_000, b"e")])
    writer.rotate(11.0, 12.0)  # period 4 closes
    writer.write([(9_950_000, b"too late"), (10_500_000, b"g"), (11_500_000, b"f"), (12_000_000, b"h")])
    writer.close()
    assert [p for p, _ in writer.closed] == [4, 5, 6, 7]
    assert writer.late == 1
    assert [dpkt_packets(path)[1] for _, path in writer.closed] == [
        [(9_800_000, b"a"), (9_900_000, b"late")],
        [
            (10_000_000, b"b"),
            (10_100_000, b"c"),
            (10_200_000, b"d"),
            (9_950_000, b"too late"),
            (10_500_000, b"g"),
        ],
        [(11_000_000, b"e"), (11_500_000, b"f")],
        [(12_000_000, b"h")],
    ]


def test_a_periods_worker_files_merge_into_one_in_time_order(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    inputs = []
    for worker, times in enumerate(([1, 4, 5, 9], [2, 3, 6, 7, 8], [])):
        writer = PeriodPcapWriter(spool, f"w{worker}", linktype=113, snaplen=262144)
        writer.write([(t * 1000, b"w%d-%d" % (worker, t)) for t in times] if times else [])
        writer.close()
        inputs.append(writer.closed[0][1])
    target = period_path(tmp_path / "live.pcap", 3, 1_767_225_600.5)
    assert target.name == "live_00003_20260101000000.pcap"
    assert merge_period(inputs, target) == 9
    linktype, packets = dpkt_packets(target)
    assert linktype == 113
    assert [ts for ts, _ in packets] == [t * 1000 for t in range(1, 10)]
    assert packets[0] == (1000, b"w0-1") and packets[1] == (2000, b"w1-2")
    assert sorted(tmp_path.iterdir()) == [target, spool] and list(spool.iterdir()) == []


def test_a_killed_workers_empty_period_file_is_left_out_of_the_merge(tmp_path: Path) -> None:
    """A worker SIGKILLed before its period file had a header leaves an empty file: the merge
    leaves it out (removed) instead of failing the capture (CI: `... w0-000003.pcap: empty file`,
    exit 1); a period of empty files only gets no file."""
    spool = tmp_path / "spool"
    writer = PeriodPcapWriter(spool, "w1", linktype=113, snaplen=262144)
    writer.write([(1000, b"a"), (2000, b"b")])
    writer.close()
    killed = spool / "w0-000003.pcap"
    killed.write_bytes(b"")
    target = period_path(tmp_path / "live.pcap", 3, 1_767_225_600.5)
    assert merge_period([killed, writer.closed[0][1]], target) == 2
    assert dpkt_packets(target) == (113, [(1000, b"a"), (2000, b"b")])
    assert list(spool.iterdir()) == []
    alone = spool / "w0-000004.pcap"
    alone.write_bytes(b"")
    later = period_path(tmp_path / "live.pcap", 4, 1_767_225_601.5)
    assert merge_period([alone], later) is None
    assert not later.exists() and not alone.exists()


def test_rotations_keep_to_the_grid_and_a_late_one_is_not_followed_by_a_short_period() -> None:
    assert next_rotation(105.0, 105.1, 5.0) == 110.0
    assert next_rotation(105.0, 112.0, 5.0) == 115.0  # asked 7 s late: 110 is passed
    assert next_rotation(105.0, 113.0, 5.0) == 120.0  # 115 would be a 2 s period
    assert next_rotation(105.0, 105.0 + 86_400 * 365, 5.0) == 105.0 + 86_400 * 365 + 5.0


def test_a_write_pcap_folder_that_cannot_be_written_is_one_error_before_the_workers_start(
    tmp_path: Path,
) -> None:
    out = tmp_path / "live"
    done = subprocess.run(
        [sys.executable, "-m", "kwsniff", "capture", "lo", "--out", str(out), "--workers", "2"]
        + ["--write-pcap", str(tmp_path / "missing" / "live.pcap"), "--duration", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert (
        done.stderr
        == f"kwsniff: error: --write-pcap {tmp_path / 'missing' / 'live.pcap'}: No such file or directory\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no --out, no spool, no stage
