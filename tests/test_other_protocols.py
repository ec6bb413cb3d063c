"""Other protocols on a Kafka port (HTTP probes, SSH, garbage): recognised from the first client bytes,
counted as not Kafka, no decode errors."""

from __future__ import annotations

import random

from kafkawire import (
    API_VERSIONS_V0_RESPONSE,
    LINKTYPE_RAW_IPV4,
    Flow,
    request,
    response,
)

from kwsniff.pipeline.session import Session, SessionOptions, SessionStats, accounting_difference
from kwsniff.rows import ListSink


def run(f: Flow) -> tuple[dict, SessionStats, ListSink]:
    sink = ListSink()
    session = Session("t.pcap", sink, SessionOptions())
    for ts, data in f.packets:
        session.packet(ts, LINKTYPE_RAW_IPV4, data)
    stats = session.finish()
    (conn,) = sink.tables["connections"]
    assert accounting_difference(conn, "to_broker") == accounting_difference(conn, "to_client") == 0
    return conn, stats, sink


def facts(conn: dict) -> tuple:
    return (
        conn["kafka"],
        conn["protocol_guess"],
        conn["not_kafka_bytes_to_broker"],
        conn["not_kafka_bytes_to_client"],
        conn["frames_to_broker"],
        conn.get("decode_errors", 0),
        conn["skipped_bytes"],
    )


def test_an_http_health_check_on_the_broker_port_is_not_kafka() -> None:
    probe = b"GET /health HTTP/1.1\r\nHost: broker:9092\r\n\r\n"
    f = Flow().handshake()
    f.send(0, probe)
    f.send(1, b"")  # the broker reads a size of 1.2 GB and closes
    f.close()
    conn, stats, sink = run(f)
    assert facts(conn) == (False, "http", len(probe), 0, 0, 0, 0)
    assert (stats.not_kafka_on_broker_ports, stats.kafka_connections) == (1, 0)
    assert "requests" not in sink.tables


def test_a_large_http_upload_is_judged_on_its_first_bytes_without_a_flood_of_errors() -> None:
    body = random.Random(5).randbytes(300_000)
    upload = b"POST /upload HTTP/1.1\r\nContent-Length: 300000\r\n\r\n" + body
    f = Flow().handshake()
    f.send(0, upload)
    answer = b"HTTP/1.1 413 Payload Too Large\r\n\r\n"
    f.send(1, answer)
    f.close()
    conn, _, _ = run(f)
    assert facts(conn) == (False, "http", len(upload), len(answer), 0, 0, 0)


def test_a_server_that_speaks_first_is_not_kafka() -> None:
    banner = b"SSH-2.0-OpenSSH_9.6\r\n"
    f = Flow().handshake()
    f.send(1, banner)
    f.send(0, b"SSH-2.0-paramiko\r\n")
    f.close()
    conn, _, _ = run(f)
    assert facts(conn) == (False, "ssh", 18, len(banner), 0, 0, 0)


def test_garbage_on_the_broker_port_is_not_kafka_after_the_first_bytes() -> None:
    garbage = bytes([0x00, 0x00, 0x00, 0x40]) + random.Random(7).randbytes(5000)  # a size, then noise
    f = Flow().handshake()
    f.send(0, garbage)
    f.close()
    conn, _, _ = run(f)
    assert facts(conn) == (False, "unknown", len(garbage), 0, 0, 0, 0)


def test_a_kafka_client_on_the_broker_port_is_still_kafka() -> None:
    f = Flow().handshake()
    f.send(0, request(18, 0, 1))
    f.send(1, response(1, API_VERSIONS_V0_RESPONSE))
    f.close()
    conn, stats, _ = run(f)
    assert facts(conn) == (True, None, 0, 0, 1, 0, 0)
    assert stats.not_kafka_on_broker_ports == 0


def test_a_connection_that_closes_after_a_few_bytes_is_not_kafka() -> None:
    f = Flow().handshake()
    f.send(0, b"\r\n")
    f.close()
    conn, _, _ = run(f)
    assert facts(conn) == (False, "unknown", 2, 0, 0, 0, 0)
