"""The `misrouted` report section (docs/report.md): ApiVersions v5 requests (KIP-1242, newer than kio
0.6.5 and the Java harness, so encoded here with struct, independently of kwsniff's encoder) naming
the ClusterId and NodeId the client means to reach, sent over real loopback sockets to a tiny server
that answers Metadata v12 and DescribeCluster v1 with kio, captured by tcpdump. The section must list
exactly the connections whose intent the test made differ from what the server reported, with the
client's id, address and software, on DuckDB and on Spark.

The common real case is a client that learns the cluster id on its bootstrap connection and then
opens a connection to a partition leader that sends no Metadata: there the cluster the broker
reported comes from another connection to the same broker address. A second server, on 127.0.0.2
with the same port and another cluster, makes "the same address" mean the ip and the port."""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_cluster.v1.response import DescribeClusterResponse
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.static.primitive import i16, i32
from realparts import free_ports, tcpdump_capture
from report_engines import answer_sections
from test_fetchers import build, encoded, read_frame

from kwsniff.cli import main

API_VERSIONS, METADATA, DESCRIBE_CLUSTER = 18, 3, 60
REAL_CLUSTER, REAL_NODE, OTHER_CLUSTER, OTHER_NODE = "cluster-real", 3, "cluster-other", 9
HOST = "127.0.0.1"
TWO_HOST, TWO_CLUSTER, TWO_NODE = "127.0.0.2", "cluster-two", 4
IDENTITY = {HOST: (REAL_CLUSTER, REAL_NODE), TWO_HOST: (TWO_CLUSTER, TWO_NODE)}


def uvarint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def compact_string(text: str | None) -> bytes:
    if text is None:
        return uvarint(0)
    data = text.encode()
    return uvarint(len(data) + 1) + data


def api_versions_request(
    correlation: int, client_id: str, version: int, software: str, cluster: str | None, node: int
) -> bytes:
    """An ApiVersions request frame, v3-v5 (flexible: request header v2, whose client id stays a
    classic string), per Kafka's ApiVersionsRequest.json: ClientSoftwareName, ClientSoftwareVersion
    (v3+), ClusterId (nullable) and NodeId (v5+), tagged fields."""
    cid = client_id.encode()
    header = struct.pack(">hhih", API_VERSIONS, version, correlation, len(cid)) + cid + uvarint(0)
    body = compact_string(software) + compact_string("1.0")
    if version >= 5:
        body += compact_string(cluster) + struct.pack(">i", node)
    frame = header + body + uvarint(0)
    return struct.pack(">i", len(frame)) + frame


def api_versions_response(correlation: int) -> bytes:
    """Response header v0 (always, for ApiVersions), then ErrorCode, ApiKeys (empty compact array),
    ThrottleTimeMs and tagged fields: the flexible versions' layout."""
    body = struct.pack(">ih", correlation, 0) + uvarint(1) + struct.pack(">i", 0) + uvarint(0)
    return struct.pack(">i", len(body)) + body


def kio_frame(header: Any, body: Any) -> bytes:
    data = encoded(header) + encoded(body)
    return struct.pack(">i", len(data)) + data


def request_frame(api_key: int, version: int, correlation: int, client_id: str, body: Any) -> bytes:
    header = RequestHeader(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation),
        client_id=client_id,
    )
    return kio_frame(header, body)


def answer_frame(frame: bytes, host: str, port: int) -> bytes:
    """The server's answer: ApiVersions by struct, Metadata v12 and DescribeCluster v1 by kio, each
    naming this server as its node of its cluster (IDENTITY)."""
    api_key, _version, correlation = struct.unpack(">hhi", frame[4:12])
    if api_key == API_VERSIONS:
        return api_versions_response(correlation)
    cluster, node = IDENTITY[host]
    me = {"host": host, "port": port}
    if api_key == METADATA:
        body = build(
            MetadataResponse,
            {"brokers": [{"node_id": node, **me}], "cluster_id": cluster, "controller_id": node},
        )
    else:
        body = build(
            DescribeClusterResponse,
            {"brokers": [{"broker_id": node, **me}], "cluster_id": cluster, "controller_id": node},
        )
    return kio_frame(ResponseHeader(correlation_id=i32(correlation)), body)


