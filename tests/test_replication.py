"""The broker's-eye report (docs/report.md "Brokers and replication"): a capture of crafted broker-host
traffic, every frame encoded by kio (independent of kwsniff's encoder; record batches by kafka-python),
sent over real loopback TCP sockets to two in-test brokers answering with kio frames, captured by
tcpdump. Producers, a consumer, three followers (Fetch v4, v11, v12, v13 by topic id, v15-v18 with
replica_state) and a KRaft metadata-log fetcher. `brokers` and `replication` must equal what the test
encoded, and their times what dpkt reads from the pcap (the request's last packet, the response's
first: each frame here is one packet)."""

from __future__ import annotations

import importlib
import math
import shutil
import socket
import struct
import threading
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dpkt
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeader1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeader2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeader0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeader1
from kio.static.primitive import i16, i32
from prometheus_client import generate_latest
from realparts import (
    consume_with_kafka_python,
    free_ports,
    produce_with_confluent,
    start_broker,
    tcpdump_capture,
)
from report_engines import answer_sections
from test_fetchers import build, encoded, read_frame

from kwsniff.capture.live import CaptureCounters
from kwsniff.cli import main
from kwsniff.pipeline.live_worker import RowRelay
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink
from kwsniff.sections.catalog import BY_NAME
from kwsniff.sections.engines import DuckEngine, Filters
from kwsniff.sections.run import answer
from kwsniff.view.metrics import Metrics
from kwsniff.view.replication import ReplicationTracker
from kwsniff.view.stats import LiveStats, Pending, StatsSink

PRODUCE, FETCH, METADATA = 0, 1, 3
ORDERS_ID = uuid.UUID("6b1d5c2e-0f4a-4d8e-9c3b-2a7e1f9d0c11")
METADATA_LOG_ID = uuid.UUID("00000000-0000-0000-0000-000000000001")
BATCH = 5  # records per produced batch

# Broker "a" leads orders 0-2; broker "b" is the KRaft controller. (broker, client id, replica id)
CLIENTS = {
    "admin-1": ("a", -1),
    "consumer-1": ("a", -1),
    "producer-1": ("a", -1),
    "broker-2-fetcher-0": ("a", 2),
    "broker-4-fetcher-0": ("a", 4),
    "broker-5-fetcher-0": ("a", 5),
    "raft-client-3": ("b", 3),
    "admin-2": ("b", -1),
}
# In the order sent, each answered before the next: (client, API, version, what). Fetch: topic ->
# {partition: (fetch offset, high watermark answered)}; Produce: (partition, base offset answered).
STEPS: list[tuple[str, int, int, Any]] = [
    ("admin-1", METADATA, 12, "orders"),
    # The first watermarks of orders 0, 1 and 2 (they date nothing: the log held them before).
    ("consumer-1", FETCH, 4, {"orders": {0: (100, 100), 1: (40, 50), 2: (20, 30)}}),
    ("producer-1", PRODUCE, 9, (0, 100)),  # offsets 100-104 appended now
    # Follower 2 lacks 100, held since the Produce just before: behind by that long, 0 records.
    ("broker-2-fetcher-0", FETCH, 4, {"orders": {0: (100, 100)}}),
    ("broker-2-fetcher-0", FETCH, 11, {"orders": {0: (105, 105)}}),  # caught up: 0 s
    ("producer-1", PRODUCE, 11, (0, 105)),  # offsets 105-109
    ("consumer-1", FETCH, 11, {"orders": {0: (105, 110), 1: (50, 60)}}),  # watermarks move: 110, 60
    ("broker-2-fetcher-0", FETCH, 12, {"orders": {0: (105, 110)}}),  # behind since the second Produce
    ("broker-2-fetcher-0", FETCH, 13, {"orders": {0: (110, 110)}}),  # by topic id; caught up
    # Follower 4 on orders 1: no Produce there; 40 was below the first watermark seen: unknown.
    ("broker-4-fetcher-0", FETCH, 15, {"orders": {1: (40, 60)}}),
    ("broker-4-fetcher-0", FETCH, 16, {"orders": {1: (55, 60)}}),  # behind since watermark 60
    ("broker-4-fetcher-0", FETCH, 17, {"orders": {1: (60, 60)}}),
    ("broker-4-fetcher-0", FETCH, 18, {"orders": {1: (58, 60)}}),  # behind since watermark 60 again
    ("consumer-1", FETCH, 12, {"orders": {0: (110, 110)}}),
    ("broker-5-fetcher-0", FETCH, 13, {"orders": {2: (20, 30)}}),  # below the first watermark: unknown
    ("consumer-1", FETCH, 13, {"orders": {2: (20, 30)}}),
    ("raft-client-3", FETCH, 4, {"__cluster_metadata": {0: (7, 9)}}),
    ("raft-client-3", FETCH, 12, {"__cluster_metadata": {0: (9, 9)}}),
    ("raft-client-3", FETCH, 13, {"__cluster_metadata": {0: (9, 9)}}),
    ("raft-client-3", FETCH, 15, {"__cluster_metadata": {0: (9, 9)}}),
    ("admin-2", METADATA, 12, "missing"),  # answered with UNKNOWN_TOPIC_OR_PARTITION
]


