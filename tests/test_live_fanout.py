"""`kwsniff capture --workers 2` on a veth in a network namespace this test creates, fed by `tcpreplay`
of a real MTU 1500 Kafka capture (librdkafka and kafka-python producers and tailing consumers, made
by tools/make_capture.py), gives the tables `kwsniff read` gives of the same file, row for row:
the kernel's fanout hash kept each connection, both directions, in one worker."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
import tunnelwire as tw
from scapy.layers.inet import TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.utils import PcapWriter

from kwsniff.capture import open_capture
from kwsniff.capture.live import CaptureCounters
from kwsniff.pipeline.live_worker import RowRelay, WorkerDecoder
from kwsniff.pipeline.run_live import LiveOptions
from kwsniff.pipeline.session import Session, SessionOptions
from kwsniff.rows import ListSink
from kwsniff.rows.brokers import BrokerDirectory, BrokerIds
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.view.stats import LiveStats, StatsSink
from tests.realparts import (
    CAPTURE_STOP_TIMEOUT_S,
    pcap_packet_count,
    replay_namespace,
    split_loopback,
    start_kwsniff_capture,
    stop_process,
    tcpreplay,
    wait_for_captured_packets,
)

ROOT = Path(__file__).resolve().parent.parent
REPLAY_PPS = 5000
METRICS_PORT = 9464  # the capture's --metrics-port, inside the test's own network namespace  # far below what one worker keeps up with: no drop may explain a difference
# Columns that differ by nature between a replay and the file: the capture's name, times (the
# replay's own pace) and conn_id (numbered per worker; rows are matched by their connection's
# addresses instead).
UNCOMPARED = ("capture", "conn_id", "ts_request", "ts_response", "latency_ms")


@pytest.fixture(scope="module")
def mtu1500_capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A ~3 MB real capture of the bench's MTU 1500 shape (about 12 connections and 80
    requests), and its broker port."""
    path = tmp_path_factory.mktemp("mtu1500") / "tailing.pcap"
    made = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "make_capture.py"), str(path), "--workload", "bench-tailing"]
        + ["--mb", "3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    summary = json.loads(made.stdout.strip().splitlines()[-1])
    assert summary["largest_frame"] <= 1514
    return path, int(summary["bootstrap"].rsplit(":", 1)[1])


def rows(out: Path, table: str) -> list[str]:
    """The table's rows, each with its connection's addresses in place of the uncompared columns,
    sorted: equal lists are equal tables whatever the file layout and numbering."""
    flows = {
        c["conn_id"]: (c["client_ip"], c["client_port"], c["broker_ip"], c["broker_port"])
        for c in ds.dataset(out / "connections").to_table().to_pylist()
    }
    found = []
    for row in ds.dataset(out / table).to_table().to_pylist():
        kept: dict[str, Any] = {k: v for k, v in row.items() if k not in UNCOMPARED}
        kept["flow"] = flows[row["conn_id"]]
        found.append(repr(sorted(kept.items())))
    return sorted(found)


def replay_with_two_workers(
    pcap: Path, port: int, tmp_path: Path, *, replayed: Path | None = None, loop: int = 1
) -> tuple[Path, int]:
    """`kwsniff read` of ``pcap`` into tmp_path/read, and its replay (or that of ``replayed``, ``loop``
    times with --unique-ip when more than once) captured by `kwsniff capture --workers 2` into
    tmp_path/live; and the packets tcpreplay sent."""
    read = subprocess.run(
        [sys.executable, "-m", "kwsniff", "read", str(pcap), "--out", str(tmp_path / "read"), "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert read.returncode == 0, read.stderr
    live = tmp_path / "live"
    args = ["--out", str(live), "-p", str(port), "--workers", "2", "--rotate-seconds", "0.5"]
    args += ["--metrics-port", str(METRICS_PORT)]
    with replay_namespace("fanout") as net:
        proc = start_kwsniff_capture(net, args, tmp_path / "capture.err")
        try:
            sent = tcpreplay(net, replayed or pcap, pps=REPLAY_PPS, loop=loop, unique_ip=loop > 1)
            wait_for_captured_packets(METRICS_PORT, sent.packets, net.netns)
        finally:
            code = stop_process(proc, timeout_s=CAPTURE_STOP_TIMEOUT_S)  # type: ignore[arg-type]
    err = (tmp_path / "capture.err").read_text()
    assert code == 0, err
    assert "Traceback" not in err
    stdout = proc.stdout.read().decode() if proc.stdout else ""
    assert "by 2 workers" in stdout, stdout
    return live, sent.packets


def packets_per_worker(live: Path) -> Counter[int]:
    per_worker = Counter[int]()
    for r in ds.dataset(live / "capture_stats").to_table().to_pylist():
        per_worker[r["worker"]] += r["packets"]
    return per_worker


def test_two_workers_on_a_replayed_mtu1500_capture_give_the_tables_of_read(
    mtu1500_capture: tuple[Path, int], tmp_path: Path
) -> None:
    pcap, port = mtu1500_capture
    live, sent = replay_with_two_workers(pcap, port, tmp_path)

    for table in ("requests", "partitions", "errors", "groups"):
        assert rows(live, table) == rows(tmp_path / "read", table), table
    assert len(rows(live, "requests")) >= 40  # the workload's requests, answered and not
    conns = ds.dataset(live / "connections").to_table().to_pylist()
    assert len(conns) == len({c["conn_id"] for c in conns})  # no conn_id given twice
    assert len(conns) == ds.dataset(tmp_path / "read" / "connections").count_rows()

    stats = ds.dataset(live / "capture_stats").to_table().to_pylist()
    per_worker = packets_per_worker(live)
    assert sum(per_worker.values()) == sent == pcap_packet_count(pcap)
    assert sorted(per_worker) == [0, 1] and min(per_worker.values()) > 0  # both took a share
    assert sum(r["kernel_drops"] + r["queue_drops"] for r in stats) == 0
    # Each worker's periods are back to back from the same start, at the coordinator's rotations
    # (a worker stopped before it saw the last one has one period fewer).
    bounds = {
        w: sorted((r["period_start"], r["period_end"]) for r in stats if r["worker"] == w) for w in (0, 1)
    }
    for periods in bounds.values():
        assert all(a[1] == b[0] for a, b in zip(periods, periods[1:], strict=False)), periods
    assert bounds[0][0][0] == bounds[1][0][0]
    ends = [{end for _, end in periods[:-1]} for periods in bounds.values()]
    assert len(ends[0] ^ ends[1]) <= 1 and len(bounds[0]) >= 2, bounds  # at least one rotation


def test_a_split_capture_replayed_with_unique_ip_gives_whole_connections_every_loop(
    mtu1500_capture: tuple[Path, int], tmp_path: Path
) -> None:
    """bench_live's replay: a loopback capture with its clients and broker moved to two addresses
    (split_loopback), looped by tcpreplay with --unique-ip, is each loop the capture's connections
    again, every one closed and paired (left on one address, every connection of a later loop would
    be two one-sided ones that never close)."""
    pcap, port = mtu1500_capture
    split = tmp_path / "split.pcap"
    assert split_loopback(pcap, split, port) == pcap_packet_count(pcap)
    loops = 3
    live, sent = replay_with_two_workers(pcap, port, tmp_path, replayed=split, loop=loops)
    assert sent == loops * pcap_packet_count(pcap)

    def table(out: Path, name: str) -> list[dict[str, Any]]:
        return ds.dataset(out / name).to_table().to_pylist()

    read, replayed = table(tmp_path / "read", "connections"), table(live, "connections")
    assert len(replayed) == loops * len(read)
    assert len({(c["client_ip"], c["broker_ip"]) for c in replayed}) == loops  # one pair per loop

    def counted(rows: list[dict[str, Any]], *keys: str, times: int = 1) -> Counter[tuple[Any, ...]]:
        return Counter({k: n * times for k, n in Counter(tuple(r[k] for k in keys) for r in rows).items()})

    assert counted(replayed, "kafka", "expired") == counted(read, "kafka", "expired", times=loops)
    assert counted(replayed, "kafka", "expired")[(True, None)] == loops * len(read)  # all closed, Kafka
    requests = ("api_name", "error_code")
    assert counted(table(live, "requests"), *requests) == counted(
        table(tmp_path / "read", "requests"), *requests, times=loops
    )
    stats = table(live, "capture_stats")
    assert sum(r["kernel_drops"] + r["queue_drops"] for r in stats) == 0


def test_two_workers_spread_ipv6_connections_by_ports_and_keep_each_whole(tmp_path: Path) -> None:
    """The sample's 7 connections over IPv6, all between fd00::1 and itself: only their ports tell
    them apart, and the steering program's sum of addresses and ports, read at IPv6's offsets,
    puts one of them on one worker and six on the other."""
    sample = ROOT / "tests" / "data" / "captures" / "kafka_python.pcap"
    pcap = tmp_path / "ipv6.pcap"
    with PcapWriter(str(pcap), linktype=1, sync=False) as out:
        for pkt in tw.resegment(sample):
            tcp = pkt[TCP].copy()
            tcp.chksum = None
            frame = Ether(**tw.INNER_MAC) / IPv6(src="fd00::1", dst="fd00::1") / tcp
            frame.time = pkt.time
            out.write(frame)
    live, sent = replay_with_two_workers(pcap, 19103, tmp_path)
    for table in ("requests", "partitions", "errors"):
        assert rows(live, table) == rows(tmp_path / "read", table), table
    assert len(rows(live, "requests")) == 46  # as `read` of the IPv4 original
    per_worker = packets_per_worker(live)
    assert sum(per_worker.values()) == sent == pcap_packet_count(pcap)
    assert len(per_worker) == 2 and min(per_worker.values()) > 0


class ReplayedBatches:
    """A capture thread's side of the queue, filled from a capture file."""

    def __init__(self, path: Path) -> None:
        self.queue: queue.Queue[Any] = queue.Queue()
        with open_capture(path) as reader:
            read = list(reader.packets())
        self.linktype = read[0][1]
        self.packets = [(ts, data) for ts, _, data in read]
        for i in range(0, len(self.packets), 50):
            self.queue.put((self.linktype, self.packets[i : i + 50]))
        self.queue.put(None)

    def snapshot(self) -> CaptureCounters:
        return CaptureCounters(captured=len(self.packets))


def worker_decoder(
    tmp_path: Path, capture: Any, options: SessionOptions, events: queue.Queue[Any], control: queue.Queue[Any]
) -> WorkerDecoder:
    """Worker 1 of a live capture fed ``capture``'s packets, talking to a coordinator through
    ``events`` and ``control`` (the test plays the coordinator)."""
    tables = (*(t for t in DEFAULT_TABLES if t != "captures"), "capture_stats")
    live = LiveOptions(tmp_path / "spool", "fake", tables, float("inf"), 0.0, worker=1)
    return WorkerDecoder(capture, options, live, RowRelay(), index=1, events=events, control=control)


def replayed(sample: Path, options: SessionOptions, sink: Any = None) -> tuple[ReplayedBatches, Session]:
    """``sample``'s packets as a capture thread queues them, and a session that decoded them all."""
    capture = ReplayedBatches(sample)
    reference = Session("fake", sink if sink is not None else ListSink(), options)
    for ts, data in capture.packets:
        reference.packet(ts, capture.linktype, data)
    reference.finish()
    return capture, reference


def worker_run(
    tmp_path: Path, capture: Any, options: SessionOptions, *messages: tuple[Any, ...]
) -> tuple[WorkerDecoder, list[tuple[Any, ...]]]:
    """Worker 1 fed ``capture`` after the coordinator's ``messages`` and its ``finish``: the
    decoder, run to its end, and every message it sent (its last stats among them)."""
    events: queue.Queue[Any] = queue.Queue()
    control: queue.Queue[Any] = queue.Queue()
    for message in (*messages, ("finish",)):
        control.put(message)
    decoder = worker_decoder(tmp_path, capture, options, events, control)
    decoder.start()
    decoder.join(60)
    assert decoder.error is None
    decoder.send_stats()
    return decoder, [events.get_nowait() for _ in range(events.qsize())]


def test_a_worker_relays_the_views_rows_and_shares_the_brokers_it_learns(tmp_path: Path) -> None:
    """What a worker sends its coordinator gives the live view the totals a single process has, and
    the brokers it learned (no --broker-port matches: learned from the handshakes) go out once,
    while those another worker learned are trusted here without being sent back."""
    sample = ROOT / "tests" / "data" / "captures" / "kafka_python.pcap"
    options = SessionOptions(broker_ports=frozenset({1}))
    single = LiveStats()
    capture, reference = replayed(sample, options, StatsSink(ListSink(), single))
    assert reference.brokers  # the sample's broker, learned

    elsewhere = (bytes([10, 0, 0, 9]), 19999)
    decoder, sent = worker_run(tmp_path, capture, options, ("brokers", [elsewhere]))
    stats = [m for m in sent if m[0] == "stats"]
    learned = [e for m in stats for e in m[5]]
    assert sorted(learned) == sorted(reference.brokers)  # each once, the shared one not echoed
    assert elsewhere in decoder.session.brokers
    relayed = LiveStats()
    for m in stats:
        for table, row in m[4]:
            relayed.row(table, row)
    assert relayed.totals == single.totals
    assert sum(relayed.totals.requests.values()) == sum(reference.rows.status.values()) > 0


def test_a_worker_shares_the_node_ids_it_learns_and_names_held_rows_with_those_of_others(
    tmp_path: Path,
) -> None:
    """Node ids of broker addresses (docs/tables.md "Which broker answered") travel like learned
    brokers: those a worker learned go out once, with its stats; those another worker learned are
    taken here and name the rows held for them."""
    options = SessionOptions(broker_ports=frozenset({19103}))
    capture, reference = replayed(ROOT / "tests" / "data" / "captures" / "kafka_python.pcap", options)
    sample_ids = reference.rows.node_ids.directory.learned
    assert list(sample_ids) == [("127.0.0.1", 19103)]  # the sample's one broker, named by its Metadata

    elsewhere = ("10.0.0.9", 19999)
    decoder, sent = worker_run(tmp_path, capture, options, ("node_ids", [(elsewhere, 7)]))
    shared = [pair for m in sent if m[0] == "stats" for pair in m[6]]
    assert shared == list(sample_ids.items())  # once, and the id taken from another worker not echoed
    assert decoder.session.rows.node_ids.directory.learned[elsewhere] == 7

    # A row held for an address no response named yet is written once another worker's id arrives.
    sink = ListSink()
    held = BrokerIds(sink, BrokerDirectory())
    held.add("requests", {"broker_ip": elsewhere[0], "broker_port": elsewhere[1], "broker_id": None})
    assert sink.tables["requests"] == []
    held.share([(elsewhere, 7)])
    assert [r["broker_id"] for r in sink.tables["requests"]] == [7]


def test_a_worker_shares_the_topic_names_it_learns_and_takes_those_of_others(tmp_path: Path) -> None:
    """Topic ids' names travel like node ids: a consumer's Fetch by id on a connection of one worker
    is named by a Metadata another worker decoded. Those a worker learned go out once; another's are
    learned (rows held for them are then written named: TopicNames) and not sent back."""
    options = SessionOptions(broker_ports=frozenset({19103}))
    capture, reference = replayed(ROOT / "tests" / "data" / "captures" / "kafka_python.pcap", options)
    own = dict(reference.rows.topics.names)
    assert sorted(own.values()) == ["kp-events", "kp-orders", "kp-temp"]  # its Metadata named them

    elsewhere = ("01a2043c-0000-7000-8000-000000000009", "orders-elsewhere")
    decoder, sent = worker_run(tmp_path, capture, options, ("topic_names", [elsewhere]))
    shared = [pair for m in sent if m[0] == "stats" for pair in m[7]]
    assert sorted(shared) == sorted(own.items())  # once each, the other worker's not echoed
    assert decoder.session.rows.topics.names[elsewhere[0]] == elsewhere[1]


def test_a_drained_worker_takes_the_node_ids_the_coordinator_sends_before_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped worker, every packet decoded, sends what it learned and says it is drained; ids the
    coordinator relays then are taken before its session ends (and writes the rows still held)."""
    monkeypatch.setattr("kwsniff.pipeline.live_worker.FINISH_WAIT_S", 600.0)  # finish alone ends the wait
    sample = ROOT / "tests" / "data" / "captures" / "kafka_python.pcap"
    options = SessionOptions(broker_ports=frozenset({19103}))
    events: queue.Queue[Any] = queue.Queue()
    control: queue.Queue[Any] = queue.Queue()
    decoder = worker_decoder(tmp_path, ReplayedBatches(sample), options, events, control)
    decoder.start()
    sent = []
    for _ in range(10_000):  # bounded: the sample's stats are a few messages
        message = events.get(timeout=60)
        sent.append(message)
        if message[0] == "drained":
            break
    assert sent[-1] == ("drained", 1)
    # Its own ids went out before it said so: the sample's broker, named by its Metadata.
    assert [pair for m in sent if m[0] == "stats" for pair in m[6]] == [(("127.0.0.1", 19103), 111)]
    assert decoder.running  # waiting for `finish`
    elsewhere = ("10.0.0.9", 19999)
    control.put(("node_ids", [(elsewhere, 7)]))
    control.put(("finish",))
    decoder.join(60)
    assert not decoder.running and decoder.error is None
    assert decoder.session.rows.node_ids.directory.learned[elsewhere] == 7


def test_the_coordinator_tells_workers_to_finish_once_every_one_is_drained(tmp_path: Path) -> None:
    """`finish` goes to each worker once all not done are drained, after the ids the others sent."""
    from types import SimpleNamespace

    from kwsniff.pipeline.run_workers import WorkerPool

    specs = [SimpleNamespace(index=i, run=SimpleNamespace(write_pcap=None)) for i in (0, 1)]
    pool = WorkerPool(specs, None, float("inf"), LiveStats())  # type: ignore[arg-type]
    ids = [(("10.0.0.1", 9092), 3)]

    def told(index: int) -> list[tuple[Any, ...]]:
        out = []
        with contextlib.suppress(queue.Empty):
            for _ in range(100):
                out.append(pool.controls[index].get(timeout=1))
        return out

    names = [("01a2043c-0000-7000-8000-000000000001", "orders")]
    pool._handle(("stats", 0, CaptureCounters(), 0, [], [], ids, names))
    pool._handle(("drained", 0))
    # worker 1 still runs: nobody finishes
    assert told(0) == [] and told(1) == [("node_ids", ids), ("topic_names", names)]
    pool._handle(("stats", 1, CaptureCounters(), 0, [], [], [], []))
    pool._handle(("drained", 1))
    assert told(0) == [("finish",)] and told(1) == [("finish",)]
    pool._handle(("drained", 1))  # said again (never, but): not told twice
    assert told(1) == []