def serve(server: socket.socket, host: str, port: int, connections: int) -> None:
    for _ in range(connections):
        conn, _addr = server.accept()
        with conn:
            conn.settimeout(10)
            for _ in range(100):
                try:
                    frame = read_frame(conn)
                except ConnectionError:
                    break
                conn.sendall(answer_frame(frame, host, port))


# (client id, ApiVersions version, intended cluster, intended node, what it asks next, expected mismatch)
CLIENTS = (
    ("right-client", 5, REAL_CLUSTER, REAL_NODE, METADATA, None),
    ("wrong-cluster", 5, OTHER_CLUSTER, REAL_NODE, METADATA, "cluster"),
    ("wrong-node", 5, REAL_CLUSTER, OTHER_NODE, DESCRIBE_CLUSTER, "node"),
    ("wrong-both", 5, OTHER_CLUSTER, OTHER_NODE, METADATA, "cluster and node"),
    ("cluster-only", 5, OTHER_CLUSTER, -1, DESCRIBE_CLUSTER, "cluster"),
    ("node-only", 5, None, OTHER_NODE, METADATA, "node"),
    ("no-intent", 5, None, -1, METADATA, None),
    ("old-client", 3, None, -1, METADATA, None),
)
SILENT = "unreported"  # intends another cluster and node of a broker that never reports either
# Clients that bootstrap at one server (ApiVersions naming nothing, then Metadata: the cluster id
# learned there) and then reach a partition leader on a connection of its own that sends ApiVersions
# only: (client id, bootstrap host, leader host, intended cluster, intended node, expected mismatch).
LEADERS = (
    ("leader-right", HOST, HOST, REAL_CLUSTER, REAL_NODE, None),
    # The leader's address now holds a broker of another cluster (a DNS change): only the Metadata
    # of another connection to 127.0.0.2 (leader-two-right's bootstrap) says which.
    ("leader-moved", HOST, TWO_HOST, REAL_CLUSTER, TWO_NODE, "cluster"),
    ("leader-two-right", TWO_HOST, TWO_HOST, TWO_CLUSTER, TWO_NODE, None),
    ("leader-two-wrong", TWO_HOST, HOST, TWO_CLUSTER, REAL_NODE, "cluster"),
)


def leader_client(client_id: str, bootstrap: str, leader: str, port: int, cluster: str, node: int) -> int:
    """The bootstrap connection, then the leader connection; the leader connection's client port."""
    software = f"test-client-{client_id}"
    with socket.create_connection((bootstrap, port), timeout=10) as client:
        client.sendall(api_versions_request(1, client_id, 5, software, None, -1))
        assert read_frame(client) == api_versions_response(1)
        client.sendall(request_frame(METADATA, 12, 2, client_id, build(MetadataRequest, {"topics": []})))
        read_frame(client)
    with socket.create_connection((leader, port), timeout=10) as client:
        client.sendall(api_versions_request(1, client_id, 5, software, cluster, node))
        assert read_frame(client) == api_versions_response(1)
        return int(client.getsockname()[1])


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[Any, ...]]]:
    """The tables, and the misrouted rows the test expects, in connection order."""
    tmp = tmp_path_factory.mktemp("misrouted")
    port, silent_port = free_ports(2)
    pcap = tmp / "misrouted.pcap"
    expected = []
    bpf = f"tcp port {port} or tcp port {silent_port}"
    at = [host for _, bootstrap, leader, *_ in LEADERS for host in (bootstrap, leader)]
    with (
        socket.create_server((HOST, port)) as server,
        socket.create_server((TWO_HOST, port)) as two,
        socket.create_server((HOST, silent_port)) as silent,
        tcpdump_capture(pcap, port, bpf=bpf),
    ):
        for listening in (server, two, silent):
            listening.settimeout(10)
        threads = [
            threading.Thread(
                target=serve, args=(server, HOST, port, len(CLIENTS) + at.count(HOST)), daemon=True
            ),
            threading.Thread(target=serve, args=(two, TWO_HOST, port, at.count(TWO_HOST)), daemon=True),
            threading.Thread(target=serve, args=(silent, HOST, silent_port, 1), daemon=True),
        ]
        for thread in threads:
            thread.start()
        for n, (client_id, version, cluster, node, then, mismatch) in enumerate(CLIENTS):
            software = f"test-client-{n}"
            with socket.create_connection((HOST, port), timeout=10) as client:
                client_port = client.getsockname()[1]
                client.sendall(api_versions_request(1, client_id, version, software, cluster, node))
                assert read_frame(client) == api_versions_response(1)
                if then == METADATA:
                    body: Any = build(MetadataRequest, {"topics": []})
                    client.sendall(request_frame(METADATA, 12, 2, client_id, body))
                else:
                    body = build(DescribeClusterRequest, {"endpoint_type": 1})
                    client.sendall(request_frame(DESCRIBE_CLUSTER, 1, 2, client_id, body))
                read_frame(client)
            if mismatch is not None:
                reported_node = REAL_NODE
                expected.append(
                    (client_id, HOST, client_port, software, "1.0", HOST, port, mismatch)
                    + (cluster, REAL_CLUSTER, None if node < 0 else node, reported_node)
                )
        with socket.create_connection((HOST, silent_port), timeout=10) as client:
            client.sendall(
                api_versions_request(1, SILENT, 5, "test-client-silent", OTHER_CLUSTER, OTHER_NODE)
            )
            read_frame(client)
        for client_id, bootstrap, leader, cluster, node, mismatch in LEADERS:
            client_port = leader_client(client_id, bootstrap, leader, port, cluster, node)
            if mismatch is not None:
                expected.append(
                    (client_id, HOST, client_port, f"test-client-{client_id}", "1.0", leader, port, mismatch)
                    + (cluster, IDENTITY[leader][0], node, IDENTITY[leader][1])
                )
        for thread in threads:
            thread.join(timeout=10)
            assert not thread.is_alive()
    out = tmp / "tables"
    done = CliRunner().invoke(main, ["read", "-q", str(pcap), "--out", str(out), "--broker-port", str(port)])
    assert done.exit_code == 0, done.output
    return out, expected