def records(timestamp_ms: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    for index in range(BATCH):
        builder.append(index, timestamp_ms + index, None, b"order-%d" % index, [])
    return bytes(builder.build())


def _fetch(version: int, replica_id: int, what: dict[str, dict[int, tuple[int, int]]]) -> tuple[Any, Any]:
    request_topics, response_topics = [], []
    for topic, parts in what.items():
        if version >= 13:
            named: dict[str, Any] = {
                "topic_id": METADATA_LOG_ID if topic == "__cluster_metadata" else ORDERS_ID
            }
        else:
            named = {"topic": topic}
        request_topics.append(
            {**named, "partitions": [
                {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                for p, (offset, _hwm) in parts.items()
            ]}
        )  # fmt: skip
        response_topics.append(
            {**named, "partitions": [
                {"partition_index": p, "high_watermark": hwm, "last_stable_offset": hwm}
                for p, (_offset, hwm) in parts.items()
            ]}
        )  # fmt: skip
    request: dict[str, Any] = {"max_wait": 500, "min_bytes": 1, "topics": request_topics}
    if version >= 15:
        if replica_id >= 0:
            request["replica_state"] = {"replica_id": replica_id, "replica_epoch": 1}
    else:
        request["replica_id"] = replica_id
    return request, {"responses": response_topics}


def _produce(partition: int, base_offset: int, batch: bytes) -> tuple[Any, Any]:
    request = {"acks": -1, "timeout": 30000, "topic_data": [
        {"name": "orders", "partition_data": [{"index": partition, "records": batch}]}
    ]}  # fmt: skip
    response = {"responses": [
        {"name": "orders", "partition_responses": [{"index": partition, "base_offset": base_offset}]}
    ]}  # fmt: skip
    return request, response


# The node ids the Metadata responses give the two brokers (by IP literal): `broker_id` on their rows.
NODE_IDS = {"a": 1, "b": 3}


def _metadata(topic: str, ports: dict[str, int]) -> tuple[Any, Any]:
    if topic == "missing":
        topics = [{"error_code": ErrorCode(3), "name": topic, "topic_id": uuid.UUID(int=0), "partitions": []}]
    else:
        topics = [
            {"name": topic, "topic_id": ORDERS_ID, "partitions": [
                {"partition_index": p, "leader_id": 1, "replica_nodes": [1, 2, 4, 5], "isr_nodes": [1, 2]}
                for p in range(3)
            ]}
        ]  # fmt: skip
    brokers = [{"node_id": NODE_IDS[b], "host": "127.0.0.1", "port": ports[b]} for b in ("a", "b")]
    return {}, {"cluster_id": "test", "controller_id": 3, "brokers": brokers, "topics": topics}


API_MODULES = {PRODUCE: ("produce", "Produce"), FETCH: ("fetch", "Fetch"), METADATA: ("metadata", "Metadata")}


def frames(step: tuple[str, int, int, Any], correlation: int, ports: dict[str, int]) -> tuple[bytes, bytes]:
    client_id, api, version, what = step
    module, name = API_MODULES[api]
    request_type = importlib.import_module(f"kio.schema.{module}.v{version}.request").__dict__[
        f"{name}Request"
    ]
    response_type = importlib.import_module(f"kio.schema.{module}.v{version}.response").__dict__[
        f"{name}Response"
    ]
    if api == FETCH:
        request, response = _fetch(version, CLIENTS[client_id][1], what)
    elif api == PRODUCE:
        partition, base_offset = what
        request, response = _produce(partition, base_offset, records(1_700_000_000_000 + correlation))
    else:
        request, response = _metadata(what, ports)
    flexible = request_type.__flexible__
    header = (RequestHeader2 if flexible else RequestHeader1)(
        request_api_key=i16(api), request_api_version=i16(version), correlation_id=i32(correlation),
        client_id=client_id,
    )  # fmt: skip
    reply = (ResponseHeader1 if flexible else ResponseHeader0)(correlation_id=i32(correlation))
    req = encoded(header) + encoded(build(request_type, request))
    resp = encoded(reply) + encoded(build(response_type, response))
    return struct.pack(">i", len(req)) + req, struct.pack(">i", len(resp)) + resp


def _answer(conn: socket.socket, answers: dict[bytes, bytes]) -> None:
    with conn:
        conn.settimeout(10)
        while True:
            try:
                frame = read_frame(conn)
            except (ConnectionError, TimeoutError):
                return
            conn.sendall(answers[frame])


@contextmanager
def brokers(ports: dict[str, int], answers: dict[bytes, bytes]) -> Iterator[None]:
    """Two listening brokers, each answering every connection it accepts in a thread of its own."""
    servers = {b: socket.create_server(("127.0.0.1", port)) for b, port in ports.items()}
    threads: list[threading.Thread] = []

    def accept(server: socket.socket, count: int) -> None:
        for _ in range(count):
            conn, _addr = server.accept()
            thread = threading.Thread(target=_answer, args=(conn, answers), daemon=True)
            thread.start()
            threads.append(thread)

    per_broker: dict[str, int] = defaultdict(int)
    for broker, _replica in CLIENTS.values():
        per_broker[broker] += 1
    acceptors = [
        threading.Thread(target=accept, args=(servers[b], per_broker[b]), daemon=True) for b in servers
    ]
    for server in servers.values():
        server.settimeout(10)
    for thread in acceptors:
        thread.start()
    try:
        yield
    finally:
        for thread in acceptors:
            thread.join(timeout=10)
        for thread in threads:
            thread.join(timeout=10)
        for server in servers.values():
            server.close()
        assert not any(t.is_alive() for t in acceptors + threads)


def packet_times(pcap: Path) -> dict[bytes, int]:
    """dpkt's reading of the capture: each TCP payload (here one whole frame) -> its time (µs)."""
    times: dict[bytes, int] = {}
    with pcap.open("rb") as f:
        reader = dpkt.pcap.Reader(f)
        assert reader.datalink() == dpkt.pcap.DLT_EN10MB
        for ts, frame in reader:
            tcp = dpkt.ethernet.Ethernet(frame).data.data
            if isinstance(tcp, dpkt.tcp.TCP) and tcp.data:
                assert bytes(tcp.data) not in times  # every frame differs (its correlation id)
                times[bytes(tcp.data)] = round(ts * 1_000_000)
    return times


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int], list[dict[str, Any]]]:
    """The tables, the brokers' ports, and per step what was sent with dpkt's times of its frames."""
    tmp = tmp_path_factory.mktemp("replication")
    ports = dict(zip(("a", "b"), free_ports(2), strict=True))
    pairs = [frames(step, correlation, ports) for correlation, step in enumerate(STEPS, start=1)]
    answers = dict(pairs)
    pcap = tmp / "broker-host.pcap"
    bpf = f"tcp port {ports['a']} or tcp port {ports['b']}"
    with tcpdump_capture(pcap, ports["a"], bpf=bpf), brokers(ports, answers):
        clients = {
            c: socket.create_connection(("127.0.0.1", ports[broker]), timeout=10)
            for c, (broker, _replica) in CLIENTS.items()
        }
        try:
            for step, (req, resp) in zip(STEPS, pairs, strict=True):
                clients[step[0]].sendall(req)
                assert read_frame(clients[step[0]]) == resp  # answered before the next is sent
        finally:
            for sock in clients.values():
                sock.close()
    times = packet_times(pcap)
    sent = [
        {"correlation": i, "client": s[0], "api": s[1], "version": s[2], "what": s[3], "request": req, "response": resp,
         "ts_request": times[req], "ts_response": times[resp]}
        for i, (s, (req, resp)) in enumerate(zip(STEPS, pairs, strict=True), start=1)
    ]  # fmt: skip
    out = tmp / "tables"
    done = CliRunner().invoke(main, ["read", "-q", str(pcap), "--out", str(out), "--overwrite"])
    assert done.exit_code == 0, done.output
    return out, ports, sent


