"""Real Kafka clients over TLS, decrypted from a key log: every request of each TLS connection equals
the request its plaintext twin carried to the broker, field for field.

A TLS-terminating proxy (tests/tls_proxy.py, Python's ssl with ``keylog_filename``) sits in front of
tansu, which cannot serve TLS itself (its --cert and --key exclude each other); tansu advertises the
proxy, so every client connection is TLS, and the proxy forwards the plaintext unchanged on a
connection of its own. Both sides are captured, so each decrypted connection has a twin to compare.
librdkafka cannot write a key log (no option; its OpenSSL is linked in): the keys come from the
server side, as they would in production.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from realparts import (
    LOOPBACK,
    free_ports,
    ip_certificate,
    start_broker,
    stop_process,
    tcpdump_capture,
    wait_for_port,
)

from kwsniff.pipeline.keylogs import load_keylog
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink
from kwsniff.tls import stream as tls_stream

TESTS = Path(__file__).resolve().parent
RECORDS = 5
TIMEOUT_S = 30.0


def produce_and_consume_confluent(bootstrap: str, cert: Path, topic: str) -> int:
    from confluent_kafka import Consumer, Producer

    tls = {"security.protocol": "ssl", "ssl.ca.location": str(cert)}
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "tls-confluent", **tls})
    for i in range(RECORDS):
        producer.produce(topic, value=f"confluent {i}".encode())
        producer.flush(TIMEOUT_S)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "tls-confluent",
            "group.id": "tls-confluent-group",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            **tls,
        }
    )
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while seen < RECORDS and time.monotonic() < deadline:
            seen += sum(1 for m in consumer.consume(num_messages=100, timeout=0.5) if m.error() is None)
    finally:
        consumer.close()
    return seen


def produce_and_consume_kafka_python(bootstrap: str, cert: Path, topic: str) -> int:
    from kafka import KafkaConsumer, KafkaProducer

    tls: dict[str, Any] = {"security_protocol": "SSL", "ssl_cafile": str(cert)}
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="tls-kafka-python", **tls)
    for i in range(RECORDS):
        producer.send(topic, f"kafka-python {i}".encode()).get(timeout=TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        client_id="tls-kafka-python",
        group_id="tls-kafka-python-group",
        auto_offset_reset="earliest",
        **tls,
    )
    seen = 0
    # Joining the group takes kafka-python several rounds; on a loaded machine (CI runs two test
    # workers) that has taken over 30 s, so the first records get three times the client timeout.
    deadline = time.monotonic() + 3 * TIMEOUT_S
    try:
        while seen < RECORDS and time.monotonic() < deadline:
            seen += sum(len(r) for r in consumer.poll(timeout_ms=500).values())
    finally:
        consumer.close()
    return seen


def produce_and_consume_aiokafka(bootstrap: str, cert: Path, topic: str) -> int:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> int:
        context = ssl.create_default_context(cafile=str(cert))
        tls: dict[str, Any] = {"security_protocol": "SSL", "ssl_context": context}
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id="tls-aiokafka", **tls)
        await producer.start()
        try:
            for i in range(RECORDS):
                await producer.send_and_wait(topic, f"aiokafka {i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            client_id="tls-aiokafka",
            group_id="tls-aiokafka-group",
            auto_offset_reset="earliest",
            **tls,
        )
        await consumer.start()
        seen = 0
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while seen < RECORDS and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                seen += sum(len(r) for r in batches.values())
        finally:
            await consumer.stop()
        return seen

    return asyncio.run(run())


CLIENTS = {
    "confluent": produce_and_consume_confluent,
    "kafka-python": produce_and_consume_kafka_python,
    "aiokafka": produce_and_consume_aiokafka,
}


class TlsTraffic:
    def __init__(self, pcap: Path, keylog: Path, proxy_port: int, broker_port: int) -> None:
        self.pcap, self.keylog, self.proxy_port, self.broker_port = pcap, keylog, proxy_port, broker_port


def capture_tls_traffic(tmp: Path, tls12: bool) -> TlsTraffic:
    cert, key = ip_certificate(tmp)
    keylog, pcap = tmp / "keys.log", tmp / "tls.pcap"
    proxy_port, broker_port = free_ports(2)
    with start_broker(broker_port, advertised_port=proxy_port, log_dir=str(tmp)) as broker:
        proxy = subprocess.Popen(
            [sys.executable, str(TESTS / "tls_proxy.py"), str(proxy_port), str(broker_port)]
            + [str(cert), str(key), str(keylog)]
            + (["--tls12"] if tls12 else []),
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_for_port(proxy_port, proxy, None, 20.0)
            bpf = f"tcp port {proxy_port} or tcp port {broker_port}"
            with tcpdump_capture(pcap, proxy_port, bpf=bpf):
                for name, client in CLIENTS.items():
                    assert client(f"{LOOPBACK}:{proxy_port}", cert, f"tls-{name}") == RECORDS, name
        finally:
            stop_process(proxy)
        assert broker.process.poll() is None
    return TlsTraffic(pcap, keylog, proxy_port, broker_port)


@pytest.fixture(scope="module", params=["tls13", "tls12"])
def traffic(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsTraffic]:
    yield capture_tls_traffic(tmp_path_factory.mktemp(request.param), request.param == "tls12")


REQUEST_FIELDS = ("api_key", "api_version", "correlation_id", "client_id")
RESPONSE_FIELDS = ("record_count", "error_code", "error_count", "throttle_time_ms")


def requests_by_connection(
    sink: ListSink, port: int
) -> list[tuple[tuple[tuple[Any, ...], ...], list[dict[str, Any]]]]:
    """Each connection to ``port`` that carried requests: (its requests' keys in order, its rows), sorted."""
    ports = {c["conn_id"]: c["broker_port"] for c in sink.tables["connections"]}
    by_conn: dict[int, list[dict[str, Any]]] = {}
    for row in sink.tables.get("requests", []):
        if ports[row["conn_id"]] == port:
            by_conn.setdefault(row["conn_id"], []).append(row)
    found = []
    for rows in by_conn.values():
        rows.sort(key=lambda r: r["ts_request"])
        found.append((tuple(tuple(r[f] for f in REQUEST_FIELDS) for r in rows), rows))
    return sorted(found, key=lambda pair: pair[0])


def decode(traffic: TlsTraffic, keylog: Any) -> ListSink:
    sink = ListSink()
    ports = frozenset({traffic.proxy_port, traffic.broker_port})
    run_capture(traffic.pcap, sink, SessionOptions(broker_ports=ports, keylog=keylog))
    return sink


def test_every_decrypted_request_equals_its_plaintext_twin(traffic: TlsTraffic) -> None:
    sink = decode(traffic, load_keylog([traffic.keylog]))
    decrypted = requests_by_connection(sink, traffic.proxy_port)
    plaintext = requests_by_connection(sink, traffic.broker_port)
    # The proxy opens one broker connection per client connection and forwards every byte.
    assert [keys for keys, _ in decrypted] == [keys for keys, _ in plaintext]
    answered_both = 0
    for (_, rows), (_, twin) in zip(decrypted, plaintext, strict=True):
        for tls_row, plain_row in zip(rows, twin, strict=True):
            # A client that closes right after its last request never sees the answer the
            # broker still sends the proxy: compare responses wherever both sides have one.
            if tls_row["status"] == plain_row["status"] == "ok":
                answered_both += 1
                assert [tls_row[f] for f in RESPONSE_FIELDS] == [plain_row[f] for f in RESPONSE_FIELDS]
    requests = [r for _, rows in decrypted for r in rows]
    assert answered_both >= len(requests) - len(decrypted)
    assert {r["client_id"] for r in requests} == {"tls-confluent", "tls-kafka-python", "tls-aiokafka"}
    produced = Counter(
        r["client_id"] for r in requests if r["api_key"] == 0 for _ in range(r["record_count"])
    )
    assert produced == {"tls-confluent": RECORDS, "tls-kafka-python": RECORDS, "tls-aiokafka": RECORDS}
    assert {r["status"] for r in requests} <= {"ok", "unanswered"}
    tls_conns = [c for c in sink.tables["connections"] if c["broker_port"] == traffic.proxy_port]
    assert {c["tls_state"] for c in tls_conns} == {"decrypted"}
    assert all(c["encrypted_bytes_to_broker"] == c["encrypted_bytes_to_client"] == 0 for c in tls_conns)
    assert all(c["decode_errors"] == 0 for c in tls_conns)


def test_the_compiled_record_loop_gives_the_tables_of_the_pure_python_one(
    traffic: TlsTraffic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kwsniff/tls/_records.c (one OpenSSL context per direction, runs of records read in C) against
    the loop on cryptography, on real clients' traffic: every table row for row."""
    compiled = decode(traffic, load_keylog([traffic.keylog]))
    monkeypatch.setattr(tls_stream, "Opener", None)
    monkeypatch.setattr(tls_stream, "Feeder", None)
    pure = decode(traffic, load_keylog([traffic.keylog]))
    assert compiled.tables == pure.tables
    assert sum(r["api_key"] == 0 for r in compiled.tables["requests"]) >= 3


def test_keys_injected_into_the_capture_decrypt_without_a_key_log(
    traffic: TlsTraffic, tmp_path: Path
) -> None:
    editcap = shutil.which("editcap")
    assert editcap is not None, "editcap (Debian wireshark-common) is installed by tools/install-test-deps.sh"
    injected = tmp_path / "with-secrets.pcapng"
    subprocess.run(
        [editcap, "--inject-secrets", f"tls,{traffic.keylog}", str(traffic.pcap), str(injected)],
        check=True,
        timeout=60,
    )
    sink = ListSink()
    ports = frozenset({traffic.proxy_port, traffic.broker_port})
    run_capture(injected, sink, SessionOptions(broker_ports=ports))
    decrypted = requests_by_connection(sink, traffic.proxy_port)
    assert [keys for keys, _ in decrypted] == [
        keys for keys, _ in requests_by_connection(sink, traffic.broker_port)
    ]
    assert {c["tls_state"] for c in sink.tables["connections"] if c["tls"]} == {"decrypted"}


def test_without_the_key_log_tls_connections_are_marked_and_nothing_fails(traffic: TlsTraffic) -> None:
    sink = decode(traffic, None)
    tls_conns = [c for c in sink.tables["connections"] if c["broker_port"] == traffic.proxy_port]
    assert tls_conns and {c["tls_state"] for c in tls_conns} == {"no_key"}
    assert all(c["requests"] == 0 and c.get("decode_errors", 0) == 0 for c in tls_conns)
    assert requests_by_connection(sink, traffic.proxy_port) == []
    # Each TLS connection's plaintext twin still decodes.
    assert len(requests_by_connection(sink, traffic.broker_port)) == len(tls_conns)


def test_spark_decrypts_with_the_key_log_shipped_to_its_executors(
    spark: Any, traffic: TlsTraffic, tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.dataset as ds

    from kwsniff.spark.pipeline import decode as spark_decode
    from kwsniff.spark.pipeline import write
    from kwsniff.tables.schemas import SCHEMAS

    keys = load_keylog([traffic.keylog])
    options = SessionOptions(broker_ports=frozenset({traffic.proxy_port, traffic.broker_port}), keylog=keys)
    # Two flow buckets in small byte ranges: several executor tasks, each with the pickled key log.
    decoded = spark_decode(
        spark, [str(traffic.pcap)], buckets=2, options=options, tables=("requests",), range_bytes=1 << 16
    )
    write(decoded, tmp_path)
    got = ds.dataset(tmp_path / "requests", partitioning="hive").to_table().drop_columns(["date"]).to_pylist()
    sink = ListSink()
    run_capture(traffic.pcap, sink, options)
    expected = pa.Table.from_pylist(sink.tables["requests"], schema=SCHEMAS["requests"]).to_pylist()

    def key(row: dict[str, Any]) -> tuple[str, ...]:
        return tuple(repr(row[k]) for k in sorted(row))

    assert sorted(got, key=key) == sorted(expected, key=key)
    assert sum(1 for r in got if r["client_id"] == "tls-aiokafka" and r["api_key"] == 0) >= 1


def test_strict_counts_undecrypted_bytes_only_where_the_key_log_had_keys(
    traffic: TlsTraffic, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from kwsniff.cli import main

    ports = ["-p", str(traffic.proxy_port), "-p", str(traffic.broker_port)]
    # No key log: the TLS connections are left encrypted on purpose, and --strict does not object.
    plain = CliRunner().invoke(
        main, ["read", str(traffic.pcap), "--out", str(tmp_path / "a"), "--strict", "-q", *ports]
    )
    assert plain.exit_code == 0, plain.output
    # Keys that are wrong: every record fails its tag check, and --strict exits 3 saying why.
    wrong = tmp_path / "wrong.log"
    wrong.write_text(
        "".join(
            f"{label} {random} {'55' * (len(secret) // 2)}\n"
            for label, random, secret in (
                line.split() for line in traffic.keylog.read_text().splitlines() if not line.startswith("#")
            )
        )
    )
    bad = CliRunner().invoke(
        main,
        [
            "read",
            str(traffic.pcap),
            "--out",
            str(tmp_path / "b"),
            "--strict",
            "-q",
            "--keylog",
            str(wrong),
            *ports,
        ],
    )
    assert bad.exit_code == 3, bad.output
    assert "bytes encrypted by TLS on Kafka connections" in bad.output
    # The secrets never reach the output.
    assert all(
        line.split()[2] not in bad.output
        for line in traffic.keylog.read_text().splitlines()
        if line[0] != "#"
    )


def test_spark_uses_the_keys_inside_a_pcapng_in_every_task(
    spark: Any, traffic: TlsTraffic, tmp_path: Path
) -> None:
    import pyarrow.dataset as ds

    from kwsniff.spark.pipeline import decode as spark_decode
    from kwsniff.spark.pipeline import write

    injected = tmp_path / "with-secrets.pcapng"
    subprocess.run(
        ["editcap", "--inject-secrets", f"tls,{traffic.keylog}", str(traffic.pcap), str(injected)],
        check=True,
        timeout=60,
    )
    options = SessionOptions(broker_ports=frozenset({traffic.proxy_port, traffic.broker_port}))
    decoded = spark_decode(
        spark, [str(injected)], buckets=2, options=options, tables=("connections",), range_bytes=1 << 16
    )
    write(decoded, tmp_path / "out")
    conns = ds.dataset(tmp_path / "out" / "connections", partitioning="hive").to_table().to_pylist()
    states = [c["tls_state"] for c in conns if c["broker_port"] == traffic.proxy_port]
    assert states and set(states) == {"decrypted"}


def test_show_prints_decrypted_exchanges_and_no_secret(traffic: TlsTraffic) -> None:
    import json

    from click.testing import CliRunner

    from kwsniff.cli import main

    args = [
        "show",
        str(traffic.pcap),
        "--json",
        "-p",
        str(traffic.proxy_port),
        "--keylog",
        str(traffic.keylog),
    ]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output
    lines = [json.loads(line) for line in done.output.splitlines() if line.startswith("{")]
    clients = {line["client_id"] for line in lines}
    assert clients == {"tls-confluent", "tls-kafka-python", "tls-aiokafka"}
    secrets = [
        line.split()[2] for line in traffic.keylog.read_text().splitlines() if not line.startswith("#")
    ]
    assert not [s for s in secrets if s in done.output]
