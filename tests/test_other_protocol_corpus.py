"""Other protocols' traffic is never taken for Kafka (issue 10, items 1 and 2).

The corpus: exchanges laid out from each protocol's specification (tests/otherwire.py), each as a
connection whose opening is in the capture, then more connections to the same port caught
mid-stream (a port must not be "taught" by a guess), and real servers on loopback captured with
tcpdump (tests/test_other_protocol_servers.py). Every capture must give zero Kafka connections,
zero request rows and pass `--strict`.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner
from kafkawire import (
    API_VERSIONS_V0_RESPONSE,
    LINKTYPE_RAW_IPV4,
    METADATA_V0_REQUEST,
    METADATA_V0_RESPONSE,
    Flow,
    request,
    response,
    write_pcap,
)
from otherwire import BUILDERS, Messages

from kwsniff.cli import main
from kwsniff.pipeline.session import Session, SessionOptions
from kwsniff.rows import ListSink

SERVER_IP = bytes([10, 0, 0, 2])
CAPTURES = Path(__file__).parent / "data" / "captures"


def corpus_flows(port: int, messages: Messages) -> list[Flow]:
    """One connection from its SYN, three caught mid-stream, then a long one from its SYN."""
    server = (SERVER_IP, port)
    flows = []
    first = Flow(client=(bytes([10, 0, 0, 1]), 40000), broker=server).handshake()
    for d, data in messages:
        first.send(d, data)
    first.close()
    flows.append(first)
    for n, start in enumerate((1, 2, len(messages) // 2)):
        mid = Flow(client=(bytes([10, 0, 0, 1]), 41000 + n), broker=server)
        for d, data in (messages[start:] + messages) * 2:
            mid.send(d, data)
        flows.append(mid)
    long = Flow(client=(bytes([10, 0, 0, 1]), 42000), broker=server).handshake()
    for d, data in messages * 3:
        long.send(d, data)
    long.close()
    flows.append(long)
    return flows


def write_corpus_pcap(path: Path, name: str) -> Path:
    port, messages = BUILDERS[name]()
    packets = [p for flow in corpus_flows(port, messages) for p in flow.packets]
    return write_pcap(path, sorted(packets, key=lambda p: p[0]))


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_assembled_protocol_is_never_kafka_and_passes_strict(tmp_path: Path, name: str) -> None:
    pcap = write_corpus_pcap(tmp_path / f"{name}.pcap", name)
    out = tmp_path / "t"
    result = CliRunner().invoke(main, ["read", str(pcap), "-o", str(out), "--strict", "-q"])
    assert (result.exit_code, result.stderr) == (0, "")
    connections = ds.dataset(out / "connections").to_table().to_pylist()
    assert len(connections) == 5
    assert [c["kafka"] for c in connections] == [False] * 5
    assert sum(c["not_kafka_bytes"] for c in connections) == sum(
        c["bytes_to_broker"] + c["bytes_to_client"] for c in connections
    )
    assert ds.dataset(out / "requests").count_rows() == 0
    assert ds.dataset(out / "errors").count_rows() == 0


def test_the_whole_corpus_in_one_run_has_zero_kafka_connections(tmp_path: Path) -> None:
    pcaps = [write_corpus_pcap(tmp_path / f"{name}.pcap", name) for name in sorted(BUILDERS)]
    result = CliRunner().invoke(main, ["read", *map(str, pcaps), "-o", str(tmp_path / "t"), "--strict"])
    assert result.exit_code == 0, result.output
    assert result.output.count("(Kafka 0)") == len(BUILDERS)
    assert "(Kafka 1" not in result.output


def run(packets: list[tuple[int, bytes]], options: SessionOptions | None = None) -> tuple[ListSink, Session]:
    sink = ListSink()
    session = Session("t.pcap", sink, options or SessionOptions())
    for ts, data in sorted(packets, key=lambda p: p[0]):
        session.packet(ts, LINKTYPE_RAW_IPV4, data)
    session.finish()
    return sink, session


def kafka_flow(port: int, client_port: int = 40000, handshake: bool = True, ts: int | None = None) -> Flow:
    f = Flow(client=(bytes([10, 0, 0, 1]), client_port), broker=(SERVER_IP, port))
    if ts is not None:
        f.ts = ts
    if handshake:
        f.handshake()
    f.send(0, request(18, 0, 1))
    f.send(1, response(1, API_VERSIONS_V0_RESPONSE))
    f.send(0, request(3, 0, 2, METADATA_V0_REQUEST))
    f.send(1, response(2, METADATA_V0_RESPONSE))
    return f


def test_a_decoded_request_answered_with_its_correlation_id_is_kafka_and_teaches_the_port() -> None:
    first = kafka_flow(19500)
    first.close()
    later = kafka_flow(19500, client_port=40001, handshake=False, ts=first.ts + 1000)
    sink, session = run(first.packets + later.packets)
    assert [c["kafka"] for c in sink.tables["connections"]] == [True, True]
    assert [(r["correlation_id"], r["status"]) for r in sink.tables["requests"]] == [
        (1, "ok"),
        (2, "ok"),
        (1, "ok"),
        (2, "ok"),
    ]
    assert session.brokers == {(SERVER_IP, 19500)}


ABSURD_SIZE = struct.pack(">i", 100_663_316) + request(18, 0, 7)[4:] + b"\x00" * 318  # "332 of 100663316"
# Openings that look like Kafka in part, and what is missing: each must stay `kafka = false`.
UNPROVEN: dict[str, Messages] = {
    # ApiVersions v3 header and a sane client id, but the body is not an ApiVersions v3 request;
    # the server even echoes the correlation id.
    "body_does_not_decode": [
        (0, request(18, 3, 7, b"\x00\xff\xff\xff\xff\xff", client_id="probe")),
        (1, response(7, API_VERSIONS_V0_RESPONSE)),
    ],
    "binary_client_id": [
        (0, request(18, 0, 7, client_id="\x01\x02\x03\x04")),
        (1, response(7, API_VERSIONS_V0_RESPONSE)),
    ],
    "version_no_release_has": [(0, request(1, 12592, 7)), (1, response(7, b"\x00" * 20))],  # Fetch v12592
    "absurd_size": [(0, ABSURD_SIZE), (1, response(7, API_VERSIONS_V0_RESPONSE))],
    "answer_with_another_correlation_id": [
        (0, request(18, 0, 7)),
        (1, response(8, API_VERSIONS_V0_RESPONSE)),
    ],
    "no_answer": [(0, request(18, 0, 7))],
    "server_speaks_first": [(1, response(7, API_VERSIONS_V0_RESPONSE)), (0, request(18, 0, 7))],
}


@pytest.mark.parametrize("case", sorted(UNPROVEN))
def test_an_opening_without_proof_is_not_kafka(case: str) -> None:
    f = Flow(broker=(SERVER_IP, 19600)).handshake()
    for d, data in UNPROVEN[case]:
        f.send(d, data)
    f.close()
    sink, session = run(f.packets)
    (conn,) = sink.tables["connections"]
    assert (conn["kafka"], conn["not_kafka_bytes"]) == (False, sum(len(data) for _, data in UNPROVEN[case]))
    assert (sink.tables["requests"], session.brokers) == ([], set())


def test_a_non_kafka_connection_to_a_learned_port_makes_it_untrusted_again() -> None:
    proof = kafka_flow(19700)
    proof.close()
    probe = Flow(client=(bytes([10, 0, 0, 1]), 40001), broker=(SERVER_IP, 19700))
    probe.ts = proof.ts + 1000
    probe.handshake()
    probe.send(0, b"GET /health HTTP/1.1\r\n\r\n")
    probe.send(1, b"HTTP/1.1 200 OK\r\n\r\n")
    probe.close()
    # Caught mid-stream after the probe: bytes no Kafka frame starts with.
    later = Flow(client=(bytes([10, 0, 0, 1]), 40002), broker=(SERVER_IP, 19700))
    later.ts = probe.ts + 1000
    later.send(0, struct.pack(">I", 5000) + b"\x00\x01" + b"x" * 40)
    later.send(1, b"y" * 30)
    sink, session = run(proof.packets + probe.packets + later.packets)
    assert [c["kafka"] for c in sink.tables["connections"]] == [True, False, False]
    assert session.brokers == set()
    assert session.stats.not_kafka_on_broker_ports == 0  # 19700 was learned, not named


def test_no_auto_detect_decodes_only_broker_ports(tmp_path: Path) -> None:
    capture = str(CAPTURES / "kafka_python.pcap")
    off = CliRunner().invoke(main, ["read", capture, "-o", str(tmp_path / "off"), "--no-auto-detect"])
    assert off.exit_code == 0, off.output
    assert "connections 7 (Kafka 0)" in off.output
    assert ds.dataset(tmp_path / "off" / "requests").count_rows() == 0
    named = CliRunner().invoke(
        main, ["read", capture, "-o", str(tmp_path / "on"), "--no-auto-detect", "--broker-port", "19103"]
    )
    assert named.exit_code == 0, named.output
    assert "connections 7 (Kafka 7)" in named.output
    assert ds.dataset(tmp_path / "on" / "requests").count_rows() == 46


def test_no_auto_detect_ignores_mid_stream_kafka_on_other_ports() -> None:
    f = kafka_flow(19800, handshake=False)
    sink, session = run(f.packets, SessionOptions(auto_detect=False))
    assert [c["kafka"] for c in sink.tables["connections"]] == [False]
    assert (sink.tables["requests"], session.brokers) == ([], set())


@pytest.mark.parametrize(("undecodable", "later_is_kafka"), [(0, True), (5, False)])
def test_a_proof_that_the_rest_of_the_connection_contradicts_is_withdrawn(
    undecodable: int, later_is_kafka: bool
) -> None:
    # One good exchange proves the server; then most requests do not decode (Metadata v0 with
    # 2^31-1 topics). The endpoint stops being trusted, so a later connection caught mid-stream
    # there needs its own proof (its requests are never answered in the capture: none).
    first = kafka_flow(19900)
    for corr in range(3, 3 + undecodable):
        first.send(0, request(3, 0, corr, b"\x7f\xff\xff\xff"))
        first.send(1, response(corr, METADATA_V0_RESPONSE))
    first.close()
    later = Flow(client=(bytes([10, 0, 0, 1]), 40001), broker=(SERVER_IP, 19900))
    later.ts = first.ts + 1000
    later.send(0, request(18, 0, 50) + request(3, 0, 51, METADATA_V0_REQUEST))
    sink, session = run(first.packets + later.packets)
    statuses = [r["status"] for r in sink.tables["requests"] if r["conn_id"] == 1]
    assert statuses == ["ok", "ok"] + ["decode_error"] * undecodable
    assert [c["kafka"] for c in sink.tables["connections"]] == [True, later_is_kafka]
    assert session.brokers == ({(SERVER_IP, 19900)} if later_is_kafka else set())


def test_a_client_and_broker_newer_than_the_schema_set_are_proven_by_their_next_exchange() -> None:
    # ApiVersions v9 (newer than any spec here) answered in v9 by an equally new broker: that answer
    # does not decode as the v0 of KIP-511, so it proves nothing; the Metadata exchange after it does.
    f = Flow(broker=(SERVER_IP, 19950)).handshake()
    f.send(0, request(18, 9, 1, b"\x00" + b"\x08librdkafka\x069.9.9\x00"))
    f.send(1, response(1, b"\x00\x00\x02\x00\x12\x00\x00\x00\x09\x00\x00\x00\x00\x00\x00"))
    f.send(0, request(3, 0, 2, METADATA_V0_REQUEST))
    f.send(1, response(2, METADATA_V0_RESPONSE))
    f.close()
    sink, session = run(f.packets)
    assert [c["kafka"] for c in sink.tables["connections"]] == [True]
    assert [(r["api_key"], r["api_version"], r["status"]) for r in sink.tables["requests"]][1] == (3, 0, "ok")
    assert session.brokers == {(SERVER_IP, 19950)}