def nearest_rank(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p * len(ordered))) - 1]


def latency_ms(step: dict[str, Any]) -> float:
    return (step["ts_response"] - step["ts_request"]) / 1000


def expected_brokers(ports: dict[str, int], sent: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Per broker and API, from what was sent and dpkt's times: docs/report.md's `brokers`."""
    names = {PRODUCE: "Produce", FETCH: "Fetch", METADATA: "Metadata"}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for step in sent:
        groups[(CLIENTS[step["client"]][0], names[step["api"]])].append(step)
    rows = []
    for (broker, api), steps in sorted(groups.items(), key=lambda kv: (ports[kv[0][0]], kv[0][1])):
        latencies = [latency_ms(s) for s in steps]
        replicas = [CLIENTS[s["client"]][1] >= 0 for s in steps]
        rows.append((
            "127.0.0.1", ports[broker], NODE_IDS[broker], api, len(steps),
            nearest_rank(latencies, 0.5), nearest_rank(latencies, 0.99), max(latencies),
            sum(s["what"] == "missing" for s in steps),  # the one error code answered
            sum(len(s["request"]) for s in steps), sum(len(s["response"]) for s in steps),
            len({s["client"] for s in steps}),  # one connection per client
            sum(replicas) / len(replicas) if api == "Fetch" else None,
        ))  # fmt: skip
    return rows


def expected_replication(ports: dict[str, int], sent: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Per follower and partition: its last fetch's offset, the watermark answered, and lag in seconds
    by docs/report.md's definition, evaluated over what was sent and dpkt's times."""
    produced: dict[int, list[tuple[int, int, int]]] = defaultdict(list)  # partition -> (first, last, ts)
    watermarks: dict[int, list[tuple[int, int]]] = defaultdict(list)  # partition -> (hwm, ts)
    for step in sent:
        if step["api"] == PRODUCE:
            partition, base = step["what"]
            produced[partition].append((base, base + BATCH - 1, step["ts_request"]))
        elif step["api"] == FETCH:
            for partition, (_offset, hwm) in step["what"].get("orders", {}).items():
                watermarks[partition].append((hwm, step["ts_response"]))

    def lag_seconds(partition: int, offset: int, hwm: int, at: int) -> float | None:
        # The earliest watermark above the offset, unless it is the partition's first: the log held
        # the offset before the capture saw it, since when unknown.
        first_seen = min(ts for _h, ts in watermarks[partition])
        evidence = [ts for first, last, ts in produced[partition] if first <= offset <= last]
        above = [ts for h, ts in watermarks[partition] if h > offset]
        if above and min(above) != first_seen:
            evidence.append(min(above))
        if evidence and min(evidence) <= at:
            return (at - min(evidence)) / 1e6
        return 0.0 if offset >= hwm else None

    fetches: dict[tuple[str, int], list[tuple[dict[str, Any], int, int, float | None]]] = defaultdict(list)
    for step in sent:
        if step["api"] == FETCH and CLIENTS[step["client"]][1] >= 0 and "orders" in step["what"]:
            for partition, (offset, hwm) in step["what"]["orders"].items():
                lag = lag_seconds(partition, offset, hwm, step["ts_request"])
                fetches[(step["client"], partition)].append((step, offset, hwm, lag))
    rows = []
    for (client, partition), seen in fetches.items():
        last, offset, hwm, lag = seen[-1]
        latencies = [latency_ms(s) for s, *_ in seen]
        lags = [x for *_, x in seen if x is not None]
        rows.append((
            ports["a"], NODE_IDS["a"], CLIENTS[client][1], client, "orders", partition, offset, hwm, hwm - offset, lag,
            max(lags) if lags else None, len(seen), nearest_rank(latencies, 0.5),
            nearest_rank(latencies, 0.99), max(latencies), last["ts_request"],
        ))  # fmt: skip
    return sorted(rows, key=lambda r: (r[9] is None, -(r[9] or 0), -r[8], r[2], r[5]))


BROKER_COLUMNS = (
    "broker_ip", "broker_port", "broker_id", "api_name", "requests", "p50_ms", "p99_ms", "max_ms", "errors",
    "bytes_in", "bytes_out", "connections", "replication_share",
)  # fmt: skip
REPLICATION_COLUMNS = (
    "broker_port", "broker_id", "replica_id", "client_id", "topic", "partition", "fetch_offset", "high_watermark",
    "lag_records", "lag_seconds", "max_lag_seconds", "fetches", "p50_ms", "p99_ms", "max_ms", "last_fetch",
)  # fmt: skip


def report(out: Path, engine_name: str, request: pytest.FixtureRequest) -> dict[str, list[Any]]:
    return answer_sections(out, ["brokers", "replication"], engine_name, request)


def _plain(value: Any) -> Any:
    """Timestamps as epoch µs (the oracle's unit), other values as they are."""
    if hasattr(value, "timestamp"):
        return round(value.timestamp() * 1_000_000)
    return value


def rows_of(answered: list[Any], columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
    return [tuple(_plain(r[c]) for c in columns) for r in answered]


def rounded(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Floats to 9 decimals (latencies are whole µs, so this only hides the last bits of a division)."""
    return [tuple(round(v, 9) if isinstance(v, float) else v for v in row) for row in rows]


@pytest.mark.parametrize("engine_name", ["duckdb", "spark"])
def test_brokers_are_the_requests_latencies_errors_bytes_and_replication_share_sent(
    capture: tuple[Path, dict[str, int], list[dict[str, Any]]],
    engine_name: str,
    request: pytest.FixtureRequest,
) -> None:
    out, ports, sent = capture
    got = rows_of(report(out, engine_name, request)["brokers"], BROKER_COLUMNS)
    assert rounded(got) == rounded(expected_brokers(ports, sent))
    # What the capture holds, told by hand: broker a answered 1 Metadata, 2 Produce and 13 Fetch
    # (9 of them followers'), broker b 4 metadata-log fetches and the Metadata answered with an error.
    shape = sorted(
        ((r[1] == ports["a"], r[3], r[4], r[8], r[11], r[12]) for r in got), key=lambda x: (not x[0], x[1])
    )
    assert shape == [
        (True, "Fetch", 13, 0, 4, 9 / 13),
        (True, "Metadata", 1, 0, 1, None),
        (True, "Produce", 2, 0, 1, None),
        (False, "Fetch", 4, 0, 1, 1.0),
        (False, "Metadata", 1, 1, 1, None),
    ]


@pytest.mark.parametrize("engine_name", ["duckdb", "spark"])
def test_replication_is_each_followers_last_fetch_against_the_leaders_log(
    capture: tuple[Path, dict[str, int], list[dict[str, Any]]],
    engine_name: str,
    request: pytest.FixtureRequest,
) -> None:
    out, ports, sent = capture
    answered = report(out, engine_name, request)["replication"]
    assert {(r["capture"], r["broker_ip"]) for r in answered} == {("broker-host.pcap", "127.0.0.1")}
    got = rows_of(answered, REPLICATION_COLUMNS)
    assert rounded(got) == rounded(expected_replication(ports, sent))
    # The cases the steps were written for, by hand: follower 5 below the first watermark (unknown),
    # follower 4 caught up last and earlier behind since watermark 60, follower 2 behind since each
    # Produce, the metadata-log fetcher not a follower.
    at = {step["correlation"]: step for step in sent}
    behind_4 = (at[13]["ts_request"] - at[7]["ts_response"]) / 1e6
    behind_2 = max(
        (at[4]["ts_request"] - at[3]["ts_request"]) / 1e6, (at[8]["ts_request"] - at[6]["ts_request"]) / 1e6
    )
    cases = [(r[2], r[5], r[8], r[9], r[10]) for r in got]
    assert rounded(cases) == rounded(
        [(4, 1, 2, behind_4, behind_4), (2, 0, 0, 0.0, behind_2), (5, 2, 10, None, None)]
    )


def test_fetch_latency_of_every_exchange_is_dpkts(
    capture: tuple[Path, dict[str, int], list[dict[str, Any]]],
) -> None:
    out, _ports, sent = capture
    rows = pq.read_table(out / "requests").to_pylist()
    got = sorted((r["correlation_id"], r["api_version"], r["replica_id"], r["latency_ms"]) for r in rows)
    want = [
        (i, s["version"], (CLIENTS[s["client"]][1] if s["api"] == FETCH else None), latency_ms(s))
        for i, s in enumerate(sent, start=1)
    ]
    assert rounded(got) == rounded(want)


def test_live_metrics_give_each_followers_replication_lag_at_its_last_fetch(
    capture: tuple[Path, dict[str, int], list[dict[str, Any]]],
) -> None:
    """The capture through the live path's LiveStats: the replication gauges per follower and
    partition equal the oracle's last fetch (records, seconds; no gauge when unknown)."""
    out, ports, sent = capture
    stats = LiveStats(collect_pending=True)
    run_capture(out.parent / "broker-host.pcap", StatsSink(ListSink(), stats), SessionOptions())
    metrics = Metrics()
    metrics.update(CaptureCounters(), stats.take_pending(), 0)
    text = generate_latest(metrics.registry).decode().splitlines()
    got = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text
        if line.startswith("kwsniff_replication_lag_")
    }
    want = {}
    for row in expected_replication(ports, sent):
        labels = f'{{follower="{row[2]}",partition="{row[5]}",topic="{row[4]}"}}'
        want[f"kwsniff_replication_lag_records{labels}"] = float(row[8])
        if row[9] is not None:
            want[f"kwsniff_replication_lag_seconds{labels}"] = row[9]
    assert {k: round(v, 9) for k, v in got.items()} == {k: round(v, 9) for k, v in want.items()}
    assert len(want) == 5  # follower 5's lag in seconds is unknown: no gauge


S = 1_000_000  # µs per second


def follower_fetch(offset: int, hwm: int, ts: int, replica: int = 2) -> dict[str, Any]:
    return {
        "api_key": FETCH, "topic": "t", "partition": 0, "fetcher": "follower", "replica_id": replica,
        "fetch_offset": offset, "high_watermark": hwm, "ts_request": ts, "ts_response": ts + S // 2,
    }  # fmt: skip


def produced(first: int, last: int, ts_request: int, ts_response: int) -> dict[str, Any]:
    return {
        "api_key": PRODUCE, "topic": "t", "partition": 0, "first_offset": first, "last_offset": last,
        "ts_request": ts_request, "ts_response": ts_response,
    }  # fmt: skip


def test_a_produce_acknowledged_after_the_followers_fetch_dates_it_when_decoded() -> None:
    # acks=all: the Produce of offsets 10..19 (request at 10 s) is answered at 14 s, after the follower
    # asked for offset 10 at 13 s: 3 s behind, 0 records (the watermark waits for this follower).
    tracker = ReplicationTracker(max_partitions=10)
    tracker.row(follower_fetch(10, 10, 13 * S))
    state = tracker.fetches[(2, "t", 0)]
    assert (state.lag_records, state.lag_seconds) == (0, 0.0)
    tracker.row(produced(10, 19, 10 * S, 14 * S))
    assert (state.lag_records, state.lag_seconds) == (0, 3.0)
    tracker.row(produced(20, 29, 15 * S, 16 * S))  # after the fetch: it dates nothing the follower lacked
    assert state.lag_seconds == 3.0
    assert tracker.take_changed() == {(2, "t", 0)}


def test_replication_series_past_the_cap_are_not_made_and_counted() -> None:
    metrics = Metrics(max_series=1)
    lags: list[tuple[tuple[int, str, int], int | None, float | None]] = [
        ((2, "t", 0), 4, 1.5),
        ((3, "t", 0), 5, None),
    ]
    metrics.update(CaptureCounters(), Pending([], [], [], [], [], lags, [], [], []), 0)
    values = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in generate_latest(metrics.registry).decode().splitlines()
        if line.startswith(("kwsniff_replication", "kwsniff_metrics_series_dropped_total"))
    }
    assert values == {
        'kwsniff_replication_lag_records{follower="2",partition="0",topic="t"}': 4.0,
        'kwsniff_replication_lag_seconds{follower="2",partition="0",topic="t"}': 1.5,
        "kwsniff_metrics_series_dropped_total": 1.0,
    }


def test_tables_written_before_fetcher_existed_report_brokers_without_a_share(
    capture: tuple[Path, dict[str, int], list[dict[str, Any]]], tmp_path: Path
) -> None:
    """An older kwsniff's tables (no `replica_id`/`fetcher`): every broker row as before, the share of
    replication unknown (null), and no follower to report."""
    out, ports, sent = capture
    old = tmp_path / "old"
    shutil.copytree(out, old, ignore=lambda d, names: [n for n in names if n.startswith("summary_")])
    for name in ("requests", "partitions"):
        for path in (old / name).rglob("*.parquet"):
            pq.write_table(pq.read_table(path).drop_columns(["replica_id", "fetcher"]), path)
    with DuckEngine(old, Filters()) as engine:
        assert not engine.summarized
        answered = answer(engine, Filters(), [BY_NAME["brokers"], BY_NAME["replication"]])
    want = [(*row[:-1], None) for row in expected_brokers(ports, sent)]
    assert rounded(rows_of(answered["brokers"], BROKER_COLUMNS)) == rounded(want)
    assert answered["replication"] == []


def test_a_worker_relays_what_the_replication_lag_needs_of_a_followers_fetch() -> None:
    """With --workers, the coordinator's LiveStats gets each Fetch row's follower fields."""
    relay = RowRelay(metrics=True)
    relay.row("partitions", {**follower_fetch(10, 12, 13 * S), "api_name": "Fetch", "conn_id": 1})
    ((table, row),) = relay.take_rows()
    tracker = ReplicationTracker(max_partitions=10)
    tracker.row(row)
    assert (table, row["replica_id"], row["fetcher"], row["fetch_offset"]) == (
        "partitions",
        2,
        "follower",
        10,
    )
    assert (tracker.fetches[(2, "t", 0)].lag_records, tracker.fetches[(2, "t", 0)].lag_seconds) == (2, None)


# Kafka's API names of the keys real clients send here (the protocol guide's list).
API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
    10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
    18: "ApiVersions", 19: "CreateTopics", 22: "InitProducerId", 32: "DescribeConfigs", 60: "DescribeCluster",
    71: "GetTelemetrySubscriptions", 72: "PushTelemetry",
}  # fmt: skip