def test_api_versions_rows_carry_what_the_client_intended_and_broker_rows_what_it_reported(
    captured: tuple[Path, list[tuple[Any, ...]]],
) -> None:
    out, _expected = captured
    requests = ds.dataset(out / "requests").to_table().to_pylist()
    intents = Counter(
        (r["client_id"], r["api_version"], r["intended_cluster_id"], r["intended_node_id"])
        for r in requests
        if r["api_key"] == API_VERSIONS
    )
    assert intents == Counter(
        [(c, v, cluster, None if node < 0 else node) for c, v, cluster, node, _, _ in CLIENTS]
        + [(SILENT, 5, OTHER_CLUSTER, OTHER_NODE)]
        + [(c, 5, None, None) for c, *_ in LEADERS]
        + [(c, 5, cluster, node) for c, _, _, cluster, node, _ in LEADERS]
    )
    reported = Counter(
        (r["client_id"], r["broker_ip"], r["api_key"], r["cluster_id"])
        for r in requests
        if r["api_key"] != API_VERSIONS
    )
    assert reported == Counter(
        [(c, HOST, then, REAL_CLUSTER) for c, _, _, _, then, _ in CLIENTS]
        + [(c, bootstrap, METADATA, IDENTITY[bootstrap][0]) for c, bootstrap, *_ in LEADERS]
    )
    assert all(r["cluster_id"] is None for r in requests if r["api_key"] == API_VERSIONS)


@pytest.mark.parametrize("engine_name", ["duckdb", "spark"])
def test_misrouted_lists_each_connection_whose_intent_differs_from_what_its_broker_reported(
    captured: tuple[Path, list[tuple[Any, ...]]], engine_name: str, request: pytest.FixtureRequest
) -> None:
    out, expected = captured
    rows = answer_sections(out, ["misrouted"], engine_name, request)
    got = [
        (
            r["client_id"],
            r["client_ip"],
            r["client_port"],
            r["software_name"],
            r["software_version"],
            r["broker_ip"],
            r["broker_port"],
            r["mismatch"],
            r["intended_cluster_id"],
            r["reported_cluster_id"],
            r["intended_node_id"],
            r["reported_node_id"],
        )
        for r in rows["misrouted"]
    ]
    assert got == expected
    assert [c for c, *_ in got] == [
        *("wrong-cluster", "wrong-node", "wrong-both", "cluster-only", "node-only"),
        *("leader-moved", "leader-two-wrong"),
    ]