def frames_by_dpkt(pcap: Path, broker_ports: set[int]) -> list[dict[str, Any]]:
    """Every request of the capture as dpkt's TCP payloads show it, framed by the test: per connection
    and direction the payloads in sequence order (retransmitted bytes once), split at each int32 size
    prefix. A request's time is
    the packet carrying its last byte, its response's the packet carrying the response's first byte
    (docs/tables.md), paired by correlation id."""
    streams: dict[tuple[tuple[str, int], tuple[str, int]], list[tuple[int, bytes]]] = defaultdict(list)
    # Bytes of each direction by their place in its sequence space (from its first segment): a
    # retransmitted segment, which loopback captures hold on a busy machine, is read once, at the
    # time its bytes were first captured, as a receiver takes them.
    first_seq: dict[tuple[tuple[str, int], tuple[str, int]], int] = {}
    taken: dict[tuple[tuple[str, int], tuple[str, int]], int] = defaultdict(int)
    with pcap.open("rb") as f:
        for ts, frame in dpkt.pcap.Reader(f):
            ip = dpkt.ethernet.Ethernet(frame).data
            tcp = ip.data
            if isinstance(tcp, dpkt.tcp.TCP) and tcp.data:
                src, dst = (socket.inet_ntoa(ip.src), tcp.sport), (socket.inet_ntoa(ip.dst), tcp.dport)
                at = (tcp.seq - first_seq.setdefault((src, dst), tcp.seq)) % 2**32
                new = bytes(tcp.data)[max(0, taken[(src, dst)] - at) :]
                assert at <= taken[(src, dst)], "a segment past a hole: the test's capture lost one"
                if new:
                    streams[(src, dst)].append((round(ts * 1_000_000), new))
                    taken[(src, dst)] = max(taken[(src, dst)], at + len(tcp.data))

    def split(packets: list[tuple[int, bytes]]) -> list[tuple[bytes, int, int]]:
        """(frame, time of its first byte, time of its last byte) in order."""
        data, owner = b"", []
        for ts, payload in packets:
            data += payload
            owner += [ts] * len(payload)
        out, at = [], 0
        while at + 4 <= len(data):
            size = 4 + struct.unpack_from(">i", data, at)[0]
            assert at + size <= len(data), "a frame cut by the capture's end"
            out.append((data[at : at + size], owner[at], owner[at + size - 1]))
            at += size
        assert at == len(data)
        return out

    exchanges = []
    for (client, broker), packets in streams.items():
        if broker[1] not in broker_ports:
            continue
        answers = {
            frame[4:8]: (frame, first) for frame, first, _last in split(streams.get((broker, client), []))
        }
        for frame, _first, last in split(packets):
            api_key = struct.unpack_from(">h", frame, 4)[0]
            response = answers.get(frame[8:12])  # the correlation id
            exchanges.append({
                "broker_port": broker[1], "conn": client, "api": API_NAMES[api_key], "bytes_in": len(frame),
                "bytes_out": len(response[0]) if response else 0,
                "latency_ms": (response[1] - last) / 1000 if response else None,
            })  # fmt: skip
    return exchanges


def test_brokers_of_real_clients_against_two_tansu_brokers(tmp_path: Path) -> None:
    """confluent-kafka produces to two tansu brokers, kafka-python consumes in a group on the second,
    one tcpdump capture of both: each broker's requests per API, latencies, bytes and
    connections are what dpkt's reading of the capture gives, framed by the test."""
    pcap = tmp_path / "two-brokers.pcap"
    port_a, port_b = free_ports(2)
    bpf = f"tcp port {port_a} or tcp port {port_b}"
    with start_broker(port_a) as a, start_broker(port_b) as b, tcpdump_capture(pcap, port_a, bpf=bpf):
        assert produce_with_confluent(a.bootstrap, "orders", 12, 200, client_id="producer-a") == 12
        assert produce_with_confluent(b.bootstrap, "audit", 6, 200, client_id="producer-b") == 6
        assert (
            consume_with_kafka_python(b.bootstrap, ["audit"], "audit-group", 6, client_id="consumer-b") == 6
        )
    out = tmp_path / "tables"
    done = CliRunner().invoke(main, ["read", "-q", str(pcap), "--out", str(out), "--overwrite"])
    assert done.exit_code == 0, done.output
    with DuckEngine(out, Filters()) as engine:
        got = answer(engine, Filters(), [BY_NAME["brokers"]])["brokers"]
    groups: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for exchange in frames_by_dpkt(pcap, {port_a, port_b}):
        groups[(exchange["broker_port"], exchange["api"])].append(exchange)
    want = []
    for (port, api), exchanges in sorted(groups.items()):
        latencies = [e["latency_ms"] for e in exchanges if e["latency_ms"] is not None]
        want.append((
            "127.0.0.1", port, api, len(exchanges), nearest_rank(latencies, 0.5), nearest_rank(latencies, 0.99),
            max(latencies), sum(e["bytes_in"] for e in exchanges), sum(e["bytes_out"] for e in exchanges),
            len({e["conn"] for e in exchanges}), 0.0 if api == "Fetch" else None,
        ))  # fmt: skip
    # broker_id: tansu answers node 111 on every broker, checked against librdkafka's own reading of
    # its Metadata in tests/test_broker_identity.py.
    columns = tuple(c for c in BROKER_COLUMNS if c not in ("errors", "broker_id"))
    assert rounded(rows_of(got, columns)) == rounded(want)
    # Both brokers answered Produce, only b Fetch (the consumer's, no follower among them).
    assert {(r["broker_port"], r["api_name"]) for r in got} >= {
        (port_a, "Produce"),
        (port_b, "Produce"),
        (port_b, "Fetch"),
    }
    assert (port_a, "Fetch") not in {(r["broker_port"], r["api_name"]) for r in got}
